// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/internal/abi"
	"github.com/metrale/gpurt/internal/testutil"
)

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n+7)
	// eight bytes a draw: under -race every store is instrumented
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n:n]
}

func TestOpenAndDevices(t *testing.T) {
	rt := openMock(t, "devices=2")
	assert.Equal(t, "mock", rt.Backend())
	require.NotNil(t, inspect.Report(rt))
	assert.Len(t, rt.Devices(), 2)
	_, err := rt.Device(2)
	assert.ErrorIs(t, err, core.ErrInvalidArgument)
	info := dev0(t, rt).Info()
	assert.NotZero(t, info.MemoryTotal)
}

func TestRoundTrips(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	sizes := []int{1, 3, 4095, 65535, 65537, 1<<20 + 7, 9<<20 + 3, 40 << 20}
	if testing.Short() {
		// -short (make test's -race pass, where every random byte is
		// instrumented): up to two staging chunks (9 MiB); the 40 MiB
		// round trip runs without -short.
		sizes = sizes[:7]
	}
	for _, n := range sizes {
		for _, off := range []int{0, 1, 255} {
			src := randBytes(n, uint64(n+off))
			buf, err := d.Alloc(n + off + 5)
			require.NoError(t, err)
			v, err := buf.View(off, n)
			require.NoError(t, err)
			require.NoError(t, core.CopyFromHost(v, src))
			got := make([]byte, n)
			require.NoError(t, core.CopyToHost(got, v))
			require.True(t, bytes.Equal(src, got), "size %d offset %d", n, off)
			require.NoError(t, buf.Free())
		}
	}
}

func TestMemsetAndDeviceCopy(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	a := alloc(t, d, 1000)
	b := alloc(t, d, 1000)
	require.NoError(t, core.Memset(a, 0xab))
	v, _ := a.View(100, 200)
	require.NoError(t, core.Memset32(v, 0x01020304))
	require.NoError(t, core.Copy(b, a))
	got := make([]byte, 1000)
	require.NoError(t, core.CopyToHost(got, b))
	assert.Equal(t, byte(0xab), got[99])
	assert.Equal(t, []byte{4, 3, 2, 1}, got[100:104])
	assert.Equal(t, byte(0xab), got[300])
	v2, _ := a.View(1, 4)
	assert.ErrorIs(t, core.Memset16(v2, 1), core.ErrInvalidArgument)
}

func TestMisuse(t *testing.T) {
	rt := openMock(t, "devices=2")
	other := openMock(t, "")
	d := dev0(t, rt)
	d1, err := rt.Device(1)
	require.NoError(t, err)
	s := stream(t, d)
	mod, err := d.BuiltinModule()
	require.NoError(t, err)
	fill, err := mod.Kernel("fill_f32")
	require.NoError(t, err)
	good := alloc(t, d, 64)
	onDev1 := alloc(t, d1, 64)
	foreign := alloc(t, dev0(t, other), 64)
	freed, err := d.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, freed.Free())
	dev1Head, err := onDev1.View(0, 8)
	require.NoError(t, err)
	dev1Tail, err := onDev1.View(8, 8)
	require.NoError(t, err)

	cases := []struct {
		name string
		run  func() error
		want error
	}{
		{"double free", freed.Free, core.ErrFreed},
		{"copy to freed", func() error { return core.CopyFromHost(freed, []byte{1}) }, core.ErrFreed},
		{"copy from freed", func() error { return core.CopyToHost(make([]byte, 1), freed) }, core.ErrFreed},
		{"memset freed", func() error { return core.Memset(freed, 0) }, core.ErrFreed},
		{"launch with freed", func() error {
			return s.Launch(fill, core.Grid1D(1, 1), core.ArgBuffer(freed), core.ArgScalar[float32](1), core.ArgScalar[uint64](1))
		}, core.ErrFreed},
		{"copy too large", func() error { return core.CopyFromHost(good, make([]byte, 65)) }, core.ErrOutOfRange},
		{"copy out too large", func() error { return core.CopyToHost(make([]byte, 65), good) }, core.ErrOutOfRange},
		{"view out of range", func() error { _, err := good.View(60, 5); return err }, core.ErrOutOfRange},
		{"view negative", func() error { _, err := good.View(-1, 5); return err }, core.ErrOutOfRange},
		{"alloc zero", func() error { _, err := d.Alloc(0); return err }, core.ErrInvalidArgument},
		{"alloc host zero", func() error { _, err := rt.AllocHost(0); return err }, core.ErrInvalidArgument},
		{"heap alloc zero", func() error { _, err := rt.AllocHostFromHeap(0); return err }, core.ErrInvalidArgument},
		{"alloc huge", func() error { _, err := d.Alloc(1 << 62); return err }, core.ErrOutOfMemory},
		{"nil slice in", func() error { return core.CopyFromHost(good, nil) }, core.ErrInvalidArgument},
		{"nil slice out", func() error { return core.CopyToHost(nil, good) }, core.ErrInvalidArgument},
		{"nil region", func() error { return core.CopyFromHost(nil, []byte{1}) }, core.ErrInvalidArgument},
		{"zero view", func() error { return core.Memset(core.View{}, 1) }, core.ErrInvalidArgument},
		{"launch too few args", func() error { return s.Launch(fill, core.Grid1D(1, 1), core.ArgBuffer(good)) }, core.ErrInvalidArgument},
		{"launch wrong kind", func() error {
			return s.Launch(fill, core.Grid1D(1, 1), core.ArgBuffer(good), core.ArgScalar[float64](1), core.ArgScalar[uint64](1))
		}, core.ErrInvalidArgument},
		{"launch scalar for buffer", func() error {
			return s.Launch(fill, core.Grid1D(1, 1), core.ArgScalar[uint64](0), core.ArgScalar[float32](1), core.ArgScalar[uint64](1))
		}, core.ErrInvalidArgument},
		{"launch other device", func() error {
			return s.Launch(fill, core.Grid1D(1, 1), core.ArgBuffer(onDev1), core.ArgScalar[float32](1), core.ArgScalar[uint64](1))
		}, core.ErrInvalidArgument},
		{"launch other runtime", func() error {
			return s.Launch(fill, core.Grid1D(1, 1), core.ArgBuffer(foreign), core.ArgScalar[float32](1), core.ArgScalar[uint64](1))
		}, core.ErrInvalidArgument},
		{"peer copy too large", func() error { return core.Copy(dev1Tail, good) }, core.ErrOutOfRange},
		{"device copy across runtimes", func() error { return core.Copy(foreign, good) }, core.ErrInvalidArgument},
		{"stream copy on neither device", func() error { return s.CopyDevice(onDev1, dev1Head) }, core.ErrInvalidArgument},
		{"stream copy other runtime", func() error { return s.CopyDevice(good, foreign) }, core.ErrInvalidArgument},
		{"unknown kernel", func() error { _, err := mod.Kernel("no_such_kernel"); return err }, core.ErrNotFound},
		{"unknown control", func() error { return inspect.Control(rt, "no_such_key", 1) }, core.ErrUnsupported},
		{"nil stream", func() error { var ns *core.Stream; return ns.Synchronize() }, core.ErrInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.run()
			require.Error(t, err)
			assert.ErrorIs(t, err, c.want, "%v", err)
		})
	}
	// zero-length copies are no-ops
	assert.NoError(t, core.CopyFromHost(good, []byte{}))
	assert.NoError(t, core.CopyToHost([]byte{}, good))
}

func TestOOMNamesSizeAndFree(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	total := d.Info().MemoryTotal
	_, err := d.Alloc(int(total) + 1)
	require.ErrorIs(t, err, core.ErrOutOfMemory)
	assert.Contains(t, err.Error(), "free")
}

func TestClosedRuntimeAndStream(t *testing.T) {
	dir := testutil.MockPlugin(t)
	rt, err := core.Open(core.Config{PluginPaths: []string{dir}, Backend: "mock"})
	require.NoError(t, err)
	d := dev0(t, rt)
	buf, err := d.Alloc(16)
	require.NoError(t, err)
	s, err := d.NewStream()
	require.NoError(t, err)
	s2, err := d.NewStream()
	require.NoError(t, err)
	require.NoError(t, s2.Close())
	assert.ErrorIs(t, s2.Synchronize(), core.ErrClosed)
	assert.ErrorIs(t, s2.Close(), core.ErrClosed)
	hb, err := rt.AllocHost(16)
	require.NoError(t, err)
	require.NoError(t, rt.Close())
	for name, f := range map[string]func() error{
		"close again":  rt.Close,
		"free":         buf.Free,
		"copy":         func() error { return core.CopyFromHost(buf, []byte{1}) },
		"stream sync":  s.Synchronize,
		"stream close": s.Close,
		"host free":    hb.Free,
		"alloc":        func() error { _, err := d.Alloc(1); return err },
		"stats":        func() error { _, err := inspect.Stats(rt); return err },
		"module":       func() error { _, err := d.BuiltinModule(); return err },
	} {
		assert.ErrorIs(t, f(), core.ErrClosed, name)
	}
}

func TestHostHeap(t *testing.T) {
	rt := openMock(t, "")
	var slices []*core.HostBuffer
	for i := 1; i <= 100; i++ {
		s, err := rt.AllocHostFromHeap(i * 1000)
		require.NoError(t, err)
		b := s.Bytes()
		require.Len(t, b, i*1000)
		b[0], b[len(b)-1] = byte(i), byte(i)
		slices = append(slices, s)
	}
	for i, s := range slices { // nothing overlaps
		assert.Equal(t, byte(i+1), s.Bytes()[0])
		assert.Equal(t, byte(i+1), s.Bytes()[s.Len()-1])
	}
	st := inspect.HostHeap(rt)
	assert.EqualValues(t, 100, st.Live)
	assert.EqualValues(t, 1, st.Blocks)
	for i := 0; i < len(slices); i += 2 {
		require.NoError(t, slices[i].Free())
	}
	for i := 1; i < len(slices); i += 2 {
		require.NoError(t, slices[i].Free())
	}
	assert.ErrorIs(t, slices[0].Free(), core.ErrFreed)
	st = inspect.HostHeap(rt)
	assert.Zero(t, st.InUse)
	assert.NotZero(t, st.Peak)
	big, err := rt.AllocHostFromHeap(100 << 20) // larger than a block: a block of its own
	require.NoError(t, err)
	require.NoError(t, big.Free())
	assert.EqualValues(t, 2, inspect.HostHeap(rt).Blocks)
	require.NoError(t, rt.Trim()) // gives the heap's empty blocks back
	assert.Zero(t, inspect.HostHeap(rt).Reserved)
	// after coalescing, one block can hold 64 MiB again
	s, err := rt.AllocHostFromHeap(64 << 20)
	require.NoError(t, err)
	require.NoError(t, s.Free())
}

func TestPinnedAsyncCopies(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	s := stream(t, d)
	src, err := rt.AllocHostFromHeap(5000)
	require.NoError(t, err)
	defer src.Free()
	dst, err := rt.AllocHost(5000)
	require.NoError(t, err)
	defer dst.Free()
	copy(src.Bytes(), randBytes(5000, 1))
	buf := alloc(t, d, 6000)
	v, _ := buf.View(3, 5000)
	require.NoError(t, s.CopyFromPinned(v, src))
	require.NoError(t, s.CopyToPinned(dst, v))
	require.NoError(t, s.Synchronize())
	assert.Equal(t, src.Bytes(), dst.Bytes())
}

func TestConcurrentFreeVsUse(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	for round := 0; round < 20; round++ {
		buf, err := d.Alloc(4096)
		require.NoError(t, err)
		var wg sync.WaitGroup
		data := make([]byte, 4096)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					err := core.CopyFromHost(buf, data)
					if err != nil {
						assert.ErrorIs(t, err, core.ErrFreed)
						return
					}
				}
			}()
		}
		errs := make(chan error, 2)
		for g := 0; g < 2; g++ {
			go func() { errs <- buf.Free() }()
		}
		e1, e2 := <-errs, <-errs
		wg.Wait()
		assert.True(t, (e1 == nil) != (e2 == nil), "exactly one Free wins: %v, %v", e1, e2)
		if e1 != nil {
			assert.True(t, errors.Is(e1, core.ErrFreed))
		}
	}
	st, err := inspect.Stats(rt)
	require.NoError(t, err)
	assert.Zero(t, st.LiveBuffers)
}

// Epilogue is a set of steps: the ABI's combined values are their unions.
func TestEpilogueSteps(t *testing.T) {
	for ep, bias := range map[core.Epilogue]bool{
		core.EpilogueNone: false, core.EpilogueRelu: false, core.EpilogueGelu: false, core.EpilogueBias: true,
		core.EpilogueBias | core.EpilogueRelu: true, core.EpilogueBias | core.EpilogueGelu: true,
	} {
		assert.Equal(t, bias, ep.HasBias(), "epilogue %d", ep)
	}
	assert.EqualValues(t, abi.EpilogueBiasRelu, core.EpilogueBias|core.EpilogueRelu)
	assert.EqualValues(t, abi.EpilogueBiasGelu, core.EpilogueBias|core.EpilogueGelu)
}
