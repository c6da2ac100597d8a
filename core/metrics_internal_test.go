// SPDX-License-Identifier: Apache-2.0

package core

import (
	"testing"
	"time"

	"github.com/metrale/gpurt/core/diag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// BenchmarkMetricsHook is the hooks' own cost per op (begin and end, no
// plugin call): one atomic load and add when timing is off, two clock
// reads and four atomic adds when on.
func BenchmarkMetricsHook(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			var m metrics
			m.timing.Store(on)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				_ = m.end(opGemm, m.begin(), nil)
			}
		})
	}
}

// The bucket of a latency: under 1us is bucket 0, [2^(i-1), 2^i) us is
// bucket i, beyond the last bound the last bucket (exact: no clock).
func TestLatencyBucket(t *testing.T) {
	for _, c := range []struct {
		d      time.Duration
		bucket int
	}{
		{-5, 0}, {0, 0}, {999 * time.Nanosecond, 0}, {time.Microsecond, 1}, {1999 * time.Nanosecond, 1},
		{2 * time.Microsecond, 2}, {3 * time.Microsecond, 2}, {time.Millisecond, 10}, {8 * time.Second, 23},
		{time.Hour, numLatencyBuckets - 1},
	} {
		assert.Equal(t, c.bucket, latencyBucket(int64(c.d)), "%v", c.d)
	}
}

// end files a timed op in the bucket of at least its latency (the clock
// moves on between t0 and end, so only a lower bound can be asserted),
// and counts it once.
func TestEndFilesLatency(t *testing.T) {
	for _, d := range []time.Duration{0, 3 * time.Microsecond, time.Millisecond, time.Hour} {
		var m metrics
		t0 := int64(time.Since(epoch)) + 1 - int64(d)
		assert.NoError(t, m.end(opAttentionRun, t0, nil))
		got := -1
		for i := range m.ops[opAttentionRun].buckets {
			if m.ops[opAttentionRun].buckets[i].Load() == 1 {
				got = i
			}
		}
		assert.GreaterOrEqual(t, got, latencyBucket(int64(d)), "%v", d)
		assert.Equal(t, uint64(1), m.ops[opAttentionRun].n.Load())
		assert.Equal(t, uint64(1), m.ops[opAttentionRun].timed.Load())
	}
}

// TestLatencyBoundsMatchBuckets: diag.LatencyBounds names the bounds of
// exactly the buckets core fills (all but the last, unbounded one).
func TestLatencyBoundsMatchBuckets(t *testing.T) {
	b := diag.LatencyBounds()
	require.Len(t, b, numLatencyBuckets-1)
	for i, d := range b {
		assert.Equal(t, i, latencyBucket(int64(d)-1), "a call just under bound %d (%v) is in bucket %d", i, d, i)
		assert.Equal(t, i+1, latencyBucket(int64(d)), "a call at bound %d (%v) is in bucket %d", i, d, i+1)
	}
}
