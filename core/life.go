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
type life struct{ v atomic.Int64 }

const lifeDead = int64(1) << 62

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

// kill marks the object dead and waits for the uses in flight; it returns
// false when the object was already dead (another kill won).
func (l *life) kill() bool {
	for {
		s := l.v.Load()
		if s&lifeDead != 0 {
			return false
		}
		if l.v.CompareAndSwap(s, s|lifeDead) {
			break
		}
	}
	for i := 0; l.v.Load() != lifeDead; i++ {
		if i < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
	return true
}
