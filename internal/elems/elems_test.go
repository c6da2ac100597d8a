// SPDX-License-Identifier: Apache-2.0

package elems

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/metrale/gpurt/core"
)

func TestRoundTrip(t *testing.T) {
	v := []float64{0, 1, -2.5, 0.1, 448}
	for _, dt := range []core.DType{core.F32, core.F16, core.BF16, core.FP8E4M3, core.FP8E5M2} {
		b := Encode(dt, v)
		assert.Len(t, b, len(v)*dt.Size(), dt.String())
		got := Decode(dt, b)
		for i, x := range v {
			assert.Equal(t, Round(dt, x), got[i], "%s %g", dt, x)
		}
	}
	assert.Equal(t, []byte{0, 0, 0x80, 0x3f}, Encode(core.F32, []float64{1}))
	assert.Equal(t, []byte{0x80, 0x3f}, Encode(core.BF16, []float64{1}))
	assert.Equal(t, float64(float32(0.1)), Round(core.F32, 0.1))
	assert.Panics(t, func() { Encode(core.I32, []float64{1}) })
	assert.Panics(t, func() { Decode(core.I32, []byte{0, 0, 0, 0}) })
	assert.Panics(t, func() { Round(core.I8, 1) })
}
