// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"bytes"
	"errors"
	"fmt"
	"math"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/internal/le"
)

// attnAppendRope: kv_append's rotary embedding (ABI 1.10, KVRows.InvFreq)
// gives, bit for bit, what the backend's own rope_neox_freqs_T launch on q
// and on K's rows followed by a plain append gives: the same cache (K
// rotated, V copied) and the same q, in both layouts, with a row the
// append skips (a position past its request's length: its q is rotated
// all the same, its K and V are not stored); and K's rows are left as they
// were. A backend without the built-in (after ABI 1.8) or that refuses
// the fused form (ErrUnsupported, naming why) is skipped.
func attnAppendRope(e *env) error {
	const (
		dt, hq, hk, hd, page = core.BF16, 4, 2, 64, 4
		nnz                  = 9 // request 0: positions 0..4, request 1: 0..2 and 7 (beyond: skipped)
	)
	rope, err := kernel(e.dev, "rope_neox_freqs_bf16")
	if errors.Is(err, core.ErrNotFound) {
		return skip("the plugin has no rope_neox_freqs_bf16 (after ABI 1.8): nothing to compare with")
	} else if err != nil {
		return err
	}
	bi := []int32{0, 0, 0, 0, 0, 1, 1, 1, 1}
	pos := []int32{0, 1, 2, 3, 4, 0, 1, 2, 7}
	freqs := make([]float32, hd/2) // Llama 3.1-like: theta^(-2j/hd), the low ones divided by 8
	for j := range freqs {
		freqs[j] = float32(math.Pow(500000, -float64(2*j)/hd))
		if j > hd/4 {
			freqs[j] /= 8
		}
	}
	inv := le.Float32s(freqs)
	kRows := encode(dt, randomValues(e.rng, dt, nnz*hk*hd, 2))
	vRows := encode(dt, randomValues(e.rng, dt, nnz*hk*hd, 2))
	q := encode(dt, randomValues(e.rng, dt, nnz*hq*hd, 2))
	bufs := &attnDev{}
	defer bufs.free()
	up := func(data []byte) (*core.Buffer, error) {
		b, err := bufs.alloc(e, len(data))
		if err != nil {
			return nil, err
		}
		return b, core.CopyFromHost(b, data)
	}
	down := func(r core.Region, n int) ([]byte, error) {
		out := make([]byte, n)
		return out, core.CopyToHost(out, r)
	}
	for _, lay := range []attention.KVLayout{attention.KVLayoutNHD, attention.KVLayoutHND} {
		desc := attention.KVCacheDesc{DType: dt, Layout: lay, PageSize: page, NumKVHeads: hk, HeadDim: hd, NumPages: 3}
		var caches [2]*attention.KVCache
		var qs [2][]byte
		err := func() error {
			defer func() {
				for _, c := range caches {
					if c != nil {
						c.Free()
					}
				}
			}()
			indptr, err1 := up(le.Int32s([]int32{0, 2, 3}))
			indices, err2 := up(le.Int32s([]int32{0, 1, 2}))
			last, err3 := up(le.Int32s([]int32{1, 3}))
			bib, err4 := up(le.Int32s(bi))
			pb, err5 := up(le.Int32s(pos))
			ib, err6 := up(inv)
			if err := firstErr(err1, err2, err3, err4, err5, err6); err != nil {
				return err
			}
			pt := attention.PageTable{Indptr: indptr, Indices: indices, LastPageLen: last}
			for fused := 0; fused < 2; fused++ {
				kb, err1 := up(kRows)
				vb, err2 := up(vRows)
				qb, err3 := up(q)
				if err := firstErr(err1, err2, err3); err != nil {
					return err
				}
				if caches[fused], err = attention.AllocKVCache(e.dev, desc); err != nil {
					return attnSkip(err)
				}
				c := caches[fused]
				err = withStream(e, func(s *core.Stream) error {
					if err := firstErr(core.Memset(c.K(), 0), core.Memset(c.V(), 0)); err != nil {
						return err
					}
					rows := attention.KVRows{K: kb, V: vb, BatchIndices: bib, Positions: pb, NNZ: nnz}
					if fused == 1 {
						rows.InvFreq, rows.Q, rows.QOHeads = ib, qb, hq
					} else {
						for _, x := range []struct {
							b     *core.Buffer
							heads int
						}{{qb, hq}, {kb, hk}} {
							n := nnz * x.heads * hd / 2
							if err := s.Launch(rope, core.LaunchConfig{Grid: [3]uint32{uint32((n + 255) / 256), 1, 1}, Block: [3]uint32{256, 1, 1}}, core.ArgBuffer(x.b), core.ArgBuffer(pb),
								core.ArgBuffer(ib), core.ArgScalar[uint64](nnz), core.ArgScalar[uint64](uint64(x.heads)), core.ArgScalar[uint64](hd)); err != nil {
								return err
							}
						}
					}
					if err := c.Append(s, pt, 2, rows); err != nil {
						if errors.Is(err, core.ErrUnsupported) {
							return skip("the plugin refuses the %s: %v", [2]string{"append", "rotary embedding on append"}[fused], err)
						}
						return err
					}
					return s.Synchronize()
				})
				if err != nil {
					return err
				}
				if qs[fused], err = down(qb, len(q)); err != nil {
					return err
				}
				if fused == 1 {
					if got, err := down(kb, len(kRows)); err != nil {
						return err
					} else if !bytes.Equal(got, kRows) {
						return fmt.Errorf("layout %d: the fused append wrote K's rows (it rotates only what it stores)", lay)
					}
				}
			}
			if !bytes.Equal(qs[0], qs[1]) {
				return fmt.Errorf("layout %d: q rotated by the append differs from rope_neox_freqs_bf16's (%s)", lay, diffAt(qs[0], qs[1]))
			}
			if bytes.Equal(qs[1], q) {
				return fmt.Errorf("layout %d: the fused append left q as it was", lay)
			}
			n := desc.NumPages * desc.PageBytes()
			for kv := 0; kv < 2; kv++ {
				var got [2][]byte
				for f, c := range caches {
					r := c.K()
					if kv == 1 {
						r = c.V()
					}
					if got[f], err = down(r, n); err != nil {
						return err
					}
				}
				if !bytes.Equal(got[0], got[1]) {
					return fmt.Errorf("layout %d: the cache's %s after the fused append differs from rope then append (%s)", lay, [2]string{"K", "V"}[kv], diffAt(got[0], got[1]))
				}
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

// diffAt names the first 16-bit element where a and b differ.
func diffAt(a, b []byte) string {
	i := firstDiff(a, b) &^ 1
	if i < 0 || i+2 > len(a) || i+2 > len(b) {
		return "lengths differ"
	}
	return fmt.Sprintf("element %d: % x against % x", i/2, a[i:i+2], b[i:i+2])
}
