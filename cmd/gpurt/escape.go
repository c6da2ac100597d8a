// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/metrale/gpurt/core/diag"
)

// Paths, reasons and device strings come from the file system and from
// plugins: a folder name may hold a newline or bytes that are not UTF-8.
// The reports never let such a string forge a line or break the output.

// text is s as the text report prints it: unchanged when it is valid UTF-8
// with only printable characters, else Go-quoted ("a\nb", "\xff"), so
// that one value is always one line and shows every byte.
func text(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return s
	}
	return strconv.Quote(s)
}

// jsonText is s as the JSON report carries it: encoding/json escapes
// control characters itself, but would replace a byte that is not UTF-8
// with U+FFFD and lose it; such a byte is written as the four characters
// \xNN instead.
func jsonText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&b, `\x%02x`, s[i])
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// jsonReport is a copy of rep with every string passed through jsonText.
func jsonReport(rep *diag.Report) *diag.Report {
	if rep == nil {
		return &diag.Report{Searched: []string{}, Candidates: []diag.Candidate{}}
	}
	out := *rep
	out.Requested, out.Selected, out.Backend = jsonText(rep.Requested), jsonText(rep.Selected), jsonText(rep.Backend)
	out.Searched = make([]string, len(rep.Searched))
	for i, s := range rep.Searched {
		out.Searched[i] = jsonText(s)
	}
	out.Candidates = make([]diag.Candidate, len(rep.Candidates))
	for i, c := range rep.Candidates {
		c.Path, c.Backend, c.Version, c.ABI = jsonText(c.Path), jsonText(c.Backend), jsonText(c.Version), jsonText(c.ABI)
		c.Reason, c.Detail = jsonText(c.Reason), jsonText(c.Detail)
		devs := make([]diag.ProbedDevice, len(c.Devices))
		for j, d := range c.Devices {
			d.Name, d.Vendor, d.Arch = jsonText(d.Name), jsonText(d.Vendor), jsonText(d.Arch)
			d.PCIBusID, d.DriverVersion = jsonText(d.PCIBusID), jsonText(d.DriverVersion)
			devs[j] = d
		}
		c.Devices = devs
		out.Candidates[i] = c
	}
	return &out
}
