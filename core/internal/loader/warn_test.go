// SPDX-License-Identifier: Apache-2.0

//go:build (linux || darwin) && (amd64 || arm64)

package loader

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const gpuWarning = "auto chose the mock backend (the CPU reference): a GPU plugin is present but cannot run"

// warnings are the lines of logs at warn level or above.
func warnings(logs *bytes.Buffer) []string {
	var out []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "[WARN]") || strings.Contains(l, "[ERROR]") {
			out = append(out, l)
		}
	}
	return out
}

// TestWarnGPUPassedOver: when auto settles on the mock while a GPU plugin
// file is present but cannot run, one line at the default level (warn)
// says so, naming the plugin and why; once per process.
func TestWarnGPUPassedOver(t *testing.T) {
	cases := []struct {
		name string
		make func(t *testing.T, dir string) string // the GPU plugin, "" for none
		req  string
		why  string // "" = no warning
	}{
		{"cuda plugin whose driver is missing", func(t *testing.T, dir string) string {
			return buildPlugin(t, dir, "cuda", "-DPRIORITY=300", "-DUNAVAILABLE")
		}, "", "probe: unavailable (driver missing): libcuda.so.1 not found (test)"},
		{"cuda plugin refused (group-writable)", func(t *testing.T, dir string) string {
			p := buildPlugin(t, dir, "cuda", "-DPRIORITY=300")
			require.NoError(t, os.Chmod(p, 0o664))
			return p
		}, "", "refused: file"},
		{"cuda plugin that is not a plugin", func(t *testing.T, dir string) string {
			return writeFile(t, dir, "libgpurt_cuda"+pluginExt(), []byte("garbage\n"))
		}, "", "a text file"},
		{"no GPU plugin at all", func(t *testing.T, dir string) string { return "" }, "", ""},
		{"mock asked for by name", func(t *testing.T, dir string) string {
			return buildPlugin(t, dir, "cuda", "-DPRIORITY=300", "-DUNAVAILABLE")
		}, "mock", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := privDir(t)
			gpu := tc.make(t, dir)
			mock := buildPlugin(t, dir, "mock")
			opts, _ := testOpts(t, dir)
			opts.Backend = tc.req
			var logs bytes.Buffer
			opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "gpurt", Level: hclog.Warn, Output: &logs})
			rep, p, err := Choose(opts)
			require.NoError(t, err)
			require.NotNil(t, p)
			assert.Equal(t, mock, rep.Selected)
			w := warnings(&logs)
			if tc.why == "" {
				assert.Empty(t, w)
				return
			}
			require.Len(t, w, 1, "one line at warn level:\n%s", logs.String())
			assert.Contains(t, w[0], gpuWarning)
			assert.Contains(t, w[0], gpu, "names the GPU plugin")
			assert.Contains(t, w[0], tc.why, "says why it was passed over")

			// Once: a second Choose in this process says nothing new.
			logs.Reset()
			_, _, err = Choose(opts)
			require.NoError(t, err)
			assert.Empty(t, warnings(&logs))
		})
	}
}
