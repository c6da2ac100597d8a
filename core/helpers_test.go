// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/floatbits"
)

// upload is a new buffer holding data (64 bytes longer), freed at the
// test's end.
func upload(t *testing.T, d *core.Device, data []byte) *core.Buffer {
	t.Helper()
	b, err := d.Alloc(len(data) + 64)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Free() })
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
