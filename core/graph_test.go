// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/core/matmul"
	"github.com/metrale/gpurt/internal/le"
	"github.com/metrale/gpurt/quant"
)

// graphEnv is a stream, the built-in kernels and three 64-element f32
// buffers.
type graphEnv struct {
	d               *core.Device
	s               *core.Stream
	fill, axpy, add *core.Kernel
	x, y, z         *core.Buffer
}

const graphN = 64

func newGraphEnv(t *testing.T) *graphEnv {
	rt := openMock(t, "delay_us=0")
	d := dev0(t, rt)
	e := &graphEnv{d: d, s: stream(t, d)}
	for name, k := range map[string]**core.Kernel{"fill_f32": &e.fill, "axpy_f32": &e.axpy, "add_f32": &e.add} {
		*k = builtin(t, d, name)
	}
	for _, b := range []**core.Buffer{&e.x, &e.y, &e.z} {
		*b = alloc(t, d, 4*graphN)
	}
	return e
}

// step enqueues (or records) x = 2; y = 3; y += a*x; z = x + y.
func (e *graphEnv) step(s *core.Stream, a float32) error {
	cfg := core.Grid1D(graphN, 32)
	for _, f := range []func() error{
		func() error {
			return s.Launch(e.fill, cfg, core.ArgBuffer(e.x), core.ArgScalar[float32](2), core.ArgScalar[uint64](graphN))
		},
		func() error {
			return s.Launch(e.fill, cfg, core.ArgBuffer(e.y), core.ArgScalar[float32](3), core.ArgScalar[uint64](graphN))
		},
		func() error {
			return s.Launch(e.axpy, cfg, core.ArgBuffer(e.y), core.ArgBuffer(e.x), core.ArgScalar[float32](a), core.ArgScalar[uint64](graphN))
		},
		func() error {
			return s.Launch(e.add, cfg, core.ArgBuffer(e.z), core.ArgBuffer(e.x), core.ArgBuffer(e.y), core.ArgScalar[uint64](graphN))
		},
	} {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

func (e *graphEnv) read(t *testing.T, b *core.Buffer) []float32 {
	require.NoError(t, e.s.Synchronize())
	out := make([]byte, 4*graphN)
	require.NoError(t, core.CopyToHost(out, b))
	return le.ToFloat32s(out)
}

func TestGraphReplayMatchesEager(t *testing.T) {
	e := newGraphEnv(t)
	require.NoError(t, e.step(e.s, 5))
	want := e.read(t, e.z)
	assert.Equal(t, float32(2+3+5*2), want[0])
	require.NoError(t, core.Memset(e.z, 0))

	g, err := e.s.Capture(func(cs *core.Stream) error { return e.step(cs, 5) })
	require.NoError(t, err)
	defer g.Close()
	assert.Equal(t, 4, g.Len())
	// Nothing ran during capture.
	assert.Equal(t, float32(0), e.read(t, e.z)[0])
	for i := 0; i < 3; i++ {
		require.NoError(t, g.Launch(e.s))
	}
	assert.Equal(t, want, e.read(t, e.z))
	callAll(t, "live graph", reflect.ValueOf(g), "Close")
}

func TestGraphSetArg(t *testing.T) {
	e := newGraphEnv(t)
	var axpyNode core.Node
	g, err := e.s.Capture(func(cs *core.Stream) error {
		cfg := core.Grid1D(graphN, 32)
		if err := cs.Launch(e.fill, cfg, core.ArgBuffer(e.x), core.ArgScalar[float32](2), core.ArgScalar[uint64](graphN)); err != nil {
			return err
		}
		if err := cs.Memset32(e.x, 0x40000000); err != nil { // 2.0
			return err
		}
		axpyNode = cs.NextNode()
		return cs.Launch(e.axpy, cfg, core.ArgBuffer(e.y), core.ArgBuffer(e.x), core.ArgScalar[float32](1), core.ArgScalar[uint64](graphN))
	})
	require.NoError(t, err)
	defer g.Close()
	assert.Equal(t, core.Node(2), axpyNode)
	require.NoError(t, core.Memset(e.y, 0))
	require.NoError(t, core.Memset(e.z, 0))
	require.NoError(t, g.Launch(e.s))
	assert.Equal(t, float32(2), e.read(t, e.y)[0])

	// A scalar and a buffer pointer change between replays.
	require.NoError(t, g.SetArg(axpyNode, 2, core.ArgScalar[float32](4)))
	require.NoError(t, g.SetArg(axpyNode, 0, core.ArgBuffer(e.z)))
	require.NoError(t, g.Launch(e.s))
	assert.Equal(t, float32(8), e.read(t, e.z)[0])
	assert.Equal(t, "patched", inspect.GraphUpdate(g))
	// The replaced buffer is let go, the new one is held.
	require.NoError(t, e.y.Free())
	assert.ErrorIs(t, e.z.Free(), core.ErrFailedPrecondition)

	for _, tc := range []struct {
		name string
		node core.Node
		i    int
		arg  core.Arg
		want error
	}{
		{"no such node", 7, 0, core.ArgScalar[float32](1), core.ErrOutOfRange},
		{"not a launch", 1, 0, core.ArgScalar[float32](1), core.ErrInvalidArgument},
		{"no such argument", axpyNode, 4, core.ArgScalar[float32](1), core.ErrOutOfRange},
		{"wrong kind", axpyNode, 2, core.ArgScalar[int32](1), core.ErrInvalidArgument},
		{"freed buffer", axpyNode, 0, core.ArgBuffer(e.y), core.ErrFreed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorIs(t, g.SetArg(tc.node, tc.i, tc.arg), tc.want)
		})
	}
	require.NoError(t, g.Close())
	require.NoError(t, e.z.Free())
}

func TestGraphCopiesEventsAndGemm(t *testing.T) {
	e := newGraphEnv(t)
	rt := e.d.Runtime()
	hb, err := rt.AllocHost(4 * graphN)
	require.NoError(t, err)
	defer hb.Free()
	ev, err := e.d.NewEvent(false)
	require.NoError(t, err)
	defer ev.Close()
	s2, err := e.d.NewStream()
	require.NoError(t, err)
	defer s2.Close()
	// 8x8 identity times x (as an 8x8 matrix) is x.
	id := make([]float32, graphN)
	for i := 0; i < 8; i++ {
		id[i*8+i] = 1
	}
	idb, err := e.d.Alloc(4 * graphN)
	require.NoError(t, err)
	defer idb.Free()
	require.NoError(t, core.CopyFromHost(idb, le.Float32s(id)))
	desc := core.GemmDesc{AType: core.F32, BType: core.F32, DType: core.F32, M: 8, N: 8, K: 8}

	g, err := e.s.Capture(func(cs *core.Stream) error {
		cfg := core.Grid1D(graphN, 32)
		for _, f := range []func() error{
			func() error {
				return cs.Launch(e.fill, cfg, core.ArgBuffer(e.x), core.ArgScalar[float32](7), core.ArgScalar[uint64](graphN))
			},
			func() error { return cs.CopyDevice(e.y, e.x) },
			func() error {
				return cs.Gemm(desc, core.GemmOperands{A: idb, B: e.y, D: e.z, Alpha: 2})
			},
			func() error { return ev.Record(cs) },
			func() error { return cs.WaitEvent(ev) },
			func() error { return cs.CopyToPinned(hb, e.z) },
		} {
			if err := f(); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, g.Launch(e.s))
	require.NoError(t, s2.WaitEvent(ev))
	require.NoError(t, s2.Synchronize())
	require.NoError(t, e.s.Synchronize())
	got := le.ToFloat32s(hb.Bytes())
	assert.Equal(t, float32(14), got[0])
	assert.Equal(t, float32(14), got[graphN-1])
	// What a live graph holds cannot be freed or closed.
	assert.ErrorIs(t, hb.Free(), core.ErrFailedPrecondition)
	assert.ErrorIs(t, ev.Close(), core.ErrFailedPrecondition)
	assert.ErrorIs(t, idb.Free(), core.ErrFailedPrecondition)
	require.NoError(t, g.Close())
	assert.ErrorIs(t, g.Close(), core.ErrClosed)
	assert.ErrorIs(t, g.Launch(e.s), core.ErrClosed)
}

func TestGraphMisuse(t *testing.T) {
	e := newGraphEnv(t)
	cfg := core.Grid1D(graphN, 32)
	fillX := func(cs *core.Stream) error {
		return cs.Launch(e.fill, cfg, core.ArgBuffer(e.x), core.ArgScalar[float32](1), core.ArgScalar[uint64](graphN))
	}
	for _, tc := range []struct {
		name string
		fn   func(cs *core.Stream) error
		want error
	}{
		{"synchronize", func(cs *core.Stream) error { _ = fillX(cs); return cs.Synchronize() }, core.ErrFailedPrecondition},
		{"sync copy ignored error", func(cs *core.Stream) error {
			_ = core.CopyFromHost(e.x, make([]byte, 8))
			return fillX(cs)
		}, nil}, // the refused copy is not part of the capture: checked below
		{"device synchronize", func(cs *core.Stream) error { return e.d.Synchronize() }, core.ErrFailedPrecondition},
		{"query", func(cs *core.Stream) error { _, err := cs.Query(); return err }, core.ErrFailedPrecondition},
		{"close", func(cs *core.Stream) error { return cs.Close() }, core.ErrFailedPrecondition},
		{"bad launch, error dropped", func(cs *core.Stream) error {
			_ = cs.Launch(e.fill, cfg, core.ArgScalar[float32](1))
			return fillX(cs)
		}, core.ErrInvalidArgument},
		{"nothing recorded", func(cs *core.Stream) error { return nil }, core.ErrInvalidArgument},
		{"fn error", func(cs *core.Stream) error { return errTest }, errTest},
		{"nested", func(cs *core.Stream) error {
			_, err := cs.Capture(fillX)
			return err
		}, core.ErrFailedPrecondition},
		{"batch", func(cs *core.Stream) error {
			b := cs.NewLaunchBatch()
			_ = b.Add(e.fill, cfg, core.ArgBuffer(e.x), core.ArgScalar[float32](1), core.ArgScalar[uint64](graphN))
			_, err := b.Submit()
			return err
		}, core.ErrFailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := e.s.Capture(tc.fn)
			if tc.want == nil {
				require.NoError(t, err)
				require.NoError(t, g.Close())
				return
			}
			assert.ErrorIs(t, err, tc.want)
			assert.Nil(t, g)
		})
	}
	t.Run("sync copy during capture", func(t *testing.T) {
		var copyErr error
		g, err := e.s.Capture(func(cs *core.Stream) error {
			copyErr = core.CopyFromHost(e.x, make([]byte, 8))
			return fillX(cs)
		})
		require.NoError(t, err)
		defer g.Close()
		assert.ErrorIs(t, copyErr, core.ErrFailedPrecondition)
		// After the capture the device accepts synchronous calls again.
		require.NoError(t, core.CopyFromHost(e.x, make([]byte, 8)))
	})
	t.Run("capturing stream after capture", func(t *testing.T) {
		var kept *core.Stream
		g, err := e.s.Capture(func(cs *core.Stream) error { kept = cs; return fillX(cs) })
		require.NoError(t, err)
		defer g.Close()
		assert.ErrorIs(t, fillX(kept), core.ErrFailedPrecondition)
	})
	t.Run("free of a captured buffer", func(t *testing.T) {
		g, err := e.s.Capture(fillX)
		require.NoError(t, err)
		assert.ErrorIs(t, e.x.Free(), core.ErrFailedPrecondition)
		require.NoError(t, g.Launch(e.s))
		require.NoError(t, e.s.Synchronize())
		require.NoError(t, g.Close())
		require.NoError(t, e.x.Free())
	})
	t.Run("capture of a freed buffer", func(t *testing.T) {
		_, err := e.s.Capture(fillX) // e.x freed above
		assert.ErrorIs(t, err, core.ErrFreed)
	})
}

func TestGraphOtherDevice(t *testing.T) {
	rt := openMock(t, "devices=2;delay_us=0")
	d0, d1 := dev0(t, rt), func() *core.Device { d, err := rt.Device(1); require.NoError(t, err); return d }()
	s0 := stream(t, d0)
	s1 := stream(t, d1)
	b := alloc(t, d0, 64)
	g, err := s0.Capture(func(cs *core.Stream) error { return cs.Memset(b, 1) })
	require.NoError(t, err)
	defer g.Close()
	assert.ErrorIs(t, g.Launch(s1), core.ErrInvalidArgument)
	// A capture on device 1 does not refuse synchronous calls on device 0.
	g1, err := s1.Capture(func(cs *core.Stream) error {
		if err := core.Memset(b, 2); err != nil {
			return err
		}
		b1, err := d1.Alloc(64)
		if err != nil {
			return err
		}
		defer b1.Free()
		return nil
	})
	assert.Nil(t, g1)
	assert.ErrorIs(t, err, core.ErrInvalidArgument) // nothing recorded
}

func TestGraphLaunchAllocatesNothing(t *testing.T) {
	e := newGraphEnv(t)
	g, err := e.s.Capture(func(cs *core.Stream) error { return e.step(cs, 1) })
	require.NoError(t, err)
	defer g.Close()
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = g.Launch(e.s) }))
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		_ = g.SetArg(2, 2, core.ArgScalar[float32](3))
		_ = g.Launch(e.s)
	}))
	require.NoError(t, e.s.Synchronize())
	assert.Equal(t, float32(2+3+3*2), e.read(t, e.z)[0])
}

var errTest = errors.New("test: the capture function failed")

// randHalves is n random bf16 values.
func randHalves(r *rand.Rand, n int) []byte {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return halves(core.BF16, v)
}

// TestGraphReplayMatchesEagerCalls: each operation recorded through the
// call-or-record funnel (CALL items of ABI 1.7 for attention runs, KV
// appends, quantized and grouped matmul; LAUNCH items for the built-in
// kernels) replays to the same bytes as its eager call.
func TestGraphReplayMatchesEagerCalls(t *testing.T) {
	e := newAttentionEnv(t)
	d, s := e.d, e.s
	r := rand.New(rand.NewPCG(21, 4))

	// Quantized matmul: y (3 x 16) = x (3 x 128) * dequant(W (16 x 128))^T.
	w := make([]float32, 16*128)
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	q, err := quant.Quantize(w, 16, 128, quant.Options{GroupSize: 64, Bits: 8, ScaleType: core.BF16})
	require.NoError(t, err)
	qw, qs, qb, qx := upload(t, d, q.Q), upload(t, d, q.Scales), upload(t, d, q.Biases), upload(t, d, randHalves(r, 3*128))
	qy := upload(t, d, make([]byte, 2*3*16))

	// Grouped GEMM: groups of 3, 0 and 5 rows, n 32, k 64, bf16.
	msizes := []int{3, 0, 5}
	ga, gb := upload(t, d, randHalves(r, 8*64)), upload(t, d, randHalves(r, 3*32*64))
	gd := upload(t, d, make([]byte, 2*8*32))

	// RMSNorm (a built-in kernel): 4 rows of 64 bf16.
	rms := builtin(t, d, "rmsnorm_bf16")
	nx, nw := upload(t, d, randHalves(r, 4*64)), upload(t, d, randHalves(r, 64))
	ny := upload(t, d, make([]byte, 2*4*64))

	// Attention: the decode step of newAttentionEnv, planned once.
	ao := upload(t, d, make([]byte, 2*e.row))
	require.NoError(t, e.a.Plan(e.s, schedTwo))
	require.NoError(t, core.CopyFromHost(e.q, randHalves(r, 2*e.row/2)))

	// KV append: one new row for each request at its last position
	// (request 0: 2 pages, 1 token in the last: position 4; request 1:
	// 1 page of 4: position 3).
	kr, vr := upload(t, d, randHalves(r, 2*2*64)), upload(t, d, randHalves(r, 2*2*64))
	bidx, pos := upload(t, d, i32le(0, 1)), upload(t, d, i32le(4, 3))

	tests := []struct {
		name string
		out  []core.Region // what the op writes, compared
		op   func(s *core.Stream) error
		// scribble changes what the op's arguments point to in Go memory
		// after the recorded call (the graph must hold its own copy).
		scribble func()
	}{
		{"quant_matmul", []core.Region{qy}, func(s *core.Stream) error {
			return matmul.Quant(s, matmul.QuantDesc{XType: core.BF16, ScaleType: core.BF16, GroupSize: 64, M: 16, N: 3, K: 128},
				matmul.QuantOperands{W: qw, Scales: qs, Biases: qb, X: qx, Y: qy})
		}, nil},
		{"grouped_gemm", []core.Region{gd}, func(s *core.Stream) error {
			return matmul.Grouped(s, matmul.GroupedDesc{ABType: core.BF16, MSizes: msizes, N: 32, K: 64},
				matmul.GroupedOperands{A: ga, B: gb, D: gd})
		}, func() { msizes[0], msizes[2] = 8, 0 }},
		{"rmsnorm_bf16", []core.Region{ny}, func(s *core.Stream) error {
			return s.Launch(rms, core.LaunchConfig{Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{64, 1, 1}},
				core.ArgBuffer(ny), core.ArgBuffer(nx), core.ArgBuffer(nw), core.ArgScalar[float32](1e-5), core.ArgScalar[uint64](4), core.ArgScalar[uint64](64))
		}, nil},
		{"attention_run", []core.Region{ao}, func(s *core.Stream) error {
			return e.a.Run(s, e.cache, attention.Operands{Q: e.q, O: ao, Pages: e.pages})
		}, nil},
		{"kv_append", []core.Region{e.cache.K(), e.cache.V()}, func(s *core.Stream) error {
			return e.cache.Append(s, e.pages, 2, attention.KVRows{K: kr, V: vr, BatchIndices: bidx, Positions: pos, NNZ: 2})
		}, nil},
	}
	read := func(t *testing.T, regs []core.Region) []byte {
		require.NoError(t, s.Synchronize())
		var all []byte
		for _, reg := range regs {
			b := make([]byte, reg.Len())
			require.NoError(t, core.CopyToHost(b, reg))
			all = append(all, b...)
		}
		return all
	}
	poison := func(t *testing.T, regs []core.Region) []byte {
		for _, reg := range regs {
			require.NoError(t, core.Memset(reg, 0xa5))
		}
		return read(t, regs)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := poison(t, tc.out)
			require.NoError(t, tc.op(s))
			eager := read(t, tc.out)
			require.False(t, bytes.Equal(before, eager), "the eager call wrote its output")

			poison(t, tc.out)
			saved := append([]int(nil), msizes...)
			g, err := s.Capture(func(cs *core.Stream) error {
				err := tc.op(cs)
				if tc.scribble != nil {
					tc.scribble() // before the graph is built
				}
				return err
			})
			copy(msizes, saved)
			require.NoError(t, err)
			defer g.Close()
			assert.Equal(t, 1, g.Len())
			assert.Equal(t, before, read(t, tc.out), "capturing runs nothing")
			for replay := 0; replay < 2; replay++ {
				poison(t, tc.out)
				require.NoError(t, g.Launch(s))
				assert.True(t, bytes.Equal(eager, read(t, tc.out)), "replay %d differs from the eager call", replay)
			}
		})
	}
}
