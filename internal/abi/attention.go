// SPDX-License-Identifier: Apache-2.0

package abi

// Attention over a paged KV cache (1.5).

// Attention is an opaque handle to an attention object.
type Attention uintptr // gpurt_attention*

// KVLayout mirrors gpurt_kv_layout.
type KVLayout struct {
	DType      int32  `c:"dtype"`
	Layout     int32  `c:"layout"`
	PageSize   uint32 `c:"page_size"`
	NumKVHeads uint32 `c:"num_kv_heads"`
	HeadDim    uint32 `c:"head_dim"`
	QODType    int32  `c:"qo_dtype"` // 1.8: an FP8E4M3 cache's query/output/row type; else 0
}

// KVPages mirrors gpurt_kv_pages.
type KVPages struct {
	K                 Buffer `c:"k"`
	KOffset           uint64 `c:"k_offset"`
	V                 Buffer `c:"v"`
	VOffset           uint64 `c:"v_offset"`
	NumPages          uint64 `c:"num_pages"`
	Indptr            Buffer `c:"indptr"`
	IndptrOffset      uint64 `c:"indptr_offset"`
	Indices           Buffer `c:"indices"`
	IndicesOffset     uint64 `c:"indices_offset"`
	LastPageLen       Buffer `c:"last_page_len"`
	LastPageLenOffset uint64 `c:"last_page_len_offset"`
}

// KVAppendArgs mirrors gpurt_kv_append_args.
type KVAppendArgs struct {
	StructSize         uint64   `c:"struct_size"`
	Layout             KVLayout `c:"layout"`
	Pages              KVPages  `c:"pages"`
	BatchSize          uint32   `c:"batch_size"`
	Reserved           uint32   `c:"reserved"`
	NNZ                uint64   `c:"nnz"`
	KRows              Buffer   `c:"k_rows"`
	KRowsOffset        uint64   `c:"k_rows_offset"`
	VRows              Buffer   `c:"v_rows"`
	VRowsOffset        uint64   `c:"v_rows_offset"`
	BatchIndices       Buffer   `c:"batch_indices"`
	BatchIndicesOffset uint64   `c:"batch_indices_offset"`
	Positions          Buffer   `c:"positions"`
	PositionsOffset    uint64   `c:"positions_offset"`
	KScale             float32  `c:"k_scale"` // 1.8: an fp8 cache's scales
	VScale             float32  `c:"v_scale"`
}

// AttentionDesc mirrors gpurt_attention_desc.
type AttentionDesc struct {
	StructSize    uint64   `c:"struct_size"`
	Kind          int32    `c:"kind"`
	NumQOHeads    uint32   `c:"num_qo_heads"`
	Layout        KVLayout `c:"layout"`
	Causal        uint8    `c:"causal"`
	Reserved      [7]uint8 `c:"reserved"`
	SMScale       float64  `c:"sm_scale"`
	LogitsSoftCap float64  `c:"logits_soft_cap"`
	MaxBatchSize  uint32   `c:"max_batch_size"`
	Reserved2     uint32   `c:"reserved2"`
	MaxRows       uint64   `c:"max_rows"`
}

// AttentionPlanArgs mirrors gpurt_attention_plan_args. The host arrays
// point at Go memory for the call.
type AttentionPlanArgs struct {
	StructSize    uint64 `c:"struct_size"`
	BatchSize     uint32 `c:"batch_size"`
	Reserved      uint32 `c:"reserved"`
	QOIndptr      *int32 `c:"qo_indptr"`
	KVIndptr      *int32 `c:"kv_indptr"`
	KVLastPageLen *int32 `c:"kv_last_page_len"`
}

// AttentionRunArgs mirrors gpurt_attention_run_args.
type AttentionRunArgs struct {
	StructSize     uint64  `c:"struct_size"`
	Q              Buffer  `c:"q"`
	QOffset        uint64  `c:"q_offset"`
	O              Buffer  `c:"o"`
	OOffset        uint64  `c:"o_offset"`
	Pages          KVPages `c:"pages"`
	QOIndptr       Buffer  `c:"qo_indptr"`
	QOIndptrOffset uint64  `c:"qo_indptr_offset"`
	KScale         float32 `c:"k_scale"` // 1.8: an fp8 cache's scales
	VScale         float32 `c:"v_scale"`
}
