// SPDX-License-Identifier: Apache-2.0

package core

import (
	"math"
	"math/bits"
	"unsafe"

	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/internal/abi"
)

// ComputeType is a GEMM's accumulation (GPURT_COMPUTE_*).
type ComputeType int32

// Compute types.
const (
	ComputeDefault ComputeType = abi.ComputeDefault // f32 accumulation
	ComputeF32     ComputeType = abi.ComputeF32     // strict f32
	ComputeTF32    ComputeType = abi.ComputeF32TF32 // f32 with tf32 matrix units allowed
	ComputeF16     ComputeType = abi.ComputeF16     // f16 accumulation
)

// Epilogue is what a GEMM applies to D after alpha*op(A)*op(B)+beta*C: a
// set of steps, combined with |. EpilogueBias, then at most one
// activation: EpilogueBias|EpilogueGelu adds the bias, then applies GELU
// (the ABI's GPURT_EPILOGUE_BIAS_GELU). Two activations are refused by
// the plugin (ErrUnsupported).
type Epilogue int32

// Epilogue steps.
const (
	EpilogueNone Epilogue = abi.EpilogueNone
	EpilogueBias Epilogue = abi.EpilogueBias // D += bias[row]
	EpilogueRelu Epilogue = abi.EpilogueRelu // D = max(D, 0)
	EpilogueGelu Epilogue = abi.EpilogueGelu // tanh approximation
)

// HasBias reports whether the epilogue reads a bias vector.
func (e Epilogue) HasBias() bool { return e&EpilogueBias != 0 }

// GemmDesc describes a GEMM, column-major as in BLAS:
// D = alpha * op(A) * op(B) + beta * C, then the epilogue, where op(A) is
// M x K, op(B) is K x N, and C and D are M x N. A row-major caller swaps A
// and B and M and N. Leading dimensions and strides count elements; a
// zero leading dimension means tightly packed (the rows of the stored
// matrix). Batch 0 counts as 1; with Batch > 1, each operand advances by
// its stride per batch (0: every batch uses the same matrix). CType 0
// means DType; BiasType 0 means DType.
type GemmDesc struct {
	AType, BType, CType, DType DType
	Compute                    ComputeType
	TransA, TransB             bool
	M, N, K                    int
	LDA, LDB, LDC, LDD         int
	Batch                      int
	StrideA, StrideB           int64
	StrideC, StrideD           int64
	Epilogue                   Epilogue
	BiasType                   DType
	// ConstA promises that nothing enqueued earlier on the stream (or
	// recorded earlier in the graph) writes A: the plugin may then read
	// A before the work ahead of it completes (CUDA's 16-bit GEMV copies
	// its first chunks of A before its programmatic-dependent-launch
	// wait). Meant for weights. Only a hint: the result is the same with
	// or without it, and a plugin older than ABI 1.9 is not sent it. A
	// false promise gives undefined results, not a crash.
	ConstA bool
	// RMSNormB and SwiGLUB (ABI 1.10; at most one) are a prologue: op(B)
	// is transformed before the product, so that no kernel of its own
	// writes the transformed activations. Each needs TransB false, Batch
	// 0 or 1, and an f32, f16 or bf16 B; a plugin that cannot run it
	// refuses the descriptor (ErrUnsupported: the mock runs every shape,
	// CUDA one token on its GEMV, Metal none), as does a plugin older
	// than 1.10. The transformed values are computed in f32 or wider and
	// may or may not be rounded to BType.
	//
	// RMSNormB: each column x of B (a token's K values) becomes
	// x[p] / sqrt(mean(x^2) + GemmOperands.NormEps) * NormWeight[p], a
	// transformer's RMSNorm ahead of a linear layer.
	RMSNormB bool
	// SwiGLUB: op(B) is silu(G) * U element-wise, G the stored B (K x N)
	// and U the K x N matrix of the same LDB right after it (LDB*N
	// elements on): B's region holds both, as an MLP's gate and up
	// projections write them; silu(g) = g / (1 + exp(-g)).
	SwiGLUB bool
}

// GemmOperands are a GEMM's memory and scalars. A, B and D are required;
// C is read only when Beta != 0 (and may be the same region as D); Bias
// when the epilogue has one (M elements of BiasType); ScaleA, ScaleB,
// ScaleD are optional per-tensor f32 scales in device memory (fp8; nil
// means 1.0); Workspace is optional (nil: the plugin's own). Alpha 0 is
// a literal zero: set it (usually 1). NormWeight (K elements of BType,
// 16-byte aligned) and NormEps (a finite float32, >= 0) are
// GemmDesc.RMSNormB's and set only with it.
type GemmOperands struct {
	A, B, C, D             Region
	Bias                   Region
	ScaleA, ScaleB, ScaleD Region
	Alpha, Beta            float64
	Workspace              Region
	NormWeight             Region
	NormEps                float64
}

// alignClass is the largest power of two, at most 256, dividing off
// (buffers themselves are 256-aligned).
func alignClass(off uint64) uint32 {
	a := uint32(256)
	for a > 1 && off%uint64(a) != 0 {
		a >>= 1
	}
	return a
}

// gemmOperand is a resolved operand.
type gemmOperand struct {
	b   *Buffer
	off uint64
	n   uint64
}

// gemmOperandNames name the operands in errors, in GemmRunArgs order.
var gemmOperandNames = [10]string{"A", "B", "C", "D", "bias", "scale A", "scale B", "scale D", "workspace", "norm weight"}

// gemmCall is one Gemm call's state: its resolved operands, which of them
// hold a use of their buffer (one use per distinct buffer), and the plan
// it holds a reference on.
type gemmCall struct {
	s    *Stream
	opr  [10]gemmOperand
	held uint16 // bit i: opr[i].b is acquired
	plan *planEntry
}

// finish releases what the call holds and ends its use of the stream.
func (g *gemmCall) finish() {
	for m := g.held; m != 0; m &= m - 1 {
		g.opr[bits.TrailingZeros16(m)].b.l.release()
	}
	if g.plan != nil {
		g.s.dev.rt.plans.put(g.plan)
	}
	g.s.exit()
}

// Gemm enqueues a GEMM on s, through the runtime's op cache: the plan for
// the descriptor (with the alignment class of each pointer and the
// device) is made once and reused; see inspect.OpCache. Operands
// must be on the stream's device. A plugin without GEMM (ABI 1.0) gives
// an error wrapping ErrUnsupported naming the versions; a descriptor the
// plugin cannot run gives ErrUnsupported naming the field. A warm call
// allocates nothing.
func (s *Stream) Gemm(desc GemmDesc, ops GemmOperands) (err error) {
	if err := s.enter("gemm"); err != nil {
		return err
	}
	defer s.sticky(&err)
	g := gemmCall{s: s}
	defer g.finish()
	m := &s.dev.rt.metrics
	err = m.end(opGemm, m.begin(), g.run(&desc, &ops))
	if err == nil {
		m.gemms.Add(1)
	}
	return err
}

// gemmMemoBits sizes a stream's memo of plans (Stream.gemmMemo).
const gemmMemoBits = 4

// gemmMemoIndex picks desc's slot in a stream's memo.
func gemmMemoIndex(g *GemmDesc) uint {
	h := (uint64(g.M)*0x9e3779b97f4a7c15+uint64(g.N))*0xc2b2ae3d27d4eb4f + uint64(g.K)
	h ^= uint64(uint32(g.AType))<<8 | uint64(uint32(g.DType))
	return uint(h*0x9e3779b97f4a7c15) >> (64 - gemmMemoBits)
}

func (g *gemmCall) run(desc *GemmDesc, ops *GemmOperands) error {
	const op = "gemm"
	s := g.s
	rt := s.dev.rt
	for _, slot := range [...]bind.Slot{bind.SlotGemmPlanCreate, bind.SlotGemmRun, bind.SlotGemmPlanDestroy} {
		if !rt.p.Has(slot) {
			return rt.p.Unsupported(op, slot)
		}
	}
	// A plan this stream used with the same descriptor: the descriptor
	// is valid (validation depends on it alone) and converts to the
	// plan's key, alignment aside.
	slot := &s.gemmMemo[gemmMemoIndex(desc)]
	memo := slot.Load()
	if memo != nil && memo.src != *desc {
		memo = nil
	}
	var d abi.GemmDesc
	if memo == nil {
		var err error
		if d, err = gemmABIDesc(desc, rt.p.Minor); err != nil {
			return err
		}
	}
	if desc.RMSNormB && !(ops.NormEps >= 0 && ops.NormEps <= math.MaxFloat32) {
		return errf(codeInvalidArgument, op, "NormEps %g is not a finite float32 value >= 0", ops.NormEps)
	}
	if !desc.RMSNormB && (ops.NormWeight != nil || ops.NormEps != 0) {
		return errf(codeInvalidArgument, op, "NormWeight and NormEps are set only with RMSNormB")
	}
	// Resolve and acquire the operands: A B C D Bias ScaleA ScaleB ScaleD Workspace NormWeight.
	regions := [10]Region{ops.A, ops.B, ops.C, ops.D, ops.Bias, ops.ScaleA, ops.ScaleB, ops.ScaleD, ops.Workspace, ops.NormWeight}
	for i := range regions {
		if regions[i] == nil {
			switch {
			case i == 0 || i == 1 || i == 3:
				return errf(codeInvalidArgument, op, "operand %s is required", gemmOperandNames[i])
			case i == 2 && ops.Beta != 0:
				return errf(codeInvalidArgument, op, "operand C is required when beta is %g", ops.Beta)
			case i == 4 && desc.Epilogue.HasBias():
				return errf(codeInvalidArgument, op, "the epilogue needs a bias operand")
			case i == 9 && desc.RMSNormB:
				return errf(codeInvalidArgument, op, "RMSNormB needs the NormWeight operand (K = %d elements of %v)", desc.K, desc.BType)
			}
			continue
		}
		// C when beta is 0 and a bias the epilogue does not read are
		// checked but not part of the run: not held.
		unused := (i == 2 && ops.Beta == 0) || (i == 4 && !desc.Epilogue.HasBias())
		if err := g.operand(i, regions[i], unused); err != nil {
			return err
		}
	}
	aa, ab, ad := alignClass(g.opr[0].off), alignClass(g.opr[1].off), alignClass(g.opr[3].off)
	ac := uint32(256)
	if g.opr[2].b != nil {
		ac = alignClass(g.opr[2].off)
	}
	if memo != nil {
		md := &memo.key.desc
		if md.AlignA == aa && md.AlignB == ab && md.AlignC == ac && md.AlignD == ad && memo.acquire() {
			g.plan = memo
			rt.plans.hit(memo)
			if err := g.fits(&memo.key.desc, &memo.need); err != nil {
				return err
			}
			return g.enqueue(ops)
		}
		d = *md
	}
	d.AlignA, d.AlignB, d.AlignC, d.AlignD = aa, ab, ac, ad
	need := gemmNeeds(&d)
	if err := g.fits(&d, &need); err != nil {
		return err
	}
	key := planKey{dev: s.dev.index, desc: d}
	e, err := rt.plans.get(s.dev, &key, desc)
	if err != nil {
		return err
	}
	g.plan = e
	if e.src == *desc {
		slot.Store(e)
	}
	return g.enqueue(ops)
}

// operand resolves operand i and, unless unused, holds a use of its
// buffer (the stream's use holds the runtime). The checks and their order
// are use's (nil, freed) and then the device's.
func (g *gemmCall) operand(i int, r Region, unused bool) error {
	const op = "gemm"
	b, off, n, err := resolve(op, r)
	if err != nil {
		return err
	}
	s := g.s
	if b.dev != s.dev { // another device or runtime: its own closed/freed errors first
		if _, _, _, err := use(op, r); err != nil {
			return err
		}
		b.done()
		return errf(codeInvalidArgument, op, "%s", misplaced("operand "+gemmOperandNames[i], b.dev, "stream", s.dev))
	}
	if unused {
		if !b.l.alive() {
			return errFreed(op, "buffer")
		}
		return nil
	}
	if !g.holds(b) {
		if !b.l.acquire() {
			return errFreed(op, "buffer")
		}
		g.held |= 1 << i
	}
	g.opr[i] = gemmOperand{b, off, n}
	return nil
}

// holds reports whether the call already holds a use of b.
func (g *gemmCall) holds(b *Buffer) bool {
	for m := g.held; m != 0; m &= m - 1 {
		if g.opr[bits.TrailingZeros16(m)].b == b {
			return true
		}
	}
	return false
}

// gemmNeeds is the bytes each of A, B, C, D needs for d, and the bias's
// M elements in bytes; needOverflow where the extent does not fit 64
// bits (fits reports it).
func gemmNeeds(d *abi.GemmDesc) [6]uint64 {
	batch := d.BatchCount
	el := func(rows, cols, ld uint64, stride int64, t int32) uint64 {
		// ((batch-1)*stride + (cols-1)*ld + rows) * size, checked
		h1, a := bits.Mul64(batch-1, uint64(stride))
		h2, b := bits.Mul64(cols-1, ld)
		s, c1 := bits.Add64(a, b, 0)
		s, c2 := bits.Add64(s, rows, 0)
		h3, n := bits.Mul64(s, uint64(DType(t).Size()))
		if h1|h2|c1|c2|h3 != 0 || n == needOverflow {
			return needOverflow
		}
		return n
	}
	ra, ca := d.M, d.K
	if d.TransA != 0 {
		ra, ca = d.K, d.M
	}
	rb, cb := d.K, d.N
	if d.TransB != 0 {
		rb, cb = d.N, d.K
	}
	needB := el(rb, cb, d.LDB, d.StrideB, d.BType)
	if d.Prologue == abi.GemmPrologueSwiglu { // G then U: 2N columns (batch 1)
		needB = needOverflow
		if cb < math.MaxUint64/2 {
			needB = el(rb, 2*cb, d.LDB, 0, d.BType)
		}
	}
	return [6]uint64{
		el(ra, ca, d.LDA, d.StrideA, d.AType),
		needB,
		el(d.M, d.N, d.LDC, d.StrideC, d.CType),
		el(d.M, d.N, d.LDD, d.StrideD, d.DType),
		el(d.M, 1, 0, 0, d.BiasType),
		el(d.K, 1, 0, 0, d.BType),
	}
}

// needOverflow marks an operand extent of 2^64 bytes or more.
const needOverflow = math.MaxUint64

// fits checks the operands' extents against need (gemmNeeds(d)).
func (g *gemmCall) fits(d *abi.GemmDesc, need *[6]uint64) error {
	const op = "gemm"
	for i := 0; i < 5; i++ {
		if g.opr[i].b != nil && need[i] == needOverflow {
			return errf(codeOutOfRange, op, "operand %s spans 2^64 bytes or more: its extent (m %d, n %d, k %d, leading dimensions, batch %d and strides) overflows 64 bits", gemmOperandNames[i], d.M, d.N, d.K, d.BatchCount)
		}
	}
	for i := 0; i < 4; i++ {
		if g.opr[i].b != nil && need[i] > g.opr[i].n {
			return errf(codeOutOfRange, op, "operand %s needs %d bytes, its region has %d", gemmOperandNames[i], need[i], g.opr[i].n)
		}
	}
	if g.opr[4].b != nil && need[4] > g.opr[4].n {
		return errf(codeOutOfRange, op, "bias needs %d elements of %v, its region has %d bytes", d.M, DType(d.BiasType), g.opr[4].n)
	}
	for i := 5; i < 8; i++ {
		if g.opr[i].b != nil && g.opr[i].n < 4 {
			return errf(codeOutOfRange, op, "operand %s needs 4 bytes (one f32), its region has %d", gemmOperandNames[i], g.opr[i].n)
		}
	}
	if g.opr[9].b != nil && need[5] > g.opr[9].n {
		return errf(codeOutOfRange, op, "norm weight needs %d elements of %v, its region has %d bytes", d.K, DType(d.BType), g.opr[9].n)
	}
	return nil
}

// enqueue runs the held plan on the held operands.
func (g *gemmCall) enqueue(ops *GemmOperands) error {
	opr := &g.opr
	ra := abi.GemmRunArgs{StructSize: abi.SizeofGemmRunArgs, Alpha: ops.Alpha, Beta: ops.Beta}
	ra.A, ra.AOffset = opr[0].handle()
	ra.B, ra.BOffset = opr[1].handle()
	ra.C, ra.COffset = opr[2].handle()
	ra.D, ra.DOffset = opr[3].handle()
	ra.Bias, ra.BiasOffset = opr[4].handle()
	ra.ScaleA, ra.ScaleAOffset = opr[5].handle()
	ra.ScaleB, ra.ScaleBOffset = opr[6].handle()
	ra.ScaleD, ra.ScaleDOffset = opr[7].handle()
	ra.Workspace, ra.WorkspaceOffset = opr[8].handle()
	ra.WorkspaceSize = opr[8].n
	ra.NormWeight, ra.NormWeightOffset = opr[9].handle()
	ra.NormEps = ops.NormEps
	c := submission{slot: bind.SlotGemmRun, obj: uintptr(g.plan.h), args: unsafe.Pointer(&ra), size: unsafe.Sizeof(ra),
		opr: opr[:], plan: g.plan}
	return g.s.submit("gemm", &c)
}

func (o *gemmOperand) handle() (abi.Buffer, uint64) {
	if o.b == nil {
		return 0, 0
	}
	return o.b.h, o.off
}

// gemmFlagsMinor is the ABI minor that gave gpurt_gemm_desc its flags
// byte (reserved and 0 before).
const gemmFlagsMinor = 9

// gemmPrologueMinor is the ABI minor that gave gpurt_gemm_desc its
// prologue byte (reserved and 0 before: an older plugin would ignore it).
const gemmPrologueMinor = 10

// gemmFlags is the flags byte of desc for a plugin of ABI minor minor:
// none for a plugin older than 1.9 (the flags are hints; the byte was
// reserved there).
func gemmFlags(g *GemmDesc, minor uint32) uint8 {
	var f uint8
	if g.ConstA {
		f |= abi.GemmFlagConstA
	}
	if minor < gemmFlagsMinor {
		return 0
	}
	return f
}

// gemmABIDesc validates desc and fills the ABI descriptor for a plugin of
// ABI minor minor (defaults applied; alignment left for the caller).
func gemmABIDesc(g *GemmDesc, minor uint32) (abi.GemmDesc, error) {
	const op = "gemm"
	var d abi.GemmDesc
	if g.M <= 0 || g.N <= 0 || g.K <= 0 {
		return d, errf(codeInvalidArgument, op, "m, n and k must be positive (m %d, n %d, k %d)", g.M, g.N, g.K)
	}
	if g.Batch < 0 {
		return d, errf(codeInvalidArgument, op, "batch %d is negative", g.Batch)
	}
	var prologue uint8
	switch {
	case g.RMSNormB && g.SwiGLUB:
		return d, errf(codeInvalidArgument, op, "RMSNormB and SwiGLUB are both set (a GEMM has at most one prologue)")
	case g.RMSNormB:
		prologue = abi.GemmPrologueRmsnorm
	case g.SwiGLUB:
		prologue = abi.GemmPrologueSwiglu
	}
	if prologue != 0 && minor < gemmPrologueMinor {
		return d, errf(codeUnsupported, op, "a prologue (RMSNormB, SwiGLUB) needs a plugin of ABI 1.%d or later; this one is 1.%d", gemmPrologueMinor, minor)
	}
	if g.StrideA < 0 || g.StrideB < 0 || g.StrideC < 0 || g.StrideD < 0 {
		return d, errf(codeInvalidArgument, op, "strides must not be negative")
	}
	for _, t := range [...]struct {
		name string
		t    DType
	}{{"a_type", g.AType}, {"b_type", g.BType}, {"d_type", g.DType}} {
		if t.t.Size() == 0 {
			return d, errf(codeInvalidArgument, op, "%s: %v is not an element type", t.name, t.t)
		}
	}
	ct, bt := g.CType, g.BiasType
	if ct == 0 {
		ct = g.DType
	}
	if bt == 0 {
		bt = g.DType
	}
	if ct.Size() == 0 || bt.Size() == 0 {
		return d, errf(codeInvalidArgument, op, "c_type %v or bias_type %v is not an element type", ct, bt)
	}
	m, n, k := uint64(g.M), uint64(g.N), uint64(g.K)
	ra := m
	if g.TransA {
		ra = k
	}
	rb := k
	if g.TransB {
		rb = n
	}
	ldIn := [4]int{g.LDA, g.LDB, g.LDC, g.LDD}
	var lds [4]uint64
	rows := [4]uint64{ra, rb, m, m}
	for i, name := range [4]string{"lda", "ldb", "ldc", "ldd"} {
		if ldIn[i] < 0 {
			return d, errf(codeInvalidArgument, op, "%s %d is negative (0 means packed)", name, ldIn[i])
		}
		lds[i] = uint64(ldIn[i])
		if lds[i] == 0 {
			lds[i] = rows[i]
		}
		if lds[i] < rows[i] {
			return d, errf(codeInvalidArgument, op, "%s %d is smaller than the %d rows of the stored matrix", name, lds[i], rows[i])
		}
	}
	batch := uint64(g.Batch)
	if batch == 0 {
		batch = 1
	}
	var ta, tb uint8
	if g.TransA {
		ta = 1
	}
	if g.TransB {
		tb = 1
	}
	d = abi.GemmDesc{StructSize: abi.SizeofGemmDesc,
		AType: int32(g.AType), BType: int32(g.BType), CType: int32(ct), DType: int32(g.DType),
		ComputeType: int32(g.Compute), Epilogue: int32(g.Epilogue), BiasType: int32(bt),
		TransA: ta, TransB: tb, Flags: gemmFlags(g, minor), Prologue: prologue, M: m, N: n, K: k,
		LDA: lds[0], LDB: lds[1], LDC: lds[2], LDD: lds[3], BatchCount: batch,
		StrideA: g.StrideA, StrideB: g.StrideB, StrideC: g.StrideC, StrideD: g.StrideD}
	if !g.Epilogue.HasBias() {
		d.BiasType = 0
	}
	return d, nil
}
