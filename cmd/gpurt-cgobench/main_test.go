// SPDX-License-Identifier: Apache-2.0

//go:build cgobench

package main

import (
	"path/filepath"
	"testing"

	"github.com/metrale/gpurt/internal/cli"
	"github.com/metrale/gpurt/internal/cli/clitest"
	"github.com/metrale/gpurt/internal/testutil"
)

// TestConvention: the CLI convention of internal/cli, and the one plugin
// file this program needs. (bench's TestCgoBaseline runs it on the mock.)
func TestConvention(t *testing.T) {
	mock := testutil.MockPlugin(t)
	clitest.CheckCommand(t, run,
		clitest.Case{Name: "no plugin", Args: nil, Status: cli.ExitUsage, Stderr: []string{"-plugin-path: want exactly one plugin file"}},
		clitest.Case{Name: "two plugins", Args: []string{"-plugin-path", mock + ":" + mock}, Status: cli.ExitUsage,
			Stderr: []string{"got 2 paths"}},
		clitest.Case{Name: "a folder", Args: []string{"-plugin-path", mock}, Status: cli.ExitUsage, Stderr: []string{"a folder; want the plugin file"}},
		clitest.Case{Name: "missing", Args: []string{"-plugin-path", filepath.Join(mock, "libgpurt_none.so")}, Status: cli.ExitError,
			Stderr: []string{"libgpurt_none.so: no such file or folder"}},
		clitest.Case{Name: "stray argument", Args: []string{"now"}, Status: cli.ExitUsage, Stderr: []string{`unexpected argument "now"`}},
	)
}
