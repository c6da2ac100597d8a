// SPDX-License-Identifier: Apache-2.0

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/abi"
	"github.com/metrale/gpurt/internal/cli/clitest"
	"github.com/metrale/gpurt/internal/testutil"
)

func TestVersion(t *testing.T) {
	quietEnv(t)
	mock := testutil.MockPlugin(t)
	lib, err := os.ReadFile(filepath.Join(mock, "libgpurt_mock"+testutil.PluginExt()))
	require.NoError(t, err)
	sum := sha256.Sum256(lib)
	wantSum := hex.EncodeToString(sum[:])
	empty := testutil.PrivateDir(t)
	wantABI := fmt.Sprintf("%d.%d", abi.Major, abi.Minor)

	cases := []struct {
		name    string
		version string // stamped main.version ("" = from the build information)
		args    []string
		code    int
		stdout  []string
		stderr  []string
	}{
		{"text, the mock found", "v1.2.3", []string{"--plugin-path", mock}, 0,
			[]string{"gpurt v1.2.3\n", "abi      " + wantABI, "plugins:", "mock", "sha256 " + wantSum, runtime.Version()}, nil},
		{"unstamped falls back to the build information", "", []string{"--plugin-path", empty}, 0,
			[]string{"gpurt ", "module   github.com/metrale/gpurt", "commit   "}, nil},
		{"help goes to stdout", "", []string{"-h"}, 0, []string{"usage: gpurt version", "-plugin-path"}, nil},
		{"unknown flag is a usage error", "", []string{"--nope"}, 2, nil, []string{"gpurt version: flag provided but not defined: -nope"}},
		{"stray argument is a usage error", "", []string{"extra"}, 2, nil, []string{`unexpected argument "extra"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := version
			version = tc.version
			t.Cleanup(func() { version = old })
			code, out, errb := clitest.Run(runVersion, tc.args...)
			assert.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			for _, s := range tc.stdout {
				assert.Contains(t, out.String(), s)
			}
			for _, s := range tc.stderr {
				assert.Contains(t, errb.String(), s)
			}
			if tc.code != 0 {
				assert.Empty(t, out.String())
			}
		})
	}

	t.Run("json", func(t *testing.T) {
		old := version
		version = "v9.9.9-test"
		t.Cleanup(func() { version = old })
		out, _ := clitest.RunOK(t, runVersion, "--json", "--plugin-path", mock)
		var r versionReport
		require.NoError(t, json.Unmarshal(out.Bytes(), &r), out.String())
		assert.Equal(t, "v9.9.9-test", r.Version)
		assert.Equal(t, wantABI, r.ABI)
		assert.Equal(t, runtime.GOOS+"/"+runtime.GOARCH, r.Platform)
		require.Len(t, r.Plugins, 1)
		p := r.Plugins[0]
		assert.Equal(t, "mock", p.Backend)
		assert.Equal(t, wantSum, p.SHA256)
		assert.Equal(t, wantABI, p.ABI)
		assert.NotEmpty(t, p.Version)
	})
}
