// SPDX-License-Identifier: Apache-2.0

package attnbench_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/bench"
	"github.com/metrale/gpurt/bench/attnbench"
	"github.com/metrale/gpurt/internal/testutil"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
)

// TestOnMock: every shape's line, shrunk, on the mock.
func TestOnMock(t *testing.T) {
	tm := mockrt.Timer(t)
	var stdout bytes.Buffer
	require.NoError(t, attnbench.Run(attnbench.Options{Timed: bench.Timed{Timer: tm, Iters: 2, Shrink: 128, Out: &stdout}}))
	lines := testutil.JSONLines[attnbench.Result](t, &stdout)
	for _, r := range lines {
		assert.Empty(t, r.Note, "%+v", r)
		assert.Positive(t, r.GPUus, "%+v", r)
	}
	assert.Equal(t, attnbench.Shapes(), len(lines))
}
