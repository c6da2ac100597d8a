// SPDX-License-Identifier: Apache-2.0

// Package abi is the Go mirror of gpurt.h, the C ABI between the core and
// its plugins. Every struct here has the exact layout of its C twin (field
// `c` tags name the C field); TestLayoutMatchesHeader compiles the header
// at test time and fails on any drift in a size, an offset or a constant.
//
// Nothing here calls anything: the binding layer (core/internal/bind) does.
package abi

import "unsafe"

// Version of the ABI this core speaks. Majors must match; minors only add.
const (
	Major = 1
	Minor = 8
)

// EntrySymbol is the one symbol a plugin exports.
const EntrySymbol = "gpurt_plugin_negotiate"

// Error codes (GPURT_OK, GPURT_ERR_*): generated into zerrors.go with
// their names, the one error vocabulary.

// Probe reasons (GPURT_PROBE_*).
const (
	ProbeOK                  = 0
	ProbeDriverMissing       = 1
	ProbeNoDevice            = 2
	ProbeDriverTooOld        = 3
	ProbePlatformUnsupported = 4
	ProbeInitFailed          = 5
	ProbeDisabled            = 6
)

// Element types (GPURT_DTYPE_*).
const (
	DTypeInvalid = 0
	DTypeF32     = 1
	DTypeF16     = 2
	DTypeBF16    = 3
	DTypeF64     = 4
	DTypeI8      = 5
	DTypeI32     = 6
	DTypeFP8E4M3 = 7
	DTypeFP8E5M2 = 8
	DTypeU8      = 9
)

// Kernel argument kinds (GPURT_ARG_*).
const (
	ArgBuffer = 1
	ArgI8     = 2
	ArgI16    = 3
	ArgI32    = 4
	ArgI64    = 5
	ArgU8     = 6
	ArgU16    = 7
	ArgU32    = 8
	ArgU64    = 9
	ArgF16    = 10
	ArgBF16   = 11
	ArgF32    = 12
	ArgF64    = 13
	ArgAny    = 14
)

// Module formats (GPURT_MODULE_*).
const (
	ModuleBuiltin     = 0
	ModulePTX         = 1
	ModuleCubin       = 2
	ModuleFatbin      = 3
	ModuleMetallib    = 4
	ModuleMetalSource = 5
)

// Flags.
const (
	CopySync            = 1
	EventTiming         = 1
	DeviceUnifiedMemory = 1
	DeviceBF16          = 2
	DeviceFP8           = 4
	MaxKernelParams     = 32
	NameLen             = 256
)

// GEMM compute types and epilogues (1.1).
const (
	ComputeDefault = 0
	ComputeF32     = 1
	ComputeF32TF32 = 2
	ComputeF16     = 3

	EpilogueNone     = 0
	EpilogueBias     = 1
	EpilogueRelu     = 2
	EpilogueBiasRelu = 3
	EpilogueGelu     = 4
	EpilogueBiasGelu = 5
)

// Opaque handles: pointers the plugin owns and Go never dereferences. The
// line comment names the C type (internal/cmd/genbind reads it).
type (
	Error      uintptr // gpurt_error*: an error object the caller destroys
	Runtime    uintptr // gpurt_runtime*
	Buffer     uintptr // gpurt_buffer*: device memory
	HostBuffer uintptr // gpurt_host_buffer*: pinned host memory
	Stream     uintptr // gpurt_stream*
	Event      uintptr // gpurt_event*
	Module     uintptr // gpurt_module*
	Kernel     uintptr // gpurt_kernel*: owned by its module
	GemmPlan   uintptr // gpurt_gemm_plan*
	Graph      uintptr // gpurt_graph* (1.3)
)

// Pointer fields: a field the core points at Go memory has a Go pointer
// type (so the garbage collector and the stack copier see it); a field
// that holds plugin-owned memory or a C function stays a uintptr.

// ErrorInfo mirrors gpurt_error_info.
type ErrorInfo struct {
	StructSize uint64  `c:"struct_size"`
	Code       int32   `c:"code"`
	Reserved   int32   `c:"reserved"`
	VendorCode int64   `c:"vendor_code"`
	Message    uintptr `c:"message"`
	MessageLen uint64  `c:"message_len"`
}

// PluginInfo mirrors gpurt_plugin_info.
type PluginInfo struct {
	StructSize uint64   `c:"struct_size"`
	Backend    [32]byte `c:"backend"`
	Version    [64]byte `c:"version"`
	Priority   int32    `c:"priority"`
	Reserved   int32    `c:"reserved"`
}

// DeviceInfo mirrors gpurt_device_info.
type DeviceInfo struct {
	StructSize          uint64        `c:"struct_size"`
	Name                [NameLen]byte `c:"name"`
	Vendor              [64]byte      `c:"vendor"`
	Arch                [64]byte      `c:"arch"`
	PCIBusID            [32]byte      `c:"pci_bus_id"`
	DriverVersion       [64]byte      `c:"driver_version"`
	MemoryTotal         uint64        `c:"memory_total"`
	MemoryFree          uint64        `c:"memory_free"`
	ComputeMajor        uint32        `c:"compute_major"`
	ComputeMinor        uint32        `c:"compute_minor"`
	DriverVersionCode   uint32        `c:"driver_version_code"`
	MultiprocessorCount uint32        `c:"multiprocessor_count"`
	MaxThreadsPerBlock  uint32        `c:"max_threads_per_block"`
	WarpSize            uint32        `c:"warp_size"`
	Flags               uint32        `c:"flags"`
	Reserved            uint32        `c:"reserved"`
	UUID                [48]byte      `c:"uuid"` // 1.6
}

// ProbeArgs mirrors gpurt_probe_args.
type ProbeArgs struct {
	StructSize     uint64      `c:"struct_size"`
	Devices        *DeviceInfo `c:"devices"`
	DeviceCapacity uint32      `c:"device_capacity"`
	DeviceCount    uint32      `c:"device_count"`
	Available      uint8       `c:"available"`
	Reserved       [3]uint8    `c:"reserved"`
	Score          int32       `c:"score"`
	ReasonCode     int32       `c:"reason_code"`
	Reason         [512]byte   `c:"reason"`
}

// RuntimeCreateArgs mirrors gpurt_runtime_create_args.
type RuntimeCreateArgs struct {
	StructSize uint64  `c:"struct_size"`
	Log        uintptr `c:"log"`
	LogUser    uintptr `c:"log_user"`
	Options    *byte   `c:"options"`
	OptionsLen uint64  `c:"options_len"`
}

// RuntimeStats mirrors gpurt_runtime_stats.
type RuntimeStats struct {
	StructSize      uint64 `c:"struct_size"`
	LiveBuffers     uint64 `c:"live_buffers"`
	LiveHostBuffers uint64 `c:"live_host_buffers"`
	LiveStreams     uint64 `c:"live_streams"`
	LiveEvents      uint64 `c:"live_events"`
	LiveModules     uint64 `c:"live_modules"`
	LivePlans       uint64 `c:"live_plans"`
	DeviceBytes     uint64 `c:"device_bytes"`
	HostBytes       uint64 `c:"host_bytes"`
}

// ControlArgs mirrors gpurt_control_args.
type ControlArgs struct {
	StructSize uint64 `c:"struct_size"`
	Key        *byte  `c:"key"`
	KeyLen     uint64 `c:"key_len"`
	Value      int64  `c:"value"`
}

// CopyArgs mirrors gpurt_copy_args.
type CopyArgs struct {
	StructSize uint64     `c:"struct_size"`
	Stream     Stream     `c:"stream"`
	Flags      uint32     `c:"flags"`
	Reserved   uint32     `c:"reserved"`
	Size       uint64     `c:"size"`
	DstBuffer  Buffer     `c:"dst_buffer"`
	DstHost    HostBuffer `c:"dst_host"`
	DstPtr     *byte      `c:"dst_ptr"`
	DstOffset  uint64     `c:"dst_offset"`
	SrcBuffer  Buffer     `c:"src_buffer"`
	SrcHost    HostBuffer `c:"src_host"`
	SrcPtr     *byte      `c:"src_ptr"`
	SrcOffset  uint64     `c:"src_offset"`
}

// MemsetArgs mirrors gpurt_memset_args.
type MemsetArgs struct {
	StructSize  uint64 `c:"struct_size"`
	Stream      Stream `c:"stream"`
	Buffer      Buffer `c:"buffer"`
	Offset      uint64 `c:"offset"`
	Size        uint64 `c:"size"`
	Value       uint32 `c:"value"`
	ElementSize uint32 `c:"element_size"`
}

// ModuleLoadArgs mirrors gpurt_module_load_args.
type ModuleLoadArgs struct {
	StructSize uint64 `c:"struct_size"`
	Device     uint32 `c:"device"`
	Format     int32  `c:"format"`
	Data       *byte  `c:"data"`
	DataLen    uint64 `c:"data_len"`
	Name       *byte  `c:"name"`
	NameLen    uint64 `c:"name_len"`
}

// KernelInfo mirrors gpurt_kernel_info.
type KernelInfo struct {
	StructSize         uint64                  `c:"struct_size"`
	NumParams          uint32                  `c:"num_params"`
	MaxThreadsPerBlock uint32                  `c:"max_threads_per_block"`
	StaticSharedBytes  uint32                  `c:"static_shared_bytes"`
	Reserved           uint32                  `c:"reserved"`
	ParamKind          [MaxKernelParams]int32  `c:"param_kind"`
	ParamSize          [MaxKernelParams]uint32 `c:"param_size"`
}

// KernelArg mirrors gpurt_kernel_arg.
type KernelArg struct {
	Kind   int32  `c:"kind"`
	Size   uint32 `c:"size"`
	Value  uint64 `c:"value"`
	Buffer Buffer `c:"buffer"`
	Offset uint64 `c:"offset"`
	Length uint64 `c:"length"`
}

// LaunchArgs mirrors gpurt_launch_args.
type LaunchArgs struct {
	StructSize     uint64     `c:"struct_size"`
	Grid           [3]uint32  `c:"grid"`
	Block          [3]uint32  `c:"block"`
	SharedMemBytes uint32     `c:"shared_mem_bytes"`
	NumArgs        uint32     `c:"num_args"`
	Args           *KernelArg `c:"args"`
}

// LaunchItem mirrors gpurt_launch_item (1.2).
type LaunchItem struct {
	Kernel Kernel      `c:"kernel"`
	Args   *LaunchArgs `c:"args"`
}

// GemmDesc mirrors gpurt_gemm_desc (1.1).
type GemmDesc struct {
	StructSize  uint64   `c:"struct_size"`
	AType       int32    `c:"a_type"`
	BType       int32    `c:"b_type"`
	CType       int32    `c:"c_type"`
	DType       int32    `c:"d_type"`
	ComputeType int32    `c:"compute_type"`
	Epilogue    int32    `c:"epilogue"`
	BiasType    int32    `c:"bias_type"`
	TransA      uint8    `c:"trans_a"`
	TransB      uint8    `c:"trans_b"`
	Reserved    [2]uint8 `c:"reserved"`
	M           uint64   `c:"m"`
	N           uint64   `c:"n"`
	K           uint64   `c:"k"`
	LDA         uint64   `c:"lda"`
	LDB         uint64   `c:"ldb"`
	LDC         uint64   `c:"ldc"`
	LDD         uint64   `c:"ldd"`
	BatchCount  uint64   `c:"batch_count"`
	StrideA     int64    `c:"stride_a"`
	StrideB     int64    `c:"stride_b"`
	StrideC     int64    `c:"stride_c"`
	StrideD     int64    `c:"stride_d"`
	AlignA      uint32   `c:"align_a"`
	AlignB      uint32   `c:"align_b"`
	AlignC      uint32   `c:"align_c"`
	AlignD      uint32   `c:"align_d"`
}

// GemmRunArgs mirrors gpurt_gemm_run_args (1.1).
type GemmRunArgs struct {
	StructSize      uint64  `c:"struct_size"`
	A               Buffer  `c:"a"`
	AOffset         uint64  `c:"a_offset"`
	B               Buffer  `c:"b"`
	BOffset         uint64  `c:"b_offset"`
	C               Buffer  `c:"c"`
	COffset         uint64  `c:"c_offset"`
	D               Buffer  `c:"d"`
	DOffset         uint64  `c:"d_offset"`
	Bias            Buffer  `c:"bias"`
	BiasOffset      uint64  `c:"bias_offset"`
	ScaleA          Buffer  `c:"scale_a"`
	ScaleAOffset    uint64  `c:"scale_a_offset"`
	ScaleB          Buffer  `c:"scale_b"`
	ScaleBOffset    uint64  `c:"scale_b_offset"`
	ScaleD          Buffer  `c:"scale_d"`
	ScaleDOffset    uint64  `c:"scale_d_offset"`
	Alpha           float64 `c:"alpha"`
	Beta            float64 `c:"beta"`
	Workspace       Buffer  `c:"workspace"`
	WorkspaceOffset uint64  `c:"workspace_offset"`
	WorkspaceSize   uint64  `c:"workspace_size"`
}

// Graph operation kinds (GPURT_GRAPH_OP_*, 1.3).
const (
	GraphOpLaunch      = 1
	GraphOpGemm        = 2
	GraphOpCopy        = 3
	GraphOpMemset      = 4
	GraphOpEventRecord = 5
	GraphOpEventWait   = 6
	GraphOpCall        = 7 // 1.7: Slot + Object + Args
)

// How graph_update applied a change (GPURT_GRAPH_UPDATE_*, 1.3).
const (
	GraphUpdateNone           = 0
	GraphUpdatePatched        = 1
	GraphUpdateExecUpdate     = 2
	GraphUpdateReinstantiated = 3
)

// GraphItem mirrors gpurt_graph_item (1.3).
type GraphItem struct {
	StructSize uint64       `c:"struct_size"`
	Kind       int32        `c:"kind"`
	Reserved   uint32       `c:"reserved"`
	Kernel     Kernel       `c:"kernel"`
	Launch     *LaunchArgs  `c:"launch"`
	Plan       GemmPlan     `c:"plan"`
	Gemm       *GemmRunArgs `c:"gemm"`
	Copy       *CopyArgs    `c:"copy"`
	Memset     *MemsetArgs  `c:"memset"`
	Event      Event        `c:"event"`
	// 1.7 (CALL items)
	Slot   uint64         `c:"slot"`   // offsetof(gpurt_api, <slot>)
	Object uintptr        `c:"object"` // the handle the slot takes, or 0
	Args   unsafe.Pointer `c:"args"`   // the slot's argument struct (Go memory)
}

// GraphCreateArgs mirrors gpurt_graph_create_args (1.3).
type GraphCreateArgs struct {
	StructSize uint64     `c:"struct_size"`
	Device     uint32     `c:"device"`
	Flags      uint32     `c:"flags"`
	Count      uint64     `c:"count"`
	Items      *GraphItem `c:"items"`
	ItemSize   uint64     `c:"item_size"`
}

// GraphUpdateArgs mirrors gpurt_graph_update_args (1.3).
type GraphUpdateArgs struct {
	StructSize uint64     `c:"struct_size"`
	Count      uint64     `c:"count"`
	Indices    *uint64    `c:"indices"`
	Items      *GraphItem `c:"items"`
	ItemSize   uint64     `c:"item_size"`
	Applied    int32      `c:"applied"`
	Reserved   uint32     `c:"reserved"`
}

// API mirrors gpurt_api: the function table, every slot a C function
// pointer. Slots after a plugin's struct_size must not be read.
type API struct {
	StructSize uint64 `c:"struct_size"`
	ABIMajor   uint32 `c:"abi_major"`
	ABIMinor   uint32 `c:"abi_minor"`
	// 1.0
	ErrorGet          uintptr `c:"error_get"`
	ErrorDestroy      uintptr `c:"error_destroy"`
	PluginInfo        uintptr `c:"plugin_info"`
	Probe             uintptr `c:"probe"`
	Shutdown          uintptr `c:"shutdown"`
	RuntimeCreate     uintptr `c:"runtime_create"`
	RuntimeDestroy    uintptr `c:"runtime_destroy"`
	RuntimeStats      uintptr `c:"runtime_stats"`
	RuntimeControl    uintptr `c:"runtime_control"`
	DeviceCount       uintptr `c:"device_count"`
	DeviceInfo        uintptr `c:"device_info"`
	DeviceSynchronize uintptr `c:"device_synchronize"`
	BufferAlloc       uintptr `c:"buffer_alloc"`
	BufferFree        uintptr `c:"buffer_free"`
	HostAlloc         uintptr `c:"host_alloc"`
	HostFree          uintptr `c:"host_free"`
	Copy              uintptr `c:"copy"`
	Memset            uintptr `c:"memset"`
	StreamCreate      uintptr `c:"stream_create"`
	StreamDestroy     uintptr `c:"stream_destroy"`
	StreamSynchronize uintptr `c:"stream_synchronize"`
	StreamQuery       uintptr `c:"stream_query"`
	StreamWaitEvent   uintptr `c:"stream_wait_event"`
	EventCreate       uintptr `c:"event_create"`
	EventDestroy      uintptr `c:"event_destroy"`
	EventRecord       uintptr `c:"event_record"`
	EventQuery        uintptr `c:"event_query"`
	EventSynchronize  uintptr `c:"event_synchronize"`
	EventElapsed      uintptr `c:"event_elapsed"`
	ModuleLoad        uintptr `c:"module_load"`
	ModuleUnload      uintptr `c:"module_unload"`
	KernelGet         uintptr `c:"kernel_get"`
	KernelInfo        uintptr `c:"kernel_info"`
	Launch            uintptr `c:"launch"`
	// 1.1
	GemmPlanCreate  uintptr `c:"gemm_plan_create"`
	GemmPlanDestroy uintptr `c:"gemm_plan_destroy"`
	GemmRun         uintptr `c:"gemm_run"`
	// 1.2
	LaunchBatch uintptr `c:"launch_batch"`
	// 1.3
	GraphCreate  uintptr `c:"graph_create"`
	GraphLaunch  uintptr `c:"graph_launch"`
	GraphUpdate  uintptr `c:"graph_update"`
	GraphDestroy uintptr `c:"graph_destroy"`
	// 1.4
	QuantMatmul uintptr `c:"quant_matmul"`
	GroupedGemm uintptr `c:"grouped_gemm"`
	// 1.5 (attention over a paged KV cache)
	KVAppend         uintptr `c:"kv_append"`
	AttentionCreate  uintptr `c:"attention_create"`
	AttentionDestroy uintptr `c:"attention_destroy"`
	AttentionPlan    uintptr `c:"attention_plan"`
	AttentionRun     uintptr `c:"attention_run"`
	// 1.6 (collectives)
	CommUniqueID uintptr `c:"comm_unique_id"`
	CommCreate   uintptr `c:"comm_create"`
	CommDestroy  uintptr `c:"comm_destroy"`
	CommAbort    uintptr `c:"comm_abort"`
	CommQuery    uintptr `c:"comm_query"`
	CommRun      uintptr `c:"comm_run"`
	// 1.7 (any recordable slot in a graph)
	GraphRecordable uintptr `c:"graph_recordable"`
}

// NegotiateArgs mirrors gpurt_negotiate_args.
type NegotiateArgs struct {
	StructSize     uint64    `c:"struct_size"`
	HostABIMajor   uint32    `c:"host_abi_major"`
	HostABIMinor   uint32    `c:"host_abi_minor"`
	PluginABIMajor uint32    `c:"plugin_abi_major"`
	PluginABIMinor uint32    `c:"plugin_abi_minor"`
	API            uintptr   `c:"api"`
	Message        [256]byte `c:"message"`
}

// CString returns the NUL-terminated prefix of a fixed char array.
func CString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
