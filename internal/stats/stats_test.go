// SPDX-License-Identifier: Apache-2.0

package stats_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/metrale/gpurt/internal/stats"
)

func TestPercentile(t *testing.T) {
	for _, c := range []struct {
		name string
		xs   []float64
		p    float64
		want float64
	}{
		{"empty", nil, 50, 0},
		{"one", []float64{7}, 90, 7},
		{"odd median", []float64{3, 1, 2}, 50, 2},
		{"even median", []float64{4, 1, 3, 2}, 50, 2.5},
		{"min", []float64{4, 1, 3, 2}, 0, 1},
		{"max", []float64{4, 1, 3, 2}, 100, 4},
		{"p90 interpolated", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9.1},
		{"p25", []float64{10, 20, 30, 40, 50}, 25, 20},
		{"out of range", []float64{1, 2}, 101, math.NaN()},
		{"negative", []float64{1, 2}, -1, math.NaN()},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := stats.Percentile(c.xs, c.p)
			if math.IsNaN(c.want) {
				assert.True(t, math.IsNaN(got), "%v", got)
				return
			}
			assert.InDelta(t, c.want, got, 1e-12)
		})
	}
}

func TestMedianLeavesInputAlone(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	assert.Equal(t, 3.0, stats.Median(xs))
	assert.Equal(t, []float64{5, 1, 4, 2, 3}, xs)
}
