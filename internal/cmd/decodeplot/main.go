// SPDX-License-Identifier: Apache-2.0

// Command decodeplot turns the JSON lines of the decode-step benchmark
// (gpurt-decodestep and scripts/decodestep_torch.py; build/gpu_decodestep/
// decodestep.jsonl after scripts/gpu_decodestep.sh) into an SVG bar chart:
// per config and batch, the time of one step for gpurt eager, gpurt
// replayed, torch eager and torch graph (the faster of the twin's two
// RMSNorm variants, as the table does). Run here, after the GPU run:
//
//	make decodeplot && build/decodeplot -o bench/plots/decodestep.svg decodestep.jsonl
//
// -metric relative (the default) divides each bar by the torch CUDA graph's
// step time of its group (1.0 is the goal for the replayed step);
// step_us plots the time of one step in µs, host_us the host cost of one
// step. Lines that are
// not JSON objects are skipped (logs may be mixed in); a malformed object
// is an error naming its file and line.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stderr)) }

func run(args []string, stdin io.Reader, stderr io.Writer) int {
	fs := flag.NewFlagSet("decodeplot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "bench/plots/decodestep.svg", "SVG file to write")
	metric := fs.String("metric", "relative", "what to plot: relative (step time / torch CUDA graph step time), step_us (time of one step) or host_us (host cost of one step)")
	title := fs.String("title", "", "title (default: by metric)")
	xlabel := fs.String("xlabel", "hidden/intermediate/layers, batch", "the x axis' label (e.g. \"model, weights, context, batch\" for the decoder's summaries)")
	variant := fs.String("variant", "", "plot only this variant (plain or fused; default: every variant, named in the labels when there are several)")
	serve := fs.Bool("serve", false, "plot gpurt-servebench results instead (scripts/gpu_serve.sh's serve.jsonl): output tokens/s and p99 time per output token over the arrival rate, a PNG (-o default bench/plots/serve.png)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *serve {
		if fs.NArg() == 0 {
			fmt.Fprintln(stderr, "decodeplot: no input: name the JSON lines files (- for standard input)")
			return 2
		}
		o := "bench/plots/serve.png"
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "o" {
				o = *out
			}
		})
		return runServe(fs.Args(), stdin, o, *title, stderr)
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "decodeplot: no input: name the JSON lines files (- for standard input)")
		return 2
	}
	rows, err := loadAll(fs.Args(), stdin, load)
	if err != nil {
		fmt.Fprintf(stderr, "decodeplot: %v\n", err)
		return 1
	}
	if *variant != "" {
		kept := rows[:0]
		for _, r := range rows {
			if r.variant() == *variant {
				kept = append(kept, r)
			}
		}
		if len(kept) == 0 {
			fmt.Fprintf(stderr, "decodeplot: -variant %s: no rows of that variant\n", *variant)
			return 1
		}
		rows = kept
	}
	svg, err := render(rows, *metric, *title, *xlabel)
	return writeOut(*out, svg, err, stderr)
}

// loadAll loads every file (- for stdin) with load, in order: the first
// error names its file.
func loadAll[T any](files []string, stdin io.Reader, load func(name string, r io.Reader) ([]T, error)) ([]T, error) {
	var rows []T
	for _, name := range files {
		var rs []T
		var err error
		if name == "-" {
			rs, err = load("standard input", stdin)
		} else {
			var f *os.File
			if f, err = os.Open(name); err == nil {
				rs, err = load(name, f)
				f.Close()
			}
		}
		if err != nil {
			return nil, err
		}
		rows = append(rows, rs...)
	}
	return rows, nil
}

// writeOut writes the rendered image to out (making its folder), or
// reports err, the rendering's error; it returns the exit status.
func writeOut(out string, image []byte, err error, stderr io.Writer) int {
	if err == nil {
		if dir := filepath.Dir(out); dir != "" {
			err = os.MkdirAll(dir, 0o755)
		}
	}
	if err == nil {
		err = os.WriteFile(out, image, 0o644)
	}
	if err != nil {
		fmt.Fprintf(stderr, "decodeplot: %v\n", err)
		return 1
	}
	fmt.Fprintln(stderr, "decodeplot: wrote", out)
	return 0
}

// row is the part of a decodestep.Result the plot uses.
type row struct {
	Config  string  `json:"config"`
	Batch   int     `json:"batch"`
	Variant string  `json:"variant"`
	Impl    string  `json:"impl"`
	StepUs  float64 `json:"step_us"`
	HostUs  float64 `json:"host_us"`
}

// variant is the row's variant ("plain" when it names none).
func (r row) variant() string {
	if r.Variant == "" {
		return "plain"
	}
	return r.Variant
}

// llamaLine is a summary line of examples/llama or scripts/llama_torch.py
// (scripts/gpu_llama.sh's speed_*.log): one run's time per decode step.
type llamaLine struct {
	Preset    string  `json:"preset"`
	Weights   string  `json:"weights"`
	Ctx       int     `json:"ctx"`
	Batch     int     `json:"batch"`
	Impl      string  `json:"impl"` // gpurt or torch
	Mode      string  `json:"mode"` // eager or graph
	Kind      string  `json:"kind"`
	MsPerStep float64 `json:"ms_per_step"`
}

// row maps the run onto the decode-step chart's groups and series: the
// config is "preset weights ctxN", the step time one token per request.
func (l llamaLine) row() row {
	impl := l.Impl + " eager"
	if l.Mode == "graph" {
		impl = l.Impl + " graph"
		if l.Impl == "gpurt" {
			impl = "gpurt replayed"
		}
	}
	return row{Config: fmt.Sprintf("%s %s ctx%d", l.Preset, l.Weights, l.Ctx), Batch: l.Batch,
		Impl: impl, StepUs: l.MsPerStep * 1e3}
}

// load reads the JSON objects of r, one a line: the decode-step
// benchmark's results, or the decoder example's summaries (llamaLine).
func load(name string, r io.Reader) ([]row, error) {
	return objects(name, "%s line %d", r, func(n int, line []byte, x *row) (bool, error) {
		var l llamaLine
		if err := json.Unmarshal(line, &l); err == nil && l.Kind != "" {
			if l.Kind != "summary" || l.MsPerStep <= 0 {
				return false, nil // its config, a step's tokens, or a run without timing
			}
			*x = l.row()
		}
		if x.Config == "" || x.Impl == "" {
			return false, fmt.Errorf("%s line %d: an object without config or impl", name, n)
		}
		return true, nil
	})
}

// objects decodes each line of r that holds a JSON object (its first
// character, after white space, is '{') into a T, and returns those that
// keep takes; keep is given the line's number, the line and the T
// (which it may change). Other lines are skipped. A malformed object is
// an error naming the file and line as the format at does (from name and
// the line's number); it, or keep's error, ends the read. A read error
// names the file.
func objects[T any](name, at string, r io.Reader, keep func(n int, line []byte, x *T) (bool, error)) ([]T, error) {
	var out []T
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var x T
		if err := json.Unmarshal(line, &x); err != nil {
			return nil, fmt.Errorf(at+": %v", name, n, err)
		}
		ok, err := keep(n, line, &x)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, x)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	return out, nil
}

// series are the bars of each group: a name and the impls it takes the
// smallest positive value of.
var series = []struct {
	name  string
	impls []string
	c     color.RGBA
}{
	{"gpurt eager", []string{"gpurt eager"}, color.RGBA{R: 0x9e, G: 0xc9, B: 0xe2, A: 0xff}},
	{"gpurt replayed", []string{"gpurt replayed"}, color.RGBA{R: 0x1f, G: 0x5f, B: 0xa8, A: 0xff}},
	{"torch eager", []string{"torch eager", "torch eager hf"}, color.RGBA{R: 0xf4, G: 0xb9, B: 0x83, A: 0xff}},
	{"torch CUDA graph", []string{"torch graph", "torch graph hf"}, color.RGBA{R: 0xc4, G: 0x4e, B: 0x10, A: 0xff}},
}

// render makes the SVG.
func render(rows []row, metric, title, xlabel string) ([]byte, error) {
	val := func(r row) float64 { return r.StepUs }
	var ylabel string
	switch metric {
	case "relative":
		ylabel = "step time / torch CUDA graph step time (lower is better)"
		if title == "" {
			title = "MLP decode step (bf16): gpurt and PyTorch, relative to PyTorch CUDA graph"
		}
	case "step_us":
		ylabel = "time of one step (µs, lower is better)"
		if title == "" {
			title = "MLP decode step (bf16): gpurt vs PyTorch"
		}
	case "host_us":
		val = func(r row) float64 { return r.HostUs }
		ylabel = "host cost of one step (µs)"
		if title == "" {
			title = "MLP decode step (bf16): host cost of one step"
		}
	default:
		return nil, fmt.Errorf("metric %q: want relative, step_us or host_us", metric)
	}
	type key struct {
		config  string
		batch   int
		variant string
	}
	variants := map[string]bool{}
	var groups []key
	vals := map[key][]float64{}
	for _, r := range rows {
		if r.Impl == "gpurt check" {
			continue
		}
		k := key{r.Config, r.Batch, r.variant()}
		variants[k.variant] = true
		if _, ok := vals[k]; !ok {
			groups = append(groups, k)
			vals[k] = make([]float64, len(series))
		}
		v := val(r)
		if v <= 0 {
			continue
		}
		for i, s := range series {
			for _, impl := range s.impls {
				if impl == r.Impl && (vals[k][i] == 0 || v < vals[k][i]) {
					vals[k][i] = v
				}
			}
		}
	}
	if len(groups) == 0 {
		return nil, errors.New("no benchmark rows in the input (want objects with config, batch, impl and step_us)")
	}
	if metric == "relative" {
		ref := len(series) - 1 // torch CUDA graph
		kept := groups[:0]
		for _, g := range groups {
			v := vals[g]
			if v[ref] <= 0 {
				continue // nothing to compare with
			}
			for i := range v {
				v[i] /= v[ref]
			}
			kept = append(kept, g)
		}
		if groups = kept; len(groups) == 0 {
			return nil, errors.New("metric relative: no config has a torch graph step time to compare with")
		}
	}
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Legend.Top = true
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = fmt.Sprintf("%s b%d", g.config, g.batch)
		if len(variants) > 1 {
			names[i] += " " + g.variant
		}
	}
	p.NominalX(names...)
	p.X.Label.Text = xlabel
	w := vg.Points(11)
	plotted := 0
	for i, s := range series {
		v := make(plotter.Values, len(groups))
		has := false
		for j, g := range groups {
			v[j] = vals[g][i]
			has = has || v[j] > 0
		}
		if !has {
			continue
		}
		b, err := plotter.NewBarChart(v, w)
		if err != nil {
			return nil, fmt.Errorf("series %s: %v", s.name, err)
		}
		b.Color = s.c
		b.LineStyle.Width = 0
		b.Offset = vg.Length(float64(i)-float64(len(series)-1)/2) * w
		p.Add(b)
		p.Legend.Add(s.name, b)
		plotted++
	}
	if plotted == 0 {
		return nil, fmt.Errorf("no positive %s in the input", metric)
	}
	top := 0.0
	for _, g := range groups {
		for _, v := range vals[g] {
			top = max(top, v)
		}
	}
	p.Y.Max = top * 1.3 // room for the legend above the bars
	if metric == "relative" {
		one := plotter.NewFunction(func(float64) float64 { return 1 })
		one.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		one.Width = vg.Points(0.8)
		p.Add(one)
	}
	width := vg.Length(max(6, 1.3*float64(len(groups)))) * vg.Inch
	wt, err := p.WriterTo(width, 4*vg.Inch, "svg")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return nil, err
	}
	if !strings.Contains(buf.String(), "<svg") {
		return nil, errors.New("the plot library wrote no SVG")
	}
	return buf.Bytes(), nil
}
