// SPDX-License-Identifier: Apache-2.0

// Package servebench measures continuous batching on gpurt (issue 26,
// item 5): a load generator and a server loop over llm.Paged and
// kvpage.Scheduler.
//
// The load (Load, made by NewLoad from a seed): requests arrive as a
// Poisson process at Rate per second (0: all at once, the offline
// throughput), each with a prompt of PromptMin..PromptMax random tokens
// (uniform), preceded on a SharedShare of them by one shared system prompt
// of Shared tokens, and an output length of OutMin..OutMax tokens
// (uniform); generation is greedy and stops at exactly that length (no
// EOS).
//
// The server (Server.Run): each step admits the arrived requests to the
// scheduler, which mixes one decode token per running request with prompt
// chunks (chunked prefill; admission looks the prompt up in the prefix
// cache, so the shared system prompt's full pages are computed once while
// a request holding them lives or they stay cached), copies copy-on-write
// pages, uploads the step's page table in one copy (kvpage.Table), runs
// the model's step (llm.Paged), reads the sampled tokens and completes
// the step: finished requests free their pages.
//
// Figures (Result): output tokens/s over the run's wall time; time to
// first token (from the request's arrival to the end of the step that
// sampled its first token) and time per output token (from the first
// token to the last, over the tokens after the first), p50 and p99 over
// the requests; the prefix cache's hit rate (allocator lookups) and the
// share of the shared prompt's tokens that hits skipped; and the decode
// phase's achieved memory bandwidth: over the steps that only decode,
// the bytes a step must read (every weight once, and the K/V of each
// request's context) over the step's time, wall (host included) and GPU
// (timing events around the step's work), against a read bandwidth
// measured in the same run (passed in, e.g. scripts/decode_twin.py
// bandwidth; else MeasureCopyBandwidth).
package servebench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/pool"
	"github.com/metrale/gpurt/kvpage"
	"github.com/metrale/gpurt/llm"
	"github.com/metrale/gpurt/sampling"
)

// LoadOptions shape a synthetic load.
type LoadOptions struct {
	Requests             int
	Rate                 float64 // arrivals per second; 0: all at time 0
	PromptMin, PromptMax int
	OutMin, OutMax       int
	Shared               int     // system prompt tokens
	SharedShare          float64 // share of the requests with it (0 to 1)
	Vocab                int
	Seed                 uint64
}

// DefaultLoad is the load: 1,000 requests, prompts of 128 to
// 4,096 tokens, outputs of 32 to 512, a 2K system prompt on half.
func DefaultLoad(vocab int) LoadOptions {
	return LoadOptions{Requests: 1000, PromptMin: 128, PromptMax: 4096, OutMin: 32, OutMax: 512,
		Shared: 2048, SharedShare: 0.5, Vocab: vocab, Seed: 1}
}

// Request is one request of a load.
type Request struct {
	Arrival time.Duration // after the run's start
	Prompt  []int32
	MaxNew  int
	Shared  bool // begins with the system prompt
}

// Load is a list of requests in arrival order.
type Load struct {
	Options  LoadOptions
	Requests []Request
}

// Check reports the first bad option.
func (o LoadOptions) Check() error {
	switch {
	case o.Requests <= 0:
		return fmt.Errorf("requests %d: want at least 1", o.Requests)
	case o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0):
		return fmt.Errorf("rate %g: want a finite rate >= 0 (0: all at once)", o.Rate)
	case o.PromptMin < 1 || o.PromptMax < o.PromptMin:
		return fmt.Errorf("prompt %d-%d: want 1 <= min <= max", o.PromptMin, o.PromptMax)
	case o.OutMin < 1 || o.OutMax < o.OutMin:
		return fmt.Errorf("output %d-%d: want 1 <= min <= max", o.OutMin, o.OutMax)
	case o.Shared < 0 || o.SharedShare < 0 || o.SharedShare > 1:
		return fmt.Errorf("shared prompt %d tokens on a share of %g: want tokens >= 0, share in 0..1", o.Shared, o.SharedShare)
	case o.Vocab < 2:
		return fmt.Errorf("vocab %d: want at least 2", o.Vocab)
	}
	return nil
}

// NewLoad draws a load from o.Seed.
func NewLoad(o LoadOptions) (*Load, error) {
	if err := o.Check(); err != nil {
		return nil, fmt.Errorf("servebench: load: %w", err)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x5e77e))
	tok := func() int32 { return int32(rng.IntN(o.Vocab)) }
	system := make([]int32, o.Shared)
	for i := range system {
		system[i] = tok()
	}
	l := &Load{Options: o, Requests: make([]Request, o.Requests)}
	var at float64
	for i := range l.Requests {
		r := &l.Requests[i]
		if o.Rate > 0 {
			at += rng.ExpFloat64() / o.Rate
		}
		r.Arrival = time.Duration(at * float64(time.Second))
		n := o.PromptMin + rng.IntN(o.PromptMax-o.PromptMin+1)
		r.Shared = o.Shared > 0 && rng.Float64() < o.SharedShare
		if r.Shared {
			r.Prompt = append(r.Prompt, system...)
		}
		for range n {
			r.Prompt = append(r.Prompt, tok())
		}
		r.MaxNew = o.OutMin + rng.IntN(o.OutMax-o.OutMin+1)
	}
	return l, nil
}

// ServerOptions size the server.
type ServerOptions struct {
	Model       llm.Config
	TokenBudget int // the most new rows of a step
	MaxBatch    int // the most requests of a step
	ChunkSize   int // the most prompt tokens of one request in a step (0: the budget)
	// KVTokens is the KV cache's capacity in tokens, over all requests
	// (rounded up to MaxBatch requests of whole pages).
	KVTokens int
	// Graphs replays the decode-only steps as graphs, one captured per
	// batch size (llm.Paged.UseGraphs); other steps run eagerly.
	Graphs bool
	// Sample draws every token with per-request parameters
	// (llm.Paged.StepRows): temperature 0.8, top-k 20, top-p 0.9, request
	// i's Philox seed i + 1 and its offset the tokens it has made, so a
	// request draws the same tokens in any batch. Greedy otherwise.
	Sample bool
}

// Check reports the first bad option.
func (o ServerOptions) Check() error {
	switch {
	case o.TokenBudget < 2:
		return fmt.Errorf("token budget %d: want at least 2", o.TokenBudget)
	case o.MaxBatch < 1 || o.MaxBatch > o.TokenBudget:
		return fmt.Errorf("max batch %d: want 1 to the token budget %d", o.MaxBatch, o.TokenBudget)
	case o.ChunkSize < 0:
		return fmt.Errorf("chunk size %d: want >= 0", o.ChunkSize)
	case o.KVTokens < 1:
		return fmt.Errorf("kv tokens %d: want at least 1", o.KVTokens)
	}
	return nil
}

// Server is a model ready to serve loads (one at a time).
type Server struct {
	o      ServerOptions
	dev    *core.Device
	m      *llm.Model
	p      *llm.Paged
	ev     [2]*core.Event
	timing bool // the device has timing events
}

// NewServer makes the model (random weights from o.Model.Seed) sized for
// the options on d.
func NewServer(d *core.Device, o ServerOptions) (*Server, error) {
	if err := o.Check(); err != nil {
		return nil, fmt.Errorf("servebench: server: %w", err)
	}
	perReq := (o.KVTokens + o.MaxBatch - 1) / o.MaxBatch
	maxPrompt := max(2, (o.TokenBudget+o.MaxBatch-1)/o.MaxBatch)
	m, err := llm.NewModel(d, o.Model, o.MaxBatch, max(perReq, maxPrompt), maxPrompt)
	if err != nil {
		return nil, fmt.Errorf("servebench: model: %w", err)
	}
	sv := &Server{o: o, dev: d, m: m}
	if sv.p, err = llm.NewPaged(m); err != nil {
		sv.Close()
		return nil, err
	}
	sv.p.UseGraphs(o.Graphs)
	sv.timing = true
	for i := range sv.ev {
		if sv.ev[i], err = d.NewEvent(true); err != nil {
			sv.Close()
			return nil, err
		}
	}
	return sv, nil
}

// Close frees the model.
func (sv *Server) Close() {
	for _, e := range sv.ev {
		if e != nil {
			_ = e.Close()
		}
	}
	if sv.p != nil {
		sv.p.Close()
	}
	sv.m.Close()
}

// stepParams is the per-row sampling parameters of a step's sampled
// entries (ServerOptions.Sample), in row order, in the step's Batch of
// rows rows (made once per row count).
func stepParams(byRows map[int]*sampling.Batch, entries []kvpage.Entry, byHandle map[int64]int, made []int, rows, vocab int) (*sampling.Batch, error) {
	pb := byRows[rows]
	if pb == nil {
		var err error
		if pb, err = sampling.NewBatch(rows, vocab, 0); err != nil {
			return nil, err
		}
		byRows[rows] = pb
	}
	r := 0
	for _, e := range entries {
		if !e.Sample {
			continue
		}
		i := byHandle[e.Handle]
		q := sampling.Params{Temperature: 0.8, TopK: 20, TopP: 0.9, Seed: uint64(i) + 1, Offset: uint64(made[i])}
		if err := pb.Set(r, &q); err != nil {
			return nil, err
		}
		r++
	}
	return pb, nil
}

// Paged is the server's model, by pages.
func (sv *Server) Paged() *llm.Paged { return sv.p }

// Latency is a distribution's p50 and p99, in milliseconds.
type Latency struct {
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
}

// Result is one load's figures.
type Result struct {
	Kind         string  `json:"kind"` // "serve"
	Model        string  `json:"model"`
	Rate         float64 `json:"rate"` // arrivals per second asked (0: all at once)
	Requests     int     `json:"requests"`
	WallS        float64 `json:"wall_s"`
	OutputTokens int64   `json:"output_tokens"`
	PromptTokens int64   `json:"prompt_tokens"`
	TokensPerS   float64 `json:"output_tokens_per_s"`
	ReqPerS      float64 `json:"requests_per_s"` // finished per second of the run
	TTFT         Latency `json:"ttft"`
	TPOT         Latency `json:"tpot"`

	PrefixHitRate float64 `json:"prefix_hit_rate"`        // prompt pages found in the cache / pages looked up
	SharedSkipped float64 `json:"shared_prefill_skipped"` // shared-prompt tokens served by hits / shared-prompt tokens asked
	CachedTokens  int64   `json:"cached_tokens"`
	PrefillTokens int64   `json:"prefill_tokens"` // computed
	Steps         int64   `json:"steps"`
	HostMsPerStep float64 `json:"host_ms_per_step"` // mean host time to plan and enqueue a step (scheduler, page table, model ops)
	Preemptions   int64   `json:"preemptions"`
	MaxSeqs       int64   `json:"max_seqs"`

	DecodeSteps     int     `json:"decode_steps"`
	DecodeBatch     float64 `json:"decode_batch_mean"`
	DecodeBytes     float64 `json:"decode_bytes"` // read by the decode-only steps (weights once per step, each request's K/V)
	DecodeWallS     float64 `json:"decode_wall_s"`
	DecodeGPUS      float64 `json:"decode_gpu_s"`
	DecodeGBps      float64 `json:"decode_gbps"`     // over the steps' wall time
	DecodeGPUGBps   float64 `json:"decode_gpu_gbps"` // over their GPU time
	BandwidthGBps   float64 `json:"bandwidth_gbps"`  // measured in the run (0: not measured)
	BandwidthHow    string  `json:"bandwidth_how,omitempty"`
	DecodeBWShare   float64 `json:"decode_bw_share"`     // DecodeGBps / BandwidthGBps
	DecodeGPUShare  float64 `json:"decode_gpu_bw_share"` // DecodeGPUGBps / BandwidthGBps
	KVTokens        int     `json:"kv_tokens"`
	TokenBudget     int     `json:"token_budget"`
	MaxBatch        int     `json:"max_batch"`
	Graphs          bool    `json:"graphs"`           // decode-only steps replayed as graphs
	GraphCaptures   int     `json:"graph_captures"`   // decode steps captured as graphs during the run (llm.Model.GraphCaptures)
	GraphRecaptures int     `json:"graph_recaptures"` // of those, replays the plugin refused (llm.Model.GraphRecaptures)
	Sampled         bool    `json:"sampled"`          // tokens drawn with per-request parameters (else greedy)
	Pages           int     `json:"kv_pages"`
	PagesFreeAtEnd  int     `json:"kv_pages_free_at_end"`
	LiveAtEnd       int     `json:"live_requests_at_end"`
	AllocatorCached int     `json:"kv_pages_cached_at_end"`

	// Outputs are the requests' generated tokens, by request (not in
	// the JSON).
	Outputs [][]int32 `json:"-"`
}

// Run serves the load from a cold prefix cache and returns its figures.
// bandwidth (GB/s) is the read bandwidth to compare with, 0 for none.
func (sv *Server) Run(load *Load, bandwidth float64, how string) (*Result, error) {
	p, s := sv.p, sv.p.Stream()
	o := sv.o
	a, err := kvpage.New(kvpage.Config{PageSize: p.PageSize(), NumPages: p.NumPages(), MaxRequests: o.MaxBatch, Salt: load.Options.Seed})
	if err != nil {
		return nil, fmt.Errorf("servebench: allocator: %w", err)
	}
	sched, err := kvpage.NewScheduler(a, kvpage.SchedConfig{TokenBudget: o.TokenBudget, MaxBatch: o.MaxBatch, ChunkSize: o.ChunkSize, EOS: -1})
	if err != nil {
		return nil, err
	}
	// A step lists each request's pages (shared ones once per request):
	// at most MaxBatch of the longest request's.
	longest := 0
	for _, r := range load.Requests {
		longest = max(longest, len(r.Prompt)+r.MaxNew)
	}
	maxPages := o.MaxBatch * min(p.NumPages(), (longest+p.PageSize()-1)/p.PageSize())
	tab, err := kvpage.NewTable(sv.dev, kvpage.TableConfig{MaxBatch: o.MaxBatch, MaxPages: maxPages, MaxRows: o.TokenBudget})
	if err != nil {
		return nil, err
	}
	defer tab.Close()

	cfg := sv.o.Model
	weights, kvTok := float64(cfg.WeightBytes()), float64(cfg.KVBytesPerToken())
	n := len(load.Requests)
	byHandle := make(map[int64]int, n)
	arrival := make([]time.Time, n)
	ttft := make([]float64, 0, n)
	tpot := make([]float64, 0, n)
	res := &Result{Kind: "serve", Model: modelName(cfg), Rate: load.Options.Rate, Requests: n, KVTokens: o.KVTokens,
		TokenBudget: o.TokenBudget, MaxBatch: o.MaxBatch, Graphs: o.Graphs, Sampled: o.Sample, Pages: p.NumPages(), BandwidthGBps: bandwidth, BandwidthHow: how,
		Outputs: make([][]int32, n)}
	var (
		ids, rows, sampled []int32
		made               = make([]int, n)            // tokens each request has drawn
		params             = map[int]*sampling.Batch{} // Sample: a step's per-row parameters, by rows
		decBatch           int
		sharedAsked        int64
		sharedHit          int64
		hostS              float64
		firstAt            = make([]time.Time, n)
	)
	caps0, recaps0 := sv.m.GraphCaptures(), sv.m.GraphRecaptures()
	start := time.Now()
	next, done := 0, 0
	for done < n {
		now := time.Now()
		for next < n && start.Add(load.Requests[next].Arrival).Before(now.Add(time.Microsecond)) {
			r := &load.Requests[next]
			h, err := sched.Submit(r.Prompt, r.MaxNew)
			if err != nil {
				return nil, fmt.Errorf("servebench: request %d: %w", next, err)
			}
			byHandle[h] = next
			arrival[next] = start.Add(r.Arrival)
			res.PromptTokens += int64(len(r.Prompt))
			next++
		}
		if sched.Pending() == 0 {
			time.Sleep(time.Until(start.Add(load.Requests[next].Arrival)))
			continue
		}
		th := time.Now()
		b, err := sched.Next()
		if err != nil {
			return nil, fmt.Errorf("servebench: step: %w", err)
		}
		if len(b.Entries) == 0 {
			return nil, fmt.Errorf("servebench: step %d scheduled nothing with %d requests pending (a request larger than the cache?)", b.Step, sched.Pending())
		}
		t0 := time.Now()
		for _, cp := range b.Copies {
			for _, c := range p.Caches() {
				if err := kvpage.CopyPage(s, c, cp); err != nil {
					return nil, err
				}
			}
		}
		if err := tab.Begin(); err != nil {
			return nil, err
		}
		ids, rows = ids[:0], rows[:0]
		for _, e := range b.Entries {
			if _, err := tab.Add(a, e.ID, len(e.Tokens)); err != nil {
				return nil, err
			}
			ids = append(ids, e.Tokens...)
			if e.Sample {
				rows = append(rows, int32(len(ids)-1))
			}
		}
		st, err := tab.Upload(s)
		if err != nil {
			return nil, err
		}
		decode := st.Rows == st.Batch
		var kvRead float64
		if decode {
			for i := 0; i < st.Batch; i++ {
				np := int(st.KVIndptr[i+1] - st.KVIndptr[i])
				kvRead += float64((np-1)*p.PageSize()+int(st.KVLastPageLen[i])) * kvTok
			}
		}
		if sv.timing {
			err = sv.ev[0].Record(s)
		}
		if err == nil && o.Sample && len(rows) > 0 {
			var pb *sampling.Batch
			if pb, err = stepParams(params, b.Entries, byHandle, made, len(rows), cfg.Vocab); err == nil {
				err = p.StepRows(&st, ids, rows, pb)
			}
		} else if err == nil {
			err = p.Step(&st, ids, rows, nil, int(b.Step))
		}
		if err == nil && sv.timing {
			err = sv.ev[1].Record(s)
		}
		if err != nil {
			return nil, err
		}
		hostS += time.Since(th).Seconds()
		sampled = append(sampled[:0], make([]int32, len(rows))...)
		if len(rows) > 0 {
			err = p.Tokens(sampled)
		} else {
			err = s.Synchronize()
		}
		if err != nil {
			return nil, err
		}
		t1 := time.Now()
		if decode {
			res.DecodeSteps++
			decBatch += st.Batch
			res.DecodeBytes += weights + kvRead
			res.DecodeWallS += t1.Sub(t0).Seconds()
			if sv.timing {
				gt, err := core.Elapsed(sv.ev[0], sv.ev[1])
				if err != nil {
					return nil, err
				}
				res.DecodeGPUS += gt.Seconds()
			}
		}
		// first tokens: the entries sampling for the first time
		for _, e := range b.Entries {
			if !e.Sample {
				continue
			}
			i := byHandle[e.Handle]
			made[i]++
			if firstAt[i].IsZero() {
				firstAt[i] = t1
				ttft = append(ttft, t1.Sub(arrival[i]).Seconds()*1e3)
			}
		}
		fin, err := sched.Complete(sampled)
		if err != nil {
			return nil, err
		}
		for _, f := range fin {
			i := byHandle[f.Handle]
			r := &load.Requests[i]
			res.Outputs[i] = append([]int32(nil), f.Output...)
			res.OutputTokens += int64(len(f.Output))
			if len(f.Output) > 1 {
				tpot = append(tpot, t1.Sub(firstAt[i]).Seconds()*1e3/float64(len(f.Output)-1))
			}
			if r.Shared {
				sh := int64(load.Options.Shared)
				sharedAsked += sh
				sharedHit += min(int64(f.CachedTokens), sh)
			}
			delete(byHandle, f.Handle)
			done++
		}
	}
	wall := time.Since(start).Seconds()
	ss := sched.Stats()
	as := a.Stats()
	res.WallS = wall
	res.TokensPerS = float64(res.OutputTokens) / wall
	res.ReqPerS = float64(n) / wall
	res.TTFT, res.TPOT = percentiles(ttft), percentiles(tpot)
	res.PrefixHitRate = as.HitRate()
	if sharedAsked > 0 {
		res.SharedSkipped = float64(sharedHit) / float64(sharedAsked)
	}
	res.CachedTokens, res.PrefillTokens = ss.CachedTokens, ss.PrefillTokens
	res.Steps, res.Preemptions, res.MaxSeqs = ss.Steps, ss.Preemptions, ss.MaxSeqs
	if ss.Steps > 0 {
		res.HostMsPerStep = hostS * 1e3 / float64(ss.Steps)
	}
	if res.DecodeSteps > 0 {
		res.DecodeBatch = float64(decBatch) / float64(res.DecodeSteps)
		res.DecodeGBps = res.DecodeBytes / res.DecodeWallS / 1e9
		if res.DecodeGPUS > 0 {
			res.DecodeGPUGBps = res.DecodeBytes / res.DecodeGPUS / 1e9
		}
		if bandwidth > 0 {
			res.DecodeBWShare = res.DecodeGBps / bandwidth
			res.DecodeGPUShare = res.DecodeGPUGBps / bandwidth
		}
	}
	res.PagesFreeAtEnd, res.LiveAtEnd, res.AllocatorCached = a.FreePages(), a.Live(), a.CachedPages()
	res.GraphCaptures, res.GraphRecaptures = sv.m.GraphCaptures()-caps0, sv.m.GraphRecaptures()-recaps0
	return res, nil
}

// percentiles are v's p50 and p99 (nearest rank).
func percentiles(v []float64) Latency {
	if len(v) == 0 {
		return Latency{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	at := func(q float64) float64 { return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)] }
	return Latency{P50: at(0.5), P99: at(0.99)}
}

func modelName(c llm.Config) string {
	for name, p := range llm.Presets {
		if p.Layers == c.Layers && p.Hidden == c.Hidden && p.Inter == c.Inter && p.Vocab == c.Vocab {
			return name
		}
	}
	return fmt.Sprintf("L%d-H%d-I%d", c.Layers, c.Hidden, c.Inter)
}

// MeasureCopyBandwidth times device-to-device copies of bytes (two
// blocks from the device's pool, returned to it) on s and returns the
// bytes read and written per second, in GB/s, best of reps: a copy reads
// and writes each byte once, so this is the memory's traffic, comparable
// to a read bandwidth.
func MeasureCopyBandwidth(s *core.Stream, bytes, reps int) (float64, error) {
	if bytes <= 0 || reps <= 0 {
		return 0, errors.New("servebench: bandwidth: bytes and reps must be positive")
	}
	p := pool.Of(s.Device())
	src, err := p.Alloc(s, bytes)
	if err != nil {
		return 0, err
	}
	defer src.Free(s)
	dst, err := p.Alloc(s, bytes)
	if err != nil {
		return 0, err
	}
	defer dst.Free(s)
	if err := firstErr(s.Memset(src.View(), 1), s.CopyDevice(dst.View(), src.View())); err != nil {
		return 0, err
	}
	best := math.Inf(1)
	for range reps {
		t, err := s.Time(func() error { return s.CopyDevice(dst.View(), src.View()) })
		if err != nil {
			return 0, err
		}
		best = min(best, t.Seconds())
	}
	if best <= 0 {
		return 0, errors.New("servebench: bandwidth: a copy timed at zero")
	}
	return 2 * float64(bytes) / best / 1e9, nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// SweepOptions are a sweep of arrival rates on one model.
type SweepOptions struct {
	Server ServerOptions
	Load   LoadOptions // Rate is set by the sweep
	// Rates are the arrival rates to run, in order (0: all at once). Nil:
	// auto: first all at once with Load.Requests (the offline capacity C,
	// requests per second), then Fractions of C with SweepRequests each.
	Rates         []float64
	Fractions     []float64
	SweepRequests int // requests of each rate point (0: Load.Requests)
	// Bandwidth is the read bandwidth to compare with (GB/s; How says how
	// it was measured).
	Bandwidth float64
	How       string
	// Deadline, when not zero, skips the rate points that would not end
	// before it (a point's expected time: its requests over its rate, plus
	// the offline run's time).
	Deadline time.Time
	// Emit receives every result and note as it comes (JSON-ready).
	Emit func(v any)
}

// Skip is a rate point left out.
type Skip struct {
	Kind   string  `json:"kind"` // "skip"
	Model  string  `json:"model"`
	Rate   float64 `json:"rate"`
	Reason string  `json:"reason"`
}

// Sweep loads the model once and serves the rate points.
func Sweep(d *core.Device, o SweepOptions) ([]*Result, error) {
	t0 := time.Now()
	sv, err := NewServer(d, o.Server)
	if err != nil {
		return nil, err
	}
	defer sv.Close()
	emit := o.Emit
	if emit == nil {
		emit = func(any) {}
	}
	name := modelName(o.Server.Model)
	emit(map[string]any{"kind": "model", "model": name, "load_s": time.Since(t0).Seconds(),
		"weight_bytes": o.Server.Model.WeightBytes(), "kv_bytes_per_token": o.Server.Model.KVBytesPerToken(),
		"kv_tokens": o.Server.KVTokens, "kv_pages": sv.p.NumPages()})
	var out []*Result
	run := func(rate float64, n int, est time.Duration) error {
		if !o.Deadline.IsZero() && time.Now().Add(est).After(o.Deadline) {
			emit(Skip{Kind: "skip", Model: name, Rate: rate, Reason: fmt.Sprintf("expected %.0f s, %.0f s left before the deadline", est.Seconds(), time.Until(o.Deadline).Seconds())})
			return nil
		}
		lo := o.Load
		lo.Rate, lo.Requests = rate, n
		load, err := NewLoad(lo)
		if err != nil {
			return err
		}
		r, err := sv.Run(load, o.Bandwidth, o.How)
		if err != nil {
			return fmt.Errorf("servebench: %s at rate %g: %w", name, rate, err)
		}
		out = append(out, r)
		emit(r)
		return nil
	}
	sweepN := o.SweepRequests
	if sweepN == 0 {
		sweepN = o.Load.Requests
	}
	if o.Rates != nil {
		for _, r := range o.Rates {
			est := time.Duration(0)
			if r > 0 {
				est = time.Duration(float64(sweepN) / r * float64(time.Second))
			}
			if err := run(r, sweepN, est); err != nil {
				return out, err
			}
		}
		return out, nil
	}
	if err := run(0, o.Load.Requests, 0); err != nil || len(out) == 0 {
		return out, err
	}
	off := out[0]
	capacity := off.ReqPerS
	perReq := time.Duration(off.WallS / float64(off.Requests) * float64(sweepN) * float64(time.Second))
	for _, f := range o.Fractions {
		rate := f * capacity
		if rate <= 0 {
			continue
		}
		est := max(time.Duration(float64(sweepN)/rate*float64(time.Second)), perReq) + perReq/4
		if err := run(rate, sweepN, est); err != nil {
			return out, err
		}
	}
	return out, nil
}
