// SPDX-License-Identifier: Apache-2.0

package core

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/internal/abi"
)

// The op cache: GEMM plans keyed by everything that selects an algorithm
// (device, op, dtypes, transposes, m, n, k, leading dimensions, batch and
// strides, epilogue and bias type, compute type, the flags sent (ABI 1.9:
// GemmDesc.ConstA) and the alignment class of each pointer), bounded by
// LRU eviction. The key is a comparable
// struct, so a hit is a map lookup and allocates nothing.
//
// In front of the map, each stream keeps a small direct-mapped memo of
// the plans its Gemm calls used, compared by the caller's GemmDesc value
// and the alignment classes (Stream.gemmMemo): a repeated GEMM skips the
// descriptor's validation and conversion, the map and the lock. A memo
// hit takes its reference with one atomic add and then checks that the
// plan was not evicted (evicted is set under the lock before the plan is
// put on the dead list, and the dead list is read under the lock later,
// so a plan whose reference count a destroyer reads as zero has been seen
// evicted by any memo hit racing with it).
//
// Recency is a stamp from one clock (an atomic counter advanced by every
// lookup); eviction removes the entry with the oldest stamp, found by a
// scan of the map (evictions happen only on a miss, which makes a plan).
// The clock also counts hits: hits = clock - misses.
//
// A plan may still be used by work enqueued on a stream after the run
// call returned, so an evicted plan is not destroyed at once: it waits in
// a dead list until a device synchronize that began after its last run
// (Device.Synchronize, Runtime.Trim, or, when deadMax plans wait, an
// internal one in the Gemm call that evicts). A plan in use by a run call
// in progress (refs > 0) is not destroyed even then.

const deadMax = 64

type planKey struct {
	dev  uint32
	op   uint32 // 0: gemm
	desc abi.GemmDesc
}

type planEntry struct {
	key planKey
	src GemmDesc // the descriptor of the call that made the plan (the stream memo's key)
	// need is the bytes that A, B, C and D need, the bias's M and the norm weight's K
	// elements in bytes, for key.desc (gemmNeeds).
	need    [6]uint64
	dev     *Device
	h       abi.GemmPlan
	refs    atomic.Int32
	evicted atomic.Bool   // out of the map (set under opCache.mu)
	used    atomic.Uint64 // the clock at the last lookup
}

type opCache struct {
	rt    *Runtime
	cap   int
	clock atomic.Uint64 // lookups: hits and misses

	mu    sync.Mutex
	m     map[planKey]*planEntry
	dead  []*planEntry
	stats diag.OpCache // Misses and Evictions (Hits from the clock)
}

func newOpCache(rt *Runtime, capacity int) *opCache {
	if capacity < 1 {
		capacity = 1
	}
	return &opCache{rt: rt, cap: capacity, m: make(map[planKey]*planEntry)}
}

// OpCacheStats returns the op cache's counters.
func (rt *Runtime) opCacheStats() diag.OpCache {
	if !rt.ok() {
		return diag.OpCache{}
	}
	c := rt.plans
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Hits = c.clock.Load() - s.Misses
	s.Size, s.Capacity, s.Pending = len(c.m), c.cap, len(c.dead)
	return s
}

// acquire takes a reference on e unless it was evicted (then nothing is
// held). The order, add then check, pairs with evict then read refs in
// the destroyer (see the top of the file).
func (e *planEntry) acquire() bool {
	e.refs.Add(1)
	if e.evicted.Load() {
		e.refs.Add(-1)
		return false
	}
	return true
}

// hit counts a hit on e and makes it the most recently used.
func (c *opCache) hit(e *planEntry) { e.used.Store(c.clock.Add(1)) }

// evictLocked moves e from the map to the dead list; c.mu is held.
func (c *opCache) evictLocked(e *planEntry) {
	delete(c.m, e.key)
	e.evicted.Store(true)
	c.dead = append(c.dead, e)
}

// get returns the plan for k with a reference the caller drops with put.
// src is the caller's descriptor, kept with a plan it makes. The caller
// has entered the runtime.
func (c *opCache) get(d *Device, k *planKey, src *GemmDesc) (*planEntry, error) {
	c.mu.Lock()
	if e, ok := c.m[*k]; ok {
		e.refs.Add(1) // in the map: not evicted, and eviction needs c.mu
		c.mu.Unlock()
		c.hit(e)
		return e, nil
	}
	c.stats.Misses++
	c.clock.Add(1)
	c.mu.Unlock()

	rt := c.rt
	var h abi.GemmPlan
	if err := rt.p.GemmPlanCreate("gemm_plan_create", rt.h, d.index, &k.desc, &h); err != nil {
		return nil, err
	}
	e := &planEntry{key: *k, src: *src, need: gemmNeeds(&k.desc), dev: d, h: h}
	e.refs.Store(1)
	c.mu.Lock()
	if e2, ok := c.m[*k]; ok { // another goroutine made it meanwhile
		e2.refs.Add(1)
		c.mu.Unlock()
		_ = rt.p.GemmPlanDestroy("gemm_plan_destroy", rt.h, h)
		return e2, nil
	}
	e.used.Store(c.clock.Load())
	c.m[*k] = e
	for len(c.m) > c.cap {
		var t *planEntry
		for _, x := range c.m {
			if x != e && (t == nil || x.used.Load() < t.used.Load()) {
				t = x
			}
		}
		c.evictLocked(t)
		c.stats.Evictions++
	}
	flush := len(c.dead) >= deadMax
	c.mu.Unlock()
	if flush {
		c.flush()
	}
	return e, nil
}

func (c *opCache) put(e *planEntry) { e.refs.Add(-1) }

// takeDead removes the dead plans of d that no call is using.
func (c *opCache) takeDead(d *Device) []*planEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*planEntry
	kept := c.dead[:0]
	for _, e := range c.dead {
		if e.dev == d && e.refs.Load() == 0 {
			out = append(out, e)
		} else {
			kept = append(kept, e)
		}
	}
	clear(c.dead[len(kept):])
	c.dead = kept
	return out
}

// giveBack returns plans taken by takeDead that could not be destroyed.
func (c *opCache) giveBack(es []*planEntry) {
	c.mu.Lock()
	c.dead = append(c.dead, es...)
	c.mu.Unlock()
}

// destroy destroys plans whose device was synchronized after they were
// taken.
func (c *opCache) destroy(es []*planEntry) error {
	rt := c.rt
	var first error
	for _, e := range es {
		if err := rt.p.GemmPlanDestroy("gemm_plan_destroy", rt.h, e.h); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// deviceLost reports whether err says the device is lost: it runs no
// more work, so what queued work used (evicted plans) can be destroyed
// without a synchronize, instead of being kept until Close.
func deviceLost(err error) bool { return errors.Is(err, ErrDeviceLost) }

// flush synchronizes each device with dead plans and destroys them (on
// a lost device, without the synchronize).
func (c *opCache) flush() error {
	var first error
	for _, d := range c.rt.devices {
		es := c.takeDead(d)
		if len(es) == 0 {
			continue
		}
		if err := d.sync(); err != nil && !deviceLost(err) {
			c.giveBack(es)
			if first == nil {
				first = err
			}
			continue
		}
		if err := c.destroy(es); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// clear evicts every plan and destroys those not in use (Runtime.Trim).
func (c *opCache) clear() error {
	c.mu.Lock()
	for _, e := range c.m {
		c.evictLocked(e)
	}
	c.mu.Unlock()
	return c.flush()
}
