// SPDX-License-Identifier: Apache-2.0

// Package rank is the order in which gpurt.h's argmax_T and sample_T rank
// a row's values, for the Go references of the sampling package and the
// conformance checks.
package rank

import "math"

// Key orders value v at index c of a row: a larger key ranks first.
// Larger values (rounded to float32) come first, -0 ranks as +0, NaN
// below everything, and equal values by the lower index.
func Key(v float64, c int) uint64 {
	var u uint32
	if !math.IsNaN(v) {
		f := float32(v)
		if f == 0 {
			f = 0
		}
		b := math.Float32bits(f)
		if b&0x80000000 != 0 {
			u = ^b
		} else {
			u = b | 0x80000000
		}
	}
	return uint64(u)<<32 | uint64(0xffffffff-uint32(c))
}
