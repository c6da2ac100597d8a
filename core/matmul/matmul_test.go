// SPDX-License-Identifier: Apache-2.0

package matmul_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/matmul"
	"github.com/metrale/gpurt/floatbits"
	"github.com/metrale/gpurt/internal/le"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
	"github.com/metrale/gpurt/quant"
)

// The family packages' shared mock runtime and setup.
var (
	openMock = mockrt.Open
	dev0     = mockrt.Device0
	upload   = mockrt.Upload
	halves   = mockrt.Halves
)

func unhalf(t core.DType, b []byte, i int) float64 {
	h := binary.LittleEndian.Uint16(b[2*i:])
	if t == core.F16 {
		return float64(floatbits.F16ToFloat32(h))
	}
	return float64(floatbits.BF16ToFloat32(h))
}

// TestQuantMatmulMock: the mock's y matches a float64 reference made from
// quant.Quantize's weights, element by element within one rounding.
func TestQuantMatmulMock(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		xt, st  core.DType
		m, n, k int
		gs      int
	}{
		{core.BF16, core.BF16, 24, 1, 128, 32},
		{core.F16, core.F16, 16, 5, 256, 64},
		{core.BF16, core.F16, 8, 9, 256, 128},
	} {
		t.Run(tc.xt.String()+"_"+tc.st.String(), func(t *testing.T) {
			w := make([]float32, tc.m*tc.k)
			for i := range w {
				w[i] = float32(r.NormFloat64())
			}
			q, err := quant.Quantize(w, tc.m, tc.k, quant.Options{GroupSize: tc.gs, Bits: 8, ScaleType: tc.st})
			require.NoError(t, err)
			x := make([]float32, tc.n*tc.k)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			xb := halves(tc.xt, x)
			bw, bs, bb, bx := upload(t, d, q.Q), upload(t, d, q.Scales), upload(t, d, q.Biases), upload(t, d, xb)
			by := mockrt.Alloc(t, d, 2*tc.n*tc.m)
			s := mockrt.Stream(t, d)
			require.NoError(t, matmul.Quant(s, matmul.QuantDesc{XType: tc.xt, ScaleType: tc.st, GroupSize: tc.gs, M: tc.m, N: tc.n, K: tc.k},
				matmul.QuantOperands{W: bw, Scales: bs, Biases: bb, X: bx, Y: by}))
			require.NoError(t, s.Synchronize())
			got := make([]byte, 2*tc.n*tc.m)
			require.NoError(t, core.CopyToHost(got, by))
			deq := q.Dequantize()
			for tok := 0; tok < tc.n; tok++ {
				for i := 0; i < tc.m; i++ {
					ref := 0.0
					for j := 0; j < tc.k; j++ {
						ref += unhalf(tc.xt, xb, tok*tc.k+j) * deq[i*tc.k+j]
					}
					ulp := math.Abs(ref) / 128
					if tc.xt == core.F16 {
						ulp = math.Abs(ref) / 1024
					}
					require.InDelta(t, ref, unhalf(tc.xt, got, tok*tc.m+i), ulp+1e-6, "y[%d][%d]", tok, i)
				}
			}
		})
	}
}

// TestGroupedGemmMock: bf16 and fp8 groups (one empty) against a float64
// reference.
func TestGroupedGemmMock(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	r := rand.New(rand.NewPCG(5, 6))
	ms := []int{3, 0, 17, 5}
	total := 25
	n, k := 136, 256
	for _, fp8 := range []bool{false, true} {
		name := "bf16"
		if fp8 {
			name = "fp8"
		}
		t.Run(name, func(t *testing.T) {
			es := 2
			if fp8 {
				es = 1
			}
			enc := func(cnt int) ([]byte, []float64) {
				raw := make([]byte, cnt*es)
				vals := make([]float64, cnt)
				for i := range vals {
					f := float32(r.NormFloat64())
					if fp8 {
						raw[i] = floatbits.E4M3FromFloat32(f * 8)
						vals[i] = float64(floatbits.E4M3ToFloat32(raw[i]))
					} else {
						h := floatbits.BF16FromFloat32(f)
						binary.LittleEndian.PutUint16(raw[2*i:], h)
						vals[i] = float64(floatbits.BF16ToFloat32(h))
					}
				}
				return raw, vals
			}
			ar, av := enc(total * k)
			br, bv := enc(len(ms) * n * k)
			kb, nb := k/128, (n+127)/128
			sa := make([]float32, total*kb)
			sb := make([]float32, len(ms)*nb*kb)
			f32b := func(v []float32) []byte {
				out := make([]byte, 4*len(v))
				for i, f := range v {
					binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(f))
				}
				return out
			}
			for i := range sa {
				sa[i] = float32(0.5 + r.Float64())
			}
			for i := range sb {
				sb[i] = float32(0.01 + r.Float64()/10)
			}
			ops := matmul.GroupedOperands{A: upload(t, d, ar), B: upload(t, d, br)}
			bd := mockrt.Alloc(t, d, 2*total*n)
			ops.D = bd
			ab := core.BF16
			if fp8 {
				ab = core.FP8E4M3
				ops.ScaleA, ops.ScaleB = upload(t, d, f32b(sa)), upload(t, d, f32b(sb))
			}
			s := mockrt.Stream(t, d)
			require.NoError(t, matmul.Grouped(s, matmul.GroupedDesc{ABType: ab, N: n, K: k, MSizes: ms}, ops))
			require.NoError(t, s.Synchronize())
			got := make([]byte, 2*total*n)
			require.NoError(t, core.CopyToHost(got, bd))

			// The same counts on the device (ABI 1.11), A and D of MaxM
			// = total + 7 rows: the same bytes, D's last 7 rows untouched.
			const extra = 7
			counts := le.Uint32sOf(ms)
			dops := ops
			dops.A = upload(t, d, append(append([]byte(nil), ar...), make([]byte, extra*k*es)...))
			if fp8 {
				dops.ScaleA = upload(t, d, append(f32b(sa), make([]byte, extra*kb*4)...))
			}
			dd := mockrt.Alloc(t, d, 2*(total+extra)*n)
			require.NoError(t, core.Memset(dd, 0xff))
			dops.D, dops.Counts = dd, upload(t, d, counts)
			desc := matmul.GroupedDesc{ABType: ab, N: n, K: k, Groups: len(ms), MaxM: total + extra}
			require.NoError(t, matmul.Grouped(s, desc, dops))
			require.NoError(t, s.Synchronize())
			dgot := make([]byte, 2*(total+extra)*n)
			require.NoError(t, core.CopyToHost(dgot, dd))
			assert.Equal(t, got, dgot[:len(got)], "device counts: the host counts' bytes")
			assert.Equal(t, bytes.Repeat([]byte{0xff}, 2*extra*n), dgot[len(got):], "device counts: D past the counts' rows untouched")
			row := 0
			for g, m := range ms {
				for rr := 0; rr < m; rr, row = rr+1, row+1 {
					for j := 0; j < n; j++ {
						ref := 0.0
						for kk := 0; kk < kb; kk++ {
							part := 0.0
							for p := kk * 128; p < kk*128+128; p++ {
								part += av[row*k+p] * bv[(g*n+j)*k+p]
							}
							if fp8 {
								part *= float64(sa[row*kb+kk]) * float64(sb[(g*nb+j/128)*kb+kk])
							}
							ref += part
						}
						require.InDelta(t, ref, unhalf(core.BF16, got, row*n+j), math.Abs(ref)/128+1e-6, "group %d row %d col %d", g, rr, j)
					}
				}
			}
		})
	}
}

func TestQuantOpsMisuse(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	b := mockrt.Alloc(t, d, 1<<16)
	s := mockrt.Stream(t, d)
	qd := matmul.QuantDesc{XType: core.BF16, ScaleType: core.BF16, GroupSize: 64, M: 8, N: 2, K: 128}
	qo := matmul.QuantOperands{W: b, Scales: b, Biases: b, X: b, Y: b}
	require.NoError(t, matmul.Quant(s, qd, qo))
	gd := matmul.GroupedDesc{ABType: core.BF16, N: 8, K: 64, MSizes: []int{2, 0, 3}}
	gop := matmul.GroupedOperands{A: b, B: b, D: b}
	require.NoError(t, matmul.Grouped(s, gd, gop))
	// The row counts on the device (ABI 1.11): b's first bytes as counts.
	gdc := matmul.GroupedDesc{ABType: core.BF16, N: 8, K: 64, Groups: 3, MaxM: 5}
	gopc := matmul.GroupedOperands{A: b, B: b, D: b, Counts: b}
	require.NoError(t, matmul.Grouped(s, gdc, gopc))
	odd, _ := b.View(8, 1024)
	small, _ := b.View(0, 100)
	for _, tc := range []struct {
		name string
		run  func() error
		want error
	}{
		{"q bits 4", func() error { d := qd; d.Bits = 4; return matmul.Quant(s, d, qo) }, core.ErrUnsupported},
		{"q group 16", func() error { d := qd; d.GroupSize = 16; return matmul.Quant(s, d, qo) }, core.ErrUnsupported},
		{"q f32 x", func() error { d := qd; d.XType = core.F32; return matmul.Quant(s, d, qo) }, core.ErrUnsupported},
		{"q k not a multiple", func() error { d := qd; d.K = 96; return matmul.Quant(s, d, qo) }, core.ErrInvalidArgument},
		{"q m 0", func() error { d := qd; d.M = 0; return matmul.Quant(s, d, qo) }, core.ErrInvalidArgument},
		{"q no scales", func() error { o := qo; o.Scales = nil; return matmul.Quant(s, qd, o) }, core.ErrInvalidArgument},
		{"q misaligned x", func() error { o := qo; o.X = odd; return matmul.Quant(s, qd, o) }, core.ErrInvalidArgument},
		{"q short y", func() error { o := qo; o.Y, _ = b.View(0, 30); return matmul.Quant(s, qd, o) }, core.ErrOutOfRange},
		{"g fp8 k 64", func() error { d := gd; d.ABType = core.FP8E4M3; return matmul.Grouped(s, d, gop) }, core.ErrInvalidArgument},
		{"g f16", func() error { d := gd; d.ABType = core.F16; return matmul.Grouped(s, d, gop) }, core.ErrUnsupported},
		{"g f32 out", func() error { d := gd; d.DType = core.F32; return matmul.Grouped(s, d, gop) }, core.ErrUnsupported},
		{"g no groups", func() error { d := gd; d.MSizes = nil; return matmul.Grouped(s, d, gop) }, core.ErrInvalidArgument},
		{"g negative m", func() error { d := gd; d.MSizes = []int{1, -1}; return matmul.Grouped(s, d, gop) }, core.ErrInvalidArgument},
		{"g scales on bf16", func() error { o := gop; o.ScaleA = b; return matmul.Grouped(s, gd, o) }, core.ErrInvalidArgument},
		{"g fp8 without scales", func() error {
			d := gd
			d.ABType, d.K = core.FP8E4M3, 128
			return matmul.Grouped(s, d, gop)
		}, core.ErrInvalidArgument},
		{"g short D", func() error { o := gop; o.D = small; d := gd; d.N = 64; return matmul.Grouped(s, d, o) }, core.ErrOutOfRange},
		{"g counts and MSizes", func() error { o := gop; o.Counts = b; return matmul.Grouped(s, gd, o) }, core.ErrInvalidArgument},
		{"g Groups without counts", func() error { d := gd; d.Groups = 3; return matmul.Grouped(s, d, gop) }, core.ErrInvalidArgument},
		{"g counts without MaxM", func() error {
			d, o := gdc, gopc
			d.MaxM = 0
			return matmul.Grouped(s, d, o)
		}, core.ErrInvalidArgument},
		{"g counts misaligned", func() error { o := gopc; o.Counts, _ = b.View(2, 64); return matmul.Grouped(s, gdc, o) }, core.ErrInvalidArgument},
		{"g counts short", func() error { o := gopc; o.Counts, _ = b.View(0, 8); return matmul.Grouped(s, gdc, o) }, core.ErrOutOfRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.want)
		})
	}
	require.NoError(t, s.Synchronize())
	t.Run("freed", func(t *testing.T) {
		x, err := d.Alloc(4096)
		require.NoError(t, err)
		require.NoError(t, x.Free())
		o := qo
		o.X = x
		assert.ErrorIs(t, matmul.Quant(s, qd, o), core.ErrFreed)
	})
	t.Run("zero allocations", func(t *testing.T) {
		assert.Zero(t, testing.AllocsPerRun(50, func() {
			_ = matmul.Quant(s, qd, qo)
			_ = matmul.Grouped(s, gd, gop)
			_ = matmul.Grouped(s, gdc, gopc)
		}))
		require.NoError(t, s.Synchronize())
	})
}
