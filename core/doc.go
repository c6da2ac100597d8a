// SPDX-License-Identifier: Apache-2.0

// Package core is the Go API of gpurt: open a runtime on the best plugin
// the host can run, and work with its devices — device memory, pinned host
// memory, streams, events, kernels and GEMM.
//
// # Layering
//
//	user code -> core (concrete types: Runtime, Device, Buffer, Stream, ...)
//	          -> core/internal/bind (the plugin's table, errors) and ffi (the call)
//	          -> abi (gpurt.h, mirrored in Go) -> plugin (cuda, metal, mock)
//
// User code never sees a uintptr, a purego call or a C struct. The loader
// (core/internal/loader) finds and chooses the plugin; inspect.Probe and
// inspect.Report show what it decided. What a runtime says about itself
// (counters, a device's free memory now, a kernel's parameters) is
// package core/inspect's, so that this package is what a program needs to
// run work.
//
// # Lifetimes
//
// Open returns a Runtime; everything made from it (buffers, host buffers,
// host-heap slices, streams, events, modules) is freed explicitly with
// Free, Close or Unload, and all of it at once by Runtime.Close. A
// runtime.AddCleanup on buffers, host memory and streams logs a leak when
// one is garbage collected unfreed: it reports, it is not the plan (and
// holds the runtime weakly, so a closed runtime is collected). A
// LaunchBatch garbage collected before Submit or Reset gives back what it
// held (its buffers and modules become free-able again) and logs a leak.
// On a lost device, Trim and Device.Synchronize destroy the cached GEMM
// plans at once (no work can still use them).
//
// Synchronous copies (CopyFromHost, CopyToHost) take Go slices and return
// when done; asynchronous copies (Stream.CopyFromPinned, CopyToPinned)
// take only pinned memory owned by the plugin (HostBuffer: an allocation
// of its own from Runtime.AllocHost, or a piece of the runtime's host heap
// from Runtime.AllocHostFromHeap), because C must never hold a Go pointer
// after a call returns. Large
// synchronous copies are staged through the pinned host heap in chunks,
// overlapping the memmove of one chunk with the DMA of the previous one.
//
// # Concurrency
//
// Every type is safe for concurrent use by any number of goroutines,
// except LaunchBatch, which one goroutine fills and submits at a time (its
// doc says so).
// Each object that owns a plugin handle carries a use count with a dead
// bit (an atomic word, no lock on the call path): a call acquires the
// runtime and each object it passes to the plugin, and releases them when
// the plugin returns. Free, Close and Unload set the dead bit and wait for
// the uses in flight before destroying the handle, so a racing use either
// completes first or fails with an error wrapping ErrFreed (buffers, host
// memory) or ErrClosed (runtime, stream, event, module); a freed handle is
// never passed to C. After Runtime.Close every call on anything of the
// runtime returns an error wrapping ErrClosed.
//
// Work on one stream runs in the order the enqueuing calls returned; work
// on different streams is ordered only through events
// (Event.Record, Stream.WaitEvent). Calls with the default ordering
// (synchronous copies and memsets, Copy) run after all work submitted
// earlier to any stream of the device. What the device does with memory
// that enqueued work still uses is the caller's business: synchronize
// before freeing memory, or before reading a pinned destination (Buffer,
// HostBuffer Free wait for the device's queued work).
//
// # Graphs
//
// Stream.Capture records what its function enqueues on the capturing
// stream it is given into a Graph, which Graph.Launch replays with one
// call into the plugin. Every stream operation ends in one call-or-record
// step, so the rules are the same for all of them: an operation the
// plugin can record is recorded (launches, the built-in kernels included,
// GEMMs, copies, memsets and events; on ABI 1.7 plugins also what the
// plugin marks recordable), any other is refused with an error wrapping
// ErrFailedPrecondition that also fails the capture. While a capture
// lasts, work enqueued on the captured stream itself (not the capturing
// view) and a nested Capture of it are refused with
// ErrFailedPrecondition, and synchronous calls on the device are refused.
// A graph holds what its operations use until Graph.Close; a capture that
// fails or panics gives its holds back, and so does a Graph that is
// garbage collected without Close (with a leak warning). Stream.Capture
// states the rules in full.
//
// Misuse returns an error, never a crash: a freed buffer, a double free, an
// out-of-range copy, memset or view, launch arguments of the wrong kind or
// count, a buffer of another device or runtime, a closed runtime or
// stream, a zero size (a zero-length copy is a no-op), an allocation larger
// than the device (ErrOutOfMemory naming the size and the memory free), a
// nil slice, a nil or zero-value receiver or argument (&Buffer{},
// a *Device from a failed Runtime.Device, a nil func: an error wrapping
// ErrInvalidArgument; accessors such as Len or Name return zero values).
// HostBuffer.Bytes returns nil once Free or Close has
// begun, never memory that is gone or reused. A zero-length View as a
// kernel argument, a Grid1D with no grid (more blocks than a uint32
// holds), a negative GEMM leading dimension and a GEMM operand extent
// beyond 64 bits are errors, never a silently different launch. Cheap checks run in Go; the
// plugin checks the rest.
//
// # Performance
//
// The call path allocates nothing: argument structs live on the stack and
// cross through the generated methods of core/internal/bind (one per
// function-table slot), which call core/internal/ffi. A LaunchBatch (Stream.NewLaunchBatch)
// enqueues many launches with one crossing (ABI 1.2's launch_batch; one
// launch per item on older plugins), so a decode step's kernels cost one
// boundary crossing, not one each. Stream.Capture records a step's
// launches, GEMMs, copies, memsets and event waits into a Graph (ABI 1.3):
// the plugin builds the device graph inside one call, Graph.Launch replays
// it with one crossing and no allocation, and Graph.SetArg changes kernel
// arguments between replays. Launch packs up to 32 arguments in a
// fixed array; a small synchronous copy and a GEMM with a warm op cache
// allocate nothing either. The op cache (GEMM plans keyed by shape, dtype,
// layout, alignment and device; an LRU bounded by GPURT_OPCACHE_SIZE),
// the host heap and the device memory pool (package core/pool:
// stream-ordered reuse of freed blocks, a budget from Config.PoolBudget)
// live in Go, so they behave the same on every plugin.
//
// # The LLM families
//
// The operations of one audience live in their own packages under core,
// over an internal bridge into this package (the same stream uses, holds
// and call-or-record step as core's own operations):
//
//   - core/matmul: matmul.Quant (ABI 1.4) multiplies activations by
//     weights in MLX's int8 affine format (package quant converts weights,
//     bit-exact with mlx.core.quantize); matmul.Grouped runs the per-expert
//     GEMMs of a mixture-of-experts layer, bf16 or fp8 with DeepSeek-style
//     block scales, in one call.
//   - core/attention: attention over a paged KV cache (ABI 1.5) in
//     FlashInfer's layout: a KVCache holds the pages, a PageTable says which
//     pages each request owns, KVCache.Append writes new K/V rows, and an
//     Attention (attention.New, one per shape) is planned once per step
//     (Attention.Plan) and run once per layer (Attention.Run).
//
// Both check their arguments in Go, allocate nothing on a warm call, and
// are recorded in graphs on plugins of ABI 1.7.
//
// # Several GPUs
//
// Copy and Stream.CopyDevice copy between devices of one runtime (peer
// copies; CopyDevice on a stream of either device). Runtime.FindDevice
// names a device by index, UUID or PCI bus id. Collectives (ABI 1.6) are
// NCCL's and live in package core/collective: a collective.Comm
// (collective.New for one process driving several devices, NewID + Join
// for one process per GPU) runs groups of operations with Comm.Run, one
// plugin call per group; Err, Abort and Close handle a broken one. A group
// of up to 16 ops allocates nothing. The mock is the float64 reference across its devices.
//
// # Adding an operation
//
// CONTRIBUTING.md, at the root of the repository, lists every file that
// adding an ABI operation or a built-in kernel touches, in order (header,
// Go mirror and generated bindings, csrc, the three plugins, the C ABI
// suite, the method here, the conformance checks, versions, docs), and the
// tests that fail when a mirror is forgotten. The method itself lives in
// one file of this package: enter the runtime and acquire each object
// passed, check in Go what is cheap, make one call of the generated
// rt.p.<Slot> method (an *Error matching ErrUnsupported when the plugin's
// ABI minor is too old), return its error unchanged.
package core
