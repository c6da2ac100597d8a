// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/metrale/gpurt/core"
)

// f32Of decodes f32 values.
func f32Of(b []byte) []float64 { return decode(core.F32, b) }

func allEqual(v []float64, want float64) error {
	for i, x := range v {
		if x != want {
			return fmt.Errorf("element %d is %g, want %g", i, x, want)
		}
	}
	return nil
}

func sleepArg(d time.Duration) core.Arg { return core.ArgScalar[uint64](uint64(d.Nanoseconds())) }

func orderChecks() []check {
	return []check{
		{"order/within_stream", func(e *env) error {
			const n = 100003
			return withStream(e, func(s *core.Stream) error {
				var err error
				ks := map[string]*core.Kernel{}
				for _, name := range []string{"fill_f32", "scale_f32", "axpy_f32", "mul_f32", "sleep_ns"} {
					if ks[name], err = kernel(e.dev, name); err != nil {
						return err
					}
				}
				y, err1 := e.dev.Alloc(4 * n)
				z, err2 := e.dev.Alloc(4 * n)
				w, err3 := e.dev.Alloc(4 * n)
				out, err4 := e.rt.AllocHostFromHeap(4 * n)
				defer func() {
					for _, b := range []*core.Buffer{y, z, w} {
						if b != nil {
							b.Free()
						}
					}
					if out != nil {
						out.Free()
					}
				}()
				if err := firstErr(err1, err2, err3, err4); err != nil {
					return err
				}
				g := core.Grid1D(n, 256)
				one := core.Grid1D(1, 1)
				poison(out.Bytes())
				err = firstErr(
					s.Launch(ks["sleep_ns"], one, sleepArg(3*time.Millisecond)),
					s.Launch(ks["fill_f32"], g, core.ArgBuffer(y), core.ArgScalar[float32](1.5), core.ArgScalar[uint64](n)),
					s.Launch(ks["sleep_ns"], one, sleepArg(3*time.Millisecond)),
					s.Launch(ks["scale_f32"], g, core.ArgBuffer(z), core.ArgBuffer(y), core.ArgScalar[float32](2), core.ArgScalar[uint64](n)), // z = 3
					s.Launch(ks["axpy_f32"], g, core.ArgBuffer(y), core.ArgBuffer(z), core.ArgScalar[float32](1), core.ArgScalar[uint64](n)),  // y = 4.5
					s.Launch(ks["mul_f32"], g, core.ArgBuffer(w), core.ArgBuffer(y), core.ArgBuffer(z), core.ArgScalar[uint64](n)),            // w = 13.5
					s.Launch(ks["sleep_ns"], one, sleepArg(3*time.Millisecond)),
					s.CopyToPinned(out, w),
					s.Synchronize())
				if err != nil {
					return err
				}
				if err := allEqual(f32Of(out.Bytes()), 13.5); err != nil {
					return fmt.Errorf("a chain of dependent kernels and a copy on one stream: %w", err)
				}
				// the default ordering: a synchronous copy sees work of a stream
				// that was not synchronized
				got := make([]byte, 4*n)
				err = firstErr(
					s.Launch(ks["sleep_ns"], one, sleepArg(5*time.Millisecond)),
					s.Launch(ks["fill_f32"], g, core.ArgBuffer(w), core.ArgScalar[float32](-7), core.ArgScalar[uint64](n)),
					core.CopyToHost(got, w))
				if err != nil {
					return err
				}
				if err := allEqual(f32Of(got), -7); err != nil {
					return fmt.Errorf("a synchronous copy after unsynchronized stream work: %w", err)
				}
				return s.Synchronize()
			})
		}},
		{"order/across_streams", func(e *env) error {
			const n = 65536
			return withStream(e, func(s1 *core.Stream) error {
				return withStream(e, func(s2 *core.Stream) error {
					ev, err := e.dev.NewEvent(false)
					if err != nil {
						return err
					}
					defer ev.Close()
					sleep, err1 := kernel(e.dev, "sleep_ns")
					fill, err2 := kernel(e.dev, "fill_f32")
					scale, err3 := kernel(e.dev, "scale_f32")
					y, err4 := e.dev.Alloc(4 * n)
					z, err5 := e.dev.Alloc(4 * n)
					out, err6 := e.rt.AllocHost(4 * n)
					defer func() {
						for _, b := range []*core.Buffer{y, z} {
							if b != nil {
								b.Free()
							}
						}
						if out != nil {
							out.Free()
						}
					}()
					if err := firstErr(err1, err2, err3, err4, err5, err6); err != nil {
						return err
					}
					g := core.Grid1D(n, 256)
					for round := 0; round < 3; round++ {
						v := float32(round + 2)
						err = firstErr(
							core.Memset(y, 0),
							s1.Launch(sleep, core.Grid1D(1, 1), sleepArg(20*time.Millisecond)),
							s1.Launch(fill, g, core.ArgBuffer(y), core.ArgScalar[float32](v), core.ArgScalar[uint64](n)),
							ev.Record(s1),
							s2.WaitEvent(ev),
							s2.Launch(scale, g, core.ArgBuffer(z), core.ArgBuffer(y), core.ArgScalar[float32](2), core.ArgScalar[uint64](n)),
							s2.CopyToPinned(out, z),
							s2.Synchronize(),
							s1.Synchronize())
						if err != nil {
							return err
						}
						if err := allEqual(f32Of(out.Bytes()), float64(2*v)); err != nil {
							return fmt.Errorf("stream 2 waited on an event of stream 1, yet: %w", err)
						}
					}
					return nil
				})
			})
		}},
		{"order/elapsed_time", func(e *env) error {
			return withStream(e, func(s *core.Stream) error {
				sleep, err := kernel(e.dev, "sleep_ns")
				if err != nil {
					return err
				}
				el, err := s.Time(func() error { return s.Launch(sleep, core.Grid1D(1, 1), sleepArg(2*time.Millisecond)) })
				if err != nil {
					return err
				}
				if el < time.Millisecond || el >= time.Second {
					return fmt.Errorf("a 2 ms sleep measured %v (want at least 1 ms, under 1 s)", el)
				}
				plain, err := e.dev.NewEvent(false)
				if err != nil {
					return err
				}
				defer plain.Close()
				if err := plain.Record(s); err != nil {
					return err
				}
				if err := plain.Synchronize(); err != nil {
					return err
				}
				return expect("elapsed of events without timing", errOf(core.Elapsed(plain, plain)), core.ErrInvalidArgument)
			})
		}},
	}
}

func concurrencyChecks() []check {
	return []check{
		{"concurrency/goroutines", func(e *env) error {
			const G, iters = 16, 4
			fill, err := kernel(e.dev, "fill_f32")
			if err != nil {
				return err
			}
			scale, err := kernel(e.dev, "scale_f32")
			if err != nil {
				return err
			}
			seeds := make([]uint64, G)
			for i := range seeds {
				seeds[i] = e.rng.Uint64()
			}
			errs := make(chan error, G)
			var wg sync.WaitGroup
			for g := 0; g < G; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					errs <- worker(e, g, iters, fill, scale)
				}(g)
			}
			wg.Wait()
			close(errs)
			var all []error
			for err := range errs {
				if err != nil {
					all = append(all, err)
				}
			}
			return errors.Join(all...)
		}},
		{"concurrency/free_racing_use", func(e *env) error {
			for round := 0; round < 10; round++ {
				b, err := e.dev.Alloc(256 << 10)
				if err != nil {
					return err
				}
				data := randomBytes(e.rng, 256<<10)
				var wg sync.WaitGroup
				bad := make(chan error, 16)
				for g := 0; g < 8; g++ {
					wg.Add(1)
					go func(g int) {
						defer wg.Done()
						for i := 0; i < 10; i++ {
							var err error
							if g%2 == 0 {
								err = core.CopyFromHost(b, data)
							} else {
								err = core.CopyToHost(make([]byte, 1000), b)
							}
							if err != nil {
								if !errors.Is(err, core.ErrFreed) {
									bad <- fmt.Errorf("a use racing Free: %v", err)
								}
								return
							}
						}
					}(g)
				}
				r := make(chan error, 2)
				go func() { r <- b.Free() }()
				go func() { r <- b.Free() }()
				e1, e2 := <-r, <-r
				wg.Wait()
				close(bad)
				if err := <-bad; err != nil {
					return err
				}
				if (e1 == nil) == (e2 == nil) {
					return fmt.Errorf("two racing Frees returned %v and %v; exactly one must win", e1, e2)
				}
				if lost := firstErr(e1, e2); !errors.Is(lost, core.ErrFreed) {
					return fmt.Errorf("the losing Free returned %v", lost)
				}
			}
			return nil
		}},
	}
}

// worker allocates, copies, launches, synchronizes, checks and frees.
func worker(e *env, g, iters int, fill, scale *core.Kernel) error {
	return withStream(e, func(s *core.Stream) error {
		for it := 0; it < iters; it++ {
			n := 1000 + (g*7919+it*104729)%200000
			x, err := e.dev.Alloc(4 * n)
			if err != nil {
				return err
			}
			y, err := e.dev.Alloc(4 * n)
			if err != nil {
				x.Free()
				return err
			}
			v := float32(g*10 + it + 1)
			src := encode(core.F32, constant(n, float64(v)))
			err = firstErr(
				core.CopyFromHost(x, src),
				s.Launch(scale, core.Grid1D(n, 128), core.ArgBuffer(y), core.ArgBuffer(x), core.ArgScalar[float32](0.5), core.ArgScalar[uint64](uint64(n))),
				s.Synchronize())
			got := make([]byte, 4*n)
			if err == nil {
				err = core.CopyToHost(got, y)
			}
			if err == nil {
				if e2 := allEqual(f32Of(got), float64(v*0.5)); e2 != nil {
					err = fmt.Errorf("goroutine %d iteration %d: %w", g, it, e2)
				}
			}
			if err == nil {
				err = firstErr(s.Launch(fill, core.Grid1D(n, 64), core.ArgBuffer(x), core.ArgScalar[float32](-v), core.ArgScalar[uint64](uint64(n))), s.Synchronize())
			}
			err = firstErr(err, x.Free(), y.Free())
			if err != nil {
				return err
			}
		}
		return nil
	})
}

func constant(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}
