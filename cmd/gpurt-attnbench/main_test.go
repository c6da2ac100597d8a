// SPDX-License-Identifier: Apache-2.0

package main

import (
	"testing"

	"github.com/metrale/gpurt/internal/cli/clitest"
)

// TestConvention: the CLI convention of internal/cli, and this program's
// usage and setup errors.
func TestConvention(t *testing.T) {
	clitest.CheckCommand(t, run,
		clitest.Usage("shrink 0", "-shrink 0: want 1 to 8192", "-shrink", "0"),
		clitest.Usage("only", `-only "both": want decode or prefill`, "-only", "both"),
		clitest.Usage("iters", "-iters -3: want at least 1", "-iters", "-3"),
		clitest.MissingPluginPath(),
	)
}
