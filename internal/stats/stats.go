// SPDX-License-Identifier: Apache-2.0

// Package stats holds the order statistics the benchmarks report: the
// median and percentiles of a sample, by linear interpolation between the
// two nearest ranks (the definition of NumPy's default and of R's type 7),
// so that the median of an even count is the mean of the middle two.
package stats

import (
	"math"
	"slices"
)

// Median is Percentile(xs, 50).
func Median(xs []float64) float64 { return Percentile(xs, 50) }

// Percentile returns the p-th percentile (0 <= p <= 100) of xs without
// changing xs; 0 for an empty sample; NaN when p is out of range or NaN.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	ys := slices.Clone(xs)
	slices.Sort(ys)
	return Sorted(ys, p)
}

// Sorted is Percentile of an already sorted sample (no copy).
func Sorted(ys []float64, p float64) float64 {
	if len(ys) == 0 {
		return 0
	}
	if math.IsNaN(p) || p < 0 || p > 100 {
		return math.NaN()
	}
	r := p / 100 * float64(len(ys)-1)
	lo := int(math.Floor(r))
	if lo >= len(ys)-1 {
		return ys[len(ys)-1]
	}
	return ys[lo] + (r-float64(lo))*(ys[lo+1]-ys[lo])
}
