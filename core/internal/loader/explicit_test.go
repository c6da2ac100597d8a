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

// TestExplicitPluginFile: a plugin file named in Options.Paths that cannot
// be used is an error, even when another plugin (here a good mock in a
// later folder) could run: the program never tests another plugin in its
// place. A folder named there is only searched.
func TestExplicitPluginFile(t *testing.T) {
	cases := []struct {
		name string
		// given returns the path to name in Options.Paths and the
		// candidate expected to fail ("" = no error expected).
		given  func(t *testing.T) (given, failed string)
		reason string
	}{
		{"missing file", func(t *testing.T) (string, string) {
			p := filepath.Join(privDir(t), "missing", "libgpurt_mock"+pluginExt())
			return p, p
		}, "no such file"},
		{"refused file (group-writable)", func(t *testing.T) (string, string) {
			p := buildPlugin(t, privDir(t), "mock")
			require.NoError(t, os.Chmod(p, 0o664))
			return p, p
		}, "refused: file"},
		{"refused file (world-writable parent)", func(t *testing.T) (string, string) {
			open := mkdir(t, filepath.Join(privDir(t), "open"), 0o777)
			p := buildPlugin(t, open, "mock")
			return p, p
		}, "and not sticky"},
		{"not a plugin", func(t *testing.T) (string, string) {
			p := writeFile(t, privDir(t), "libgpurt_mock"+pluginExt(), []byte("not a plugin\n"))
			return p, p
		}, "a text file"},
		{"an existing file without a plugin's name", func(t *testing.T) (string, string) {
			p := writeFile(t, privDir(t), "mock.bin", []byte("not a plugin\n"))
			return p, p
		}, "a text file"},
		{"missing folder is searched, not an error", func(t *testing.T) (string, string) {
			return filepath.Join(privDir(t), "no-such-folder"), ""
		}, ""},
		{"a good file is used", func(t *testing.T) (string, string) {
			return buildPlugin(t, privDir(t), "mock", "-DSCORE=3"), ""
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			other := privDir(t)
			good := buildPlugin(t, other, "mock")
			given, failed := tc.given(t)
			opts, _ := testOpts(t, given, other)
			rep, p, err := Choose(opts)
			if failed == "" {
				require.NoError(t, err)
				require.NotNil(t, p)
				if filepath.Base(given) == "libgpurt_mock"+pluginExt() {
					assert.Equal(t, given, rep.Selected, "the file given wins over the later folder")
				}
				return
			}
			require.ErrorIs(t, err, ErrBackendUnavailable)
			require.Nil(t, p, "nothing is chosen in place of the file given")
			assert.Empty(t, rep.Selected)
			assert.Contains(t, err.Error(), "plugin file given in Config.PluginPaths cannot be used: "+failed)
			assert.Contains(t, err.Error(), tc.reason)
			c := find(t, rep, failed)
			assert.Equal(t, StateFailed, c.State)
			assert.Contains(t, c.Reason, tc.reason)
			g := find(t, rep, good)
			assert.NotEqual(t, StateSelected, g.State)
			if g.State == StateAvailable {
				assert.Contains(t, g.Reason, "cannot be used ("+failed+")")
			}
		})
	}
}
