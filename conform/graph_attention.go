// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/core/matmul"
	"github.com/metrale/gpurt/internal/le"
	"github.com/metrale/gpurt/quant"
)

// graphAttentionChecks: a decode step of quant_matmul (the query),
// kv_append and attention_run recorded in one graph (ABI 1.7 CALL items),
// its attention planned again between replays, as a decoder runs it.
func graphAttentionChecks() []check {
	return []check{{"graph/decode_step_attention", graphDecodeStepAttention}}
}

// The step's shapes: f16, NHD, pages of 16 tokens, 4 query heads over 2
// KV heads of 64, batch 2, the query from int8 weights (groups of 64).
const (
	gaHQ, gaHK, gaDim, gaPage, gaBatch, gaK, gaGroup, gaSteps = 4, 2, 64, 16, 2, 128, 64, 4
	gaPages                                                   = 8
)

// gaStart is each request's length before the first step: request 0
// reaches a second page at step 1, request 1 a third at step 2.
var gaStart = [gaBatch]int{15, 30}

// gaEnv holds one run's device state; the host inputs are shared by the
// eager run and the graph run.
type gaEnv struct {
	attnRes
	indptr, idx, last          *core.Buffer
	preRows, preMeta           *core.Buffer // the prefix's K then V rows; batch indices then positions
	rows, meta, x, q, o        *core.Buffer // a step's K then V rows, its meta, x, q, o
	w, scales, biases          *core.Buffer
	desc                       attention.KVCacheDesc
	qdesc                      matmul.QuantDesc
	rowBytes, qBytes, preCount int
}

// gaData is what both runs get.
type gaData struct {
	q                   *quant.Weights
	pre                 []byte    // the prefix's K rows then V rows
	preMeta             []int32   // batch indices then positions
	stepRows            [][]byte  // per step: K rows then V rows
	stepX               [][]byte  // per step: x
	stepMeta            [][]int32 // per step: batch indices then positions
	reservedA, reserved [][]int32 // the eager and the graph run's pages, per request in order
}

func gaPagesOf(n int) int { return (n + gaPage - 1) / gaPage }

// table is the page table of lengths lens over reserved pages.
func gaTable(reserved [][]int32, lens [gaBatch]int) (indptr, idx, last []int32) {
	indptr = []int32{0}
	for b := 0; b < gaBatch; b++ {
		n := gaPagesOf(lens[b])
		idx = append(idx, reserved[b][:n]...)
		indptr = append(indptr, indptr[b]+int32(n))
		last = append(last, int32(lens[b]-(n-1)*gaPage))
	}
	return indptr, idx, last
}

func newGAData(e *env) (*gaData, error) {
	m := gaHQ * gaDim
	w := make([]float32, m*gaK)
	for i := range w {
		w[i] = float32(e.rng.NormFloat64())
	}
	q, err := quant.Quantize(w, m, gaK, quant.Options{GroupSize: gaGroup, Bits: 8, ScaleType: core.F16})
	if err != nil {
		return nil, err
	}
	d := &gaData{q: q}
	rowElems := gaHK * gaDim
	pre := 0
	for b := 0; b < gaBatch; b++ {
		pre += gaStart[b]
	}
	d.pre = append(encode(core.F16, randomValues(e.rng, core.F16, pre*rowElems, 1)),
		encode(core.F16, randomValues(e.rng, core.F16, pre*rowElems, 1))...)
	var bi, pos []int32
	for b := 0; b < gaBatch; b++ {
		for p := 0; p < gaStart[b]; p++ {
			bi, pos = append(bi, int32(b)), append(pos, int32(p))
		}
	}
	d.preMeta = append(bi, pos...)
	for i := 0; i < gaSteps; i++ {
		d.stepRows = append(d.stepRows, append(encode(core.F16, randomValues(e.rng, core.F16, gaBatch*rowElems, 1)),
			encode(core.F16, randomValues(e.rng, core.F16, gaBatch*rowElems, 1))...))
		d.stepX = append(d.stepX, encode(core.F16, randomValues(e.rng, core.F16, gaBatch*gaK, 1)))
		meta := make([]int32, 2*gaBatch)
		for b := 0; b < gaBatch; b++ {
			meta[b], meta[gaBatch+b] = int32(b), int32(gaStart[b]+i)
		}
		d.stepMeta = append(d.stepMeta, meta)
	}
	// The graph run keeps its cache in other pages than the eager run: a
	// recorded append that wrote nothing would leave other rows (or
	// zeros) where the eager run had its own.
	d.reservedA = [][]int32{{3, 0}, {7, 1, 6}}
	d.reserved = [][]int32{{2, 5}, {0, 4, 3}}
	return d, nil
}

// newGAEnv makes the buffers of one run (eager or graph) of d, its
// cache's pages those of reserved, and appends the prefix (an error names
// the run, what).
func newGAEnv(e *env, d *gaData, reserved [][]int32, what string) (*gaEnv, error) {
	g := &gaEnv{desc: attention.KVCacheDesc{DType: core.F16, Layout: attention.KVLayoutNHD, PageSize: gaPage,
		NumKVHeads: gaHK, HeadDim: gaDim, NumPages: gaPages}}
	g.rowBytes = gaHK * gaDim * 2
	g.qBytes = gaBatch * gaHQ * gaDim * 2
	g.preCount = len(d.preMeta) / 2
	g.qdesc = matmul.QuantDesc{XType: core.F16, ScaleType: core.F16, Bits: 8, GroupSize: gaGroup, M: gaHQ * gaDim, N: gaBatch, K: gaK}
	if err := g.open(e, g.desc, gaHQ, gaBatch, []bufSize{{&g.indptr, 4 * (gaBatch + 1)}, {&g.idx, 4 * gaPages},
		{&g.last, 4 * gaBatch}, {&g.preRows, len(d.pre)}, {&g.preMeta, 4 * len(d.preMeta)},
		{&g.rows, 2 * gaBatch * g.rowBytes}, {&g.meta, 8 * gaBatch}, {&g.x, 2 * gaBatch * gaK}, {&g.q, g.qBytes},
		{&g.o, g.qBytes}, {&g.w, len(d.q.Q)}, {&g.scales, len(d.q.Scales)}, {&g.biases, len(d.q.Biases)}}); err != nil {
		return nil, err
	}
	if err := firstErr(core.CopyFromHost(g.preRows, d.pre), core.CopyFromHost(g.preMeta, le.Int32s(d.preMeta)),
		core.CopyFromHost(g.w, d.q.Q), core.CopyFromHost(g.scales, d.q.Scales), core.CopyFromHost(g.biases, d.q.Biases),
		core.Memset(g.cache.K(), 0), core.Memset(g.cache.V(), 0), core.Memset(g.idx, 0)); err != nil {
		g.free()
		return nil, err
	}
	if err := g.prefix(reserved); err != nil {
		g.free()
		return nil, fmt.Errorf("%s: prefix: %w", what, err)
	}
	return g, nil
}

func (g *gaEnv) pt() attention.PageTable {
	return attention.PageTable{Indptr: g.indptr, Indices: g.idx, LastPageLen: g.last}
}

// setTable uploads the page table of lens (the stream idle) and plans.
func (g *gaEnv) setTable(reserved [][]int32, lens [gaBatch]int) error {
	indptr, idx, last := gaTable(reserved, lens)
	if err := firstErr(core.CopyFromHost(g.indptr, le.Int32s(indptr)), core.CopyFromHost(g.idx, le.Int32s(idx)),
		core.CopyFromHost(g.last, le.Int32s(last))); err != nil {
		return err
	}
	return g.attn.Plan(g.s, attention.Schedule{KVIndptr: indptr, KVLastPageLen: last})
}

// prefix appends every request's first tokens, eagerly.
func (g *gaEnv) prefix(reserved [][]int32) error {
	if err := g.setTable(reserved, gaStart); err != nil {
		return err
	}
	rows, err := splitRows(g.preRows, g.preMeta, g.preCount, g.rowBytes)
	if err != nil {
		return err
	}
	return firstErr(g.cache.Append(g.s, g.pt(), gaBatch, rows), g.s.Synchronize())
}

// splitRows is the KV rows of n tokens kept in two buffers: rows holds
// the n K rows, then the n V rows (rowBytes each); meta the n batch
// indices, then the n positions (int32).
func splitRows(rows, meta *core.Buffer, n, rowBytes int) (attention.KVRows, error) {
	r := attention.KVRows{K: view(rows, n*rowBytes), BatchIndices: view(meta, 4*n), NNZ: n}
	var err error
	if r.V, err = rows.View(n*rowBytes, n*rowBytes); err != nil {
		return r, err
	}
	r.Positions, err = meta.View(4*n, 4*n)
	return r, err
}

// step enqueues (or records) one decode step on s: q = W x (int8
// weights), the step's K/V rows appended, o = attention(q).
func (g *gaEnv) step(s *core.Stream) error {
	rows, err := splitRows(g.rows, g.meta, gaBatch, g.rowBytes)
	if err != nil {
		return err
	}
	return firstErrOf(
		func() error {
			return matmul.Quant(s, g.qdesc, matmul.QuantOperands{W: g.w, Scales: g.scales, Biases: g.biases, X: g.x, Y: g.q})
		},
		func() error { return g.cache.Append(s, g.pt(), gaBatch, rows) },
		func() error { return g.attn.Run(s, g.cache, attention.Operands{Q: g.q, O: g.o, Pages: g.pt()}) },
	)
}

// inputs uploads step i's rows, meta and x and poisons q and o (the
// stream idle), then plans the step's lengths.
func (g *gaEnv) inputs(d *gaData, reserved [][]int32, i int) error {
	var lens [gaBatch]int
	for b := range lens {
		lens[b] = gaStart[b] + i + 1
	}
	if err := firstErr(core.CopyFromHost(g.rows, d.stepRows[i]), core.CopyFromHost(g.meta, le.Int32s(d.stepMeta[i])),
		core.CopyFromHost(g.x, d.stepX[i]), core.Memset(g.q, 0xff), core.Memset(g.o, 0xff)); err != nil {
		return err
	}
	return g.setTable(reserved, lens)
}

// outputs reads q and o after the step.
func (g *gaEnv) outputs() ([]byte, error) {
	if err := g.s.Synchronize(); err != nil {
		return nil, err
	}
	out := make([]byte, 2*g.qBytes)
	if err := firstErr(core.CopyToHost(out[:g.qBytes], g.q), core.CopyToHost(out[g.qBytes:], g.o)); err != nil {
		return nil, err
	}
	return out, nil
}

// graphDecodeStepAttention: gaSteps decode steps run eagerly, then the
// same steps with the step captured once (after the first plan) and
// replayed, the attention planned again before every replay (lengths
// and page counts change; the batch stays). Every replay's q and o are
// the eager step's, byte for byte.
func graphDecodeStepAttention(e *env) error {
	if err := has14(e); err != nil {
		return err
	}
	d, err := newGAData(e)
	if err != nil {
		return err
	}
	eager := make([][]byte, gaSteps)
	{
		g, err := newGAEnv(e, d, d.reservedA, "eager")
		if err != nil {
			return err
		}
		defer g.free()
		for i := 0; i < gaSteps; i++ {
			if err := g.inputs(d, d.reservedA, i); err != nil {
				return fmt.Errorf("eager: step %d: inputs: %w", i, err)
			}
			if err := g.step(g.s); err != nil {
				return fmt.Errorf("eager: step %d: %w", i, err)
			}
			if eager[i], err = g.outputs(); err != nil {
				return fmt.Errorf("eager: step %d: %w", i, err)
			}
		}
	}
	// The eager outputs are the comparison: they must be real numbers,
	// and differ from step to step (else a replay of step 0 would pass).
	for i, out := range eager {
		if bad := gaNonFinite(out); bad >= 0 {
			return fmt.Errorf("eager step %d: element %d of q|o is not finite (%#04x)", i, bad, out[2*bad:2*bad+2])
		}
		if i > 0 && bytes.Equal(out, eager[i-1]) {
			return fmt.Errorf("eager steps %d and %d wrote the same q and o: the check would not see a stale replay", i-1, i)
		}
	}
	g, err := newGAEnv(e, d, d.reserved, "graph run")
	if err != nil {
		return err
	}
	defer g.free()
	var gr *core.Graph
	defer func() {
		if gr != nil {
			_ = g.s.Synchronize()
			gr.Close()
		}
	}()
	for i := 0; i < gaSteps; i++ {
		if err := g.inputs(d, d.reserved, i); err != nil {
			return fmt.Errorf("graph run: step %d: inputs: %w", i, err)
		}
		if gr == nil {
			if gr, err = capture(g.s, g.step); err != nil {
				var ce *core.Error
				if errors.Is(err, core.ErrFailedPrecondition) && errors.As(err, &ce) &&
					strings.Contains(ce.Message, "not recorded in graphs by this plugin") {
					return skip("the plugin does not record the step's operations: %v", err)
				}
				return fmt.Errorf("capturing the step: %w", err)
			}
		}
		if err := gr.Launch(g.s); err != nil {
			return fmt.Errorf("replay %d (after its plan): %w", i, err)
		}
		got, err := g.outputs()
		if err != nil {
			return fmt.Errorf("replay %d: %w", i, err)
		}
		if !bytes.Equal(got, eager[i]) {
			at := 0
			for at < len(got) && got[at] == eager[i][at] {
				at++
			}
			what := "o"
			if at < g.qBytes {
				what = "q"
			}
			return fmt.Errorf("replay %d: %s differs from the eager step at byte %d of %d (%#02x, eager %#02x)",
				i, what, at%g.qBytes, g.qBytes, got[at], eager[i][at])
		}
	}
	return nil
}

// gaNonFinite is the index of the first f16 in b that is a NaN or an
// infinity, or -1.
func gaNonFinite(b []byte) int {
	for i := 0; i+1 < len(b); i += 2 {
		v := decode(core.F16, b[i:i+2])[0]
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return i / 2
		}
	}
	return -1
}
