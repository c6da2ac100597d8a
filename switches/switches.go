// SPDX-License-Identifier: Apache-2.0

// Package switches holds the process-wide switches of the seed crate
// (metrale_gpu_runtime's lib.rs), with exactly its semantics:
//
//   - each switch is a cell that is sealed by the first value published to
//     it or by its first read, whichever comes first; later publications are
//     ignored and every read returns the sealed value;
//   - a publication of "no value" (nil, or false for SetHermetic) leaves the
//     cell open, so the environment still decides at the first read;
//   - the environment is read once, at the first read, and only the exact
//     values the seed matches count ("1" to turn on, "0" to turn off
//     METRALE_SSM_TAIL_MIDCHUNK); anything else is the default.
//
// All functions are safe for concurrent use. The package stands on its own
// (it was core/switches): the runtime never reads a switch; the serving
// code that links gpurt does.
package switches

import (
	"os"
	"sync"
)

// Environment variables read by this package.
const (
	EnvHermetic        = "METRALE_HERMETIC"
	EnvSSMTailCkpt     = "METRALE_SSM_TAIL_CKPT"
	EnvSSMTailMidchunk = "METRALE_SSM_TAIL_MIDCHUNK"
)

// cell is a write-once value, the Go form of Rust's OnceLock: set stores a
// value only while the cell is empty; getOrInit seals it with init() when
// it is still empty.
type cell struct {
	mu  sync.Mutex
	set bool
	val bool
}

// publish stores v if the cell is empty and reports whether it did.
func (c *cell) publish(v bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set {
		return false
	}
	c.set, c.val = true, v
	return true
}

// get returns the value and whether the cell is set, without sealing it.
func (c *cell) get() (bool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.val, c.set
}

// getOrInit returns the value, sealing the cell with init() if empty.
func (c *cell) getOrInit(init func() bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.set {
		c.set, c.val = true, init()
	}
	return c.val
}

func envIs(name, want string) bool {
	v, ok := os.LookupEnv(name)
	return ok && v == want
}

// SSMTailBoundary is the last multiple of blockSize strictly below
// totalTokens, and false when blockSize is 0 (or negative), when
// totalTokens <= blockSize, or when the boundary would be 0: a snapshot at
// token 0 would restore nothing.
//
// The SSM tail snapshot is placed there: in-pass by the mid-chunk capture,
// or, with SSMTailCkptEnabled on and SSMTailMidchunkEnabled off, by ending
// a prefill chunk there.
func SSMTailBoundary(totalTokens, blockSize int) (int, bool) {
	if blockSize <= 0 || totalTokens <= blockSize {
		return 0, false
	}
	boundary := ((totalTokens - 1) / blockSize) * blockSize
	if boundary <= 0 {
		return 0, false
	}
	return boundary, true
}

var ssmTailCkpt cell

// SSMTailCkptEnabled reports whether the tail-checkpoint chunk split is on:
// only with METRALE_SSM_TAIL_CKPT=1. Resolved on the first call and cached.
//
// Off by default: an A/B measured 2026-07-10 (174 samples per arm) found it
// perf-neutral, because the extra chunk split (median 868 ms) cancelled the
// SSM replay it saved (about 1374 ms).
func SSMTailCkptEnabled() bool {
	return ssmTailCkpt.getOrInit(func() bool { return envIs(EnvSSMTailCkpt, "1") })
}

var (
	hermeticFlag   cell // published by SetHermetic(true)
	hermeticAnswer cell // the cached answer of HermeticEnabled
)

// SetHermetic publishes `met serve --hermetic`; call it before the first
// HermeticEnabled, which caches its answer. Only true is published, so
// without the flag METRALE_HERMETIC=1 still decides.
func SetHermetic(on bool) {
	if on {
		hermeticFlag.publish(true)
	}
}

// HermeticEnabled reports whether hermetic mode is on: SetHermetic(true)
// was called before the first call, or METRALE_HERMETIC=1. Resolved on the
// first call and cached.
func HermeticEnabled() bool {
	return hermeticAnswer.getOrInit(func() bool {
		if v, ok := hermeticFlag.get(); ok {
			return v
		}
		return envIs(EnvHermetic, "1")
	})
}

var ssmTailMidchunk cell

// SetSSMTailMidchunk publishes --no-ssm-tail-midchunk: the serve plan passes
// a pointer to false when the flag is given and nil otherwise. nil publishes
// nothing, so METRALE_SSM_TAIL_MIDCHUNK still decides. The cell is set once:
// the first published value, or the first SSMTailMidchunkEnabled read, wins.
func SetSSMTailMidchunk(on *bool) {
	if on != nil {
		ssmTailMidchunk.publish(*on)
	}
}

// SSMTailMidchunkEnabled reports whether mid-chunk SSM tail capture is on:
// on unless --no-ssm-tail-midchunk was published or
// METRALE_SSM_TAIL_MIDCHUNK=0. While it is on the scheduler does not end
// chunks at SSMTailBoundary. Resolved on the first call and cached.
func SSMTailMidchunkEnabled() bool {
	return ssmTailMidchunk.getOrInit(func() bool { return !envIs(EnvSSMTailMidchunk, "0") })
}
