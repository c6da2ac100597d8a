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
		clitest.Case{Name: "shrink 0", Args: []string{"-shrink", "0"}, Status: cli.ExitUsage, Stderr: []string{"-shrink 0: want 1 to 8192"}},
		clitest.Case{Name: "only", Args: []string{"-only", "both"}, Status: cli.ExitUsage, Stderr: []string{`-only "both": want decode or prefill`}},
		clitest.Case{Name: "iters", Args: []string{"-iters", "-3"}, Status: cli.ExitUsage, Stderr: []string{"-iters -3: want at least 1"}},
		clitest.Case{Name: "missing plugin path", Args: []string{"-plugin-path", "/nonexistent"}, Status: cli.ExitError,
			Stderr: []string{"-plugin-path /nonexistent: no such file or folder"}},
	)
}
