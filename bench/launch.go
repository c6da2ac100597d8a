// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"time"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/stats"
)

// launch measures the built-in fill_f32 on one element: the host cost of
// enqueueing it (a batch of launches timed without the synchronize that
// follows), the end-to-end time per launch of the batch including that
// synchronize (and the launch rate it gives), and one launch followed by
// a synchronize.
func (r *runner) launch() error {
	mod, err := r.dev.BuiltinModule()
	if err != nil {
		return err
	}
	fill, err := mod.Kernel("fill_f32")
	if err != nil {
		return err
	}
	buf, err := r.dev.Alloc(256)
	if err != nil {
		return err
	}
	defer buf.Free()
	s := r.stream
	cfg := core.Grid1D(1, 1)
	one := func() error {
		return s.Launch(fill, cfg, core.ArgBuffer(buf), core.ArgScalar[float32](1), core.ArgScalar[uint64](1))
	}
	if err := one(); err != nil {
		return err
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	// A batch stays below the depth at which a driver's launch queue
	// blocks, so the enqueue time is the host's alone.
	batch, trials := 1000, 50 // as bench/raw times cuLaunchKernel
	if r.opts.Quick {
		trials = 10
	}
	var enq, e2e []float64
	for t := 0; t < trials; t++ {
		t0 := time.Now()
		for i := 0; i < batch; i++ {
			if err := one(); err != nil {
				return err
			}
		}
		t1 := time.Now()
		if err := s.Synchronize(); err != nil {
			return err
		}
		t2 := time.Now()
		enq = append(enq, float64(t1.Sub(t0).Nanoseconds())/1e3/float64(batch))
		e2e = append(e2e, float64(t2.Sub(t0).Nanoseconds())/1e3/float64(batch))
	}
	rt, rtTrials := 200, 10
	if r.opts.Quick {
		rt, rtTrials = 50, 3
	}
	var round []float64
	for t := 0; t < rtTrials; t++ {
		t0 := time.Now()
		for i := 0; i < rt; i++ {
			if err := one(); err != nil {
				return err
			}
			if err := s.Synchronize(); err != nil {
				return err
			}
		}
		round = append(round, float64(time.Since(t0).Nanoseconds())/1e3/float64(rt))
	}
	allocs := AllocsPerOp(func(n int) {
		for i := 0; i < n; i++ {
			_ = one()
		}
	}, batch)
	if err := s.Synchronize(); err != nil {
		return err
	}
	bus, ballocs, err := launchBatch(s, fill, buf, cfg, batch, trials)
	if err != nil {
		return err
	}
	me, m2 := stats.Median(enq), stats.Median(e2e)
	r.rep.add(Result{Metric: "launch_us", Value: me, Unit: "us", Note: "host enqueue of fill_f32 on 1 element (Stream.Launch), batches of launches"})
	r.rep.add(Result{Metric: "launch_allocs", Value: allocs, Unit: "allocs/op", Note: "goal 0"})
	r.rep.add(Result{Metric: "launch_batch_us", Value: bus, Unit: "us", Note: fmt.Sprintf("host enqueue per launch of fill_f32 on 1 element, LaunchBatch.Submit of %d (Add and Submit; launch_batch slot, or one launch per item on a plugin without it)", launchBatchSize)})
	r.rep.add(Result{Metric: "launch_batch_allocs", Value: ballocs, Unit: "allocs/op", Note: fmt.Sprintf("per batch of %d launches (Adds and Submit), goal 0", launchBatchSize)})
	r.rep.add(Result{Metric: "launch_e2e_us", Value: m2, Unit: "us", Note: "per launch, a batch and its one synchronize"})
	r.rep.add(Result{Metric: "launches_per_s", Value: 1e6 / m2, Unit: "1/s", Note: "end to end, from launch_e2e_us"})
	r.rep.add(Result{Metric: "launch_sync_us", Value: stats.Median(round), Unit: "us", Note: "one launch + Stream.Synchronize"})
	r.addCgoPair("launch_host_us", "launch_host_cgoproc_us")
	// gpurt-cgobench's batch figures: launch_batch_host_us (gpurt's
	// Submit of 64, baseline the slot called from C) as
	// launch_batch_cgoproc_us, launch_batch_c_us, and on cuda
	// launch_batch_vs_raw (baseline raw cuLaunchKernel from C).
	for _, m := range [][2]string{{"launch_batch_host_us", "launch_batch_cgoproc_us"}, {"launch_batch_c_us", "launch_batch_c_us"}, {"launch_batch_vs_raw", "launch_batch_vs_raw"}} {
		if c, ok := r.cgo[m[0]]; ok {
			r.rep.add(Result{Metric: m[1], Value: c.Value, Unit: c.Unit, Baseline: c.Baseline, Ratio: c.Ratio,
				Note: "gpurt-cgobench, one process: " + c.Note})
		}
	}
	return nil
}

// launchBatchSize is the number of launches per LaunchBatch.Submit that
// launch_batch_us (and gpurt-cgobench's batch figures) measure.
const launchBatchSize = 64

// launchBatch measures the host cost per launch of the same fill_f32
// launch as launch_us, enqueued by LaunchBatch.Submit in batches of
// launchBatchSize (the Adds and the Submit timed; total launches per timed
// run as launch_us's), and the allocations of one batch.
func launchBatch(s *core.Stream, fill *core.Kernel, buf *core.Buffer, cfg core.LaunchConfig, total, trials int) (us, allocs float64, err error) {
	b := s.NewLaunchBatch()
	one := func() error {
		for i := 0; i < launchBatchSize; i++ {
			if err := b.Add(fill, cfg, core.ArgBuffer(buf), core.ArgScalar[float32](1), core.ArgScalar[uint64](1)); err != nil {
				return err
			}
		}
		_, err := b.Submit()
		return err
	}
	if err := one(); err != nil { // grows the batch's arrays
		return 0, 0, err
	}
	if err := s.Synchronize(); err != nil {
		return 0, 0, err
	}
	rounds := max(1, total/launchBatchSize)
	var per []float64
	for t := 0; t < trials; t++ {
		t0 := time.Now()
		for i := 0; i < rounds; i++ {
			if err := one(); err != nil {
				return 0, 0, err
			}
		}
		d := time.Since(t0)
		if err := s.Synchronize(); err != nil {
			return 0, 0, err
		}
		per = append(per, float64(d.Nanoseconds())/1e3/float64(rounds*launchBatchSize))
	}
	allocs = AllocsPerOp(func(n int) {
		for i := 0; i < n; i++ {
			_ = one()
		}
	}, 20)
	return stats.Median(per), allocs, s.Synchronize()
}
