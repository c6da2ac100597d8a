// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/elems"
)

// encode, decode and roundTo are the conversions between float64 values
// and a buffer's bytes of a core.DType (package internal/elems).
var (
	encode  = elems.Encode
	decode  = elems.Decode
	roundTo = elems.Round
)

// randomValues returns n values of t, uniform in [-r, r], none of them
// zero, already rounded to t (so the reference sees exactly what the
// device does).
func randomValues(rng *rand.Rand, t core.DType, n int, r float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		for {
			x := roundTo(t, (rng.Float64()*2-1)*r)
			if x != 0 {
				v[i] = x
				break
			}
		}
	}
	return v
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(rng.Uint32() | 1)
	}
	return b
}
