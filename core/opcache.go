// SPDX-License-Identifier: Apache-2.0

package core

import (
	"sync"
	"unsafe"

	"github.com/metrale/gpurt/abi"
	"github.com/metrale/gpurt/core/internal/ffi"
)

// The op cache: GEMM plans keyed by everything that selects an algorithm
// (device, op, dtypes, transposes, m, n, k, leading dimensions, batch and
// strides, epilogue and bias type, compute type, and the alignment class
// of each pointer), bounded by an LRU list. The key is a comparable
// struct, so a hit is a map lookup and allocates nothing.
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
	key        planKey
	dev        *Device
	h          uintptr // gpurt_gemm_plan*
	refs       int32
	prev, next *planEntry
}

type opCache struct {
	rt  *Runtime
	cap int

	mu         sync.Mutex
	m          map[planKey]*planEntry
	head, tail *planEntry // most recent first
	dead       []*planEntry
	stats      OpCacheStats
}

// OpCacheStats are the op cache's counters.
type OpCacheStats struct {
	Hits      uint64
	Misses    uint64
	Evictions uint64
	Size      int // plans cached
	Capacity  int
	Pending   int // evicted plans waiting for a device synchronize
}

func newOpCache(rt *Runtime, capacity int) *opCache {
	if capacity < 1 {
		capacity = 1
	}
	return &opCache{rt: rt, cap: capacity, m: make(map[planKey]*planEntry)}
}

// OpCacheStats returns the op cache's counters.
func (rt *Runtime) OpCacheStats() OpCacheStats {
	c := rt.plans
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Size, s.Capacity, s.Pending = len(c.m), c.cap, len(c.dead)
	return s
}

func (c *opCache) unlink(e *planEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		c.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		c.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (c *opCache) pushFront(e *planEntry) {
	e.next = c.head
	if c.head != nil {
		c.head.prev = e
	}
	c.head = e
	if c.tail == nil {
		c.tail = e
	}
}

// get returns the plan for k with a reference the caller drops with put.
// The caller has entered the runtime.
func (c *opCache) get(d *Device, k *planKey) (*planEntry, error) {
	c.mu.Lock()
	if e, ok := c.m[*k]; ok {
		c.stats.Hits++
		if c.head != e {
			c.unlink(e)
			c.pushFront(e)
		}
		e.refs++
		c.mu.Unlock()
		return e, nil
	}
	c.stats.Misses++
	c.mu.Unlock()

	rt := c.rt
	var h uintptr
	if err := rt.check("gemm_plan_create", ffi.Call4(rt.api.GemmPlanCreate, rt.h, uintptr(d.index), uintptr(unsafe.Pointer(&k.desc)), uintptr(unsafe.Pointer(&h)))); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if e, ok := c.m[*k]; ok { // another goroutine made it meanwhile
		e.refs++
		c.mu.Unlock()
		_ = rt.check("gemm_plan_destroy", ffi.Call2(rt.api.GemmPlanDestroy, rt.h, h))
		return e, nil
	}
	e := &planEntry{key: *k, dev: d, h: h, refs: 1}
	c.m[*k] = e
	c.pushFront(e)
	for len(c.m) > c.cap {
		t := c.tail
		c.unlink(t)
		delete(c.m, t.key)
		c.dead = append(c.dead, t)
		c.stats.Evictions++
	}
	flush := len(c.dead) >= deadMax
	c.mu.Unlock()
	if flush {
		c.flush()
	}
	return e, nil
}

func (c *opCache) put(e *planEntry) {
	c.mu.Lock()
	e.refs--
	c.mu.Unlock()
}

// takeDead removes the dead plans of d that no call is using.
func (c *opCache) takeDead(d *Device) []*planEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*planEntry
	kept := c.dead[:0]
	for _, e := range c.dead {
		if e.dev == d && e.refs == 0 {
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
		if err := rt.check("gemm_plan_destroy", ffi.Call2(rt.api.GemmPlanDestroy, rt.h, e.h)); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// flush synchronizes each device with dead plans and destroys them.
func (c *opCache) flush() error {
	var first error
	for _, d := range c.rt.devices {
		es := c.takeDead(d)
		if len(es) == 0 {
			continue
		}
		if err := d.sync(); err != nil {
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
	for e := c.head; e != nil; {
		next := e.next
		e.prev, e.next = nil, nil
		c.dead = append(c.dead, e)
		e = next
	}
	c.head, c.tail = nil, nil
	clear(c.m)
	c.mu.Unlock()
	return c.flush()
}
