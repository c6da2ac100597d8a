// SPDX-License-Identifier: Apache-2.0

package bytesize_test

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/bytesize"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		err  string
	}{
		{"0", 0, ""},
		{"65536", 65536, ""},
		{"64K", 64 << 10, ""},
		{"64k", 64 << 10, ""},
		{"64KB", 64 << 10, ""},
		{"64 KiB", 64 << 10, ""},
		{"16M", 16 << 20, ""},
		{"16mib", 16 << 20, ""},
		{"1G", 1 << 30, ""},
		{"2TiB", 2 << 40, ""},
		{"100B", 100, ""},
		{" 8K ", 8 << 10, ""},
		{"", 0, "want a number of bytes"},
		{"K", 0, "want a number of bytes"},
		{"1.5G", 3 << 29, ""},
		{"0.5K", 512, ""},
		{"1.5", 0, "want a number of bytes"},
		{"1e3K", 0, "want a number of bytes"},
		{".5K", 0, "want a number of bytes"},
		{"-1K", 0, "want a number of bytes"},
		{"+1K", 0, "want a number of bytes"},
		{"lots", 0, `byte count "lots"`},
		{"8Q", 0, "want a number of bytes"},
		{"9999999999T", 0, "too large"},
		{"99999999999999999999", 0, "want a number of bytes"},
	} {
		t.Run(c.in, func(t *testing.T) {
			got, err := bytesize.Parse(c.in)
			if c.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

func TestParseListAndRange(t *testing.T) {
	got, err := bytesize.ParseList("64K, 1M,,16M", 1, 16<<30)
	require.NoError(t, err)
	assert.Equal(t, []int64{64 << 10, 1 << 20, 16 << 20}, got)
	for _, c := range []struct{ in, err string }{
		{"", "no byte counts"},
		{",", "no byte counts"},
		{"0", `byte count "0": want 1B to 16GiB`},
		{"32G", `byte count "32G": want 1B to 16GiB`},
		{"1M,x", `byte count "x"`},
	} {
		t.Run(c.in, func(t *testing.T) {
			_, err := bytesize.ParseList(c.in, 1, 16<<30)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.err)
		})
	}
}

// ParseEach gives each non-empty item to its parse, in order, and returns
// parse's first error as it is.
func TestParseEach(t *testing.T) {
	var seen []string
	half := func(f string) (int64, error) {
		seen = append(seen, f)
		n, err := bytesize.Parse(f)
		return n / 2, err
	}
	got, err := bytesize.ParseEach("2K,, 8K", half)
	require.NoError(t, err)
	assert.Equal(t, []int64{1 << 10, 4 << 10}, got)
	assert.Equal(t, []string{"2K", " 8K"}, seen)
	bad := errors.New("refused")
	_, err = bytesize.ParseEach("1K,2K", func(string) (int64, error) { return 0, bad })
	assert.Same(t, bad, err)
	_, err = bytesize.ParseEach(" ,", half)
	assert.ErrorContains(t, err, "no byte counts")
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		in   int64
		want string
	}{
		{0, "0B"}, {1000, "1000B"}, {1024, "1KiB"}, {1536, "1.5KiB"}, {64 << 10, "64KiB"}, {16 << 20, "16MiB"},
		{1 << 30, "1GiB"}, {3 << 40, "3TiB"}, {85_520_809_984, "79.6GiB"}, {-2048, "-2KiB"}, {math.MinInt64, "-8EiB"},
	} {
		t.Run(c.want, func(t *testing.T) {
			assert.Equal(t, c.want, bytesize.Format(c.in))
		})
	}
	assert.Equal(t, "79.6GiB", bytesize.FormatUint(85_520_809_984))
	assert.Equal(t, "16777216.0TiB", bytesize.FormatUint(math.MaxUint64))
}

// Format's exact output reads back as the same count.
func TestRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 1, 1023, 1024, 1536, 4096, 64 << 10, 3 << 20, 3 << 29, 5 << 30, 7 << 40} {
		got, err := bytesize.Parse(bytesize.Format(n))
		require.NoError(t, err, "%d", n)
		assert.Equal(t, n, got)
	}
}
