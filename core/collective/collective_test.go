// SPDX-License-Identifier: Apache-2.0

package collective_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/collective"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
)

func TestNilAndZero(t *testing.T) {
	for _, c := range []*collective.Comm{nil, {}} {
		require.ErrorIs(t, c.Run(collective.Op{}), core.ErrInvalidArgument)
		require.ErrorIs(t, c.Close(), core.ErrInvalidArgument)
		require.ErrorIs(t, c.Abort(), core.ErrInvalidArgument)
		require.ErrorIs(t, c.Err(), core.ErrInvalidArgument)
		_, err := c.Device(0)
		require.ErrorIs(t, err, core.ErrInvalidArgument)
		assert.Zero(t, c.NRanks())
	}
	rt := mockrt.Open(t, "devices=2")
	_, err := collective.New(rt)
	require.ErrorIs(t, err, core.ErrInvalidArgument)
	other := mockrt.Open(t, "")
	_, err = collective.New(rt, mockrt.Device0(t, rt), mockrt.Device0(t, other))
	require.ErrorIs(t, err, core.ErrInvalidArgument)
	_, err = collective.Join(rt, collective.JoinConfig{NRanks: 2, FirstRank: 2, Devices: rt.Devices()[:1]})
	require.ErrorIs(t, err, core.ErrInvalidArgument)
}

// TestRunNoAllocs: a warm all-reduce group of two ranks allocates
// nothing in Go.
func TestRunNoAllocs(t *testing.T) {
	rt := mockrt.Open(t, "devices=2")
	devs := rt.Devices()
	c, err := collective.New(rt, devs...)
	require.NoError(t, err)
	defer c.Close()
	ops := mockrt.AllReduceOps(t, devs, 1024)
	require.NoError(t, c.Run(ops...))
	allocs := testing.AllocsPerRun(20, func() {
		if err := c.Run(ops...); err != nil {
			panic(err)
		}
	})
	assert.Zero(t, allocs, "allocations per Run")
	for _, o := range ops {
		require.NoError(t, o.Stream.Synchronize())
	}
	require.NoError(t, c.Err())
}
