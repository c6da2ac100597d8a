// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/cli/clitest"
	"github.com/metrale/gpurt/internal/testutil"
)

var quietEnv = testutil.QuietEnv

// TestExplicitPluginMustLoad: `gpurt conform --plugin-path FILE` never
// tests another plugin when FILE cannot be used, even with a good mock in
// GPURT_PLUGIN_PATH; it is a setup error (1) naming the cause, not a
// failed check.
func TestExplicitPluginMustLoad(t *testing.T) {
	quietEnv(t)
	t.Setenv("GPURT_PLUGIN_PATH", testutil.MockPlugin(t))
	ext := testutil.PluginExt()
	refused := filepath.Join(t.TempDir(), "libgpurt_mock"+ext)
	require.NoError(t, os.WriteFile(refused, testutil.MockPluginBytes(t), 0o644))
	require.NoError(t, os.Chmod(refused, 0o666))
	cases := []struct {
		name   string
		args   []string
		reason string
	}{
		{"conform --plugin-path missing file", []string{"--plugin-path", "/missing/libgpurt_mock" + ext},
			"gpurt conform: -plugin-path /missing/libgpurt_mock" + ext + ": no such file or folder"},
		{"conform --plugin-path refused", []string{"--plugin-path", refused}, "is writable by group or others"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errb := clitest.Run(runConform, append(tc.args, "--quick", "--run", "^no check has this name$")...)
			assert.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			assert.Contains(t, errb.String(), tc.reason)
			assert.NotContains(t, errb.String(), "passed", "a setup error is not a failed check")
			assert.NotContains(t, out.String(), "backend mock (", "no other plugin was tested")
		})
	}
	t.Run("probe --plugin-path missing file", func(t *testing.T) {
		code, out, errb := clitest.Run(runProbe, "--plugin-path", "/missing/libgpurt_mock"+ext)
		assert.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
		assert.Contains(t, out.String(), "chosen: none")
		assert.Contains(t, errb.String(), "/missing/libgpurt_mock"+ext+": no such file")
	})
}

// TestUnknownBackendFlag: an unknown --backend is a usage error (2).
func TestUnknownBackendFlag(t *testing.T) {
	quietEnv(t)
	mock := testutil.MockPlugin(t)
	for _, run := range []struct {
		name string
		fn   func(args []string, stdout, stderr io.Writer) int
	}{
		{"probe", runProbe},
		{"conform", runConform},
		{"bench", runBench},
	} {
		t.Run(run.name, func(t *testing.T) {
			code, _, errb := clitest.Run(run.fn, "--backend", "vulkan", "--plugin-path", mock)
			assert.Equal(t, 2, code, errb.String())
			assert.Contains(t, errb.String(), `unknown backend "vulkan"`)
		})
	}
	t.Run("GPURT_BACKEND is not a flag: 1", func(t *testing.T) {
		t.Setenv("GPURT_BACKEND", "vulkan")
		code, _, errb := clitest.Run(runProbe, "--plugin-path", mock)
		assert.Equal(t, 1, code, errb.String())
	})
}

// TestProbeReportsWhatOpenDoes: the mock's probe accepts a malformed
// GPURT_MOCK_DEVICES but its runtime_create refuses it; probe says so and
// fails, as Open would.
func TestProbeReportsWhatOpenDoes(t *testing.T) {
	quietEnv(t)
	mock := testutil.MockPlugin(t)
	for _, v := range []struct{ name, value string }{{"GPURT_MOCK_DEVICES", "many"}, {"GPURT_MOCK_FAULTS", "explode=1"}} {
		t.Run(v.name, func(t *testing.T) {
			t.Setenv(v.name, v.value)
			code, out, errb := clitest.Run(runProbe, "--plugin-path", mock)
			assert.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			assert.Contains(t, out.String(), "runtime: cannot be created")
			assert.Contains(t, errb.String(), "was chosen, but its runtime cannot be created")
			assert.Contains(t, errb.String(), v.name)

			code, out, _ = clitest.Run(runProbe, "--json", "--plugin-path", mock)
			assert.Equal(t, 1, code)
			var m map[string]any
			require.NoError(t, json.Unmarshal(out.Bytes(), &m), out.String())
			assert.Contains(t, m["error"], v.name)
		})
	}
	t.Run("a good setting", func(t *testing.T) {
		t.Setenv("GPURT_MOCK_DEVICES", "2")
		out, _ := clitest.RunOK(t, runProbe, "--plugin-path", mock)
		assert.Contains(t, out.String(), "runtime: created (2 devices) and closed")
	})
}

// TestReportEscapes: a folder whose name holds a newline and a byte that
// is not UTF-8 forges no line in the text report and survives the JSON.
func TestReportEscapes(t *testing.T) {
	quietEnv(t)
	// No ':' (it separates --plugin-path entries) and no '/'.
	name := "evil\n  selected  cuda   forged\xff"
	dir := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.Mkdir(dir, 0o755))
	plugin := filepath.Join(dir, "libgpurt_mock"+testutil.PluginExt())
	require.NoError(t, os.WriteFile(plugin, testutil.MockPluginBytes(t), 0o755))

	t.Run("text", func(t *testing.T) {
		out, _ := clitest.RunOK(t, runProbe, "--plugin-path", dir)
		for _, l := range strings.Split(out.String(), "\n") {
			assert.False(t, strings.HasPrefix(l, "  selected  cuda"), "forged line %q in\n%s", l, out.String())
		}
		assert.Contains(t, out.String(), `evil\n  selected  cuda   forged\xff/libgpurt_mock`)
		assert.Contains(t, out.String(), "chosen: mock (\"")
	})
	t.Run("json", func(t *testing.T) {
		out, _ := clitest.RunOK(t, runProbe, "--json", "--plugin-path", dir)
		require.True(t, json.Valid(out.Bytes()), out.String())
		var m struct {
			Searched []string `json:"searched"`
			Selected string   `json:"selected"`
		}
		require.NoError(t, json.Unmarshal(out.Bytes(), &m))
		want := strings.TrimSuffix(dir, "\xff") + `\xff`
		assert.Equal(t, want, m.Searched[0], "the byte that is not UTF-8 is written as \\xff, not replaced")
		assert.Equal(t, want+"/libgpurt_mock"+testutil.PluginExt(), m.Selected)
	})
}
