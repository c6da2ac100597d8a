// SPDX-License-Identifier: Apache-2.0

// Package mockrt opens a runtime on the mock plugin for the tests of core
// and its family packages (core/attention, core/matmul, core/collective,
// sampling), and makes what they set up on it: streams, built-in kernels,
// buffers, a small paged KV cache, and the bytes to put in them. One
// place for what each of them wrote out; everything made is released when
// the test ends, in the reverse order of its making.
package mockrt

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/bench"
	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/core/collective"
	"github.com/metrale/gpurt/floatbits"
	"github.com/metrale/gpurt/internal/le"
	"github.com/metrale/gpurt/internal/testutil"
)

// Open opens a runtime on the mock plugin with the given options and
// closes it when the test ends.
func Open(t testing.TB, options string) *core.Runtime {
	t.Helper()
	return OpenConfig(t, core.Config{PluginOptions: options})
}

// OpenConfig opens a runtime of cfg on the mock plugin (its PluginPaths
// and Backend are set to the mock's) and closes it when the test ends.
func OpenConfig(t testing.TB, cfg core.Config) *core.Runtime {
	t.Helper()
	cfg.PluginPaths, cfg.Backend = []string{testutil.MockPlugin(t)}, "mock"
	rt, err := core.Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	return rt
}

// Example is the frame of a runnable example (which has no testing.T,
// and whose TestMain is testutil.RunWithMockPlugin): it opens a runtime of
// cfg with Backend "mock" (the plugin found on GPURT_PLUGIN_PATH), its
// device 0 and a new stream on it, as a program would, and calls fn with
// them. The error of the opening, or the one fn returns, is printed, as
// the example's output; the stream and the runtime are closed after.
func Example(cfg core.Config, fn func(rt *core.Runtime, dev *core.Device, s *core.Stream) error) {
	cfg.Backend = "mock"
	rt, err := core.Open(cfg)
	if err == nil {
		defer rt.Close()
		var dev *core.Device
		if dev, err = rt.Device(0); err == nil {
			var s *core.Stream
			if s, err = dev.NewStream(); err == nil {
				defer s.Close()
				err = fn(rt, dev, s)
			}
		}
	}
	if err != nil {
		fmt.Println(err)
	}
}

// Timer is a GPUTimer of the benchmarks on the mock plugin, closed when
// the test ends.
func Timer(t testing.TB) *bench.GPUTimer {
	t.Helper()
	tm, err := bench.OpenGPUTimer([]string{testutil.MockPlugin(t)}, "mock")
	require.NoError(t, err)
	t.Cleanup(tm.Close)
	return tm
}

// Device0 is rt's device 0.
func Device0(t testing.TB, rt *core.Runtime) *core.Device {
	t.Helper()
	d, err := rt.Device(0)
	require.NoError(t, err)
	return d
}

// Stream is a new stream on d.
func Stream(t testing.TB, d *core.Device) *core.Stream {
	t.Helper()
	s, err := d.NewStream()
	require.NoError(t, err, "NewStream")
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Builtin is the kernel name of d's built-in module.
func Builtin(t testing.TB, d *core.Device, name string) *core.Kernel {
	t.Helper()
	mod, err := d.BuiltinModule()
	require.NoError(t, err, "BuiltinModule")
	k, err := mod.Kernel(name)
	require.NoError(t, err, "built-in kernel %s", name)
	return k
}

// Alloc is a new buffer of n bytes on d.
func Alloc(t testing.TB, d *core.Device, n int) *core.Buffer {
	t.Helper()
	b, err := d.Alloc(n)
	require.NoError(t, err, "Alloc(%d)", n)
	t.Cleanup(func() { _ = b.Free() })
	return b
}

// Upload is a new buffer on d holding data, 64 bytes longer.
func Upload(t testing.TB, d *core.Device, data []byte) *core.Buffer {
	t.Helper()
	b := Alloc(t, d, len(data)+64)
	require.NoError(t, core.CopyFromHost(b, data), "upload %d bytes", len(data))
	return b
}

// AllReduceOps are the ops of one in-place f32 all-reduce of count
// elements over devs (rank k on devs[k]): each rank on a new stream and a
// new zeroed buffer of its own.
func AllReduceOps(t testing.TB, devs []*core.Device, count int) []collective.Op {
	t.Helper()
	ops := make([]collective.Op, len(devs))
	for k, d := range devs {
		b := Alloc(t, d, 4*count)
		require.NoError(t, core.Memset(b, 0))
		ops[k] = collective.Op{Kind: collective.AllReduce, DType: core.F32, Rank: k, Count: count, Stream: Stream(t, d), Send: b, Recv: b}
	}
	return ops
}

// Halves is v as f16 bytes when dt is core.F16, else as bf16 bytes.
func Halves(dt core.DType, v []float32) []byte {
	out := make([]byte, 2*len(v))
	for i, f := range v {
		h := floatbits.BF16FromFloat32(f)
		if dt == core.F16 {
			h = floatbits.F16FromFloat32(f)
		}
		binary.LittleEndian.PutUint16(out[2*i:], h)
	}
	return out
}

// I32LE is v as little-endian int32 bytes.
func I32LE(v ...int32) []byte { return le.Int32s(v) }

// SmallKVDesc is the paged KV cache of the attention tests: f16, NHD,
// four pages of four tokens, two KV heads of 64.
var SmallKVDesc = attention.KVCacheDesc{DType: core.F16, Layout: attention.KVLayoutNHD, PageSize: 4, NumKVHeads: 2, HeadDim: 64, NumPages: 4}

// SmallKVCache is a cache of SmallKVDesc on d, its K bytes all 0x11 and
// its V bytes all 0x22; a 256-byte buffer for page tables; and the page
// table of two requests in its first 40 bytes: request 0 owns pages 3, 0
// (5 tokens), request 1 page 2 (4 tokens).
func SmallKVCache(t testing.TB, d *core.Device) (*attention.KVCache, *core.Buffer, attention.PageTable) {
	t.Helper()
	cache, err := attention.AllocKVCache(d, SmallKVDesc)
	require.NoError(t, err, "AllocKVCache")
	t.Cleanup(func() { _ = cache.Free() })
	require.NoError(t, core.Memset(cache.K(), 0x11))
	require.NoError(t, core.Memset(cache.V(), 0x22))
	tables := Alloc(t, d, 256)
	part := func(off, n int, data []byte) core.View {
		v, err := tables.View(off, n)
		require.NoError(t, err)
		require.NoError(t, core.CopyFromHost(v, data))
		return v
	}
	pt := attention.PageTable{Indptr: part(0, 12, I32LE(0, 2, 3)), Indices: part(16, 12, I32LE(3, 0, 2)), LastPageLen: part(32, 8, I32LE(1, 4))}
	return cache, tables, pt
}
