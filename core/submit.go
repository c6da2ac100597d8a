// SPDX-License-Identifier: Apache-2.0

package core

import (
	"unsafe"

	"github.com/metrale/gpurt/core/internal/bind"
)

// The call-or-record funnel. Every operation that enqueues work on a
// stream checks its arguments, resolves its handles into the slot's own
// argument struct (as the eager call takes it), and ends in one
// Stream.submit: on an ordinary stream that calls the slot through the
// generated bind.Plugin.Submit; on the capturing stream a capture function
// is given, it appends the same call to the recording (graph.go) as a
// graph item, taking holds of what the item uses. No operation has graph
// code of its own: which slots a graph records is decided in one place,
// recording.record.

// submission is one stream operation in the ABI's form: which slot it
// calls, with what, and what a graph that records it must hold. It lives
// on the caller's stack; the eager path allocates nothing.
type submission struct {
	slot bind.Slot
	// obj is the handle the slot takes besides the runtime and the
	// stream: the kernel, GEMM plan, attention or event (0 when none).
	obj uintptr
	// args is the slot's argument struct (its stream field, where it has
	// one, is the stream's handle: 0 on a capturing stream); nil when the
	// slot takes none. A recording copies it.
	args unsafe.Pointer
	size uintptr // bytes of *args

	// What a recording holds until the graph is closed (the eager call
	// holds uses of the same objects for its duration, taken by the op):
	opr   []gemmOperand // resolved operands: their buffers
	lives [2]*life      // other objects (a copy's two ends, an event, an attention)

	// Kinds with more to record:
	kernel *Kernel    // a launch: SetArg's kernel and its arguments
	kargs  []Arg      // a launch's arguments (holds per argument, for SetArg)
	plan   *planEntry // a GEMM: the op-cache plan the graph references
	// Metrics of the eager call (metrics.go): counted when timed is set,
	// as a copy of bytes in direction dir when bytes is not 0. A recorded
	// call counts nothing (it has not run).
	timed  bool
	metric opKind
	dir    copyDir
	bytes  uint64

	// fix repoints the Go memory a recorded copy of args names (read
	// during an eager call only) into memory the recording keeps.
	fix func(args unsafe.Pointer, keep *[]uint64)
}

// submit calls s's operation c, or records it when s is the capturing
// stream of a Stream.Capture. The caller holds a use of s and of every
// object c names. An operation on a stream while a capture of it is in
// progress (through the *Stream Capture was called on, from any
// goroutine) is refused with ErrFailedPrecondition: it would run eagerly
// and be missing from the graph.
//
// op is a parameter of its own, not a field of c: escape analysis does
// not tell c's fields apart, and op reaches errors on the heap.
func (s *Stream) submit(op string, c *submission) error {
	if s.rec != nil {
		// The recording keeps copies of what it needs and no pointer into
		// *c or what its fields point to (recording.item copies args,
		// launch arguments and grouped GEMM counts into its own memory).
		// Escape analysis cannot see that through the recording's appends,
		// and would move every caller's argument struct to the heap: hide c
		// from it, as the runtime's noescape does.
		return s.rec.record(op, (*submission)(noescape(unsafe.Pointer(c))))
	}
	if s.capturing.Load() {
		return s.capturedErr(op)
	}
	rt := s.dev.rt
	if !c.timed {
		return rt.p.Submit(op, c.slot, rt.h, s.h, c.obj, c.args)
	}
	m := &rt.metrics
	t0 := m.begin()
	err := rt.p.Submit(op, c.slot, rt.h, s.h, c.obj, c.args)
	if c.bytes != 0 {
		return m.copy(c.metric, c.dir, c.bytes, t0, err)
	}
	return m.end(c.metric, t0, err)
}

// capturedErr is the error of a call on a stream that a Stream.Capture is
// recording, through the stream rather than the capture function's view.
func (s *Stream) capturedErr(op string) error {
	return errf(codeFailedPrecondition, op, "the stream is being captured by Stream.Capture: enqueue on the stream given to the capture function (work enqueued here would run now and be missing from the graph)")
}

// enterSync begins a use of s for a synchronous call (Synchronize, Query,
// Close, a LaunchBatch, a collective): none can be recorded, so the
// capturing stream and a stream being captured refuse it.
func (s *Stream) enterSync(op string) error {
	if err := s.enter(op); err != nil {
		return err
	}
	if err := s.syncErr(op); err != nil {
		s.exit()
		return err
	}
	return nil
}

// syncErr is nil when s may run a call that cannot be recorded.
func (s *Stream) syncErr(op string) error {
	if s.rec != nil {
		return s.rec.refuseSync(op)
	}
	if s.capturing.Load() {
		return s.capturedErr(op)
	}
	return nil
}

// noescape hides p from escape analysis (the identity function to the
// machine). Only for a pointer whose target the callee retains nothing
// of: see Stream.submit.
//
//go:nosplit
func noescape(p unsafe.Pointer) unsafe.Pointer {
	x := uintptr(p)
	return *(*unsafe.Pointer)(unsafe.Pointer(&x))
}

// sticky makes the error of an operation on the capturing stream the
// capture's error as well, whether it arose in the checks before
// Stream.submit or in the recording: a capture whose function drops an
// error builds nothing (a graph would silently miss the operation).
// Every stream operation defers it after entering the stream.
func (s *Stream) sticky(err *error) {
	if *err != nil && s.rec != nil {
		s.rec.fail(*err)
	}
}
