// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/bench/decodestep"
	"github.com/metrale/gpurt/internal/cli/clitest"
	"github.com/metrale/gpurt/internal/testutil"
)

// TestOnMock runs the program as the GPU script does, on the mock with a
// tiny config: a reference check, then eager and replayed, JSON lines out.
func TestOnMock(t *testing.T) {
	out, _ := clitest.RunOnMock(t, run, "-configs", "48/96/2", "-batches", "1,4",
		"-check-configs", "40/72/2", "-steps", "3", "-warmup", "1")
	impls := map[string]int{}
	for _, r := range testutil.JSONLines[decodestep.Result](t, out) {
		impls[r.Impl]++
		assert.Empty(t, r.Note)
		if r.Impl == "gpurt check" {
			require.NotNil(t, r.OK)
			assert.True(t, *r.OK)
			assert.Equal(t, "40/72/2", r.Config)
		} else {
			assert.Equal(t, "48/96/2", r.Config)
			assert.Greater(t, r.StepUs, 0.0)
		}
	}
	assert.Equal(t, map[string]int{"gpurt check": 4, "gpurt eager": 4, "gpurt replayed": 4}, impls)
}

func TestChecksOnly(t *testing.T) {
	out, _ := clitest.RunOnMock(t, run, "-configs", "none", "-batches", "2", "-variants", "fused",
		"-check-configs", "24/40/1", "-norm", "composed")
	var r decodestep.Result
	require.NoError(t, json.Unmarshal(bytes.TrimSpace(out.Bytes()), &r), "one line: %s", out.String())
	assert.Equal(t, "gpurt check", r.Impl)
	assert.Equal(t, "composed", r.Norm)
	assert.Equal(t, "fused", r.Variant)
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-configs", "1/2"}, {"-batches", "0"}, {"-steps", "0"}, {"-check-configs", "x"}, {"-variants", "both"}, {"-variants", ","}, {"extra"}} {
		st, _, errb := clitest.Run(run, args...)
		assert.Equal(t, 2, st, "%v", args)
		assert.NotEmpty(t, errb.String())
	}
	st, _, errb := clitest.Run(run, "-plugin-path", t.TempDir(), "-backend", "mock", "-check-configs", "none")
	assert.Equal(t, 1, st)
	assert.Contains(t, errb.String(), "gpurt-decodestep:")
}

// TestConvention: the CLI convention of internal/cli.
func TestConvention(t *testing.T) {
	clitest.CheckCommand(t, run,
		clitest.Usage("bad steps", "-steps 0: must be positive", "-steps", "0"),
		clitest.MissingPluginPath("-check-configs", "none"),
	)
}
