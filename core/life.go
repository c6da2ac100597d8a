// SPDX-License-Identifier: Apache-2.0

package core

import (
	"runtime"
	"sync/atomic"
	"time"
)

// life guards a plugin handle against use after free without a lock on
// the call path: every use brackets the plugin call with acquire/release
// (one atomic add each), and kill marks the object dead and waits until
// the uses in flight have released it, so a handle is destroyed only when
// no call can still pass it to C. Acquire never blocks, so a goroutine may
// hold several acquires of one object (the same buffer as source and
// destination) without deadlock. kill must not be called by a goroutine
// that holds an acquire of the same object.
//
// A pending LaunchBatch does not keep uses (they would make Free wait for
// a Submit that the freeing goroutine itself may be about to make): it
// keeps holds (hold/unhold), which make a Free or Unload fail with an
// error instead of waiting. A live Graph holds what it uses the same way. The word counts uses in bits 0-31 and holds
// in bits 32-61; bit 62 marks the object dead.
type life struct{ v atomic.Int64 }

const (
	lifeDead  = int64(1) << 62
	lifeHold  = int64(1) << 32
	lifeUses  = lifeHold - 1
	lifeHolds = lifeDead - lifeHold
)

// acquire registers a use; false when the object is dead (nothing held).
func (l *life) acquire() bool {
	if l.v.Add(1)&lifeDead != 0 {
		l.v.Add(-1)
		return false
	}
	return true
}

// release ends a use begun by a successful acquire.
func (l *life) release() { l.v.Add(-1) }

// alive reports whether the object has not been killed.
func (l *life) alive() bool { return l.v.Load()&lifeDead == 0 }

// hold registers a hold (a pending batch refers to the object); false
// when the object is dead (nothing held).
func (l *life) hold() bool {
	if l.v.Add(lifeHold)&lifeDead != 0 {
		l.v.Add(-lifeHold)
		return false
	}
	return true
}

// unhold ends a hold begun by a successful hold.
func (l *life) unhold() { l.v.Add(-lifeHold) }

// killResult says what kill did.
type killResult int

const (
	killed      killResult = iota // marked dead; no use in flight remains
	killDead                      // already dead: another kill won
	killRefused                   // held by a pending batch: still alive
)

// kill marks the object dead and waits for the uses in flight. It refuses
// (killRefused) while a batch holds the object, and reports killDead when
// the object was already dead.
func (l *life) kill() killResult {
	for {
		s := l.v.Load()
		if s&lifeDead != 0 {
			return killDead
		}
		if s&lifeHolds != 0 {
			return killRefused
		}
		if l.v.CompareAndSwap(s, s|lifeDead) {
			break
		}
	}
	for i := 0; l.v.Load()&lifeUses != 0; i++ {
		if i < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
	return killed
}

// enterLife begins a use of rt, then of the object whose life is l; when
// the object is dead it ends the runtime's use again and returns
// gone(op, what) (errClosed or errFreed). End a successful enterLife with
// exitLife. The caller has checked the object for nil.
func enterLife(rt *Runtime, l *life, op, what string, gone func(op, what string) error) error {
	if err := rt.enter(op); err != nil {
		return err
	}
	if !l.acquire() {
		rt.exit()
		return gone(op, what)
	}
	return nil
}

// exitLife ends a use begun by a successful enterLife.
func exitLife(rt *Runtime, l *life) {
	l.release()
	rt.exit()
}

// What may hold an object that destroy is asked to end, for its refusal.
const (
	byGraph        = "a live Graph: Close the graph first"
	byBatchOrGraph = "a pending LaunchBatch or a live Graph: Submit or Reset the batch, or Close the graph, first"
)

// destroy kills the object whose life is l, then frees its plugin handle
// with free (a call of a destroy or free slot), inside a use of rt. An
// object already dead gives gone(op, what); one that a live Graph (or,
// for holders byBatchOrGraph, a pending LaunchBatch) holds is refused
// with ErrFailedPrecondition.
func destroy(rt *Runtime, l *life, op, what, holders string, gone func(op, what string) error, free func() error) error {
	if err := rt.enter(op); err != nil {
		return err
	}
	defer rt.exit()
	switch l.kill() {
	case killDead:
		return gone(op, what)
	case killRefused:
		return errf(codeFailedPrecondition, op, "the %s is held by %s", what, holders)
	}
	return free()
}
