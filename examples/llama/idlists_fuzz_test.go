// SPDX-License-Identifier: Apache-2.0

package main

import (
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// FuzzIDLists: the token ids of -prompt-ids, -prompt-file and -force-file
// (a file's bytes). idLists never panics; what it accepts is at least one
// request, each of at least one id (the model refuses an empty prompt),
// every id in 0 .. 2^31-1, as the text says (requests split at ';' and
// line ends, ids at commas and blanks); an error quotes the token that is
// wrong or says there are no ids.
func FuzzIDLists(f *testing.F) {
	for _, s := range []string{"128000,791,6864", "1 5 9;2,3", "1,2\n3 4\r\n\n5\t6\n", "0", "2147483647", "2147483648", "-1", "+7", "1.5",
		"0x10", "1e3", "", ";;\n", " ", "1,,2", ",", "1;,;2", "\u00a01\u00a0", "१२", "1\x002", strings.Repeat("7,", 1000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := idLists(s)
		// the text read independently: requests, then ids
		var want [][]int32
		bad := ""
		for _, req := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == '\n' }) {
			var ids []int32
			for _, tok := range strings.FieldsFunc(strings.TrimSpace(req), func(r rune) bool { return strings.ContainsRune(", \t\r", r) }) {
				n, err := strconv.ParseInt(tok, 10, 64)
				if err != nil || n < 0 || n > math.MaxInt32 {
					if bad == "" {
						bad = tok
					}
					continue
				}
				ids = append(ids, int32(n))
			}
			if len(ids) > 0 {
				want = append(want, ids)
			}
		}
		if err != nil {
			switch msg := err.Error(); {
			case bad != "":
				if msg != strconv.Quote(bad)+" is not a token id" {
					t.Fatalf("idLists(%q): error %q, want one quoting %q", s, msg, bad)
				}
			case len(want) == 0:
				if msg != "no token ids" {
					t.Fatalf("idLists(%q): error %q, want \"no token ids\"", s, msg)
				}
			default:
				t.Fatalf("idLists(%q) refused %v: %v", s, want, err)
			}
			return
		}
		if bad != "" {
			t.Fatalf("idLists(%q) = %v, with %q", s, got, bad)
		}
		if len(got) == 0 {
			t.Fatalf("idLists(%q): no requests and no error", s)
		}
		for i, ids := range got {
			if len(ids) == 0 {
				t.Fatalf("idLists(%q): request %d has no ids (the model refuses an empty prompt)", s, i)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("idLists(%q) = %v, the text says %v", s, got, want)
		}
	})
}
