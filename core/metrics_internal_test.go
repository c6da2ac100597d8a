// SPDX-License-Identifier: Apache-2.0

package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
// bucket i, beyond the last bound the last bucket.
func TestLatencyBucket(t *testing.T) {
	for _, c := range []struct {
		d      time.Duration
		bucket int
	}{
		{0, 0}, {999 * time.Nanosecond, 0}, {time.Microsecond, 1}, {3 * time.Microsecond, 2},
		{time.Millisecond, 10}, {8 * time.Second, 23}, {time.Hour, numLatencyBuckets - 1},
	} {
		var m metrics
		t0 := int64(time.Since(epoch)) + 1 - int64(c.d)
		assert.NoError(t, m.end(opAttentionRun, t0, nil))
		n := 0
		for i := range m.ops[opAttentionRun].buckets {
			if m.ops[opAttentionRun].buckets[i].Load() == 1 {
				n = i
			}
		}
		// the clock moved on between t0 and end: at most one bucket up
		assert.Contains(t, []int{c.bucket, c.bucket + 1}, n, "%v", c.d)
		assert.Equal(t, uint64(1), m.ops[opAttentionRun].n.Load())
	}
}
