// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPutPosRowsOfQAndK: a step of several tokens stages, besides the
// tokens' positions, one position per row of its q heads (token-major) and
// then of its k heads, which partA's single rotary launch reads (the
// end-to-end check against the float64 reference is
// TestDecoderMatchesReference at batch 2 and in prefills).
func TestPutPosRowsOfQAndK(t *testing.T) {
	_, dev := openMock(t)
	c := tinyConfig()
	m, err := NewModel(dev, c, 3, 8, 1)
	require.NoError(t, err)
	defer m.Close()
	H, KV := c.Heads, c.KVHeads
	require.True(t, m.ropeByPos())
	pos := []int32{5, 9, 2}
	require.NoError(t, m.stage.begin())
	require.NoError(t, m.putPos(m.stage, pos))
	require.NoError(t, m.stage.end(m.s))
	var want []int32
	for _, p := range pos {
		for range H {
			want = append(want, p)
		}
	}
	for _, p := range pos {
		for range KV {
			want = append(want, p)
		}
	}
	assert.Equal(t, want, m.scratch.rpos)
	// One token: the rotation reads pos itself (q's heads then k's at one
	// position), no rows are staged.
	m.scratch.rpos = nil
	require.NoError(t, m.stage.begin())
	require.NoError(t, m.putPos(m.stage, pos[:1]))
	require.NoError(t, m.stage.end(m.s))
	assert.Empty(t, m.scratch.rpos)
	require.NoError(t, m.s.Synchronize())
}
