// SPDX-License-Identifier: Apache-2.0

// Package attnbench times attention over a paged KV cache (ABI 1.5:
// attention.Attention.Plan, attention.Attention.Run) on one GPU; the command
// gpurt-attnbench runs it, and scripts/gpu_attention.sh runs that on the H200 next to FlashInfer's own
// Python API and torch's scaled_dot_product_attention on the same shapes
// (scripts/gpu_attention_ref.py).
//
// Shapes (bf16, 32 query heads, 8 KV heads, head dim 128, page 16, NHD,
// pages assigned in a shuffled order):
//
//   - decode: batch 1, 16, 64 x context 1K and 8K (every request the same
//     length);
//   - prefill (causal): 1 x 1K rows over 1K tokens, 1 x 4K over 4K, 4 x 512
//     new rows over 4K tokens (chunked prefill), 16 x 128 over 2K.
//
// Each figure is GPU time per run: the stream is held by a sleep_ns
// kernel long enough for every timed run to be enqueued behind it, so the
// events measure the device's work; "wall" is the host-inclusive time of
// the same runs without the hold; "plan" is the host time of one
// PlanAttention (which enqueues the schedule's upload). Decode reports the
// KV bytes read per second (K and V of every token, once), prefill TFLOP/s
// (4 * rows * visible tokens * heads * head dim). Every line of output is
// one JSON object; the shell script makes the table.
package attnbench

import (
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"time"

	gbench "github.com/metrale/gpurt/bench"
	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/floatbits"
	"github.com/metrale/gpurt/internal/le"
)

// Result is one figure, one JSON object per line of Run's output.
type Result struct {
	Name   string  `json:"name"`
	Impl   string  `json:"impl"`
	Kind   string  `json:"kind"`
	Batch  int     `json:"batch"`
	KVLen  int     `json:"kv_len"`
	QOLen  int     `json:"qo_len"`
	GPUus  float64 `json:"gpu_us"`
	WallUs float64 `json:"wall_us"`
	PlanUs float64 `json:"plan_us"`
	KVGBs  float64 `json:"kv_gb_s,omitempty"`
	TFLOPs float64 `json:"tflops,omitempty"`
	Note   string  `json:"note,omitempty"`
}

// shape is one benchmark case; the Python reference script has the same
// list (keep them in step).
type shape struct {
	name          string
	prefill       bool
	batch, kv, qo int
}

var shapes = []shape{
	{"decode/b1/kv1k", false, 1, 1024, 1},
	{"decode/b1/kv8k", false, 1, 8192, 1},
	{"decode/b16/kv1k", false, 16, 1024, 1},
	{"decode/b16/kv8k", false, 16, 8192, 1},
	{"decode/b64/kv1k", false, 64, 1024, 1},
	{"decode/b64/kv8k", false, 64, 8192, 1},
	{"prefill/b1/qo1k/kv1k", true, 1, 1024, 1024},
	{"prefill/b1/qo4k/kv4k", true, 1, 4096, 4096},
	{"prefill/b4/qo512/kv4k", true, 4, 4096, 512},
	{"prefill/b16/qo128/kv2k", true, 16, 2048, 128},
}

const (
	hq, hk, dim, page = 32, 8, 128, 16
)

type bench struct {
	dev   *core.Device
	s     *core.Stream
	t     *gbench.GPUTimer
	iters int
	out   *json.Encoder
	rng   *rand.Rand
}

// MaxShrink bounds Options.Shrink.
const MaxShrink = 8192

// Options say what to time and where: Only is "", "decode" or "prefill";
// Shrink divides every length; Out gets one JSON Result per line.
type Options struct {
	gbench.Timed
}

// Check returns an error naming the first option out of range.
func (o Options) Check() error {
	return gbench.CheckTimed(o.Timed, MaxShrink, "decode", "prefill")
}

// Shapes is the number of figures Run writes without Only.
func Shapes() int { return len(shapes) }

// Run times every shape o asks for and writes one Result per line to
// o.Out; a shape that fails is a Result with "error: ..." in its note.
// Writing the output is the one error that ends Run.
func Run(o Options) (err error) {
	if err := gbench.StartTimed("attnbench", o.Check, o.Timed); err != nil {
		return err
	}
	defer gbench.Guard(&err)
	t := o.Timer
	b := &bench{dev: t.Device, s: t.Stream, t: t, iters: o.Iters, out: json.NewEncoder(o.Out),
		rng: rand.New(rand.NewPCG(1, 2))}
	for _, sh := range shapes {
		if (o.Only == "decode" && sh.prefill) || (o.Only == "prefill" && !sh.prefill) {
			continue
		}
		sh.kv = max(1, sh.kv/o.Shrink)
		sh.qo = max(1, min(sh.qo/o.Shrink, sh.kv))
		if !sh.prefill {
			sh.qo = 1
		}
		r, err := b.run(sh)
		if err != nil {
			r = Result{Name: sh.name, Impl: "gpurt", Note: "error: " + err.Error()}
		}
		b.emit(r)
	}
	return nil
}

// fail ends Run with err (bench.Guard returns it).
func fail(err error) { gbench.Abort(err) }

func (b *bench) emit(r Result) {
	if err := b.out.Encode(r); err != nil {
		fail(err)
	}
}

// randomBF16 is n bf16 values uniform in [-1, 1).
func (b *bench) randomBF16(n int) []byte {
	out := make([]byte, 2*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint16(out[2*i:], floatbits.BF16FromFloat32(b.rng.Float32()*2-1))
	}
	return out
}

// fill writes random values into r, repeating a block of at most 16 MiB
// (no larger than r: a shrunk shape on the mock draws no more than it
// uses).
func (b *bench) fill(r *core.Buffer) error {
	return gbench.FillRepeated(r, b.randomBF16(min(8<<20, (r.Len()+1)/2)))
}

func (b *bench) run(sh shape) (Result, error) {
	r := Result{Name: sh.name, Impl: "gpurt", Kind: "decode", Batch: sh.batch, KVLen: sh.kv, QOLen: sh.qo}
	if sh.prefill {
		r.Kind = "prefill"
	}
	pagesPer := (sh.kv + page - 1) / page
	numPages := pagesPer * sh.batch
	desc := attention.KVCacheDesc{DType: core.BF16, Layout: attention.KVLayoutNHD, PageSize: page, NumKVHeads: hk, HeadDim: dim,
		NumPages: numPages}
	cache, err := attention.AllocKVCache(b.dev, desc)
	if err != nil {
		return r, err
	}
	defer cache.Free()
	var bufs []*core.Buffer
	defer func() {
		for _, x := range bufs {
			x.Free()
		}
	}()
	alloc := func(n int) (*core.Buffer, error) {
		x, err := b.dev.Alloc(max(n, 16))
		if err == nil {
			bufs = append(bufs, x)
		}
		return x, err
	}
	// Random K/V: the cache's buffers are its regions.
	for _, reg := range []core.Region{cache.K(), cache.V()} {
		if buf, ok := reg.(*core.Buffer); ok {
			if err := b.fill(buf); err != nil {
				return r, err
			}
		}
	}
	perm := b.rng.Perm(numPages)
	indptr := []int32{0}
	idx := make([]int32, 0, numPages)
	last := make([]int32, 0, sh.batch)
	qoIndptr := []int32{0}
	for i := 0; i < sh.batch; i++ {
		for j := 0; j < pagesPer; j++ {
			idx = append(idx, int32(perm[i*pagesPer+j]))
		}
		indptr = append(indptr, int32(len(idx)))
		last = append(last, int32(sh.kv-(pagesPer-1)*page))
		qoIndptr = append(qoIndptr, qoIndptr[len(qoIndptr)-1]+int32(sh.qo))
	}
	rows := sh.batch * sh.qo
	rowBytes := hq * dim * 2
	q, err := alloc(rows * rowBytes)
	if err != nil {
		return r, err
	}
	o, err := alloc(rows * rowBytes)
	if err != nil {
		return r, err
	}
	if err := b.fill(q); err != nil {
		return r, err
	}
	// The page table and qo_indptr on the device: each array in a buffer
	// of its own, as a view of its bytes.
	var pages [4]core.Region // indptr, indices, last page lengths, qo_indptr
	for i, src := range [][]int32{indptr, idx, last, qoIndptr} {
		x, err := alloc(4 * len(src))
		if err != nil {
			return r, err
		}
		v, err := x.View(0, 4*len(src))
		if err != nil {
			return r, err
		}
		if err := core.CopyFromHost(v, le.Int32s(src)); err != nil {
			return r, err
		}
		pages[i] = v
	}
	ad := attention.Desc{Kind: attention.Decode, NumQOHeads: hq, Cache: desc, MaxBatch: sh.batch}
	sched := attention.Schedule{KVIndptr: indptr, KVLastPageLen: last}
	ops := attention.Operands{Q: q, O: o, Pages: attention.PageTable{Indptr: pages[0], Indices: pages[1], LastPageLen: pages[2]}}
	if sh.prefill {
		ad.Kind = attention.Prefill
		ad.Causal = true
		ad.MaxRows = rows
		sched.QOIndptr = qoIndptr
		ops.QOIndptr = pages[3]
	}
	a, err := attention.New(b.dev, ad)
	if err != nil {
		return r, err
	}
	defer a.Close()
	// Plan host cost: the mean of many plans on an idle stream.
	if err := a.Plan(b.s, sched); err != nil {
		return r, err
	}
	if err := b.s.Synchronize(); err != nil {
		return r, err
	}
	const plans = 200
	t0 := time.Now()
	for i := 0; i < plans; i++ {
		if err := a.Plan(b.s, sched); err != nil {
			return r, err
		}
	}
	r.PlanUs = float64(time.Since(t0).Nanoseconds()) / 1e3 / plans
	if err := b.s.Synchronize(); err != nil {
		return r, err
	}
	gpu, wall, err := b.time(func() error { return a.Run(b.s, cache, ops) })
	if err != nil {
		return r, err
	}
	r.GPUus, r.WallUs = gpu, wall
	if sh.prefill {
		// Causal: row i of a request sees kv - qo + i + 1 tokens.
		vis := 0.0
		for i := 0; i < sh.qo; i++ {
			vis += float64(sh.kv - sh.qo + i + 1)
		}
		flops := 4 * vis * float64(sh.batch) * hq * dim
		r.TFLOPs = flops / (gpu * 1e-6) / 1e12
	} else {
		bytes := float64(sh.batch) * float64(sh.kv) * hk * dim * 2 * 2
		r.KVGBs = bytes / (gpu * 1e-6) / 1e9
	}
	return r, nil
}

// time is b.t.Time with b.iters calls (bench.GPUTimer.Time).
func (b *bench) time(fn func() error) (gpu, wall float64, err error) {
	return b.t.Time(b.iters, fn)
}
