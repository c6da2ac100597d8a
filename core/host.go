// SPDX-License-Identifier: Apache-2.0

package core

import (
	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/internal/abi"
)

// HostBuffer is pinned (page-locked) host memory owned by the plugin,
// seen from Go as a []byte: one allocation of its own (Runtime.AllocHost)
// or a piece of the runtime's host heap (Runtime.AllocHostFromHeap).
// Asynchronous copies take only pinned memory: a HostBuffer or a
// PinnedView of one. For many small buffers prefer the host heap, which
// does not pay the driver's pinned-allocation cost per request.
type HostBuffer struct {
	rt   *Runtime
	h    abi.HostBuffer
	ptr  uintptr // plugin memory
	size uint64
	l    *life
	// hs is the heap's piece when the buffer came from AllocHostFromHeap
	// (the fields above are then unused).
	hs *heapSlice
}

// AllocHost allocates size bytes of pinned host memory. The caller must
// Free it.
func (rt *Runtime) AllocHost(size int) (*HostBuffer, error) {
	const op = "host_alloc"
	if size <= 0 {
		return nil, errf(codeInvalidArgument, op, "size %d: a host buffer needs at least one byte", size)
	}
	if err := rt.enter(op); err != nil {
		return nil, err
	}
	defer rt.exit()
	h, ptr, err := rt.hostAlloc(uint64(size))
	if err != nil {
		return nil, err
	}
	hb := &HostBuffer{rt: rt, h: h, ptr: ptr, size: uint64(size), l: new(life)}
	watchLeak(hb, rt, hb.l, "pinned host buffer", uint64(size))
	return hb, nil
}

func (rt *Runtime) hostAlloc(size uint64) (h abi.HostBuffer, ptr uintptr, err error) {
	err = rt.p.HostAlloc("host_alloc", rt.h, size, &h, &ptr)
	if err == nil && (h == 0 || ptr == 0) {
		err = errf(codeInternal, "host_alloc", "the plugin returned no handle or no memory for %d bytes", size)
	}
	return h, ptr, err
}

// Bytes is the memory as a slice. It is valid until Free (or the
// runtime's Close): after that the memory is gone and touching the slice
// may crash the process, so drop it when you free the buffer. Bytes
// returns nil once Free or Close has begun (and for a nil or zero-value
// buffer), so a late call never hands out freed memory.
func (hb *HostBuffer) Bytes() []byte {
	if hb != nil && hb.hs != nil {
		return hb.hs.Bytes()
	}
	if !hb.ok() || !hb.l.alive() || !hb.rt.l.alive() {
		return nil
	}
	return bind.HostBytes(hb.ptr, 0, hb.size)
}

// Len is the size in bytes.
func (hb *HostBuffer) Len() int {
	if hb == nil {
		return 0
	}
	if hb.hs != nil {
		return hb.hs.Len()
	}
	return int(hb.size)
}

// View is the sub-range [off, off+n) of the buffer.
func (hb *HostBuffer) View(off, n int) (PinnedView, error) {
	if hb == nil {
		return PinnedView{}, errf(codeInvalidArgument, "view", "nil host buffer")
	}
	if hb.hs != nil {
		return hb.hs.View(off, n)
	}
	if err := checkSpan(off, n, hb.size, "host buffer"); err != nil {
		return PinnedView{}, err
	}
	return PinnedView{hb: hb, off: uint64(off), n: uint64(n)}, nil
}

// Free releases the memory; a second Free is an error wrapping ErrFreed.
// Copies enqueued from or to it must have completed.
func (hb *HostBuffer) Free() error {
	const op = "host_free"
	if hb != nil && hb.hs != nil {
		return hb.hs.Free()
	}
	if !hb.ok() {
		return errInvalid(op, "host buffer")
	}
	return destroy(hb.rt, hb.l, op, "host buffer", byGraph, errFreed, func() error { return hb.rt.p.HostFree(op, hb.rt.h, hb.h) })
}

// Pinned is pinned host memory an asynchronous copy can use: a
// *HostBuffer or a PinnedView. Only this package implements it.
type Pinned interface {
	Len() int
	isPinned()
}

// PinnedView is a sub-range of a HostBuffer.
type PinnedView struct {
	hb  *HostBuffer
	hs  *heapSlice
	off uint64
	n   uint64
}

func (*HostBuffer) isPinned() {}
func (*heapSlice) isPinned()  {}
func (PinnedView) isPinned()  {}

// Len is the view's length in bytes.
func (v PinnedView) Len() int { return int(v.n) }

// Bytes is the view's memory (valid as long as the memory it views; nil
// once that was freed or its runtime closed, as HostBuffer.Bytes).
func (v PinnedView) Bytes() []byte {
	var b []byte
	switch {
	case v.hb != nil:
		b = v.hb.Bytes()
	case v.hs != nil:
		b = v.hs.Bytes()
	}
	if b == nil {
		return nil
	}
	return b[v.off : v.off+v.n]
}

// pinnedRef is resolved pinned memory: the plugin's host buffer handle,
// the offset into it, the length, and the life to release.
type pinnedRef struct {
	rt  *Runtime
	h   abi.HostBuffer
	off uint64
	n   uint64
	l   *life
	hs  *heapSlice // when the memory is a host-heap slice
}

// usePinned resolves p and acquires it; the caller releases ref.l.
func usePinned(op string, p Pinned) (ref pinnedRef, err error) {
	var hb *HostBuffer
	var hs *heapSlice
	var off, n uint64
	switch v := p.(type) {
	case *HostBuffer:
		hb, n = v, 0
		if v != nil && v.hs != nil {
			hb, hs, n = nil, v.hs, v.hs.size
		} else if v != nil {
			n = v.size
		}
	case *heapSlice:
		hs, n = v, 0
		if v != nil {
			n = v.size
		}
	case PinnedView:
		hb, hs, off, n = v.hb, v.hs, v.off, v.n
	}
	switch {
	case hb != nil:
		if !hb.ok() {
			return ref, errInvalid(op, "host buffer")
		}
		if !hb.l.acquire() {
			return ref, errFreed(op, "host buffer")
		}
		return pinnedRef{rt: hb.rt, h: hb.h, off: off, n: n, l: hb.l}, nil
	case hs != nil:
		if !hs.ok() {
			return ref, errInvalid(op, "host slice")
		}
		if !hs.l.acquire() {
			return ref, errFreed(op, "host slice")
		}
		return pinnedRef{rt: hs.heap.rt, h: hs.blk.h, off: hs.off + off, n: n, l: hs.l, hs: hs}, nil
	}
	return ref, errf(codeInvalidArgument, op, "nil pinned memory")
}
