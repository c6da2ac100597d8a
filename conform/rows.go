// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/le"

	"github.com/metrale/gpurt/internal/rank"
)

// rowKernelChecks are the decoder's row kernels (gpurt.h: rmsnorm_T and
// after), each with its check against float64 references (the one list:
// checkRowKernel runs them).
var rowKernelChecks = map[string]func(e *env, t core.DType) error{
	"rmsnorm":         checkRMSNorm,
	"rope_llama":      func(e *env, t core.DType) error { return checkRope(e, "rope_llama", t) },
	"rope_neox":       func(e *env, t core.DType) error { return checkRope(e, "rope_neox", t) },
	"embed":           checkEmbed,
	"argmax":          checkArgmax,
	"sample":          checkSample,
	"sample_rows":     checkSampleRows,
	"add_rmsnorm":     checkAddRMSNorm,
	"rope_neox_freqs": checkRopeFreqs,
}

// after18Ops are the built-in kernels that came after ABI 1.8's list
// (gpurt.h): a plugin may lack them; their checks skip then.
var after18Ops = []string{"add_rmsnorm", "rope_neox_freqs"}

// rowBuf is a device buffer holding a view of n bytes at offset pad, the
// bytes around it set to 0xff, so that writes outside the view show.
type rowBuf struct {
	b    *core.Buffer
	v    core.View
	n    int
	pad  int
	full int
}

func newRowBuf(e *env, data []byte, pad int) (*rowBuf, error) {
	n := len(data)
	full := n + 2*pad + 64
	b, err := e.dev.Alloc(full)
	if err != nil {
		return nil, err
	}
	v, err := b.View(pad, max(n, 1))
	if err == nil {
		err = core.Memset(b, 0xff)
	}
	if err == nil && n > 0 {
		err = core.CopyFromHost(v, data)
	}
	if err != nil {
		_ = b.Free()
		return nil, err
	}
	return &rowBuf{b: b, v: v, n: n, pad: pad, full: full}, nil
}

// rowSpec is the data and padding of one rowBuf (newRowBufs).
type rowSpec struct {
	data []byte
	pad  int
}

// outSpec is the rowSpec of an output of n bytes, each 0xee until the
// kernel writes it.
func outSpec(n, pad int) rowSpec { return rowSpec{bytes.Repeat([]byte{0xee}, n), pad} }

// newRowBufs makes a rowBuf of each spec, in order; free frees them all.
// On an error none is left.
func newRowBufs(e *env, specs ...rowSpec) (bufs []*rowBuf, free func(), err error) {
	free = func() {
		for _, b := range bufs {
			b.free()
		}
	}
	for _, sp := range specs {
		b, err := newRowBuf(e, sp.data, sp.pad)
		if err != nil {
			free()
			return nil, nil, err
		}
		bufs = append(bufs, b)
	}
	return bufs, free, nil
}

// read returns the view's bytes, or an error when a byte outside it changed.
func (r *rowBuf) read(what string) ([]byte, error) {
	raw := make([]byte, r.full)
	if err := core.CopyToHost(raw, r.b); err != nil {
		return nil, err
	}
	for i := range raw {
		if (i < r.pad || i >= r.pad+r.n) && raw[i] != 0xff {
			return nil, fmt.Errorf("%s: byte %d outside the view was written", what, i-r.pad)
		}
	}
	return raw[r.pad : r.pad+r.n], nil
}

func (r *rowBuf) free() { _ = r.b.Free() }

// launchRow launches kernel name_t on a fresh stream and waits.
func launchRow(e *env, name string, t core.DType, grid, block int, args ...core.Arg) error {
	kn, err := kernel(e.dev, name+"_"+t.String())
	if err != nil {
		return err
	}
	return withStream(e, func(s *core.Stream) error {
		cfg := core.LaunchConfig{Grid: [3]uint32{uint32(grid), 1, 1}, Block: [3]uint32{uint32(block), 1, 1}}
		if err := firstErr(s.Launch(kn, cfg, args...), s.Synchronize()); err != nil {
			return fmt.Errorf("grid %d block %d: %w", grid, block, err)
		}
		return nil
	})
}

// checkRowKernel checks op's kernel of element type t against its
// reference; a plugin without a kernel of after18Ops skips its check.
func checkRowKernel(e *env, op string, t core.DType) error {
	if slices.Contains(after18Ops, op) {
		if _, err := kernel(e.dev, op+"_"+t.String()); errors.Is(err, core.ErrNotFound) {
			return skip("the plugin has no %s_%s (it came after ABI 1.8)", op, t)
		}
	}
	if check, ok := rowKernelChecks[op]; ok {
		return check(e, t)
	}
	return fmt.Errorf("row kernel %s has no reference in conform/rows.go", op)
}

// tinyOf is the spacing of t's subnormals (an absolute error floor).
func tinyOf(t core.DType) float64 {
	if t == core.F16 {
		return 0x1p-24
	}
	return 1e-30
}

// runNorm launches op_T, rmsnorm or add_rmsnorm, over rows x cols values
// on grid blocks of block threads, on new buffers (newRowBufs) of specs:
// the buffers a and b (rmsnorm: y and x; add_rmsnorm: x and r), then the
// weight w; eps, rows and cols follow them. It returns the bytes of the
// first len(read) buffers, read names them (rowBuf.read).
func runNorm(e *env, op string, t core.DType, rows, cols, grid, block int, eps float32, specs [3]rowSpec, read ...string) ([][]byte, error) {
	bufs, free, err := newRowBufs(e, specs[:]...)
	if err != nil {
		return nil, err
	}
	defer free()
	if err := launchRow(e, op, t, grid, block, core.ArgBuffer(bufs[0].v), core.ArgBuffer(bufs[1].v), core.ArgBuffer(bufs[2].v),
		core.ArgScalar[float32](eps), core.ArgScalar[uint64](uint64(rows)), core.ArgScalar[uint64](uint64(cols))); err != nil {
		return nil, err
	}
	raw := make([][]byte, len(read))
	for i, what := range read {
		if raw[i], err = bufs[i].read(what); err != nil {
			return nil, err
		}
	}
	return raw, nil
}

// normMiss compares got, a row of rmsnorm_T's output (or add_rmsnorm_T's
// x), with the RMSNorm of the row v in float64, v[j] * w[j] / sqrt(mean
// of v^2 + eps), within the row kernels' tolerance of t for a row of
// len(v) values. It returns the first column that differs and the value
// wanted there; -1 when every column matches.
func normMiss(t core.DType, v, w, got []float64, eps float32) (int, float64) {
	tol := kernelTol(t) + 2e-7*math.Sqrt(float64(len(v)))
	ss := 0.0
	for _, x := range v {
		ss += x * x
	}
	s := 1 / math.Sqrt(ss/float64(len(v))+float64(eps))
	for j, x := range v {
		want := x * s * w[j]
		if math.IsNaN(got[j]) || math.Abs(got[j]-want) > tol*math.Abs(want)+tinyOf(t) {
			return j, want
		}
	}
	return -1, 0
}

func checkRMSNorm(e *env, t core.DType) error {
	sz := t.Size()
	for _, c := range []struct {
		rows, cols, grid, block int
		aligned                 bool // x and y 16-byte aligned (a backend's vector path), else off by elements
	}{
		{3, 1, 3, 1, false}, {5, 64, 5, 32, false}, {4, 1000, 4, 256, false}, {2, 4099, 2, 1024, false}, {6, 333, 4, 100, false},
		{5, 64, 5, 32, true}, {2, 4096, 2, 512, true}, {3, 2048, 3, 37, true}, {4, 1000, 3, 1024, true},
	} {
		x := randomValues(e.rng, t, c.rows*c.cols, 2)
		w := randomValues(e.rng, t, c.cols, 1.5)
		eps := float32(1e-5 + e.rng.Float64()*1e-3)
		ypad, xpad := sz, 2*sz
		if c.aligned {
			ypad, xpad = 16, 32
		}
		out, err := runNorm(e, "rmsnorm", t, c.rows, c.cols, c.grid, c.block, eps,
			[3]rowSpec{outSpec(c.rows*c.cols*sz, ypad), {encode(t, x), xpad}, {encode(t, w), 0}}, "y")
		if err != nil {
			return err
		}
		raw := out[0]
		got := decode(t, raw)
		for r := 0; r < c.rows; r++ {
			lo := r * c.cols
			if r >= c.grid { // rows past the grid stay unwritten
				for i := lo; i < lo+c.cols; i++ {
					if raw[i*sz] != 0xee {
						return fmt.Errorf("rows %d cols %d grid %d: row %d past the grid was written", c.rows, c.cols, c.grid, r)
					}
				}
				continue
			}
			if j, want := normMiss(t, x[lo:lo+c.cols], w, got[lo:lo+c.cols], eps); j >= 0 {
				return fmt.Errorf("rows %d cols %d block %d: y[%d][%d] is %g, want %g", c.rows, c.cols, c.block, r, j, got[lo+j], want)
			}
		}
	}
	return nil
}

// ropeCase is one rope check on the device: random rows x (tokens x heads
// x hd values of T), positions (the first 0, the others below maxPos),
// and the grid of block threads (grid 0: one covering every pair).
type ropeCase struct {
	t                                              core.DType
	tokens, heads, hd, block, grid, pairs, covered int
	x                                              []float64
	pos                                            []int32
	xb, pb                                         *rowBuf
}

func newRopeCase(e *env, t core.DType, tokens, heads, hd, block, grid, maxPos int) (*ropeCase, error) {
	c := &ropeCase{t: t, tokens: tokens, heads: heads, hd: hd, block: block, grid: grid}
	n := tokens * heads * hd
	c.pairs = n / 2
	if c.grid == 0 {
		c.grid = (c.pairs + block - 1) / block
	}
	c.covered = min(c.pairs, c.grid*block)
	c.x = randomValues(e.rng, t, n, 2)
	c.pos = make([]int32, tokens)
	for i := range c.pos {
		c.pos[i] = int32(e.rng.IntN(maxPos))
	}
	c.pos[0] = 0
	var err error
	if c.xb, err = newRowBuf(e, encode(t, c.x), t.Size()); err != nil {
		return nil, err
	}
	if c.pb, err = newRowBuf(e, le.Int32s(c.pos), 4); err != nil {
		c.xb.free()
		return nil, err
	}
	return c, nil
}

func (c *ropeCase) free() {
	c.xb.free()
	c.pb.free()
}

// check reads x back and compares every pair: (x[i0], x[i1]) with want's
// values within its slack for the pairs the grid covers, unchanged past
// it. interleaved pairs (2j, 2j+1) as rope_llama_T, else (j, j + hd/2).
func (c *ropeCase) check(interleaved bool, want func(tk, j int, u, v float64) (w0, w1, slack float64)) error {
	raw, err := c.xb.read("x")
	if err != nil {
		return err
	}
	got := decode(c.t, raw)
	half := c.hd / 2
	for p := 0; p < c.pairs; p++ {
		tk, rem := p/(c.heads*half), p%(c.heads*half)
		h, j := rem/half, rem%half
		base := (tk*c.heads + h) * c.hd
		i0, i1 := base+j, base+j+half
		if interleaved {
			i0, i1 = base+2*j, base+2*j+1
		}
		u, v := c.x[i0], c.x[i1]
		w0, w1, slack := u, v, 0.0
		if p < c.covered {
			w0, w1, slack = want(tk, j, u, v)
		}
		if math.Abs(got[i0]-w0) > slack || math.Abs(got[i1]-w1) > slack || math.IsNaN(got[i0]+got[i1]) {
			return fmt.Errorf("tokens %d heads %d head_dim %d grid %d: pair %d (token %d pos %d head %d j %d) is (%g, %g), want (%g, %g)",
				c.tokens, c.heads, c.hd, c.grid, p, tk, c.pos[tk], h, j, got[i0], got[i1], w0, w1)
		}
	}
	return nil
}

func checkRope(e *env, op string, t core.DType) error {
	tol := kernelTol(t)
	for _, k := range []struct {
		tokens, heads, hd int
		theta             float64
		block, grid       int // grid 0: cover every pair
	}{
		{1, 1, 2, 10000, 1, 0}, {7, 3, 64, 10000, 32, 0}, {5, 2, 128, 500000, 256, 0}, {4, 4, 64, 10000, 64, 5},
	} {
		c, err := newRopeCase(e, t, k.tokens, k.heads, k.hd, k.block, k.grid, 8192)
		if err != nil {
			return err
		}
		defer c.free()
		if err := launchRow(e, op, t, c.grid, k.block, core.ArgBuffer(c.xb.v), core.ArgBuffer(c.pb.v), core.ArgScalar[float32](float32(k.theta)),
			core.ArgScalar[uint64](uint64(k.tokens)), core.ArgScalar[uint64](uint64(k.heads)), core.ArgScalar[uint64](uint64(k.hd))); err != nil {
			return err
		}
		err = c.check(op == "rope_llama", func(tk, j int, u, v float64) (float64, float64, float64) {
			ex := float32(2*j) / float32(k.hd)
			inv := float64(float32(1 / math.Pow(k.theta, float64(ex))))
			a := float64(float32(float64(c.pos[tk]) * inv))
			mag := math.Abs(u) + math.Abs(v)
			return u*math.Cos(a) - v*math.Sin(a), u*math.Sin(a) + v*math.Cos(a), tol*mag + 4e-7*(1+a)*mag + tinyOf(t)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func checkEmbed(e *env, t core.DType) error {
	sz := t.Size()
	const vocab = 50
	for _, c := range []struct{ tokens, cols, block, grid int }{
		{9, 1, 1, 0}, {9, 64, 64, 0}, {6, 100, 256, 0}, {9, 64, 32, 5},
	} {
		table := randomValues(e.rng, t, vocab*c.cols, 3)
		ids := make([]int32, c.tokens)
		for i := range ids {
			ids[i] = int32(e.rng.IntN(vocab))
		}
		ids[1], ids[c.tokens-1] = -1, vocab // out of range: zeros
		grid := c.grid
		if grid == 0 {
			grid = (c.tokens*c.cols + c.block - 1) / c.block
		}
		covered := min(c.tokens*c.cols, grid*c.block)
		bufs, free, err := newRowBufs(e, outSpec(c.tokens*c.cols*sz, sz), rowSpec{encode(t, table), 0}, rowSpec{le.Int32s(ids), 4})
		if err != nil {
			return err
		}
		defer free()
		y, tb, ib := bufs[0], bufs[1], bufs[2]
		if err := launchRow(e, "embed", t, grid, c.block, core.ArgBuffer(y.v), core.ArgBuffer(tb.v), core.ArgBuffer(ib.v),
			core.ArgScalar[uint64](uint64(c.tokens)), core.ArgScalar[uint64](uint64(c.cols)), core.ArgScalar[uint64](vocab)); err != nil {
			return err
		}
		raw, err := y.read("y")
		if err != nil {
			return err
		}
		got := decode(t, raw)
		for i := 0; i < c.tokens*c.cols; i++ {
			tk, col := i/c.cols, i%c.cols
			if i >= covered {
				if raw[i*sz] != 0xee {
					return fmt.Errorf("tokens %d cols %d grid %d: element %d past the grid was written", c.tokens, c.cols, grid, i)
				}
				continue
			}
			want := 0.0
			if id := ids[tk]; id >= 0 && id < vocab {
				want = table[int(id)*c.cols+col]
			}
			if got[i] != want {
				return fmt.Errorf("tokens %d cols %d: y[%d][%d] (id %d) is %g, want %g", c.tokens, c.cols, tk, col, ids[tk], got[i], want)
			}
		}
	}
	return nil
}

// rowOrder is the row's indices in sample_T's order.
func rowOrder(x []float64) []int {
	idx := make([]int, len(x))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return rank.Key(x[idx[a]], idx[a]) > rank.Key(x[idx[b]], idx[b]) })
	return idx
}

// rowArgmax runs argmax_T or sample_T over rows x cols and returns idx.
func rowArgmax(e *env, name string, t core.DType, x []float64, rows, cols, grid, block int, extra ...core.Arg) ([]int32, error) {
	bufs, free, err := newRowBufs(e, rowSpec{encode(t, x), t.Size()}, outSpec(4*rows, 4))
	if err != nil {
		return nil, err
	}
	defer free()
	xb, ib := bufs[0], bufs[1]
	args := append([]core.Arg{core.ArgBuffer(ib.v), core.ArgBuffer(xb.v), core.ArgScalar[uint64](uint64(rows)), core.ArgScalar[uint64](uint64(cols))}, extra...)
	if err := launchRow(e, name, t, grid, block, args...); err != nil {
		return nil, err
	}
	raw, err := ib.read("idx")
	if err != nil {
		return nil, err
	}
	return le.ToInt32s(raw), nil
}

func checkArgmax(e *env, t core.DType) error {
	for _, c := range []struct{ rows, cols, grid, block int }{
		{1, 1, 1, 1}, {4, 100, 4, 32}, {3, 5000, 3, 1024}, {5, 777, 5, 100}, {6, 64, 4, 64},
	} {
		x := randomValues(e.rng, t, c.rows*c.cols, 4)
		for r := 0; r < c.rows && c.cols > 3; r++ {
			row := x[r*c.cols : (r+1)*c.cols]
			switch r % 3 {
			case 0: // a tie of the maximum: the lower index wins
				a, b := e.rng.IntN(c.cols), e.rng.IntN(c.cols)
				row[a], row[b] = 5, 5
			case 1: // NaN is below everything; -0 equals +0
				for j := range row {
					row[j] = -math.Abs(row[j]) - 1
				}
				row[e.rng.IntN(c.cols)] = math.NaN()
				row[c.cols-1] = 0
				row[c.cols-2] = math.Copysign(0, -1)
			}
		}
		got, err := rowArgmax(e, "argmax", t, x, c.rows, c.cols, c.grid, c.block)
		if err != nil {
			return err
		}
		for r := 0; r < c.rows; r++ {
			if r >= c.grid {
				if got[r] != int32(-286331154) { // 0xeeeeeeee
					return fmt.Errorf("rows %d grid %d: row %d past the grid was written", c.rows, c.grid, r)
				}
				continue
			}
			want := rowOrder(x[r*c.cols : (r+1)*c.cols])[0]
			if int(got[r]) != want {
				return fmt.Errorf("rows %d cols %d block %d: row %d: argmax %d, want %d", c.rows, c.cols, c.block, r, got[r], want)
			}
		}
	}
	return nil
}

// splitmix64 is sample_T's hash (gpurt.h).
func splitmix64(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xBF58476D1CE4E5B9
	z ^= z >> 27
	z *= 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// sampleRef is sample_T's choice for one row in float64: the token, and
// whether the draw or the top-p cut lies too close to a boundary for the
// rounding of a backend's sums to be ruled out (then any token of the
// kept set, widened by the margin, is accepted: allowed).
//
// Non-finite logits (gpurt.h): a row whose maximum is not finite (+Inf, or
// only -Inf and NaN) gives the argmax; a weight that is NaN (a NaN logit,
// -Inf at an infinite temperature) is 0.
func sampleRef(x []float64, topK int, topP, temp float64, seed uint64, r int) (tok int, near bool, allowed map[int]bool) {
	order := rowOrder(x)
	mx := float64(float32(x[order[0]]))
	if topK == 1 || !(temp > 0) || math.IsInf(mx, 0) || math.IsNaN(mx) {
		return order[0], false, map[int]bool{order[0]: true}
	}
	if topK == 0 || topK > len(x) {
		topK = len(x)
	}
	w := make([]float64, topK)
	z := 0.0
	for i := 0; i < topK; i++ {
		w[i] = math.Exp((float64(float32(x[order[i]])) - mx) / temp)
		if math.IsNaN(w[i]) {
			w[i] = 0
		}
		z += w[i]
	}
	const margin = 1e-4
	keep, wide := topK, topK
	if topP < 1 {
		keep, wide = 1, 1
		if topP > 0 {
			cum := 0.0
			keep, wide = 0, 0
			for i := 0; i < topK; i++ {
				cum += w[i]
				if keep == 0 && cum >= topP*z {
					keep = i + 1
				}
				if wide == 0 && cum >= (topP+margin)*z {
					wide = i + 1
				}
			}
			if wide == 0 {
				wide = topK
			}
			cum = 0
			for i := 0; i < keep; i++ {
				cum += w[i]
			}
			if math.Abs(cum-topP*z) < margin*z || math.Abs(cum-w[keep-1]-topP*z) < margin*z {
				near = true
			}
		}
	}
	allowed = map[int]bool{}
	for i := 0; i < wide; i++ {
		allowed[order[i]] = true
	}
	zk := 0.0
	for i := 0; i < keep; i++ {
		zk += w[i]
	}
	h := splitmix64(seed + uint64(r+1)*0x9E3779B97F4A7C15)
	u := float64(h>>40) / (1 << 24)
	target := u * zk
	cum := 0.0
	tok = order[keep-1]
	for i := 0; i < keep; i++ {
		cum += w[i]
		if math.Abs(cum-target) < margin*zk {
			near = true
		}
		if cum > target {
			tok = order[i]
			break
		}
	}
	return tok, near, allowed
}

func checkSample(e *env, t core.DType) error {
	// The set and the exact token against the float64 reference; the same
	// seed twice gives the same tokens.
	for _, c := range []struct {
		rows, cols, topK int
		topP, temp       float64
		block            int
	}{
		{4, 1000, 50, 0.9, 0.8, 256}, {3, 300, 0, 1, 1, 64}, {5, 128, 1, 0.5, 1, 32}, {2, 64, 10, 0.5, 0, 32},
		{6, 4099, 0, 0.95, 1.2, 1024}, {3, 100, 7, 0, 1, 100},
	} {
		x := randomValues(e.rng, t, c.rows*c.cols, 3)
		seed := e.rng.Uint64()
		extra := []core.Arg{core.ArgScalar[uint64](uint64(c.topK)), core.ArgScalar[float32](float32(c.topP)), core.ArgScalar[float32](float32(c.temp)), core.ArgScalar[uint64](seed)}
		got, err := rowArgmax(e, "sample", t, x, c.rows, c.cols, c.rows, c.block, extra...)
		if err != nil {
			return err
		}
		again, err := rowArgmax(e, "sample", t, x, c.rows, c.cols, c.rows, c.block, extra...)
		if err != nil {
			return err
		}
		for r := 0; r < c.rows; r++ {
			if got[r] != again[r] {
				return fmt.Errorf("rows %d cols %d: row %d: the same seed gave %d then %d", c.rows, c.cols, r, got[r], again[r])
			}
			tok, near, allowed := sampleRef(x[r*c.cols:(r+1)*c.cols], c.topK, float64(float32(c.topP)), float64(float32(c.temp)), seed, r)
			if !allowed[int(got[r])] {
				return fmt.Errorf("cols %d top_k %d top_p %g temperature %g: row %d: token %d is outside the kept set (%d tokens)",
					c.cols, c.topK, c.topP, c.temp, r, got[r], len(allowed))
			}
			if !near && int(got[r]) != tok {
				return fmt.Errorf("cols %d top_k %d top_p %g temperature %g seed %#x: row %d: token %d, want %d",
					c.cols, c.topK, c.topP, c.temp, seed, r, got[r], tok)
			}
		}
	}
	// The distribution: one row of logits repeated; each row draws its own
	// number, so the rows' tokens follow softmax(x / temperature) over the
	// top-k set.
	const rows, cols, topK = 4000, 8, 5
	base := []float64{1, 0.5, 2, -1, 0.25, 1.5, -3, 0}
	x := make([]float64, rows*cols)
	for r := 0; r < rows; r++ {
		copy(x[r*cols:], base)
	}
	got, err := rowArgmax(e, "sample", t, x, rows, cols, rows, 32, core.ArgScalar[uint64](topK), core.ArgScalar[float32](1), core.ArgScalar[float32](1), core.ArgScalar[uint64](e.rng.Uint64()))
	if err != nil {
		return err
	}
	order := rowOrder(base)
	p := map[int]float64{}
	z := 0.0
	for i := 0; i < topK; i++ {
		p[order[i]] = math.Exp(float64(float32(roundTo(t, base[order[i]]))) - float64(float32(roundTo(t, base[order[0]]))))
		z += p[order[i]]
	}
	count := map[int]int{}
	for _, g := range got {
		if _, ok := p[int(g)]; !ok {
			return fmt.Errorf("distribution: token %d is outside the top %d", g, topK)
		}
		count[int(g)]++
	}
	for tok, pr := range p {
		want := pr / z * rows
		sd := math.Sqrt(want * (1 - pr/z))
		if math.Abs(float64(count[tok])-want) > 5*sd+1 {
			return fmt.Errorf("distribution: token %d drawn %d times of %d, want about %.0f (p %.3f)", tok, count[tok], rows, want, pr/z)
		}
	}
	return nil
}
