// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Result is one figure. As JSON (one object per line with --json) it is
// {"metric", "value", "unit", "baseline", "ratio"}, plus "bytes" for a
// copy size and "note" where there is one. Baseline and Ratio are null
// when the figure has no baseline; Ratio is Value/Baseline. Metric names
// match bench/raw's JSON lines where the two measure the same thing.
type Result struct {
	Metric   string   `json:"metric"`
	Value    float64  `json:"value"`
	Unit     string   `json:"unit"`
	Baseline *float64 `json:"baseline"`
	Ratio    *float64 `json:"ratio"`
	Bytes    int      `json:"bytes,omitempty"` // copy size, for copy figures
	Note     string   `json:"note,omitempty"`
}

// Report is what Run measured.
type Report struct {
	Backend string   // the plugin's backend
	Plugin  string   // the plugin's path
	ABI     string   // "major.minor" the plugin speaks
	Device  string   // device 0, in words
	Results []Result // in the order measured
	Notes   []string // what was skipped or not available, and why
}

// Find returns the first result named metric (and bytes, when non-zero).
func (r *Report) Find(metric string, bytes int) (Result, bool) {
	for _, x := range r.Results {
		if x.Metric == metric && (bytes == 0 || x.Bytes == bytes) {
			return x, true
		}
	}
	return Result{}, false
}

func (r *Report) add(x Result) { r.Results = append(r.Results, x) }

func (r *Report) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// withBaseline sets the baseline and the ratio value/baseline.
func (x Result) withBaseline(b float64) Result {
	x.Baseline = &b
	if b != 0 {
		r := x.Value / b
		x.Ratio = &r
	}
	return x
}

// WriteJSON writes one JSON object per result, one per line.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	for _, x := range r.Results {
		if math.IsNaN(x.Value) || math.IsInf(x.Value, 0) {
			x.Value = 0
			x.Note = strings.TrimSpace(x.Note + " (not measurable)")
		}
		if err := enc.Encode(x); err != nil {
			return err
		}
	}
	return nil
}

// WriteTable writes the report as a readable table.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "gpurt bench: backend %s (ABI %s), %s\n  plugin %s\n\n", r.Backend, r.ABI, r.Device, r.Plugin)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tsize\tvalue\tunit\tbaseline\tratio\tnote")
	for _, x := range r.Results {
		size, base, ratio := "", "", ""
		if x.Bytes > 0 {
			size = sizeName(x.Bytes)
		}
		if x.Baseline != nil {
			base = num(*x.Baseline)
		}
		if x.Ratio != nil {
			ratio = strconv.FormatFloat(*x.Ratio, 'f', 2, 64) + "x"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.Metric, size, num(x.Value), x.Unit, base, ratio, x.Note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, n)
	}
	return nil
}

// num prints a figure with three or four significant digits.
func num(v float64) string {
	a := math.Abs(v)
	switch {
	case v == math.Trunc(v) && a < 1e15:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// ParseSizes reads a comma-separated list of byte sizes with an optional
// unit: 65536, 64K, 64KiB, 16M, 1G (K, M, G are powers of 1024).
func ParseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		u := strings.ToUpper(f)
		mult := 1
		for _, suf := range []struct {
			s string
			m int
		}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30},
			{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
			if strings.HasSuffix(u, suf.s) {
				u, mult = strings.TrimSuffix(u, suf.s), suf.m
				break
			}
		}
		v, err := strconv.Atoi(strings.TrimSpace(u))
		if err != nil || v <= 0 || v > (16<<30)/mult {
			return nil, fmt.Errorf("bench: size %q: want a positive number of bytes up to 16GiB, with an optional K, M or G", f)
		}
		out = append(out, v*mult)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: no sizes in %q", s)
	}
	return out, nil
}
