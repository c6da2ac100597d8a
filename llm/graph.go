// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/metrale/gpurt/core"
)

// The op kinds of a decode step that a plugin may or may not record in a
// graph (core records launches, GEMMs, copies and memsets on every plugin
// with graphs; from ABI 1.7 a plugin marks other slots recordable).
const (
	opKernels   = ""              // launches and GEMMs: always recorded
	opKVAppend  = "kv_append"     // attention.KVCache.Append
	opAttention = "attention_run" // attention.Attention.Run
	opQuant     = "quant_matmul"  // matmul.Quant (int8 weights)
)

// stepOp is one operation of a decode step, in the order the step runs
// them.
type stepOp struct {
	name string // for the summary: "layer 3 attention_run"
	kind string // opKernels or the slot that a plugin may not record
	run  func(s *core.Stream) error
}

// decodeOps is the decode step at the current batch without the pick:
// embed, every layer (norm, QKV and rotary; KV append; attention; output
// projection and MLP), the final norm and the head's logits. Eager mode
// runs them in order; graph mode records them.
func (m *Model) decodeOps() []stepOp {
	B := m.batch
	return m.stepOps(B, func(s *core.Stream, l int) error { return m.appendKV(s, l, B) },
		func(s *core.Stream, l int) error { return m.attendDecode(s, l, B) })
}

// stepOps is a decode step of B rows without the pick, with layer l's KV
// append and attention run by kv and att (the model's own page table, or
// a Paged step's).
func (m *Model) stepOps(B int, kv, att func(s *core.Stream, l int) error) []stepOp {
	L := m.cfg.Layers
	lin := opKernels
	if m.cfg.Int8 {
		lin = opQuant
	}
	ops := make([]stepOp, 0, 4*L+2)
	ops = append(ops, stepOp{"embed", opKernels, func(s *core.Stream) error { return m.embedTokens(s, B) }})
	for l := 0; l < L; l++ {
		ops = append(ops,
			stepOp{fmt.Sprintf("layer %d qkv", l), lin, func(s *core.Stream) error { return m.partA(s, l, B) }},
			stepOp{fmt.Sprintf("layer %d kv_append", l), opKVAppend, func(s *core.Stream) error { return kv(s, l) }})
		if m.pf != nil {
			ops = append(ops, stepOp{fmt.Sprintf("layer %d l2_prefetch", l), opKernels, func(s *core.Stream) error { return m.pf.launch(s, l) }})
		}
		ops = append(ops,
			stepOp{fmt.Sprintf("layer %d attention_run", l), opAttention, func(s *core.Stream) error { return att(s, l) }},
			stepOp{fmt.Sprintf("layer %d mlp", l), lin, func(s *core.Stream) error { return m.partB(s, l, B) }})
	}
	hl := view(m.h, 0, 2*B*m.cfg.Hidden)
	ops = append(ops, stepOp{"head", opKernels, func(s *core.Stream) error { return m.head(s, hl, B) }})
	return ops
}

// launchStep replays the graph get returns, and when the plugin refuses
// the replay because the attention's workspace was reallocated since the
// capture (a plan at another batch size needed more; refused before
// anything of that graph is enqueued), captures it again (get(true)) and
// runs the step whole once more: every op recomputes from the embedding,
// so segments that ran before write what they will write again.
// Each recapture counts in GraphRecaptures.
// The time inside the launches (not the captures) adds to m.launchTime.
func (m *Model) launchStep(s *core.Stream, sp *Sampling, step int, get func(fresh bool) (*stepGraph, error)) error {
	g, err := get(false)
	if err == nil {
		err = m.timedLaunch(g, s, sp, step)
	}
	if errors.Is(err, core.ErrFailedPrecondition) {
		m.recaptures++
		if g, err = get(true); err == nil {
			err = m.timedLaunch(g, s, sp, step)
		}
	}
	return err
}

// timedLaunch is g.launch, its host time added to m.launchTime.
func (m *Model) timedLaunch(g *stepGraph, s *core.Stream, sp *Sampling, step int) error {
	t0 := time.Now()
	err := g.launch(s, sp, step)
	m.launchTime += time.Since(t0)
	return err
}

// graphKey is a batch-size bucket, whether the step samples (the pick
// is a different kernel) and whether it is a Paged step (over a kvpage
// table's device arrays instead of the model's own).
type graphKey struct {
	batch    int
	sampled  bool
	paged    bool
	rowsHist int // Paged.StepRows: the params' history slots + 1 (0: not per-row)
}

// stepGraph is a decode step captured for one batch size: one graph when
// the plugin records every op of the step, else graphs of the stretches
// between the ops it does not record, which run eagerly in between.
type stepGraph struct {
	bind     [6]core.Region // Paged: the step's device arrays (and StepRows' params) it was captured over
	segs     []stepSeg
	launches int      // graph launches a step makes
	broke    []string // the op kinds that broke the step's graph (sorted, distinct)
	pickSeg  int      // the segment whose graph holds the pick (sampling: its seed is set per step)
	pick     core.Node
	last     Sampling // the sampling arguments the pick node has
}

// stepSeg is a captured stretch (g) or one op run eagerly (op).
type stepSeg struct {
	g  *core.Graph
	op *stepOp
}

func (g *stepGraph) close() error {
	var err error
	for _, s := range g.segs {
		if s.g != nil {
			err = firstErr(err, s.g.Close())
		}
	}
	return err
}

// GraphInfo says how graph mode runs a decode step at the current batch
// (after a graph step at that batch): the graph launches per step (1 when
// the plugin records the whole step) and the op kinds the plugin does not
// record, which broke the step into segments. ok is false before the
// step's graph was captured.
func (m *Model) GraphInfo(sampled bool) (launches int, broke []string, ok bool) {
	g := m.graphs[graphKey{batch: m.batch, sampled: sampled}]
	if g == nil {
		return 0, nil, false
	}
	return g.launches, append([]string(nil), g.broke...), true
}

// GraphRecaptures is how many graph-mode steps (Decode's and Paged's) had
// their replay refused by the plugin and captured their graph again since
// the model was made: on CUDA, a plan that needed a larger attention
// workspace, or decode attention switching between FlashInfer's decode and
// prefill kernels. Each costs a capture on the host.
func (m *Model) GraphRecaptures() int { return m.recaptures }

// GraphCaptures is how many decode steps (Decode's and Paged's) were
// captured as graphs since the model was made: one per batch-size bucket
// on its first graph-mode step, plus GraphRecaptures. Each costs the host
// a capture and an instantiation, in the step that makes it.
func (m *Model) GraphCaptures() int { return m.captures }

// probe says whether the plugin records op in a graph: it captures op
// alone (nothing runs) and drops the graph. A refusal wrapping
// core.ErrFailedPrecondition (the slot is not recorded) or
// core.ErrUnsupported (the plugin records the slot but not this object:
// CUDA records decode attention on FlashInfer's decode kernel only) means
// not recorded; any other error is the op's own.
func (m *Model) probe(op *stepOp) (bool, error) {
	if op.kind == opKernels {
		return true, nil
	}
	if r, ok := m.recordable[op.kind]; ok {
		return r, nil
	}
	g, err := m.s.Capture(op.run)
	switch {
	case err == nil:
		err = g.Close()
	case errors.Is(err, core.ErrFailedPrecondition), errors.Is(err, core.ErrUnsupported):
		err = nil
	default:
		return false, fmt.Errorf("llm: probing whether the plugin records %s in graphs: %w", op.kind, err)
	}
	if m.recordable == nil {
		m.recordable = map[string]bool{}
	}
	m.recordable[op.kind] = g != nil
	return g != nil, err
}

// stepGraph returns the decode step's graphs at the current batch,
// capturing them on first use (or when fresh): the step's ops and the
// pick, recorded in stretches split at the ops the plugin does not record.
func (m *Model) stepGraph(sp *Sampling, fresh bool) (*stepGraph, error) {
	key := graphKey{batch: m.batch, sampled: sp != nil}
	if g := m.graphs[key]; g != nil && !fresh {
		return g, nil
	}
	g, err := m.captureStep(m.decodeOps(), sp, func(s *core.Stream) error { return m.pick(s, sp, 0, m.batch) })
	if err != nil {
		return nil, err
	}
	m.keepGraph(key, g)
	return g, nil
}

// keepGraph stores g as key's graph (closing one it replaces).
func (m *Model) keepGraph(key graphKey, g *stepGraph) {
	if m.graphs == nil {
		m.graphs = map[graphKey]*stepGraph{}
	}
	if old := m.graphs[key]; old != nil {
		_ = old.close()
	}
	m.graphs[key] = g
}

// captureStep records ops and then pick (whose launch becomes the graph's
// pick node: sampling sets its seed per step) in stretches split at the
// ops the plugin does not record.
func (m *Model) captureStep(ops []stepOp, sp *Sampling, pick func(s *core.Stream) error) (*stepGraph, error) {
	g := &stepGraph{pickSeg: -1, pick: -1}
	if sp != nil {
		g.last = *sp
	}
	ops = append(ops, stepOp{"pick", opKernels, func(s *core.Stream) error {
		g.pick = s.NextNode()
		return pick(s)
	}})
	broke := map[string]bool{}
	var run []*stepOp
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		stretch := run
		run = nil
		hasPick := stretch[len(stretch)-1].name == "pick"
		cg, err := m.s.Capture(func(cs *core.Stream) error {
			for _, op := range stretch {
				if err := op.run(cs); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("llm: capturing the decode step from %s to %s: %w", stretch[0].name, stretch[len(stretch)-1].name, err)
		}
		if hasPick {
			g.pickSeg = len(g.segs)
		}
		g.segs = append(g.segs, stepSeg{g: cg})
		g.launches++
		return nil
	}
	var err error
	for i := range ops {
		op := &ops[i]
		var rec bool
		if rec, err = m.probe(op); err != nil {
			break
		}
		if rec {
			run = append(run, op)
			continue
		}
		broke[op.kind] = true
		if err = flush(); err != nil {
			break
		}
		g.segs = append(g.segs, stepSeg{op: op})
	}
	if err == nil {
		err = flush()
	}
	if err != nil {
		_ = g.close()
		return nil, err
	}
	for k := range broke {
		g.broke = append(g.broke, k)
	}
	slices.Sort(g.broke)
	m.captures++
	return g, nil
}

// launch replays the step: its graphs, and between them the ops the
// plugin does not record. A sampled step sets the pick's arguments that
// changed (the seed, every step) first.
func (g *stepGraph) launch(s *core.Stream, sp *Sampling, step int) error {
	if sp != nil {
		if g.pickSeg < 0 {
			return errors.New("llm: the step's graph has no pick")
		}
		pg := g.segs[g.pickSeg].g
		err := pg.SetArg(g.pick, 7, core.ArgScalar[uint64](sp.Seed+uint64(step)))
		if err == nil && sp.TopK != g.last.TopK {
			err = pg.SetArg(g.pick, 4, core.ArgScalar[uint64](uint64(sp.TopK)))
		}
		if err == nil && sp.TopP != g.last.TopP {
			err = pg.SetArg(g.pick, 5, core.ArgScalar[float32](sp.TopP))
		}
		if err == nil && sp.Temperature != g.last.Temperature {
			err = pg.SetArg(g.pick, 6, core.ArgScalar[float32](sp.Temperature))
		}
		if err != nil {
			return fmt.Errorf("llm: setting the sampling arguments of the step's graph: %w", err)
		}
		g.last = *sp
	}
	for i := range g.segs {
		seg := &g.segs[i]
		var err error
		if seg.g != nil {
			err = seg.g.Launch(s)
		} else {
			err = seg.op.run(s)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
