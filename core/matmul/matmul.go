// SPDX-License-Identifier: Apache-2.0

// Package matmul is gpurt's quantized and grouped matrix multiplication
// (ABI 1.4), the LLM family of weight-only int8 layers and
// mixture-of-experts: Quant multiplies by MLX affine-quantized weights
// (package quant makes them on the host), Grouped runs one GEMM per
// expert group in one call. Both enqueue on a core.Stream, are checked in
// Go before they cross (the plugin checks again with the same messages),
// allocate nothing on a warm call, and are recorded like any stream
// operation inside core.Stream.Capture on plugins of ABI 1.7 (replayed by
// core.Graph.Launch). Their errors are *core.Error values, matched with
// errors.Is against core's sentinels (core.ErrUnsupported, ...). A
// plugin older than ABI 1.4 gives an error wrapping core.ErrUnsupported.
package matmul

import (
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/core/internal/bridge"
	"github.com/metrale/gpurt/internal/abi"
)

// QuantDesc describes y = x * dequant(W)^T with W in MLX's affine
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
type QuantDesc struct {
	XType     core.DType // F16 or BF16; y has the same type
	ScaleType core.DType // F16 or BF16 (MLX: the type of the original weights)
	Bits      int        // 8 (0 means 8)
	GroupSize int        // 32, 64 or 128
	M, N, K   int        // output features, tokens, input features
}

// QuantOperands are a QuantMatmul's memory. W and X must start at
// 16-byte aligned offsets, the others at offsets aligned to their element.
type QuantOperands struct {
	W, Scales, Biases, X, Y core.Region
}

// GroupedDesc describes a grouped GEMM for mixture-of-experts (ABI
// 1.4): len(MSizes) problems sharing N and K, all row-major,
//
//	D_g = A_g * B_g^T    (A_g is MSizes[g] x K, B_g is N x K, D_g is MSizes[g] x N)
//
// A and D hold the groups' rows one after another (sum(MSizes) rows), B
// holds len(MSizes) matrices of N x K one after another. With ABType
// core.FP8E4M3 (DeepSeek-style block scales) K must be a multiple of 128 and
// two f32 scale arrays are required: ScaleA, sum(MSizes) x K/128 (one per
// 1x128 block of A), and ScaleB, len(MSizes) x ceil(N/128) x K/128 (one per
// 128x128 block of each B_g). D is BF16.
//
// The row counts may instead be on the device (ABI 1.11): with
// GroupedOperands.Counts (Groups uint32 counts) and MSizes empty, the
// device reads the counts when the call runs, after the work enqueued
// before it on the stream (a routing kernel) wrote them, and a graph
// replay reads them anew: mixture-of-experts routing needs no host
// synchronization, and a step with it records whole. MaxM then stands
// for sum(MSizes) in the operands' sizes (A, D and ScaleA hold MaxM
// rows); the groups take rows in order while they fit, a group that would
// pass MaxM rows in all is cut there and the later ones get none (the
// device cannot return an error), and D's rows past the counts' total are
// not written.
type GroupedDesc struct {
	ABType core.DType // BF16 or FP8E4M3
	DType  core.DType // BF16 (0 means BF16)
	N, K   int
	MSizes []int // rows per group, >= 0; read during the call only
	Groups int   // with Counts: the number of groups (else 0)
	MaxM   int   // with Counts: the rows A and D hold (else 0)
}

// GroupedOperands are a GroupedGemm's memory. A and B must start at
// 16-byte aligned offsets, the others at offsets aligned to their element.
// ScaleA and ScaleB are for fp8 only (nil otherwise). Counts (ABI 1.11,
// optional) holds the groups' row counts as uint32 (see GroupedDesc).
type GroupedOperands struct {
	A, B, D        core.Region
	ScaleA, ScaleB core.Region
	Counts         core.Region
}

// countsMinor is the ABI minor that gave grouped_gemm its row counts on
// the device (an older plugin reads the arguments to its own size and
// would find no counts at all).
const countsMinor = 11

// begin begins c on its stream (bridge.Begin) for an operation through
// slot: a plugin without the slot refuses it (ErrUnsupported naming the
// versions). On success defer bridge.Finish(&c, &err).
func begin(c *bridge.Op, slot bind.Slot) error {
	if err := bridge.Begin(c); err != nil {
		return err
	}
	if !c.P.Has(slot) {
		err := c.P.Unsupported(c.Name, slot)
		bridge.Finish(c, &err)
		return err
	}
	return nil
}

// Quant enqueues y = x * dequant(W)^T (see QuantDesc) on s.
// The descriptor and the operands are checked here, as the plugin would:
// an unsupported type, bit width or group size is an error wrapping
// ErrUnsupported; a bad shape, a missing or misaligned operand
// ErrInvalidArgument; a region too small ErrOutOfRange. A plugin older
// than ABI 1.4 gives ErrUnsupported naming the versions. A call allocates
// nothing.
func Quant(s *core.Stream, d QuantDesc, o QuantOperands) (err error) {
	const op = "quant_matmul"
	c := bridge.Op{S: s, Name: op, Metric: metricOf(op)}
	if err := begin(&c, bind.SlotQuantMatmul); err != nil {
		return err
	}
	defer bridge.Finish(&c, &err)
	bitsN := d.Bits
	if bitsN == 0 {
		bitsN = 8
	}
	switch {
	case !isHalf(d.XType):
		return errorf(core.ErrUnsupported, op, "x type %v is not supported (f16 or bf16)", d.XType)
	case !isHalf(d.ScaleType):
		return errorf(core.ErrUnsupported, op, "scale type %v is not supported (f16 or bf16)", d.ScaleType)
	case bitsN != 8:
		return errorf(core.ErrUnsupported, op, "%d bits are not supported (8)", bitsN)
	case d.GroupSize != 32 && d.GroupSize != 64 && d.GroupSize != 128:
		return errorf(core.ErrUnsupported, op, "group size %d is not supported (32, 64 or 128)", d.GroupSize)
	case d.M <= 0 || d.N <= 0 || d.K <= 0:
		return errorf(core.ErrInvalidArgument, op, "m, n and k must be positive (m %d, n %d, k %d)", d.M, d.N, d.K)
	case d.K%d.GroupSize != 0:
		return errorf(core.ErrInvalidArgument, op, "k %d is not a multiple of the group size %d", d.K, d.GroupSize)
	case uint64(d.M) > 1<<32-1 || uint64(d.N) > 1<<32-1 || uint64(d.K) > 1<<32-1:
		return errorf(core.ErrUnsupported, op, "m, n and k must each be below 2^32 (m %d, n %d, k %d)", d.M, d.N, d.K)
	}
	m, n, k := uint64(d.M), uint64(d.N), uint64(d.K)
	wb, ok1 := mulOK(m, k)
	sb, ok2 := mulOK(m, 2*k/uint64(d.GroupSize))
	xb, ok3 := mulOK(n, 2*k)
	yb, ok4 := mulOK(n, 2*m)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return errorf(core.ErrInvalidArgument, op, "the operands' sizes overflow 64 bits")
	}
	if err := firstErr(
		operand(&c, 0, "W", &o.W, wb, 16),
		operand(&c, 1, "scales", &o.Scales, sb, 2),
		operand(&c, 2, "biases", &o.Biases, sb, 2),
		operand(&c, 3, "x", &o.X, xb, 16),
		operand(&c, 4, "y", &o.Y, yb, 2)); err != nil {
		return err
	}
	a := abi.QuantMatmulArgs{StructSize: abi.SizeofQuantMatmulArgs, XType: int32(d.XType), ScaleType: int32(d.ScaleType),
		Bits: uint32(bitsN), GroupSize: uint32(d.GroupSize), M: m, N: n, K: k}
	a.W, a.WOffset = c.Opr[0].Handle()
	a.Scales, a.ScalesOffset = c.Opr[1].Handle()
	a.Biases, a.BiasesOffset = c.Opr[2].Handle()
	a.X, a.XOffset = c.Opr[3].Handle()
	a.Y, a.YOffset = c.Opr[4].Handle()
	return bridge.Submit(&c, bind.SlotQuantMatmul, 0, unsafe.Pointer(&a), unsafe.Sizeof(a), nil)
}

// Grouped enqueues a grouped GEMM (see GroupedDesc) on s. Checks and
// errors are as Quant's; a group of 0 rows is allowed and a
// total of 0 rows enqueues nothing. MSizes is read during the call only.
// Counts on the device need a plugin of ABI 1.11 (else ErrUnsupported
// naming the versions); the mock and CUDA take them, Metal refuses them.
// A call allocates nothing.
func Grouped(s *core.Stream, d GroupedDesc, o GroupedOperands) (err error) {
	const op = "grouped_gemm"
	c := bridge.Op{S: s, Name: op, Metric: metricOf(op)}
	if err := begin(&c, bind.SlotGroupedGemm); err != nil {
		return err
	}
	defer bridge.Finish(&c, &err)
	dt := d.DType
	if dt == 0 {
		dt = core.BF16
	}
	fp8 := d.ABType == core.FP8E4M3
	dev := o.Counts != nil
	switch {
	case d.ABType != core.BF16 && !fp8:
		return errorf(core.ErrUnsupported, op, "a/b type %v is not supported (bf16 or fp8_e4m3)", d.ABType)
	case dt != core.BF16:
		return errorf(core.ErrUnsupported, op, "d type %v is not supported (bf16)", dt)
	case dev && len(d.MSizes) > 0:
		return errorf(core.ErrInvalidArgument, op, "MSizes and Counts are both given (the row counts come from one of them: host or device)")
	case !dev && (d.Groups != 0 || d.MaxM != 0):
		return errorf(core.ErrInvalidArgument, op, "Groups %d and MaxM %d go with Counts (the row counts on the device); with MSizes both are 0", d.Groups, d.MaxM)
	case dev && (d.Groups <= 0 || d.MaxM <= 0):
		return errorf(core.ErrInvalidArgument, op, "Counts needs Groups >= 1 and MaxM >= 1 (Groups %d, MaxM %d)", d.Groups, d.MaxM)
	case dev && (uint64(d.Groups) > 1<<32-1 || uint64(d.MaxM) > 1<<32-1):
		return errorf(core.ErrUnsupported, op, "Groups %d and MaxM %d must each be below 2^32", d.Groups, d.MaxM)
	case dev && c.P.Minor < countsMinor:
		return errorf(core.ErrUnsupported, op, "row counts on the device (Counts) need a plugin of ABI 1.%d or later; this one is 1.%d", countsMinor, c.P.Minor)
	case !dev && len(d.MSizes) == 0:
		return errorf(core.ErrInvalidArgument, op, "no groups (MSizes is empty)")
	case d.N <= 0 || d.K <= 0:
		return errorf(core.ErrInvalidArgument, op, "n and k must be positive (n %d, k %d)", d.N, d.K)
	case fp8 && d.K%128 != 0:
		return errorf(core.ErrInvalidArgument, op, "k %d is not a multiple of 128 (fp8 block scales cover 128 x 128 blocks)", d.K)
	case uint64(d.N) > 1<<32-1 || uint64(d.K) > 1<<32-1 || uint64(len(d.MSizes)) > 1<<32-1:
		return errorf(core.ErrUnsupported, op, "group count, n and k must each be below 2^32")
	}
	G := uint64(len(d.MSizes))
	var total uint64
	if dev {
		G, total = uint64(d.Groups), uint64(d.MaxM)
	}
	for g, m := range d.MSizes {
		if m < 0 {
			return errorf(core.ErrInvalidArgument, op, "MSizes[%d] is %d (must be >= 0)", g, m)
		}
		total += uint64(m)
		if uint64(m) > 1<<32-1 || total > 1<<32-1 {
			return errorf(core.ErrUnsupported, op, "MSizes[%d] = %d takes the total rows past 2^32 - 1", g, m)
		}
	}
	n, k := uint64(d.N), uint64(d.K)
	es := uint64(2)
	if fp8 {
		es = 1
	}
	ab, ok1 := mulOK(total, k*es)
	nk, ok2 := mulOK(n, k*es)
	bb, ok3 := mulOK(G, nk)
	db, ok4 := mulOK(total, 2*n)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return errorf(core.ErrInvalidArgument, op, "the operands' sizes overflow 64 bits")
	}
	if err := firstErr(
		operand(&c, 0, "A", &o.A, ab, 16),
		operand(&c, 1, "B", &o.B, bb, 16),
		operand(&c, 2, "D", &o.D, db, 2)); err != nil {
		return err
	}
	if dev {
		if err := operand(&c, 5, "Counts", &o.Counts, 4*G, 4); err != nil {
			return err
		}
	}
	if fp8 {
		kb, nb := k/128, (n+127)/128
		sab, ok1 := mulOK(total, 4*kb)
		sbb, ok2 := mulOK(G*nb, 4*kb)
		if !ok1 || !ok2 {
			return errorf(core.ErrInvalidArgument, op, "the scales' sizes overflow 64 bits")
		}
		if err := firstErr(operand(&c, 3, "scale A", &o.ScaleA, sab, 4), operand(&c, 4, "scale B", &o.ScaleB, sbb, 4)); err != nil {
			return err
		}
	} else if o.ScaleA != nil || o.ScaleB != nil {
		return errorf(core.ErrInvalidArgument, op, "scales apply to fp8 operands only (a/b type %v)", d.ABType)
	}
	a := abi.GroupedGemmArgs{StructSize: abi.SizeofGroupedGemmArgs, ABType: int32(d.ABType), DType: int32(dt),
		GroupCount: G, N: n, K: k}
	a.A, a.AOffset = c.Opr[0].Handle()
	a.B, a.BOffset = c.Opr[1].Handle()
	a.D, a.DOffset = c.Opr[2].Handle()
	a.ScaleA, a.ScaleAOffset = c.Opr[3].Handle()
	a.ScaleB, a.ScaleBOffset = c.Opr[4].Handle()
	if dev {
		a.MCounts, a.MCountsOffset = c.Opr[5].Handle()
		a.MaxM = total
	} else if a.MSizes = bind.IntsData(d.MSizes); a.MSizes == nil {
		// MSizes as uint64s: int is 64 bits on every platform with a call
		// path (amd64, arm64) and every entry was checked to be >= 0.
		return errorf(core.ErrUnsupported, op, "needs a 64-bit platform")
	}
	return bridge.Submit(&c, bind.SlotGroupedGemm, 0, unsafe.Pointer(&a), unsafe.Sizeof(a), fixGroupedGemm)
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

// errorf is an error of op raised before the call crosses.
// errorf is a *core.Error of the code whose sentinel is kind
// (core.ErrInvalidArgument, ...).
func errorf(kind error, op, format string, args ...any) error {
	return bridge.Error(kind, op, fmt.Sprintf(format, args...))
}

// operand resolves operand i of c (see bridge.OperandOf).
func operand(c *bridge.Op, i int, name string, r *core.Region, need, align uint64) error {
	return bridge.OperandOf(c, i, name, unsafe.Pointer(r), need, align)
}

// mulOK returns a*b and whether it did not overflow.
func mulOK(a, b uint64) (uint64, bool) {
	hi, lo := bits.Mul64(a, b)
	return lo, hi == 0
}

func isHalf(t core.DType) bool { return t == core.F16 || t == core.BF16 }

// firstErr returns the first non-nil error; later arguments are evaluated
// (Go evaluates every argument) but each operand check stops at nothing
// worse than a held use, which Finish gives back.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// metricOf is the core metric an operation's eager calls count in.
func metricOf(op string) bridge.Metric {
	if op == "grouped_gemm" {
		return bridge.MetricGroupedGemm
	}
	return bridge.MetricQuantMatmul
}
