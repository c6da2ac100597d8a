// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"fmt"
	"math"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/floatbits"
)

// fp8 e4m3 KV caches (ABI 1.8). The rows go in as dt (bf16 or f16) and
// are stored as e4m3(row / scale) with one scale for K and one for V per
// cache (amax / 448 here, the usual calibration); attention reads element
// * scale. runAttnCase checks the output against the float64 reference on
// the dequantised K and V with the 16-bit tolerance (the kernel's own
// error), the pages byte for byte (checkFP8Pages), and the quantisation's
// error against the unquantised K and V within a bound (fp8Accuracy).

// fp8Batch turns b into an fp8 batch: its desc becomes the fp8 cache's,
// its K and V the dequantised values the cache holds; it returns the
// unquantised batch (the rows appended, and the truth).
func fp8Batch(b *attnBatch) *attnBatch {
	truth := *b
	truth.k, truth.v = b.k, b.v
	amax := func(x [][]float64) float64 {
		m := 0.0
		for _, r := range x {
			for _, v := range r {
				m = math.Max(m, math.Abs(v))
			}
		}
		return m
	}
	ks, vs := float32(amax(b.k)/448), float32(amax(b.v)/448)
	if ks == 0 {
		ks = 1
	}
	if vs == 0 {
		vs = 1
	}
	b.desc.QODType = b.desc.DType
	b.desc.DType = core.FP8E4M3
	b.desc.KScale, b.desc.VScale = ks, vs
	deq := func(x [][]float64, sc float32) [][]float64 {
		out := make([][]float64, len(x))
		for i, r := range x {
			out[i] = make([]float64, len(r))
			for j, v := range r {
				out[i][j] = float64(floatbits.E4M3ToFloat32(fp8Of(v, sc))) * float64(sc)
			}
		}
		return out
	}
	b.k, b.v = deq(b.k, ks), deq(b.v, vs)
	return &truth
}

// fp8Of is what kv_append stores for a row value v (already of the rows'
// type): e4m3(float32(v) / scale), nearest even, saturated.
func fp8Of(v float64, scale float32) uint8 { return floatbits.E4M3FromFloat32(float32(v) / scale) }

// or is b itself, or other when b is nil (a 16-bit case has no truth).
func (b *attnBatch) or(other *attnBatch) *attnBatch {
	if b == nil {
		return other
	}
	return b
}

// checkFP8Pages reads the cache back: every token of every request is
// e4m3(row / scale) at the place KVCacheDesc.Offset names.
func checkFP8Pages(c attnCase, truth *attnBatch, cache *attention.KVCache, lens []int) error {
	desc := cache.Desc()
	n := desc.NumPages * desc.PageBytes()
	kb, vb := make([]byte, n), make([]byte, n)
	if err := firstErr(core.CopyToHost(kb, cache.K()), core.CopyToHost(vb, cache.V())); err != nil {
		return err
	}
	ps := desc.PageSize
	for r, kv := range lens {
		for t := 0; t < kv; t++ {
			page := int(truth.reserved[r][t/ps])
			for h := 0; h < c.hk; h++ {
				off, err := desc.Offset(page, t%ps, h)
				if err != nil {
					return err
				}
				for d := 0; d < c.dim; d++ {
					i := (t*c.hk+h)*c.dim + d
					for _, x := range []struct {
						name  string
						got   []byte
						v     float64
						scale float32
					}{{"K", kb, truth.k[r][i], desc.KScale}, {"V", vb, truth.v[r][i], desc.VScale}} {
						if want := fp8Of(x.v, x.scale); x.got[off+d] != want {
							return fmt.Errorf("fp8 append: %s of request %d token %d head %d [%d]: byte %#02x, want %#02x = e4m3(%g / %g)",
								x.name, r, t, h, d, x.got[off+d], want, x.v, x.scale)
						}
					}
				}
			}
		}
	}
	return nil
}

// fp8Accuracy bounds the output's error against attention on the
// unquantised K and V: fp8 e4m3 keeps 3 mantissa bits (relative step
// 2^-3, rounding error up to 2^-4 of a value), which averages down in the
// softmax-weighted sums; the bound is 0.1 of the output's largest
// magnitude for the worst element and 0.02 for the mean.
func fp8Accuracy(c attnCase, truth, b *attnBatch, q, got, deq []float64) error {
	exact := attnRef(c, truth, q)
	var amax, maxErr, sumErr float64
	for i := range exact {
		amax = math.Max(amax, math.Abs(exact[i]))
	}
	if amax == 0 {
		return nil
	}
	for i := range exact {
		e := math.Abs(got[i] - exact[i])
		maxErr = math.Max(maxErr, e)
		sumErr += e
	}
	mean := sumErr / float64(len(exact)) / amax
	if maxErr/amax > 0.1 || mean > 0.02 {
		return fmt.Errorf("fp8 e4m3 cache (scales K %g, V %g): error against the unquantised K and V: max %.3g, mean %.3g of the largest output %.3g (bounds 0.1, 0.02)",
			b.desc.KScale, b.desc.VScale, maxErr/amax, mean, amax)
	}
	return nil
}
