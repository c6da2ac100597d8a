// SPDX-License-Identifier: Apache-2.0

// Package bridge is how the LLM family packages under core (core/matmul,
// ...) reach core's internals without widening core's public API: core
// fills Core when it initializes, and a family package calls the
// functions below, which keep its call path free of allocations.
//
// A family operation on a stream is, in order: Begin (a use of the
// stream, and its plugin), Operand for each region (resolved, checked and
// held), the argument struct filled from the operands, Submit (core's
// call-or-record funnel: an eager call, or a graph item on a capturing
// stream), and Finish, deferred right after a successful Begin (the
// capture's sticky error, then the uses given back).
package bridge

import (
	"unsafe"

	"github.com/hashicorp/go-hclog"

	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/internal/abi"
)

// Operand is a resolved region: its buffer (a *core.Buffer; nil when the
// operand is absent), the buffer's plugin handle, the offset and length.
type Operand struct {
	Buf    any
	H      abi.Buffer
	Off, N uint64
	held   bool
}

// Handle is the operand's plugin handle and offset (0, 0 when absent).
func (o *Operand) Handle() (abi.Buffer, uint64) {
	if o.Buf == nil {
		return 0, 0
	}
	return o.H, o.Off
}

// Held marks the operand as holding a use of its buffer (core sets it).
func (o *Operand) SetHeld(v bool) { o.held = v }

// IsHeld reports whether the operand holds a use of its buffer.
func (o *Operand) IsHeld() bool { return o.held }

// MaxOperands is the most operands one operation has.
const MaxOperands = 11

// Metric names the counter and latency histogram of core's metrics an
// operation's eager calls count in (MetricNone: none).
type Metric uint8

// The metrics of the family operations.
const (
	MetricNone Metric = iota
	MetricQuantMatmul
	MetricGroupedGemm
	MetricAttentionRun
	MetricCommRun
)

// Op is one stream operation's state, on its caller's stack.
type Op struct {
	S      any    // the *core.Stream
	Name   string // the operation, as in errors ("quant_matmul")
	Metric Metric // what its eager calls count in
	// Hold is an object's lifetime (from NewLife) that a recording of the
	// operation holds until the graph is closed (the attention of a run);
	// nil for none.
	Hold unsafe.Pointer
	// Set by Begin: the stream's plugin and runtime handle.
	P   *bind.Plugin
	RT  abi.Runtime
	Opr [MaxOperands]Operand
}

// Core is filled by package core at init.
var Core struct {
	Begin   func(c *Op) error
	Operand func(c *Op, i int, name string, r unsafe.Pointer, need, align uint64) error
	Submit  func(c *Op, slot bind.Slot, obj uintptr, args unsafe.Pointer, size uintptr, fix func(unsafe.Pointer, *[]uint64)) error
	Finish  func(c *Op, err *error)

	// Devices and objects with a plugin handle.
	DeviceBegin func(d any, op string) (p *bind.Plugin, rt abi.Runtime, index uint32, err error)
	DeviceEnd   func(d any)
	NewLife     func(d any, what string) (life unsafe.Pointer, leak func())
	Acquire     func(life unsafe.Pointer) bool
	Release     func(life unsafe.Pointer)
	Destroy     func(d any, life unsafe.Pointer, op, what string, free func() error) error
	// Region resolves the region *r (a *core.Region): its device (a
	// *core.Device), its buffer (a *core.Buffer), offset and length.
	Region func(op string, r unsafe.Pointer) (dev, buf any, off, n uint64, err error)

	// Objects of a runtime, not of one device (communicators).
	RuntimeBegin func(rt any, op string) (p *bind.Plugin, h abi.Runtime, err error)
	RuntimeEnd   func(rt any)
	DeviceOf     func(d any) (rt any, index uint32, ok bool)
	StreamOf     func(s any) (dev any, h abi.Stream, life unsafe.Pointer, ok bool)
	Capturing    func(s any, op string) error
	BufferOf     func(b any) (h abi.Buffer, life unsafe.Pointer)
	MetricBegin  func(rt any) int64
	MetricEnd    func(rt any, m Metric, t0 int64, err error) error

	// Error makes a *core.Error of the code whose sentinel is kind.
	Error func(kind error, op, msg string) error
	// Within is err (a *core.Error) as an error of op with prefix before
	// its message, keeping its code.
	Within func(op, prefix string, err error) error

	// DevicePool is device d's memory pool (package core/pool), made by
	// make with the runtime's budget for d (Config.PoolBudget resolved:
	// bytes, and what set them) at first use; nil for a nil or zero-value
	// device, or when make is nil and the device has none yet.
	DevicePool func(d any, make func(d any, budget uint64, from string) any) any
}

// Pool is filled by package core/pool at init: what core calls of a
// device's memory pool (p is what Core.DevicePool's make returned).
var Pool struct {
	// Trim returns the pool's cached blocks to the plugin (Runtime.Trim).
	Trim func(p any)
}

// Within is err (a *core.Error) as an error of op with prefix before its
// message ("ordering a cached block: "), keeping its code.
func Within(op, prefix string, err error) error { return Core.Within(op, prefix, err) }

// DevicePool is device d's memory pool (see Core.DevicePool).
func DevicePool(d any, make func(d any, budget uint64, from string) any) any {
	return Core.DevicePool(d, make)
}

// Error is a *core.Error of op with message msg and the code whose
// sentinel (core.ErrInvalidArgument, core.ErrOutOfRange, ...) is kind;
// an error that is no sentinel gives the internal code.
func Error(kind error, op, msg string) error { return Core.Error(kind, op, msg) }

// RuntimeBegin begins a use of rt (a *core.Runtime) for op: its plugin and
// handle; end it with RuntimeEnd. A nil, zero or closed runtime is an
// error naming op.
func RuntimeBegin(rt any, op string) (*bind.Plugin, abi.Runtime, error) {
	return Core.RuntimeBegin(rt, op)
}

// RuntimeEnd ends a use begun by RuntimeBegin.
func RuntimeEnd(rt any) { Core.RuntimeEnd(rt) }

// DeviceOf is device d's runtime (a *core.Runtime) and index; ok is false
// for a nil or zero-value device.
func DeviceOf(d any) (rt any, index uint32, ok bool) { return Core.DeviceOf(d) }

// StreamOf is stream s's device (a *core.Device), plugin handle and
// lifetime (for Acquire); ok is false for a nil or zero-value stream.
func StreamOf(s any) (dev any, h abi.Stream, life unsafe.Pointer, ok bool) { return Core.StreamOf(s) }

// Capturing is nil unless s is capturing (or recording) a graph: then the
// error op gets for an operation that is not recorded.
func Capturing(s any, op string) error { return Core.Capturing(s, op) }

// BufferOf is buffer b's plugin handle and lifetime (for Acquire); b is a
// *core.Buffer from Region.
func BufferOf(b any) (abi.Buffer, unsafe.Pointer) { return Core.BufferOf(b) }

// MetricBegin is the start time of a timed operation of runtime rt (0
// when op timing is off), for MetricEnd.
func MetricBegin(rt any) int64 { return Core.MetricBegin(rt) }

// MetricEnd counts a successful operation in m (and its latency when t0 is
// not 0) and returns err unchanged.
func MetricEnd(rt any, m Metric, t0 int64, err error) error { return Core.MetricEnd(rt, m, t0, err) }

// DeviceBegin begins a use of device d (a *core.Device) and its runtime
// for op; end it with DeviceEnd.
func DeviceBegin(d any, op string) (*bind.Plugin, abi.Runtime, uint32, error) {
	return Core.DeviceBegin(d, op)
}

// DeviceEnd ends a use begun by DeviceBegin.
func DeviceEnd(d any) { Core.DeviceEnd(d) }

// NewLife is the lifetime of a new object of device d holding a plugin
// handle, as core's own objects have (uses, holds by graphs, a dead bit),
// and leak, to run from a cleanup of the object: it logs a leak when the
// object was not closed.
func NewLife(d any, what string) (unsafe.Pointer, func()) { return Core.NewLife(d, what) }

// Acquire begins a use of the object; false when it is closed.
func Acquire(life unsafe.Pointer) bool { return Core.Acquire(life) }

// Release ends a use begun by Acquire.
func Release(life unsafe.Pointer) { Core.Release(life) }

// Destroy closes the object (waiting for its uses, refused while a graph
// holds it) and frees its handle with free, as core's Close methods do.
func Destroy(d any, life unsafe.Pointer, op, what string, free func() error) error {
	return Core.Destroy(d, life, op, what, free)
}

// Region resolves the region r points to (a *core.Region): its device,
// its buffer, its offset in the buffer and its length.
func Region(op string, r unsafe.Pointer) (dev, buf any, off, n uint64, err error) {
	return Core.Region(op, Hide(r))
}

// Begin begins a use of c.S (a *core.Stream) for operation c.Name and
// sets c.P and c.RT; on success defer Finish(c, &err).
func Begin(c *Op) error { return Core.Begin(hide(c)) }

// OperandOf resolves the region *r (r is a *core.Region) as operand i,
// named name in errors: it must be on the stream's device, start at an
// offset aligned to align and hold need bytes; its buffer is held until
// Finish. A nil region is an error naming the operand.
func OperandOf(c *Op, i int, name string, r unsafe.Pointer, need, align uint64) error {
	return Core.Operand(hide(c), i, name, Hide(r), need, align)
}

// Submit ends the operation in core's call-or-record funnel: the slot is
// called with c's stream, obj and the argument struct args (size bytes),
// or recorded when the stream is a capturing one (fix repoints Go memory
// the recorded copy names, as for core's own operations).
func Submit(c *Op, slot bind.Slot, obj uintptr, args unsafe.Pointer, size uintptr, fix func(unsafe.Pointer, *[]uint64)) error {
	return Core.Submit(hide(c), slot, obj, Hide(args), size, fix)
}

// Finish makes *err the capture's error on a capturing stream, gives back
// the operands' uses and ends the use of the stream.
func Finish(c *Op, err *error) { Core.Finish(hide(c), (*error)(Hide(unsafe.Pointer(err)))) }

func hide(c *Op) *Op { return (*Op)(Hide(unsafe.Pointer(c))) }

// Hide hides p from escape analysis (the identity function to the
// machine): the functions of Core retain nothing of what their arguments
// point to, but the compiler cannot see through a function variable and
// would move every caller's argument structs to the heap.
//
//go:nosplit
func Hide(p unsafe.Pointer) unsafe.Pointer {
	x := uintptr(p)
	return *(*unsafe.Pointer)(unsafe.Pointer(&x))
}

// Diag is filled by package core at init (Pool and DevicePool by package
// core/pool): what package core/inspect reads of a runtime (rt is a
// *core.Runtime, cfg a core.Config).
var Diag struct {
	Metrics       func(rt any) diag.Metrics
	SetOpTiming   func(rt any, on bool)
	OpCache       func(rt any) diag.OpCache
	Stats         func(rt any) (diag.Stats, error)
	Report        func(rt any) *diag.Report
	Logger        func(rt any) hclog.Logger
	PluginPath    func(rt any) string
	PluginVersion func(rt any) (version string, abiMajor, abiMinor uint32)
	Control       func(rt any, key string, value int64) error
	Probe         func(cfg any) (*diag.Report, error)
	Backends      func(cfg any) ([]string, error)
	Pool          func(p any) diag.Pool // p is a *pool.Pool
	DevicePool    func(d any) (diag.Pool, bool)
	HostHeap      func(rt any) diag.Heap
	GraphUpdate   func(g any) string // g is a *core.Graph
	Kernel        func(k any) diag.Kernel
	DeviceInfo    func(d any) (any, error) // a core.DeviceInfo
}
