// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/bytesize"
	"github.com/metrale/gpurt/internal/stats"
)

// defaultSizes are the copy sizes when Options.Sizes is nil.
func (r *runner) defaultSizes() []int {
	switch {
	case r.opts.Quick:
		return []int{64 << 10, 1 << 20, 16 << 20}
	case r.gpu:
		return []int{64 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30}
	}
	return []int{64 << 10, 1 << 20, 16 << 20, 256 << 20}
}

// reps is how many times a copy of n bytes is repeated (the median is
// reported): enough to move a few GiB, at least 3 (5), at most 20 (50).
func (r *runner) reps(n int) int {
	lo, hi, budget := 5, 50, 4<<30
	if r.opts.Quick {
		lo, hi, budget = 3, 20, 64<<20
	}
	return min(max(budget/n, lo), hi)
}

// fillRandom fills b with random bytes.
func fillRandom(b []byte, seed uint64) {
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 'g', 'p', 'u', 'r', 't'})
	_, _ = rng.Read(b)
}

// copies measures, at each size: Go []byte up and down through
// CopyFromHost/CopyToHost (staged through the pinned heap), pinned memory
// up and down with Stream.CopyFromPinned/CopyToPinned + Synchronize, and
// device to device with Stream.CopyDevice + Synchronize. Bandwidth is
// bytes copied / wall time of the call (and its synchronize), median of
// the repeats, in GB/s (1e9 bytes).
func (r *runner) copies() error {
	sizes := r.opts.Sizes
	if len(sizes) == 0 {
		sizes = r.defaultSizes()
	}
	maxN := 0
	for _, n := range sizes {
		maxN = max(maxN, n)
	}
	if total := r.dev.Info().MemoryTotal; total > 0 && uint64(maxN)*2 > total {
		return fmt.Errorf("copy size %s: two buffers of it do not fit the device's %d bytes", bytesize.Format(int64(maxN)), total)
	}
	a, err := r.dev.Alloc(maxN)
	if err != nil {
		return err
	}
	defer a.Free()
	b, err := r.dev.Alloc(maxN)
	if err != nil {
		return err
	}
	defer b.Free()
	hb, err := r.rt.AllocHost(maxN)
	if err != nil {
		return err
	}
	defer hb.Free()
	src := make([]byte, maxN)
	dst := make([]byte, maxN)
	fillRandom(src, 1)
	copy(hb.Bytes(), src)
	if err := core.CopyFromHost(a, src); err != nil {
		return err
	}
	s := r.stream
	type kind struct {
		metric, note string
		run          func(av, bv core.View, n int) error
	}
	// pinned is a kind's run that copies with cp between the device view
	// and hb's first n bytes, then synchronizes.
	pinned := func(cp func(av core.View, pv core.PinnedView) error) func(av, _ core.View, n int) error {
		return func(av, _ core.View, n int) error {
			pv, err := hb.View(0, n)
			if err == nil {
				err = cp(av, pv)
			}
			if err == nil {
				err = s.Synchronize()
			}
			return err
		}
	}
	kinds := []kind{
		{"htod_pageable_gbps", "CopyFromHost of a Go []byte", func(av, _ core.View, n int) error {
			return core.CopyFromHost(av, src[:n])
		}},
		{"dtoh_pageable_gbps", "CopyToHost to a Go []byte", func(av, _ core.View, n int) error {
			return core.CopyToHost(dst[:n], av)
		}},
		{"htod_pinned_gbps", "Stream.CopyFromPinned + Synchronize", pinned(func(av core.View, pv core.PinnedView) error {
			return s.CopyFromPinned(av, pv)
		})},
		{"dtoh_pinned_gbps", "Stream.CopyToPinned + Synchronize", pinned(func(av core.View, pv core.PinnedView) error {
			return s.CopyToPinned(pv, av)
		})},
		{"dtod_gbps", "Stream.CopyDevice + Synchronize (bytes copied, not read+written)", func(av, bv core.View, n int) error {
			if err := s.CopyDevice(bv, av); err != nil {
				return err
			}
			return s.Synchronize()
		}},
	}
	for _, k := range kinds {
		for _, n := range sizes {
			av, err := a.View(0, n)
			if err != nil {
				return err
			}
			bv, err := b.View(0, n)
			if err != nil {
				return err
			}
			if err := k.run(av, bv, n); err != nil { // warm-up
				return fmt.Errorf("%s %s: %w", k.metric, bytesize.Format(int64(n)), err)
			}
			reps := r.reps(n)
			gbps := make([]float64, 0, reps)
			for i := 0; i < reps; i++ {
				t0 := time.Now()
				if err := k.run(av, bv, n); err != nil {
					return fmt.Errorf("%s %s: %w", k.metric, bytesize.Format(int64(n)), err)
				}
				gbps = append(gbps, float64(n)/float64(time.Since(t0).Nanoseconds()))
			}
			r.rep.add(Result{Metric: k.metric, Value: stats.Median(gbps), Unit: "GB/s", Bytes: n,
				Note: fmt.Sprintf("%s, median of %d", k.note, reps)})
		}
	}
	// the round trip must hold: what went up pageable comes down intact
	if err := core.CopyFromHost(a, src); err != nil {
		return err
	}
	if err := core.CopyToHost(dst, a); err != nil {
		return err
	}
	for i := range src {
		if src[i] != dst[i] {
			return fmt.Errorf("round trip of %s: byte %d differs", bytesize.Format(int64(maxN)), i)
		}
	}
	return nil
}
