// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/cli"
	"github.com/metrale/gpurt/internal/cli/clitest"
	"github.com/metrale/gpurt/internal/testutil"
)

// TestTopLevel: `gpurt -h` and `gpurt help` print the commands to stdout
// and exit 0; no command or an unknown one is a usage error.
func TestTopLevel(t *testing.T) {
	for _, c := range []clitest.Case{
		{Name: "-h", Args: []string{"-h"}, Status: cli.ExitOK, Stdout: []string{"usage: gpurt <command>", "conform", "probe", "bench"}},
		{Name: "--help", Args: []string{"--help"}, Status: cli.ExitOK, Stdout: []string{"usage: gpurt <command>"}},
		{Name: "help", Args: []string{"help"}, Status: cli.ExitOK, Stdout: []string{"usage: gpurt <command>"}},
		{Name: "none", Args: nil, Status: cli.ExitUsage, NoStdout: true, Stderr: []string{"no command given", "usage:"}},
		{Name: "unknown", Args: []string{"frobnicate"}, Status: cli.ExitUsage, NoStdout: true, Stderr: []string{`unknown command "frobnicate"`}},
	} {
		t.Run(c.Name, func(t *testing.T) {
			status, stdout, stderr := clitest.Run(run, c.Args...)
			assert.Equal(t, c.Status, status, stderr.String())
			for _, s := range c.Stdout {
				assert.Contains(t, stdout.String(), s)
			}
			for _, s := range c.Stderr {
				assert.Contains(t, stderr.String(), s)
			}
			if c.NoStdout {
				assert.Empty(t, stdout.String())
			}
		})
	}
}

// TestConventionProbe, ...Conform, ...Bench: the CLI convention of
// internal/cli, and each command's own usage and setup errors.
func TestConventionProbe(t *testing.T) {
	quietEnv(t)
	mock := testutil.MockPlugin(t)
	clitest.CheckCommand(t, runProbe,
		clitest.Usage("stray argument", `unexpected argument "now"`, "now"),
		clitest.Case{Name: "unknown backend", Args: []string{"--backend", "vulkan", "--plugin-path", mock}, Status: cli.ExitUsage,
			NoStdout: true, Stderr: []string{"gpurt probe: --backend: ", `unknown backend "vulkan"`}},
	)
	// probe --json with a bad --backend still prints the JSON report, the
	// error in it, and exits 2.
	t.Run("json with unknown backend", func(t *testing.T) {
		status, stdout, stderr := clitest.Run(runProbe, "--json", "--backend", "vulkan", "--plugin-path", mock)
		require.Equal(t, cli.ExitUsage, status, stderr.String())
		var m map[string]any
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &m), stdout.String())
		assert.Contains(t, m["error"], `unknown backend "vulkan"`)
		for _, k := range []string{"requested", "searched", "candidates", "selected", "backend"} {
			assert.Contains(t, m, k)
		}
		assert.Contains(t, stderr.String(), "--backend")
	})
}

func TestConventionConform(t *testing.T) {
	quietEnv(t)
	mock := testutil.MockPlugin(t)
	text := filepath.Join(t.TempDir(), "notes.txt")
	require.NoError(t, os.WriteFile(text, []byte("hello\n"), 0o644))
	fake := filepath.Join(t.TempDir(), "libgpurt_mock"+testutil.PluginExt())
	require.NoError(t, os.WriteFile(fake, []byte("not a plugin either\n"), 0o755))
	none := "^no check has this name$"
	clitest.CheckCommand(t, runConform,
		clitest.Usage("stray argument", `unexpected argument "now"`, "now"),
		clitest.Usage("bad --run", "--run: error parsing regexp", "--run", "("),
		clitest.Case{Name: "folder works", Args: []string{"--plugin-path", mock, "--run", none}, Status: cli.ExitOK,
			Stdout: []string{"backend mock (" + filepath.Join(mock, "libgpurt_mock"+testutil.PluginExt())}, Stderr: nil},
		clitest.Case{Name: "file works", Args: []string{"--plugin-path", filepath.Join(mock, "libgpurt_mock"+testutil.PluginExt()), "--run", none},
			Status: cli.ExitOK, Stdout: []string{"backend mock ("}},
		clitest.Case{Name: "missing folder", Args: []string{"--plugin-path", "/nonexistent", "--run", none}, Status: cli.ExitError,
			NoStdout: true, Stderr: []string{"gpurt conform: -plugin-path /nonexistent: no such file or folder"}},
		clitest.Case{Name: "not a plugin", Args: []string{"--plugin-path", text, "--run", none}, Status: cli.ExitError,
			NoStdout: true, Stderr: []string{text, "cannot be used", "not an ELF shared library"}},
		clitest.Case{Name: "plugin name, not a plugin", Args: []string{"--plugin-path", fake, "--run", none}, Status: cli.ExitError,
			NoStdout: true, Stderr: []string{fake, "cannot be used"}},
	)
}

func TestConventionBench(t *testing.T) {
	quietEnv(t)
	clitest.CheckCommand(t, runBench,
		clitest.Usage("stray argument", `unexpected argument "now"`, "now"),
		clitest.Usage("bad sizes", `--sizes: byte count "lots"`, "--sizes", "lots"),
		clitest.MissingPluginPath("--quick"),
		clitest.Usage("json and benchfmt on stdout", "--json and --benchfmt -", "--json", "--benchfmt", "-"),
	)
}

// TestProbe: gpurt probe's text and --json reports, with the mock chosen,
// with nothing usable, and its usage errors.
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
