// SPDX-License-Identifier: Apache-2.0

package core

import (
	"fmt"
	"runtime"
	"unsafe"
	"weak"

	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/internal/abi"
)

// Buffer is device memory, allocated with Device.Alloc and released with
// Free. Its start is aligned to at least 256 bytes. A Buffer may be used
// by any number of goroutines at once; Free racing with a use either lets
// the use finish first or makes it fail with ErrFreed, never passes a
// freed handle to the plugin. Work already enqueued on a stream that uses
// the buffer must have completed before Free (synchronize the stream).
type Buffer struct {
	dev  *Device
	h    abi.Buffer
	size uint64
	l    *life // separate from the Buffer so the leak cleanup can read it
}

// Region is a range of device memory: a *Buffer (all of it) or a View (a
// sub-range). Every operation takes a Region. Only this package
// implements it.
type Region interface {
	// Len is the region's length in bytes.
	Len() int
	isRegion()
}

// View is a sub-range of a Buffer, made with Buffer.View (a *Buffer is
// itself the Region of all of it). It is a small value: copy it freely.
// The zero View is invalid.
type View struct {
	buf *Buffer
	off uint64
	n   uint64
}

func (*Buffer) isRegion() {}
func (View) isRegion()    {}

// Len is the buffer's size in bytes.
func (b *Buffer) Len() int {
	if b == nil {
		return 0
	}
	return int(b.size)
}

// Device is the buffer's device.
func (b *Buffer) Device() *Device {
	if b == nil {
		return nil
	}
	return b.dev
}

// Len is the view's length in bytes.
func (v View) Len() int { return int(v.n) }

// Offset is the view's start within its buffer, in bytes.
func (v View) Offset() int { return int(v.off) }

// Buffer is the view's buffer.
func (v View) Buffer() *Buffer { return v.buf }

// View is the sub-range [off, off+n) of the buffer; out of range is an
// error wrapping ErrOutOfRange. A view of a view: View.Sub.
func (b *Buffer) View(off, n int) (View, error) {
	if b == nil {
		return View{}, errf(codeInvalidArgument, "view", "nil buffer")
	}
	if err := checkSpan(off, n, b.size, "buffer"); err != nil {
		return View{}, err
	}
	return View{buf: b, off: uint64(off), n: uint64(n)}, nil
}

// checkSpan is the range check of every View and Sub: an error wrapping
// ErrOutOfRange, naming what the range is of, when [off, off+n) is not
// within its size bytes.
func checkSpan(off, n int, size uint64, of string) error {
	if off < 0 || n < 0 || uint64(off)+uint64(n) > size {
		return errf(codeOutOfRange, "view", "offset %d + length %d beyond the %s's %d bytes", off, n, of, size)
	}
	return nil
}

// Sub is the sub-range [off, off+n) of the view.
func (v View) Sub(off, n int) (View, error) {
	if v.buf == nil {
		return View{}, errf(codeInvalidArgument, "view", "zero View")
	}
	if err := checkSpan(off, n, v.n, "view"); err != nil {
		return View{}, err
	}
	return View{buf: v.buf, off: v.off + uint64(off), n: uint64(n)}, nil
}

func (v View) String() string {
	if v.buf == nil {
		return "zero View"
	}
	return fmt.Sprintf("view [%d, %d) of a %d-byte buffer", v.off, v.off+v.n, v.buf.size)
}

// resolve unpacks a Region without letting it escape (a type switch, no
// interface method call), so passing a View allocates nothing.
func resolve(op string, r Region) (b *Buffer, off, n uint64, err error) {
	switch v := r.(type) {
	case *Buffer:
		if !v.ok() {
			return nil, 0, 0, errInvalid(op, "buffer")
		}
		return v, 0, v.size, nil
	case View:
		if v.buf == nil {
			return nil, 0, 0, errf(codeInvalidArgument, op, "zero View")
		}
		if !v.buf.ok() {
			return nil, 0, 0, errInvalid(op, "buffer")
		}
		return v.buf, v.off, v.n, nil
	}
	return nil, 0, 0, errf(codeInvalidArgument, op, "nil region")
}

// use resolves r and begins a use of its runtime and buffer; on success
// the caller ends it with b.done().
func use(op string, r Region) (b *Buffer, off, n uint64, err error) {
	b, off, n, err = resolve(op, r)
	if err != nil {
		return nil, 0, 0, err
	}
	if err = enterLife(b.dev.rt, b.l, op, "buffer", errFreed); err != nil {
		return nil, 0, 0, err
	}
	return b, off, n, nil
}

func (b *Buffer) done() { exitLife(b.dev.rt, b.l) }

// Alloc allocates size bytes of device memory. Zero or negative sizes are
// errors; more than the device has is an error wrapping ErrOutOfMemory
// naming the size asked for and the memory free.
func (d *Device) Alloc(size int) (*Buffer, error) {
	const op = "buffer_alloc"
	if size <= 0 {
		return nil, errf(codeInvalidArgument, op, "size %d: a buffer needs at least one byte", size)
	}
	if err := d.enter(op); err != nil {
		return nil, err
	}
	rt := d.rt
	defer rt.exit()
	if d.info.MemoryTotal > 0 && uint64(size) > d.info.MemoryTotal {
		free := d.info.MemoryFree
		if in, err := d.queryInfo(); err == nil {
			free = in.MemoryFree
		}
		return nil, errf(codeOutOfMemory, op, "%d bytes asked on device %d, which has %d bytes in all and %d free", size, d.index, d.info.MemoryTotal, free)
	}
	var h abi.Buffer
	if err := rt.metrics.buffer(d.index, int64(size), rt.p.BufferAlloc(op, rt.h, d.index, uint64(size), &h)); err != nil {
		return nil, err
	}
	b := &Buffer{dev: d, h: h, size: uint64(size), l: new(life)}
	watchLeak(b, rt, b.l, "device buffer", uint64(size))
	return b, nil
}

// Free releases the buffer. A second Free, or any later use, is an error
// wrapping ErrFreed; after the runtime closed, ErrClosed.
func (b *Buffer) Free() error {
	const op = "buffer_free"
	if !b.ok() {
		return errInvalid(op, "buffer")
	}
	rt := b.dev.rt
	return destroy(rt, b.l, op, "buffer", byBatchOrGraph, errFreed, func() error {
		return rt.metrics.buffer(b.dev.index, -int64(b.size), rt.p.BufferFree(op, rt.h, b.h))
	})
}

// directMax: synchronous copies of Go memory below this size go straight
// to the plugin (GPURT_COPY_SYNC with the pageable pointer); larger ones
// are staged through pinned memory (stage.go).
const directMax = 64 << 10

// CopyFromHost copies len(src) bytes from Go memory to the start of dst
// and returns when the copy completed. It runs after all work submitted
// earlier to the device. dst must be at least len(src) bytes (else
// ErrOutOfRange); a nil src is an error, an empty one a no-op. Safe from
// many goroutines.
func CopyFromHost(dst Region, src []byte) error { return hostCopy("copy_from_host", dst, src, false) }

// CopyToHost copies len(dst) bytes from the start of src to Go memory and
// returns when the copy completed. It runs after all work submitted
// earlier to the device. src must be at least len(dst) bytes; a nil dst
// is an error, an empty one a no-op. Safe from many goroutines.
func CopyToHost(dst []byte, src Region) error { return hostCopy("copy_to_host", src, dst, true) }

// hostCopy copies len(host) bytes between the start of r and Go memory:
// into host when toHost (CopyToHost), from it otherwise (CopyFromHost).
// Short copies are one synchronous copy call; longer ones are staged
// through pinned memory (stage.go).
func hostCopy(op string, r Region, host []byte, toHost bool) error {
	if host == nil {
		if toHost {
			return errf(codeInvalidArgument, op, "nil destination slice")
		}
		return errf(codeInvalidArgument, op, "nil source slice")
	}
	b, off, n, err := use(op, r)
	if err != nil {
		return err
	}
	defer b.done()
	if err := b.dev.capturingErr(op); err != nil {
		return err
	}
	if uint64(len(host)) > n {
		if toHost {
			return errf(codeOutOfRange, op, "%d bytes asked from a source of %d", len(host), n)
		}
		return errf(codeOutOfRange, op, "%d bytes do not fit the destination's %d", len(host), n)
	}
	if len(host) == 0 {
		return nil
	}
	rt := b.dev.rt
	metric, dir := opCopyFromHost, copyHostToDevice
	if toHost {
		metric, dir = opCopyToHost, copyDeviceToHost
	}
	start := rt.metrics.begin()
	switch {
	case len(host) < directMax:
		a := abi.CopyArgs{StructSize: abi.SizeofCopyArgs, Flags: abi.CopySync, Size: uint64(len(host))}
		if toHost {
			a.SrcBuffer, a.SrcOffset, a.DstPtr = b.h, off, bind.SliceData(host)
		} else {
			a.DstBuffer, a.DstOffset, a.SrcPtr = b.h, off, bind.SliceData(host)
		}
		err = rt.p.Copy(op, rt.h, &a)
	default:
		err = b.dev.staged(op, b.h, off, host, !toHost)
	}
	return rt.metrics.copy(metric, dir, uint64(len(host)), start, err)
}

// Copy copies src.Len() bytes from device memory to device memory, after
// all work submitted earlier to the device (to both devices for a peer
// copy), and returns when it completed. Both regions must be of one
// runtime; they may be on two of its devices (a peer copy: CUDA enables
// peer access where the hardware allows, else the driver stages the copy
// through host memory). dst must be at least as long as src. The source
// and the destination's first src.Len() bytes must not overlap in one
// buffer (CUDA's copy of overlapping ranges is undefined): that is
// ErrInvalidArgument naming both ranges.
func Copy(dst, src Region) error {
	const op = "copy_device"
	p, err := useCopy(op, dst, src)
	if err != nil {
		return err
	}
	defer p.done()
	db, sb, sn := p.db, p.sb, p.sn
	if db.dev.rt != sb.dev.rt {
		return errf(codeInvalidArgument, op, "%s: copies stay within one runtime", misplaced("the source", sb.dev, "destination", db.dev))
	}
	if err := db.dev.capturingErr(op); err != nil {
		return err
	}
	if err := sb.dev.capturingErr(op); err != nil {
		return err
	}
	if err := p.check(op); err != nil || sn == 0 {
		return err
	}
	rt := db.dev.rt
	a := abi.CopyArgs{StructSize: abi.SizeofCopyArgs, Flags: abi.CopySync, Size: sn,
		DstBuffer: db.h, DstOffset: p.doff, SrcBuffer: sb.h, SrcOffset: p.soff}
	return rt.metrics.copy(opCopyDevice, copyDeviceToDevice, sn, rt.metrics.begin(), rt.p.Copy(op, rt.h, &a))
}

// copyPair is a device-to-device copy's two regions in use (Copy and
// Stream.CopyDevice): the destination db [doff, doff+dn), the source sb
// [soff, soff+sn).
type copyPair struct {
	db, sb             *Buffer
	doff, dn, soff, sn uint64
}

// useCopy puts dst and src in use (use); done releases both.
func useCopy(op string, dst, src Region) (*copyPair, error) {
	var p copyPair
	var err error
	if p.db, p.doff, p.dn, err = use(op, dst); err != nil {
		return nil, err
	}
	if p.sb, p.soff, p.sn, err = use(op, src); err != nil {
		p.db.done()
		return nil, err
	}
	return &p, nil
}

func (p *copyPair) done() {
	p.sb.done()
	p.db.done()
}

// check refuses a source longer than the destination, and a source and
// destination that overlap in one buffer: the mock would memmove, CUDA's
// copy is undefined.
func (p *copyPair) check(op string) error {
	if p.sn > p.dn {
		return errf(codeOutOfRange, op, "%d bytes do not fit the destination's %d", p.sn, p.dn)
	}
	doff, soff, n := p.doff, p.soff, p.sn
	if p.db != p.sb || n == 0 || doff >= soff+n || soff >= doff+n {
		return nil
	}
	return errf(codeInvalidArgument, op, "the destination [%d, %d) and the source [%d, %d) overlap in one buffer (a device-to-device copy within a buffer needs disjoint ranges)",
		doff, doff+n, soff, soff+n)
}

// memset fills r with a pattern of elem bytes: enqueued on s (through the
// call-or-record funnel), or synchronously when s is nil.
func memset(op string, s *Stream, sdev *Device, r Region, value uint32, elem uint32) error {
	b, off, n, err := use(op, r)
	if err != nil {
		return err
	}
	defer b.done()
	if sdev != nil && b.dev != sdev {
		return errf(codeInvalidArgument, op, "%s", misplaced("the buffer", b.dev, "stream", sdev))
	}
	if s == nil {
		if err := b.dev.capturingErr(op); err != nil {
			return err
		}
	}
	if off%uint64(elem) != 0 || n%uint64(elem) != 0 {
		return errf(codeInvalidArgument, op, "offset %d and length %d must be multiples of the %d-byte pattern", off, n, elem)
	}
	if n == 0 {
		return nil
	}
	rt := b.dev.rt
	a := abi.MemsetArgs{StructSize: abi.SizeofMemsetArgs, Buffer: b.h, Offset: off, Size: n, Value: value, ElementSize: elem}
	if s == nil {
		return rt.p.Memset(op, rt.h, &a)
	}
	a.Stream = s.h
	c := submission{slot: bind.SlotMemset, args: unsafe.Pointer(&a), size: unsafe.Sizeof(a), lives: [2]*life{b.l}}
	return s.submit(op, &c)
}

// Memset sets every byte of r to value, after all work submitted earlier
// to the device, and returns when done.
func Memset(r Region, value byte) error { return memset("memset", nil, nil, r, uint32(value), 1) }

// Memset16 fills r with a 2-byte pattern (offset and length even).
func Memset16(r Region, value uint16) error { return memset("memset", nil, nil, r, uint32(value), 2) }

// Memset32 fills r with a 4-byte pattern (offset and length multiples of 4).
func Memset32(r Region, value uint32) error { return memset("memset", nil, nil, r, value, 4) }

// watchLeak registers a cleanup that logs when obj becomes unreachable
// without having been freed while its runtime is open. It reports; it
// frees nothing (enqueued work may still use the memory). The note holds
// the runtime weakly: objects the runtime itself keeps (staging slots)
// are watched too, and a strong pointer from their cleanups would keep a
// closed runtime reachable for ever.
func watchLeak[T any](obj *T, rt *Runtime, l *life, what string, size uint64) {
	runtime.AddCleanup(obj, func(n leakNote) {
		rt := n.rt.Value()
		if rt != nil && n.l.alive() && rt.l.alive() {
			rt.log.Warn("leak: a "+n.what+" was garbage collected without Free", "bytes", n.size, "backend", rt.p.Backend)
		}
	}, leakNote{rt: rt.self, l: l, what: what, size: size})
}

type leakNote struct {
	rt   weak.Pointer[Runtime]
	l    *life
	what string
	size uint64
}
