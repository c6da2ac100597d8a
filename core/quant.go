// SPDX-License-Identifier: Apache-2.0

package core

import (
	"math/bits"
	"unsafe"

	"github.com/metrale/gpurt/abi"
	"github.com/metrale/gpurt/core/internal/bind"
)

// QuantMatmulDesc describes y = x * dequant(W)^T with W in MLX's affine
// quantized format (ABI 1.4), all matrices row-major:
//
//	W  M x K codes, one byte each (Bits 8): MLX's uint32 words as bytes
//	   (package quant makes them: quant.Quantize)
//	scales, biases  M x K/GroupSize elements of ScaleType
//	x  N x K elements of XType (N tokens)
//	y  N x M elements of XType
//	y[t][i] = sum_j x[t][j] * (scales[i][j/GroupSize]*W[i][j] + biases[i][j/GroupSize])
//
// This is exactly what mlx.core.quantized_matmul(x, w, scales, biases,
// transpose=True, group_size, bits=8) computes. Small N (decode, up to 8
// tokens) and large N (prefill) may take different kernels on a GPU; the
// result is the same within rounding.
type QuantMatmulDesc struct {
	XType     DType // F16 or BF16; y has the same type
	ScaleType DType // F16 or BF16 (MLX: the type of the original weights)
	Bits      int   // 8 (0 means 8)
	GroupSize int   // 32, 64 or 128
	M, N, K   int   // output features, tokens, input features
}

// QuantMatmulOperands are a QuantMatmul's memory. W and X must start at
// 16-byte aligned offsets, the others at offsets aligned to their element.
type QuantMatmulOperands struct {
	W, Scales, Biases, X, Y Region
}

// GroupedGemmDesc describes a grouped GEMM for mixture-of-experts (ABI
// 1.4): len(MSizes) problems sharing N and K, all row-major,
//
//	D_g = A_g * B_g^T    (A_g is MSizes[g] x K, B_g is N x K, D_g is MSizes[g] x N)
//
// A and D hold the groups' rows one after another (sum(MSizes) rows), B
// holds len(MSizes) matrices of N x K one after another. With ABType
// FP8E4M3 (DeepSeek-style block scales) K must be a multiple of 128 and
// two f32 scale arrays are required: ScaleA, sum(MSizes) x K/128 (one per
// 1x128 block of A), and ScaleB, len(MSizes) x ceil(N/128) x K/128 (one per
// 128x128 block of each B_g). D is BF16.
type GroupedGemmDesc struct {
	ABType DType // BF16 or FP8E4M3
	DType  DType // BF16 (0 means BF16)
	N, K   int
	MSizes []int // rows per group, >= 0; read during the call only
}

// GroupedGemmOperands are a GroupedGemm's memory. A and B must start at
// 16-byte aligned offsets, the others at offsets aligned to their element.
// ScaleA and ScaleB are for fp8 only (nil otherwise).
type GroupedGemmOperands struct {
	A, B, D        Region
	ScaleA, ScaleB Region
}

// opCall holds the operands of one 1.4 op call: each a use of its buffer
// (one per distinct buffer), released by finish.
type opCall struct {
	s    *Stream
	op   string
	opr  [5]gemmOperand
	held uint8
}

func (c *opCall) finish() {
	for m := c.held; m != 0; m &= m - 1 {
		c.opr[bits.TrailingZeros8(m)].b.l.release()
	}
	c.s.exit()
}

// operand resolves operand i (named name), checks its device, its
// alignment and that it holds need bytes, and holds a use of its buffer.
func (c *opCall) operand(i int, name string, r Region, need uint64, align uint64) error {
	if r == nil {
		return errf(CodeInvalidArgument, c.op, "operand %s is required", name)
	}
	b, off, n, err := resolve(c.op, r)
	if err != nil {
		return err
	}
	s := c.s
	if b.dev != s.dev {
		if _, _, _, err := use(c.op, r); err != nil {
			return err
		}
		b.done()
		return errf(CodeInvalidArgument, c.op, "%s", misplaced("operand "+name, b.dev, "stream", s.dev))
	}
	held := false
	for m := c.held; m != 0; m &= m - 1 {
		if c.opr[bits.TrailingZeros8(m)].b == b {
			held = true
		}
	}
	if !held {
		if !b.l.acquire() {
			return errFreed(c.op, "buffer")
		}
		c.held |= 1 << i
	}
	c.opr[i] = gemmOperand{b, off, n}
	if off%align != 0 {
		return errf(CodeInvalidArgument, c.op, "operand %s starts at offset %d of its buffer, not a multiple of %d", name, off, align)
	}
	if need > n {
		return errf(CodeOutOfRange, c.op, "operand %s needs %d bytes, its region has %d", name, need, n)
	}
	return nil
}

// mul returns a*b and whether it overflowed.
func mulOK(a, b uint64) (uint64, bool) {
	hi, lo := bits.Mul64(a, b)
	return lo, hi == 0
}

func isHalf(t DType) bool { return t == F16 || t == BF16 }

// QuantMatmul enqueues y = x * dequant(W)^T (see QuantMatmulDesc) on s.
// The descriptor and the operands are checked here, as the plugin would:
// an unsupported type, bit width or group size is an error wrapping
// ErrUnsupported; a bad shape, a missing or misaligned operand
// ErrInvalidArgument; a region too small ErrOutOfRange. A plugin older
// than ABI 1.4 gives ErrUnsupported naming the versions. A call allocates
// nothing.
func (s *Stream) QuantMatmul(d QuantMatmulDesc, o QuantMatmulOperands) (err error) {
	const op = "quant_matmul"
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.sticky(&err)
	c := opCall{s: s, op: op}
	defer c.finish()
	rt := s.dev.rt
	if !rt.p.Has(bind.SlotQuantMatmul) {
		return rt.p.Unsupported(op, bind.SlotQuantMatmul)
	}
	bitsN := d.Bits
	if bitsN == 0 {
		bitsN = 8
	}
	switch {
	case !isHalf(d.XType):
		return errf(CodeUnsupported, op, "x type %v is not supported (f16 or bf16)", d.XType)
	case !isHalf(d.ScaleType):
		return errf(CodeUnsupported, op, "scale type %v is not supported (f16 or bf16)", d.ScaleType)
	case bitsN != 8:
		return errf(CodeUnsupported, op, "%d bits are not supported (8)", bitsN)
	case d.GroupSize != 32 && d.GroupSize != 64 && d.GroupSize != 128:
		return errf(CodeUnsupported, op, "group size %d is not supported (32, 64 or 128)", d.GroupSize)
	case d.M <= 0 || d.N <= 0 || d.K <= 0:
		return errf(CodeInvalidArgument, op, "m, n and k must be positive (m %d, n %d, k %d)", d.M, d.N, d.K)
	case d.K%d.GroupSize != 0:
		return errf(CodeInvalidArgument, op, "k %d is not a multiple of the group size %d", d.K, d.GroupSize)
	case uint64(d.M) > 1<<32-1 || uint64(d.N) > 1<<32-1 || uint64(d.K) > 1<<32-1:
		return errf(CodeUnsupported, op, "m, n and k must each be below 2^32 (m %d, n %d, k %d)", d.M, d.N, d.K)
	}
	m, n, k := uint64(d.M), uint64(d.N), uint64(d.K)
	wb, ok1 := mulOK(m, k)
	sb, ok2 := mulOK(m, 2*k/uint64(d.GroupSize))
	xb, ok3 := mulOK(n, 2*k)
	yb, ok4 := mulOK(n, 2*m)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return errf(CodeInvalidArgument, op, "the operands' sizes overflow 64 bits")
	}
	if err := firstErr(
		c.operand(0, "W", o.W, wb, 16),
		c.operand(1, "scales", o.Scales, sb, 2),
		c.operand(2, "biases", o.Biases, sb, 2),
		c.operand(3, "x", o.X, xb, 16),
		c.operand(4, "y", o.Y, yb, 2)); err != nil {
		return err
	}
	a := abi.QuantMatmulArgs{StructSize: abi.SizeofQuantMatmulArgs, XType: int32(d.XType), ScaleType: int32(d.ScaleType),
		Bits: uint32(bitsN), GroupSize: uint32(d.GroupSize), M: m, N: n, K: k}
	a.W, a.WOffset = c.opr[0].handle()
	a.Scales, a.ScalesOffset = c.opr[1].handle()
	a.Biases, a.BiasesOffset = c.opr[2].handle()
	a.X, a.XOffset = c.opr[3].handle()
	a.Y, a.YOffset = c.opr[4].handle()
	sub := submission{slot: bind.SlotQuantMatmul, args: unsafe.Pointer(&a), size: unsafe.Sizeof(a), opr: c.opr[:]}
	return s.submit(op, &sub)
}

// firstErr returns the first non-nil error; later arguments are evaluated
// (Go evaluates every argument) but each operand check stops at nothing
// worse than a held use, which finish releases.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// GroupedGemm enqueues a grouped GEMM (see GroupedGemmDesc) on s. Checks
// and errors are as QuantMatmul's; a group of 0 rows is allowed and a
// total of 0 rows enqueues nothing. MSizes is read during the call only.
// A call allocates nothing.
func (s *Stream) GroupedGemm(d GroupedGemmDesc, o GroupedGemmOperands) (err error) {
	const op = "grouped_gemm"
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.sticky(&err)
	c := opCall{s: s, op: op}
	defer c.finish()
	rt := s.dev.rt
	if !rt.p.Has(bind.SlotGroupedGemm) {
		return rt.p.Unsupported(op, bind.SlotGroupedGemm)
	}
	dt := d.DType
	if dt == 0 {
		dt = BF16
	}
	fp8 := d.ABType == FP8E4M3
	switch {
	case d.ABType != BF16 && !fp8:
		return errf(CodeUnsupported, op, "a/b type %v is not supported (bf16 or fp8_e4m3)", d.ABType)
	case dt != BF16:
		return errf(CodeUnsupported, op, "d type %v is not supported (bf16)", dt)
	case len(d.MSizes) == 0:
		return errf(CodeInvalidArgument, op, "no groups (MSizes is empty)")
	case d.N <= 0 || d.K <= 0:
		return errf(CodeInvalidArgument, op, "n and k must be positive (n %d, k %d)", d.N, d.K)
	case fp8 && d.K%128 != 0:
		return errf(CodeInvalidArgument, op, "k %d is not a multiple of 128 (fp8 block scales cover 128 x 128 blocks)", d.K)
	case uint64(d.N) > 1<<32-1 || uint64(d.K) > 1<<32-1 || uint64(len(d.MSizes)) > 1<<32-1:
		return errf(CodeUnsupported, op, "group count, n and k must each be below 2^32")
	}
	var total uint64
	for g, m := range d.MSizes {
		if m < 0 {
			return errf(CodeInvalidArgument, op, "MSizes[%d] is %d (must be >= 0)", g, m)
		}
		total += uint64(m)
		if uint64(m) > 1<<32-1 || total > 1<<32-1 {
			return errf(CodeUnsupported, op, "MSizes[%d] = %d takes the total rows past 2^32 - 1", g, m)
		}
	}
	G, n, k := uint64(len(d.MSizes)), uint64(d.N), uint64(d.K)
	es := uint64(2)
	if fp8 {
		es = 1
	}
	ab, ok1 := mulOK(total, k*es)
	nk, ok2 := mulOK(n, k*es)
	bb, ok3 := mulOK(G, nk)
	db, ok4 := mulOK(total, 2*n)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return errf(CodeInvalidArgument, op, "the operands' sizes overflow 64 bits")
	}
	if err := firstErr(
		c.operand(0, "A", o.A, ab, 16),
		c.operand(1, "B", o.B, bb, 16),
		c.operand(2, "D", o.D, db, 2)); err != nil {
		return err
	}
	if fp8 {
		kb, nb := k/128, (n+127)/128
		sab, ok1 := mulOK(total, 4*kb)
		sbb, ok2 := mulOK(G*nb, 4*kb)
		if !ok1 || !ok2 {
			return errf(CodeInvalidArgument, op, "the scales' sizes overflow 64 bits")
		}
		if err := firstErr(c.operand(3, "scale A", o.ScaleA, sab, 4), c.operand(4, "scale B", o.ScaleB, sbb, 4)); err != nil {
			return err
		}
	} else if o.ScaleA != nil || o.ScaleB != nil {
		return errf(CodeInvalidArgument, op, "scales apply to fp8 operands only (a/b type %v)", d.ABType)
	}
	a := abi.GroupedGemmArgs{StructSize: abi.SizeofGroupedGemmArgs, ABType: int32(d.ABType), DType: int32(dt),
		GroupCount: G, N: n, K: k}
	a.A, a.AOffset = c.opr[0].handle()
	a.B, a.BOffset = c.opr[1].handle()
	a.D, a.DOffset = c.opr[2].handle()
	a.ScaleA, a.ScaleAOffset = c.opr[3].handle()
	a.ScaleB, a.ScaleBOffset = c.opr[4].handle()
	// MSizes as uint64s: int is 64 bits on every platform with a call
	// path (amd64, arm64) and every entry was checked to be >= 0.
	if a.MSizes = bind.IntsData(d.MSizes); a.MSizes == nil {
		return errf(CodeUnsupported, op, "needs a 64-bit platform")
	}
	sub := submission{slot: bind.SlotGroupedGemm, args: unsafe.Pointer(&a), size: unsafe.Sizeof(a), opr: c.opr[:],
		fix: fixGroupedGemm}
	return s.submit(op, &sub)
}

// fixGroupedGemm makes a recorded grouped GEMM's arguments (the
// recording's copy, args) independent of the caller's MSizes slice, which
// is read during the call only: the counts are copied into keep, which
// the recording holds as long as the graph.
func fixGroupedGemm(args unsafe.Pointer, keep *[]uint64) {
	a := (*abi.GroupedGemmArgs)(args)
	if a.MSizes == nil {
		return
	}
	*keep = append([]uint64(nil), unsafe.Slice(a.MSizes, a.GroupCount)...)
	a.MSizes = &(*keep)[0]
}
