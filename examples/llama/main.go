// SPDX-License-Identifier: Apache-2.0

// Command llama runs a Llama-style decoder through gpurt: a Hugging Face
// checkpoint (-model DIR: Llama, Mistral or Qwen2 safetensors) or weights
// generated from a seed (-preset, the same as scripts/llama_torch.py's),
// prefill of the prompts, then decode steps over a paged KV cache, eagerly
// and replayed as graphs (each step's launches and GEMMs between two
// attentions are one graph; the KV appends and attentions stay eager, as
// graphs do not record them). Output: JSON lines, one per step (tokens of
// every request, with -logits the f32 logits of request 0), one summary
// per run (tokens per second; host_us_per_step, the host time of a decode
// step less its waits, and of it host_launch_us_per_step, the step
// graph's launch calls, host_plan_us_per_step, the attention plan, and
// host_stage_us_per_step, the step's inputs computed and uploaded, and
// of that host_upload_us_per_step, the upload's driver calls),
// and with -model one load line (GB, GB/s).
//
//	llama -preset 1b -batch 1,32 -ctx 1024,8192 -steps 32 -modes eager,graph
//	llama -preset tiny -backend mock -prompt 8 -steps 8 -logits
//	llama -model ~/Llama-3.2-1B -prompt-ids 128000,791,6864 -steps 16
//	llama -model DIR -batch 8 -prompt-file prompts.txt -force-file next.txt -steps 65 -logits-out 'out/{batch}.f32'
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/cli"
	"github.com/metrale/gpurt/llm"
)

// usageError is a bad command line: one line naming the flag, exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q is not a list of non-negative integers", s)
		}
		out = append(out, v)
	}
	return out, nil
}

// idLists parses token ids: requests separated by ';' (or lines), ids by
// ',' or spaces.
func idLists(s string) ([][]int32, error) {
	var out [][]int32
	for _, req := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == '\n' }) {
		req = strings.TrimSpace(req)
		if req == "" {
			continue
		}
		var ids []int32
		for _, f := range strings.FieldsFunc(req, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\r' }) {
			v, err := strconv.ParseInt(f, 10, 32)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("%q is not a token id", f)
			}
			ids = append(ids, int32(v))
		}
		if len(ids) == 0 { // separators only (","): no request, as a blank line
			continue
		}
		out = append(out, ids)
	}
	if len(out) == 0 {
		return nil, errors.New("no token ids")
	}
	return out, nil
}

func main() { cli.Main(run) }

const about = `Runs a Llama-style decoder through gpurt: a Hugging Face checkpoint (-model
DIR: Llama, Mistral or Qwen2 safetensors) or weights generated from a seed
(-preset), a prefill of the prompts, then decode steps over a paged KV
cache, eager and replayed as graphs. Prints JSON lines: one per step
(every request's tokens), one summary per run, and with -model a load line.`

// run is the command; it returns the exit status (cli's convention).
func run(args []string, stdout, stderr io.Writer) int {
	fs := cli.New("llama", "[flags]", about, stdout, stderr)
	model := fs.String("model", "", "Hugging Face model directory (config.json, *.safetensors); instead of -preset")
	preset := fs.String("preset", "tiny", "seeded weights: tiny, 1b or 8b (the size flags override its fields)")
	layers := fs.Int("layers", 0, "seeded: decoder layers")
	hidden := fs.Int("hidden", 0, "seeded: hidden size")
	heads := fs.Int("heads", 0, "seeded: query heads")
	kvHeads := fs.Int("kv-heads", 0, "seeded: KV heads")
	inter := fs.Int("inter", 0, "seeded: MLP intermediate size")
	vocab := fs.Int("vocab", 0, "seeded: vocabulary")
	theta := fs.Float64("theta", 0, "seeded: rotary base")
	rope := fs.String("rope", "neox", "seeded: rotary style, neox (half-split) or llama (interleaved)")
	seed := fs.Uint64("seed", 1, "seeded: weights seed (and the generated prompt's)")
	unfused := fs.Bool("unfused", false, "build the model without the built-ins after ABI 1.8 (add_rmsnorm_T, rope_neox_freqs_T) and without GEMM prologues: the same tokens, more launches")
	noRope := fs.Bool("no-rope-append", false, "build the model without the rotary embedding in the KV append (ABI 1.10, with -rope-scaling): rope_neox_freqs_T in a launch of its own, as on a plugin that refuses it")
	prefetchL2 := fs.Int("prefetch-l2", 0, "MiB of each layer's output projection and gate/up weights to ask into the L2 just before its decode attention (llm.Options.PrefetchL2MiB; CUDA on sm_90 only; 0: off)")
	noPro := fs.Bool("no-prologues", false, "build the model without GEMM prologues (ABI 1.10: at batch 1 the norms and silu_mul inside the projections' GEMMs): kernels of their own, as on a plugin that refuses them")
	ropeScaling := fs.String("rope-scaling", "none", "seeded: rope scaling, none or llama3 (Llama 3.1's: factor 8, low 1, high 4, 8192 original positions)")
	weights := fs.String("weights", "bf16", "bf16; int8 (MLX affine, group 64) for the blocks' linears (quantized at load); int8-all: the LM head too (bf16 logits, as MLX and gpt-fast's int8)")
	batches := fs.String("batch", "1", "batch sizes, comma-separated")
	ctxs := fs.String("ctx", "0", "context lengths (zero K/V already in the cache), comma-separated")
	prompt := fs.Int("prompt", 1, "generated prompt: tokens per request (1: decode at once; more: prefill)")
	promptIDs := fs.String("prompt-ids", "", "prompt token ids, e.g. 1,5,9 (';' between requests' prompts, ragged; one prompt: every request)")
	promptFile := fs.String("prompt-file", "", "file of prompt token ids, one request per line")
	forceFile := fs.String("force-file", "", "file of teacher-forced token ids, one request per line: the k-th id is fed as the k-th token after the prompt")
	steps := fs.Int("steps", 8, "tokens picked per request (a prefill's counts as the first)")
	warm := fs.Int("warmup", 2, "untimed decode steps before each timed run")
	modes := fs.String("modes", "eager,graph", "eager, graph or both")
	logits := fs.Bool("logits", false, "emit request 0's logits every step (synchronizes every step)")
	logitsN := fs.Int("logits-n", 512, "with -logits: how many of request 0's logits (the first ones; 0: all)")
	logitsOut := fs.String("logits-out", "", "write every step's f32 logits of all requests ([step][request][vocab], little-endian) to this file; {batch}, {ctx} and {mode} in the name are replaced")
	temp := fs.Float64("temperature", 0, "sampling temperature (0: greedy)")
	topK := fs.Int("top-k", 0, "sampling: keep the top k (0: all)")
	topP := fs.Float64("top-p", 1, "sampling: nucleus mass")
	sampleSeed := fs.Uint64("sample-seed", 1, "sampling seed")
	progress := fs.String("progress", "auto", "loading progress: auto (a bar on a terminal, else one line), bar, line or none")
	idle := fs.Bool("idle-steps", false, "wait for the device before each timed decode step, so that host_us_per_step is the bare cost of enqueueing a step (tokens/s are then not pipelined)")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the whole run to this file (go tool pprof reads it)")
	rf := fs.Runtime("", "gpurt backend (auto, cuda, metal, mock)")
	if status, ok := fs.Parse(args, false); !ok {
		return status
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "llama: -cpuprofile %s: %v\n", *cpuProfile, err)
			return cli.ExitError
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				fmt.Fprintf(stderr, "llama: -cpuprofile %s: %v\n", *cpuProfile, err)
			}
		}()
	}
	err := func() error {
		if *model != "" {
			for _, f := range []string{"preset", "layers", "hidden", "heads", "kv-heads", "inter", "vocab", "theta", "rope", "seed", "rope-scaling"} {
				if fs.Given(f) {
					return usagef("-%s sets seeded weights; it makes no sense with -model", f)
				}
			}
		}
		nPromptSrc := 0
		for _, f := range []string{"prompt", "prompt-ids", "prompt-file"} {
			if fs.Given(f) {
				nPromptSrc++
			}
		}
		if nPromptSrc > 1 {
			return usagef("-prompt, -prompt-ids and -prompt-file exclude each other")
		}
		if fs.Given("logits-n") && !*logits {
			return usagef("-logits-n is ignored without -logits")
		}
		for _, f := range []string{"top-k", "top-p", "sample-seed"} {
			if fs.Given(f) && *temp <= 0 {
				return usagef("-%s is ignored without -temperature above 0", f)
			}
		}
		var sampling *llm.Sampling
		if *temp > 0 {
			if *topK < 0 || !(*topP > 0 && *topP <= 1) {
				return usagef("-top-k %d must not be negative and -top-p %g must be in (0, 1]", *topK, *topP)
			}
			sampling = &llm.Sampling{TopK: *topK, TopP: float32(*topP), Temperature: float32(*temp), Seed: *sampleSeed}
		} else if *temp < 0 {
			return usagef("-temperature %g is negative", *temp)
		}
		switch *progress {
		case "auto", "bar", "line", "none":
		default:
			return usagef("-progress %q is not auto, bar, line or none", *progress)
		}
		if _, ok := llm.Presets[*preset]; !ok && *model == "" {
			return usagef("-preset %q is not tiny, 1b or 8b", *preset)
		}
		if *weights != "bf16" && *weights != "int8" && *weights != "int8-all" {
			return usagef("-weights %q is not bf16, int8 or int8-all", *weights)
		}
		bs, err := ints(*batches)
		if err != nil {
			return usagef("-batch: %v", err)
		}
		cs, err := ints(*ctxs)
		if err != nil {
			return usagef("-ctx: %v", err)
		}
		var ms []string
		for _, m := range strings.Split(*modes, ",") {
			if m != "eager" && m != "graph" {
				return usagef("-modes: %q is neither eager nor graph", m)
			}
			ms = append(ms, m)
		}
		if *prompt < 1 || *steps < 1 || *warm < 0 {
			return usagef("-prompt %d and -steps %d must be at least 1, -warmup %d not negative", *prompt, *steps, *warm)
		}
		maxB, maxC := 0, 0
		for _, b := range bs {
			if b == 0 {
				return usagef("-batch: batch sizes must be positive")
			}
			maxB = max(maxB, b)
		}
		for _, c := range cs {
			maxC = max(maxC, c)
		}
		if *logitsOut != "" && len(bs)*len(cs)*len(ms) > 1 {
			for _, ph := range []struct {
				n    int
				name string
			}{{len(bs), "{batch}"}, {len(cs), "{ctx}"}, {len(ms), "{mode}"}} {
				if ph.n > 1 && !strings.Contains(*logitsOut, ph.name) {
					return usagef("-logits-out %q: several runs need %s in the name", *logitsOut, ph.name)
				}
			}
		}
		var prompts [][]int32 // explicit prompts (nil: generated)
		switch {
		case *promptIDs != "":
			if prompts, err = idLists(*promptIDs); err != nil {
				return usagef("-prompt-ids: %v", err)
			}
		case *promptFile != "":
			raw, err := os.ReadFile(*promptFile)
			if err != nil {
				return err
			}
			if prompts, err = idLists(string(raw)); err != nil {
				return fmt.Errorf("-prompt-file %s: %w", *promptFile, err)
			}
		}
		if prompts != nil && len(prompts) != 1 && len(prompts) < maxB {
			return usagef("%d prompts for a batch of %d (give one for every request, or one for all)", len(prompts), maxB)
		}
		var force [][]int32 // [request][k]
		if *forceFile != "" {
			raw, err := os.ReadFile(*forceFile)
			if err != nil {
				return err
			}
			if force, err = idLists(string(raw)); err != nil {
				return fmt.Errorf("-force-file %s: %w", *forceFile, err)
			}
			if len(force) != 1 && len(force) < maxB {
				return usagef("-force-file: %d lines for a batch of %d (one per request, or one for all)", len(force), maxB)
			}
		}
		maxP := *prompt
		for _, p := range prompts {
			maxP = max(maxP, len(p))
		}

		rt, dev, err := rf.Open(core.Config{})
		if err != nil {
			return err
		}
		defer rt.Close()
		out := json.NewEncoder(stdout)
		opts := llm.Options{Batch: maxB, MaxLen: maxC + maxP + *steps + *warm + 1, MaxPrompt: maxP, Int8: *weights != "bf16",
			Int8Head: *weights == "int8-all", Unfused: *unfused, NoPrologues: *noPro, NoRopeAppend: *noRope,
			PrefetchL2MiB: *prefetchL2}
		var m *llm.Model
		var cfg llm.Config
		if *model != "" {
			cfg, err = llm.ReadConfig(*model)
			if err != nil {
				return err
			}
			cfg.Int8, cfg.Int8Head = opts.Int8, opts.Int8Head
			bar := newProgress(*progress, stderr)
			opts.Progress = bar.update
			m, err = llm.LoadConfig(dev, *model, cfg, opts)
			bar.finish()
			if err != nil {
				return err
			}
			st := m.LoadStats
			fmt.Fprintf(stderr, "llama: loaded %s: %.2f GB of bf16 weights (%.2f GB of files) in %.2f s, %.2f GB/s (%.2f s with the caches and buffers)\n",
				*model, float64(st.Bytes)/1e9, float64(st.FileBytes)/1e9, st.Elapsed.Seconds(), st.GBps(), st.Total.Seconds())
			_ = out.Encode(map[string]any{"kind": "load", "impl": "gpurt", "model": *model, "gb": float64(st.Bytes) / 1e9,
				"file_gb": float64(st.FileBytes) / 1e9, "seconds": st.Elapsed.Seconds(), "gbps": st.GBps(), "total_seconds": st.Total.Seconds()})
		} else {
			var ok bool
			cfg, ok = llm.Presets[*preset]
			if !ok {
				return usagef("-preset %q is not tiny, 1b or 8b", *preset)
			}
			cfg.Eps, cfg.Seed, cfg.Rope, cfg.Int8, cfg.Int8Head = 1e-5, *seed, *rope, opts.Int8, opts.Int8Head
			for _, o := range []struct {
				v   int
				dst *int
			}{{*layers, &cfg.Layers}, {*hidden, &cfg.Hidden}, {*heads, &cfg.Heads}, {*kvHeads, &cfg.KVHeads}, {*inter, &cfg.Inter}, {*vocab, &cfg.Vocab}} {
				if o.v != 0 {
					*o.dst = o.v
				}
			}
			if *theta != 0 {
				cfg.Theta = *theta
			}
			switch *ropeScaling {
			case "none":
			case "llama3":
				cfg.Scaling = &llm.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPos: 8192, AttentionFactor: 1}
			default:
				return usagef("-rope-scaling %q is neither none nor llama3", *ropeScaling)
			}
			if m, err = llm.NewModelWith(dev, cfg, opts); err != nil {
				return err
			}
		}
		defer m.Close()
		cfg = m.Config()
		_ = out.Encode(map[string]any{"kind": "config", "impl": "gpurt", "backend": rt.Backend(), "preset": *preset, "model": *model,
			"family": cfg.Family, "layers": cfg.Layers, "hidden": cfg.Hidden, "heads": cfg.Heads, "kv_heads": cfg.KVHeads,
			"head_dim": cfg.HeadDim(), "inter": cfg.Inter, "vocab": cfg.Vocab, "theta": cfg.Theta, "rope": cfg.Rope,
			"rope_scaling": cfg.Scaling, "tied": cfg.Tied, "qkv_bias": cfg.QKVBias, "seed": cfg.Seed, "weights": *weights, "unfused": *unfused, "no_prologues": *noPro,
			"prologues": m.Prologues(), "no_rope_append": *noRope, "rope_append": m.RopeInAppend()})
		var failed error
		for _, b := range bs {
			if err := m.SetBatch(b); err != nil {
				return err
			}
			for _, c := range cs {
				var reqs [][]int32
				if prompts != nil {
					for i := 0; i < b; i++ {
						reqs = append(reqs, prompts[min(i, len(prompts)-1)])
					}
				} else {
					p := llm.PromptTokens(cfg.Seed, b, *prompt, cfg.Vocab)
					for i := 0; i < b; i++ {
						reqs = append(reqs, p[i**prompt:(i+1)**prompt])
					}
				}
				var forced [][]int32 // [k][request]
				if force != nil {
					n := len(force[0])
					for i := 0; i < b; i++ {
						n = min(n, len(force[min(i, len(force)-1)]))
					}
					for k := 0; k < n; k++ {
						row := make([]int32, b)
						for i := range row {
							row[i] = force[min(i, len(force)-1)][k]
						}
						forced = append(forced, row)
					}
				}
				for _, mode := range ms {
					o := llm.GenOptions{Prompts: reqs, Ctx: c, Graph: mode == "graph", Force: forced, Sample: sampling, Idle: *idle}
					var r *llm.Run
					var err error
					if *warm > 0 {
						o.Steps = *warm
						_, err = m.Generate(rt, o)
					}
					if err == nil {
						o.Steps, o.Collect = *steps, *logits || *logitsOut != ""
						r, err = m.Generate(rt, o)
					}
					if err == nil && *logitsOut != "" {
						err = writeLogits(expand(*logitsOut, b, c, mode), r.Logits)
					}
					if err != nil { // reported; the other runs go on
						failed = fmt.Errorf("batch %d ctx %d %s: %w", b, c, mode, err)
						fmt.Fprintln(stderr, "llama:", failed)
						_ = out.Encode(map[string]any{"kind": "error", "impl": "gpurt", "mode": mode, "batch": b, "ctx": c, "error": failed.Error()})
						continue
					}
					for i, tk := range r.Tokens {
						line := map[string]any{"kind": "step", "impl": "gpurt", "mode": mode, "batch": b, "ctx": c, "step": i, "tokens": tk}
						if *logits {
							n := cfg.Vocab
							if *logitsN > 0 {
								n = min(n, *logitsN)
							}
							line["logits"] = finite(r.Logits[i][:n])
						}
						_ = out.Encode(line)
					}
					sum := map[string]any{"kind": "summary", "impl": "gpurt", "mode": mode, "batch": b, "ctx": c, "weights": *weights,
						"decode_steps": r.Decoded, "preset": *preset, "model": *model, "idle_steps": *idle}
					if *logitsOut != "" {
						sum["logits_file"] = expand(*logitsOut, b, c, mode)
						sum["logits_shape"] = []int{len(r.Logits), b, cfg.Vocab}
					}
					if mode == "graph" {
						// one launch when the plugin records the whole step; else the
						// op kinds it does not record broke the step into segments
						n, broke, _ := m.GraphInfo(sampling != nil)
						sum["graph_launches_per_step"] = n
						sum["graph_broken_by"] = append([]string{}, broke...)
						sum["graph_recaptures"] = m.GraphRecaptures() // since the model was made: all runs so far
					}
					if r.Decoded > 0 {
						sum["host_us_per_step"] = r.HostTime.Seconds() / float64(r.Decoded) * 1e6
						// of it: the step graph's launch calls (0 eagerly) and the attention plan
						sum["host_launch_us_per_step"] = r.LaunchTime.Seconds() / float64(r.Decoded) * 1e6
						sum["host_plan_us_per_step"] = r.PlanTime.Seconds() / float64(r.Decoded) * 1e6
						sum["host_stage_us_per_step"] = r.StageTime.Seconds() / float64(r.Decoded) * 1e6
						sum["host_upload_us_per_step"] = r.UploadTime.Seconds() / float64(r.Decoded) * 1e6
						per := r.DecodeTime.Seconds() / float64(r.Decoded)
						sum["ms_per_step"] = per * 1e3
						sum["tokens_per_s"] = float64(b) / per
					}
					_ = out.Encode(sum)
				}
			}
		}
		return failed
	}()
	var ue usageError
	switch {
	case err == nil:
		return cli.ExitOK
	case errors.As(err, &ue):
		return fs.Usage("%s", ue.msg)
	default:
		return fs.Fail(err)
	}
}

// finite maps NaN and infinities (which JSON cannot hold) to null.
func finite(v []float32) []any {
	out := make([]any, len(v))
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			out[i] = nil
		} else {
			out[i] = x
		}
	}
	return out
}

func expand(name string, b, c int, mode string) string {
	return strings.NewReplacer("{batch}", strconv.Itoa(b), "{ctx}", strconv.Itoa(c), "{mode}", mode).Replace(name)
}

// writeLogits writes [step][request][vocab] f32, little-endian.
func writeLogits(path string, logits [][]float32) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var b [4]byte
	for _, step := range logits {
		for _, v := range step {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
			if _, err := w.Write(b[:]); err != nil {
				_ = f.Close()
				return err
			}
		}
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// loadProgress shows the upload: a bar on a terminal, else nothing until
// the one summary line.
type loadProgress struct {
	bar  *progressbar.ProgressBar
	last time.Time
}

func newProgress(mode string, w io.Writer) *loadProgress {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	if mode == "bar" || (mode == "auto" && tty) {
		return &loadProgress{bar: progressbar.NewOptions64(-1, progressbar.OptionSetWriter(w), progressbar.OptionShowBytes(true),
			progressbar.OptionSetDescription("loading"), progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish())}
	}
	return &loadProgress{}
}

func (p *loadProgress) update(done, total int64) {
	if p.bar == nil {
		return
	}
	if p.bar.GetMax64() != total {
		p.bar.ChangeMax64(total)
	}
	_ = p.bar.Set64(done)
}

func (p *loadProgress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
