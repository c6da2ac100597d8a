// SPDX-License-Identifier: Apache-2.0

//go:build cgo

package cgobaseline

/*
#cgo CFLAGS: -I${SRCDIR}/../../abi -O2
#cgo linux LDFLAGS: -ldl
#include <stdlib.h>
#include "baseline.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Plugin is a plugin loaded by C: its negotiated table, a runtime made
// with the options given to Open, and one stream on device 0. Not safe
// for concurrent Close; StreamQuery may be called from many goroutines.
type Plugin struct {
	p C.gb_plugin
}

// Open loads the plugin at path (an absolute path; dlopen of a library the
// core already loaded returns the same one), negotiates ABI
// GPURT_ABI_MAJOR.GPURT_ABI_MINOR, creates a runtime and a stream.
func Open(path string) (*Plugin, error) { return OpenOptions(path, "") }

// OpenOptions is Open with the runtime's options ("key=value;...", as
// core.Config.PluginOptions; "" for none).
func OpenOptions(path, options string) (*Plugin, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var copts *C.char
	if options != "" {
		copts = C.CString(options)
		defer C.free(unsafe.Pointer(copts))
	}
	pl := &Plugin{}
	if err := cCall("cgobaseline: ", func(msg *C.char, n C.size_t) C.int { return C.gb_open(cpath, copts, &pl.p, msg, n) }); err != nil {
		return nil, err
	}
	return pl, nil
}

// msgLen is the size of the message buffers the C side writes a failure
// into.
const msgLen = 512

// cCall calls f with a message buffer: f's non-zero return is a failure,
// the error prefix and the message f wrote.
func cCall(prefix string, f func(msg *C.char, n C.size_t) C.int) error {
	var msg [msgLen]C.char
	if f(&msg[0], msgLen) == 0 {
		return nil
	}
	return fmt.Errorf("%s%s", prefix, C.GoString(&msg[0]))
}

// cMessage is the error prefix and the message f writes about the
// operation op (passed to f as a C string).
func cMessage(prefix, op string, f func(op, msg *C.char, n C.size_t)) error {
	cop := C.CString(op)
	defer C.free(unsafe.Pointer(cop))
	var msg [msgLen]C.char
	f(cop, &msg[0], msgLen)
	return fmt.Errorf("%s%s", prefix, C.GoString(&msg[0]))
}

// StreamQuery calls the table's stream_query on the idle stream: one cgo
// call into C, which calls the slot. It reports whether the stream was
// idle.
func (p *Plugin) StreamQuery() bool {
	return C.gb_stream_query(p.p.api, p.p.rt, p.p.s) == 0
}

// StreamQueryLoop calls stream_query n times inside one cgo call (the
// cost of the C function alone) and returns how many found work pending.
func (p *Plugin) StreamQueryLoop(n int) int {
	return int(C.gb_stream_query_loop(p.p.api, p.p.rt, p.p.s, C.int(n)))
}

// failure turns a plugin error into a Go error and frees it.
func (p *Plugin) failure(e *C.gpurt_error, op string) error {
	if e == nil {
		return nil
	}
	return cMessage("cgobaseline: ", op, func(op, msg *C.char, n C.size_t) { C.gb_error_message(p.p.api, e, op, msg, n) })
}

// PrepareLaunch loads the plugin's built-in module from C, gets fill_f32
// and allocates the 256-byte buffer it fills (once).
func (p *Plugin) PrepareLaunch() error {
	return cCall("cgobaseline: ", func(msg *C.char, n C.size_t) C.int { return C.gb_prepare_launch(&p.p, msg, n) })
}

// LaunchFill enqueues fill_f32(y, 1.0, n = 1) on the stream (grid 1,
// block 1): one cgo call into C, which packs the three arguments on its
// stack and calls the launch slot. PrepareLaunch must have succeeded.
func (p *Plugin) LaunchFill() error {
	return p.failure(C.gb_launch_fill(p.p.api, p.p.rt, p.p.s, p.p.fill, p.p.fill_buf), "launch")
}

// LaunchFillLoop enqueues n such launches inside one cgo call (the cost
// of the C side alone); it stops at the first error.
func (p *Plugin) LaunchFillLoop(n int) error {
	return p.failure(C.gb_launch_fill_loop(p.p.api, p.p.rt, p.p.s, p.p.fill, p.p.fill_buf, C.int(n)), "launch")
}

// HasLaunchBatch reports whether the plugin's table has the 1.2
// launch_batch slot.
func (p *Plugin) HasLaunchBatch() bool { return C.gb_has_launch_batch(p.p.api) != 0 }

// MaxLaunchBatch is the largest count LaunchFillBatch takes.
const MaxLaunchBatch = C.GB_BATCH_MAX

// LaunchFillBatch enqueues count (1..MaxLaunchBatch) of LaunchFill's
// launches with one cgo call into C, which calls the launch_batch slot
// once. Not safe for concurrent use (the items live in a static array).
// An error wrapping ErrUnsupported means the plugin lacks the slot.
func (p *Plugin) LaunchFillBatch(count int) error {
	if !p.HasLaunchBatch() {
		return fmt.Errorf("cgobaseline: the plugin has no launch_batch slot (ABI 1.2): %w", ErrUnsupported)
	}
	if count < 1 || count > MaxLaunchBatch {
		return fmt.Errorf("cgobaseline: a batch of %d launches (1..%d)", count, MaxLaunchBatch)
	}
	return p.failure(C.gb_launch_fill_batch(p.p.api, p.p.rt, p.p.s, p.p.fill, p.p.fill_buf, C.int(count)), "launch_batch")
}

// Synchronize waits for the stream's work.
func (p *Plugin) Synchronize() error {
	return p.failure(C.gb_synchronize(p.p.api, p.p.rt, p.p.s), "stream_synchronize")
}

// PrepareGemm creates, from C, the plan of a bf16 GEMM with f32
// accumulation and op(A) = A^T (A stored k x m, B k x n, D m x n, tightly
// packed, 256-aligned, beta 0, no epilogue: the descriptor the core
// builds for the same Stream.Gemm), allocates A, B and D and copies a
// (2*k*m bytes) and b (2*k*n bytes) into A and B. An error wrapping
// ErrUnsupported means the plugin has no GEMM or refuses the descriptor.
func (p *Plugin) PrepareGemm(m, n, k int, a, b []byte) error {
	if m <= 0 || n <= 0 || k <= 0 || len(a) != 2*k*m || len(b) != 2*k*n {
		return fmt.Errorf("cgobaseline: gemm m %d n %d k %d needs %d and %d bytes of A and B, got %d and %d",
			m, n, k, 2*k*m, 2*k*n, len(a), len(b))
	}
	var msg [msgLen]C.char
	switch C.gb_prepare_gemm(&p.p, C.uint64_t(m), C.uint64_t(n), C.uint64_t(k),
		unsafe.Pointer(&a[0]), unsafe.Pointer(&b[0]), &msg[0], C.size_t(len(msg))) {
	case 0:
		return nil
	case 2:
		return fmt.Errorf("cgobaseline: %s: %w", C.GoString(&msg[0]), ErrUnsupported)
	}
	return fmt.Errorf("cgobaseline: %s", C.GoString(&msg[0]))
}

// GemmRun enqueues one run of the prepared plan (D = A^T B, alpha 1):
// one cgo call into C, which packs the run arguments on its stack and
// calls the gemm_run slot.
func (p *Plugin) GemmRun() error {
	return p.failure(C.gb_gemm_run(p.p.api, p.p.rt, p.p.s, p.p.plan, p.p.ga, p.p.gb, p.p.gd), "gemm_run")
}

// GemmRunLoop enqueues n runs inside one cgo call; it stops at the first
// error.
func (p *Plugin) GemmRunLoop(n int) error {
	return p.failure(C.gb_gemm_run_loop(p.p.api, p.p.rt, p.p.s, p.p.plan, p.p.ga, p.p.gb, p.p.gd, C.int(n)), "gemm_run")
}

// Close waits for the stream, frees what Prepare* made, and destroys the
// stream and the runtime (the library stays loaded).
func (p *Plugin) Close() {
	if p != nil {
		C.gb_close(&p.p)
	}
}
