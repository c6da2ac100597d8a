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
		clitest.Usage("shrink 0", "-shrink 0: want 1 to 2048", "-shrink", "0"),
		clitest.Usage("shrink huge", "-shrink 4096: want 1 to 2048", "-shrink", "4096"),
		clitest.Usage("only", `-only "gemx": want gemv, gemm, grouped or decode16`, "-only", "gemx"),
		clitest.Usage("iters", "-iters 0: want at least 1", "-iters", "0"),
		clitest.Usage("stray argument", `unexpected argument "now"`, "now"),
		clitest.MissingPluginPath(),
		clitest.Case{Name: "no plugin there", Args: []string{"-plugin-path", t.TempDir(), "-backend", "mock"}, Status: cli.ExitError,
			Stderr: []string{"gpurt-quantbench: "}},
	)
}
