// SPDX-License-Identifier: Apache-2.0

// Package quantbench times the 1.4 ops against cuBLASLt on one GPU (the
// command gpurt-quantbench runs it; scripts/gpu_quant_bench.sh runs that
// on the H200):
//
//   - int8 GEMV (Stream.QuantMatmul, MLX format, group 64) vs bf16 W
//     through Stream.Gemm (cuBLASLt; on CUDA, the plugin's own GEMV for
//     n <= 4 unless GPURT_CUDA_GEMV_MAX_N says otherwise) at 4096x4096, 14336x4096 and 4096x14336
//     (m x k: a decoder's o, gate and down projections), n = 1 and 8
//     (the decode GEMV) and 16, 32, 64 (batched decode: the skinny GEMV),
//     and at n = 1 the decoders' other projection shapes (8B's fused QKV
//     and gate/up, 1B's four), and at n = 32 8B's fused QKV and gate/up;
//   - int8 GEMM at n = 2048 vs bf16 cuBLASLt;
//   - grouped GEMM (Stream.GroupedGemm, bf16 and fp8 with block scales) of
//     8 and 64 experts with skewed row counts vs one cuBLASLt GEMM per
//     expert (Stream.Gemm; fp8 there has per-tensor scales, the same work);
//   - with -only decode16 alone: the bf16 GEMM slot at the decoder's
//     projection shapes, n = 1, 2, 4, 8 (the GEMV's crossover).
//
// Each figure is GPU time per call: the stream is first held by a sleep_ns
// kernel long enough for every timed call to be enqueued behind it, so the
// events measure the device's work, not the host's enqueueing; "wall" is
// the host-inclusive time of the same calls without the sleep. Every line of
// output is one JSON object (Result); the shell script makes the table.
package quantbench

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"

	gbench "github.com/metrale/gpurt/bench"
	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/matmul"
	"github.com/metrale/gpurt/floatbits"
	"github.com/metrale/gpurt/internal/le"
)

// Result is one figure, one JSON object per line of Run's output.
type Result struct {
	Name   string  `json:"name"`
	Impl   string  `json:"impl"`
	GPUus  float64 `json:"gpu_us"`
	WallUs float64 `json:"wall_us"`
	TFLOPs float64 `json:"tflops"`
	GBs    float64 `json:"gb_s"`
	Note   string  `json:"note,omitempty"`
	// MSizes are a grouped case's rows per expert (for the torch script).
	MSizes []int `json:"m_sizes,omitempty"`
	// Sets is how many weight sets the calls took in turn (-rotate).
	Sets int `json:"sets,omitempty"`
}

type bench struct {
	dev    *core.Device
	s      *core.Stream
	t      *gbench.GPUTimer
	iters  int
	rotate int // MiB of weights the timed calls rotate through (quantVsBF16)
	shrink int
	out    *json.Encoder
	rng    *rand.Rand
}

// ImplBF16 is the Impl of the rows timing bf16 W through Stream.Gemm.
const ImplBF16 = "gpurt bf16 gemm"

// ImplGroupedCounts is the impl of the grouped GEMM's rows with the row
// counts on the device (ABI 1.11).
const ImplGroupedCounts = "gpurt grouped, counts on device"

// MaxShrink bounds Options.Shrink: every size divided by it is still at
// least 1.
const MaxShrink = 2048

// Options say what to time and where: Only is "", "gemv", "gemm",
// "grouped" or "decode16" (the bf16 GEMM slot alone at decode shapes, not
// part of ""); Shrink divides every size (K stays a multiple of 128); Out
// gets one JSON Result per line.
type Options struct {
	gbench.Timed
	// RotateMiB: the int8 and bf16 matmuls rotate through copies of the
	// weights spanning this many MiB (0: one copy; rows get " rot").
	RotateMiB int
}

// Check returns an error naming the first option out of range.
func (o Options) Check() error {
	if err := gbench.CheckTimed(o.Timed, MaxShrink, "gemv", "gemm", "grouped", "decode16"); err != nil {
		return err
	}
	if o.RotateMiB < 0 || o.RotateMiB > 1<<20 {
		return fmt.Errorf("rotate %d: want 0 to %d MiB", o.RotateMiB, 1<<20)
	}
	return nil
}

// Run times every figure o asks for and writes one Result per line to
// o.Out. A failed op is a Result with the error in its note; a failed
// setup step (an allocation, a copy, the output) ends Run with the error.
func Run(o Options) (err error) {
	if err := gbench.StartTimed("quantbench", o.Check, o.Timed); err != nil {
		return err
	}
	defer gbench.Guard(&err)
	t := o.Timer
	b := &bench{dev: t.Device, s: t.Stream, t: t, iters: o.Iters, rotate: o.RotateMiB, shrink: o.Shrink,
		out: json.NewEncoder(o.Out), rng: rand.New(rand.NewPCG(7, 11))}
	if o.Only == "" || o.Only == "gemv" {
		for _, mk := range [][2]int{{4096, 4096}, {14336, 4096}, {4096, 14336}} {
			for _, n := range []int{1, 8, 16, 32, 64} {
				b.quantVsBF16(mk[0], n, mk[1])
			}
		}
		// The decoders' other one-token shapes: 8B's fused QKV and gate/up,
		// 1B's QKV, output, gate/up and down projections (m x k).
		for _, mk := range [][2]int{{6144, 4096}, {28672, 4096}, {3072, 2048}, {2048, 2048}, {16384, 2048}, {2048, 8192}} {
			b.quantVsBF16(mk[0], 1, mk[1])
		}
		// 8B's fused QKV and gate/up at batch 32 (the skinny GEMV's shapes
		// in the batch-32 decoder besides the three above).
		for _, mk := range [][2]int{{6144, 4096}, {28672, 4096}} {
			b.quantVsBF16(mk[0], 32, mk[1])
		}
	}
	if o.Only == "decode16" {
		b.decode16()
	}
	if o.Only == "" || o.Only == "gemm" {
		for _, mk := range [][2]int{{4096, 4096}, {14336, 4096}} {
			b.quantVsBF16(mk[0], 2048, mk[1])
		}
	}
	if o.Only == "" || o.Only == "grouped" {
		for _, g := range []int{8, 64} {
			for _, fp8 := range []bool{false, true} {
				b.grouped(g, fp8)
			}
		}
	}
	return nil
}

// fail ends Run with err (bench.Guard returns it).
func fail(err error) { gbench.Abort(err) }

// shrunk is v divided by the shrink, rounded up to a multiple of align (K:
// the int8 group of 64, fp8's 128-wide block scales) and at least align.
func (b *bench) shrunk(v, align int) int {
	v /= b.shrink
	return max(align, (v+align-1)/align*align)
}

// time is bench.GPUTimer.Time with b.iters calls. ops is the number of
// launches one fn makes: iters shrinks so that at most 800 wait behind the
// sleep (a stream's queue holds about a thousand before the host blocks,
// which would put host time back into the figure).
func (b *bench) time(ops int, fn func() error) (gpu, wall float64, err error) {
	iters := b.iters
	if iters*ops > 800 {
		iters = max(2, 800/ops)
	}
	return b.t.Time(iters, fn)
}

func (b *bench) emit(r Result) {
	if err := b.out.Encode(r); err != nil {
		fail(err)
	}
}

// alloc is a device buffer of n bytes filled by fill (nil: an output,
// left as allocated).
func (b *bench) alloc(n int, fill func([]byte)) *core.Buffer {
	buf, err := b.dev.Alloc(n)
	if err != nil {
		fail(err)
	}
	if fill == nil {
		return buf
	}
	data := make([]byte, n)
	fill(data)
	if err := core.CopyFromHost(buf, data); err != nil {
		fail(err)
	}
	return buf
}

func (b *bench) randBF16(p []byte) {
	for i := 0; i+1 < len(p); i += 2 {
		binary.LittleEndian.PutUint16(p[i:], floatbits.BF16FromFloat32(float32(b.rng.NormFloat64())))
	}
}

func (b *bench) randBytes(p []byte) {
	for i := range p {
		p[i] = byte(b.rng.Uint32())
	}
}

// b.randFP8 fills e4m3 values of moderate size (no NaN).
func (b *bench) randFP8(p []byte) {
	for i := range p {
		p[i] = floatbits.E4M3FromFloat32(float32(b.rng.NormFloat64() * 4))
	}
}

func (b *bench) randScale(p []byte) {
	for i := 0; i+3 < len(p); i += 4 {
		binary.LittleEndian.PutUint32(p[i:], math.Float32bits(float32(0.01*(0.5+b.rng.Float64()))))
	}
}

func (b *bench) scaleBF16(p []byte) {
	for i := 0; i+1 < len(p); i += 2 {
		binary.LittleEndian.PutUint16(p[i:], floatbits.BF16FromFloat32(float32(0.01*(0.5+b.rng.Float64()))))
	}
}

// quantVsBF16 times y (n x m) = x (n x k) * W^T: int8 W (MLX, group 64)
// against bf16 W through cuBLASLt (column-major D = W x^T, "TN").
func (b *bench) quantVsBF16(m, n, k int) {
	m, k = b.shrunk(m, 1), b.shrunk(k, 64)
	if n > 8 {
		n = b.shrunk(n, 1)
	}
	name := fmt.Sprintf("%dx%d n=%d", m, k, n)
	if b.rotate > 0 {
		name += " rot"
	}
	x := b.alloc(2*n*k, b.randBF16)
	defer x.Free()
	y := b.alloc(2*n*m, nil)
	defer y.Free()
	flops := 2 * float64(m) * float64(n) * float64(k)
	{
		d := matmul.QuantDesc{XType: core.BF16, ScaleType: core.BF16, Bits: 8, GroupSize: 64, M: m, N: n, K: k}
		sets := b.sets(m*k + 4*m*k/64)
		ops := make([]matmul.QuantOperands, sets)
		for i := range ops {
			ops[i] = matmul.QuantOperands{W: b.alloc(m*k, b.randBytes), Scales: b.alloc(2*m*k/64, b.scaleBF16),
				Biases: b.alloc(2*m*k/64, b.scaleBF16), X: x, Y: y}
		}
		call := 0
		gpu, wall, err := b.time(1, func() error {
			call++
			return matmul.Quant(b.s, d, ops[call%sets])
		})
		r := Result{Name: name, Impl: "gpurt int8", GPUus: gpu, WallUs: wall, Sets: sets,
			TFLOPs: flops / gpu / 1e6, GBs: float64(m*k+4*m*k/64+2*n*k+2*n*m) / gpu / 1e3}
		if err != nil {
			r.Note = err.Error()
		}
		b.emit(r)
		for _, o := range ops {
			o.W.(*core.Buffer).Free()
			o.Scales.(*core.Buffer).Free()
			o.Biases.(*core.Buffer).Free()
		}
	}
	b.bf16(name, m, n, k, x, y, nil)
}

// sets is how many copies of an implementation's weights (bytes each) the
// timed calls take in turn: enough to span -rotate MiB, so that a weight
// set that fits the GPU's L2 (50 MB on the H200) is not read from the
// cache by the next call; 1 with -rotate 0 (every call reads one set).
func (b *bench) sets(bytes int) int {
	if b.rotate <= 0 {
		return 1
	}
	n := (b.rotate<<20 + bytes - 1) / bytes
	return min(max(n, 1), 16)
}

// skewed splits total rows over g experts with weights 1/(i+1) (some
// experts get none when g is large), as a router's load often is.
func skewed(g, total int) []int {
	ms := make([]int, g)
	var sum float64
	for i := range ms {
		sum += 1 / float64(i+1)
	}
	left := total
	for i := range ms {
		ms[i] = int(float64(total) / float64(i+1) / sum)
		left -= ms[i]
	}
	ms[0] += left
	// a few empty experts
	if g >= 16 {
		ms[0] += ms[g-1] + ms[g/2]
		ms[g-1], ms[g/2] = 0, 0
	}
	return ms
}

// grouped times the grouped GEMM of g experts (n 2048, k 4096, skewed m)
// against one cuBLASLt GEMM per expert.
func (b *bench) grouped(g int, fp8 bool) {
	n, k := b.shrunk(2048, 1), b.shrunk(4096, 128)
	total := b.shrunk(8192, 1)
	if g == 64 {
		total = b.shrunk(16384, 1)
	}
	ms := skewed(g, total)
	kind := "bf16"
	es := 2
	fillAB := b.randBF16
	ab := core.BF16
	if fp8 {
		kind, es, fillAB, ab = "fp8", 1, b.randFP8, core.FP8E4M3
	}
	name := fmt.Sprintf("%d experts %s n=%d k=%d rows=%d (max %d)", g, kind, n, k, total, ms[0])
	a := b.alloc(total*k*es, fillAB)
	defer a.Free()
	w := b.alloc(g*n*k*es, fillAB)
	defer w.Free()
	d := b.alloc(2*total*n, nil)
	defer d.Free()
	flops := 2 * float64(total) * float64(n) * float64(k)
	ops := matmul.GroupedOperands{A: a, B: w, D: d}
	if fp8 {
		sa := b.alloc(4*total*k/128, b.randScale)
		defer sa.Free()
		sb := b.alloc(4*g*((n+127)/128)*(k/128), b.randScale)
		defer sb.Free()
		ops.ScaleA, ops.ScaleB = sa, sb
	}
	desc := matmul.GroupedDesc{ABType: ab, DType: core.BF16, N: n, K: k, MSizes: ms}
	gpu, wall, err := b.time(1, func() error { return matmul.Grouped(b.s, desc, ops) })
	r := Result{Name: name, Impl: "gpurt grouped", GPUus: gpu, WallUs: wall, TFLOPs: flops / gpu / 1e6, MSizes: ms}
	if err != nil {
		r.Note = err.Error()
	}
	b.emit(r)
	// The same counts on the device (ABI 1.11): no host shapes, so on
	// CUDA the own kernel with a grid of the most tiles MaxM allows.
	counts := b.alloc(4*g, func(p []byte) { copy(p, le.Uint32sOf(ms)) })
	defer counts.Free()
	dops := ops
	dops.Counts = counts
	ddesc := matmul.GroupedDesc{ABType: ab, DType: core.BF16, N: n, K: k, Groups: g, MaxM: total}
	gpu, wall, err = b.time(1, func() error { return matmul.Grouped(b.s, ddesc, dops) })
	r = Result{Name: name, Impl: ImplGroupedCounts, GPUus: gpu, WallUs: wall, TFLOPs: flops / gpu / 1e6, MSizes: ms}
	if err != nil {
		r.Note = err.Error()
	}
	b.emit(r)
	// One cuBLASLt GEMM per expert: D_e (col-major n x m_e) = W_e x_e^T.
	var one *core.Buffer
	if fp8 {
		one = b.alloc(4, func(p []byte) { binary.LittleEndian.PutUint32(p, math.Float32bits(1)) })
		defer one.Free()
	}
	type call struct {
		d core.GemmDesc
		o core.GemmOperands
	}
	var calls []call
	row := 0
	for e, m := range ms {
		if m == 0 {
			continue
		}
		av, _ := a.View(row*k*es, m*k*es)
		wv, _ := w.View(e*n*k*es, n*k*es)
		dv, _ := d.View(row*n*2, m*n*2)
		c := call{d: core.GemmDesc{AType: ab, BType: ab, DType: core.BF16, TransA: true, M: n, N: m, K: k},
			o: core.GemmOperands{A: wv, B: av, D: dv, Alpha: 1}}
		if fp8 {
			c.o.ScaleA, c.o.ScaleB = one, one
		}
		calls = append(calls, c)
		row += m
	}
	gpu, wall, err = b.time(len(calls), func() error {
		for i := range calls {
			if err := b.s.Gemm(calls[i].d, calls[i].o); err != nil {
				return err
			}
		}
		return nil
	})
	r = Result{Name: name, Impl: "cuBLASLt per expert", GPUus: gpu, WallUs: wall, TFLOPs: flops / gpu / 1e6,
		Note: fmt.Sprintf("%d calls", len(calls))}
	if fp8 {
		r.Note += "; per-tensor scales (cuBLASLt), same work"
	}
	if err != nil {
		r.Note = err.Error()
	}
	b.emit(r)
}

// bf16 times the same y = x W^T with bf16 W through Stream.Gemm (the GEMM
// slot: cuBLASLt, or the CUDA plugin's GEMV for a few tokens), x and y
// given (n x k, n x m); ws: the weight sets to take in turn (nil: made
// here and freed after).
func (b *bench) bf16(name string, m, n, k int, x, y *core.Buffer, ws []*core.Buffer) {
	b.bf16Pro(name, m, n, k, x, y, ws, nil, false)
}

// bf16Pro is bf16 with a GEMM prologue (ABI 1.10): x's RMSNorm by norm
// (norm non-nil), or swiglu (x holds G then U, 2 n k values).
func (b *bench) bf16Pro(name string, m, n, k int, x, y *core.Buffer, ws []*core.Buffer, norm *core.Buffer, swiglu bool) {
	if ws == nil {
		ws = b.weights16(m, k)
		defer freeAll(ws)
	}
	d := core.GemmDesc{AType: core.BF16, BType: core.BF16, DType: core.BF16, TransA: true, M: m, N: n, K: k,
		RMSNormB: norm != nil, SwiGLUB: swiglu}
	ops := core.GemmOperands{B: x, D: y, Alpha: 1}
	xBytes := 2 * n * k
	switch {
	case norm != nil:
		ops.NormWeight, ops.NormEps = norm, 1e-5
		xBytes += 2 * k
	case swiglu:
		xBytes *= 2
	}
	call := 0
	gpu, wall, err := b.time(1, func() error {
		call++
		ops.A = ws[call%len(ws)]
		return b.s.Gemm(d, ops)
	})
	r := Result{Name: name, Impl: ImplBF16, GPUus: gpu, WallUs: wall, Sets: len(ws),
		TFLOPs: 2 * float64(m) * float64(n) * float64(k) / gpu / 1e6, GBs: float64(2*m*k+xBytes+2*n*m) / gpu / 1e3}
	if err != nil {
		r.Note = err.Error()
	}
	b.emit(r)
}

// weights16 is b.sets copies of one random bf16 m x k matrix.
func (b *bench) weights16(m, k int) []*core.Buffer {
	ws := make([]*core.Buffer, b.sets(2*m*k))
	ws[0] = b.alloc(2*m*k, b.randBF16)
	for i := 1; i < len(ws); i++ {
		ws[i] = b.alloc(2*m*k, nil)
		if err := b.s.CopyDevice(ws[i], ws[0]); err != nil {
			fail(err)
		}
	}
	if err := b.s.Synchronize(); err != nil {
		fail(err)
	}
	return ws
}

func freeAll(bs []*core.Buffer) {
	for _, b := range bs {
		b.Free()
	}
}

// decode16 times the bf16 GEMM slot alone at the decoder's shapes (m x k of
// the 8B- and 1B-class presets' projections: QKV, O, gate/up, down) for 1,
// 2, 4 and 8 tokens: the GEMV's crossover against cuBLASLt is read from two
// runs, one with GPURT_CUDA_GEMV_MAX_N=0 (scripts/gpu_gemv.sh). Then one
// token with each GEMM prologue (ABI 1.10), rows "... n=1 rmsnorm" and
// "... n=1 swiglu": what the norm or silu_mul costs inside the GEMV (a
// backend that refuses them gives the rows with the refusal as the note).
func (b *bench) decode16() {
	for _, mk := range [][2]int{{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336},
		{3072, 2048}, {2048, 2048}, {16384, 2048}, {2048, 8192}} {
		m, k := b.shrunk(mk[0], 1), b.shrunk(mk[1], 64)
		ws := b.weights16(m, k)
		for _, n := range []int{1, 2, 4, 8} {
			name := fmt.Sprintf("%dx%d n=%d", m, k, n)
			if b.rotate > 0 {
				name += " rot"
			}
			x := b.alloc(2*n*k, b.randBF16)
			y := b.alloc(2*n*m, nil)
			b.bf16(name, m, n, k, x, y, ws)
			x.Free()
			y.Free()
		}
		rot := ""
		if b.rotate > 0 {
			rot = " rot"
		}
		x, y, norm := b.alloc(4*k, b.randBF16), b.alloc(2*m, nil), b.alloc(2*k, b.randBF16)
		b.bf16Pro(fmt.Sprintf("%dx%d n=1 rmsnorm%s", m, k, rot), m, 1, k, x, y, ws, norm, false)
		b.bf16Pro(fmt.Sprintf("%dx%d n=1 swiglu%s", m, k, rot), m, 1, k, x, y, ws, nil, true)
		freeAll([]*core.Buffer{x, y, norm})
		freeAll(ws)
	}
}
