// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sample is made-up output of the two programs, with a log line mixed in.
const sample = `gpurt-decodestep: cuda plugin
{"config":"256/512/2","batch":1,"impl":"gpurt check","ok":true}
{"config":"1024/4096/24","batch":1,"impl":"gpurt eager","step_us":900.5,"host_us":850}
{"config":"1024/4096/24","batch":1,"impl":"gpurt replayed","step_us":410.2,"host_us":3.1,"match":"identical"}
{"config":"1024/4096/24","batch":1,"impl":"torch eager","step_us":1500,"host_us":1400}
{"config":"1024/4096/24","batch":1,"impl":"torch eager hf","step_us":2100,"host_us":2000}
{"config":"1024/4096/24","batch":1,"impl":"torch graph","step_us":610,"host_us":6}
{"config":"4096/14336/32","batch":16,"impl":"gpurt eager","step_us":3500,"host_us":1200}
{"config":"4096/14336/32","batch":16,"impl":"gpurt replayed","step_us":3300,"host_us":3}
{"config":"4096/14336/32","batch":16,"impl":"torch graph hf","step_us":3400,"host_us":5}
`

func TestRenderSample(t *testing.T) {
	for _, metric := range []string{"relative", "step_us", "host_us"} {
		rows, err := load("sample", strings.NewReader(sample))
		require.NoError(t, err)
		require.Len(t, rows, 9)
		svg, err := render(rows, metric, "", "x")
		require.NoError(t, err, metric)
		s := string(svg)
		assert.Contains(t, s, "<svg")
		for _, want := range []string{"1024/4096/24 b1", "4096/14336/32 b16", "gpurt replayed", "torch CUDA graph", "torch eager"} {
			assert.Contains(t, s, want, metric)
		}
		assert.NotContains(t, s, "256/512/2", "check rows are not plotted")
	}
}

// TestTorchSeriesTakesTheFasterVariant: of torch eager (1500) and torch
// eager hf (2100), the bar is 1500, as in the script's table.
func TestTorchSeriesTakesTheFasterVariant(t *testing.T) {
	rows, err := load("sample", strings.NewReader(sample))
	require.NoError(t, err)
	a, err := render(rows, "step_us", "x", "x")
	require.NoError(t, err)
	var keep []row
	for _, r := range rows {
		if r.Impl != "torch eager hf" {
			keep = append(keep, r)
		}
	}
	b, err := render(keep, "step_us", "x", "x")
	require.NoError(t, err)
	assert.Equal(t, string(b), string(a), "dropping the slower variant changes nothing")
	for i := range keep {
		if keep[i].Impl == "torch eager" {
			keep[i].StepUs = 2100
		}
	}
	c, err := render(keep, "step_us", "x", "x")
	require.NoError(t, err)
	assert.NotEqual(t, string(a), string(c), "a different value draws a different bar")
}

func TestVariantsInLabels(t *testing.T) {
	in := sample + `{"config":"1024/4096/24","batch":1,"variant":"fused","impl":"gpurt replayed","step_us":380}
{"config":"1024/4096/24","batch":1,"variant":"fused","impl":"torch graph","step_us":560}
`
	rows, err := load("sample", strings.NewReader(in))
	require.NoError(t, err)
	svg, err := render(rows, "relative", "", "x")
	require.NoError(t, err)
	assert.Contains(t, string(svg), "1024/4096/24 b1 fused")
	assert.Contains(t, string(svg), "1024/4096/24 b1 plain")
	dir := t.TempDir()
	path := filepath.Join(dir, "in.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(in), 0o644))
	var errb bytes.Buffer
	out := filepath.Join(dir, "f.svg")
	require.Equal(t, 0, run([]string{"-o", out, "-variant", "fused", path}, nil, &errb), errb.String())
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Contains(t, string(b), "1024/4096/24 b1<")
	assert.NotContains(t, string(b), "4096/14336/32")
	assert.Equal(t, 1, run([]string{"-o", out, "-variant", "other", path}, nil, &errb))
	assert.Contains(t, errb.String(), "no rows of that variant")
}

func TestRunWritesFile(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "d.jsonl")
	require.NoError(t, os.WriteFile(in, []byte(sample), 0o644))
	out := filepath.Join(dir, "plots", "d.svg")
	var errb bytes.Buffer
	require.Equal(t, 0, run([]string{"-o", out, in}, nil, &errb), errb.String())
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Contains(t, string(b), "<svg")
	require.Equal(t, 0, run([]string{"-o", out, "-"}, strings.NewReader(sample), &errb), errb.String())
}

func TestBadInput(t *testing.T) {
	cases := []struct {
		name, input, metric, want string
		args                      []string
	}{
		{name: "empty", input: "", metric: "step_us", want: "no benchmark rows"},
		{name: "malformed", input: "{\"config\":\"a\",\n", metric: "step_us", want: "line 1"},
		{name: "no impl", input: `{"config":"a","batch":1}` + "\n", metric: "step_us", want: "without config or impl"},
		{name: "metric", input: sample, metric: "tflops", want: `metric "tflops"`},
		{name: "all zero", input: `{"config":"a","batch":1,"impl":"gpurt eager","step_us":0}` + "\n", metric: "step_us", want: "no positive step_us"},
		{name: "no torch graph", input: `{"config":"a","batch":1,"impl":"gpurt eager","step_us":5}` + "\n", metric: "relative", want: "no config has a torch graph"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rows, err := load("in", strings.NewReader(c.input))
			if err == nil {
				_, err = render(rows, c.metric, "", "x")
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	var errb bytes.Buffer
	assert.Equal(t, 2, run(nil, nil, &errb))
	assert.Contains(t, errb.String(), "no input")
	errb.Reset()
	assert.Equal(t, 1, run([]string{"-o", filepath.Join(t.TempDir(), "x.svg"), filepath.Join(t.TempDir(), "missing.jsonl")}, nil, &errb))
	assert.Contains(t, errb.String(), "missing.jsonl")
}

// The decoder example's summaries (gpu_llama.sh's speed logs) become rows
// of "preset weights ctxN" groups; its step lines are skipped.
func TestLoadLlamaSummaries(t *testing.T) {
	in := `{"batch":1,"ctx":1024,"decode_steps":64,"impl":"gpurt","kind":"summary","mode":"eager","ms_per_step":1.5,"preset":"1b","weights":"bf16"}
{"batch":1,"ctx":1024,"impl":"gpurt","kind":"summary","mode":"graph","ms_per_step":1.25,"preset":"1b","weights":"bf16"}
{"batch":1,"ctx":1024,"impl":"gpurt","kind":"step","mode":"graph","step":3,"tokens":[7],"preset":"1b","weights":"bf16"}
{"impl": "torch", "mode": "graph", "batch": 1, "ctx": 1024, "preset": "1b", "weights": "bf16", "kind": "summary", "ms_per_step": 2.5}
`
	rows, err := load("speed.log", strings.NewReader(in))
	require.NoError(t, err)
	require.Len(t, rows, 3)
	assert.Equal(t, row{Config: "1b bf16 ctx1024", Batch: 1, Impl: "gpurt eager", StepUs: 1500}, rows[0])
	assert.Equal(t, "gpurt replayed", rows[1].Impl)
	assert.Equal(t, "torch graph", rows[2].Impl)
	assert.InDelta(t, 2500, rows[2].StepUs, 1e-9)
	svg, err := render(rows, "relative", "", "model, weights, context, batch")
	require.NoError(t, err)
	assert.Contains(t, string(svg), "<svg")
}

// serveSample is made-up gpurt-servebench output: notes, an offline run
// (rate 0, left out), two models at two rates each, one of them again with
// graphs (a line of its own).
const serveSample = `{"kind":"env","backend":"cuda"}
{"kind":"serve","model":"1b","rate":0,"output_tokens_per_s":9000,"tpot":{"p50_ms":20,"p99_ms":90}}
{"kind":"serve","model":"1b","rate":10,"output_tokens_per_s":2700,"tpot":{"p50_ms":8,"p99_ms":12}}
{"kind":"serve","model":"1b","rate":30,"output_tokens_per_s":7900,"tpot":{"p50_ms":15,"p99_ms":40}}
{"kind":"serve","model":"8b","rate":3,"output_tokens_per_s":800,"tpot":{"p50_ms":14,"p99_ms":21}}
{"kind":"skip","model":"8b","rate":1,"reason":"deadline"}
{"kind":"serve","model":"8b","rate":9,"output_tokens_per_s":2300,"tpot":{"p50_ms":30,"p99_ms":75}}
{"kind":"serve","model":"8b","graphs":true,"rate":9,"output_tokens_per_s":2500,"tpot":{"p50_ms":27,"p99_ms":60}}
`

func TestServePlot(t *testing.T) {
	rows, err := loadServe("sample", strings.NewReader(serveSample))
	require.NoError(t, err)
	require.Len(t, rows, 5, "the rate-0 run and the notes are left out")
	assert.Equal(t, 75.0, rows[3].TPOT.P99)
	assert.True(t, rows[4].Graphs)
	assert.False(t, rows[3].Graphs)

	dir := t.TempDir()
	in := filepath.Join(dir, "serve.jsonl")
	require.NoError(t, os.WriteFile(in, []byte(serveSample), 0o644))
	out := filepath.Join(dir, "plots", "serve.png")
	var stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"-serve", "-o", out, in}, strings.NewReader(""), &stderr), stderr.String())
	png, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")), "a PNG")
	assert.Greater(t, len(png), 10000)

	stderr.Reset()
	assert.Equal(t, 1, run([]string{"-serve", "-o", out, "-"}, strings.NewReader(`{"kind":"env"}`), &stderr))
	assert.Contains(t, stderr.String(), "no serve results with an arrival rate")
	stderr.Reset()
	assert.Equal(t, 1, run([]string{"-serve", "-o", out, "-"}, strings.NewReader("{\"kind\":\"serve\",\n"), &stderr))
	assert.Contains(t, stderr.String(), "standard input:1:")
}
