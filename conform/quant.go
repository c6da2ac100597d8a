// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/core/matmul"
	"github.com/metrale/gpurt/internal/le"
	"github.com/metrale/gpurt/quant"
)

// The 1.4 ops: quantized matmul in MLX's int8 affine format and the
// grouped GEMM of mixture-of-experts, against float64 references on
// random data. A plugin older than ABI 1.4 skips them.
//
// Tolerance, per element: 2^-7 |ref| (an output rounding of bf16, with
// room for a second one) + c * sqrt(sum_j (x_j w_j)^2), where c allows
// what a GPU legitimately does: quant_matmul may round dequantized weights
// to 16 bits before its tensor cores (c = 2^-6), a grouped GEMM
// accumulates in f32 (c = 2^-12), except that an fp8 one with block scales
// gets c = 2^-10: sm_90's fp8 tensor cores (wgmma e4m3) keep only about 14
// bits while they sum the products of one 128-deep scale block, before the
// f32 promotion that applies the block's scales (DeepSeek-V3's report,
// section 3.3.2; CUTLASS's and DeepGEMM's blockwise kernels work this
// way). On the H200 CUTLASS's blockwise kernel is off by up to ~4e-4 of
// sqrt(sum (a_p b_p)^2) there (1.3x the 16-bit c). A wrong block scale is
// off by a tenth of that norm or more and still fails, as does anything
// else above. A failure reports the worst element and how many failed.

type quantCase struct {
	xt, st  core.DType
	m, n, k int
	gs      int
	sample  int  // reference elements checked (0: all)
	wide    bool // x spread over 2^-20 .. 2^20 (past f16's range, for kernels that scale x)
}

type groupedCase struct {
	fp8    bool
	n, k   int
	ms     []int
	sample int
	maxM   int   // > 0: the counts on the device (1.11), A and D of maxM rows
	ms2    []int // with maxM: counts written between two replays of a graph of the call
}

func has14(e *env) error {
	if _, _, minor := inspect.PluginVersion(e.rt); minor < 4 {
		return skip("the plugin speaks ABI 1.%d; quantized and grouped matmul need 1.4", minor)
	}
	return nil
}

func quantChecks() []check {
	var cs []check
	qc := func(name string, c quantCase) {
		cs = append(cs, check{"quant/" + name, func(e *env) error { return runQuantCase(e, c) }})
	}
	for _, n := range []int{1, 3, 8} { // decode
		qc(fmt.Sprintf("bf16_g64_n%d", n), quantCase{xt: core.BF16, st: core.BF16, m: 136, n: n, k: 512, gs: 64})
	}
	qc("f16_g32_n2", quantCase{xt: core.F16, st: core.F16, m: 72, n: 2, k: 256, gs: 32})
	qc("f16_g64_n4", quantCase{xt: core.F16, st: core.F16, m: 40, n: 4, k: 256, gs: 64})
	qc("bf16_g64_n2_wide_x", quantCase{xt: core.BF16, st: core.BF16, m: 48, n: 2, k: 512, gs: 64, wide: true})
	qc("bf16_f16scales_g128_n5", quantCase{xt: core.BF16, st: core.F16, m: 40, n: 5, k: 384, gs: 128})
	qc("f16_bf16scales_g64_n1_k32x", quantCase{xt: core.F16, st: core.BF16, m: 33, n: 1, k: 96 * 2, gs: 32})
	// Decode edges: k below one 64-deep step, fewer rows than a block, k
	// ending inside a 128-deep batch, m across blocks of 32.
	qc("f16_g32_n7_k32_m5", quantCase{xt: core.F16, st: core.F16, m: 5, n: 7, k: 32, gs: 32})
	qc("bf16_g32_n4_k1056", quantCase{xt: core.BF16, st: core.BF16, m: 97, n: 4, k: 1056, gs: 32})
	// Decode over more rows than a GPU has SMs x 16 with a partial last
	// block, a k of 3 x 512, fewer rows than one mma tile, f16 x with bf16
	// scales in groups of 128, all 8 tokens.
	qc("bf16_g64_n6_k1536_m2300", quantCase{xt: core.BF16, st: core.BF16, m: 2300, n: 6, k: 1536, gs: 64})
	qc("bf16_f16scales_g64_n1_k512_m3", quantCase{xt: core.BF16, st: core.F16, m: 3, n: 1, k: 512, gs: 64})
	qc("f16_bf16scales_g128_n8_k2048_m50", quantCase{xt: core.F16, st: core.BF16, m: 50, n: 8, k: 2048, gs: 128})
	// One token over more rows than a GPU has SMs x 16 (CUDA: the register
	// GEMV; with GPURT_CUDA_QGEMV=ring the ring GEMV, k in 512-deep chunks
	// through shared memory, blocks taking several row groups), a partial
	// last block of rows, both x types, groups of 64 and 128, x past f16's
	// range.
	qc("bf16_g64_n1_k1536_m2300", quantCase{xt: core.BF16, st: core.BF16, m: 2300, n: 1, k: 1536, gs: 64})
	qc("f16_bf16scales_g128_n1_k1024_m2210", quantCase{xt: core.F16, st: core.BF16, m: 2210, n: 1, k: 1024, gs: 128})
	qc("bf16_f16scales_g128_n1_k512_m2120_wide_x", quantCase{xt: core.BF16, st: core.F16, m: 2120, n: 1, k: 512, gs: 128, wide: true})
	// Batched decode, 8 < n <= 64 (CUDA: the skinny GEMV, 2, 4 or 8
	// n-tiles of 8 tokens, the last one partial): factored (groups of 64,
	// 128) and dequantizing (32) forms, both x types, a partial row block.
	qc("bf16_g64_n12_m200", quantCase{xt: core.BF16, st: core.BF16, m: 200, n: 12, k: 512, gs: 64})
	qc("bf16_g64_n32_k1024", quantCase{xt: core.BF16, st: core.BF16, m: 96, n: 32, k: 1024, gs: 64})
	qc("f16_bf16scales_g128_n27", quantCase{xt: core.F16, st: core.BF16, m: 72, n: 27, k: 768, gs: 128})
	qc("bf16_g32_n57_m41", quantCase{xt: core.BF16, st: core.BF16, m: 41, n: 57, k: 352, gs: 32})
	qc("f16_g64_n64", quantCase{xt: core.F16, st: core.F16, m: 64, n: 64, k: 256, gs: 64})
	// Deep k at n <= 32 (the skinny GEMV's 64-deep steps split among its
	// warps, the last row block partial).
	qc("bf16_g32_n20_m136_k2048", quantCase{xt: core.BF16, st: core.BF16, m: 136, n: 20, k: 2048, gs: 32})
	for _, gs := range []int{32, 64, 128} { // prefill
		qc(fmt.Sprintf("bf16_g%d_n77", gs), quantCase{xt: core.BF16, st: core.BF16, m: 200, n: 77, k: 384, gs: gs})
	}
	qc("f16_g64_n130", quantCase{xt: core.F16, st: core.F16, m: 136, n: 130, k: 256, gs: 64})
	// CUDA's CUTLASS prefill on sm_90: bf16 x in a 2 x 1 cluster of
	// 128-row tiles, here 3 of them (an odd count) with the last partial,
	// f16 scales in groups of 128 (two of CUTLASS's 64-deep k tiles each).
	qc("bf16_f16scales_g128_n300_m264", quantCase{xt: core.BF16, st: core.F16, m: 264, n: 300, k: 512, gs: 128})
	cs = append(cs, check{"quant/large", func(e *env) error {
		c := quantCase{xt: core.BF16, st: core.BF16, m: 512, n: 64, k: 1024, gs: 64, sample: 2048}
		if !e.opts.Quick && e.dev.Info().Arch != "cpu" {
			c.m, c.n, c.k = 4096, 512, 4096
		}
		return runQuantCase(e, c)
	}})
	cs = append(cs, check{"quant/large_decode", func(e *env) error {
		c := quantCase{xt: core.BF16, st: core.BF16, m: 1024, n: 8, k: 1024, gs: 64, sample: 2048}
		if !e.opts.Quick && e.dev.Info().Arch != "cpu" {
			c.m, c.k = 14336, 4096
		}
		return runQuantCase(e, c)
	}})
	cs = append(cs, check{"quant/large_decode_n1", func(e *env) error {
		c := quantCase{xt: core.BF16, st: core.BF16, m: 1024, n: 1, k: 1024, gs: 64, sample: 2048}
		if !e.opts.Quick && e.dev.Info().Arch != "cpu" {
			c.m, c.k = 14336, 4096
		}
		return runQuantCase(e, c)
	}})
	gc := func(name string, c groupedCase) {
		cs = append(cs, check{"grouped/" + name, func(e *env) error { return runGroupedCase(e, c) }})
	}
	gc("bf16_skewed", groupedCase{n: 192, k: 256, ms: []int{1, 0, 37, 5, 130, 0, 2, 9}})
	gc("bf16_one_group", groupedCase{n: 64, k: 64, ms: []int{19}})
	gc("bf16_odd_n", groupedCase{n: 72, k: 136, ms: []int{7, 64, 3}})
	gc("fp8_skewed", groupedCase{fp8: true, n: 320, k: 384, ms: []int{3, 0, 70, 1, 129, 16}})
	gc("fp8_one_group", groupedCase{fp8: true, n: 128, k: 128, ms: []int{33}})
	gc("all_empty", groupedCase{n: 64, k: 64, ms: []int{0, 0, 0}})
	// n not a multiple of 8: CUDA's CUTLASS path refuses it (TMA stores of D),
	// so these run the plugin's own grouped kernel there.
	gc("bf16_n_not_8x", groupedCase{n: 60, k: 72, ms: []int{5, 130, 0, 2}})
	gc("fp8_n_not_8x", groupedCase{fp8: true, n: 100, k: 256, ms: []int{17, 0, 140}})
	// Several tiles in every direction, groups across tile edges.
	gc("bf16_medium", groupedCase{n: 264, k: 512, ms: []int{300, 1, 129, 0, 520, 64}})
	gc("fp8_medium", groupedCase{fp8: true, n: 384, k: 640, ms: []int{257, 3, 0, 128, 411}})
	// The row counts on the device (1.11): counts below MaxM (D's last
	// rows untouched), a group cut at MaxM and the ones after it empty, 70
	// groups (CUDA: two launches), and a graph replayed with other counts.
	gc("counts_bf16", groupedCase{n: 72, k: 136, ms: []int{7, 0, 64, 3}, maxM: 100})
	gc("counts_bf16_cut", groupedCase{n: 40, k: 64, ms: []int{70, 0, 130, 20, 9}, maxM: 180})
	gc("counts_fp8", groupedCase{fp8: true, n: 100, k: 256, ms: []int{17, 0, 140, 5}, maxM: 170})
	gc("counts_many_groups", groupedCase{n: 24, k: 32, ms: manyCounts(70), maxM: 200})
	gc("counts_graph", groupedCase{n: 64, k: 64, ms: []int{5, 30, 0, 12}, maxM: 64, ms2: []int{40, 0, 9, 30}})
	cs = append(cs, check{"grouped/large", func(e *env) error {
		c := groupedCase{fp8: true, n: 512, k: 512, ms: []int{200, 3, 57, 0, 128, 64, 1, 90}, sample: 2048}
		if !e.opts.Quick && e.dev.Info().Arch != "cpu" {
			c.n, c.k = 2048, 4096
			c.ms = []int{1024, 17, 300, 0, 2048, 5, 640, 128}
		}
		if err := runGroupedCase(e, c); err != nil {
			return err
		}
		c.fp8 = false
		return runGroupedCase(e, c)
	}})
	cs = append(cs, check{"quant/misuse", quantMisuse})
	return cs
}

// elemTol is the tolerance of one element (see the top of this file).
func elemTol(ref, norm2, c float64) float64 {
	return math.Abs(ref)/128 + c*math.Sqrt(norm2) + 1e-30
}

// upload allocates a buffer holding data followed by 64 bytes of 0xff.
func uploadPadded(e *env, data []byte) (*core.Buffer, error) {
	b, err := e.dev.Alloc(len(data) + 64)
	if err != nil {
		return nil, err
	}
	if err := firstErr(core.Memset(b, 0xff), core.CopyFromHost(b, data)); err != nil {
		b.Free()
		return nil, err
	}
	return b, nil
}

// readChecked reads n elements of t from b, checks that none is left NaN
// (the poison) and that the 64 bytes after them are untouched.
func readChecked(b *core.Buffer, t core.DType, n int) ([]float64, error) {
	raw := make([]byte, n*t.Size()+64)
	if err := core.CopyToHost(raw, b); err != nil {
		return nil, err
	}
	for i, c := range raw[n*t.Size():] {
		if c != 0xff {
			return nil, fmt.Errorf("byte %d past the output's end was written", i)
		}
	}
	v := decode(t, raw[:n*t.Size()])
	for i, x := range v {
		if math.IsNaN(x) {
			return nil, fmt.Errorf("output element %d was not written (still poison) or is NaN", i)
		}
	}
	return v, nil
}

// quickSample is the number of reference elements a Quick run on a CPU
// device (the mock) checks of a case that checks all of them otherwise:
// there the reference (in Go) costs more than the plugin's kernel, and
// several times more under the race detector (make test's -race -short
// pass). Every output element is still checked written (readChecked);
// the shapes are the same; GPUs check every element in Quick runs too.
const quickSample = 4096

// sampleOf is c's sample count (0: all) on e.
func sampleOf(e *env, sample int) int {
	if sample == 0 && e.opts.Quick && e.dev.Info().Arch == "cpu" {
		return quickSample
	}
	return sample
}

func pick(e *env, total, sample, i int) int {
	if sample == 0 || sample >= total {
		return i
	}
	return e.rng.IntN(total)
}

func runQuantCase(e *env, c quantCase) error {
	if err := has14(e); err != nil {
		return err
	}
	w := make([]float32, c.m*c.k)
	for i := range w {
		w[i] = float32(e.rng.NormFloat64())
	}
	q, err := quant.Quantize(w, c.m, c.k, quant.Options{GroupSize: c.gs, Bits: 8, ScaleType: c.st})
	if err != nil {
		return err
	}
	xv := randomValues(e.rng, c.xt, c.n*c.k, 1)
	if c.wide {
		for i := range xv {
			xv[i] = roundTo(c.xt, math.Ldexp(xv[i], e.rng.IntN(41)-20))
		}
	}
	var bufs []*core.Buffer
	defer func() {
		for _, b := range bufs {
			b.Free()
		}
	}()
	up := func(data []byte) (*core.Buffer, error) {
		b, err := uploadPadded(e, data)
		if err == nil {
			bufs = append(bufs, b)
		}
		return b, err
	}
	yPoison := make([]byte, 2*c.n*c.m)
	poison(yPoison)
	var ops matmul.QuantOperands
	for _, u := range []struct {
		dst  *core.Region
		data []byte
	}{{&ops.W, q.Q}, {&ops.Scales, q.Scales}, {&ops.Biases, q.Biases}, {&ops.X, encode(c.xt, xv)}, {&ops.Y, yPoison}} {
		b, err := up(u.data)
		if err != nil {
			return err
		}
		*u.dst = b
	}
	return withStream(e, func(s *core.Stream) error {
		desc := matmul.QuantDesc{XType: c.xt, ScaleType: c.st, Bits: 8, GroupSize: c.gs, M: c.m, N: c.n, K: c.k}
		if err := firstErr(matmul.Quant(s, desc, ops), s.Synchronize()); err != nil {
			return err
		}
		got, err := readChecked(ops.Y.(*core.Buffer), c.xt, c.n*c.m)
		if err != nil {
			return err
		}
		c.sample = sampleOf(e, c.sample)
		deq := make([]float64, c.k)
		total := c.n * c.m
		count := total
		if c.sample > 0 && c.sample < total {
			count = c.sample
		}
		for i := 0; i < count; i++ {
			idx := pick(e, total, c.sample, i)
			tok, row := idx/c.m, idx%c.m
			for j := range deq {
				deq[j] = q.Scale(row, j)*float64(q.Code(row, j)) + q.Bias(row, j)
			}
			ref, norm2 := 0.0, 0.0
			for j := 0; j < c.k; j++ {
				p := xv[tok*c.k+j] * deq[j]
				ref += p
				norm2 += p * p
			}
			if d := math.Abs(got[idx] - ref); d > elemTol(ref, norm2, 1.0/64) {
				return fmt.Errorf("y[%d][%d] = %g, reference %g (difference %.3g, tolerance %.3g)", tok, row, got[idx], ref, d, elemTol(ref, norm2, 1.0/64))
			}
		}
		return nil
	})
}

func f32Bytes(v []float64) []byte {
	out := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(float32(f)))
	}
	return out
}

func runGroupedCase(e *env, c groupedCase) error {
	if err := has14(e); err != nil {
		return err
	}
	if c.fp8 && !e.dev.Info().FP8 {
		return skip("the device has no fp8")
	}
	dev := c.maxM > 0 // the row counts on the device (1.11)
	if _, _, minor := inspect.PluginVersion(e.rt); dev && minor < 11 {
		return skip("the plugin speaks ABI 1.%d; row counts on the device need 1.11", minor)
	}
	rows := sum(c.ms) // the rows of A and D
	if dev {
		rows = c.maxM
	}
	G := len(c.ms)
	ab := core.BF16
	r := 1.0
	if c.fp8 {
		ab, r = core.FP8E4M3, 16
	}
	av := randomValues(e.rng, ab, rows*c.k, r)
	bv := randomValues(e.rng, ab, G*c.n*c.k, r)
	kb, nb := c.k/128, (c.n+127)/128
	var sa, sb []float64
	if c.fp8 {
		sa = make([]float64, rows*kb)
		sb = make([]float64, G*nb*kb)
		for i := range sa {
			sa[i] = float64(float32(0.25 + e.rng.Float64()))
		}
		for i := range sb {
			sb[i] = float64(float32(1.0 / 64 * (0.5 + e.rng.Float64())))
		}
	}
	var bufs []*core.Buffer
	defer func() {
		for _, b := range bufs {
			b.Free()
		}
	}()
	up := func(data []byte) (*core.Buffer, error) {
		if len(data) == 0 {
			data = []byte{}
		}
		b, err := uploadPadded(e, data)
		if err == nil {
			bufs = append(bufs, b)
		}
		return b, err
	}
	dPoison := make([]byte, 2*rows*c.n)
	poison(dPoison)
	var ops matmul.GroupedOperands
	type upload struct {
		dst  *core.Region
		data []byte
	}
	in := []upload{{&ops.A, encode(ab, av)}, {&ops.B, encode(ab, bv)}, {&ops.D, dPoison}}
	if c.fp8 {
		in = append(in, upload{&ops.ScaleA, f32Bytes(sa)}, upload{&ops.ScaleB, f32Bytes(sb)})
	}
	if dev {
		in = append(in, upload{&ops.Counts, le.Uint32sOf(c.ms)})
	}
	for _, u := range in {
		b, err := up(u.data)
		if err != nil {
			return err
		}
		*u.dst = b
	}
	// check compares D with the float64 reference of counts ms (cut at
	// rows), and, with device counts, D's rows past them with the poison.
	check := func(ms []int) error {
		ms = cutCounts(ms, rows)
		total := sum(ms)
		if dev {
			raw := make([]byte, 2*rows*c.n)
			if err := core.CopyToHost(raw, ops.D); err != nil {
				return err
			}
			for i, b := range raw[2*total*c.n:] {
				if b != 0xff {
					return fmt.Errorf("D byte %d past the counts' %d rows was written (counts %v, MaxM %d)", 2*total*c.n+i, total, c.ms, rows)
				}
			}
		}
		got, err := readChecked(ops.D.(*core.Buffer), core.BF16, total*c.n)
		if err != nil || total == 0 {
			return err
		}
		return groupedAgainstRef(e, c, ms, got, av, bv, sa, sb)
	}
	return withStream(e, func(s *core.Stream) error {
		desc := matmul.GroupedDesc{ABType: ab, DType: core.BF16, N: c.n, K: c.k, MSizes: c.ms}
		if dev {
			desc.MSizes, desc.Groups, desc.MaxM = nil, G, rows
		}
		if !dev || c.ms2 == nil {
			err := firstErr(matmul.Grouped(s, desc, ops), s.Synchronize())
			if dev && errors.Is(err, core.ErrUnsupported) {
				return skip("the plugin refuses row counts on the device: %v", err)
			}
			if err != nil {
				return err
			}
			return check(c.ms)
		}
		// Recorded, then replayed with the counts of c.ms2 written between
		// the replays (outside the graph): a replay reads the counts of
		// its own time.
		g, err := s.Capture(func(cs *core.Stream) error { return matmul.Grouped(cs, desc, ops) })
		if errors.Is(err, core.ErrUnsupported) || errors.Is(err, core.ErrFailedPrecondition) {
			return skip("the plugin does not record a grouped GEMM with row counts on the device: %v", err)
		}
		if err != nil {
			return err
		}
		defer g.Close()
		// In stream order: c.ms2's counts copied on the device behind a
		// 2 ms sleep, then the call, which must read them (a plugin that
		// read the counts when the call was enqueued would see c.ms).
		sleep, err := kernel(e.dev, "sleep_ns")
		if err != nil {
			return err
		}
		c2, err := up(le.Uint32sOf(c.ms2))
		if err != nil {
			return err
		}
		c2v, err := c2.View(0, 4*G)
		if err != nil {
			return err
		}
		if err := firstErr(core.CopyFromHost(ops.Counts, le.Uint32sOf(c.ms)), core.CopyFromHost(ops.D, dPoison),
			s.Launch(sleep, core.Grid1D(1, 1), sleepArg(2*time.Millisecond)), s.CopyDevice(ops.Counts, c2v),
			matmul.Grouped(s, desc, ops), s.Synchronize()); err != nil {
			return err
		}
		if err := check(c.ms2); err != nil {
			return fmt.Errorf("counts %v written on the device before the call (in stream order, over %v): %w", c.ms2, c.ms, err)
		}
		for _, ms := range [][]int{c.ms, c.ms2} {
			if err := firstErr(core.CopyFromHost(ops.Counts, le.Uint32sOf(ms)), core.CopyFromHost(ops.D, dPoison),
				g.Launch(s), s.Synchronize()); err != nil {
				return err
			}
			if err := check(ms); err != nil {
				return fmt.Errorf("graph replay with counts %v: %w", ms, err)
			}
		}
		return nil
	})
}

// groupedAgainstRef compares got (the groups' rows of D, counts ms) with
// the float64 reference.
func groupedAgainstRef(e *env, c groupedCase, ms []int, got, av, bv, sa, sb []float64) error {
	total := sum(ms)
	kb, nb := c.k/128, (c.n+127)/128
	groupOf := make([]int, total)
	row := 0
	for g, m := range ms {
		for i := 0; i < m; i++ {
			groupOf[row] = g
			row++
		}
	}
	sample := sampleOf(e, c.sample)
	count := total * c.n
	if sample > 0 && sample < count {
		count = sample
	}
	c2 := 1.0 / 4096 // see the top of this file
	if c.fp8 {
		c2 = 1.0 / 1024
	}
	bad, worstRatio, worst := 0, 0.0, ""
	for i := 0; i < count; i++ {
		idx := pick(e, total*c.n, sample, i)
		rr, j := idx/c.n, idx%c.n
		g := groupOf[rr]
		ref, norm2 := 0.0, 0.0
		for p := 0; p < c.k; p++ {
			t := av[rr*c.k+p] * bv[(g*c.n+j)*c.k+p]
			if c.fp8 {
				t *= sa[rr*kb+p/128] * sb[(g*nb+j/128)*kb+p/128]
			}
			ref += t
			norm2 += t * t
		}
		tol := elemTol(ref, norm2, c2)
		if d := math.Abs(got[idx] - ref); d > tol {
			if bad == 0 || d/tol > worstRatio {
				worstRatio = d / tol
				worst = fmt.Sprintf("D[%d][%d] (group %d) = %g, reference %g (difference %.3g, tolerance %.3g)", rr, j, g, got[idx], ref, d, tol)
			}
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d elements out of tolerance (c = 2^%d); the worst, %.2fx its tolerance: %s", bad, count, int(math.Log2(c2)), worstRatio, worst)
	}
	return nil
}

// manyCounts is n groups of 0 to 4 rows.
func manyCounts(n int) []int {
	ms := make([]int, n)
	for i := range ms {
		ms[i] = i * 7 % 5
	}
	return ms
}

func sum(v []int) int {
	t := 0
	for _, x := range v {
		t += x
	}
	return t
}

// cutCounts is ms as a grouped GEMM with max rows takes it: the groups in
// order while they fit, the one that would pass max cut there, the later
// ones empty.
func cutCounts(ms []int, max int) []int {
	out := make([]int, len(ms))
	row := 0
	for g, m := range ms {
		out[g] = min(m, max-row)
		row += out[g]
	}
	return out
}

func quantMisuse(e *env) error {
	if err := has14(e); err != nil {
		return err
	}
	b, s, done, err := bufferAndStream(e, 1<<16)
	if err != nil {
		return err
	}
	defer done()
	qd := matmul.QuantDesc{XType: core.BF16, ScaleType: core.BF16, GroupSize: 64, M: 8, N: 2, K: 128}
	qo := matmul.QuantOperands{W: b, Scales: b, Biases: b, X: b, Y: b}
	gd := matmul.GroupedDesc{ABType: core.BF16, N: 8, K: 64, MSizes: []int{2, 0, 3}}
	gop := matmul.GroupedOperands{A: b, B: b, D: b}
	odd, _ := b.View(8, 4096)
	short, _ := b.View(0, 30)
	q := func(f func(*matmul.QuantDesc, *matmul.QuantOperands)) func() error {
		return func() error {
			d, o := qd, qo
			f(&d, &o)
			return matmul.Quant(s, d, o)
		}
	}
	g := func(f func(*matmul.GroupedDesc, *matmul.GroupedOperands)) func() error {
		return func() error {
			d, o := gd, gop
			f(&d, &o)
			return matmul.Grouped(s, d, o)
		}
	}
	err = runMisuse([]misuse{
		{"quant: 4 bits", q(func(d *matmul.QuantDesc, _ *matmul.QuantOperands) { d.Bits = 4 }), core.ErrUnsupported},
		{"quant: group 16", q(func(d *matmul.QuantDesc, _ *matmul.QuantOperands) { d.GroupSize = 16 }), core.ErrUnsupported},
		{"quant: f32 x", q(func(d *matmul.QuantDesc, _ *matmul.QuantOperands) { d.XType = core.F32 }), core.ErrUnsupported},
		{"quant: k not a multiple of the group", q(func(d *matmul.QuantDesc, _ *matmul.QuantOperands) { d.K = 96 }), core.ErrInvalidArgument},
		{"quant: n 0", q(func(d *matmul.QuantDesc, _ *matmul.QuantOperands) { d.N = 0 }), core.ErrInvalidArgument},
		{"quant: no biases", q(func(_ *matmul.QuantDesc, o *matmul.QuantOperands) { o.Biases = nil }), core.ErrInvalidArgument},
		{"quant: misaligned W", q(func(_ *matmul.QuantDesc, o *matmul.QuantOperands) { o.W = odd }), core.ErrInvalidArgument},
		{"quant: short y", q(func(_ *matmul.QuantDesc, o *matmul.QuantOperands) { o.Y = short }), core.ErrOutOfRange},
		{"grouped: f16", g(func(d *matmul.GroupedDesc, _ *matmul.GroupedOperands) { d.ABType = core.F16 }), core.ErrUnsupported},
		{"grouped: fp8 k 64", g(func(d *matmul.GroupedDesc, _ *matmul.GroupedOperands) { d.ABType = core.FP8E4M3 }), core.ErrInvalidArgument},
		{"grouped: no groups", g(func(d *matmul.GroupedDesc, _ *matmul.GroupedOperands) { d.MSizes = nil }), core.ErrInvalidArgument},
		{"grouped: negative rows", g(func(d *matmul.GroupedDesc, _ *matmul.GroupedOperands) { d.MSizes = []int{1, -2} }), core.ErrInvalidArgument},
		{"grouped: scales on bf16", g(func(_ *matmul.GroupedDesc, o *matmul.GroupedOperands) { o.ScaleB = b }), core.ErrInvalidArgument},
		{"grouped: fp8 without scales", g(func(d *matmul.GroupedDesc, _ *matmul.GroupedOperands) {
			d.ABType, d.K = core.FP8E4M3, 128
		}), core.ErrInvalidArgument},
		{"grouped: short D", g(func(d *matmul.GroupedDesc, o *matmul.GroupedOperands) { d.N, o.D = 64, short }), core.ErrOutOfRange},
	})
	return firstErr(err, s.Synchronize())
}
