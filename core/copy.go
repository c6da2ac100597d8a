// SPDX-License-Identifier: Apache-2.0

package core

import (
	"unsafe"

	"github.com/metrale/gpurt/abi"
	"github.com/metrale/gpurt/core/internal/ffi"
)

// Staged synchronous copies of Go slices.
//
// A copy of Go memory of directMax bytes or more goes through pinned
// memory in chunks on an internal copy stream of the device. Up: the
// memmove of chunk i+1 into a pinned slot runs while the DMA of chunk i
// (and of the chunks before it) is in flight. Down: the DMAs of the next
// stageSlots-1 chunks run while chunk i is moved out of its slot. A slot
// is reused only after the event recorded behind its previous copy
// completed. Each chunk's memmove is split across the copy pool
// (copy_pool.go), since one core is far slower than the DMA.
//
// A device keeps up to maxStagers stagers (a copy stream, stageSlots
// events and pinned slots from the host heap, a memJob), so that many
// goroutines copy at once; an idle stager is reused, which keeps the
// steady state free of allocations. Runtime.Trim releases idle stagers.

const (
	// stageSlots is the number of chunks in flight per copy. Two would
	// already overlap one memmove with one DMA; a third and a fourth
	// absorb the jitter of event waits and goroutine wake-ups, so the
	// DMA engine never waits for the host while the next slot is filled.
	stageSlots = 4
	// stageChunk is the largest chunk: at 55 GB/s 8 MiB is ~150 µs of DMA,
	// which hides the few microseconds of a copy enqueue, an event record
	// and a wait, and splits into 8 memmove pieces of 1 MiB. Four slots
	// of it are 32 MiB of pinned memory per stager.
	stageChunk = 8 << 20
	// stageMin is the smallest chunk (mid-sized copies use a quarter of
	// their size, so that even they overlap).
	stageMin = 256 << 10
	// maxStagers is the number of copies of one device that run at once.
	maxStagers = 4
)

type stager struct {
	stream uintptr
	ev     [stageSlots]uintptr
	slot   [stageSlots]*HostSlice
	mem    [stageSlots][]byte
	job    memJob // the parallel memmove of the current chunk
	// per copy
	bh    uintptr // gpurt_buffer*
	off   uint64
	chunk uint64
}

// getStager takes an idle stager of d, or makes one while fewer than
// maxStagers exist, or waits for one. The caller has entered the runtime.
func (d *Device) getStager() (*stager, error) {
	select {
	case st := <-d.stagers:
		return st, nil
	default:
	}
	if d.nstagers.Add(1) <= maxStagers {
		st, err := d.newStager()
		if err != nil {
			d.nstagers.Add(-1)
			return nil, err
		}
		return st, nil
	}
	d.nstagers.Add(-1)
	return <-d.stagers, nil
}

func (d *Device) putStager(st *stager) {
	st.bh = 0
	d.stagers <- st
}

func (d *Device) newStager() (*stager, error) {
	st := &stager{}
	var err error
	if st.stream, err = d.newStream(); err != nil {
		return nil, err
	}
	for i := range st.ev {
		if st.ev[i], err = d.newEvent(false); err == nil {
			st.slot[i], err = d.rt.heap.Alloc(stageChunk)
		}
		if err != nil {
			d.freeStager(st)
			return nil, err
		}
		st.mem[i] = st.slot[i].Bytes()
	}
	return st, nil
}

func (d *Device) freeStager(st *stager) error {
	rt := d.rt
	var first error
	keep := func(err error) {
		if first == nil && err != nil {
			first = err
		}
	}
	if st.stream != 0 {
		keep(rt.check("stream_destroy", ffi.Call2(rt.api.StreamDestroy, rt.h, st.stream)))
	}
	for i := range st.ev {
		if st.ev[i] != 0 {
			keep(rt.check("event_destroy", ffi.Call2(rt.api.EventDestroy, rt.h, st.ev[i])))
		}
		if st.slot[i] != nil {
			keep(st.slot[i].Free())
		}
	}
	return first
}

// trimStagers frees the idle stagers.
func (d *Device) trimStagers() error {
	var first error
	for {
		select {
		case st := <-d.stagers:
			d.nstagers.Add(-1)
			if err := d.freeStager(st); err != nil && first == nil {
				first = err
			}
		default:
			return first
		}
	}
}

// chunkFor picks the chunk size for n bytes: a stageSlots-th of the copy
// (so even a mid-sized copy overlaps), between stageMin and stageChunk.
func chunkFor(n uint64) uint64 {
	c := (n/stageSlots + 4095) &^ 4095
	if c < stageMin {
		c = stageMin
	}
	if c > stageChunk {
		c = stageChunk
	}
	return c
}

// enqueue copies slot k to or from device memory at st.off+pos and
// records the slot's event behind it.
func (st *stager) enqueue(rt *Runtime, k int, pos, m uint64, up bool) error {
	a := abi.CopyArgs{StructSize: copyArgsSize, Stream: st.stream, Size: m}
	slot := st.slot[k]
	if up {
		a.DstBuffer, a.DstOffset = st.bh, st.off+pos
		a.SrcHost, a.SrcOffset = slot.blk.h, slot.off
	} else {
		a.SrcBuffer, a.SrcOffset = st.bh, st.off+pos
		a.DstHost, a.DstOffset = slot.blk.h, slot.off
	}
	if err := rt.check("copy", ffi.Call2(rt.api.Copy, rt.h, uintptr(unsafe.Pointer(&a)))); err != nil {
		return err
	}
	return rt.check("event_record", ffi.Call3(rt.api.EventRecord, rt.h, st.ev[k], st.stream))
}

func (st *stager) wait(rt *Runtime, k int) error {
	return rt.check("event_synchronize", ffi.Call2(rt.api.EventSynchronize, rt.h, st.ev[k]))
}

// finish waits for the copy stream, so no slot is in flight when the
// stager goes back to the pool (also after an error).
func (st *stager) finish(rt *Runtime, err error) error {
	serr := rt.check("stream_synchronize", ffi.Call2(rt.api.StreamSynchronize, rt.h, st.stream))
	if err == nil {
		err = serr
	}
	return err
}

// stagedUpload copies src to buffer bh at off through pinned slots. The caller
// holds uses of the runtime and of b.
func (d *Device) stagedUpload(bh uintptr, off uint64, src []byte) error {
	rt := d.rt
	st, err := d.getStager()
	if err != nil {
		return err
	}
	defer d.putStager(st)
	// The copy runs after all work submitted earlier to the device, as a
	// copy with the default ordering does.
	if err := d.sync(); err != nil {
		return err
	}
	st.bh, st.off = bh, off
	pool := stagePool()
	n := uint64(len(src))
	c := chunkFor(n)
	for i, pos := 0, uint64(0); pos < n; i++ {
		k := i % stageSlots
		if i >= stageSlots {
			if err := st.wait(rt, k); err != nil {
				return st.finish(rt, err)
			}
		}
		m := min(c, n-pos)
		pool.copy(&st.job, st.mem[k][:m], src[pos:pos+m])
		if err := st.enqueue(rt, k, pos, m, true); err != nil {
			return st.finish(rt, err)
		}
		pos += m
	}
	return st.finish(rt, nil)
}

// stagedDownload copies from buffer bh at off into dst through pinned slots.
func (d *Device) stagedDownload(dst []byte, bh uintptr, off uint64) error {
	rt := d.rt
	st, err := d.getStager()
	if err != nil {
		return err
	}
	defer d.putStager(st)
	if err := d.sync(); err != nil {
		return err
	}
	st.bh, st.off = bh, off
	pool := stagePool()
	n := uint64(len(dst))
	c := chunkFor(n)
	chunks := int((n + c - 1) / c)
	for i := 0; i < chunks && i < stageSlots; i++ {
		pos := uint64(i) * c
		if err := st.enqueue(rt, i, pos, min(c, n-pos), false); err != nil {
			return st.finish(rt, err)
		}
	}
	for i := 0; i < chunks; i++ {
		k := i % stageSlots
		if err := st.wait(rt, k); err != nil {
			return st.finish(rt, err)
		}
		pos := uint64(i) * c
		m := min(c, n-pos)
		pool.copy(&st.job, dst[pos:pos+m], st.mem[k][:m])
		if next := i + stageSlots; next < chunks {
			npos := uint64(next) * c
			if err := st.enqueue(rt, k, npos, min(c, n-npos), false); err != nil {
				return st.finish(rt, err)
			}
		}
	}
	return st.finish(rt, nil)
}
