// SPDX-License-Identifier: Apache-2.0

package core

import (
	"sync/atomic"
	"unsafe"

	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/internal/abi"
)

// Stream is an ordered queue of work on one device: copies, memsets,
// kernel launches and GEMMs enqueued on it run one after another, in the
// order the calls returned. Work on different streams is unordered unless
// ordered with events (Event.Record, Stream.WaitEvent). A Stream may be
// used by many goroutines at once; the order between their calls is the
// order in which the calls happened. Close racing with a use makes the use
// fail with ErrClosed.
type Stream struct {
	dev *Device
	h   abi.Stream
	l   *life

	// gemmMemo: plans of the op cache this stream's Gemm calls used,
	// direct-mapped by gemmMemoIndex and compared by the caller's
	// GemmDesc (see opcache.go).
	gemmMemo [1 << gemmMemoBits]atomic.Pointer[planEntry]

	// rec is set on the capturing stream Capture passes to its function:
	// Stream.submit records its operations instead of enqueueing them
	// (submit.go, graph.go).
	rec *recording
	// capturing is set while a Capture of this stream is in progress:
	// operations on the stream itself are refused (submit.go).
	capturing atomic.Bool
}

// NewStream creates a stream on the device. The caller must Close it.
func (d *Device) NewStream() (*Stream, error) {
	const op = "stream_create"
	if err := d.enter(op); err != nil {
		return nil, err
	}
	defer d.rt.exit()
	h, err := d.newStream()
	if err != nil {
		return nil, err
	}
	s := &Stream{dev: d, h: h, l: new(life)}
	watchLeak(s, d.rt, s.l, "stream", 0)
	return s, nil
}

func (d *Device) newStream() (abi.Stream, error) {
	var h abi.Stream
	err := d.rt.p.StreamCreate("stream_create", d.rt.h, d.index, &h)
	return h, err
}

// Device is the stream's device.
func (s *Stream) Device() *Device {
	if s == nil {
		return nil
	}
	return s.dev
}

// enter begins a use of the stream (and its runtime).
func (s *Stream) enter(op string) error {
	if !s.ok() {
		return errInvalid(op, "stream")
	}
	return enterLife(s.dev.rt, s.l, op, "stream", errClosed)
}

func (s *Stream) exit() { exitLife(s.dev.rt, s.l) }

// Close waits for the stream's work, then destroys it. A second Close, or
// any later use, is an error wrapping ErrClosed.
func (s *Stream) Close() error {
	const op = "stream_destroy"
	if !s.ok() {
		return errInvalid(op, "stream")
	}
	if s.rec != nil {
		return s.rec.refuse(op, "the capturing stream cannot be closed")
	}
	if s.capturing.Load() {
		return s.capturedErr(op)
	}
	rt := s.dev.rt
	return destroy(rt, s.l, op, "stream", byGraph, errClosed, func() error { return rt.p.StreamDestroy(op, rt.h, s.h) })
}

// Synchronize waits until all work enqueued on the stream has completed.
func (s *Stream) Synchronize() error {
	const op = "stream_synchronize"
	if err := s.enterSync(op); err != nil {
		return err
	}
	defer s.exit()
	rt := s.dev.rt
	return rt.metrics.end(opStreamSynchronize, rt.metrics.begin(), rt.p.StreamSynchronize(op, rt.h, s.h))
}

// Query reports whether all work enqueued on the stream has completed,
// without waiting.
func (s *Stream) Query() (bool, error) {
	const op = "stream_query"
	if err := s.enterSync(op); err != nil {
		return false, err
	}
	defer s.exit()
	rt := s.dev.rt
	return notReady(rt.p.StreamQuery(op, rt.h, s.h))
}

// notReady maps a query's result to (done, error).
func notReady(err error) (bool, error) {
	if err == nil {
		return true, nil
	}
	if e, ok := err.(*Error); ok && e.Code == codeNotReady {
		return false, nil
	}
	return false, err
}

// WaitEvent makes work enqueued on s later wait until ev has completed.
// The event may be of another stream or device of the same runtime.
func (s *Stream) WaitEvent(ev *Event) error {
	const op = "stream_wait_event"
	return s.submitEvent(op, bind.SlotStreamWaitEvent, ev, func() error {
		if ev.dev.rt != s.dev.rt {
			return errf(codeInvalidArgument, op, "the event belongs to another runtime")
		}
		return nil
	})
}

// submitEvent submits slot with ev on s (Event.Record, WaitEvent): s and
// ev entered, then check (which may refuse the pair), then the submission.
func (s *Stream) submitEvent(op string, slot bind.Slot, ev *Event, check func() error) (err error) {
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.sticky(&err)
	defer s.exit()
	if err := ev.use(op); err != nil {
		return err
	}
	defer ev.l.release()
	if err := check(); err != nil {
		return err
	}
	c := submission{slot: slot, obj: uintptr(ev.h), lives: [2]*life{ev.l}}
	return s.submit(op, &c)
}

// CopyFromPinned enqueues a copy of src.Len() bytes from pinned memory to
// the start of dst (at least that long). It returns at once; src must not
// be changed or freed until the copy completed.
func (s *Stream) CopyFromPinned(dst Region, src Pinned) error {
	return s.copyPinned("copy_from_pinned", src, dst, false)
}

// CopyToPinned enqueues a copy of dst.Len() bytes from the start of src
// (at least that long) to pinned memory. It returns at once; read dst only
// after the copy completed.
func (s *Stream) CopyToPinned(dst Pinned, src Region) error {
	return s.copyPinned("copy_to_pinned", dst, src, true)
}

// copyPinned enqueues a copy of pm.Len() bytes between pinned memory pm
// and the start of device region r: into pm when toPinned, else out of it.
func (s *Stream) copyPinned(op string, pm Pinned, r Region, toPinned bool) (err error) {
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.sticky(&err)
	defer s.exit()
	p, err := usePinned(op, pm)
	if err != nil {
		return err
	}
	defer p.l.release()
	b, off, n, err := use(op, r)
	if err != nil {
		return err
	}
	defer b.done()
	rt := s.dev.rt
	if p.rt != rt {
		return errf(codeInvalidArgument, op, "the pinned memory belongs to another runtime than the stream")
	}
	if b.dev != s.dev {
		return errf(codeInvalidArgument, op, "%s", misplaced("the buffer", b.dev, "stream", s.dev))
	}
	if p.n > n {
		if toPinned {
			return errf(codeOutOfRange, op, "%d bytes asked from a source of %d", p.n, n)
		}
		return errf(codeOutOfRange, op, "%d bytes do not fit the destination's %d", p.n, n)
	}
	if p.n == 0 {
		return nil
	}
	if p.hs != nil {
		p.hs.queuedOn(s.dev)
	}
	a := abi.CopyArgs{StructSize: abi.SizeofCopyArgs, Stream: s.h, Size: p.n}
	if toPinned {
		a.DstHost, a.DstOffset, a.SrcBuffer, a.SrcOffset = p.h, p.off, b.h, off
	} else {
		a.DstBuffer, a.DstOffset, a.SrcHost, a.SrcOffset = b.h, off, p.h, p.off
	}
	c := submission{slot: bind.SlotCopy, args: unsafe.Pointer(&a), size: unsafe.Sizeof(a), lives: [2]*life{b.l, p.l},
		timed: true, metric: opCopyFromPinned, dir: copyHostToDevice, bytes: p.n}
	if toPinned {
		c.metric, c.dir = opCopyToPinned, copyDeviceToHost
	}
	return s.submit(op, &c)
}

// CopyDevice enqueues a device-to-device copy of src.Len() bytes, dst at
// least as long as src. Both regions are on the stream's device, or (a
// peer copy, ABI 1.6 plugins) one of them is on another device of the
// same runtime: the stream orders the copy after its own earlier work
// only; work on the other device that touches either region must be
// ordered with an event (Event.Record there, Stream.WaitEvent here). A
// capturing stream records only copies on its own device. Overlapping
// ranges of one buffer are refused, as by Copy.
func (s *Stream) CopyDevice(dst, src Region) (err error) {
	const op = "copy_device"
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.sticky(&err)
	defer s.exit()
	p, err := useCopy(op, dst, src)
	if err != nil {
		return err
	}
	defer p.done()
	db, sb, sn := p.db, p.sb, p.sn
	peer := s.rec == nil && !s.capturing.Load() && db.dev.rt == s.dev.rt && sb.dev.rt == s.dev.rt && db.dev != sb.dev &&
		(db.dev == s.dev || sb.dev == s.dev)
	if db.dev != s.dev && !peer {
		return errf(codeInvalidArgument, op, "%s", misplaced("the destination", db.dev, "stream", s.dev))
	}
	if sb.dev != s.dev && !peer {
		return errf(codeInvalidArgument, op, "%s", misplaced("the source", sb.dev, "stream", s.dev))
	}
	if err := p.check(op); err != nil || sn == 0 {
		return err
	}
	a := abi.CopyArgs{StructSize: abi.SizeofCopyArgs, Stream: s.h, Size: sn, DstBuffer: db.h, DstOffset: p.doff, SrcBuffer: sb.h, SrcOffset: p.soff}
	c := submission{slot: bind.SlotCopy, args: unsafe.Pointer(&a), size: unsafe.Sizeof(a), lives: [2]*life{db.l, sb.l},
		timed: true, metric: opStreamCopyDevice, dir: copyDeviceToDevice, bytes: sn}
	return s.submit(op, &c)
}

// Memset enqueues setting every byte of r to value.
func (s *Stream) Memset(r Region, value byte) error { return s.memset(r, uint32(value), 1) }

// Memset16 enqueues filling r with a 2-byte pattern.
func (s *Stream) Memset16(r Region, value uint16) error { return s.memset(r, uint32(value), 2) }

// Memset32 enqueues filling r with a 4-byte pattern.
func (s *Stream) Memset32(r Region, value uint32) error { return s.memset(r, value, 4) }

func (s *Stream) memset(r Region, value, elem uint32) (err error) {
	const op = "memset"
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.sticky(&err)
	defer s.exit()
	return memset(op, s, s.dev, r, value, elem)
}
