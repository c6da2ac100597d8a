// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

func TestProbe(t *testing.T) {
	quietEnv(t)
	mock := testutil.MockPlugin(t)
	empty := testutil.PrivateDir(t)

	cases := []struct {
		name     string
		args     []string
		code     int
		stdout   []string
		stderr   []string
		jsonBack string // expected "backend" when --json
	}{
		{"human, mock chosen", []string{"--plugin-path", mock}, 0,
			[]string{"folders searched:", mock, "selected", "chosen: mock", "devices:", "memory", "compute capability"}, nil, ""},
		{"json, mock chosen", []string{"--json", "--plugin-path", mock}, 0, nil, nil, "mock"},
		{"explicit cuda without a plugin", []string{"--backend", "cuda", "--plugin-path", empty}, 1,
			[]string{"chosen: none"}, []string{`backend "cuda" requested`, empty}, ""},
		{"json, nothing usable", []string{"--json", "--backend", "cuda", "--plugin-path", mock}, 1, nil,
			[]string{"not requested"}, ""},
		{"unknown backend is a usage error", []string{"--backend", "vulkan"}, 2, nil, []string{`unknown backend "vulkan"`}, ""},
		{"bad flag", []string{"--nope"}, 2, nil, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := runProbe(tc.args, &out, &errb)
			assert.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			for _, s := range tc.stdout {
				assert.Contains(t, out.String(), s)
			}
			for _, s := range tc.stderr {
				assert.Contains(t, errb.String(), s)
			}
			if len(tc.args) > 0 && tc.args[0] == "--json" {
				var m map[string]any
				require.NoError(t, json.Unmarshal(out.Bytes(), &m), out.String())
				for _, k := range []string{"requested", "searched", "candidates", "selected", "backend", "error"} {
					assert.Contains(t, m, k)
				}
				assert.Equal(t, tc.jsonBack, m["backend"])
				if tc.code == 0 {
					assert.Equal(t, filepath.Join(mock, "libgpurt_mock"+testutil.PluginExt()), m["selected"])
					c := m["candidates"].([]any)[0].(map[string]any)
					for _, k := range []string{"path", "backend", "version", "abi", "priority", "score", "state", "reason", "detail", "devices"} {
						assert.Contains(t, c, k)
					}
					d := c["devices"].([]any)[0].(map[string]any)
					for _, k := range []string{"index", "name", "vendor", "arch", "pci_bus_id", "driver_version", "memory_total",
						"memory_free", "compute_major", "compute_minor", "multiprocessor_count", "flags"} {
						assert.Contains(t, d, k)
					}
				} else {
					assert.NotEmpty(t, m["error"])
				}
			}
		})
	}
}
