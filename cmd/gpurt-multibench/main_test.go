// SPDX-License-Identifier: Apache-2.0

package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/metrale/gpurt/bench/multibench"
	"github.com/metrale/gpurt/internal/cli/clitest"
	"github.com/metrale/gpurt/internal/testutil"
)

// TestConvention: the CLI convention of internal/cli, and this program's
// usage and setup errors.
func TestConvention(t *testing.T) {
	clitest.CheckCommand(t, run,
		clitest.Usage("shrink 0", "-shrink 0: want 1 to 65536", "-shrink", "0"),
		clitest.Usage("bad size", `-sizes: byte count "8X"`, "-sizes", "8X"),
		clitest.Usage("size shrunk to nothing", `-sizes: byte count "8K" divided by -shrink 4096: under 4 bytes`, "-sizes", "8K", "-shrink", "4096"),
		clitest.Usage("bad peer", `-peer: byte count "-1"`, "-peer", "-1"),
		clitest.Usage("bad dtype", `-dtype "f64"`, "-dtype", "f64"),
		clitest.Usage("ranks", "-ranks 0: want at least 1", "-ranks", "0"),
		clitest.Usage("only", `-only "x": want allreduce or peer`, "-only", "x"),
		clitest.MissingPluginPath(),
	)
	stdout, _ := clitest.RunOK(t, run, "-h")
	assert.NotContains(t, stdout.String(), "child-rank", "internal flags are hidden")
}

// TestOnMock: two mock devices, a tiny sweep, both peer directions.
func TestOnMock(t *testing.T) {
	stdout, _ := clitest.RunOnMock(t, run, "-options", "devices=2", "-sizes", "8K,1M",
		"-peer", "64K", "-shrink", "16", "-procs")
	var names []string
	for _, r := range testutil.JSONLines[multibench.Result](t, stdout) {
		names = append(names, r.Name+" | "+r.Impl)
		if r.Impl == "gpurt" {
			assert.Empty(t, r.Note, "%+v", r)
			assert.Positive(t, r.Us, "%+v", r)
		}
	}
	assert.Equal(t, []string{"all_reduce 512B | gpurt", "all_reduce 64KiB | gpurt", "all_reduce | gpurt 1 proc/GPU",
		"peer_copy 4KiB 0->1 | gpurt", "peer_copy 4KiB 1->0 | gpurt"}, names)
}
