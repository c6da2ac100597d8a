// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/metrale/gpurt/internal/stats"
)

// NsPerOp measures loop, which performs n operations, in nanoseconds per
// operation: it grows n until one run takes a tenth of target, scales n to
// target, runs trials runs, and returns the best (lowest) and the median
// per-operation time. The best is the figure for a call path's cost: on a
// shared machine a run now and then lands on a slower core or beside other
// work, and the slow mode can hold for a whole run. cmd/gpurt-cgobench
// uses it too, so both sides of the dispatch comparison are measured
// alike.
func NsPerOp(loop func(n int), target time.Duration, trials int) (best, med float64) {
	n := 100
	for {
		t0 := time.Now()
		loop(n)
		d := time.Since(t0)
		if d >= target/10 || n >= 1<<30 {
			if d <= 0 {
				d = 1
			}
			n = int(float64(n) * float64(target) / float64(d))
			break
		}
		n *= 4
	}
	n = max(n, 1)
	ns := make([]float64, 0, trials)
	for i := 0; i < max(trials, 1); i++ {
		t0 := time.Now()
		loop(n)
		ns = append(ns, float64(time.Since(t0).Nanoseconds())/float64(n))
	}
	slices.Sort(ns)
	med = stats.Sorted(ns, 50)
	return ns[0], med
}

// AllocsPerOp is the number of heap allocations per operation of loop(n),
// counted as testing.AllocsPerRun does: with GOMAXPROCS at 1, after a
// warm-up run, from runtime.MemStats.Mallocs.
func AllocsPerOp(loop func(n int), n int) float64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	loop(1)
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	loop(n)
	runtime.ReadMemStats(&b)
	return float64(b.Mallocs-a.Mallocs) / float64(n)
}

// phase runs fn and, when it takes longer than a second, writes a
// progress line to w when the second has passed and another when fn
// returns.
func phase(w io.Writer, name string, fn func() error) error {
	if w == nil {
		return fn()
	}
	var mu sync.Mutex
	shown := false
	t0 := time.Now()
	tm := time.AfterFunc(time.Second, func() {
		mu.Lock()
		defer mu.Unlock()
		shown = true
		fmt.Fprintf(w, "gpurt bench: %s ...\n", name)
	})
	err := fn()
	tm.Stop()
	mu.Lock()
	defer mu.Unlock()
	if shown {
		state := "done"
		if err != nil {
			state = "failed"
		}
		fmt.Fprintf(w, "gpurt bench: %s %s (%.1f s)\n", name, state, time.Since(t0).Seconds())
	}
	return err
}
