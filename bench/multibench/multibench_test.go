// SPDX-License-Identifier: Apache-2.0

package multibench_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/bench/multibench"
	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/collective"
	"github.com/metrale/gpurt/internal/testutil"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
)

func TestIters(t *testing.T) {
	assert.Equal(t, 200, multibench.Iters(0))
	assert.Equal(t, 200, multibench.Iters(8<<10))
	assert.Equal(t, 55, multibench.Iters(1<<30))
	assert.Equal(t, 5, multibench.Iters(1<<40))
}

// TestSweepAndPeerOnMock: one line per size, both peer directions, on two
// mock devices.
func TestSweepAndPeerOnMock(t *testing.T) {
	rt := mockrt.Open(t, "devices=2")
	devs := rt.Devices()
	c, err := collective.New(rt, devs...)
	require.NoError(t, err)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	require.NoError(t, multibench.Sweep(enc, "gpurt", c, devs, []int64{256, 4096}, core.F32))
	require.NoError(t, c.Close())
	multibench.Peer(enc, devs[0], devs[1], 1024)
	var got []string
	for _, r := range testutil.JSONLines[multibench.Result](t, &out) {
		assert.Empty(t, r.Note, "%+v", r)
		assert.Positive(t, r.Us, "%+v", r)
		got = append(got, r.Name)
	}
	assert.Equal(t, []string{"all_reduce 256B", "all_reduce 4KiB", "peer_copy 1KiB 0->1"}, got)
}
