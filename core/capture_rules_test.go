// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
)

// The capture rules of Stream.Capture (issue 22, items 7 and 9): work on
// the stream being captured through the outer *Stream is refused, not run
// eagerly and missing from the graph; captures do not nest; a capture
// function that panics, and a Graph dropped without Close, give back
// every hold.
func TestCaptureRules(t *testing.T) {
	e := newGraphEnv(t)
	cfg := core.Grid1D(graphN, 32)
	fill := func(s *core.Stream, b *core.Buffer, v float32) error {
		return s.Launch(e.fill, cfg, core.ArgBuffer(b), core.ArgScalar[float32](v), core.ArgScalar[uint64](graphN))
	}
	tests := []struct {
		name  string
		outer func() error // called inside the capture function
		want  string       // in the outer call's error
	}{
		{"launch on the outer stream", func() error { return fill(e.s, e.y, 7) }, "enqueue on the stream given to the capture function"},
		{"memset on the outer stream", func() error { return e.s.Memset(e.y, 0) }, "being captured"},
		{"copy on the outer stream", func() error { return e.s.CopyDevice(e.y, e.x) }, "being captured"},
		{"synchronize of the outer stream", func() error { return e.s.Synchronize() }, "being captured"},
		{"query of the outer stream", func() error { _, err := e.s.Query(); return err }, "being captured"},
		{"launch batch on the outer stream", func() error {
			b := e.s.NewLaunchBatch()
			if err := b.Add(e.fill, cfg, core.ArgBuffer(e.y), core.ArgScalar[float32](1), core.ArgScalar[uint64](graphN)); err != nil {
				return err
			}
			_, err := b.Submit()
			return err
		}, "being captured"},
		{"launch on the outer stream from another goroutine", func() error {
			var err error
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); err = fill(e.s, e.y, 7) }()
			wg.Wait()
			return err
		}, "being captured"},
		{"nested capture of the same stream", func() error {
			_, err := e.s.Capture(func(cs *core.Stream) error { return fill(cs, e.y, 1) })
			return err
		}, "captures cannot be nested"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, fill(e.s, e.y, 1))
			require.NoError(t, e.s.Synchronize())
			var outerErr error
			g, err := e.s.Capture(func(cs *core.Stream) error {
				if err := fill(cs, e.x, 4); err != nil {
					return err
				}
				outerErr = tc.outer()
				return nil
			})
			require.NoError(t, err, "the refused outer call is not the capture's error")
			defer g.Close()
			require.ErrorIs(t, outerErr, core.ErrFailedPrecondition)
			assert.Contains(t, outerErr.Error(), tc.want)
			assert.Equal(t, 1, g.Len(), "the graph holds what the capturing view recorded")
			// Nothing ran eagerly: y is as before the capture.
			assert.Equal(t, float32(1), e.read(t, e.y)[0])
			// After the capture the stream works as before, and the graph
			// replays what was recorded.
			require.NoError(t, fill(e.s, e.x, 0))
			require.NoError(t, g.Launch(e.s))
			assert.Equal(t, float32(4), e.read(t, e.x)[0])
		})
	}
}

func TestCaptureReleasesHolds(t *testing.T) {
	e := newGraphEnv(t)
	cfg := core.Grid1D(graphN, 32)
	tests := []struct {
		name    string
		capture func(b *core.Buffer)
	}{
		{"capture function panics", func(b *core.Buffer) {
			assert.PanicsWithValue(t, "boom", func() {
				_, _ = e.s.Capture(func(cs *core.Stream) error {
					if err := cs.Launch(e.fill, cfg, core.ArgBuffer(b), core.ArgScalar[float32](1), core.ArgScalar[uint64](graphN)); err != nil {
						return err
					}
					panic("boom")
				})
			})
		}},
		{"capture function fails", func(b *core.Buffer) {
			_, err := e.s.Capture(func(cs *core.Stream) error {
				if err := cs.Launch(e.fill, cfg, core.ArgBuffer(b), core.ArgScalar[float32](1), core.ArgScalar[uint64](graphN)); err != nil {
					return err
				}
				return errTest
			})
			require.ErrorIs(t, err, errTest)
		}},
		{"graph dropped without Close", func(b *core.Buffer) {
			g, err := e.s.Capture(func(cs *core.Stream) error {
				return cs.Launch(e.fill, cfg, core.ArgBuffer(b), core.ArgScalar[float32](1), core.ArgScalar[uint64](graphN))
			})
			require.NoError(t, err)
			require.ErrorIs(t, b.Free(), core.ErrFailedPrecondition, "a live graph holds the buffer")
			require.NoError(t, g.Launch(e.s))
			require.NoError(t, e.s.Synchronize())
			runtime.KeepAlive(g)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := e.d.Alloc(4 * graphN)
			require.NoError(t, err)
			tc.capture(b)
			// The holds are gone: at once, or once the dropped graph's
			// cleanup ran.
			deadline := time.Now().Add(10 * time.Second)
			for {
				runtime.GC()
				err = b.Free()
				if err == nil || time.Now().After(deadline) {
					break
				}
				require.ErrorIs(t, err, core.ErrFailedPrecondition)
				time.Sleep(time.Millisecond)
			}
			require.NoError(t, err, "every hold of the capture was given back")
			// The stream captures again (the capture flag was cleared).
			g, err := e.s.Capture(func(cs *core.Stream) error {
				return cs.Launch(e.fill, cfg, core.ArgBuffer(e.x), core.ArgScalar[float32](1), core.ArgScalar[uint64](graphN))
			})
			require.NoError(t, err)
			require.NoError(t, g.Close())
		})
	}
}

// attentionEnv is a decode attention of max batch 2 on the mock, with a
// page table on the device for two requests.
type attentionEnv struct {
	d     *core.Device
	s     *core.Stream
	cache *attention.KVCache
	a     *attention.Attention
	pages attention.PageTable
	q     *core.Buffer
	row   int // bytes of one query row
}

func newAttentionEnv(t *testing.T) *attentionEnv {
	rt := openMock(t, "delay_us=0")
	d := dev0(t, rt)
	s := stream(t, d)
	cache, _, pages := mockrt.SmallKVCache(t, d)
	row := 4 * 64 * 2
	q := alloc(t, d, 2*row)
	require.NoError(t, core.Memset(q, 0x33))
	a, err := attention.New(d, attention.Desc{Kind: attention.Decode, NumQOHeads: 4, Cache: mockrt.SmallKVDesc, MaxBatch: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	return &attentionEnv{d: d, s: s, cache: cache, a: a, q: q, row: row, pages: pages}
}

var (
	schedOne = attention.Schedule{KVIndptr: []int32{0, 2}, KVLastPageLen: []int32{1}}
	schedTwo = attention.Schedule{KVIndptr: []int32{0, 2, 3}, KVLastPageLen: []int32{1, 4}}
)

// RunAttention racing PlanAttention on one Attention (issue 22 item 3):
// the run's extent check and the plugin's run must see the same plan, so
// an O view of one row is either refused (a plan of two) or written
// within (a plan of one), never past its end.
func TestAttentionPlanRunRace(t *testing.T) {
	e := newAttentionEnv(t)
	const guard = 4096
	big, err := e.d.Alloc(e.row + guard)
	require.NoError(t, err)
	defer big.Free()
	require.NoError(t, core.Memset(big, 0x5a))
	o, err := big.View(0, e.row)
	require.NoError(t, err)
	ops := attention.Operands{Q: e.q, O: o, Pages: e.pages}
	require.NoError(t, e.a.Plan(e.s, schedOne))

	const rounds = 300
	var wg sync.WaitGroup
	var planErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < rounds && planErr == nil; i++ {
			planErr = e.a.Plan(e.s, schedTwo)
			if planErr == nil {
				planErr = e.a.Plan(e.s, schedOne)
			}
		}
	}()
	ran, refused := 0, 0
	for i := 0; i < rounds; i++ {
		err := e.a.Run(e.s, e.cache, ops)
		if err != nil {
			require.ErrorIs(t, err, core.ErrOutOfRange, "a run against a plan of two rows")
			refused++
			continue
		}
		ran++
	}
	wg.Wait()
	require.NoError(t, planErr)
	require.NoError(t, e.s.Synchronize())
	out := make([]byte, guard)
	tail, err := big.View(e.row, guard)
	require.NoError(t, err)
	require.NoError(t, core.CopyToHost(out, tail))
	for i, b := range out {
		if b != 0x5a {
			t.Fatalf("byte %d past the O view was written (0x%02x): a run executed a plan its check did not see (%d runs, %d refused)", i, b, ran, refused)
		}
	}
	assert.Positive(t, ran, "some runs ran")
}

// On an ABI 1.7 plugin attention runs and KV appends are recorded (CALL
// items); planning is not (it runs between replays), and is refused with
// ErrFailedPrecondition and a clear message: the plugin never sees a NULL
// stream (issue 22 item 10).
func TestAttentionOnCapturingStream(t *testing.T) {
	e := newAttentionEnv(t)
	o, err := e.d.Alloc(2 * e.row)
	require.NoError(t, err)
	defer o.Free()
	ops := attention.Operands{Q: e.q, O: o, Pages: e.pages}
	require.NoError(t, e.a.Plan(e.s, schedTwo))
	tests := []struct {
		name string
		op   func(cs *core.Stream) error
		want error // nil: recorded
	}{
		{"plan", func(cs *core.Stream) error { return e.a.Plan(cs, schedTwo) }, core.ErrFailedPrecondition},
		{"run", func(cs *core.Stream) error { return e.a.Run(cs, e.cache, ops) }, nil},
		{"append", func(cs *core.Stream) error {
			return e.cache.Append(cs, e.pages, 2, attention.KVRows{K: e.q, V: e.q, BatchIndices: e.pages.Indices, Positions: e.pages.Indices, NNZ: 1})
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var opErr error
			g, err := e.s.Capture(func(cs *core.Stream) error {
				opErr = tc.op(cs)
				return opErr
			})
			if tc.want == nil {
				require.NoError(t, err)
				assert.Equal(t, 1, g.Len())
				require.NoError(t, g.Close())
				return
			}
			require.ErrorIs(t, err, tc.want)
			require.ErrorIs(t, opErr, tc.want)
			assert.NotContains(t, opErr.Error(), "NULL")
			assert.Contains(t, opErr.Error(), "not recorded in graphs by this plugin")
		})
	}
	t.Run("attention closed while a graph holds it", func(t *testing.T) {
		a, err := attention.New(e.d, e.a.Desc())
		require.NoError(t, err)
		require.NoError(t, a.Plan(e.s, schedTwo))
		g, err := e.s.Capture(func(cs *core.Stream) error { return a.Run(cs, e.cache, ops) })
		require.NoError(t, err)
		require.ErrorIs(t, a.Close(), core.ErrFailedPrecondition)
		require.NoError(t, g.Close())
		require.NoError(t, a.Close())
	})
}

// An operand error of an attention op reads "gpurt: op: ...", once.
func TestAttentionOperandErrorPrefix(t *testing.T) {
	e := newAttentionEnv(t)
	o, err := e.d.Alloc(2 * e.row)
	require.NoError(t, err)
	require.NoError(t, o.Free())
	require.NoError(t, e.a.Plan(e.s, schedTwo))
	tests := []struct {
		name string
		fn   func() error
		want error
	}{
		{"freed O", func() error {
			return e.a.Run(e.s, e.cache, attention.Operands{Q: e.q, O: o, Pages: e.pages})
		}, core.ErrFreed},
		{"nil Q", func() error {
			return e.a.Run(e.s, e.cache, attention.Operands{O: e.q, Pages: e.pages})
		}, core.ErrInvalidArgument},
		{"freed K rows", func() error {
			return e.cache.Append(e.s, e.pages, 2, attention.KVRows{K: o, V: e.q, BatchIndices: e.pages.Indices, Positions: e.pages.Indices, NNZ: 1})
		}, core.ErrFreed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.fn()
			require.ErrorIs(t, err, tc.want)
			assert.Equal(t, 1, strings.Count(err.Error(), "gpurt:"), "%q", err.Error())
			assert.Contains(t, err.Error(), "operand")
		})
	}
}
