// SPDX-License-Identifier: Apache-2.0

package pool_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/core/pool"
	"github.com/metrale/gpurt/internal/testutil"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
)

// poolRT opens the mock with options and a pool budget.
func poolRT(t testing.TB, options string, budget float64) (*core.Runtime, *core.Device) {
	t.Helper()
	rt := mockrt.OpenConfig(t, core.Config{PluginOptions: options, PoolBudget: budget})
	return rt, mockrt.Device0(t, rt)
}

// newStream is a new stream on d, closed at the test's end.
var newStream = mockrt.Stream

func TestPoolReuseOnOneStream(t *testing.T) {
	_, d := poolRT(t, "delay_us=0", 0)
	p := pool.Of(d)
	require.Same(t, p, pool.Of(d), "one pool per device")
	s := newStream(t, d)
	b, err := p.Alloc(s, 1000)
	require.NoError(t, err)
	assert.Equal(t, 1000, b.Len())
	assert.Equal(t, 1024, b.Cap())
	assert.Equal(t, 1000, b.View().Len())
	require.NoError(t, s.Memset(b.View(), 7))
	require.NoError(t, b.Free(s))
	c, err := p.Alloc(s, 900) // same class (1024)
	require.NoError(t, err)
	assert.Same(t, b, c, "a cached block of the class is handed out again on its stream")
	assert.Same(t, b.Buffer(), c.Buffer())
	st := inspect.Pool(p)
	assert.Equal(t, uint64(1), st.Hits)
	assert.Equal(t, uint64(1), st.Misses)
	assert.Equal(t, uint64(0), st.StreamWaits)
	assert.Equal(t, uint64(900), st.InUse)
	assert.Equal(t, uint64(1024), st.Reserved)
	assert.InDelta(t, 124.0/1024, st.Fragmentation(), 1e-12)
	require.NoError(t, c.Free(nil)) // nil: the Alloc's stream

	err = c.Free(s)
	require.ErrorIs(t, err, core.ErrFreed)
	assert.Contains(t, err.Error(), "pool_free: pool block was freed")
	_, err = p.Alloc(s, 0)
	require.ErrorIs(t, err, core.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "size 0")

	// A class of its own: a new block.
	e, err := p.Alloc(s, 5000)
	require.NoError(t, err)
	assert.NotSame(t, b, e)
	assert.Equal(t, 5120, e.Cap())
	require.NoError(t, e.Free(s))
	st, ok := inspect.DevicePool(d)
	require.True(t, ok)
	assert.Equal(t, uint64(2), st.Misses)
	assert.Equal(t, uint64(0), st.InUse)
	assert.Equal(t, uint64(2), st.CachedBlocks)
	require.NoError(t, d.Runtime().Trim())
	st = inspect.Pool(p)
	assert.Equal(t, uint64(0), st.Reserved, "Runtime.Trim trims the pools")
	assert.Equal(t, uint64(2), st.Released)
	assert.Equal(t, uint64(1024+5120), st.PeakReserved)
}

func TestPoolClasses(t *testing.T) {
	_, d := poolRT(t, "delay_us=0", 0)
	s := newStream(t, d)
	for _, c := range []struct{ n, class int }{
		{1, 512}, {512, 512}, {513, 640}, {1024, 1024}, {1025, 1280}, {3000, 3072},
		{1 << 20, 1 << 20}, {(1 << 20) + 1, 1280 << 10}, {64 << 20, 64 << 20}, {(64 << 20) + 1, 66 << 20}, {100 << 20, 100 << 20},
	} {
		b, err := pool.Of(d).Alloc(s, c.n)
		require.NoError(t, err)
		assert.Equal(t, c.class, b.Cap(), "request of %d bytes", c.n)
		require.LessOrEqual(t, float64(b.Cap()-c.n), 0.25*float64(c.n)+512, "rounding of %d", c.n)
		require.NoError(t, b.Free(s))
	}
}

// TestPoolCrossStreamWaits: a block freed on stream A while A's work on
// it is still queued, handed to stream B, must see B's writes after A's.
// Without the pool's wait on the Free's event B's memset (queued behind
// nothing) runs first and A's late memset wins.
func TestPoolCrossStreamWaits(t *testing.T) {
	rt, d := poolRT(t, "delay_us=0", 0)
	p := pool.Of(d)
	a, b := newStream(t, d), newStream(t, d)
	const n = 4096
	blk, err := p.Alloc(a, n)
	require.NoError(t, err)
	other, err := d.Alloc(n)
	require.NoError(t, err)
	defer other.Free()

	require.NoError(t, inspect.Control(rt, "delay_us", 20000)) // 20 ms before each queued op
	for range 4 {
		require.NoError(t, a.Memset(other, 1))
	}
	require.NoError(t, a.Memset(blk.View(), 0xAA)) // runs ~100 ms from now
	require.NoError(t, blk.Free(a))

	got, err := p.Alloc(b, n)
	require.NoError(t, err)
	require.Same(t, blk, got, "the only cached block of the class")
	require.NoError(t, b.Memset(got.View(), 0xBB))
	require.NoError(t, b.Synchronize())
	require.NoError(t, a.Synchronize())
	require.NoError(t, inspect.Control(rt, "delay_us", 0))
	out := make([]byte, n)
	require.NoError(t, core.CopyToHost(out, got.View()))
	assert.True(t, bytes.Equal(out, bytes.Repeat([]byte{0xBB}, n)), "stream B's write ran before stream A's (first bytes %x)", out[:8])
	assert.Equal(t, uint64(1), inspect.Pool(p).StreamWaits)

	// Freed on B, taken back on B: no wait.
	require.NoError(t, got.Free(b))
	again, err := p.Alloc(b, n)
	require.NoError(t, err)
	require.Same(t, blk, again)
	assert.Equal(t, uint64(1), inspect.Pool(p).StreamWaits, "same-stream reuse needs no wait")
	require.NoError(t, again.Free(b))
}

func TestPoolBudget(t *testing.T) {
	// 64 MiB of mock memory, half of it for the pool.
	_, d := poolRT(t, "delay_us=0;memory=64M", 0.5)
	p := pool.Of(d)
	require.Equal(t, uint64(32<<20), p.Budget())
	s := newStream(t, d)
	x, err := p.Alloc(s, 20<<20)
	require.NoError(t, err)
	_, err = p.Alloc(s, 20<<20)
	require.Error(t, err)
	require.ErrorIs(t, err, core.ErrOutOfMemory)
	msg := err.Error()
	for _, want := range []string{"pool_alloc", "20971520 bytes asked", "budget of 33554432 bytes",
		"Config.PoolBudget=0.5 of the device's 67108864 bytes", "20971520 bytes reserved", "20971520 in use by 1 blocks"} {
		assert.Contains(t, msg, want)
	}
	assert.Equal(t, uint64(1), inspect.Pool(p).OutOfMemory)

	// Trim before failing: the cached 20 MiB block makes room for 16 MiB.
	require.NoError(t, x.Free(s))
	y, err := p.Alloc(s, 16<<20)
	require.NoError(t, err)
	st := inspect.Pool(p)
	assert.Equal(t, uint64(1), st.Released)
	assert.Equal(t, uint64(16<<20), st.Reserved)
	assert.LessOrEqual(t, st.PeakReserved, p.Budget())
	require.NoError(t, y.Free(s))
}

func TestPoolBudgetBytesAndErrors(t *testing.T) {
	_, d := poolRT(t, "delay_us=0", 1<<20)
	assert.Equal(t, uint64(1<<20), pool.Of(d).Budget())
	for _, c := range []struct {
		budget float64
		env    string
		want   string
	}{
		{-1, "", "Config.PoolBudget=\"-1\""},
		{0, "abc", "GPURT_POOL_BUDGET=\"abc\""},
		{0, "0", "GPURT_POOL_BUDGET=\"0\""},
		{0, "1.5", "GPURT_POOL_BUDGET=\"1.5\""},
		{0, "-1G", "GPURT_POOL_BUDGET=\"-1G\""},
	} {
		t.Setenv("GPURT_POOL_BUDGET", c.env)
		_, err := core.Open(core.Config{PluginPaths: []string{testutil.MockPlugin(t)}, Backend: "mock", PoolBudget: c.budget})
		require.ErrorIs(t, err, core.ErrInvalidArgument, c.want)
		assert.Contains(t, err.Error(), c.want)
	}
	for env, want := range map[string]uint64{"3M": 3 << 20, "1.5MiB": 3 << 19, "2097152": 2 << 20} {
		t.Setenv("GPURT_POOL_BUDGET", env)
		_, d = poolRT(t, "delay_us=0", 0)
		assert.Equal(t, want, pool.Of(d).Budget(), env)
	}
}

func TestPoolStreamChecks(t *testing.T) {
	rt := mockrt.Open(t, "devices=2;delay_us=0")
	d0, _ := rt.Device(0)
	d1, _ := rt.Device(1)
	s1 := newStream(t, d1)
	_, err := pool.Of(d0).Alloc(s1, 64)
	require.ErrorIs(t, err, core.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "device 1")
	_, err = pool.Of(d0).Alloc(nil, 64)
	require.ErrorIs(t, err, core.ErrInvalidArgument)
	s0 := newStream(t, d0)
	b, err := pool.Of(d0).Alloc(s0, 64)
	require.NoError(t, err)
	require.ErrorIs(t, b.Free(s1), core.ErrInvalidArgument)
	require.NoError(t, b.Free(s0), "a refused Free leaves the block live")
}

func TestPoolSteadyStateAllocatesNothing(t *testing.T) {
	_, d := poolRT(t, "delay_us=0", 0)
	p := pool.Of(d)
	a, b := newStream(t, d), newStream(t, d)
	// cycle allocates n bytes on s and frees them there.
	cycle := func(s *core.Stream, n int) error {
		blk, err := p.Alloc(s, n)
		if err == nil {
			err = blk.Free(s)
		}
		return err
	}
	sizes := []int{100, 70000, 3 << 20}
	for _, n := range sizes {
		require.NoError(t, cycle(a, n))
	}
	var err error
	allocs := testing.AllocsPerRun(200, func() {
		for _, n := range sizes {
			if e := cycle(a, n); e != nil {
				err = e
			}
		}
	})
	require.NoError(t, err)
	assert.Zero(t, allocs, "same-stream Alloc/Free")
	// Across streams (event query, maybe a wait) too.
	allocs = testing.AllocsPerRun(200, func() {
		e := cycle(b, 100)
		if e == nil {
			e = cycle(a, 100)
		}
		if e != nil {
			err = e
		}
	})
	require.NoError(t, err)
	assert.Zero(t, allocs, "cross-stream Alloc/Free")
}

func TestPoolConcurrent(t *testing.T) {
	_, d := poolRT(t, "delay_us=0", 8<<20)
	p := pool.Of(d)
	const workers, rounds = 8, 150
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		s := newStream(t, d)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			var held []*pool.Block
			for range rounds {
				if len(held) > 0 && rng.IntN(2) == 0 {
					i := rng.IntN(len(held))
					if err := held[i].Free(s); err != nil {
						errs <- err
						return
					}
					held = append(held[:i], held[i+1:]...)
					continue
				}
				b, err := p.Alloc(s, 1+rng.IntN(256<<10))
				if errors.Is(err, core.ErrOutOfMemory) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				if err := s.Memset(b.View(), byte(w)); err != nil {
					errs <- err
					return
				}
				held = append(held, b)
			}
			for _, b := range held {
				if err := b.Free(s); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	st := inspect.Pool(p)
	assert.Zero(t, st.InUse)
	assert.Zero(t, st.LiveBlocks)
	assert.Equal(t, st.Reserved, st.Cached)
	assert.LessOrEqual(t, st.PeakReserved, p.Budget())
}

// TestPoolProperty: random alloc/free sequences over three streams and a
// tight budget: no block is handed out twice, and the counters always
// match the blocks held.
func TestPoolProperty(t *testing.T) {
	_, d := poolRT(t, "delay_us=0", 4<<20)
	p := pool.Of(d)
	streams := []*core.Stream{newStream(t, d), newStream(t, d), newStream(t, d)}
	rng := rand.New(rand.NewPCG(7, 11))
	type held struct {
		b *pool.Block
		s *core.Stream
	}
	live := map[*pool.Block]held{}
	bufs := map[*core.Buffer]bool{}
	var order []*pool.Block
	allocs, oom := 0, 0
	for step := range 5000 {
		if len(order) > 0 && rng.IntN(5) < 2 {
			i := rng.IntN(len(order))
			b := order[i]
			order = append(order[:i], order[i+1:]...)
			h := live[b]
			delete(live, b)
			delete(bufs, b.Buffer())
			fs := h.s
			if rng.IntN(3) == 0 {
				fs = streams[rng.IntN(len(streams))]
				require.NoError(t, h.s.Synchronize()) // its work done before another stream frees it
			}
			require.NoError(t, b.Free(fs), "step %d", step)
		} else {
			s := streams[rng.IntN(len(streams))]
			n := 1 + rng.IntN(1<<rng.IntN(21))
			b, err := p.Alloc(s, n)
			if errors.Is(err, core.ErrOutOfMemory) {
				oom++
				continue
			}
			require.NoError(t, err, "step %d", step)
			allocs++
			_, dup := live[b]
			require.False(t, dup, "step %d: block handed out twice", step)
			require.False(t, bufs[b.Buffer()], "step %d: buffer handed out twice", step)
			require.GreaterOrEqual(t, b.Cap(), n)
			live[b], bufs[b.Buffer()] = held{b, s}, true
			order = append(order, b)
		}
		st := inspect.Pool(p)
		var inUse, classes uint64
		for b := range live {
			inUse += uint64(b.Len())
			classes += uint64(b.Cap())
		}
		require.Equal(t, inUse, st.InUse, "step %d", step)
		require.Equal(t, uint64(len(live)), st.LiveBlocks, "step %d", step)
		require.Equal(t, classes+st.Cached, st.Reserved, "step %d", step)
		require.LessOrEqual(t, st.Reserved, p.Budget(), "step %d", step)
		require.Equal(t, uint64(allocs), st.Hits+st.Misses, "step %d", step)
		require.Equal(t, uint64(oom), st.OutOfMemory, "step %d", step)
	}
	for _, b := range order {
		require.NoError(t, b.Free(live[b].s))
	}
	require.NoError(t, p.Trim())
	st := inspect.Pool(p)
	assert.Zero(t, st.Reserved)
	assert.Greater(t, st.Hits, uint64(0))
	assert.Greater(t, st.Released, uint64(0), "the budget made the pool trim")
	rs, err := inspect.Stats(d.Runtime())
	require.NoError(t, err)
	assert.Zero(t, rs.LiveBuffers, "every block went back to the plugin")
}

// BenchmarkPoolAllocFree: the host cost of a steady-state Alloc and Free
// on one stream (a cached block each time; Free records an event).
func BenchmarkPoolAllocFree(b *testing.B) {
	_, d := poolRT(b, "delay_us=0", 0)
	p := pool.Of(d)
	s := newStream(b, d)
	blk, err := p.Alloc(s, 1<<20)
	require.NoError(b, err)
	require.NoError(b, blk.Free(s))
	b.ReportAllocs()
	for b.Loop() {
		blk, err := p.Alloc(s, 1<<20)
		if err != nil {
			b.Fatal(err)
		}
		if err := blk.Free(s); err != nil {
			b.Fatal(err)
		}
	}
}

// Nil and zero-value pools and blocks return errors or zero values, never
// panic (as TestNilAndZeroReceiversNeverPanic for the other types).
func TestPoolNilAndZeroReceivers(t *testing.T) {
	for _, v := range []any{(*pool.Pool)(nil), &pool.Pool{}, (*pool.Block)(nil), &pool.Block{}, diag.Pool{}} {
		name := fmt.Sprintf("%T", v)
		t.Run(name, func(t *testing.T) { callAll(t, name, reflect.ValueOf(v)) })
	}
	_, err := (&pool.Pool{}).Alloc(nil, 1)
	require.ErrorIs(t, err, core.ErrInvalidArgument)
	require.ErrorIs(t, (&pool.Block{}).Free(nil), core.ErrInvalidArgument)
	assert.Nil(t, pool.Of(&core.Device{}))
	assert.Nil(t, pool.Of(nil))
	_, ok := inspect.DevicePool(nil)
	assert.False(t, ok)
	assert.Zero(t, inspect.Pool(nil))
	assert.Zero(t, inspect.Pool(&pool.Pool{}))
}

// TestMain puts a freshly built mock plugin on GPURT_PLUGIN_PATH, for the
// runnable example (it opens a runtime as a program would).
func TestMain(m *testing.M) { os.Exit(testutil.RunWithMockPlugin(m, "pool")) }

// A server's scratch memory from the device pool, with a budget of 90% of
// the device's memory: after the first step every Alloc is a cached
// block, handed out again at once on the stream that freed it.
func ExampleOf() {
	mockrt.Example(core.Config{PoolBudget: 0.9}, func(_ *core.Runtime, dev *core.Device, s *core.Stream) error {
		p := pool.Of(dev)
		for range 3 {
			blk, err := p.Alloc(s, 3000) // a block of the 3072-byte class
			if err != nil {
				return err // past the budget: names it, the request, reserved and in use
			}
			if err := s.Memset(blk.View(), 0); err != nil {
				return err
			}
			fmt.Println("block", blk.Len(), "of", blk.Cap())
			if err := blk.Free(s); err != nil { // after the work enqueued on s
				return err
			}
		}
		_ = s.Synchronize()
		st := inspect.Pool(p)
		fmt.Println("hits", st.Hits, "misses", st.Misses, "cached", st.Cached)
		fmt.Println(blkErr(p))
		return nil
	})
	// Output:
	// block 3000 of 3072
	// block 3000 of 3072
	// block 3000 of 3072
	// hits 2 misses 1 cached 3072
	// gpurt: pool_alloc: invalid argument: size 0: a block needs at least one byte
}

// blkErr is the error of a request for no bytes.
func blkErr(p *pool.Pool) error {
	_, err := p.Alloc(nil, 0)
	return err
}

// callAll is testutil.CallAll.
var callAll = testutil.CallAll
