// SPDX-License-Identifier: Apache-2.0

// Package quant converts weights to MLX's affine quantized format, the
// format matmul.Quant reads (see core/matmul.QuantDesc).
//
// Quantize reproduces mlx.core.quantize(w, group_size, bits,
// mode="affine") bit for bit (checked against vectors made by MLX itself,
// testdata/mlx_vectors.json): every group of GroupSize consecutive values
// of a row gets a scale s and a bias b, and each value w is stored as the
// unsigned integer q = clamp(rint((w - b) / s), 0, 2^bits - 1), so that
// s*q + b approximates w. As in MLX, s and b are computed in float32:
//
//	max, min  over the group
//	s = max((max - min) / (2^bits - 1), 1e-7), negated unless |min| > |max|
//	edge = min if |min| > |max| else max
//	q0 = rint(edge / s); if q0 != 0 { s = edge / q0; b = edge } else { b = 0 }
//
// (so one of the group's extremes is represented exactly, and s may be
// negative), and then rounded to the scale type for storage; the values
// are quantized with the float32 s and b. rint rounds half to even.
//
// Packing is MLX's: the codes of a row form a little-endian bit stream in
// uint32 words (32/bits codes per word, the first code in the low bits).
// For bits 8 that is simply one byte per value, in order.
package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/floatbits"
)

// Weights is a quantized rows x cols matrix in MLX's layout.
type Weights struct {
	Rows, Cols int
	GroupSize  int
	Bits       int
	// ScaleType is the element type of Scales and Biases (MLX: the
	// weights' own type): core.F32, core.F16 or core.BF16.
	ScaleType core.DType
	// Q is the packed codes: Rows * Cols * Bits / 8 bytes, row-major,
	// MLX's uint32 words in little-endian byte order.
	Q []byte
	// Scales and Biases are Rows x Cols/GroupSize elements of ScaleType
	// (row-major), little-endian.
	Scales, Biases []byte
}

// Options choose the format.
type Options struct {
	GroupSize int        // 32, 64 or 128 (0: 64, MLX's default)
	Bits      int        // 2, 4 or 8 (0: 8)
	ScaleType core.DType // F32, F16 or BF16 (0: BF16)
}

func (o Options) withDefaults() Options {
	if o.GroupSize == 0 {
		o.GroupSize = 64
	}
	if o.Bits == 0 {
		o.Bits = 8
	}
	if o.ScaleType == 0 {
		o.ScaleType = core.BF16
	}
	return o
}

// Quantize quantizes w (rows x cols, row-major). To match MLX on weights
// stored as f16 or bf16, pass those values widened to float32 and their
// type as ScaleType: MLX reads each value as float32 and keeps the scales
// in the weights' type. cols must be a multiple of the group size.
func Quantize(w []float32, rows, cols int, opt Options) (*Weights, error) {
	o := opt.withDefaults()
	switch o.GroupSize {
	case 32, 64, 128:
	default:
		return nil, fmt.Errorf("quant: group size %d is not supported (32, 64 or 128)", o.GroupSize)
	}
	switch o.Bits {
	case 2, 4, 8:
	default:
		return nil, fmt.Errorf("quant: %d bits are not supported (2, 4 or 8)", o.Bits)
	}
	switch o.ScaleType {
	case core.F32, core.F16, core.BF16:
	default:
		return nil, fmt.Errorf("quant: scale type %v is not supported (f32, f16 or bf16)", o.ScaleType)
	}
	if rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("quant: rows %d and cols %d must be positive", rows, cols)
	}
	if cols%o.GroupSize != 0 {
		return nil, fmt.Errorf("quant: cols %d is not a multiple of the group size %d", cols, o.GroupSize)
	}
	if len(w) != rows*cols {
		return nil, fmt.Errorf("quant: w has %d values, rows x cols is %d", len(w), rows*cols)
	}
	gs, bits := o.GroupSize, o.Bits
	groups := rows * cols / gs
	es := o.ScaleType.Size()
	out := &Weights{Rows: rows, Cols: cols, GroupSize: gs, Bits: bits, ScaleType: o.ScaleType,
		Q:      make([]byte, rows*cols*bits/8),
		Scales: make([]byte, groups*es), Biases: make([]byte, groups*es)}
	nBins := float32(int(1)<<bits - 1)
	perWord := 32 / bits
	for g := 0; g < groups; g++ {
		grp := w[g*gs : (g+1)*gs]
		s, b := groupParams(grp, nBins)
		for j := 0; j < gs/perWord; j++ {
			var word uint32
			for e := 0; e < perWord; e++ {
				word |= uint32(code(grp[j*perWord+e], s, b, nBins)) << (e * bits)
			}
			binary.LittleEndian.PutUint32(out.Q[(g*gs/perWord+j)*4:], word)
		}
		putScalar(out.Scales[g*es:], o.ScaleType, s)
		putScalar(out.Biases[g*es:], o.ScaleType, b)
	}
	return out, nil
}

// groupParams is MLX's scale and bias of one group, in float32.
func groupParams(grp []float32, nBins float32) (s, b float32) {
	wMin := float32(math.Inf(1))
	wMax := -wMin
	for _, v := range grp {
		wMax = max(wMax, v)
		wMin = min(wMin, v)
	}
	mask := abs32(wMin) > abs32(wMax)
	s = max(float32(wMax-wMin)/nBins, float32(1e-7))
	if !mask {
		s = -s
	}
	edge := wMax
	if mask {
		edge = wMin
	}
	q0 := rint(float32(edge / s))
	if q0 != 0 {
		s = float32(edge / q0)
		b = edge
	}
	return s, b
}

// code is one value's code: clamp(rint((v - b) / s), 0, nBins).
func code(v, s, b, nBins float32) uint32 {
	q := rint(float32(float32(v-b) / s))
	q = min(max(q, 0), nBins)
	return uint32(q)
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// rint rounds half to even, as C's rint in the default rounding mode.
func rint(v float32) float32 { return float32(math.RoundToEven(float64(v))) }

func putScalar(dst []byte, t core.DType, v float32) {
	switch t {
	case core.F32:
		binary.LittleEndian.PutUint32(dst, math.Float32bits(v))
	case core.F16:
		binary.LittleEndian.PutUint16(dst, floatbits.F16FromFloat32(v))
	case core.BF16:
		binary.LittleEndian.PutUint16(dst, floatbits.BF16FromFloat32(v))
	}
}

func getScalar(src []byte, t core.DType) float64 {
	switch t {
	case core.F32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(src)))
	case core.F16:
		return float64(floatbits.F16ToFloat32(binary.LittleEndian.Uint16(src)))
	default:
		return float64(floatbits.BF16ToFloat32(binary.LittleEndian.Uint16(src)))
	}
}

// Code returns the code of element (r, c).
func (q *Weights) Code(r, c int) uint32 {
	i := r*q.Cols + c
	perWord := 32 / q.Bits
	word := binary.LittleEndian.Uint32(q.Q[(i/perWord)*4:])
	return word >> ((i % perWord) * q.Bits) & (1<<q.Bits - 1)
}

// Scale and Bias return the stored (rounded) scale and bias of the group
// holding element (r, c), widened to float64.
func (q *Weights) Scale(r, c int) float64 {
	es := q.ScaleType.Size()
	return getScalar(q.Scales[((r*q.Cols+c)/q.GroupSize)*es:], q.ScaleType)
}

// Bias: see Scale.
func (q *Weights) Bias(r, c int) float64 {
	es := q.ScaleType.Size()
	return getScalar(q.Biases[((r*q.Cols+c)/q.GroupSize)*es:], q.ScaleType)
}

// Dequantize returns s*q + b for every element (row-major), computed in
// float64 from the stored scales and biases: the weights matmul.Quant
// multiplies by.
func (q *Weights) Dequantize() []float64 {
	out := make([]float64, q.Rows*q.Cols)
	for r := 0; r < q.Rows; r++ {
		for c := 0; c < q.Cols; c++ {
			out[r*q.Cols+c] = q.Scale(r, c)*float64(q.Code(r, c)) + q.Bias(r, c)
		}
	}
	return out
}
