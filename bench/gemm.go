// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/floatbits"
	"github.com/metrale/gpurt/internal/stats"
)

// gemmShape is one GEMM to time: D (m x n) = op(A) * B with A stored
// k x m and transposed (weights in row-major order, as a model keeps
// them), B k x n, all bf16 with f32 accumulation.
type gemmShape struct {
	metric  string
	m, n, k int
	unit    string // "TFLOP/s" or "us"
}

func (g gemmShape) desc() core.GemmDesc {
	return core.GemmDesc{AType: core.BF16, BType: core.BF16, DType: core.BF16, TransA: true, M: g.m, N: g.n, K: g.k}
}

func (g gemmShape) flops() float64 { return 2 * float64(g.m) * float64(g.n) * float64(g.k) }

// bytes is the memory a run must touch at least (A, B read, D written).
func (g gemmShape) bytes() float64 {
	return 2 * (float64(g.m)*float64(g.k) + float64(g.k)*float64(g.n) + float64(g.m)*float64(g.n))
}

// shapes are the GEMMs for this backend: on a GPU the set
// (8192^3, the decode shapes, a prefill); on the mock (a CPU reference)
// 256^3, and the smallest decode shape unless Quick.
func (r *runner) shapes() []gemmShape {
	decode := func(m, n, k int) gemmShape {
		return gemmShape{fmt.Sprintf("gemm_decode_%dx%dx%d_us", m, n, k), m, n, k, "us"}
	}
	if r.gpu {
		return []gemmShape{
			{"gemm_bf16_8192_tflops", 8192, 8192, 8192, "TFLOP/s"},
			decode(14336, 1, 4096), decode(14336, 16, 4096), decode(14336, 64, 4096), decode(4096, 1, 4096),
			{"gemm_prefill_14336x2048x4096_tflops", 14336, 2048, 4096, "TFLOP/s"},
		}
	}
	out := []gemmShape{{"gemm_bf16_256_tflops", 256, 256, 256, "TFLOP/s"}}
	if !r.opts.Quick {
		out = append(out, decode(4096, 1, 4096), decode(14336, 1, 4096))
	}
	return out
}

// gemmOperands allocates A, B and D for g, with random bf16 values in
// [-1, 1) in A and B. free releases them.
func (r *runner) gemmOperands(g gemmShape, seed uint64) (ops core.GemmOperands, free func(), err error) {
	var bufs []*core.Buffer
	free = func() {
		for _, b := range bufs {
			_ = b.Free()
		}
	}
	alloc := func(n int, random bool) (*core.Buffer, error) {
		b, err := r.dev.Alloc(n)
		if err != nil {
			return nil, err
		}
		bufs = append(bufs, b)
		if random {
			err = fillBF16(b, seed+uint64(len(bufs)))
		}
		return b, err
	}
	a, err := alloc(2*g.m*g.k, true)
	if err == nil {
		var b, d *core.Buffer
		if b, err = alloc(2*g.k*g.n, true); err == nil {
			if d, err = alloc(2*g.m*g.n, false); err == nil {
				ops = core.GemmOperands{A: a, B: b, D: d, Alpha: 1}
			}
		}
	}
	if err != nil {
		free()
	}
	return ops, free, err
}

// fillBF16 fills buf with random bf16 values in [-1, 1): a random block of
// up to 4 MiB, copied over the buffer.
func fillBF16(buf *core.Buffer, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	block := make([]byte, min(buf.Len(), 4<<20))
	for i := 0; i+1 < len(block); i += 2 {
		binary.LittleEndian.PutUint16(block[i:], floatbits.BF16FromFloat32(rng.Float32()*2-1))
	}
	return FillRepeated(buf, block)
}

// FillRepeated copies block over buf from its start, again and again, the
// last copy cut at buf's end (block must not be empty).
func FillRepeated(buf *core.Buffer, block []byte) error {
	for off := 0; off < buf.Len(); off += len(block) {
		n := min(len(block), buf.Len()-off)
		v, err := buf.View(off, n)
		if err != nil {
			return err
		}
		if err := core.CopyFromHost(v, block[:n]); err != nil {
			return err
		}
	}
	return nil
}

// gemm times each shape with events around many runs (after a warm-up;
// the median of several trials), then the host cost of one warm Gemm
// call, then prints the op cache's counters.
func (r *runner) gemm() error {
	s := r.stream
	_, _, minor := inspect.PluginVersion(r.rt)
	if minor < 1 {
		r.rep.note("gemm: skipped: the plugin speaks ABI 1.%d; GEMM needs 1.1", minor)
		return nil
	}
	for i, g := range r.shapes() {
		ops, free, err := r.gemmOperands(g, uint64(i)*16)
		if err != nil {
			return fmt.Errorf("%s: operands: %w", g.metric, err)
		}
		per, err := r.timeGemm(g, ops)
		free()
		if errors.Is(err, core.ErrUnsupported) {
			r.rep.note("gemm: %s skipped: %v", g.metric, err)
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", g.metric, err)
		}
		sec := per.Seconds()
		tflops := g.flops() / sec / 1e12
		res := Result{Metric: g.metric, Unit: g.unit}
		note := fmt.Sprintf("m=%d n=%d k=%d bf16, f32 accumulation", g.m, g.n, g.k)
		if g.unit == "us" {
			res.Value = sec * 1e6
			note += fmt.Sprintf("; %.3g TFLOP/s, %.3g GB/s of operands", tflops, g.bytes()/sec/1e9)
		} else {
			res.Value = tflops
			note += fmt.Sprintf("; %.4g us per run", sec*1e6)
		}
		res.Note = note
		r.rep.add(res)
	}
	if err := r.gemmHost(); err != nil {
		return err
	}
	st := inspect.OpCache(r.rt)
	r.rep.add(Result{Metric: "opcache_hits", Value: float64(st.Hits), Unit: "count"})
	r.rep.add(Result{Metric: "opcache_misses", Value: float64(st.Misses), Unit: "count"})
	r.rep.add(Result{Metric: "opcache_evictions", Value: float64(st.Evictions), Unit: "count",
		Note: fmt.Sprintf("%d of %d plans cached", st.Size, st.Capacity)})
	return s.Synchronize()
}

// timeGemm returns the device time of one run of g: warm-up runs, one
// timed run to size the batch, then the median of trials batches timed
// with events.
func (r *runner) timeGemm(g gemmShape, ops core.GemmOperands) (time.Duration, error) {
	s, desc := r.stream, g.desc()
	run := func(k int) func() error {
		return func() error {
			for i := 0; i < k; i++ {
				if err := s.Gemm(desc, ops); err != nil {
					return err
				}
			}
			return nil
		}
	}
	warm := 2 // the mock's CPU GEMM is slow; a GPU warms up 10 runs, as bench/raw does
	if r.gpu {
		warm = 10
	}
	if err := run(warm)(); err != nil {
		return 0, err
	}
	if err := s.Synchronize(); err != nil {
		return 0, err
	}
	one, err := s.Time(run(1))
	if err != nil {
		return 0, err
	}
	// batches of about 100 ms (20 ms with Quick), 5 trials (3), as
	// bench/raw's gemm_batched_us
	target, trials := 100*time.Millisecond, 5
	if r.opts.Quick {
		target, trials = 20*time.Millisecond, 3
	}
	k := 1
	if one > 0 {
		k = min(max(int(target/one), 1), 1000)
	}
	if one > time.Second {
		r.progressf("%s: %.1f s per run", g.metric, one.Seconds())
	}
	if one*time.Duration(trials) > 10*time.Second {
		trials = 1
	}
	per := make([]float64, 0, trials)
	for t := 0; t < trials; t++ {
		d, err := s.Time(run(k))
		if err != nil {
			return 0, err
		}
		per = append(per, float64(d)/float64(k))
	}
	return time.Duration(stats.Median(per)), nil
}

// gemmHost measures the host cost of one Stream.Gemm call with a warm op
// cache: batches of calls timed without the synchronize after them. The
// shape is small on the mock (its CPU work would back the stream up) and
// a decode GEMV on a GPU.
func (r *runner) gemmHost() error {
	g := gemmShape{"gemm_host_us", 64, 64, 64, "us"}
	if r.gpu {
		g = gemmShape{"gemm_host_us", 4096, 1, 4096, "us"}
	}
	ops, free, err := r.gemmOperands(g, 99)
	if err != nil {
		return err
	}
	defer free()
	s, desc := r.stream, g.desc()
	if err := s.Gemm(desc, ops); err != nil { // warm the op cache
		if errors.Is(err, core.ErrUnsupported) {
			r.rep.note("gemm: gemm_host_us skipped: %v", err)
			return nil
		}
		return err
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	// batches of 20 calls, each drained before the next (as bench/raw
	// times cublasLtMatmul's host cost)
	batch, trials := 20, 100
	if r.opts.Quick {
		trials = 20
	}
	var gerr error
	loop := func(n int) {
		for i := 0; i < n; i++ {
			if err := s.Gemm(desc, ops); err != nil && gerr == nil {
				gerr = err
			}
		}
	}
	per := make([]float64, 0, trials)
	for t := 0; t < trials; t++ {
		t0 := time.Now()
		loop(batch)
		per = append(per, float64(time.Since(t0).Nanoseconds())/1e3/float64(batch))
		if err := s.Synchronize(); err != nil {
			return err
		}
	}
	allocs := AllocsPerOp(loop, batch)
	if err := s.Synchronize(); err != nil {
		return err
	}
	if gerr != nil {
		return gerr
	}
	r.rep.add(Result{Metric: "gemm_host_us", Value: stats.Median(per), Unit: "us",
		Note: fmt.Sprintf("one Stream.Gemm enqueue, warm op cache (m=%d n=%d k=%d bf16)", g.m, g.n, g.k)})
	r.rep.add(Result{Metric: "gemm_allocs", Value: allocs, Unit: "allocs/op", Note: "goal 0"})
	r.addCgoPair("gemm_host_us", "gemm_host_cgoproc_us")
	return nil
}
