// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/inspect"
)

// TestMetricsCountersAndHistograms: copies count their bytes by
// direction, buffers their bytes by device, and the latency histograms
// fill only while op timing is on.
func TestMetricsCountersAndHistograms(t *testing.T) {
	e := newBenchEnv(t)
	m0 := inspect.Metrics(e.rt)
	assert.Equal(t, uint64(64<<10), m0.BufferBytes[0], "the env's one buffer")
	assert.Empty(t, m0.Latency, "timing is off at Open")
	big := randomBytes(256<<10, 3)
	dbuf, err := e.dev.Alloc(len(big))
	require.NoError(t, err)
	assert.Equal(t, uint64(64<<10+256<<10), inspect.Metrics(e.rt).BufferBytes[0])

	// untimed: counters only
	require.NoError(t, core.CopyFromHost(e.view, e.small))
	require.NoError(t, e.s.Synchronize())
	m1 := inspect.Metrics(e.rt)
	assert.Equal(t, uint64(512), m1.BytesCopied["host_to_device"]-m0.BytesCopied["host_to_device"])
	assert.Empty(t, m1.Latency)

	inspect.SetOpTiming(e.rt, true)
	require.NoError(t, core.CopyFromHost(dbuf, big)) // staged
	require.NoError(t, core.CopyToHost(big[:1000], dbuf))
	head, err := dbuf.View(0, 4096)
	require.NoError(t, err)
	require.NoError(t, core.Copy(e.view, head))
	require.NoError(t, e.s.Gemm(e.gemm, e.gemmOps))
	require.NoError(t, e.s.Synchronize())
	require.NoError(t, e.s.Synchronize())
	require.NoError(t, e.dev.Synchronize())
	assert.Error(t, core.Copy(e.view, dbuf), "256 KiB into 4 KiB: a failed copy counts nothing")
	m2 := inspect.Metrics(e.rt)
	assert.Equal(t, uint64(256<<10), m2.BytesCopied["host_to_device"]-m1.BytesCopied["host_to_device"])
	assert.Equal(t, uint64(1000), m2.BytesCopied["device_to_host"]-m1.BytesCopied["device_to_host"])
	assert.Equal(t, uint64(4096), m2.BytesCopied["device_to_device"]-m1.BytesCopied["device_to_device"])
	assert.Equal(t, m1.GEMMs+1, m2.GEMMs)
	// device_synchronize: the test's one, and whatever core's own copies
	// needed (at least one).
	want := map[string]uint64{"copy_from_host": 1, "copy_to_host": 1, "copy_device": 1, "gemm": 1,
		"stream_synchronize": 2, "device_synchronize": max(1, m2.Latency["device_synchronize"].Count)}
	got := map[string]uint64{}
	for op, h := range m2.Latency {
		got[op] = h.Count
		require.Len(t, h.Buckets, len(diag.LatencyBounds()), op)
		assert.Positive(t, h.Sum, op)
		for i := 1; i < len(h.Buckets); i++ {
			assert.LessOrEqual(t, h.Buckets[i-1], h.Buckets[i], "%s: cumulative", op)
		}
		assert.LessOrEqual(t, h.Buckets[len(h.Buckets)-1], h.Count, op)
	}
	assert.Equal(t, want, got)

	inspect.SetOpTiming(e.rt, false)
	require.NoError(t, e.s.Synchronize())
	assert.Equal(t, uint64(2), inspect.Metrics(e.rt).Latency["stream_synchronize"].Count, "off again: not timed")

	require.NoError(t, dbuf.Free())
	assert.Equal(t, uint64(64<<10), inspect.Metrics(e.rt).BufferBytes[0], "Free takes its bytes off")
	require.Error(t, dbuf.Free())
	assert.Equal(t, uint64(64<<10), inspect.Metrics(e.rt).BufferBytes[0], "a failed Free takes nothing off")
}

func TestLatencyBounds(t *testing.T) {
	b := diag.LatencyBounds()
	require.Len(t, b, 24)
	assert.Equal(t, time.Microsecond, b[0])
	assert.Equal(t, 8388608*time.Microsecond, b[23])
	b[0] = 0
	assert.Equal(t, time.Microsecond, diag.LatencyBounds()[0], "a new slice each time")
}

// TestHotPathsAllocateNothingTimed: with op timing on, the hot paths
// still allocate nothing (TestHotPathsAllocateNothing covers timing off).
func TestHotPathsAllocateNothingTimed(t *testing.T) {
	e := newBenchEnv(t)
	inspect.SetOpTiming(e.rt, true)
	for _, c := range []struct {
		name string
		fn   func() error
	}{
		{"small copy up", func() error { return core.CopyFromHost(e.view, e.small) }},
		{"small copy down", func() error { return core.CopyToHost(e.small, e.view) }},
		{"gemm warm enqueue", func() error { return e.s.Gemm(e.gemm, e.gemmOps) }},
		{"stream synchronize", e.s.Synchronize},
	} {
		t.Run(c.name, func(t *testing.T) { e.zeroAllocs(t, c.fn) })
	}
	assert.NotEmpty(t, inspect.Metrics(e.rt).Latency)
}

// BenchmarkOpTiming: the cost of the latency histograms on a hot path
// (Stream.Synchronize of an idle stream, a small synchronous copy), off
// and on.
func BenchmarkOpTiming(b *testing.B) {
	e := newBenchEnv(b)
	for _, on := range []bool{false, true} {
		name := map[bool]string{false: "off", true: "on"}[on]
		inspect.SetOpTiming(e.rt, on)
		b.Run("synchronize/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				_ = e.s.Synchronize()
			}
		})
		b.Run("copy_512B/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				_ = core.CopyFromHost(e.view, e.small)
			}
		})
	}
}
