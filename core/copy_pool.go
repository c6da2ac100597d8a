// SPDX-License-Identifier: Apache-2.0

package core

import (
	"sync"
	"sync/atomic"
)

// The parallel memmove of staged copies.
//
// One core moves 8-12 GB/s between a Go slice and pinned memory, far below
// what a PCIe Gen5 DMA does (55 GB/s), so the memmove of each staging
// chunk is split into pieces that a small pool of goroutines copies at
// once, the calling goroutine among them. The pool is process-wide rather
// than per runtime: memory bandwidth is the machine's, several runtimes
// would only oversubscribe it, and parked workers cost a stack each and
// nothing else. Open starts it (copyPoolOf).
//
// A copy allocates nothing: each stager owns one memJob, reused for every
// chunk; a worker receives a pointer to it over a channel, claims pieces
// with an atomic counter and reports with the job's WaitGroup, so that
// when the caller's Wait returns no worker touches the job (or the
// slices) any more. The caller claims pieces too, so a copy progresses
// even while every worker is busy with another copy.

const (
	// maxCopyParts caps the goroutines that share one memmove (the caller
	// and maxCopyParts-1 workers). Measured on the H200 machine (16 cores,
	// 1 GiB staged copies, 16 MiB chunks, scripts/stage_sweep.sh): 8 gave
	// 35.8 GB/s up and 30.9 down, 12 gave 50.5 and 44.8, 15 gave 49.6 and
	// 37.8: past about 12 memory bandwidth, not cores, limits the copy.
	maxCopyParts = 12
	// minCopyPiece is the smallest piece worth a worker: waking a
	// goroutine costs microseconds, 1 MiB takes about 100 µs on one core.
	// (Large copies use 16 MiB chunks, whose pieces are 2 MiB with eight
	// participants: see chunkFor.)
	minCopyPiece = 1 << 20
)

// copyPool is a set of parked goroutines that copy pieces of memJobs.
type copyPool struct {
	parts int          // goroutines sharing a memmove, the caller included
	jobs  chan *memJob // one send per worker asked to help
}

// memJob is one parallel memmove: copy(dst, src) in pieces of piece bytes.
type memJob struct {
	dst, src []byte
	piece    int
	pieces   int32
	next     atomic.Int32 // the next piece to claim
	wg       sync.WaitGroup
}

var copyPools struct {
	mu sync.Mutex
	m  map[int]*copyPool
}

// copyPoolOf is the process-wide pool of parts participants (a runtime's
// CopyWorkers, by default min(GOMAXPROCS-1, maxCopyParts), so one core
// stays free for the rest of the process and for the plugin's own threads:
// the mock's "DMA" is a memcpy on its stream thread, and on a 2-core
// machine a memmove on both cores only fights it). Runtimes with the same
// setting share one pool; Open takes it once, so a copy does not look it
// up.
func copyPoolOf(parts int) *copyPool {
	copyPools.mu.Lock()
	defer copyPools.mu.Unlock()
	if copyPools.m == nil {
		copyPools.m = map[int]*copyPool{}
	}
	p := copyPools.m[parts]
	if p == nil {
		p = newCopyPool(parts)
		copyPools.m[parts] = p
	}
	return p
}

// newCopyPool starts parts-1 workers (none for parts <= 1: copies then
// run on the caller alone).
func newCopyPool(parts int) *copyPool {
	p := &copyPool{parts: max(parts, 1)}
	if p.parts > 1 {
		// Room for the wake-ups of several concurrent copies; a full
		// channel only makes a sender wait for a worker, which never blocks.
		p.jobs = make(chan *memJob, 8*p.parts)
		for range p.parts - 1 {
			go p.work()
		}
	}
	return p
}

// stop ends the workers (tests; the shared pool lives as long as the
// process). No copy may be running or start afterwards.
func (p *copyPool) stop() {
	if p.jobs != nil {
		close(p.jobs)
	}
}

func (p *copyPool) work() {
	for j := range p.jobs {
		j.run()
		j.wg.Done()
	}
}

// run copies pieces of j until none is left to claim.
func (j *memJob) run() {
	for {
		i := int(j.next.Add(1)) - 1
		if i >= int(j.pieces) {
			return
		}
		lo := i * j.piece
		hi := min(lo+j.piece, len(j.src))
		copy(j.dst[lo:hi], j.src[lo:hi])
	}
}

// copy is copy(dst, src) (len(dst) >= len(src)) split across the pool:
// pieces of at least minCopyPiece bytes, page-aligned, at most one per
// participant. j is the caller's own job, idle on entry and on return.
func (p *copyPool) copy(j *memJob, dst, src []byte) {
	p.start(j, dst, src)
	p.finish(j)
}

// start begins copy(dst, src) (len(dst) >= len(src)) on the pool's
// workers and returns at once; finish(j) completes it. Between the two
// the caller may do other work (wait for the next DMA, enqueue one) while
// the workers copy, and must not touch dst or src. A copy too small to
// split runs here, before start returns. j is idle on entry.
func (p *copyPool) start(j *memJob, dst, src []byte) {
	n := len(src)
	parts := min(p.parts, n/minCopyPiece)
	if parts <= 1 {
		copy(dst, src)
		j.pieces = 0
		return
	}
	piece := ((n+parts-1)/parts + 4095) &^ 4095
	pieces := (n + piece - 1) / piece
	j.dst, j.src, j.piece, j.pieces = dst[:n], src, piece, int32(pieces)
	j.next.Store(0)
	// One wake-up per worker that can find a piece, the caller's share
	// left aside: it joins in finish. A worker that wakes after every
	// piece is claimed just reports.
	wake := min(pieces-1, p.parts-1)
	j.wg.Add(wake)
	for range wake {
		p.jobs <- j
	}
}

// finish copies the pieces of j that no worker has claimed yet, waits for
// the workers' pieces, and leaves j idle: no worker touches it, dst or
// src afterwards.
func (p *copyPool) finish(j *memJob) {
	if j.pieces == 0 {
		return
	}
	j.run()
	j.wg.Wait()
	j.dst, j.src, j.pieces = nil, nil, 0 // hold no Go memory between copies
}
