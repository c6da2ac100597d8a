// SPDX-License-Identifier: Apache-2.0

//go:build (linux || darwin) && (amd64 || arm64)

package loader

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withDigests sets the digests a `make dist` build would carry.
func withDigests(t *testing.T, s string) {
	old := embeddedDigests
	embeddedDigests = s
	t.Cleanup(func() { embeddedDigests = old })
}

func sum(t *testing.T, path string) string {
	s, err := fileSHA256(path)
	require.NoError(t, err)
	return s
}

// besideOpts puts the executable in a private folder holding the plugin.
func besideOpts(t *testing.T, exeDir string) Options {
	opts, _ := testOpts(t)
	opts.ExePath = filepath.Join(exeDir, "gpurt")
	require.NoError(t, os.WriteFile(opts.ExePath, []byte("#!/bin/sh\n"), 0o755))
	opts.ProbeInProcess = true
	return opts
}

func TestIntegrity(t *testing.T) {
	t.Setenv("GPURT_ALLOW_UNVERIFIED", "")
	exeDir := privDir(t)
	pl := buildPlugin(t, exeDir, "mock")
	good := sum(t, pl)
	other := buildPlugin(t, privDir(t), "mock", "-DSCORE=7")

	t.Run("development build verifies nothing", func(t *testing.T) {
		withDigests(t, "")
		rep, _, err := Choose(besideOpts(t, exeDir))
		require.NoError(t, err)
		assert.Equal(t, pl, rep.Selected)
	})
	t.Run("beside the binary, matching", func(t *testing.T) {
		withDigests(t, "mock="+good)
		rep, _, err := Choose(besideOpts(t, exeDir))
		require.NoError(t, err)
		assert.Equal(t, pl, rep.Selected)
		assert.Contains(t, find(t, rep, pl).Detail, "sha256 verified")
	})
	t.Run("beside the binary, tampered", func(t *testing.T) {
		withDigests(t, "mock="+sum(t, other))
		rep, _, err := Choose(besideOpts(t, exeDir))
		require.Error(t, err)
		c := find(t, rep, pl)
		assert.Equal(t, StateFailed, c.State)
		assert.Contains(t, c.Reason, "checksum mismatch")
		assert.Contains(t, c.Reason, good)
	})
	t.Run("beside the binary, backend not recorded", func(t *testing.T) {
		withDigests(t, "cuda="+good)
		rep, _, err := Choose(besideOpts(t, exeDir))
		require.Error(t, err)
		assert.Contains(t, find(t, rep, pl).Reason, "recorded no checksum for backend \"mock\"")
	})
	t.Run("from GPURT_PLUGIN_PATH, unverified, refused then allowed", func(t *testing.T) {
		withDigests(t, "mock="+good)
		opts := besideOpts(t, privDir(t)) // nothing beside the binary
		t.Setenv("GPURT_PLUGIN_PATH", filepath.Dir(other))
		rep, _, err := Choose(opts)
		require.Error(t, err)
		c := find(t, rep, other)
		assert.Equal(t, StateFailed, c.State)
		assert.Contains(t, c.Reason, "GPURT_ALLOW_UNVERIFIED=1")

		t.Setenv("GPURT_ALLOW_UNVERIFIED", "1")
		rep, _, err = Choose(opts)
		require.NoError(t, err)
		assert.Equal(t, other, rep.Selected)
		assert.Contains(t, find(t, rep, other).Detail, "not verified")

		t.Setenv("GPURT_ALLOW_UNVERIFIED", "")
		opts.AllowUnverified = true
		rep, _, err = Choose(opts)
		require.NoError(t, err)
		assert.Equal(t, other, rep.Selected)
	})
	t.Run("from GPURT_PLUGIN_PATH, matching a recorded digest", func(t *testing.T) {
		withDigests(t, "mock="+good)
		opts := besideOpts(t, privDir(t))
		t.Setenv("GPURT_PLUGIN_PATH", exeDir)
		rep, _, err := Choose(opts)
		require.NoError(t, err)
		assert.Equal(t, pl, rep.Selected)
	})
}
