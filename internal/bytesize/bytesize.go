// SPDX-License-Identifier: Apache-2.0

// Package bytesize reads and writes byte counts, the one syntax every
// gpurt command and setting uses: a number with an optional unit, K, M, G
// or T (also KB/KiB, MB/MiB, GB/GiB, TB/TiB, case-insensitive, a space
// allowed before the unit), all powers of 1024, or B for bytes; a decimal
// needs a unit ("1.5G") and is rounded to whole bytes. Format writes the
// same syntax back in the largest unit not above the count ("64KiB",
// "1GiB"), with one decimal where the count is not a whole number of that
// unit ("79.6GiB").
package bytesize

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/metrale/gpurt/internal/commalist"
)

// The units, powers of 1024.
const (
	B   int64 = 1
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
	GiB int64 = 1 << 30
	TiB int64 = 1 << 40
)

// ErrSyntax is wrapped by every Parse error.
var ErrSyntax = errors.New("want a number of bytes with an optional unit K, M, G or T (powers of 1024), e.g. 65536, 64K, 16MiB, 1.5G")

var units = []struct {
	suffix string
	mul    int64
}{
	{"KIB", KiB}, {"MIB", MiB}, {"GIB", GiB}, {"TIB", TiB},
	{"KB", KiB}, {"MB", MiB}, {"GB", GiB}, {"TB", TiB},
	{"K", KiB}, {"M", MiB}, {"G", GiB}, {"T", TiB}, {"B", B},
}

// Parse reads one byte count. Negative counts, fractions and counts
// beyond int64 are errors naming s.
func Parse(s string) (int64, error) {
	t := upperASCII(strings.TrimSpace(s))
	mul := B
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mul = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mul
			break
		}
	}
	// digits and a decimal point only (strconv also reads 0x1.8p1, 1e3, 1_0)
	if t == "" || t[0] < '0' || t[0] > '9' || strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' }) >= 0 {
		return 0, fmt.Errorf("byte count %q: %w", s, ErrSyntax)
	}
	if strings.Contains(t, ".") {
		// A decimal with a unit ("1.5G"), rounded to whole bytes.
		f, err := strconv.ParseFloat(t, 64)
		if (err != nil && !errors.Is(err, strconv.ErrRange)) || mul == B {
			return 0, fmt.Errorf("byte count %q: %w", s, ErrSyntax)
		}
		v := math.Round(f * float64(mul))
		if v >= math.MaxInt64 {
			return 0, fmt.Errorf("byte count %q: too large: %w", s, ErrSyntax)
		}
		return int64(v), nil
	}
	n, err := strconv.ParseInt(t, 10, 64) // digits only: an error is a count beyond int64
	if err != nil || n > math.MaxInt64/mul {
		return 0, fmt.Errorf("byte count %q: too large: %w", s, ErrSyntax)
	}
	return n * mul, nil
}

// upperASCII is s with a-z in upper case (strings.ToUpper would also turn
// the non-ASCII letters ı and ſ into I and S).
func upperASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// ParseRange is Parse with the count required to lie in lo .. hi; the
// error names s and the range.
func ParseRange(s string, lo, hi int64) (int64, error) {
	n, err := Parse(s)
	if err != nil {
		return 0, err
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("byte count %q: want %s to %s", s, Format(lo), Format(hi))
	}
	return n, nil
}

// ParseList reads a comma-separated list of byte counts (empty items are
// skipped), each in lo .. hi; an empty list is an error.
func ParseList(s string, lo, hi int64) ([]int64, error) {
	return ParseEach(s, func(f string) (int64, error) { return ParseRange(f, lo, hi) })
}

// ParseEach reads a comma-separated list of byte counts (empty items are
// skipped), each item with parse, whose error is the list's; an empty
// list is an error.
func ParseEach(s string, parse func(string) (int64, error)) ([]int64, error) {
	out, err := commalist.Parse(s, parse)
	if err == nil && len(out) == 0 {
		return nil, fmt.Errorf("no byte counts in %q", s)
	}
	return out, err
}

// Format writes n as Parse reads it, in the largest unit not above n:
// "1000B", "64KiB", "16MiB", "1GiB", and with one decimal (rounded) where n
// is not a whole number of that unit ("1.5KiB", "79.6GiB"). Negative
// counts keep their sign.
func Format(n int64) string {
	if n < 0 {
		if n == math.MinInt64 {
			return "-8EiB"
		}
		return "-" + Format(-n)
	}
	names := []string{"TiB", "GiB", "MiB", "KiB"}
	for i, mul := range []int64{TiB, GiB, MiB, KiB} {
		switch {
		case n < mul:
			continue
		case n%mul == 0:
			return strconv.FormatInt(n/mul, 10) + names[i]
		default:
			v := float64(n) / float64(mul)
			if math.Round(v*10)/10*float64(mul) >= math.MaxInt64 {
				// rounded up past int64 (n within 0.05TiB of 8EiB, which
				// Parse refuses): truncated instead, in integers
				return strconv.FormatInt(n/mul, 10) + "." + strconv.FormatInt(n%mul*10/mul, 10) + names[i]
			}
			return strconv.FormatFloat(v, 'f', 1, 64) + names[i]
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// FormatUint is Format for unsigned counts (device memory sizes).
func FormatUint(n uint64) string {
	if n > math.MaxInt64 {
		return strconv.FormatFloat(float64(n)/float64(TiB), 'f', 1, 64) + "TiB"
	}
	return Format(int64(n))
}
