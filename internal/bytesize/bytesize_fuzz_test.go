// SPDX-License-Identifier: Apache-2.0

package bytesize_test

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strings"
	"testing"

	"github.com/metrale/gpurt/internal/bytesize"
)

// grammar is the syntax the package documents, written independently of
// Parse: digits, an optional decimal part, white space, an optional unit
// (K, M, G, T with an optional B or iB, or B; ASCII, any case), white
// space around it all (unicode.IsSpace's: TrimSpace's).
var grammar = regexp.MustCompile(`^[\s\v\x{85}\p{Z}]*([0-9]+)(\.[0-9]*)?[\s\v\x{85}\p{Z}]*(?i:([kmgt])(i?b)?|(b))?[\s\v\x{85}\p{Z}]*$`)

var unitShift = map[string]uint{"": 0, "k": 10, "m": 20, "g": 30, "t": 40}

// exactCount is the count grammar's match m says, exactly.
func exactCount(m []string) *big.Rat {
	num := m[1] + strings.TrimSuffix(m[2], ".") // "1." is 1
	exact, ok := new(big.Rat).SetString(num)
	if !ok {
		panic("bad number " + num)
	}
	return exact.Mul(exact, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), unitShift[strings.ToLower(m[3])])))
}

// FuzzParse: Parse never panics, and accepts exactly the documented
// syntax (a decimal needs a unit other than B): what it accepts is the
// exact count (a decimal rounded to a byte), what it refuses is an error
// wrapping ErrSyntax and quoting s, "too large" for a count of the
// syntax beyond int64; Format writes back what Parse reads (to its one
// decimal).
func FuzzParse(f *testing.F) {
	for _, s := range []string{"0", "65536", "64K", "64k", "64KB", "64 KiB", "16mib", "1G", "2TiB", "100B", " 8K ", "1.5G",
		"0.5K", "1.", "1.5", "1.5B", "1e3K", ".5K", "-1K", "+1K", "lots", "8Q", "", "K", "KiB", "1 2K", "1..5K", "1.5.K",
		"9999999999T", "99999999999999999999", "9223372036854775807", "9223372036854775808", "8388607T", "8388608T",
		"8388607.99T", "0x10", "0x1p4K", "1_000", "1,5K", "\u00a08\u00a0K\u3000", "1\tkib", "64KIBB", "64IB", "64 i b",
		// read as 3GiB, 1KiB and 1MiB before Parse kept to digits and ASCII
		"0x1.8p1G", "1kıb", "1 mıB", "1_0.5K", "1e400.5K", "1" + strings.Repeat("0", 400) + ".5K",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := bytesize.Parse(s)
		m := grammar.FindStringSubmatch(s)
		valid := m != nil && (m[2] == "" || m[3] != "") // a decimal needs K, M, G or T
		if err != nil {
			msg := err.Error()
			if !errors.Is(err, bytesize.ErrSyntax) || !strings.Contains(msg, fmt.Sprintf("%q", s)) {
				t.Fatalf("Parse(%q): error %q does not wrap ErrSyntax and quote the input", s, msg)
			}
			if valid && !strings.Contains(msg, "too large") {
				t.Fatalf("Parse(%q) refused a count of the documented syntax: %v", s, err)
			}
			if !valid && strings.Contains(msg, "too large") {
				t.Fatalf("Parse(%q): %v, but it is not of the syntax", s, err)
			}
			if valid { // too large: the exact count is beyond int64 (give or take a float's rounding)
				if exact, limit := exactCount(m), new(big.Rat).SetFloat64(math.MaxInt64*(1-0x1p-50)); exact.Cmp(limit) < 0 {
					t.Fatalf("Parse(%q): %v, but %s fits an int64", s, err, exact.FloatString(1))
				}
			}
			return
		}
		if !valid {
			t.Fatalf("Parse(%q) = %d, but it is not of the documented syntax", s, n)
		}
		if n < 0 {
			t.Fatalf("Parse(%q) = %d", s, n)
		}
		exact := exactCount(m)
		diff := new(big.Rat).Sub(exact, new(big.Rat).SetInt64(n))
		tol := new(big.Rat).SetFloat64(math.Max(0.5, float64(n)*0x1p-50)) // a decimal's rounding to a byte, in float64
		if m[2] == "" {
			tol.SetInt64(0) // a whole count is exact
		}
		if diff.Abs(diff).Cmp(tol) > 0 {
			t.Fatalf("Parse(%q) = %d, the count is %s", s, n, exact.FloatString(2))
		}
		// Format writes it back, with one decimal of its unit at most
		back, err := bytesize.Parse(bytesize.Format(n))
		if err != nil || math.Abs(float64(back)-float64(n)) > float64(n)/20+1 {
			t.Fatalf("Parse(Format(%d)) = Parse(%q) = %d, %v", n, bytesize.Format(n), back, err)
		}
	})
}
