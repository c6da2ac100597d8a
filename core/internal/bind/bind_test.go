// SPDX-License-Identifier: Apache-2.0

//go:build (linux || darwin) && (amd64 || arm64)

package bind

import (
	"errors"
	"runtime"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core/internal/ffi"
	"github.com/metrale/gpurt/internal/abi"
	"github.com/metrale/gpurt/internal/testutil"
)

// mockTable loads the mock plugin and returns a Go copy of its function
// table, which a test may edit and Bind (Bind copies the table at once).
func mockTable(t *testing.T) abi.API {
	t.Helper()
	h, err := purego.Dlopen(testutil.MockPluginPath(t), purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	sym, err := purego.Dlsym(h, abi.EntrySymbol)
	require.NoError(t, err)
	args := abi.NegotiateArgs{StructSize: abi.SizeofNegotiateArgs, HostABIMajor: abi.Major, HostABIMinor: abi.Minor}
	require.Equal(t, int32(abi.OK), Negotiate(sym, &args), abi.CString(args.Message[:]))
	require.NotZero(t, args.API)
	table := *(*abi.API)(ffi.Ptr(args.API)) // C memory, static
	require.GreaterOrEqual(t, table.StructSize, uint64(unsafe.Offsetof(table.LaunchBatch))+8, "the mock has the 1.2 slots")
	return table
}

// bindCopy binds a Go copy of a table.
func bindCopy(api *abi.API) (*Plugin, error) {
	p, err := Bind(uintptr(unsafe.Pointer(api)), "/test/libgpurt_mock")
	runtime.KeepAlive(api)
	return p, err
}

func TestBindRequiredSlots(t *testing.T) {
	table := mockTable(t)
	cases := []struct {
		name  string
		edit  func(a *abi.API)
		error string // "" when Bind succeeds
	}{
		{"whole table", func(a *abi.API) {}, ""},
		{"shutdown NULL is optional", func(a *abi.API) { a.Shutdown = 0 }, ""},
		{"copy NULL", func(a *abi.API) { a.Copy = 0 }, "function table has no copy"},
		{"launch NULL", func(a *abi.API) { a.Launch = 0 }, "function table has no launch"},
		{"1.1 slot NULL is not required", func(a *abi.API) { a.GemmRun = 0 }, ""},
		{"struct_size short of the 1.0 slots", func(a *abi.API) {
			a.StructSize = uint64(unsafe.Offsetof(a.Launch))
		}, "function table has no launch"},
		{"struct_size short of the header", func(a *abi.API) { a.StructSize = 8 }, "smaller than its header"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := table
			c.edit(&a)
			p, err := bindCopy(&a)
			if c.error == "" {
				require.NoError(t, err)
				assert.Equal(t, "mock", p.Backend)
				return
			}
			require.ErrorIs(t, err, ErrABI)
			assert.Contains(t, err.Error(), c.error)
		})
	}
}

// TestSlotCoverage checks the generated methods refuse a slot the
// plugin's struct_size does not cover (an older minor) or left NULL,
// with an error wrapping ErrUnsupported, and call the others.
func TestSlotCoverage(t *testing.T) {
	table := mockTable(t)
	older := table
	older.StructSize = uint64(unsafe.Offsetof(older.LaunchBatch)) // a 1.1 table
	older.ABIMinor = 1
	p, err := bindCopy(&older)
	require.NoError(t, err)
	assert.False(t, p.Has(SlotLaunchBatch))
	assert.True(t, p.Has(SlotGemmRun))
	err = p.LaunchBatch("", 0, 0, 0, nil, nil)
	require.ErrorIs(t, err, ErrUnsupported)
	var be *Error
	require.True(t, errors.As(err, &be))
	assert.Equal(t, "launch_batch", be.Op)
	assert.Contains(t, be.Message, "launch_batch is unsupported by this plugin (ABI 1.1; needs ABI 1.2)")

	null := table
	null.GemmRun = 0
	p, err = bindCopy(&null)
	require.NoError(t, err)
	err = p.GemmRun("gemm", 0, 0, 0, nil)
	require.ErrorIs(t, err, ErrUnsupported)
	require.True(t, errors.As(err, &be))
	assert.Equal(t, "gemm", be.Op)
	assert.Contains(t, be.Message, "the plugin left the slot NULL")

	// A slot that is there is called: a NULL runtime is the plugin's
	// invalid-handle error, named by the slot when op is "".
	err = p.StreamQuery("", 0, 0)
	require.ErrorIs(t, err, ErrInvalidHandle)
	require.True(t, errors.As(err, &be))
	assert.Equal(t, "stream_query", be.Op)
}

func TestSlotNames(t *testing.T) {
	assert.Equal(t, "error_get", SlotErrorGet.String())
	assert.Equal(t, uint32(0), SlotLaunch.Minor())
	assert.Equal(t, uint32(2), SlotLaunchBatch.Minor())
	assert.Equal(t, "slot -1", Slot(-1).String())
	assert.Equal(t, abi.SizeofAPI, uint64(unsafe.Offsetof(abi.API{}.ErrorGet))+8*uint64(NumSlots),
		"every slot of abi.API has a Slot")
}
