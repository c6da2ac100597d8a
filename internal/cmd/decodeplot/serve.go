// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"image/color"
	"io"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// serveRow is the part of a gpurt-servebench result (examples/internal/servebench
// Result, "kind": "serve") the plot uses.
type serveRow struct {
	Kind       string  `json:"kind"`
	Model      string  `json:"model"`
	Graphs     bool    `json:"graphs"` // decode-only steps replayed as graphs: a line of its own
	Rate       float64 `json:"rate"`
	TokensPerS float64 `json:"output_tokens_per_s"`
	TPOT       struct {
		P99 float64 `json:"p99_ms"`
	} `json:"tpot"`
}

// loadServe reads the "serve" lines of r (other lines, and text, are
// skipped; a malformed object is an error naming the file and line).
func loadServe(name string, r io.Reader) ([]serveRow, error) {
	return objects(name, "%s:%d", r, func(_ int, _ []byte, s *serveRow) (bool, error) {
		return s.Kind == "serve" && s.Rate > 0, nil
	})
}

// renderServe draws, side by side, output tokens/s and p99 time per
// output token over the arrival rate, one line per model and mode (the runs with
// every request at once, rate 0, have no rate and are left out), with the
// issue's 50 ms p99 goal dashed; PNG bytes.
func renderServe(rows []serveRow, title string) ([]byte, error) {
	if len(rows) == 0 {
		return nil, fmt.Errorf("no serve results with an arrival rate (kind \"serve\", rate > 0)")
	}
	byModel := map[string][]serveRow{}
	for _, r := range rows {
		m := r.Model
		if r.Graphs {
			m += " (graphs)"
		}
		byModel[m] = append(byModel[m], r)
	}
	models := make([]string, 0, len(byModel))
	for m := range byModel {
		models = append(models, m)
		sort.Slice(byModel[m], func(i, j int) bool { return byModel[m][i].Rate < byModel[m][j].Rate })
	}
	sort.Strings(models)
	tok, lat := plot.New(), plot.New()
	tok.Title.Text, lat.Title.Text = "output tokens/s", "p99 time per output token (ms)"
	if title != "" {
		tok.Title.Text = title + ": " + tok.Title.Text
	}
	for _, p := range []*plot.Plot{tok, lat} {
		p.X.Label.Text = "arrival rate (requests/s, Poisson)"
		p.Add(plotter.NewGrid())
		p.Legend.Top, p.Legend.Left = true, true
		p.X.Min = 0
	}
	tok.Y.Min, lat.Y.Min = 0, 0
	colors := []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {148, 103, 189, 255}}
	maxRate := 0.0
	for i, m := range models {
		rs := byModel[m]
		t, l := make(plotter.XYs, len(rs)), make(plotter.XYs, len(rs))
		for j, r := range rs {
			t[j] = plotter.XY{X: r.Rate, Y: r.TokensPerS}
			l[j] = plotter.XY{X: r.Rate, Y: r.TPOT.P99}
			maxRate = max(maxRate, r.Rate)
		}
		c := colors[i%len(colors)]
		for _, x := range []struct {
			p   *plot.Plot
			pts plotter.XYs
		}{{tok, t}, {lat, l}} {
			ln, pt, err := plotter.NewLinePoints(x.pts)
			if err != nil {
				return nil, err
			}
			ln.Color, pt.Color = c, c
			x.p.Add(ln, pt)
			x.p.Legend.Add(m, ln, pt)
		}
	}
	goal, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 50}, {X: maxRate, Y: 50}})
	if err != nil {
		return nil, err
	}
	goal.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	goal.Color = color.Gray{Y: 100}
	lat.Add(goal)
	lat.Legend.Add("50 ms goal", goal)

	img := vgimg.New(14*vg.Inch, 5*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 2, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	cs := plot.Align([][]*plot.Plot{{tok, lat}}, tiles, dc)
	tok.Draw(cs[0][0])
	lat.Draw(cs[0][1])
	var b strings.Builder
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&b); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// runServe is decodeplot -serve: the files' serve results to a PNG.
func runServe(files []string, stdin io.Reader, out, title string, stderr io.Writer) int {
	rows, err := loadAll(files, stdin, loadServe)
	if err != nil {
		fmt.Fprintf(stderr, "decodeplot: %v\n", err)
		return 1
	}
	png, err := renderServe(rows, title)
	return writeOut(out, png, err, stderr)
}
