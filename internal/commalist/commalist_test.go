// SPDX-License-Identifier: Apache-2.0

package commalist

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	var seen []string
	atoi := func(f string) (int, error) {
		seen = append(seen, f)
		return strconv.Atoi(strings.TrimSpace(f))
	}
	got, err := Parse("1, 16,, ,3", atoi)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 16, 3}, got)
	assert.Equal(t, []string{"1", " 16", "3"}, seen, "items as written, blank ones skipped")

	got, err = Parse(" , ", atoi)
	require.NoError(t, err)
	assert.Empty(t, got)

	bad := errors.New("bad")
	n := 0
	_, err = Parse("1,2,3", func(string) (int, error) {
		if n++; n == 2 {
			return 0, bad
		}
		return n, nil
	})
	assert.ErrorIs(t, err, bad)
	assert.Equal(t, 2, n, "stops at the first error")
}
