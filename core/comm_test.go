// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
)

func TestFindDevice(t *testing.T) {
	rt := openMock(t, "devices=3")
	devs := rt.Devices()
	for i, d := range devs {
		info := d.Info()
		require.NotEmpty(t, info.UUID, "the mock reports a UUID")
		require.NotEmpty(t, info.PCIBusID, "the mock reports a PCI bus id")
		for _, name := range []string{string(rune('0' + i)), info.UUID, info.UUID[:12], " " + info.PCIBusID + " ",
			info.PCIBusID[5:], "0000" + info.PCIBusID} {
			got, err := rt.FindDevice(name)
			require.NoError(t, err, name)
			assert.Same(t, d, got, name)
		}
	}
	for _, tc := range []struct {
		name string
		want error
	}{
		{"3", core.ErrNotFound}, {"GPU-00000000", core.ErrNotFound}, {"GPU-1", core.ErrInvalidArgument},
		{"0000:77:00.0", core.ErrNotFound}, {"0000:77:00.9", core.ErrInvalidArgument}, {"x", core.ErrInvalidArgument},
		{"", core.ErrInvalidArgument}, {"-1", core.ErrInvalidArgument},
	} {
		_, err := rt.FindDevice(tc.name)
		require.ErrorIs(t, err, tc.want, "%q: %v", tc.name, err)
	}
	var nilRT *core.Runtime
	_, err := nilRT.FindDevice("0")
	require.ErrorIs(t, err, core.ErrInvalidArgument)
}

func TestCommNilAndZero(t *testing.T) {
	for _, c := range []*core.Comm{nil, {}} {
		require.ErrorIs(t, c.Run(core.CollOp{}), core.ErrInvalidArgument)
		require.ErrorIs(t, c.Close(), core.ErrInvalidArgument)
		require.ErrorIs(t, c.Abort(), core.ErrInvalidArgument)
		require.ErrorIs(t, c.Err(), core.ErrInvalidArgument)
		_, err := c.Device(0)
		require.ErrorIs(t, err, core.ErrInvalidArgument)
		assert.Zero(t, c.NRanks())
	}
	rt := openMock(t, "devices=2")
	_, err := rt.NewComm()
	require.ErrorIs(t, err, core.ErrInvalidArgument)
	other := openMock(t, "")
	_, err = rt.NewComm(dev0(t, rt), dev0(t, other))
	require.ErrorIs(t, err, core.ErrInvalidArgument)
	_, err = rt.JoinComm(core.CommJoin{NRanks: 2, FirstRank: 2, Devices: rt.Devices()[:1]})
	require.ErrorIs(t, err, core.ErrInvalidArgument)
}

// TestCommRunNoAllocs: a warm all-reduce group of two ranks allocates
// nothing in Go.
func TestCommRunNoAllocs(t *testing.T) {
	rt := openMock(t, "devices=2")
	devs := rt.Devices()
	c, err := rt.NewComm(devs...)
	require.NoError(t, err)
	defer c.Close()
	ops := make([]core.CollOp, 2)
	for k, d := range devs {
		s, err := d.NewStream()
		require.NoError(t, err)
		defer s.Close()
		b, err := d.Alloc(4096)
		require.NoError(t, err)
		defer b.Free()
		require.NoError(t, core.Memset(b, 0))
		ops[k] = core.CollOp{Kind: core.AllReduce, DType: core.F32, Rank: k, Count: 1024, Stream: s, Send: b, Recv: b}
	}
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
