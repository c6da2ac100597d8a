// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"fmt"
	"math"
	"strings"

	"github.com/metrale/gpurt/core"
)

// batchChecks check core.LaunchBatch: through the plugin's launch_batch
// slot (ABI 1.2), or the core's fallback of one launch per item on an
// older plugin.
func batchChecks() []check {
	return []check{
		{"batch/dependent", batchDependent},
		{"batch/invalid_item", batchInvalidItem},
		{"batch/plugin_rejects_item", batchPluginRejects},
		{"batch/empty", batchEmpty},
		{"batch/1000_launches", batchThousand},
		{"batch/reuse", batchReuse},
		{"batch/free_pending", batchFreePending},
	}
}

// batchEnv is what the batch checks (and the graph checks) share: a
// stream, fill_f32, scale_f32, axpy_f32, add_f32, mul_f32, sleep_ns, and
// two buffers of n f32 values.
type batchEnv struct {
	s                                  *core.Stream
	fill, scale, axpy, add, mul, sleep *core.Kernel
	x, y                               *core.Buffer
	n                                  int
	cfg                                core.LaunchConfig
}

func newBatchEnv(e *env, n int) (*batchEnv, func(), error) {
	be := &batchEnv{n: n, cfg: core.Grid1D(n, 128)}
	ks := []**core.Kernel{&be.fill, &be.scale, &be.axpy, &be.add, &be.mul, &be.sleep}
	for i, name := range []string{"fill_f32", "scale_f32", "axpy_f32", "add_f32", "mul_f32", "sleep_ns"} {
		k, err := kernel(e.dev, name)
		if err != nil {
			return nil, nil, err
		}
		*ks[i] = k
	}
	var err error
	if be.s, err = e.dev.NewStream(); err != nil {
		return nil, nil, err
	}
	if be.x, err = e.dev.Alloc(4 * n); err != nil {
		be.s.Close()
		return nil, nil, err
	}
	if be.y, err = e.dev.Alloc(4 * n); err != nil {
		be.x.Free()
		be.s.Close()
		return nil, nil, err
	}
	return be, func() { _ = be.s.Synchronize(); be.x.Free(); be.y.Free(); be.s.Close() }, nil
}

// withBatchEnv runs fn on a new batchEnv of n values, released after.
func withBatchEnv(e *env, n int, fn func(be *batchEnv) error) error {
	be, done, err := newBatchEnv(e, n)
	if err != nil {
		return err
	}
	defer done()
	return fn(be)
}

// withSevens runs fn on a batch environment of 256 elements whose x is
// all 7, with a new batch on its stream: the start of the checks that a
// rejected batch leaves x as it was.
func withSevens(e *env, fn func(be *batchEnv, b *core.LaunchBatch) error) error {
	return withBatchEnv(e, 256, func(be *batchEnv) error {
		if err := core.CopyFromHost(be.x, encode(core.F32, constant(be.n, 7))); err != nil {
			return err
		}
		return fn(be, be.s.NewLaunchBatch())
	})
}

// read synchronizes the stream and reads b.
func (be *batchEnv) read(b *core.Buffer) ([]float64, error) {
	if err := be.s.Synchronize(); err != nil {
		return nil, err
	}
	raw := make([]byte, 4*be.n)
	if err := core.CopyToHost(raw, b); err != nil {
		return nil, err
	}
	return f32Of(raw), nil
}

// submit submits b and checks that it enqueued want launches; what names
// the Submit in the error.
func submit(b *core.LaunchBatch, want int, what string) error {
	if got, err := b.Submit(); err != nil || got != want {
		return fmt.Errorf("%s: %d enqueued, %v", what, got, err)
	}
	return nil
}

// expectAll reads b (after synchronizing the stream) and checks that all
// its values are want.
func (be *batchEnv) expectAll(b *core.Buffer, want float64) error {
	v, err := be.read(b)
	if err != nil {
		return err
	}
	return allEqual(v, want)
}

// fillArgs are fill_f32's arguments for all of b with v.
func (be *batchEnv) fillArgs(b *core.Buffer, v float32) []core.Arg {
	return []core.Arg{core.ArgBuffer(b), core.ArgScalar[float32](v), core.ArgScalar[uint64](uint64(be.n))}
}

// batchDependent: each launch reads what the previous wrote; the result
// matches a Go reference computed in f32.
func batchDependent(e *env) error {
	const n = 4099
	return withBatchEnv(e, n, func(be *batchEnv) error {
		xs := randomValues(e.rng, core.F32, n, 2)
		ys := randomValues(e.rng, core.F32, n, 2)
		if err := firstErr(core.CopyFromHost(be.x, encode(core.F32, xs)), core.CopyFromHost(be.y, encode(core.F32, ys))); err != nil {
			return err
		}
		t, err := e.dev.Alloc(4 * n)
		if err != nil {
			return err
		}
		defer t.Free()
		c := float32(roundTo(core.F32, 1+e.rng.Float64()))
		a := float32(0.5 + e.rng.Float64())
		bb := float32(0.5 + e.rng.Float64())
		N := core.ArgScalar[uint64](n)
		b := be.s.NewLaunchBatch()
		err = firstErr(
			b.Add(be.fill, be.cfg, core.ArgBuffer(t), core.ArgScalar[float32](c), N),                       // t = c
			b.Add(be.axpy, be.cfg, core.ArgBuffer(t), core.ArgBuffer(be.x), core.ArgScalar[float32](a), N), // t += a*x
			b.Add(be.mul, be.cfg, core.ArgBuffer(t), core.ArgBuffer(t), core.ArgBuffer(be.y), N),           // t *= y
			b.Add(be.scale, be.cfg, core.ArgBuffer(t), core.ArgBuffer(t), core.ArgScalar[float32](bb), N),  // t *= bb
			b.Add(be.add, be.cfg, core.ArgBuffer(t), core.ArgBuffer(t), core.ArgBuffer(be.x), N))           // t += x
		if err != nil {
			return err
		}
		if err := submit(b, 5, "Submit of 5 launches"); err != nil {
			return err
		}
		raw := make([]byte, 4*n)
		if err := firstErr(be.s.Synchronize(), core.CopyToHost(raw, t)); err != nil {
			return err
		}
		got := f32Of(raw)
		f := func(v float64) float64 { return float64(float32(v)) }
		for i := range got {
			x, y := xs[i], ys[i]
			v := f(f(float64(a)*x) + float64(c))
			v = f(v * y)
			v = f(float64(bb) * v)
			v = f(v + x)
			mag := ((math.Abs(float64(c))+math.Abs(float64(a)*x))*math.Abs(y))*float64(bb) + math.Abs(x)
			if math.IsNaN(got[i]) || math.Abs(got[i]-v) > 4*kernelTol(core.F32)*mag {
				return fmt.Errorf("element %d is %g, want %g", i, got[i], v)
			}
		}
		return nil
	})
}

// batchInvalidItem: an item of the wrong argument count is an error from
// Add naming the item; Submit then enqueues nothing and returns it.
func batchInvalidItem(e *env) error {
	return withSevens(e, func(be *batchEnv, b *core.LaunchBatch) error {
		if err := firstErr(b.Add(be.fill, be.cfg, be.fillArgs(be.x, 1)...), b.Add(be.fill, be.cfg, be.fillArgs(be.x, 2)...)); err != nil {
			return err
		}
		addErr := b.Add(be.fill, be.cfg, core.ArgBuffer(be.x), core.ArgScalar[float32](3)) // 2 of 3 arguments
		if err := expect("Add with 2 of fill_f32's 3 arguments", addErr, core.ErrInvalidArgument); err != nil {
			return err
		}
		if !strings.Contains(addErr.Error(), "item 2") {
			return fmt.Errorf("Add's error does not name item 2: %v", addErr)
		}
		got, err := b.Submit()
		if err == nil || got != 0 {
			return fmt.Errorf("Submit after a failed Add: %d enqueued, error %v; want 0 and the Add's error", got, err)
		}
		v, err := be.read(be.x)
		if err != nil {
			return err
		}
		if err := allEqual(v, 7); err != nil {
			return fmt.Errorf("after a rejected batch: %w", err)
		}
		return nil
	})
}

// batchPluginRejects: an item only the plugin can reject (a block of 2048
// threads) is an error naming the item; the launches before it are
// enqueued all or none, and Submit's count says which.
func batchPluginRejects(e *env) error {
	return withSevens(e, func(be *batchEnv, b *core.LaunchBatch) error {
		for i := 0; i < 3; i++ {
			if err := b.Add(be.fill, be.cfg, be.fillArgs(be.x, float32(i+1))...); err != nil {
				return err
			}
		}
		big := core.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{2048, 1, 1}}
		if err := b.Add(be.fill, big, be.fillArgs(be.x, 9)...); err != nil {
			return fmt.Errorf("Add of a 2048-thread block (left to the plugin): %w", err)
		}
		got, err := b.Submit()
		if err == nil {
			return fmt.Errorf("Submit with a 2048-thread block: no error (%d enqueued)", got)
		}
		if !strings.Contains(err.Error(), "item 3") {
			return fmt.Errorf("the error does not name item 3: %v", err)
		}
		want := map[int]float64{0: 7, 3: 3}[got]
		if want == 0 {
			return fmt.Errorf("%d launches enqueued before the rejected item 3, want 0 or 3 (%v)", got, err)
		}
		return be.expectAll(be.x, want)
	})
}

func batchEmpty(e *env) error {
	return withStream(e, func(s *core.Stream) error {
		b := s.NewLaunchBatch()
		if got, err := b.Submit(); err != nil || got != 0 || b.Len() != 0 {
			return fmt.Errorf("Submit of an empty batch: %d enqueued, Len %d, %v", got, b.Len(), err)
		}
		return nil
	})
}

// batchThousand: 1000 dependent launches (y += x) in one batch.
func batchThousand(e *env) error {
	return withBatchEnv(e, 1024, func(be *batchEnv) error {
		b := be.s.NewLaunchBatch()
		N := core.ArgScalar[uint64](uint64(be.n))
		err := firstErr(b.Add(be.fill, be.cfg, be.fillArgs(be.x, 1)...), b.Add(be.fill, be.cfg, be.fillArgs(be.y, 0.5)...))
		for i := 2; i < 1000 && err == nil; i++ {
			err = b.Add(be.axpy, be.cfg, core.ArgBuffer(be.y), core.ArgBuffer(be.x), core.ArgScalar[float32](1), N)
		}
		if err != nil {
			return err
		}
		if b.Len() != 1000 {
			return fmt.Errorf("Len %d after 1000 Adds", b.Len())
		}
		if err := submit(b, 1000, "Submit of 1000 launches"); err != nil {
			return err
		}
		return be.expectAll(be.y, 998.5)
	})
}

// batchReuse: one batch submitted several times, and reset with launches
// in it (which enqueues nothing).
func batchReuse(e *env) error {
	return withBatchEnv(e, 512, func(be *batchEnv) error {
		b := be.s.NewLaunchBatch()
		for round := 1; round <= 3; round++ {
			for i := 0; i < 10*round; i++ {
				if err := b.Add(be.fill, be.cfg, be.fillArgs(be.x, float32(round*100+i))...); err != nil {
					return err
				}
			}
			if got, err := b.Submit(); err != nil || got != 10*round {
				return fmt.Errorf("round %d: %d of %d enqueued, %v", round, got, 10*round, err)
			}
			v, err := be.read(be.x)
			if err != nil {
				return err
			}
			if err := allEqual(v, float64(round*100+10*round-1)); err != nil {
				return fmt.Errorf("round %d: %w", round, err)
			}
		}
		if err := b.Add(be.fill, be.cfg, be.fillArgs(be.x, -1)...); err != nil {
			return err
		}
		b.Reset()
		if err := submit(b, 0, "Submit after Reset"); err != nil {
			return err
		}
		return be.expectAll(be.x, 329)
	})
}

// batchFreePending: a Free of a buffer a pending batch references waits
// until the batch is submitted (the handle never reaches C freed), then
// succeeds; from then on the buffer is freed.
func batchFreePending(e *env) error {
	return withBatchEnv(e, 256, func(be *batchEnv) error {
		z, err := e.dev.Alloc(4 * be.n)
		if err != nil {
			return err
		}
		b := be.s.NewLaunchBatch()
		if err := b.Add(be.fill, be.cfg, be.fillArgs(z, 5)...); err != nil {
			z.Free()
			return err
		}
		// A Free while a batch holds the buffer is refused (waiting could
		// deadlock the batch's own goroutine); the buffer stays usable.
		if err := expect("Free of a buffer a pending batch holds", z.Free(), core.ErrFailedPrecondition); err != nil {
			b.Reset()
			z.Free()
			return err
		}
		got, err := b.Submit()
		if err != nil || got != 1 {
			z.Free()
			return fmt.Errorf("Submit of the pending batch: %d enqueued, %v", got, err)
		}
		if err := firstErr(be.s.Synchronize(), z.Free()); err != nil {
			return fmt.Errorf("Free after the batch was submitted: %w", err)
		}
		return expect("Add of the freed buffer", b.Add(be.fill, be.cfg, be.fillArgs(z, 1)...), core.ErrFreed)
	})
}
