// SPDX-License-Identifier: Apache-2.0

package quantbench_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/bench"
	"github.com/metrale/gpurt/bench/quantbench"
	"github.com/metrale/gpurt/internal/testutil"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
)

// TestShrinkOnMock: every figure's line on the mock (the int8 rows: three
// shapes at n = 1, 8, 16, 32, 64, six more at n = 1, two at n = 32, and two
// at the prefill n), at -shrink 64 (which
// once divided fp8's K below one 128-wide scale block: "size 0") and 256.
func TestShrinkOnMock(t *testing.T) {
	for _, shrink := range []int{64, 256} {
		t.Run(fmt.Sprint(shrink), func(t *testing.T) {
			tm := mockrt.Timer(t)
			var out bytes.Buffer
			require.NoError(t, quantbench.Run(quantbench.Options{Timed: bench.Timed{Timer: tm, Iters: 2, Shrink: shrink, Out: &out}}))
			impls := map[string]int{}
			for _, r := range testutil.JSONLines[quantbench.Result](t, &out) {
				if r.Impl == "cuBLASLt per expert" {
					assert.Regexp(t, `^\d+ calls`, r.Note, "an error instead of the calls: %+v", r)
				} else {
					assert.Empty(t, r.Note, "an error instead of a figure: %+v", r)
				}
				assert.Positive(t, r.GPUus, "%+v", r)
				impls[r.Impl]++
			}
			assert.Equal(t, map[string]int{"gpurt int8": 25, quantbench.ImplBF16: 25, "gpurt grouped": 4, quantbench.ImplGroupedCounts: 4, "cuBLASLt per expert": 4}, impls)
		})
	}
}

// TestDecode16OnMock: -only decode16 gives the bf16 GEMM slot's row for
// each of the 8 decode shapes at 1, 2, 4 and 8 tokens and at one token with
// each GEMM prologue, and nothing else.
func TestDecode16OnMock(t *testing.T) {
	tm := mockrt.Timer(t)
	var out bytes.Buffer
	require.NoError(t, quantbench.Run(quantbench.Options{Timed: bench.Timed{Timer: tm, Iters: 2, Shrink: 256, Only: "decode16", Out: &out}, RotateMiB: 1}))
	rows := testutil.JSONLines[quantbench.Result](t, &out)
	require.Len(t, rows, 48)
	for _, r := range rows {
		assert.Equal(t, quantbench.ImplBF16, r.Impl)
		assert.Empty(t, r.Note, "%+v", r)
		assert.Positive(t, r.GPUus, "%+v", r)
		assert.Regexp(t, `^\d+x\d+ n=([1248]|1 rmsnorm|1 swiglu) rot$`, r.Name)
	}
}

func TestOptionsCheck(t *testing.T) {
	for _, c := range []struct {
		o   quantbench.Options
		err string
	}{
		{quantbench.Options{Timed: bench.Timed{Shrink: 0, Iters: 1}}, "shrink 0: want 1 to 2048"},
		{quantbench.Options{Timed: bench.Timed{Shrink: 1, Iters: 0}}, "iters 0: want at least 1"},
		{quantbench.Options{Timed: bench.Timed{Shrink: 1, Iters: 1, Only: "x"}}, `only "x"`},
		{quantbench.Options{Timed: bench.Timed{Shrink: 1, Iters: 1}, RotateMiB: -1}, "rotate -1"},
		{quantbench.Options{Timed: bench.Timed{Shrink: 1, Iters: 1}}, ""},
	} {
		err := c.o.Check()
		if c.err == "" {
			assert.NoError(t, err)
			continue
		}
		assert.ErrorContains(t, err, c.err)
	}
	assert.ErrorContains(t, quantbench.Run(quantbench.Options{Timed: bench.Timed{Shrink: 1, Iters: 1}}), "Options.Timer and Options.Out are required")
}
