// SPDX-License-Identifier: Apache-2.0

package core

import (
	"fmt"

	"github.com/metrale/gpurt/internal/abi"
)

// DType is an element type (GPURT_DTYPE_*).
type DType int32

// Element types. The zero DType (the ABI's GPURT_DTYPE_INVALID) is none
// of them: its Size is 0, and a GemmDesc reads it as "the same as DType"
// where its doc says so.
const (
	F32     DType = abi.DTypeF32
	F16     DType = abi.DTypeF16
	BF16    DType = abi.DTypeBF16
	F64     DType = abi.DTypeF64
	I8      DType = abi.DTypeI8
	I32     DType = abi.DTypeI32
	FP8E4M3 DType = abi.DTypeFP8E4M3
	FP8E5M2 DType = abi.DTypeFP8E5M2
	U8      DType = abi.DTypeU8
)

var dtypeInfo = map[DType]struct {
	name string
	size int
}{
	F32: {"f32", 4}, F16: {"f16", 2}, BF16: {"bf16", 2}, F64: {"f64", 8}, I8: {"i8", 1},
	I32: {"i32", 4}, FP8E4M3: {"fp8e4m3", 1}, FP8E5M2: {"fp8e5m2", 1}, U8: {"u8", 1},
}

// Size is the element size in bytes (0 for an invalid type).
func (t DType) Size() int { return dtypeInfo[t].size }

func (t DType) String() string {
	if i, ok := dtypeInfo[t]; ok {
		return i.name
	}
	return fmt.Sprintf("dtype %d", int32(t))
}
