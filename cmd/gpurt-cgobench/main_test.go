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
		clitest.Usage("no plugin", "-plugin-path: want exactly one plugin file"),
		clitest.Usage("two plugins", "got 2 paths", "-plugin-path", mock+":"+mock),
		clitest.Usage("a folder", "a folder; want the plugin file", "-plugin-path", mock),
		clitest.Case{Name: "missing", Args: []string{"-plugin-path", filepath.Join(mock, "libgpurt_none.so")}, Status: cli.ExitError,
			Stderr: []string{"libgpurt_none.so: no such file or folder"}},
		clitest.Usage("stray argument", `unexpected argument "now"`, "now"),
	)
}
