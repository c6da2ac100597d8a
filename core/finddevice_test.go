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
