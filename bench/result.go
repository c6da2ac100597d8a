// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/metrale/gpurt/internal/bytesize"
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
			size = bytesize.Format(int64(x.Bytes))
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

// ParseSizes reads a comma-separated list of copy sizes in bytes, each
// from 1 byte to 16GiB, in the syntax of internal/bytesize: 65536, 64K,
// 64KiB, 16M, 1G (K, M, G are powers of 1024).
func ParseSizes(s string) ([]int, error) {
	ns, err := bytesize.ParseList(s, 1, 16*bytesize.GiB)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	out := make([]int, len(ns))
	for i, n := range ns {
		out[i] = int(n)
	}
	return out, nil
}

// WriteBenchfmt writes the report in the Go benchmark format
// (https://go.googlesource.com/proposal/+/master/design/14313-benchmark-format.md),
// so that golang.org/x/perf/cmd/benchstat can compare two runs: a few
// configuration lines (goos, goarch, pkg, backend, abi, device, plugin),
// then one line per figure,
//
//	BenchmarkDispatch_ns-8         1   112.3 ns/op
//	BenchmarkHtod_pinned_gbps/size=64KiB-8   1   3.2e+09 B/s
//
// named after the JSON metric (first letter upper-cased; copy figures get
// a /size= part), with procs the GOMAXPROCS of this process and one
// iteration (each figure is already a median or a best of many). Times
// are converted to ns/op and GB/s to B/s, the units benchstat scales;
// other units are kept. A figure that is not a finite number is left out.
func (r *Report) WriteBenchfmt(w io.Writer, procs int) error {
	var b strings.Builder
	for _, kv := range [][2]string{{"goos", runtime.GOOS}, {"goarch", runtime.GOARCH}, {"pkg", "github.com/metrale/gpurt/bench"},
		{"backend", r.Backend}, {"abi", r.ABI}, {"device", r.Device}, {"plugin", r.Plugin}} {
		if v := strings.Join(strings.Fields(kv[1]), " "); v != "" {
			fmt.Fprintf(&b, "%s: %s\n", kv[0], v)
		}
	}
	for _, x := range r.Results {
		v, unit := benchfmtUnit(x.Value, x.Unit)
		if math.IsNaN(v) || math.IsInf(v, 0) || x.Metric == "" {
			continue
		}
		name := benchfmtName(x.Metric)
		if x.Bytes > 0 {
			name += "/size=" + bytesize.Format(int64(x.Bytes))
		}
		fmt.Fprintf(&b, "Benchmark%s-%d\t1\t%s %s\n", name, procs, strconv.FormatFloat(v, 'g', -1, 64), unit)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// benchfmtName is metric as a benchmark name: no spaces, the first letter
// upper-cased (the format wants "Benchmark" followed by a capital).
func benchfmtName(metric string) string {
	n := strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || r == '-' {
			return '_'
		}
		return r
	}, metric)
	rs := []rune(n)
	rs[0] = unicode.ToUpper(rs[0])
	return string(rs)
}

// benchfmtUnit converts v in unit to the unit benchstat scales.
func benchfmtUnit(v float64, unit string) (float64, string) {
	switch unit {
	case "ns", "ns/op":
		return v, "ns/op"
	case "us":
		return v * 1e3, "ns/op"
	case "ms":
		return v * 1e6, "ns/op"
	case "s":
		return v * 1e9, "ns/op"
	case "GB/s":
		return v * 1e9, "B/s"
	case "":
		return v, "count"
	}
	return v, strings.Join(strings.Fields(unit), "_")
}

// WriteBenchfmtFile writes r in the Go benchmark format (WriteBenchfmt)
// to a new file at path, replacing one there.
func (r *Report) WriteBenchfmtFile(path string, procs int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := r.WriteBenchfmt(f, procs); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// PrintOptions say how a command prints a Report (Report.Print).
type PrintOptions struct {
	JSON     bool   // JSON lines (WriteJSON) on stdout
	Benchfmt string // "-": the Go benchmark format on stdout; a file name: that format there too
	Table    bool   // the table on stdout when neither of the above (it holds the notes)
	Flag     string // the -benchfmt flag's name as the command spells it, for a file's error
}

// Print prints r as o says: the Go benchmark format, JSON lines or the
// table on stdout (or nothing), r's notes on stderr unless the table
// holds them, then the benchmark format to o.Benchfmt's file if it names
// one.
func (r *Report) Print(stdout, stderr io.Writer, o PrintOptions) error {
	procs := runtime.GOMAXPROCS(0)
	var err error
	notes := true
	switch {
	case o.Benchfmt == "-":
		err = r.WriteBenchfmt(stdout, procs)
	case o.JSON:
		err = r.WriteJSON(stdout)
	case o.Table:
		err, notes = r.WriteTable(stdout), false
	}
	if err != nil {
		return err
	}
	if notes {
		for _, n := range r.Notes {
			fmt.Fprintln(stderr, n)
		}
	}
	if o.Benchfmt != "" && o.Benchfmt != "-" {
		if err := r.WriteBenchfmtFile(o.Benchfmt, procs); err != nil {
			return fmt.Errorf("%s: %w", o.Flag, err)
		}
	}
	return nil
}
