// SPDX-License-Identifier: Apache-2.0

package rank

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestKeyOrder(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	// Each pair: the first ranks above the second.
	for _, c := range []struct {
		v1     float64
		i1     int
		v2     float64
		i2     int
		reason string
	}{
		{2, 5, 1, 0, "larger value"},
		{-1, 5, -2, 0, "larger negative value"},
		{0, 0, -1, 0, "zero above negatives"},
		{inf, 9, 1e38, 0, "infinity above the largest finite"},
		{-inf, 0, nan, 0, "NaN below everything"},
		{1, 2, 1, 3, "equal values: the lower index"},
		{0, 2, math.Copysign(0, -1), 3, "-0 ranks as +0: the lower index"},
		{math.Copysign(0, -1), 2, 0, 3, "-0 ranks as +0: the lower index, either sign first"},
		{1, 2, 1 + 1e-12, 3, "equal in float32: the lower index"},
	} {
		assert.Greater(t, Key(c.v1, c.i1), Key(c.v2, c.i2), c.reason)
	}
	assert.Equal(t, Key(nan, 4), Key(-nan, 4), "every NaN alike")
}
