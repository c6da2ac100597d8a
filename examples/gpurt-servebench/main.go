// SPDX-License-Identifier: Apache-2.0

// Command gpurt-servebench measures continuous batching on one GPU
// (issue 26, item 5): package examples/internal/servebench, whose doc says what and
// how. For each model preset it loads random weights, then serves a
// synthetic load at a sweep of Poisson arrival rates and prints one JSON
// object per line (results, notes, skipped points); -json also writes
// them to a file. scripts/gpu_serve.sh runs it on the H200; it needs no
// cgo (CGO_ENABLED=0).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/core/pool"
	"github.com/metrale/gpurt/examples/internal/servebench"
	"github.com/metrale/gpurt/internal/cli"
	"github.com/metrale/gpurt/llm"
)

func main() { cli.Main(run) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := cli.New("gpurt-servebench", "[flags]",
		"Serves a synthetic load (Poisson arrivals, chunked prefill mixed with decode, prefix\ncache) on random-weight models and prints one JSON object per line: output tokens/s,\nTTFT and TPOT p50/p99, prefix hits, decode-phase bandwidth. -backend mock -preset tiny\nwith small sizes checks the program on the mock.", stdout, stderr)
	rf := fs.Runtime("cuda", "backend to open")
	presets := fs.String("preset", "1b,8b", "model presets, comma-separated (tiny, 1b, 8b)")
	rates := fs.String("rates", "auto", "arrival rates per second, comma-separated (0: all at once), or auto: all at once, then -fractions of that capacity")
	fractions := fs.String("fractions", "0.25,0.5,0.75,1,1.25", "auto: the rates as fractions of the offline capacity")
	requests := fs.Int("requests", 1000, "requests of the offline run (and of each rate point unless -sweep-requests)")
	sweepReq := fs.Int("sweep-requests", 0, "requests of each rate point (0: -requests)")
	prompt := fs.String("prompt", "128-4096", "prompt length range (tokens, uniform)")
	output := fs.String("output", "32-512", "output length range (tokens, uniform)")
	shared := fs.Int("shared", 2048, "shared system prompt tokens")
	share := fs.Float64("shared-share", 0.5, "share of the requests with the system prompt")
	budget := fs.Int("token-budget", 2048, "new rows (tokens) per step")
	maxBatch := fs.Int("max-batch", 128, "requests per step (and running at once)")
	chunk := fs.Int("chunk", 512, "prompt tokens of one request per step (0: the token budget)")
	sample := fs.Bool("sample", false, "draw every token with per-request sampling parameters (temperature 0.8, top-k 20, top-p 0.9, a seed per request) instead of greedy")
	graph := fs.Bool("graph", false, "replay the decode-only steps as graphs, one captured per batch size on its first use (inside the timed run: the offline run, first, meets most sizes)")
	kvTokens := fs.Int("kv-tokens", 0, "KV cache tokens (0: max-batch requests of the mean length x 1.25, within the pool budget)")
	hbm := fs.Float64("hbm-gbps", 0, "read bandwidth to compare with, GB/s (0: measure a device copy in this run)")
	how := fs.String("hbm-how", "", "how -hbm-gbps was measured (copied into the results)")
	copyMiB := fs.Int("copy-mib", 2048, "the measured copy's size, MiB")
	poolBudget := fs.Float64("pool-budget", 0.9, "the device memory pool's budget: a fraction of the device's memory, or bytes")
	deadline := fs.Int("deadline", 0, "seconds for the whole run: rate points that would end later are skipped (0: none)")
	seed := fs.Uint64("seed", 1, "seed of the weights and the load")
	jsonOut := fs.String("json", "", "also write the JSON lines to this file")
	if st, ok := fs.Parse(args, false); !ok {
		return st
	}
	var cfgs []llm.Config
	names := strings.Split(*presets, ",")
	for _, p := range names {
		c, ok := llm.Presets[strings.TrimSpace(p)]
		if !ok {
			return fs.Usage("-preset %q: want tiny, 1b or 8b", p)
		}
		c.Eps, c.Seed, c.Rope = 1e-5, *seed, "neox"
		cfgs = append(cfgs, c)
	}
	var rs []float64
	if *rates != "auto" {
		v, err := floats(*rates)
		if err != nil {
			return fs.Usage("-rates: %v", err)
		}
		rs = v
	}
	fr, err := floats(*fractions)
	if err != nil {
		return fs.Usage("-fractions: %v", err)
	}
	pmin, pmax, err := span(*prompt)
	if err != nil {
		return fs.Usage("-prompt: %v", err)
	}
	omin, omax, err := span(*output)
	if err != nil {
		return fs.Usage("-output: %v", err)
	}
	if *sweepReq < 0 || *kvTokens < 0 || *copyMiB < 1 || *deadline < 0 || *hbm < 0 {
		return fs.Usage("-sweep-requests, -kv-tokens, -deadline and -hbm-gbps must not be negative, -copy-mib positive")
	}
	lo := servebench.LoadOptions{Requests: *requests, PromptMin: pmin, PromptMax: pmax, OutMin: omin, OutMax: omax,
		Shared: *shared, SharedShare: *share, Vocab: cfgs[0].Vocab, Seed: *seed}
	if err := lo.Check(); err != nil {
		return fs.Usage("%v", err)
	}
	so := servebench.ServerOptions{TokenBudget: *budget, MaxBatch: *maxBatch, ChunkSize: *chunk, KVTokens: 1, Graphs: *graph, Sample: *sample}
	if err := so.Check(); err != nil {
		return fs.Usage("%v", err)
	}
	if err := rf.Paths.Check(); err != nil { // before the -json file is made
		return fs.Fail(err)
	}
	start := time.Now()
	var sink io.Writer = stdout
	if *jsonOut != "" {
		f, err := os.Create(*jsonOut)
		if err != nil {
			return fs.Fail(err)
		}
		defer f.Close()
		sink = io.MultiWriter(stdout, f)
	}
	enc := json.NewEncoder(sink)
	emit := func(v any) { _ = enc.Encode(v) }

	rt, d, err := rf.Open(core.Config{PoolBudget: *poolBudget})
	if err != nil {
		return fs.Fail(err)
	}
	defer rt.Close()
	info := d.Info()
	emit(map[string]any{"kind": "env", "backend": rt.Backend(), "device": info.Name, "memory_total": info.MemoryTotal,
		"pool_budget": pool.Of(d).Budget()})
	bw, bwHow := *hbm, *how
	if bw == 0 {
		s, err := d.NewStream()
		if err != nil {
			return fs.Fail(err)
		}
		bw, err = servebench.MeasureCopyBandwidth(s, *copyMiB<<20, 10)
		_ = s.Synchronize()
		_ = pool.Of(d).Trim()
		_ = s.Close()
		if err != nil {
			return fs.Fail(err)
		}
		bwHow = fmt.Sprintf("device-to-device copy of %d MiB from the pool, bytes read+written / time, best of 10", *copyMiB)
	}
	emit(map[string]any{"kind": "bandwidth", "gbps": bw, "how": bwHow})
	var end time.Time
	if *deadline > 0 {
		end = start.Add(time.Duration(*deadline) * time.Second)
	}
	status := cli.ExitOK
	for i, c := range cfgs {
		o := servebench.SweepOptions{Load: lo, Rates: rs, Fractions: fr, SweepRequests: *sweepReq, Bandwidth: bw, How: bwHow, Emit: emit}
		o.Load.Vocab = c.Vocab
		o.Server = so
		o.Server.Model = c
		o.Server.KVTokens = kvFor(c, lo, *maxBatch, *kvTokens, pool.Of(d).Budget())
		if !end.IsZero() {
			// the models share what is left: this one its part
			left := time.Until(end)
			o.Deadline = time.Now().Add(left / time.Duration(len(cfgs)-i))
		}
		if _, err := servebench.Sweep(d, o); err != nil {
			status = fs.Fail(err)
			emit(map[string]any{"kind": "error", "model": strings.TrimSpace(names[i]), "error": err.Error()})
		}
		if ps, ok := inspect.DevicePool(d); ok {
			emit(map[string]any{"kind": "pool", "stats": ps, "fragmentation": ps.Fragmentation()})
		}
	}
	return status
}

// kvFor is the KV cache's tokens: asked, else maxBatch requests of the
// load's mean length x 1.25 (at least its longest), within the pool's
// budget less the weights and 4 GiB for activations and workspaces.
func kvFor(c llm.Config, lo servebench.LoadOptions, maxBatch, asked int, budget uint64) int {
	if asked > 0 {
		return asked
	}
	mean := float64(lo.Shared)*lo.SharedShare + float64(lo.PromptMin+lo.PromptMax)/2 + float64(lo.OutMin+lo.OutMax)/2
	longest := lo.Shared + lo.PromptMax + lo.OutMax
	n := max(int(1.25*mean*float64(maxBatch)), longest)
	room := int64(budget) - c.WeightBytes() - 4<<30
	if fit := room / c.KVBytesPerToken(); fit > 0 && int64(n) > fit {
		n = max(int(fit), longest)
	}
	return n
}

func floats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q is not a number >= 0", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func span(s string) (int, int, error) {
	a, b, ok := strings.Cut(s, "-")
	lo, e1 := strconv.Atoi(strings.TrimSpace(a))
	hi, e2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || e1 != nil || e2 != nil || lo < 1 || hi < lo {
		return 0, 0, fmt.Errorf("%q: want MIN-MAX, 1 <= MIN <= MAX", s)
	}
	return lo, hi, nil
}
