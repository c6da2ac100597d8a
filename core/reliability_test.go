// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
)

// Tests of issue 9: hangs, leaks, wrong results that succeed, crashes.

// hangLimit bounds a call that must return: far longer than any of these
// calls takes even under -race on a loaded 2-core machine, so reaching it
// means a hang, not slowness.
const hangLimit = 60 * time.Second

// bounded runs fn and fails the test when it has not returned within
// hangLimit (fn's goroutine is then left behind; the test does not stall).
func bounded(t testing.TB, what string, fn func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("%s did not return within %v: it hangs", what, hangLimit)
	}
}

// stagedSize takes the staged path (at least 64 KiB) in one small chunk.
const stagedSize = 128 << 10

// Item 1: copies waiting for a staging slot wake when the slot's creation
// fails, and Close then returns.
func TestStagedCopyWaitersWake(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(rt *core.Runtime) error
		want  error
	}{
		{"device lost", func(rt *core.Runtime) error { return rt.Control("lose_device", 0) }, core.ErrDeviceLost},
		// The first pinned allocation of the copies fails: one stager's
		// slots cannot be made while others wait.
		{"pinned memory exhausted", func(rt *core.Runtime) error { return rt.Control("fail_alloc_nth", 1) }, core.ErrOutOfMemory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := openMock(t, "delay_us=0")
			d := dev0(t, rt)
			const copies = 64
			buf, err := d.Alloc(copies * stagedSize)
			require.NoError(t, err)
			require.NoError(t, tc.fault(rt))
			errs := make(chan error, copies)
			bounded(t, "64 concurrent staged copies", func() {
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i := 0; i < copies; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						v, err := buf.View(i*stagedSize, stagedSize)
						if err == nil {
							if i%2 == 0 {
								err = core.CopyFromHost(v, make([]byte, stagedSize))
							} else {
								err = core.CopyToHost(make([]byte, stagedSize), v)
							}
						}
						errs <- err
					}()
				}
				close(start)
				wg.Wait()
			})
			close(errs)
			failed := 0
			for err := range errs {
				if err != nil {
					failed++
					assert.ErrorIs(t, err, tc.want)
				}
			}
			assert.NotZero(t, failed, "the fault made no copy fail")
			bounded(t, "Close after the copies", func() { assert.NoError(t, rt.Close()) })
		})
	}
}

// Item 1: Close racing large copies returns, and so does every copy
// (each either completes or fails with ErrClosed).
func TestCloseRacingStagedCopies(t *testing.T) {
	for round := 0; round < 20; round++ {
		rt := openMock(t, "delay_us=0")
		d := dev0(t, rt)
		const copies = 16
		buf, err := d.Alloc(copies * stagedSize)
		require.NoError(t, err)
		bounded(t, "copies racing Close", func() {
			var wg, started sync.WaitGroup
			started.Add(copies)
			for i := 0; i < copies; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v, err := buf.View(i*stagedSize, stagedSize)
					require.NoError(t, err)
					src := make([]byte, stagedSize)
					started.Done()
					for {
						if err := core.CopyFromHost(v, src); err != nil {
							assert.ErrorIs(t, err, core.ErrClosed)
							return
						}
					}
				}()
			}
			// Close while the first copies make the device's stagers.
			started.Wait()
			assert.NoError(t, rt.Close())
			wg.Wait()
		})
	}
}

// callAll calls every exported method of recv (a reflect.Value) with zero
// arguments (nil pointers, nil funcs, zero structs; no variadic
// arguments), except those in skip, and reports each panic as a failure.
func callAll(t *testing.T, name string, recv reflect.Value, skip ...string) {
	t.Helper()
	typ := recv.Type()
	for i := 0; i < typ.NumMethod(); i++ {
		m := typ.Method(i)
		if slices.Contains(skip, m.Name) {
			continue
		}
		fn := recv.Method(i)
		ft := fn.Type()
		n := ft.NumIn()
		if ft.IsVariadic() {
			n--
		}
		args := make([]reflect.Value, n)
		for j := range args {
			args[j] = reflect.Zero(ft.In(j))
		}
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s.%s with zero arguments panicked: %v", name, m.Name, p)
				}
			}()
			fn.Call(args)
		}()
	}
}

// Item 4: nil and zero-value receivers of every core type return errors
// (or zero values, for accessors), never panic; so do valid receivers
// given zero arguments.
func TestNilAndZeroReceiversNeverPanic(t *testing.T) {
	values := []any{
		(*core.Runtime)(nil), &core.Runtime{},
		(*core.Device)(nil), &core.Device{},
		(*core.Buffer)(nil), &core.Buffer{}, core.View{},
		(*core.HostBuffer)(nil), &core.HostBuffer{},
		(*core.HostSlice)(nil), &core.HostSlice{}, core.PinnedView{},
		(*core.HostHeap)(nil), &core.HostHeap{},
		(*core.Stream)(nil), &core.Stream{},
		(*core.Event)(nil), &core.Event{},
		(*core.Module)(nil), &core.Module{},
		(*core.Kernel)(nil), &core.Kernel{},
		(*core.LaunchBatch)(nil), &core.LaunchBatch{},
		core.Arg{}, core.ArgKind(0), core.DType(0), core.Epilogue(0),
	}
	for _, v := range values {
		name := fmt.Sprintf("%T", v)
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
			name = "nil " + name
		} else {
			name = "zero " + name
		}
		t.Run(name, func(t *testing.T) { callAll(t, name, reflect.ValueOf(v)) })
	}

	// The example from the issue.
	rt := openMock(t, "delay_us=0")
	d, err := rt.Device(7)
	require.Error(t, err)
	_, err = d.Alloc(1)
	assert.ErrorIs(t, err, core.ErrInvalidArgument)

	// Valid receivers, zero arguments; methods that end the object are
	// called last, on objects of their own.
	d = dev0(t, rt)
	live := func() []any {
		buf, err := d.Alloc(256)
		require.NoError(t, err)
		hb, err := rt.AllocHost(256)
		require.NoError(t, err)
		hs, err := rt.HostHeap().Alloc(256)
		require.NoError(t, err)
		s, err := d.NewStream()
		require.NoError(t, err)
		ev, err := d.NewEvent(true)
		require.NoError(t, err)
		mod, err := d.BuiltinModule()
		require.NoError(t, err)
		k, err := mod.Kernel("fill_f32")
		require.NoError(t, err)
		return []any{rt, d, buf, buf.All(), hb, hs, rt.HostHeap(), s, ev, mod, k, s.NewLaunchBatch()}
	}
	enders := []string{"Close", "Free", "Unload"}
	for _, v := range live() {
		name := fmt.Sprintf("live %T", v)
		t.Run(name, func(t *testing.T) { callAll(t, name, reflect.ValueOf(v), enders...) })
	}
	// Functions of the package, on nil and zero values.
	zeroBuf := &core.Buffer{}
	for name, f := range map[string]func() error{
		"CopyFromHost zero Buffer": func() error { return core.CopyFromHost(zeroBuf, []byte{1}) },
		"CopyToHost zero Buffer":   func() error { return core.CopyToHost([]byte{1}, zeroBuf) },
		"Copy zero Buffers":        func() error { return core.Copy(zeroBuf, zeroBuf) },
		"Memset zero Buffer":       func() error { return core.Memset(zeroBuf, 1) },
		"Memset32 nil":             func() error { return core.Memset32(nil, 1) },
		"Elapsed nil":              func() error { _, err := core.Elapsed(nil, nil); return err },
		"Elapsed zero":             func() error { _, err := core.Elapsed(&core.Event{}, &core.Event{}); return err },
		"Stream.Time nil fn": func() error {
			s, err := d.NewStream()
			require.NoError(t, err)
			defer s.Close()
			_, err = s.Time(nil)
			return err
		},
		"Launch zero Kernel": func() error {
			s, err := d.NewStream()
			require.NoError(t, err)
			defer s.Close()
			return s.Launch(&core.Kernel{}, core.LaunchConfig{})
		},
		"Record zero Stream": func() error {
			ev, err := d.NewEvent(false)
			require.NoError(t, err)
			defer ev.Close()
			return ev.Record(&core.Stream{})
		},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("%s panicked: %v", name, p)
					}
				}()
				err = f()
			}()
			assert.ErrorIs(t, err, core.ErrInvalidArgument, name)
		})
	}

	for _, v := range append(live()[1:], rt) { // the runtime last
		name := fmt.Sprintf("live %T", v)
		t.Run(name+" enders", func(t *testing.T) {
			for _, e := range enders {
				if m := reflect.ValueOf(v).MethodByName(e); m.IsValid() {
					func() {
						defer func() {
							if p := recover(); p != nil {
								t.Errorf("%s.%s panicked: %v", name, e, p)
							}
						}()
						m.Call(nil)
					}()
				}
			}
		})
	}
}

// Item 4: Bytes after Free or Close is nil, never memory that is gone or
// belongs to another slice.
func TestBytesAfterFreeOrClose(t *testing.T) {
	rt := openMock(t, "delay_us=0")
	hb, err := rt.AllocHost(4096)
	require.NoError(t, err)
	hs, err := rt.HostHeap().Alloc(4096)
	require.NoError(t, err)
	hbv, err := hb.View(16, 32)
	require.NoError(t, err)
	hsv, err := hs.View(16, 32)
	require.NoError(t, err)
	require.Len(t, hb.Bytes(), 4096)
	require.Len(t, hs.Bytes(), 4096)
	require.Len(t, hsv.Bytes(), 32)
	require.NoError(t, hs.Free())
	assert.Nil(t, hs.Bytes(), "HostSlice.Bytes after Free")
	assert.Nil(t, hsv.Bytes(), "PinnedView.Bytes of a freed HostSlice")
	// The freed span goes to the next slice: the old one must not see it.
	hs2, err := rt.HostHeap().Alloc(4096)
	require.NoError(t, err)
	assert.Nil(t, hs.Bytes())
	require.NoError(t, hb.Free())
	assert.Nil(t, hb.Bytes(), "HostBuffer.Bytes after Free")
	assert.Nil(t, hbv.Bytes(), "PinnedView.Bytes of a freed HostBuffer")

	hb2, err := rt.AllocHost(64)
	require.NoError(t, err)
	require.NoError(t, rt.Close())
	assert.Nil(t, hs2.Bytes(), "HostSlice.Bytes after Close")
	assert.Nil(t, hb2.Bytes(), "HostBuffer.Bytes after Close")
}

// Item 3: a zero-length View as a kernel argument is an error (the ABI
// reads length 0 as "to the end of the buffer"), for Launch and
// LaunchBatch; the kernel never runs and the buffer is untouched.
func TestZeroLengthViewKernelArgument(t *testing.T) {
	rt := openMock(t, "delay_us=0")
	d := dev0(t, rt)
	s, err := d.NewStream()
	require.NoError(t, err)
	defer s.Close()
	mod, err := d.BuiltinModule()
	require.NoError(t, err)
	fill, err := mod.Kernel("fill_f32")
	require.NoError(t, err)
	buf, err := d.Alloc(64)
	require.NoError(t, err)
	defer buf.Free()
	empty, err := buf.View(16, 0)
	require.NoError(t, err)
	for name, launch := range map[string]func() error{
		"Launch": func() error {
			return s.Launch(fill, core.Grid1D(4, 4), core.ArgBuffer(empty), core.ArgF32(1), core.ArgU64(4))
		},
		"LaunchBatch": func() error {
			b := s.NewLaunchBatch()
			addErr := b.Add(fill, core.Grid1D(4, 4), core.ArgBuffer(empty), core.ArgF32(1), core.ArgU64(4))
			n, err := b.Submit()
			assert.Zero(t, n)
			assert.Equal(t, addErr, err)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, core.Memset(buf, 0))
			err := launch()
			require.ErrorIs(t, err, core.ErrInvalidArgument)
			assert.Contains(t, err.Error(), "zero-length")
			require.NoError(t, s.Synchronize())
			got := make([]byte, 64)
			require.NoError(t, core.CopyToHost(got, buf))
			assert.Equal(t, make([]byte, 64), got, "the kernel wrote outside the empty view")
		})
	}
}

// Item 3: HostSlice.Free waits for a copy still queued into the slice,
// so the freed span, handed to the next slice, is not written afterwards
// (as HostBuffer.Free waits).
func TestHostSliceFreeWaitsForQueuedCopy(t *testing.T) {
	rt := openMock(t, "delay_us=100000") // each stream op waits 100 ms first
	d := dev0(t, rt)
	s, err := d.NewStream()
	require.NoError(t, err)
	defer s.Close()
	const n = 4096
	buf, err := d.Alloc(n)
	require.NoError(t, err)
	defer buf.Free()
	require.NoError(t, core.Memset(buf, 0xaa))
	hs, err := rt.HostHeap().Alloc(n)
	require.NoError(t, err)
	addr := &hs.Bytes()[0]
	require.NoError(t, s.CopyToPinned(hs, buf))
	require.NoError(t, hs.Free())
	hs2, err := rt.HostHeap().Alloc(n)
	require.NoError(t, err)
	defer hs2.Free()
	mem := hs2.Bytes()
	require.Same(t, addr, &mem[0], "the heap hands the freed span out again")
	for i := range mem {
		mem[i] = 0x55
	}
	require.NoError(t, s.Synchronize())
	assert.Equal(t, bytes.Repeat([]byte{0x55}, n), mem, "a copy queued before Free wrote into the next slice")
}

// Item 3: Grid1D of more blocks than a uint32 holds (or of a negative
// size) gives a config that Launch rejects naming the size, instead of a
// truncated grid.
func TestGrid1DOverflow(t *testing.T) {
	rt := openMock(t, "delay_us=0")
	d := dev0(t, rt)
	s, err := d.NewStream()
	require.NoError(t, err)
	defer s.Close()
	mod, err := d.BuiltinModule()
	require.NoError(t, err)
	fill, err := mod.Kernel("fill_f32")
	require.NoError(t, err)
	buf, err := d.Alloc(16)
	require.NoError(t, err)
	defer buf.Free()
	for _, tc := range []struct {
		n, block int
		want     string
	}{
		{1 << 40, 256, "1099511627776"},
		{1<<32*256 + 1, 256, "1099511627777"},
		{-5, 256, "-5"},
		{1024, 1 << 33, "8589934592"},
	} {
		t.Run(fmt.Sprintf("%d/%d", tc.n, tc.block), func(t *testing.T) {
			cfg := core.Grid1D(tc.n, tc.block)
			err := s.Launch(fill, cfg, core.ArgBuffer(buf), core.ArgF32(1), core.ArgU64(4))
			require.ErrorIs(t, err, core.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.want)
			b := s.NewLaunchBatch()
			require.ErrorIs(t, b.Add(fill, cfg, core.ArgBuffer(buf), core.ArgF32(1), core.ArgU64(4)), core.ErrInvalidArgument)
			b.Reset()
		})
	}
	// The largest grid that fits is fine.
	cfg := core.Grid1D(1<<32-1, 1)
	assert.Equal(t, uint32(1<<32-1), cfg.Grid[0])
}

// Item 3: a negative leading dimension is an error (not "packed"), and a
// GEMM whose operand extent overflows 64 bits is out of range before any
// plan is made or cached.
func TestGemmDescChecks(t *testing.T) {
	rt := openMock(t, "delay_us=0")
	d := dev0(t, rt)
	s, err := d.NewStream()
	require.NoError(t, err)
	defer s.Close()
	buf, err := d.Alloc(4 * 4 * 4)
	require.NoError(t, err)
	defer buf.Free()
	ops := core.GemmOperands{A: buf, B: buf, D: buf, Alpha: 1}
	base := core.GemmDesc{AType: core.F32, BType: core.F32, DType: core.F32, M: 2, N: 2, K: 2}
	for _, tc := range []struct {
		name string
		mod  func(*core.GemmDesc)
		want error
		text string
	}{
		{"negative lda", func(g *core.GemmDesc) { g.LDA = -1 }, core.ErrInvalidArgument, "lda"},
		{"negative ldb", func(g *core.GemmDesc) { g.LDB = -2 }, core.ErrInvalidArgument, "ldb"},
		{"negative ldc", func(g *core.GemmDesc) { g.LDC = -3 }, core.ErrInvalidArgument, "ldc"},
		{"negative ldd", func(g *core.GemmDesc) { g.LDD = -4 }, core.ErrInvalidArgument, "ldd"},
		// (2-1)*2^62 + 2*1 + 2 elements of 4 bytes wraps to 16 bytes.
		{"stride overflow", func(g *core.GemmDesc) { g.Batch, g.StrideA = 2, 1<<62 }, core.ErrOutOfRange, "64 bits"},
		{"ld overflow", func(g *core.GemmDesc) { g.LDB = 1 << 62 }, core.ErrOutOfRange, "64 bits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := base
			tc.mod(&g)
			err := s.Gemm(g, ops)
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.text)
			st := rt.OpCacheStats()
			assert.Zero(t, st.Size, "a plan was cached")
			assert.Zero(t, st.Misses, "a plan was made")
		})
	}
	require.NoError(t, s.Gemm(base, ops)) // the base is valid
}
