// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/metrale/gpurt/core"
)

// graphChecks check Stream.Capture and Graph (ABI 1.3): a replay computes
// what the same calls compute eagerly, SetArg changes take effect, and
// misuse is an error. A plugin without graphs skips them.
func graphChecks() []check {
	return []check{
		{"graph/replay_matches_eager", graphReplayMatchesEager},
		{"graph/set_arg", graphSetArg},
		{"graph/set_arg_every_replay", graphSetArgEveryReplay},
		{"graph/events", graphEvents},
		{"graph/misuse_sync_during_capture", graphMisuseSync},
		{"graph/misuse_free_captured", graphMisuseFree},
		{"graph/misuse_closed", graphMisuseClosed},
		{"graph/misuse_other_device", graphMisuseOtherDevice},
	}
}

// capture is Stream.Capture, with a plugin without graphs as a skip.
func capture(s *core.Stream, fn func(*core.Stream) error) (*core.Graph, error) {
	g, err := s.Capture(fn)
	if errors.Is(err, core.ErrUnsupported) {
		return nil, skip("the plugin has no graphs: %v", err)
	}
	return g, err
}

// graphWork is a decode-like step over every kind of graph operation.
type graphWork struct {
	be        *batchEnv
	t, w      *core.Buffer // n f32 each
	a, d      *core.Buffer // the GEMM's A (m x k) and D (m x n2)
	host      *core.HostBuffer
	m, k, n2  int
	alpha, c1 float32
	desc      core.GemmDesc
}

// run enqueues (or, on a capturing stream, records) the step on s:
//
//	t = c1; t += alpha*x; t *= y; w = t (device copy); memset x[0:16] = 0;
//	D = A * t (GEMM, t as a k x n2 matrix); host = D; w += alpha*t.
func (gw *graphWork) run(s *core.Stream) error {
	be := gw.be
	N := core.ArgScalar[uint64](uint64(be.n))
	head, err := be.x.View(0, 64)
	if err != nil {
		return err
	}
	return firstErrOf(
		func() error {
			return s.Launch(be.fill, be.cfg, core.ArgBuffer(gw.t), core.ArgScalar[float32](gw.c1), N)
		},
		func() error {
			return s.Launch(be.axpy, be.cfg, core.ArgBuffer(gw.t), core.ArgBuffer(be.x), core.ArgScalar[float32](gw.alpha), N)
		},
		func() error {
			return s.Launch(be.mul, be.cfg, core.ArgBuffer(gw.t), core.ArgBuffer(gw.t), core.ArgBuffer(be.y), N)
		},
		func() error { return s.CopyDevice(gw.w, gw.t) },
		func() error { return s.Memset32(head, 0) },
		func() error {
			return s.Gemm(gw.desc, core.GemmOperands{A: gw.a, B: gw.t, D: gw.d, Alpha: 1})
		},
		func() error { return s.CopyToPinned(gw.host, gw.d) },
		func() error {
			return s.Launch(be.axpy, be.cfg, core.ArgBuffer(gw.w), core.ArgBuffer(gw.t), core.ArgScalar[float32](gw.alpha), N)
		},
	)
}

// firstErrOf calls fs in order and returns the first error.
func firstErrOf(fs ...func() error) error {
	for _, f := range fs {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

func newGraphWork(e *env) (*graphWork, func(), error) {
	const m, k, n2 = 48, 64, 32
	be, done, err := newBatchEnv(e, k*n2)
	if err != nil {
		return nil, nil, err
	}
	gw := &graphWork{be: be, m: m, k: k, n2: n2,
		alpha: float32(0.5 + e.rng.Float64()), c1: float32(roundTo(core.F32, 1+e.rng.Float64())),
		desc: core.GemmDesc{AType: core.F32, BType: core.F32, DType: core.F32, M: m, N: n2, K: k}}
	var bufs []*core.Buffer
	cleanup := func() {
		_ = be.s.Synchronize()
		for _, b := range bufs {
			_ = b.Free()
		}
		if gw.host != nil {
			_ = gw.host.Free()
		}
		done()
	}
	for _, p := range []struct {
		b **core.Buffer
		n int
	}{{&gw.t, 4 * be.n}, {&gw.w, 4 * be.n}, {&gw.a, 4 * m * k}, {&gw.d, 4 * m * n2}} {
		if *p.b, err = e.dev.Alloc(p.n); err != nil {
			cleanup()
			return nil, nil, err
		}
		bufs = append(bufs, *p.b)
	}
	if gw.host, err = e.rt.AllocHost(4 * m * n2); err != nil {
		cleanup()
		return nil, nil, err
	}
	return gw, cleanup, nil
}

// reset uploads fresh inputs (x, y, A) and poisons the outputs.
func (gw *graphWork) reset(xs, ys, as []float64) error {
	be := gw.be
	poisonAll := func(b *core.Buffer) error { return core.Memset(b, 0xff) }
	return firstErr(core.CopyFromHost(be.x, encode(core.F32, xs)), core.CopyFromHost(be.y, encode(core.F32, ys)),
		core.CopyFromHost(gw.a, encode(core.F32, as)), poisonAll(gw.t), poisonAll(gw.w), poisonAll(gw.d))
}

// outputs reads every output after synchronizing.
func (gw *graphWork) outputs() ([]byte, error) {
	if err := gw.be.s.Synchronize(); err != nil {
		return nil, err
	}
	var out []byte
	for _, b := range []*core.Buffer{gw.be.x, gw.t, gw.w, gw.d} {
		raw := make([]byte, b.Len())
		if err := core.CopyToHost(raw, b); err != nil {
			return nil, err
		}
		out = append(out, raw...)
	}
	return append(out, gw.host.Bytes()...), nil
}

// graphReplayMatchesEager: the step eagerly, then captured and replayed
// (twice, on fresh inputs each time): the outputs are identical bytes.
func graphReplayMatchesEager(e *env) error {
	gw, done, err := newGraphWork(e)
	if err != nil {
		return err
	}
	defer done()
	n := gw.be.n
	in := func() ([]float64, []float64, []float64) {
		return randomValues(e.rng, core.F32, n, 2), randomValues(e.rng, core.F32, n, 2),
			randomValues(e.rng, core.F32, gw.m*gw.k, 1)
	}
	g, err := capture(gw.be.s, gw.run)
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	defer g.Close()
	if g.Len() != 8 {
		return fmt.Errorf("the graph has %d operations, want 8", g.Len())
	}
	for round := 0; round < 2; round++ {
		xs, ys, as := in()
		if err := gw.reset(xs, ys, as); err != nil {
			return err
		}
		if err := gw.run(gw.be.s); err != nil {
			return fmt.Errorf("eager: %w", err)
		}
		want, err := gw.outputs()
		if err != nil {
			return err
		}
		if err := gw.reset(xs, ys, as); err != nil {
			return err
		}
		if err := g.Launch(gw.be.s); err != nil {
			return fmt.Errorf("replay %d: %w", round, err)
		}
		got, err := gw.outputs()
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			i := firstDiff(got, want)
			return fmt.Errorf("replay %d differs from the eager run at output byte %d of %d", round, i, len(want))
		}
	}
	return nil
}

// graphSetArg: a scalar and a buffer argument changed between replays
// take effect; the replaced buffer is no longer held, the new one is.
func graphSetArg(e *env) error {
	return withBatchEnv(e, 1024, func(be *batchEnv) error {
		z, err := e.dev.Alloc(4 * be.n)
		if err != nil {
			return err
		}
		zFreed := false
		defer func() {
			if !zFreed {
				_ = be.s.Synchronize()
				_ = z.Free()
			}
		}()
		N := core.ArgScalar[uint64](uint64(be.n))
		var node core.Node
		g, err := capture(be.s, func(s *core.Stream) error {
			node = s.NextNode()
			return s.Launch(be.fill, be.cfg, core.ArgBuffer(be.x), core.ArgScalar[float32](1.5), N)
		})
		if err != nil {
			return err
		}
		defer g.Close()
		if err := firstErr(g.Launch(be.s), be.expectAll(be.x, 1.5)); err != nil {
			return fmt.Errorf("first replay: %w", err)
		}
		if err := firstErr(g.SetArg(node, 1, core.ArgScalar[float32](-2.25)), g.Launch(be.s), be.expectAll(be.x, -2.25)); err != nil {
			return fmt.Errorf("after SetArg of the value: %w", err)
		}
		if err := core.Memset(be.x, 0); err != nil {
			return err
		}
		if err := firstErr(g.SetArg(node, 0, core.ArgBuffer(z)), g.SetArg(node, 1, core.ArgScalar[float32](3)), g.Launch(be.s)); err != nil {
			return fmt.Errorf("after SetArg of the buffer: %w", err)
		}
		if err := firstErr(be.expectAll(z, 3), be.expectAll(be.x, 0)); err != nil {
			return fmt.Errorf("after SetArg of the buffer: %w", err)
		}
		if err := expect("Free of the buffer SetArg put into a live graph", z.Free(), core.ErrFailedPrecondition); err != nil {
			return err
		}
		if err := expect("SetArg with an i32 for fill_f32's f32", g.SetArg(node, 1, core.ArgScalar[int32](1)), core.ErrInvalidArgument); err != nil {
			return err
		}
		if err := firstErr(be.s.Synchronize(), g.Close(), z.Free()); err != nil {
			return fmt.Errorf("Close, then Free of the buffer: %w", err)
		}
		zFreed = true
		return nil
	})
}

// graphSetArgEveryReplay: 200 replays of y += a*x with a changed before
// each one (the decode loop's pattern); the sum is exact.
func graphSetArgEveryReplay(e *env) error {
	return withBatchEnv(e, 512, func(be *batchEnv) error {
		if err := firstErr(core.CopyFromHost(be.x, encode(core.F32, constant(be.n, 1))), core.Memset(be.y, 0)); err != nil {
			return err
		}
		N := core.ArgScalar[uint64](uint64(be.n))
		g, err := capture(be.s, func(s *core.Stream) error {
			return s.Launch(be.axpy, be.cfg, core.ArgBuffer(be.y), core.ArgBuffer(be.x), core.ArgScalar[float32](0), N)
		})
		if err != nil {
			return err
		}
		defer g.Close()
		want := 0.0
		for i := 1; i <= 200; i++ {
			if err := firstErr(g.SetArg(0, 2, core.ArgScalar[float32](float32(i))), g.Launch(be.s)); err != nil {
				return fmt.Errorf("replay %d: %w", i, err)
			}
			want += float64(i)
		}
		return be.expectAll(be.y, want)
	})
}

// graphEvents: an event recorded inside the graph orders another stream
// after the replay; a wait inside the graph orders the replay after
// another stream's work.
func graphEvents(e *env) error {
	return withBatchEnv(e, 4096, func(be *batchEnv) error {
		return withStream(e, func(s2 *core.Stream) error {
			before, err := e.dev.NewEvent(false)
			if err != nil {
				return err
			}
			defer before.Close()
			after, err := e.dev.NewEvent(false)
			if err != nil {
				return err
			}
			defer after.Close()
			N := core.ArgScalar[uint64](uint64(be.n))
			g, err := capture(be.s, func(s *core.Stream) error {
				return firstErrOf(
					func() error { return s.WaitEvent(before) },
					func() error {
						return s.Launch(be.scale, be.cfg, core.ArgBuffer(be.y), core.ArgBuffer(be.x), core.ArgScalar[float32](2), N)
					},
					func() error { return after.Record(s) },
				)
			})
			if err != nil {
				return err
			}
			defer g.Close()
			// s2: sleep, then x = 4, then record `before`; the replay waits for it
			// (y = 2x = 8), then s2 waits for `after` and sets x = 1 (y unchanged).
			err = firstErr(
				s2.Launch(be.sleep, core.Grid1D(1, 1), sleepArg(2e6)),
				s2.Launch(be.fill, be.cfg, be.fillArgs(be.x, 4)...),
				before.Record(s2),
				g.Launch(be.s),
				s2.WaitEvent(after),
				s2.Launch(be.fill, be.cfg, be.fillArgs(be.x, 1)...),
				s2.Synchronize())
			if err != nil {
				return err
			}
			if err := be.expectAll(be.y, 8); err != nil {
				return fmt.Errorf("y after the replay (ordered by events): %w", err)
			}
			return be.expectAll(be.x, 1)
		})
	})
}

// graphMisuseSync: synchronous calls during a capture are errors (and
// fail the capture when made on the capturing stream).
func graphMisuseSync(e *env) error {
	return withBatchEnv(e, 256, func(be *batchEnv) error {
		fill := func(s *core.Stream) error { return s.Launch(be.fill, be.cfg, be.fillArgs(be.x, 1)...) }
		for _, c := range []struct {
			what string
			call func(s *core.Stream) error
		}{
			{"Synchronize of the capturing stream", func(s *core.Stream) error { return s.Synchronize() }},
			{"CopyFromHost", func(*core.Stream) error { return core.CopyFromHost(be.y, make([]byte, 16)) }},
			{"CopyToHost", func(*core.Stream) error { return core.CopyToHost(make([]byte, 16), be.y) }},
			{"Device.Synchronize", func(*core.Stream) error { return e.dev.Synchronize() }},
		} {
			var callErr error
			g, err := capture(be.s, func(s *core.Stream) error {
				if err := fill(s); err != nil {
					return err
				}
				callErr = c.call(s)
				return callErr
			})
			if g != nil {
				_ = g.Close()
			}
			if skipped := (skipError{}); errors.As(err, &skipped) {
				return err
			}
			if err := expect(c.what+" during a capture", callErr, core.ErrFailedPrecondition); err != nil {
				return err
			}
			if err := expect("the capture whose function returned that error", err, core.ErrFailedPrecondition); err != nil {
				return err
			}
		}
		// After the capture, synchronous calls work again.
		return firstErr(core.CopyFromHost(be.y, make([]byte, 16)), e.dev.Synchronize())
	})
}

// graphMisuseFree: a buffer (and a module) used by a live graph cannot be
// freed (unloaded); after Close it can.
func graphMisuseFree(e *env) error {
	return withBatchEnv(e, 256, func(be *batchEnv) error {
		b, err := e.dev.Alloc(4 * be.n)
		if err != nil {
			return err
		}
		g, err := capture(be.s, func(s *core.Stream) error { return s.Launch(be.fill, be.cfg, be.fillArgs(b, 1)...) })
		if err != nil {
			_ = b.Free()
			return err
		}
		if err := expect("Free of a buffer a live graph uses", b.Free(), core.ErrFailedPrecondition); err != nil {
			_ = g.Close()
			_ = b.Free()
			return err
		}
		if err := expect("Unload of a module a live graph uses", be.fill.Module().Unload(), core.ErrFailedPrecondition); err != nil {
			_ = g.Close()
			_ = b.Free()
			return err
		}
		if err := firstErr(g.Launch(be.s), be.expectAll(b, 1)); err != nil {
			_ = g.Close()
			_ = b.Free()
			return fmt.Errorf("replay after the refused Free: %w", err)
		}
		if err := firstErr(g.Close(), b.Free()); err != nil {
			return fmt.Errorf("Close, then Free: %w", err)
		}
		return nil
	})
}

// graphMisuseClosed: a closed graph cannot be launched, updated or
// closed again.
func graphMisuseClosed(e *env) error {
	return withBatchEnv(e, 256, func(be *batchEnv) error {
		g, err := capture(be.s, func(s *core.Stream) error { return s.Launch(be.fill, be.cfg, be.fillArgs(be.x, 1)...) })
		if err != nil {
			return err
		}
		if err := g.Close(); err != nil {
			return err
		}
		return firstErr(
			expect("Launch of a closed graph", g.Launch(be.s), core.ErrClosed),
			expect("SetArg of a closed graph", g.SetArg(0, 1, core.ArgScalar[float32](2)), core.ErrClosed),
			expect("second Close", g.Close(), core.ErrClosed))
	})
}

// graphMisuseOtherDevice: a graph replays only on its own device.
func graphMisuseOtherDevice(e *env) error {
	if len(e.rt.Devices()) < 2 {
		return skip("one device")
	}
	return withBatchEnv(e, 256, func(be *batchEnv) error {
		d1, err := e.rt.Device(1)
		if err != nil {
			return err
		}
		s1, err := d1.NewStream()
		if err != nil {
			return err
		}
		defer s1.Close()
		g, err := capture(be.s, func(s *core.Stream) error { return s.Launch(be.fill, be.cfg, be.fillArgs(be.x, 1)...) })
		if err != nil {
			return err
		}
		defer g.Close()
		return expect("Launch on a stream of device 1 of a graph of device 0", g.Launch(s1), core.ErrInvalidArgument)
	})
}
