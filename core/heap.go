// SPDX-License-Identifier: Apache-2.0

package core

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/internal/abi"
)

// hostHeap is a runtime's pinned host heap (Runtime.AllocHostFromHeap):
// it sub-allocates pinned host memory from large blocks (64 MiB, or one
// block of the request's size when larger), so a request does not pay
// the driver's pinned-allocation cost (27.7 ms for 64 MiB on the H200).
// Each block keeps an address-ordered free list; a request takes the first
// span that fits and a free coalesces with its neighbours. Allocations are
// 256-byte aligned. One heap per runtime; all methods are safe for
// concurrent use (one mutex, held for the list work and, on a miss, for
// the block allocation). Runtime.Trim gives its empty blocks back.
type hostHeap struct {
	rt        *Runtime
	blockSize uint64

	mu     sync.Mutex
	blocks []*heapBlock
	stats  diag.Heap
}

const (
	heapAlign     = 256
	heapBlockSize = 64 << 20
)

type heapBlock struct {
	h    abi.HostBuffer
	ptr  uintptr // plugin memory
	size uint64
	free []span // address order, never adjacent
	live int
}

type span struct{ off, n uint64 }

// heapSlice is a piece of the host heap: pinned memory usable by
// asynchronous copies (a HostBuffer from Runtime.AllocHostFromHeap holds
// one). Free returns it to the heap.
type heapSlice struct {
	heap *hostHeap
	blk  *heapBlock
	off  uint64 // in the block
	size uint64 // asked for
	span uint64 // taken (rounded)
	l    *life
	// queued: bit i%64 is set once an asynchronous copy was enqueued
	// with the slice on device i; Free then synchronizes that device
	// first (the plugin knows only the block, so it cannot wait itself).
	queued atomic.Uint64
}

// queuedOn records that a copy with the slice is being enqueued on d.
func (hs *heapSlice) queuedOn(d *Device) {
	bit := uint64(1) << (d.index % 64)
	if hs.queued.Load()&bit == 0 {
		hs.queued.Or(bit)
	}
}

func newHostHeap(rt *Runtime) *hostHeap {
	return &hostHeap{rt: rt, blockSize: heapBlockSize}
}

// AllocHostFromHeap returns n bytes of pinned host memory from the
// runtime's host heap, 256-byte aligned, as a HostBuffer whose Free
// returns the bytes to the heap. Unlike AllocHost, a request does not pay
// the driver's pinned-allocation cost unless the heap must grow, so it
// suits many small or short-lived buffers; Runtime.Trim gives the heap's
// empty blocks back to the plugin, and inspect.HostHeap reads its
// counters.
func (rt *Runtime) AllocHostFromHeap(n int) (*HostBuffer, error) {
	var hh *hostHeap
	if rt.ok() {
		hh = rt.heap
	}
	hs, err := hh.alloc(n)
	if err != nil {
		return nil, err
	}
	return &HostBuffer{hs: hs}, nil
}

// alloc is AllocHostFromHeap's slice, for the runtime's own (staging)
// slots too.
func (hh *hostHeap) alloc(n int) (*heapSlice, error) {
	const op = "host_heap_alloc"
	if n <= 0 {
		return nil, errf(codeInvalidArgument, op, "size %d: a host slice needs at least one byte", n)
	}
	if !hh.ok() {
		return nil, errInvalid(op, "runtime")
	}
	rt := hh.rt
	if err := rt.enter(op); err != nil {
		return nil, err
	}
	defer rt.exit()
	sz := (uint64(n) + heapAlign - 1) &^ (heapAlign - 1)
	hh.mu.Lock()
	defer hh.mu.Unlock()
	var blk *heapBlock
	off, ok := uint64(0), false
	for _, b := range hh.blocks {
		if off, ok = b.take(sz); ok {
			blk = b
			break
		}
	}
	if !ok {
		bs := hh.blockSize
		if sz > bs {
			bs = (sz + (2<<20 - 1)) &^ (2<<20 - 1)
		}
		h, ptr, err := rt.hostAlloc(bs)
		if err != nil {
			return nil, err
		}
		blk = &heapBlock{h: h, ptr: ptr, size: bs, free: []span{{0, bs}}}
		hh.blocks = append(hh.blocks, blk)
		hh.stats.Reserved += bs
		hh.stats.Blocks++
		off, _ = blk.take(sz)
	}
	blk.live++
	hh.stats.InUse += sz
	if hh.stats.InUse > hh.stats.Peak {
		hh.stats.Peak = hh.stats.InUse
	}
	hh.stats.Live++
	hh.stats.Allocs++
	hs := &heapSlice{heap: hh, blk: blk, off: off, size: uint64(n), span: sz, l: new(life)}
	watchLeak(hs, rt, hs.l, "host heap slice", uint64(n))
	return hs, nil
}

// take cuts sz bytes from the first free span that holds them.
func (b *heapBlock) take(sz uint64) (uint64, bool) {
	for i, s := range b.free {
		if s.n < sz {
			continue
		}
		if s.n == sz {
			b.free = append(b.free[:i], b.free[i+1:]...)
		} else {
			b.free[i] = span{s.off + sz, s.n - sz}
		}
		return s.off, true
	}
	return 0, false
}

// give returns a span, merging it with its neighbours.
func (b *heapBlock) give(off, n uint64) {
	i := sort.Search(len(b.free), func(i int) bool { return b.free[i].off > off })
	// merge with the previous span
	if i > 0 && b.free[i-1].off+b.free[i-1].n == off {
		b.free[i-1].n += n
		if i < len(b.free) && b.free[i-1].off+b.free[i-1].n == b.free[i].off {
			b.free[i-1].n += b.free[i].n
			b.free = append(b.free[:i], b.free[i+1:]...)
		}
		return
	}
	if i < len(b.free) && off+n == b.free[i].off {
		b.free[i] = span{off, n + b.free[i].n}
		return
	}
	b.free = append(b.free, span{})
	copy(b.free[i+1:], b.free[i:])
	b.free[i] = span{off, n}
}

// snapshot returns the heap's counters (inspect.HostHeap).
func (hh *hostHeap) snapshot() diag.Heap {
	if hh == nil {
		return diag.Heap{}
	}
	hh.mu.Lock()
	defer hh.mu.Unlock()
	return hh.stats
}

// trim returns blocks with nothing allocated in them to the plugin
// (Runtime.Trim, which has entered the runtime).
func (hh *hostHeap) trim() error {
	hh.mu.Lock()
	defer hh.mu.Unlock()
	var first error
	kept := hh.blocks[:0]
	for _, b := range hh.blocks {
		if b.live > 0 {
			kept = append(kept, b)
			continue
		}
		if err := hh.rt.p.HostFree("host_free", hh.rt.h, b.h); err != nil && first == nil {
			first = err
		}
		hh.stats.Reserved -= b.size
		hh.stats.Blocks--
	}
	clear(hh.blocks[len(kept):])
	hh.blocks = kept
	return first
}

// closed forgets the blocks (runtime_destroy freed them).
func (hh *hostHeap) closed() {
	hh.mu.Lock()
	hh.blocks = nil
	hh.stats.Reserved, hh.stats.Blocks, hh.stats.InUse, hh.stats.Live = 0, 0, 0, 0
	hh.mu.Unlock()
}

// Bytes is the slice's memory, valid until Free (or the runtime's Close):
// after that the memory may belong to another slice, so drop it. Bytes
// returns nil once Free or Close has begun (and for a nil or zero-value
// slice), so a late call never hands out memory that is gone or reused.
func (hs *heapSlice) Bytes() []byte {
	if !hs.ok() || !hs.l.alive() || !hs.heap.rt.l.alive() {
		return nil
	}
	return hs.mem()
}

// mem is the slice's memory without Bytes's checks, for the runtime's own
// slices (staging slots), used inside a use of the runtime: Close may
// have begun, but runtime_destroy waits for that use to end.
func (hs *heapSlice) mem() []byte { return bind.HostBytes(hs.blk.ptr, hs.off, hs.size) }

// Len is the size asked for, in bytes.
func (hs *heapSlice) Len() int {
	if hs == nil {
		return 0
	}
	return int(hs.size)
}

// View is the sub-range [off, off+n) of the slice.
func (hs *heapSlice) View(off, n int) (PinnedView, error) {
	if hs == nil {
		return PinnedView{}, errf(codeInvalidArgument, "view", "nil host slice")
	}
	if err := checkSpan(off, n, hs.size, "host slice"); err != nil {
		return PinnedView{}, err
	}
	return PinnedView{hs: hs, off: uint64(off), n: uint64(n)}, nil
}

// Free returns the slice to the heap; a second Free is an error wrapping
// ErrFreed. Like HostBuffer.Free, it waits for asynchronous copies that
// were enqueued with the slice (it synchronizes each device such a copy
// was enqueued on), so the span is never handed to another slice while a
// copy may still write it; when that synchronize fails, the span stays
// out of the heap and the error is returned.
func (hs *heapSlice) Free() error {
	const op = "host_heap_free"
	if !hs.ok() {
		return errInvalid(op, "host slice")
	}
	hh := hs.heap
	if err := hh.rt.enter(op); err != nil {
		return err
	}
	defer hh.rt.exit()
	switch hs.l.kill() {
	case killDead:
		return errFreed(op, "host slice")
	case killRefused:
		return errf(codeFailedPrecondition, op, "the host slice is held by a live Graph: Close the graph first")
	}
	if m := hs.queued.Load(); m != 0 {
		for _, d := range hh.rt.devices {
			if m&(1<<(d.index%64)) != 0 {
				if err := d.sync(); err != nil {
					e := &Error{Op: op, Code: codeInternal, Message: err.Error()}
					if pe, ok := err.(*Error); ok {
						e.Code, e.Backend, e.VendorCode = pe.Code, pe.Backend, pe.VendorCode
						e.Message = pe.Op + ": " + pe.Message
					}
					e.Message = fmt.Sprintf("the host slice's %d bytes stay out of the heap, since copies queued with it may still run: %s", hs.span, e.Message)
					return e
				}
			}
		}
	}
	hh.mu.Lock()
	hs.blk.give(hs.off, hs.span)
	hs.blk.live--
	hh.stats.InUse -= hs.span
	hh.stats.Live--
	hh.mu.Unlock()
	return nil
}
