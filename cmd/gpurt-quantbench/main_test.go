// SPDX-License-Identifier: Apache-2.0

package main

import (
	"testing"

	"github.com/metrale/gpurt/internal/cli"
	"github.com/metrale/gpurt/internal/cli/clitest"
)

// TestConvention: the CLI convention of internal/cli, and this program's
// usage and setup errors.
func TestConvention(t *testing.T) {
	clitest.CheckCommand(t, run,
		clitest.Case{Name: "shrink 0", Args: []string{"-shrink", "0"}, Status: cli.ExitUsage, Stderr: []string{"-shrink 0: want 1 to 2048"}},
		clitest.Case{Name: "shrink huge", Args: []string{"-shrink", "4096"}, Status: cli.ExitUsage, Stderr: []string{"-shrink 4096: want 1 to 2048"}},
		clitest.Case{Name: "only", Args: []string{"-only", "gemx"}, Status: cli.ExitUsage, Stderr: []string{`-only "gemx": want gemv, gemm or grouped`}},
		clitest.Case{Name: "iters", Args: []string{"-iters", "0"}, Status: cli.ExitUsage, Stderr: []string{"-iters 0: want at least 1"}},
		clitest.Case{Name: "stray argument", Args: []string{"now"}, Status: cli.ExitUsage, Stderr: []string{`unexpected argument "now"`}},
		clitest.Case{Name: "missing plugin path", Args: []string{"-plugin-path", "/nonexistent"}, Status: cli.ExitError,
			Stderr: []string{"-plugin-path /nonexistent: no such file or folder"}},
		clitest.Case{Name: "no plugin there", Args: []string{"-plugin-path", t.TempDir(), "-backend", "mock"}, Status: cli.ExitError,
			Stderr: []string{"gpurt-quantbench: "}},
	)
}
