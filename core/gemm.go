// SPDX-License-Identifier: Apache-2.0

package core

import (
	"unsafe"

	"github.com/metrale/gpurt/abi"
	"github.com/metrale/gpurt/core/internal/ffi"
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

// Epilogue is what a GEMM applies to D after alpha*op(A)*op(B)+beta*C.
type Epilogue int32

// Epilogues.
const (
	EpilogueNone     Epilogue = abi.EpilogueNone
	EpilogueBias     Epilogue = abi.EpilogueBias // D += bias[row]
	EpilogueRelu     Epilogue = abi.EpilogueRelu
	EpilogueBiasRelu Epilogue = abi.EpilogueBiasRelu
	EpilogueGelu     Epilogue = abi.EpilogueGelu // tanh approximation
	EpilogueBiasGelu Epilogue = abi.EpilogueBiasGelu
)

// HasBias reports whether the epilogue reads a bias vector.
func (e Epilogue) HasBias() bool {
	return e == EpilogueBias || e == EpilogueBiasRelu || e == EpilogueBiasGelu
}

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
}

// GemmOperands are a GEMM's memory and scalars. A, B and D are required;
// C is read only when Beta != 0 (and may be the same region as D); Bias
// when the epilogue has one (M elements of BiasType); ScaleA, ScaleB,
// ScaleD are optional per-tensor f32 scales in device memory (fp8; nil
// means 1.0); Workspace is optional (nil: the plugin's own). Alpha 0 is
// a literal zero: set it (usually 1).
type GemmOperands struct {
	A, B, C, D             Region
	Bias                   Region
	ScaleA, ScaleB, ScaleD Region
	Alpha, Beta            float64
	Workspace              Region
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

// gemmOperand is a resolved, acquired operand.
type gemmOperand struct {
	b   *Buffer
	off uint64
	n   uint64
}

// Gemm enqueues a GEMM on s, through the runtime's op cache: the plan for
// the descriptor (with the alignment class of each pointer and the
// device) is made once and reused; see Runtime.OpCacheStats. Operands
// must be on the stream's device. A plugin without GEMM (ABI 1.0) gives
// an error wrapping ErrUnsupported naming the versions; a descriptor the
// plugin cannot run gives ErrUnsupported naming the field. A warm call
// allocates nothing.
func (s *Stream) Gemm(desc GemmDesc, ops GemmOperands) error {
	const op = "gemm"
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.exit()
	rt := s.dev.rt
	if rt.api.GemmPlanCreate == 0 || rt.api.GemmRun == 0 || rt.api.GemmPlanDestroy == 0 {
		return rt.p.Unsupported(op, 1)
	}
	d, err := gemmABIDesc(&desc)
	if err != nil {
		return err
	}
	// Resolve and acquire the operands: A B C D Bias ScaleA ScaleB ScaleD Workspace.
	var opr [9]gemmOperand
	regions := [9]Region{ops.A, ops.B, ops.C, ops.D, ops.Bias, ops.ScaleA, ops.ScaleB, ops.ScaleD, ops.Workspace}
	names := [9]string{"A", "B", "C", "D", "bias", "scale A", "scale B", "scale D", "workspace"}
	defer func() {
		for i := range opr {
			if opr[i].b != nil {
				opr[i].b.done()
			}
		}
	}()
	for i, r := range regions {
		if r == nil {
			switch {
			case i == 0 || i == 1 || i == 3:
				return errf(CodeInvalidArgument, op, "operand %s is required", names[i])
			case i == 2 && ops.Beta != 0:
				return errf(CodeInvalidArgument, op, "operand C is required when beta is %g", ops.Beta)
			case i == 4 && desc.Epilogue.HasBias():
				return errf(CodeInvalidArgument, op, "the epilogue needs a bias operand")
			}
			continue
		}
		b, off, n, err := use(op, r)
		if err != nil {
			return err
		}
		opr[i] = gemmOperand{b, off, n}
		if b.dev != s.dev {
			return errf(CodeInvalidArgument, op, "operand %s is on %v of another runtime or device than the stream (%v)", names[i], b.dev, s.dev)
		}
	}
	if ops.Beta == 0 && opr[2].b != nil { // C is not read: not part of the run
		opr[2].b.done()
		opr[2] = gemmOperand{}
	}
	if !desc.Epilogue.HasBias() && opr[4].b != nil {
		opr[4].b.done()
		opr[4] = gemmOperand{}
	}
	// Extents.
	batch := d.BatchCount
	need := func(i int, rows, cols, ld uint64, stride int64, t int32) error {
		if opr[i].b == nil {
			return nil
		}
		el := (batch-1)*uint64(stride) + (cols-1)*ld + rows
		bytes := el * uint64(DType(t).Size())
		if bytes > opr[i].n {
			return errf(CodeOutOfRange, op, "operand %s needs %d bytes, its region has %d", names[i], bytes, opr[i].n)
		}
		return nil
	}
	ra, ca := d.M, d.K
	if d.TransA != 0 {
		ra, ca = d.K, d.M
	}
	rb, cb := d.K, d.N
	if d.TransB != 0 {
		rb, cb = d.N, d.K
	}
	if err := need(0, ra, ca, d.LDA, d.StrideA, d.AType); err != nil {
		return err
	}
	if err := need(1, rb, cb, d.LDB, d.StrideB, d.BType); err != nil {
		return err
	}
	if err := need(2, d.M, d.N, d.LDC, d.StrideC, d.CType); err != nil {
		return err
	}
	if err := need(3, d.M, d.N, d.LDD, d.StrideD, d.DType); err != nil {
		return err
	}
	if opr[4].b != nil && d.M*uint64(DType(d.BiasType).Size()) > opr[4].n {
		return errf(CodeOutOfRange, op, "bias needs %d elements of %v, its region has %d bytes", d.M, DType(d.BiasType), opr[4].n)
	}
	for i := 5; i < 8; i++ {
		if opr[i].b != nil && opr[i].n < 4 {
			return errf(CodeOutOfRange, op, "operand %s needs 4 bytes (one f32), its region has %d", names[i], opr[i].n)
		}
	}
	d.AlignA, d.AlignB, d.AlignD = alignClass(opr[0].off), alignClass(opr[1].off), alignClass(opr[3].off)
	d.AlignC = 256
	if opr[2].b != nil {
		d.AlignC = alignClass(opr[2].off)
	}
	key := planKey{dev: s.dev.index, desc: d}
	e, err := rt.plans.get(s.dev, &key)
	if err != nil {
		return err
	}
	defer rt.plans.put(e)
	ra2 := abi.GemmRunArgs{StructSize: gemmRunArgsSize, Alpha: ops.Alpha, Beta: ops.Beta}
	ra2.A, ra2.AOffset = opr[0].handle()
	ra2.B, ra2.BOffset = opr[1].handle()
	ra2.C, ra2.COffset = opr[2].handle()
	ra2.D, ra2.DOffset = opr[3].handle()
	ra2.Bias, ra2.BiasOffset = opr[4].handle()
	ra2.ScaleA, ra2.ScaleAOffset = opr[5].handle()
	ra2.ScaleB, ra2.ScaleBOffset = opr[6].handle()
	ra2.ScaleD, ra2.ScaleDOffset = opr[7].handle()
	ra2.Workspace, ra2.WorkspaceOffset = opr[8].handle()
	ra2.WorkspaceSize = opr[8].n
	return rt.check(op, ffi.Call4(rt.api.GemmRun, rt.h, s.h, e.h, uintptr(unsafe.Pointer(&ra2))))
}

var gemmRunArgsSize = uint64(unsafe.Sizeof(abi.GemmRunArgs{}))
var gemmDescSize = uint64(unsafe.Sizeof(abi.GemmDesc{}))

func (o *gemmOperand) handle() (uintptr, uint64) {
	if o.b == nil {
		return 0, 0
	}
	return o.b.h, o.off
}

// gemmABIDesc validates desc and fills the ABI descriptor (defaults
// applied; alignment left for the caller).
func gemmABIDesc(g *GemmDesc) (abi.GemmDesc, error) {
	const op = "gemm"
	var d abi.GemmDesc
	if g.M <= 0 || g.N <= 0 || g.K <= 0 {
		return d, errf(CodeInvalidArgument, op, "m, n and k must be positive (m %d, n %d, k %d)", g.M, g.N, g.K)
	}
	if g.Batch < 0 {
		return d, errf(CodeInvalidArgument, op, "batch %d is negative", g.Batch)
	}
	if g.StrideA < 0 || g.StrideB < 0 || g.StrideC < 0 || g.StrideD < 0 {
		return d, errf(CodeInvalidArgument, op, "strides must not be negative")
	}
	for _, t := range [...]struct {
		name string
		t    DType
	}{{"a_type", g.AType}, {"b_type", g.BType}, {"d_type", g.DType}} {
		if t.t.Size() == 0 {
			return d, errf(CodeInvalidArgument, op, "%s: %v is not an element type", t.name, t.t)
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
		return d, errf(CodeInvalidArgument, op, "c_type %v or bias_type %v is not an element type", ct, bt)
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
	lds := [4]uint64{uint64(max(g.LDA, 0)), uint64(max(g.LDB, 0)), uint64(max(g.LDC, 0)), uint64(max(g.LDD, 0))}
	rows := [4]uint64{ra, rb, m, m}
	for i, name := range [4]string{"lda", "ldb", "ldc", "ldd"} {
		if lds[i] == 0 {
			lds[i] = rows[i]
		}
		if lds[i] < rows[i] {
			return d, errf(CodeInvalidArgument, op, "%s %d is smaller than the %d rows of the stored matrix", name, lds[i], rows[i])
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
	d = abi.GemmDesc{StructSize: gemmDescSize,
		AType: int32(g.AType), BType: int32(g.BType), CType: int32(ct), DType: int32(g.DType),
		ComputeType: int32(g.Compute), Epilogue: int32(g.Epilogue), BiasType: int32(bt),
		TransA: ta, TransB: tb, M: m, N: n, K: k,
		LDA: lds[0], LDB: lds[1], LDC: lds[2], LDD: lds[3], BatchCount: batch,
		StrideA: g.StrideA, StrideB: g.StrideB, StrideC: g.StrideC, StrideD: g.StrideD}
	if !g.Epilogue.HasBias() {
		d.BiasType = 0
	}
	return d, nil
}
