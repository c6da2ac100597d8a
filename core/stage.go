// SPDX-License-Identifier: Apache-2.0

package core

import "github.com/metrale/gpurt/internal/abi"

// Staged synchronous copies of Go slices.
//
// A copy of Go memory of directMax bytes or more goes through pinned
// memory in chunks on an internal copy stream of the device. Up: the
// memmove of chunk i+1 into a pinned slot runs while the DMA of chunk i
// (and of the chunks before it) is in flight. Down: the DMAs of the next
// slots-1 chunks run while chunk i is moved out of its slot. A slot
// is reused only after the event recorded behind its previous copy
// completed. Each chunk's memmove is split across the copy pool
// (copy_pool.go), since one core is far slower than the DMA.
//
// A device keeps up to maxStagers stagers (a copy stream, one event per
// slot and pinned slots from the host heap, a memJob), so that many
// goroutines copy at once; an idle stager is reused, which keeps the
// steady state free of allocations. Runtime.Trim releases idle stagers.

const (
	// defaultStageSlots is the number of chunks in flight per copy. Two
	// would already overlap one memmove with one DMA; a third and a fourth
	// absorb the jitter of event waits and goroutine wake-ups, so the DMA
	// engine never waits for the host while the next slot is filled.
	defaultStageSlots = 4
	// maxStageSlots bounds GPURT_STAGE_SLOTS.
	maxStageSlots = 16
	// defaultStageChunk is the largest chunk of copies below bigCopy: at
	// 55 GB/s 8 MiB is ~150 µs of DMA, which hides the few microseconds
	// of a copy enqueue, an event record and a wait, and splits into 8
	// memmove pieces of 1 MiB. Four slots of it are 32 MiB of pinned
	// memory per stager.
	defaultStageChunk = 8 << 20
	// bigStageChunk is the largest chunk of copies of bigCopy bytes or
	// more. Each chunk costs a fixed amount of host work that does not
	// overlap itself: an enqueue, an event record and wait, and the
	// wake-up of the pool's workers (futex wake-ups, tens of µs when the
	// workers have gone to sleep), and each memmove ends in a tail where
	// the last pieces run while the other participants idle. A 1 GiB copy
	// in 8 MiB chunks pays that 128 times; 16 MiB halves it, and its
	// pieces are 2 MiB with eight participants, long enough that a late
	// worker's wake-up is small beside its piece. The price is pinned
	// memory (64 MiB per stager), taken only by a stager that has served
	// a big copy, and a longer pipeline fill (the first chunk's DMA or
	// memmove runs alone: ~0.3 ms), which a copy of 256 MiB (~5-10 ms)
	// amortizes.
	bigStageChunk = 16 << 20
	bigCopy       = 256 << 20
	// stageMin is the smallest chunk (mid-sized copies use a slots-th of
	// their size, so that even they overlap).
	stageMin = 256 << 10
	// maxStagers is the number of copies of one device that run at once.
	maxStagers = 4
)

// stageConfig is the staging parameters of rt's copies (Config.StageChunk,
// StageSlots, CopyWorkers).
func stageConfig(rt *Runtime) stageSettings { return rt.stage }

// maxChunk is the largest chunk a copy may use under s.
func (s stageSettings) maxChunk() int {
	if s.BigAuto {
		return max(s.Chunk, bigStageChunk)
	}
	return s.Chunk
}

type stager struct {
	stream abi.Stream
	ev     []abi.Event
	slot   []*heapSlice
	mem    [][]byte
	size   uint64   // bytes per slot
	job    []memJob // per slot: the parallel memmove into or out of it
	// per copy: buffer bh at off, n bytes in chunks of c
	bh     abi.Buffer
	off    uint64
	n, c   uint64
	chunks int
}

// getStager takes a token (waiting while maxStagers copies of d run),
// then an idle stager of d, or makes one. Every path that does not hand
// out a stager gives the token back, so a waiter always wakes: when a
// stager's creation fails (a lost device, pinned memory exhausted, Close
// started) or Trim frees the idle ones, the next waiter gets the token
// and makes its own. A copy that gets its token after Close began fails
// with ErrClosed instead of starting. The caller has entered the runtime
// and gives the stager back with putStager.
func (d *Device) getStager(op string) (*stager, error) {
	d.stageTokens <- struct{}{}
	if !d.rt.l.alive() {
		<-d.stageTokens
		return nil, errClosed(op, "runtime")
	}
	select {
	case st := <-d.stagers:
		return st, nil
	default:
	}
	st, err := d.newStager()
	if err != nil {
		<-d.stageTokens
		return nil, err
	}
	return st, nil
}

// putStager makes st idle and gives its copy's token back. There are
// never more stagers than tokens, so the idle channel has room; were it
// full, st would be freed rather than block.
func (d *Device) putStager(st *stager) {
	st.bh = 0
	select {
	case d.stagers <- st:
	default:
		_ = d.freeStager(st)
	}
	<-d.stageTokens
}

func (d *Device) newStager() (*stager, error) {
	cfg := stageConfig(d.rt)
	st := &stager{ev: make([]abi.Event, cfg.Slots), slot: make([]*heapSlice, cfg.Slots),
		mem: make([][]byte, cfg.Slots), job: make([]memJob, cfg.Slots)}
	var err error
	if st.stream, err = d.newStream(); err == nil {
		for i := range st.ev {
			if st.ev[i], err = d.newEvent(false); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = d.sizeSlots(st, uint64(cfg.Chunk))
	}
	if err != nil {
		d.freeStager(st)
		return nil, err
	}
	return st, nil
}

// sizeSlots makes st's pinned slots size bytes each, if they are smaller
// (a stager's first big copy; idle stager, nothing in flight).
func (d *Device) sizeSlots(st *stager, size uint64) error {
	if st.size >= size {
		return nil
	}
	if err := d.freeSlots(st); err != nil {
		return err
	}
	for i := range st.slot {
		h, err := d.rt.heap.alloc(int(size))
		if err != nil {
			d.freeSlots(st)
			return err
		}
		st.slot[i], st.mem[i] = h, h.mem()
	}
	st.size = size
	return nil
}

func (d *Device) freeSlots(st *stager) error {
	var first error
	for i, h := range st.slot {
		if h != nil {
			if err := h.Free(); err != nil && first == nil {
				first = err
			}
			st.slot[i], st.mem[i] = nil, nil
		}
	}
	st.size = 0
	return first
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
		keep(rt.p.StreamDestroy("stream_destroy", rt.h, st.stream))
	}
	for i := range st.ev {
		if st.ev[i] != 0 {
			keep(rt.p.EventDestroy("event_destroy", rt.h, st.ev[i]))
		}
	}
	keep(d.freeSlots(st))
	return first
}

// trimStagers frees the idle stagers.
func (d *Device) trimStagers() error {
	var first error
	for {
		select {
		case st := <-d.stagers:
			if err := d.freeStager(st); err != nil && first == nil {
				first = err
			}
		default:
			return first
		}
	}
}

// chunkFor picks the chunk size for n bytes: a slots-th of the copy (so
// even a mid-sized copy overlaps), between stageMin and the chunk size of
// cfg (bigStageChunk for a copy of bigCopy bytes or more when the chunk
// was not set).
func chunkFor(n uint64, cfg stageSettings) uint64 {
	hi := uint64(cfg.Chunk)
	if cfg.BigAuto && n >= bigCopy {
		hi = max(hi, bigStageChunk)
	}
	c := (n/uint64(cfg.Slots) + 4095) &^ 4095
	return min(max(c, stageMin), hi)
}

// enqueue copies slot k to or from device memory at st.off+pos and
// records the slot's event behind it.
func (st *stager) enqueue(rt *Runtime, k int, pos, m uint64, up bool) error {
	a := abi.CopyArgs{StructSize: abi.SizeofCopyArgs, Stream: st.stream, Size: m}
	slot := st.slot[k]
	if up {
		a.DstBuffer, a.DstOffset = st.bh, st.off+pos
		a.SrcHost, a.SrcOffset = slot.blk.h, slot.off
	} else {
		a.SrcBuffer, a.SrcOffset = st.bh, st.off+pos
		a.DstHost, a.DstOffset = slot.blk.h, slot.off
	}
	if err := rt.p.Copy("copy", rt.h, &a); err != nil {
		return err
	}
	return rt.p.EventRecord("event_record", rt.h, st.ev[k], st.stream)
}

func (st *stager) wait(rt *Runtime, k int) error {
	return rt.p.EventSynchronize("event_synchronize", rt.h, st.ev[k])
}

// finish waits for the copy stream and for the memmoves still running, so
// no slot or job is in use when the stager goes back to the pool (also
// after an error).
func (st *stager) finish(rt *Runtime, pool *copyPool, err error) error {
	for k := range st.job {
		pool.finish(&st.job[k])
	}
	serr := rt.p.StreamSynchronize("stream_synchronize", rt.h, st.stream)
	if err == nil {
		err = serr
	}
	return err
}

// prepare takes a stager (getStager) and readies it for a copy of n bytes
// to or from buffer bh at off: the device's earlier work is done (a copy
// with the default ordering runs after it), the slots are large enough.
// It returns the stager, which the caller gives back with putStager, with
// the copy's extent and chunks set; on an error it has given the stager
// back itself.
func (d *Device) prepare(op string, bh abi.Buffer, off, n uint64) (*stager, error) {
	st, err := d.getStager(op)
	if err != nil {
		return nil, err
	}
	if err := d.sync(); err != nil {
		d.putStager(st)
		return nil, err
	}
	c := chunkFor(n, stageConfig(d.rt))
	if err := d.sizeSlots(st, c); err != nil {
		d.putStager(st)
		return nil, err
	}
	st.bh, st.off, st.n, st.c, st.chunks = bh, off, n, c, int((n+c-1)/c)
	return st, nil
}

// staged copies host (len(host) bytes) to buffer bh at off when up, else
// from there into host, through the pinned slots of a stager (prepare),
// which it gives back after. The caller holds uses of the runtime and of
// the buffer.
func (d *Device) staged(op string, bh abi.Buffer, off uint64, host []byte, up bool) error {
	st, err := d.prepare(op, bh, off, uint64(len(host)))
	if err != nil {
		return err
	}
	defer d.putStager(st)
	if up {
		return st.upload(d.rt, host)
	}
	return st.download(d.rt, host)
}

// upload copies src to the stager's buffer range through its slots.
//
// Chunk i's memmove into its slot starts on the pool; while the workers
// copy it, the caller completes chunk i-1 (copies what pieces of it are
// left, waits for the rest) and enqueues its DMA, so the enqueue and the
// workers' wake-ups overlap the copying, and the pool always has a chunk
// to work on.
func (st *stager) upload(rt *Runtime, src []byte) error {
	n, c, chunks, slots, pool := st.n, st.c, st.chunks, len(st.slot), rt.pool
	for i := 0; i <= chunks; i++ {
		if i < chunks {
			k, pos := i%slots, uint64(i)*c
			if i >= slots {
				if err := st.wait(rt, k); err != nil {
					return st.finish(rt, pool, err)
				}
			}
			m := min(c, n-pos)
			pool.start(&st.job[k], st.mem[k][:m], src[pos:pos+m])
		}
		if i > 0 {
			k, pos := (i-1)%slots, uint64(i-1)*c
			pool.finish(&st.job[k])
			if err := st.enqueue(rt, k, pos, min(c, n-pos), true); err != nil {
				return st.finish(rt, pool, err)
			}
		}
	}
	return st.finish(rt, pool, nil)
}

// download copies the stager's buffer range into dst through its slots.
//
// The DMAs of the first slots are all enqueued before the first wait.
// Once chunk i has arrived its memmove out of the slot starts on the
// pool; while the workers copy it, the caller completes chunk i-1's
// memmove (what pieces are left, then the wait), refills that slot with
// the DMA of chunk i-1+slots, and waits for chunk i+1's DMA, so the DMA
// engine keeps slots-1 chunks queued and the pool is never idle during
// the caller's event waits.
func (st *stager) download(rt *Runtime, dst []byte) error {
	n, c, chunks, slots, pool := st.n, st.c, st.chunks, len(st.slot), rt.pool
	for i := 0; i < chunks && i < slots; i++ {
		pos := uint64(i) * c
		if err := st.enqueue(rt, i, pos, min(c, n-pos), false); err != nil {
			return st.finish(rt, pool, err)
		}
	}
	for i := 0; i <= chunks; i++ {
		if i < chunks {
			k, pos := i%slots, uint64(i)*c
			if err := st.wait(rt, k); err != nil {
				return st.finish(rt, pool, err)
			}
			m := min(c, n-pos)
			pool.start(&st.job[k], dst[pos:pos+m], st.mem[k][:m])
		}
		if i > 0 {
			k := (i - 1) % slots
			pool.finish(&st.job[k])
			if next := i - 1 + slots; next < chunks {
				npos := uint64(next) * c
				if err := st.enqueue(rt, k, npos, min(c, n-npos), false); err != nil {
					return st.finish(rt, pool, err)
				}
			}
		}
	}
	return st.finish(rt, pool, nil)
}
