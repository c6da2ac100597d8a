// SPDX-License-Identifier: Apache-2.0

package abi

// QuantMatmulArgs mirrors gpurt_quant_matmul_args (1.4).
type QuantMatmulArgs struct {
	StructSize   uint64 `c:"struct_size"`
	XType        int32  `c:"x_type"`
	ScaleType    int32  `c:"scale_type"`
	Bits         uint32 `c:"bits"`
	GroupSize    uint32 `c:"group_size"`
	M            uint64 `c:"m"`
	N            uint64 `c:"n"`
	K            uint64 `c:"k"`
	W            Buffer `c:"w"`
	WOffset      uint64 `c:"w_offset"`
	Scales       Buffer `c:"scales"`
	ScalesOffset uint64 `c:"scales_offset"`
	Biases       Buffer `c:"biases"`
	BiasesOffset uint64 `c:"biases_offset"`
	X            Buffer `c:"x"`
	XOffset      uint64 `c:"x_offset"`
	Y            Buffer `c:"y"`
	YOffset      uint64 `c:"y_offset"`
}

// GroupedGemmArgs mirrors gpurt_grouped_gemm_args (1.4).
type GroupedGemmArgs struct {
	StructSize   uint64  `c:"struct_size"`
	ABType       int32   `c:"ab_type"`
	DType        int32   `c:"d_type"`
	GroupCount   uint64  `c:"group_count"`
	N            uint64  `c:"n"`
	K            uint64  `c:"k"`
	MSizes       *uint64 `c:"m_sizes"`
	A            Buffer  `c:"a"`
	AOffset      uint64  `c:"a_offset"`
	B            Buffer  `c:"b"`
	BOffset      uint64  `c:"b_offset"`
	D            Buffer  `c:"d"`
	DOffset      uint64  `c:"d_offset"`
	ScaleA       Buffer  `c:"scale_a"`
	ScaleAOffset uint64  `c:"scale_a_offset"`
	ScaleB       Buffer  `c:"scale_b"`
	ScaleBOffset uint64  `c:"scale_b_offset"`
}
