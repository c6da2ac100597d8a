// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"errors"
	"fmt"
	"math"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
)

// gemmCase is one GEMM compared with a float64 reference.
type gemmCase struct {
	name           string
	at, bt, dt     core.DType
	compute        core.ComputeType
	transA, transB bool
	m, n, k        int
	pad            int // added to every leading dimension (non-contiguous)
	batch          int
	ep             core.Epilogue
	biasType       core.DType
	beta           float64
	scales         bool // fp8 per-tensor scales
	offset         int  // byte offset of every operand in its buffer
	cInD           bool // C is D (in place: D += A*B, as a residual)
	constA         bool // GemmDesc.ConstA (A never written by earlier work; ABI 1.9)
	prologue       int  // 1: GemmDesc.RMSNormB, 2: SwiGLUB (ABI 1.10)
	tol            float64
}

func gemmTol(c gemmCase) float64 {
	switch {
	case c.dt == core.FP8E4M3 || c.dt == core.FP8E5M2:
		return 0.1
	case c.dt == core.F16 || c.dt == core.BF16 || c.at == core.F16 || c.at == core.BF16:
		return 1e-2
	case c.at == core.FP8E4M3 || c.at == core.FP8E5M2:
		return 1e-2
	case c.compute == core.ComputeTF32:
		return 3e-4
	}
	return 1e-5
}

func gemmChecks() []check {
	var cases []gemmCase
	f32 := func(name string, m, n, k int, ta, tb bool) gemmCase {
		return gemmCase{name: "f32/" + name, at: core.F32, bt: core.F32, dt: core.F32, m: m, n: n, k: k, transA: ta, transB: tb}
	}
	cases = append(cases,
		f32("1xN", 1, 67, 33, false, false),
		f32("Nx1", 67, 1, 33, false, false),
		f32("k1", 19, 23, 1, false, false),
		f32("odd_nn", 37, 29, 41, false, false),
		f32("odd_tn", 37, 29, 41, true, false),
		f32("odd_nt", 37, 29, 41, false, true),
		f32("odd_tt", 37, 29, 41, true, true),
	)
	c := f32("padded_ld", 33, 17, 25, false, true)
	c.pad = 5
	cases = append(cases, c)
	c = f32("batched", 21, 13, 17, true, false)
	c.batch, c.pad = 3, 2
	cases = append(cases, c)
	c = f32("beta", 24, 16, 8, false, false)
	c.beta = 0.75
	cases = append(cases, c)
	c = f32("unaligned", 31, 15, 7, false, false)
	c.offset = 4
	cases = append(cases, c)
	c = f32("tf32", 64, 48, 80, false, false)
	c.compute = core.ComputeTF32
	cases = append(cases, c)
	for _, t := range []core.DType{core.F16, core.BF16} {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}} {
			cases = append(cases, gemmCase{name: fmt.Sprintf("%v/odd_%s", t, trName(tr)), at: t, bt: t, dt: t, m: 45, n: 31, k: 57, transA: tr[0], transB: tr[1]})
		}
		cases = append(cases,
			gemmCase{name: t.String() + "/batched_padded", at: t, bt: t, dt: t, m: 24, n: 40, k: 16, batch: 4, pad: 3},
			gemmCase{name: t.String() + "/beta_f32_out", at: t, bt: t, dt: core.F32, m: 33, n: 9, k: 65, beta: -0.5},
		)
		for _, ep := range []core.Epilogue{core.EpilogueNone, core.EpilogueBias, core.EpilogueRelu, core.EpilogueBias | core.EpilogueRelu, core.EpilogueGelu, core.EpilogueBias | core.EpilogueGelu} {
			cases = append(cases, gemmCase{name: fmt.Sprintf("%v/epilogue_%s", t, epName(ep)), at: t, bt: t, dt: t, m: 37, n: 21, k: 29, ep: ep, beta: 0.5})
		}
	}
	// The decode shape (y = x W^T, few tokens), which a backend may run as a
	// GEMV (the CUDA plugin's, for one token): k past a whole number of its
	// 512-deep chunks, padded leading dimensions that stay multiples of 8,
	// a batch, C read (beta), C in place as D, token counts above the CUDA
	// GEMV's default (scripts/gpu_gemv.sh runs them on it too), and
	// operands 8 bytes off 16 (its fallback to cuBLASLt).
	cases = append(cases,
		gemmCase{name: "bf16/gemv_n1", at: core.BF16, bt: core.BF16, dt: core.BF16, m: 300, n: 1, k: 1032, transA: true, beta: 0.5},
		gemmCase{name: "f16/gemv_n3_padded", at: core.F16, bt: core.F16, dt: core.F16, m: 77, n: 3, k: 520, transA: true, pad: 8},
		gemmCase{name: "bf16/gemv_batched", at: core.BF16, bt: core.BF16, dt: core.BF16, m: 40, n: 2, k: 264, transA: true, batch: 3, pad: 8, beta: -1},
		gemmCase{name: "bf16/gemv_n7", at: core.BF16, bt: core.BF16, dt: core.BF16, m: 129, n: 7, k: 4104, transA: true},
		gemmCase{name: "f16/gemv_n1_batched_padded", at: core.F16, bt: core.F16, dt: core.F16, m: 77, n: 1, k: 520, transA: true, batch: 2, pad: 8, beta: 0.25},
		gemmCase{name: "bf16/gemv_in_place", at: core.BF16, bt: core.BF16, dt: core.BF16, m: 96, n: 1, k: 512, transA: true, beta: 1, cInD: true},
		gemmCase{name: "bf16/gemv_offset8", at: core.BF16, bt: core.BF16, dt: core.BF16, m: 64, n: 1, k: 256, transA: true, offset: 8},
	)
	// The same with A promised constant (GemmDesc.ConstA, ABI 1.9: a
	// weight; CUDA's GEMV then copies its first chunks of A before its
	// programmatic-dependent-launch wait): the same result. k spans
	// several of the GEMV's 512-deep chunks; a batch moves A per batch.
	cases = append(cases,
		gemmCase{name: "bf16/gemv_n1_const_a", at: core.BF16, bt: core.BF16, dt: core.BF16, m: 1000, n: 1, k: 4096, transA: true, constA: true},
		gemmCase{name: "bf16/gemv_batched_const_a", at: core.BF16, bt: core.BF16, dt: core.BF16, m: 1000, n: 1, k: 4096, transA: true, batch: 2, pad: 8, beta: 0.5, constA: true},
		gemmCase{name: "f16/gemv_n2_const_a", at: core.F16, bt: core.F16, dt: core.F16, m: 77, n: 2, k: 520, transA: true, constA: true},
	)
	// Prologues (ABI 1.10): the decoder's norm ahead of its QKV and
	// gate/up projections, and SwiGLU ahead of its down projection (here
	// with the residual added in place): k past whole 512-deep chunks,
	// padded leading dimensions, and three tokens (CUDA runs a prologue
	// for one token only, on its GEMV, and refuses the plan otherwise:
	// those are skipped there, naming the reason).
	cases = append(cases,
		gemmCase{name: "bf16/prologue_rmsnorm_n1", at: core.BF16, bt: core.BF16, dt: core.BF16, m: 1000, n: 1, k: 4096, transA: true, constA: true, prologue: 1},
		gemmCase{name: "f16/prologue_rmsnorm_n1_padded", at: core.F16, bt: core.F16, dt: core.F16, m: 77, n: 1, k: 520, transA: true, pad: 8, beta: 0.5, prologue: 1},
		gemmCase{name: "bf16/prologue_rmsnorm_n3", at: core.BF16, bt: core.BF16, dt: core.BF16, m: 64, n: 3, k: 264, transA: true, prologue: 1},
		gemmCase{name: "bf16/prologue_swiglu_n1_in_place", at: core.BF16, bt: core.BF16, dt: core.BF16, m: 300, n: 1, k: 1032, transA: true, constA: true, beta: 1, cInD: true, prologue: 2},
		gemmCase{name: "f16/prologue_swiglu_n1_padded", at: core.F16, bt: core.F16, dt: core.F16, m: 129, n: 1, k: 4104, transA: true, pad: 8, prologue: 2},
		gemmCase{name: "bf16/prologue_swiglu_n3", at: core.BF16, bt: core.BF16, dt: core.BF16, m: 64, n: 3, k: 264, transA: true, prologue: 2},
		gemmCase{name: "f32/prologue_rmsnorm_n2", at: core.F32, bt: core.F32, dt: core.F32, m: 37, n: 2, k: 41, transA: true, prologue: 1},
	)
	cases = append(cases, gemmCase{name: "bf16/f32_bias", at: core.BF16, bt: core.BF16, dt: core.BF16, m: 32, n: 16, k: 48, ep: core.EpilogueBias | core.EpilogueGelu, biasType: core.F32})
	for _, ep := range []core.Epilogue{core.EpilogueNone, core.EpilogueBias, core.EpilogueRelu, core.EpilogueGelu} {
		cases = append(cases, gemmCase{name: "f32/epilogue_" + epName(ep), at: core.F32, bt: core.F32, dt: core.F32, m: 29, n: 17, k: 23, ep: ep})
	}
	// fp8: the "TN" layout and multiples of 16, which every backend runs
	cases = append(cases,
		gemmCase{name: "fp8/e4m3_bf16", at: core.FP8E4M3, bt: core.FP8E4M3, dt: core.BF16, m: 64, n: 48, k: 96, transA: true},
		gemmCase{name: "fp8/e4m3_e5m2_f32_scaled", at: core.FP8E4M3, bt: core.FP8E5M2, dt: core.F32, m: 32, n: 32, k: 64, transA: true, scales: true},
		gemmCase{name: "fp8/e4m3_out_scaled", at: core.FP8E4M3, bt: core.FP8E4M3, dt: core.FP8E4M3, m: 48, n: 32, k: 32, transA: true, scales: true},
		gemmCase{name: "fp8/bias", at: core.FP8E4M3, bt: core.FP8E4M3, dt: core.BF16, m: 64, n: 16, k: 32, transA: true, ep: core.EpilogueBias},
	)
	var cs []check
	for _, gc := range cases {
		gc := gc
		cs = append(cs, check{"gemm/" + gc.name, func(e *env) error { return runGemmCase(e, gc) }})
	}
	cs = append(cs,
		check{"gemm/large", func(e *env) error {
			n := 512
			if e.opts.Quick {
				n = 128
			} else if in := e.dev.Info(); in.Arch != "cpu" && in.MemoryFree > 8<<30 {
				n = 8192
			}
			return runGemmCase(e, gemmCase{name: "large", at: core.BF16, bt: core.BF16, dt: core.BF16, m: n, n: n, k: n, transA: true})
		}},
		check{"gemm/op_cache_hits", func(e *env) error {
			gc := gemmCase{name: "repeat", at: core.F32, bt: core.F32, dt: core.F32, m: 13, n: 11, k: 7}
			if err := runGemmCase(e, gc); err != nil {
				return err
			}
			before := inspect.OpCache(e.rt)
			for i := 0; i < 3; i++ {
				if err := runGemmCase(e, gc); err != nil {
					return err
				}
			}
			after := inspect.OpCache(e.rt)
			if after.Hits < before.Hits+3 || after.Misses != before.Misses {
				return fmt.Errorf("three repeats of one shape: hits %d -> %d, misses %d -> %d", before.Hits, after.Hits, before.Misses, after.Misses)
			}
			return nil
		}},
		check{"gemm/misuse", func(e *env) error {
			b, s, done, err := bufferAndStream(e, 1024)
			if err != nil {
				return err
			}
			defer done()
			d := core.GemmDesc{AType: core.F32, BType: core.F32, DType: core.F32, M: 8, N: 8, K: 8}
			ok := core.GemmOperands{A: b, B: b, D: b, Alpha: 1}
			small, _ := b.View(0, 100)
			bad := func(f func(*core.GemmDesc, *core.GemmOperands)) func() error {
				return func() error {
					dd, oo := d, ok
					f(&dd, &oo)
					return s.Gemm(dd, oo)
				}
			}
			return runMisuse([]misuse{
				{"m of 0", bad(func(d *core.GemmDesc, _ *core.GemmOperands) { d.M = 0 }), core.ErrInvalidArgument},
				{"lda below rows", bad(func(d *core.GemmDesc, _ *core.GemmOperands) { d.LDA = 3 }), core.ErrInvalidArgument},
				{"no A", bad(func(_ *core.GemmDesc, o *core.GemmOperands) { o.A = nil }), core.ErrInvalidArgument},
				{"beta without C", bad(func(_ *core.GemmDesc, o *core.GemmOperands) { o.Beta = 1 }), core.ErrInvalidArgument},
				{"bias epilogue without bias", bad(func(d *core.GemmDesc, _ *core.GemmOperands) { d.Epilogue = core.EpilogueBias }), core.ErrInvalidArgument},
				{"short D", bad(func(_ *core.GemmDesc, o *core.GemmOperands) { o.D = small }), core.ErrOutOfRange},
				{"integer operands", bad(func(d *core.GemmDesc, _ *core.GemmOperands) { d.AType, d.BType = core.I32, core.I32 }), core.ErrUnsupported},
				{"no element type", bad(func(d *core.GemmDesc, _ *core.GemmOperands) { d.DType = 0 }), core.ErrInvalidArgument},
			})
		}},
	)
	return cs
}

// planUnsupported returns the reason to skip a GEMM case when err says the
// backend cannot make a plan for the descriptor: an error wrapping
// core.ErrUnsupported from plan creation (a backend may legitimately
// refuse a combination, as cuBLASLt does a bf16 GEMM with an f32 bias).
// The reason carries the plugin's message, which names the combination.
// Any other error, and an unsupported error from the run of a plan that
// was made, is not a reason to skip: it returns "".
func planUnsupported(err error) string {
	var ce *core.Error
	if !errors.Is(err, core.ErrUnsupported) || !errors.As(err, &ce) || ce.Op != "gemm_plan_create" {
		return ""
	}
	return "the backend does not support this descriptor: " + err.Error()
}

func trName(t [2]bool) string {
	s := ""
	for _, x := range t {
		if x {
			s += "t"
		} else {
			s += "n"
		}
	}
	return s
}

func epName(ep core.Epilogue) string {
	return [...]string{"none", "bias", "relu", "bias_relu", "gelu", "bias_gelu"}[ep]
}

func isFP8(t core.DType) bool { return t == core.FP8E4M3 || t == core.FP8E5M2 }

// runGemmCase uploads random operands (padding included), poisons D,
// runs the GEMM, and compares with a float64 reference: every element of
// D written, the padding of D untouched, and ||D-ref||/||ref|| within the
// case's tolerance (on a sample of elements for large shapes).
func runGemmCase(e *env, c gemmCase) error {
	if (isFP8(c.at) || isFP8(c.bt)) && !e.dev.Info().FP8 {
		return skip("the device has no fp8 GEMM")
	}
	if c.tol == 0 {
		c.tol = gemmTol(c)
	}
	batch := max(c.batch, 1)
	ra, ca := c.m, c.k
	if c.transA {
		ra, ca = c.k, c.m
	}
	rb, cb := c.k, c.n
	if c.transB {
		rb, cb = c.n, c.k
	}
	lda, ldb, ldc := ra+c.pad, rb+c.pad, c.m+c.pad
	sa, sb, sc := lda*ca+c.pad, ldb*cb+c.pad, ldc*c.n+c.pad
	if batch == 1 {
		sa, sb, sc = 0, 0, 0
	}
	elems := func(ld, cols, stride int) int { return (batch-1)*stride + ld*cols }
	na, nb, nc := elems(lda, ca, sa), elems(ldb, cb, sb), elems(ldc, c.n, sc)
	if c.prologue == 2 { // SwiGLU: G then U, ldb*n elements apart (batch 1)
		nb = elems(ldb, 2*cb, 0)
	}
	ct := c.dt
	if isFP8(ct) {
		ct = core.BF16
	}
	r := 1.0
	if isFP8(c.at) {
		r = 2
	}
	av := randomValues(e.rng, c.at, na, r)
	bv := randomValues(e.rng, c.bt, nb, r)
	var cv, biasv []float64
	biasType := c.biasType
	if biasType == 0 {
		biasType = c.dt
		if isFP8(biasType) {
			biasType = core.BF16
		}
	}
	if c.beta != 0 {
		cv = randomValues(e.rng, ct, nc, 1)
	}
	if c.ep.HasBias() {
		biasv = randomValues(e.rng, biasType, c.m, 1)
	}
	const normEps = 1e-5
	var normW, normR []float64 // RMSNormB's weight and each column's 1/rms
	if c.prologue == 1 {
		normW = randomValues(e.rng, c.bt, c.k, 0.5)
		for p := range normW {
			normW[p] += 1 // in [0.5, 1.5]: a norm's weight
		}
		normW = decode(c.bt, encode(c.bt, normW))
		normR = make([]float64, c.n)
		for j := range normR {
			ss := 0.0
			for p := 0; p < c.k; p++ {
				ss += bv[j*ldb+p] * bv[j*ldb+p]
			}
			normR[j] = 1 / math.Sqrt(ss/float64(c.k)+normEps)
		}
	}
	sA, sB, sD := 1.0, 1.0, 1.0
	if c.scales {
		sA, sB = 0.5, 4
		if isFP8(c.dt) {
			sD = 0.5
		}
	}

	alloc := func(data []byte) (*core.Buffer, core.View, error) {
		b, err := e.dev.Alloc(len(data) + c.offset + 64)
		if err != nil {
			return nil, core.View{}, err
		}
		v, _ := b.View(c.offset, len(data))
		if err := firstErr(core.Memset(b, 0xff), core.CopyFromHost(v, data)); err != nil {
			b.Free()
			return nil, core.View{}, err
		}
		return b, v, nil
	}
	var bufs []*core.Buffer
	defer func() {
		for _, b := range bufs {
			b.Free()
		}
	}()
	ops := core.GemmOperands{Alpha: 1.25, Beta: c.beta}
	upload := func(data []byte) (core.View, error) {
		b, v, err := alloc(data)
		if err != nil {
			return core.View{}, err
		}
		bufs = append(bufs, b)
		return v, nil
	}
	var err error
	var vA, vB, vC, vD, vBias, vS core.View
	if vA, err = upload(encode(c.at, av)); err != nil {
		return err
	}
	if vB, err = upload(encode(c.bt, bv)); err != nil {
		return err
	}
	ops.A, ops.B = vA, vB
	if cv != nil {
		if vC, err = upload(encode(ct, cv)); err != nil {
			return err
		}
		ops.C = vC
	}
	if biasv != nil {
		if vBias, err = upload(encode(biasType, biasv)); err != nil {
			return err
		}
		ops.Bias = vBias
	}
	if normW != nil {
		if ops.NormWeight, err = upload(encode(c.bt, normW)); err != nil {
			return err
		}
		ops.NormEps = normEps
	}
	if c.scales {
		if vS, err = upload(encode(core.F32, []float64{sA, sB, sD})); err != nil {
			return err
		}
		ops.ScaleA, _ = vS.Sub(0, 4)
		ops.ScaleB, _ = vS.Sub(4, 4)
		if isFP8(c.dt) { // scale_d quantises an fp8 output only (gpurt.h)
			ops.ScaleD, _ = vS.Sub(8, 4)
		}
	}
	dsz := c.dt.Size()
	dPoison := make([]byte, nc*dsz)
	poison(dPoison)
	if c.cInD {
		dPoison = encode(c.dt, cv) // C's values, read and overwritten in place
	}
	if vD, err = upload(dPoison); err != nil {
		return err
	}
	ops.D = vD
	if c.cInD {
		ops.C = vD
	}
	desc := core.GemmDesc{AType: c.at, BType: c.bt, CType: ct, DType: c.dt, Compute: c.compute,
		TransA: c.transA, TransB: c.transB, M: c.m, N: c.n, K: c.k, LDA: lda, LDB: ldb, LDC: ldc, LDD: ldc,
		Batch: c.batch, StrideA: int64(sa), StrideB: int64(sb), StrideC: int64(sc), StrideD: int64(sc),
		Epilogue: c.ep, BiasType: biasType, ConstA: c.constA, RMSNormB: c.prologue == 1, SwiGLUB: c.prologue == 2}
	return withStream(e, func(s *core.Stream) error {
		if err := s.Gemm(desc, ops); err != nil {
			if r := planUnsupported(err); r != "" {
				return skip("%s", r)
			}
			return err
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		raw := make([]byte, nc*dsz)
		if err := core.CopyToHost(raw, vD); err != nil {
			return err
		}
		got := decode(c.dt, raw)
		// every element of D written, the padding untouched
		inD := make([]bool, nc)
		for bi := 0; bi < batch; bi++ {
			for j := 0; j < c.n; j++ {
				for i := 0; i < c.m; i++ {
					inD[bi*sc+j*ldc+i] = true
				}
			}
		}
		for x := 0; x < nc; x++ {
			if inD[x] && math.IsNaN(got[x]) {
				return fmt.Errorf("element %d of D was not written (still poison) or is NaN", x)
			}
			if !inD[x] {
				for q := 0; q < dsz; q++ {
					if raw[x*dsz+q] != 0xff {
						return fmt.Errorf("element %d of D's padding was written", x)
					}
				}
			}
		}
		// reference
		opA := func(bi, i, p int) float64 {
			if c.transA {
				return av[bi*sa+i*lda+p]
			}
			return av[bi*sa+p*lda+i]
		}
		opB := func(bi, p, j int) float64 {
			switch {
			case c.transB:
				return bv[bi*sb+p*ldb+j]
			case c.prologue == 1:
				return bv[j*ldb+p] * normR[j] * normW[p]
			case c.prologue == 2:
				g := bv[j*ldb+p]
				return g / (1 + math.Exp(-g)) * bv[(c.n+j)*ldb+p]
			}
			return bv[bi*sb+j*ldb+p]
		}
		total := batch * c.m * c.n
		sample := total
		if total > 1<<16 {
			sample = 4096
		}
		var num, den float64
		for q := 0; q < sample; q++ {
			idx := q
			if sample < total {
				idx = e.rng.IntN(total)
			}
			bi, rem := idx/(c.m*c.n), idx%(c.m*c.n)
			j, i := rem/c.m, rem%c.m
			acc := 0.0
			for p := 0; p < c.k; p++ {
				acc += opA(bi, i, p) * opB(bi, p, j)
			}
			t := ops.Alpha * sA * sB * acc
			if c.beta != 0 {
				t += c.beta * cv[bi*sc+j*ldc+i]
			}
			if c.ep.HasBias() {
				t += biasv[i]
			}
			switch c.ep {
			case core.EpilogueRelu, core.EpilogueBias | core.EpilogueRelu:
				t = math.Max(t, 0)
			case core.EpilogueGelu, core.EpilogueBias | core.EpilogueGelu:
				t = 0.5 * t * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(t+0.044715*t*t*t)))
			}
			t *= sD
			d := got[bi*sc+j*ldc+i] - t
			num += d * d
			den += t * t
		}
		if den == 0 {
			return fmt.Errorf("the reference is all zeros (a bad test case)")
		}
		if rel := math.Sqrt(num / den); rel > c.tol || math.IsNaN(rel) {
			return fmt.Errorf("||D-ref||/||ref|| = %.3g over %d elements, tolerance %.3g", rel, sample, c.tol)
		}
		return nil
	})
}
