// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
)

// Benchmarks of the figures `gpurt bench` prints, on the mock: dispatch
// (one plugin call through the core), copies, launches and the host cost
// of a GEMM. `go test -bench . -run ^$ ./core/`. The cgo baseline of the
// dispatch figure is in bench/cgobaseline (BenchmarkDispatch there
// prints gpurt and cgo in one run). Timings are never asserted;
// allocation counts are (TestHotPathsAllocateNothing).

// benchEnv is a runtime on the mock with a stream, an event, the
// built-in fill_f32 and a warm GEMM.
type benchEnv struct {
	rt      *core.Runtime
	dev     *core.Device
	s       *core.Stream
	ev      *core.Event
	fill    *core.Kernel
	buf     *core.Buffer
	view    core.View
	small   []byte
	gemm    core.GemmDesc
	gemmOps core.GemmOperands
}

func newBenchEnv(tb testing.TB) *benchEnv {
	tb.Helper()
	e := &benchEnv{rt: openMock(tb, "delay_us=0")} // the mock's deliberate per-operation delay off
	e.dev = dev0(tb, e.rt)
	e.s = stream(tb, e.dev)
	var err error
	e.ev, err = e.dev.NewEvent(false)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = e.ev.Close() })
	e.fill = builtin(tb, e.dev, "fill_f32")
	e.buf = alloc(tb, e.dev, 64<<10)
	e.view, err = e.buf.View(32768, 4096)
	require.NoError(tb, err)
	e.small = randomBytes(512, 1)
	require.NoError(tb, core.CopyFromHost(e.buf, randomBytes(e.buf.Len(), 2)))
	// 64^3 bf16 in 8 KiB operands at different offsets of buf
	a, err := e.buf.View(0, 8192)
	require.NoError(tb, err)
	b, err := e.buf.View(8192, 8192)
	require.NoError(tb, err)
	d, err := e.buf.View(16384, 8192)
	require.NoError(tb, err)
	e.gemm = core.GemmDesc{AType: core.BF16, BType: core.BF16, DType: core.BF16, TransA: true, M: 64, N: 64, K: 64}
	e.gemmOps = core.GemmOperands{A: a, B: b, D: d, Alpha: 1}
	require.NoError(tb, e.s.Gemm(e.gemm, e.gemmOps)) // warm the op cache
	require.NoError(tb, e.s.Synchronize())
	return e
}

func (e *benchEnv) launch() error {
	return e.s.Launch(e.fill, core.Grid1D(1, 1), core.ArgBuffer(e.view), core.ArgScalar[float32](1), core.ArgScalar[uint64](1))
}

// zeroAllocs checks that fn succeeds and, warm, allocates nothing per
// call (200 calls, the first error failing the test), then waits for the
// stream.
func (e *benchEnv) zeroAllocs(t *testing.T, fn func() error) {
	t.Helper()
	require.NoError(t, fn())
	var err error
	allocs := testing.AllocsPerRun(200, func() {
		if ferr := fn(); ferr != nil && err == nil {
			err = ferr
		}
	})
	require.NoError(t, err)
	assert.Zero(t, allocs, "allocations per call")
	require.NoError(t, e.s.Synchronize())
}

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	rng := rand.NewChaCha8([32]byte{byte(seed), 'b', 'e', 'n', 'c', 'h'})
	_, _ = rng.Read(b)
	return b
}

func BenchmarkDispatch(b *testing.B) {
	e := newBenchEnv(b)
	b.Run("stream_query", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ok, err := e.s.Query(); !ok || err != nil {
				b.Fatalf("idle stream: done %v, %v", ok, err)
			}
		}
	})
	b.Run("event_query", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ok, err := e.ev.Query(); !ok || err != nil {
				b.Fatalf("fresh event: done %v, %v", ok, err)
			}
		}
	})
}

// viewedCopy is a timed copy of n bytes on s: cp through the view of the
// first n bytes that view makes, then a wait for s.
func viewedCopy[V any](s *core.Stream, view func(off, n int) (V, error), cp func(V) error) func(n int) error {
	return func(n int) error {
		v, err := view(0, n)
		if err == nil {
			err = cp(v)
		}
		if err == nil {
			err = s.Synchronize()
		}
		return err
	}
}

func BenchmarkCopy(b *testing.B) {
	e := newBenchEnv(b)
	const maxN = 16 << 20
	dev1, err := e.dev.Alloc(maxN)
	require.NoError(b, err)
	defer dev1.Free()
	dev2, err := e.dev.Alloc(maxN)
	require.NoError(b, err)
	defer dev2.Free()
	hb, err := e.rt.AllocHost(maxN)
	require.NoError(b, err)
	defer hb.Free()
	src := randomBytes(maxN, 3)
	dst := make([]byte, maxN)
	copy(hb.Bytes(), src)
	require.NoError(b, core.CopyFromHost(dev1, src))
	kinds := []struct {
		name string
		run  func(n int) error
	}{
		{"htod_pageable", func(n int) error { return core.CopyFromHost(dev1, src[:n]) }},
		{"dtoh_pageable", func(n int) error { return core.CopyToHost(dst[:n], dev1) }},
		{"htod_pinned", viewedCopy(e.s, hb.View, func(pv core.PinnedView) error { return e.s.CopyFromPinned(dev1, pv) })},
		{"dtoh_pinned", viewedCopy(e.s, hb.View, func(pv core.PinnedView) error { return e.s.CopyToPinned(pv, dev1) })},
		{"dtod", viewedCopy(e.s, dev1.View, func(v core.View) error { return e.s.CopyDevice(dev2, v) })},
	}
	for _, k := range kinds {
		for _, n := range []int{64 << 10, 1 << 20, maxN} {
			b.Run(fmt.Sprintf("%s/%dKiB", k.name, n>>10), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(n))
				for b.Loop() {
					if err := k.run(n); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// enqueueOnly runs op b.N times in batches, draining the stream after
// each batch with the clock still running (so b.N follows the real time,
// the mock's execution included), and reports the time spent in the
// enqueue calls alone as ns/op and the whole as e2e-ns/op.
func enqueueOnly(b *testing.B, s *core.Stream, batch int, op func() error) {
	b.ReportAllocs()
	var enq time.Duration
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		t0 := time.Now()
		for i := 0; i < n; i++ {
			if err := op(); err != nil {
				b.Fatal(err)
			}
		}
		enq += time.Since(t0)
		if err := s.Synchronize(); err != nil {
			b.Fatal(err)
		}
		done += n
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "e2e-ns/op")
	b.ReportMetric(float64(enq.Nanoseconds())/float64(b.N), "ns/op")
}

func BenchmarkLaunch(b *testing.B) {
	e := newBenchEnv(b)
	b.Run("enqueue", func(b *testing.B) { enqueueOnly(b, e.s, 1000, e.launch) })
	b.Run("launch+sync", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := e.launch(); err != nil {
				b.Fatal(err)
			}
			if err := e.s.Synchronize(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkGemm(b *testing.B) {
	e := newBenchEnv(b)
	b.Run("host_64", func(b *testing.B) {
		// one Stream.Gemm enqueue with a warm op cache
		enqueueOnly(b, e.s, 100, func() error { return e.s.Gemm(e.gemm, e.gemmOps) })
	})
	b.Run("run+sync_64", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := e.s.Gemm(e.gemm, e.gemmOps); err != nil {
				b.Fatal(err)
			}
			if err := e.s.Synchronize(); err != nil {
				b.Fatal(err)
			}
		}
	})
	st := inspect.OpCache(e.rt)
	b.Logf("op cache: %d hits, %d misses, %d evictions", st.Hits, st.Misses, st.Evictions)
}

// TestHotPathsAllocateNothing asserts what the benchmarks above report as
// allocs/op: the dispatch call, a small synchronous copy, a launch and a
// warm-cache GEMM enqueue allocate nothing (allocation counts are
// deterministic; timings are not asserted).
func TestHotPathsAllocateNothing(t *testing.T) {
	e := newBenchEnv(t)
	cases := []struct {
		name string
		fn   func() error
	}{
		{"dispatch stream_query", func() error { _, err := e.s.Query(); return err }},
		{"dispatch event_query", func() error { _, err := e.ev.Query(); return err }},
		{"small copy up", func() error { return core.CopyFromHost(e.view, e.small) }},
		{"small copy down", func() error { return core.CopyToHost(e.small, e.view) }},
		{"launch", e.launch},
		{"gemm warm enqueue", func() error { return e.s.Gemm(e.gemm, e.gemmOps) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { e.zeroAllocs(t, c.fn) })
	}
}
