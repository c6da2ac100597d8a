// SPDX-License-Identifier: Apache-2.0

package core

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/internal/abi"
	"github.com/metrale/gpurt/internal/le"
)

// Launch and Gemm hold one use per distinct buffer and release every use
// they took, on success and on each error, for launches packed in the
// small array and in the full one.
func TestLaunchAndGemmBalanceUses(t *testing.T) {
	rt, dev := testRuntime(t, "delay_us=0")
	s := testStream(t, dev)
	x := testAlloc(t, dev, 4096)
	y := testAlloc(t, dev, 4096)
	freed, err := dev.Alloc(4096)
	require.NoError(t, err)
	require.NoError(t, freed.Free())
	mod, _ := testKernels(t, dev)
	uses := func() []int64 { return []int64{x.l.v.Load(), y.l.v.Load(), mod.l.v.Load(), s.l.v.Load()} }
	zero := []int64{0, 0, 0, 0}

	t.Run("add with one buffer three times", func(t *testing.T) {
		add, err := mod.Kernel("add_f32")
		require.NoError(t, err)
		in := make([]byte, 16)
		for i := 0; i < 4; i++ {
			binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(float32(i+1)))
		}
		require.NoError(t, CopyFromHost(x, in))
		v, err := x.View(0, 16)
		require.NoError(t, err)
		require.NoError(t, s.Launch(add, Grid1D(4, 4), ArgBuffer(v), ArgBuffer(x), ArgBuffer(v), ArgScalar[uint64](4)))
		require.NoError(t, s.Synchronize())
		out := make([]byte, 16)
		require.NoError(t, CopyToHost(out, x))
		for i := 0; i < 4; i++ {
			assert.Equal(t, float32(2*(i+1)), math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:])))
		}
		assert.Equal(t, zero, uses())
	})

	// A kernel of 12 parameters (the full array), run against the mock's
	// stream_query in place of the launch slot (it reads only the runtime
	// and the stream).
	params := make([]paramInfo, 12)
	for i := range params {
		params[i] = paramInfo{kind: abi.ArgBuffer, size: 8}
		if i%3 == 2 {
			params[i] = paramInfo{kind: abi.ArgAny, size: 4}
		}
	}
	big := &Kernel{mod: mod, name: "big", info: kernelInfo{params: params}}
	args := func(last Arg) []Arg {
		a := make([]Arg, 12)
		for i := range a {
			switch {
			case i%3 == 2:
				a[i] = ArgScalar[uint32](uint32(i))
			case i%2 == 0:
				a[i] = ArgBuffer(x)
			default:
				a[i] = ArgBuffer(View{buf: y, n: y.size})
			}
		}
		a[11] = last
		return a
	}
	stub := *rt.p
	stub.API.Launch = stub.API.StreamQuery
	real := rt.p
	rt.p = &stub
	cases := []struct {
		name string
		last Arg
		err  error
	}{
		{"ok", ArgScalar[uint32](7), nil},
		{"freed last", ArgBuffer(freed), ErrFreed},
		{"zero Arg last", Arg{}, ErrInvalidArgument},
	}
	for _, c := range cases {
		t.Run("12 arguments "+c.name, func(t *testing.T) {
			a := args(c.last)
			if c.last.kind == abi.ArgBuffer {
				big.info.params[11] = paramInfo{kind: abi.ArgBuffer, size: 8}
			} else {
				big.info.params[11] = paramInfo{kind: abi.ArgAny, size: 4}
			}
			err := s.Launch(big, Grid1D(1, 1), a...)
			if c.err == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, c.err)
			}
			assert.Equal(t, zero, uses())
		})
	}
	rt.p = real

	t.Run("gemm errors release their uses", func(t *testing.T) {
		desc := GemmDesc{AType: F32, BType: F32, DType: F32, M: 8, N: 8, K: 8}
		require.NoError(t, s.Gemm(desc, GemmOperands{A: x, B: y, D: x, Alpha: 1}))
		require.NoError(t, s.Gemm(desc, GemmOperands{A: x, B: y, D: x, Alpha: 1}))
		assert.ErrorIs(t, s.Gemm(desc, GemmOperands{A: x, B: y, D: freed, Alpha: 1}), ErrFreed)
		short, err := y.View(0, 8)
		require.NoError(t, err)
		assert.ErrorIs(t, s.Gemm(desc, GemmOperands{A: x, B: short, D: x, Alpha: 1}), ErrOutOfRange)
		require.NoError(t, s.Synchronize())
		assert.Equal(t, zero, uses())
		rt.plans.mu.Lock()
		for _, e := range rt.plans.m {
			assert.Zero(t, e.refs.Load())
		}
		rt.plans.mu.Unlock()
	})
}

// TestLaunchBatch runs every case twice: through the plugin's
// launch_batch slot, and through the fallback of one launch per item (a
// private copy of the table without the slot, as a 1.1 plugin has).
func TestLaunchBatch(t *testing.T) {
	rt, dev := testRuntime(t, "delay_us=0")
	require.True(t, rt.p.Has(bind.SlotLaunchBatch), "the mock has the 1.2 launch_batch slot")
	s := testStream(t, dev)
	mod, ks := testKernels(t, dev, "fill_f32", "scale_f32", "axpy_f32")
	fill, scale, axpy := ks[0], ks[1], ks[2]
	const n = 64
	x := testAlloc(t, dev, 4*n)
	y := testAlloc(t, dev, 4*n)
	cfg := Grid1D(n, 32)
	read := func(b *Buffer) []float32 {
		require.NoError(t, s.Synchronize())
		out := make([]byte, 4*n)
		require.NoError(t, CopyToHost(out, b))
		return le.ToFloat32s(out)
	}
	constant := func(v float32) []float32 {
		c := make([]float32, n)
		for i := range c {
			c[i] = v
		}
		return c
	}
	uses := func() []int64 { return []int64{x.l.v.Load(), y.l.v.Load(), mod.l.v.Load(), s.l.v.Load()} }
	zero := []int64{0, 0, 0, 0}

	real := rt.p
	noSlot := *rt.p
	noSlot.API.LaunchBatch = 0
	for _, path := range []struct {
		name     string
		fallback bool
	}{{"slot", false}, {"fallback", true}} {
		t.Run(path.name, func(t *testing.T) {
			if path.fallback {
				rt.p = &noSlot
				defer func() { rt.p = real }()
			}
			b := s.NewLaunchBatch()
			assert.Same(t, s, b.s)

			t.Run("dependent launches", func(t *testing.T) {
				// x = 2; y = 3; y = 0.5*x + y; x = 4*x; y = 1*x + y
				require.NoError(t, b.Add(fill, cfg, ArgBuffer(x), ArgScalar[float32](2), ArgScalar[uint64](n)))
				require.NoError(t, b.Add(fill, cfg, ArgBuffer(View{buf: y, n: y.size}), ArgScalar[float32](3), ArgScalar[uint64](n)))
				require.NoError(t, b.Add(axpy, cfg, ArgBuffer(y), ArgBuffer(x), ArgScalar[float32](0.5), ArgScalar[uint64](n)))
				require.NoError(t, b.Add(scale, cfg, ArgBuffer(x), ArgBuffer(x), ArgScalar[float32](4), ArgScalar[uint64](n)))
				require.NoError(t, b.Add(axpy, cfg, ArgBuffer(y), ArgBuffer(x), ArgScalar[float32](1), ArgScalar[uint64](n)))
				assert.Equal(t, 5, b.Len())
				got, err := b.Submit()
				require.NoError(t, err)
				assert.Equal(t, 5, got)
				assert.Zero(t, b.Len())
				assert.Equal(t, constant(8), read(x))
				assert.Equal(t, constant(12), read(y))
				assert.Equal(t, zero, uses())
			})

			t.Run("Add error is sticky and enqueues nothing", func(t *testing.T) {
				require.NoError(t, CopyFromHost(x, le.Float32s(constant(7))))
				require.NoError(t, b.Add(fill, cfg, ArgBuffer(x), ArgScalar[float32](1), ArgScalar[uint64](n)))
				require.NoError(t, b.Add(fill, cfg, ArgBuffer(y), ArgScalar[float32](1), ArgScalar[uint64](n)))
				err := b.Add(fill, cfg, ArgBuffer(x), ArgScalar[float32](1)) // 2 of 3 arguments
				require.ErrorIs(t, err, ErrInvalidArgument)
				assert.Contains(t, err.Error(), "item 2:")
				assert.Contains(t, err.Error(), "takes 3 arguments, got 2")
				assert.Equal(t, 2, b.Len())
				assert.Equal(t, err, b.Add(fill, cfg, ArgBuffer(x), ArgScalar[float32](1), ArgScalar[uint64](n)))
				got, err2 := b.Submit()
				assert.Equal(t, err, err2)
				assert.Zero(t, got)
				assert.Equal(t, constant(7), read(x))
				assert.Equal(t, zero, uses())
			})

			freed, err := dev.Alloc(64)
			require.NoError(t, err)
			require.NoError(t, freed.Free())
			for _, c := range []struct {
				name string
				add  func() error
				want error
				msg  string
			}{
				{"nil kernel", func() error { return b.Add(nil, cfg) }, ErrInvalidArgument, "item 1: nil kernel"},
				{"wrong kind", func() error { return b.Add(fill, cfg, ArgBuffer(x), ArgScalar[uint32](1), ArgScalar[uint64](n)) }, ErrInvalidArgument, "item 1: kernel \"fill_f32\" argument 1"},
				{"zero Arg", func() error { return b.Add(fill, cfg, ArgBuffer(x), Arg{}, ArgScalar[uint64](n)) }, ErrInvalidArgument, "zero Arg"},
				{"nil buffer", func() error {
					return b.Add(fill, cfg, ArgBuffer((*Buffer)(nil)), ArgScalar[float32](1), ArgScalar[uint64](n))
				}, ErrInvalidArgument, "nil buffer"},
				{"freed buffer", func() error {
					return b.Add(axpy, cfg, ArgBuffer(y), ArgBuffer(freed), ArgScalar[float32](1), ArgScalar[uint64](n))
				}, ErrFreed, "item 1: kernel \"axpy_f32\" argument 1"},
			} {
				t.Run(c.name, func(t *testing.T) {
					require.NoError(t, b.Add(fill, cfg, ArgBuffer(x), ArgScalar[float32](1), ArgScalar[uint64](n)))
					err := c.add()
					require.ErrorIs(t, err, c.want)
					assert.Contains(t, err.Error(), c.msg)
					b.Reset()
					assert.Zero(t, b.Len())
					assert.Equal(t, zero, uses())
					require.NoError(t, b.Add(fill, cfg, ArgBuffer(x), ArgScalar[float32](1), ArgScalar[uint64](n)), "Reset clears the error")
					b.Reset()
				})
			}

			t.Run("plugin rejects an item", func(t *testing.T) {
				require.NoError(t, CopyFromHost(x, le.Float32s(constant(7))))
				big := LaunchConfig{Grid: [3]uint32{1}, Block: [3]uint32{2048}} // over 1024 threads: only the plugin knows
				for i := 0; i < 3; i++ {
					require.NoError(t, b.Add(fill, cfg, ArgBuffer(x), ArgScalar[float32](float32(i)), ArgScalar[uint64](n)))
				}
				require.NoError(t, b.Add(fill, big, ArgBuffer(x), ArgScalar[float32](9), ArgScalar[uint64](n)))
				got, err := b.Submit()
				require.ErrorIs(t, err, ErrInvalidArgument)
				assert.Contains(t, err.Error(), "item 3")
				if path.fallback { // one launch per item: the earlier ones stay enqueued
					assert.Equal(t, 3, got)
					assert.Equal(t, constant(2), read(x))
				} else { // the slot checks every item first
					assert.Zero(t, got)
					assert.Equal(t, constant(7), read(x))
				}
				assert.Equal(t, zero, uses())
			})

			t.Run("driver fails midway", func(t *testing.T) {
				require.NoError(t, rt.control("fail_launch_nth", 3))
				for i := 0; i < 5; i++ {
					require.NoError(t, b.Add(fill, cfg, ArgBuffer(x), ArgScalar[float32](float32(i)), ArgScalar[uint64](n)))
				}
				got, err := b.Submit()
				require.ErrorIs(t, err, ErrLaunchFailed)
				assert.Contains(t, err.Error(), "item 2")
				assert.Equal(t, 2, got)
				assert.Equal(t, constant(1), read(x))
				assert.Equal(t, zero, uses())
			})

			t.Run("empty", func(t *testing.T) {
				got, err := b.Submit()
				require.NoError(t, err)
				assert.Zero(t, got)
			})

			t.Run("1000 launches, reused", func(t *testing.T) {
				for round := 0; round < 3; round++ {
					for i := 0; i < 1000; i++ {
						require.NoError(t, b.Add(fill, cfg, ArgBuffer(x), ArgScalar[float32](float32(i+round)), ArgScalar[uint64](n)))
					}
					got, err := b.Submit()
					require.NoError(t, err)
					assert.Equal(t, 1000, got)
					assert.Equal(t, constant(float32(999+round)), read(x))
				}
				assert.Equal(t, zero, uses())
			})

			t.Run("steady state allocates nothing", func(t *testing.T) {
				v, err := x.View(4, 8)
				require.NoError(t, err)
				one := Grid1D(1, 1)
				allocs := testing.AllocsPerRun(50, func() {
					for i := 0; i < 64; i++ {
						_ = b.Add(fill, one, ArgBuffer(v), ArgScalar[float32](1), ArgScalar[uint64](1))
					}
					_ = b.Add(axpy, one, ArgBuffer(y), ArgBuffer(x), ArgScalar[float32](1), ArgScalar[uint64](1))
					if _, err := b.Submit(); err != nil {
						panic(err)
					}
				})
				assert.Zero(t, allocs)
				require.NoError(t, s.Synchronize())
			})

			t.Run("closed stream", func(t *testing.T) {
				s2, err := dev.NewStream()
				require.NoError(t, err)
				b2 := s2.NewLaunchBatch()
				require.NoError(t, b2.Add(fill, cfg, ArgBuffer(x), ArgScalar[float32](1), ArgScalar[uint64](n)))
				require.NoError(t, s2.Close())
				got, err := b2.Submit()
				require.ErrorIs(t, err, ErrClosed)
				assert.Zero(t, got)
				assert.ErrorIs(t, b2.Add(fill, cfg, ArgBuffer(x), ArgScalar[float32](1), ArgScalar[uint64](n)), ErrClosed)
				b2.Reset()
				assert.Equal(t, zero, uses())
			})
		})
	}

	// Free of a buffer (or Unload of a module) a pending batch holds is
	// refused with ErrFailedPrecondition: waiting could deadlock the
	// goroutine that owns the batch. After Submit or Reset it succeeds, and
	// the handle never reaches C freed.
	for _, end := range []string{"Submit", "Reset"} {
		t.Run("Free refused until "+end, func(t *testing.T) {
			z, err := dev.Alloc(4 * n)
			require.NoError(t, err)
			b := s.NewLaunchBatch()
			require.NoError(t, b.Add(fill, cfg, ArgBuffer(z), ArgScalar[float32](5), ArgScalar[uint64](n)))
			err = z.Free()
			require.ErrorIs(t, err, ErrFailedPrecondition)
			assert.Contains(t, err.Error(), "pending LaunchBatch")
			// the buffer is still alive and usable
			probe := s.NewLaunchBatch()
			require.NoError(t, probe.Add(fill, cfg, ArgBuffer(z), ArgScalar[float32](1), ArgScalar[uint64](n)))
			probe.Reset()
			if end == "Submit" {
				got, err := b.Submit()
				require.NoError(t, err)
				assert.Equal(t, 1, got)
				require.NoError(t, s.Synchronize())
			} else {
				b.Reset()
			}
			require.NoError(t, z.Free())
			assert.ErrorIs(t, b.Add(fill, cfg, ArgBuffer(z), ArgScalar[float32](1), ArgScalar[uint64](n)), ErrFreed)
			b.Reset()
		})
	}
}
