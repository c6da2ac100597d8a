// SPDX-License-Identifier: Apache-2.0

package le

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLayoutAndRoundTrip(t *testing.T) {
	assert.Equal(t, []byte{1, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff}, Int32s([]int32{1, -2}))
	assert.Equal(t, []int32{1, -2, math.MaxInt32}, ToInt32s(Int32s([]int32{1, -2, math.MaxInt32})))
	assert.Equal(t, []byte{0x34, 0x12, 0xff, 0xff}, Uint16s([]uint16{0x1234, 0xffff}))
	assert.Equal(t, []byte{5, 0, 0, 0, 0, 1, 0, 0}, Uint32sOf([]int{5, 256}))
	assert.Equal(t, []byte{0, 0, 0x80, 0x3f}, Float32s([]float32{1}))
	f := []float32{0, -1.5, float32(math.Inf(1)), math.SmallestNonzeroFloat32}
	assert.Equal(t, f, ToFloat32s(Float32s(f)))
	assert.True(t, math.IsNaN(float64(ToFloat32s(Float32s([]float32{float32(math.NaN())}))[0])))
	// A partial last element is ignored; empty in, empty out.
	assert.Equal(t, []int32{7}, ToInt32s([]byte{7, 0, 0, 0, 9, 9}))
	assert.Equal(t, []float32{}, ToFloat32s(nil))
	assert.Empty(t, Int32s(nil))
}
