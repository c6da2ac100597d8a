// SPDX-License-Identifier: Apache-2.0

package attnbench_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/bench"
	"github.com/metrale/gpurt/bench/attnbench"
	"github.com/metrale/gpurt/internal/testutil"
)

// TestOnMock: every shape's line, shrunk, on the mock.
func TestOnMock(t *testing.T) {
	dir := testutil.MockPlugin(t)
	tm, err := bench.OpenGPUTimer([]string{dir}, "mock")
	require.NoError(t, err)
	defer tm.Close()
	var stdout bytes.Buffer
	require.NoError(t, attnbench.Run(attnbench.Options{Timer: tm, Iters: 2, Shrink: 128, Out: &stdout}))
	n := 0
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var r attnbench.Result
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
		assert.Empty(t, r.Note, "%+v", r)
		assert.Positive(t, r.GPUus, "%+v", r)
		n++
	}
	assert.Equal(t, attnbench.Shapes(), n)
}
