// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/floatbits"
)

// stream is a new stream on d, closed at the test's end.
func stream(t testing.TB, d *core.Device) *core.Stream {
	t.Helper()
	s, err := d.NewStream()
	require.NoError(t, err, "NewStream")
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// builtin is the kernel name of d's built-in module.
func builtin(t testing.TB, d *core.Device, name string) *core.Kernel {
	t.Helper()
	mod, err := d.BuiltinModule()
	require.NoError(t, err, "BuiltinModule")
	k, err := mod.Kernel(name)
	require.NoError(t, err, "built-in kernel %s", name)
	return k
}

// alloc is a new buffer of n bytes on d, freed at the test's end.
func alloc(t testing.TB, d *core.Device, n int) *core.Buffer {
	t.Helper()
	b, err := d.Alloc(n)
	require.NoError(t, err, "Alloc(%d)", n)
	t.Cleanup(func() { _ = b.Free() })
	return b
}

// upload is a new buffer holding data (64 bytes longer), freed at the
// test's end.
func upload(t *testing.T, d *core.Device, data []byte) *core.Buffer {
	t.Helper()
	b := alloc(t, d, len(data)+64)
	require.NoError(t, core.CopyFromHost(b, data))
	return b
}

// halves is v as f16 or bf16 (t) bytes.
func halves(t core.DType, v []float32) []byte {
	out := make([]byte, 2*len(v))
	for i, f := range v {
		h := floatbits.BF16FromFloat32(f)
		if t == core.F16 {
			h = floatbits.F16FromFloat32(f)
		}
		binary.LittleEndian.PutUint16(out[2*i:], h)
	}
	return out
}

// i32le is v as little-endian int32 bytes.
func i32le(v ...int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}
