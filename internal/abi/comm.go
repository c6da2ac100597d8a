// SPDX-License-Identifier: Apache-2.0

package abi

// Collectives (1.6).

// Comm is an opaque handle to a communicator's local ranks.
type Comm uintptr // gpurt_comm*

// CommID mirrors gpurt_comm_id.
type CommID struct {
	StructSize uint64            `c:"struct_size"`
	Bytes      [CommIDBytes]byte `c:"bytes"`
}

// CommCreateArgs mirrors gpurt_comm_create_args.
type CommCreateArgs struct {
	StructSize  uint64  `c:"struct_size"`
	DeviceCount uint32  `c:"device_count"`
	NRanks      uint32  `c:"nranks"`
	Devices     *uint32 `c:"devices"`
	FirstRank   uint32  `c:"first_rank"`
	Reserved    uint32  `c:"reserved"`
	UniqueID    *byte   `c:"unique_id"`
	UniqueIDLen uint64  `c:"unique_id_len"`
	TimeoutMS   uint64  `c:"timeout_ms"`
}

// CollOp mirrors gpurt_coll_op.
type CollOp struct {
	StructSize uint64 `c:"struct_size"`
	Kind       int32  `c:"kind"`
	DType      int32  `c:"dtype"`
	Reduce     int32  `c:"reduce"`
	Rank       uint32 `c:"rank"`
	Peer       uint32 `c:"peer"`
	Reserved   uint32 `c:"reserved"`
	Count      uint64 `c:"count"`
	Stream     Stream `c:"stream"`
	Send       Buffer `c:"send"`
	SendOffset uint64 `c:"send_offset"`
	Recv       Buffer `c:"recv"`
	RecvOffset uint64 `c:"recv_offset"`
}

// CommRunArgs mirrors gpurt_comm_run_args.
type CommRunArgs struct {
	StructSize uint64  `c:"struct_size"`
	Count      uint64  `c:"count"`
	Ops        *CollOp `c:"ops"`
	OpSize     uint64  `c:"op_size"`
}
