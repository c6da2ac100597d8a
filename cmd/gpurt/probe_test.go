// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/cli/clitest"
	"github.com/metrale/gpurt/internal/testutil"
)

func TestProbe(t *testing.T) {
	quietEnv(t)
	mock := testutil.MockPlugin(t)
	empty := testutil.PrivateDir(t)

	// jsonOut checks --json's report: its keys, the backend chosen (and,
	// when one is, the mock's file, a candidate's and a device's keys), or
	// the error.
	jsonOut := func(backend string) func(t *testing.T, stdout, stderr string) {
		return func(t *testing.T, stdout, stderr string) {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(stdout), &m), stdout)
			for _, k := range []string{"requested", "searched", "candidates", "selected", "backend", "error"} {
				assert.Contains(t, m, k)
			}
			assert.Equal(t, backend, m["backend"])
			if backend == "" {
				assert.NotEmpty(t, m["error"])
				return
			}
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
		}
	}
	clitest.Check(t, runProbe, []clitest.Case{
		{Name: "human, mock chosen", Args: []string{"--plugin-path", mock}, Status: 0,
			Stdout: []string{"folders searched:", mock, "selected", "chosen: mock", "devices:", "memory", "compute capability"}},
		{Name: "json, mock chosen", Args: []string{"--json", "--plugin-path", mock}, Status: 0, Then: jsonOut("mock")},
		{Name: "explicit cuda without a plugin", Args: []string{"--backend", "cuda", "--plugin-path", empty}, Status: 1,
			Stdout: []string{"chosen: none"}, Stderr: []string{`backend "cuda" requested`, empty}},
		{Name: "json, nothing usable", Args: []string{"--json", "--backend", "cuda", "--plugin-path", mock}, Status: 1,
			Stderr: []string{"not requested"}, Then: jsonOut("")},
		{Name: "unknown backend is a usage error", Args: []string{"--backend", "vulkan"}, Status: 2, Stderr: []string{`unknown backend "vulkan"`}},
		{Name: "bad flag", Args: []string{"--nope"}, Status: 2},
	})
}
