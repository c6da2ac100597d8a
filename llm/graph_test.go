// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
	"github.com/metrale/gpurt/quant"
)

// Graph mode on the mock (which records every op of the step: ABI 1.7's
// kv_append, attention_run and quant_matmul): one graph launch per step,
// tokens and logits byte-identical to eager; with an op kind marked
// unrecorded (as attention_run on CUDA), the step falls back to segments
// with that op eager between them, still byte-identical.
func TestDecodeGraphOneLaunch(t *testing.T) {
	rt, dev := openMock(t)
	for _, tc := range []struct {
		name       string
		int8       bool
		sample     bool
		ctx, P     int
		unrecorded []string // op kinds taken as not recordable
		launches   int      // graph launches per step (tiny: 2 layers)
	}{
		{"bf16 greedy", false, false, 20, 1, nil, 1},
		{"bf16 greedy after prefill", false, false, 0, 6, nil, 1},
		{"bf16 sampled", false, true, 5, 1, nil, 1},
		{"int8 greedy", true, false, 3, 1, nil, 1},
		{"attention eager", false, false, 20, 1, []string{opAttention}, 3},
		{"attention and kv append eager", false, false, 4, 1, []string{opAttention, opKVAppend}, 3},
		{"int8, quant eager", true, false, 3, 1, []string{opQuant}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tinyConfig()
			c.Int8 = tc.int8
			const batch, steps = 2, 5
			m := testModel(t, dev, c, batch, tc.ctx+tc.P+steps+1, tc.P)
			if tc.unrecorded != nil {
				m.recordable = map[string]bool{}
				for _, k := range tc.unrecorded {
					m.recordable[k] = false
				}
			}
			o := GenOptions{Prompt: PromptTokens(c.Seed, batch, tc.P, c.Vocab), P: tc.P, Ctx: tc.ctx, Steps: steps, Collect: true}
			if tc.sample {
				o.Sample = &Sampling{TopK: 20, TopP: 0.9, Temperature: 0.8, Seed: 3}
			}
			eager := generate(t, rt, m, o)
			_, _, ok := m.GraphInfo(tc.sample)
			assert.False(t, ok, "no graph before a graph step")
			o.Graph = true
			sameRun(t, eager, generate(t, rt, m, o))
			launches, broke, ok := m.GraphInfo(tc.sample)
			require.True(t, ok)
			assert.Equal(t, tc.launches, launches)
			want := append([]string(nil), tc.unrecorded...)
			if tc.name == "attention and kv append eager" {
				want = []string{opAttention, opKVAppend}
			}
			if len(want) == 0 {
				assert.Empty(t, broke)
			} else {
				assert.ElementsMatch(t, want, broke)
			}
			// the graph is replayed (not captured again) by a second run
			sameRun(t, eager, generate(t, rt, m, o))
		})
	}
}

// A graph is captured per batch-size bucket and kept across SetBatch.
func TestDecodeGraphBatchBuckets(t *testing.T) {
	rt, dev := openMock(t)
	c := tinyConfig()
	m := testModel(t, dev, c, 3, 12, 1)
	for _, b := range []int{1, 3, 2, 1, 3} {
		t.Run("batch "+string(rune('0'+b)), func(t *testing.T) {
			require.NoError(t, m.SetBatch(b))
			o := GenOptions{Prompt: PromptTokens(c.Seed, b, 1, c.Vocab), P: 1, Ctx: 4, Steps: 4, Collect: true}
			eager := generate(t, rt, m, o)
			o.Graph = true
			sameRun(t, eager, generate(t, rt, m, o))
			n, _, ok := m.GraphInfo(false)
			require.True(t, ok)
			assert.Equal(t, 1, n)
		})
	}
	assert.Len(t, m.graphs, 3, "one graph per batch size used")
}

// TestRunHostTimeBreakdown: Generate's LaunchTime (graph mode only) and
// PlanTime and StageTime are filled and, with each other, within HostTime;
// UploadTime within StageTime.
func TestRunHostTimeBreakdown(t *testing.T) {
	rt, dev := openMock(t)
	c := tinyConfig()
	const batch = 2
	m := testModel(t, dev, c, batch, 32, 4)
	for _, graph := range []bool{false, true} {
		t.Run(map[bool]string{false: "eager", true: "graph"}[graph], func(t *testing.T) {
			r := generate(t, rt, m, GenOptions{Prompt: PromptTokens(c.Seed, batch, 3, c.Vocab), P: 3, Steps: 4, Graph: graph})
			require.Equal(t, 3, r.Decoded)
			assert.Positive(t, r.HostTime)
			assert.Positive(t, r.PlanTime, "every step plans the attention")
			assert.Positive(t, r.StageTime, "every step uploads its inputs")
			assert.Positive(t, r.UploadTime, "every step's upload calls the plugin")
			assert.LessOrEqual(t, r.UploadTime, r.StageTime, "the upload is part of the stage")
			if graph {
				assert.Positive(t, r.LaunchTime, "every step launches its graph")
			} else {
				assert.Zero(t, r.LaunchTime, "no graph launched")
			}
			assert.LessOrEqual(t, r.LaunchTime+r.PlanTime+r.StageTime, r.HostTime, "launch %v + plan %v + stage %v within host %v",
				r.LaunchTime, r.PlanTime, r.StageTime, r.HostTime)
		})
	}
}

// BenchmarkDecodeGraphHost is the host cost of a decode step on the mock
// (tiny model, batch 1, bf16 weights and, "int8 ...", MLX int8 ones; the
// mock's stream runs on its own thread): "step"
// is Decode (the step's inputs staged, the attention plan, the graph
// launch, or the eager ops), "launch" the graph replay alone. The device
// work is waited for outside the timer after every step.
func BenchmarkDecodeGraphHost(b *testing.B) {
	for _, bc := range []struct {
		name                string
		graph, launch, int8 bool
	}{{"eager step", false, false, false}, {"graph step", true, false, false}, {"graph launch", true, true, false},
		{"int8 eager step", false, false, true}, {"int8 graph step", true, false, true}, {"int8 graph launch", true, true, true}} {
		b.Run(bc.name, func(b *testing.B) {
			rt, dev := openMock(b)
			c := tinyConfig()
			c.Int8 = bc.int8
			const batch, window = 1, 32
			m, err := NewModel(dev, c, batch, window+8, 1)
			require.NoError(b, err)
			defer m.Close()
			ids := PromptTokens(c.Seed, batch, 1, c.Vocab)
			_, err = m.Generate(rt, GenOptions{Prompt: ids, P: 1, Steps: 2, Graph: bc.graph})
			require.NoError(b, err)
			g := m.graphs[graphKey{batch: batch}]
			if bc.graph {
				require.NotNil(b, g)
				require.Equal(b, 1, g.launches)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if bc.launch {
					err = g.launch(m.s, nil, i)
				} else {
					err = m.Decode(ids, bc.graph, nil, i)
				}
				b.StopTimer()
				require.NoError(b, err)
				require.NoError(b, m.s.Synchronize())
				if i%window == window-1 {
					require.NoError(b, m.Reset(0))
				}
				b.StartTimer()
			}
		})
	}
}

// quantizeRows (stretches of rows quantized in parallel) gives
// quant.Quantize's bytes.
func TestQuantizeRowsMatchesQuantize(t *testing.T) {
	for _, tc := range []struct{ rows, cols int }{{3, 64}, {256, 16384}, {257, 8192 + 64}} {
		t.Run(fmt.Sprintf("%dx%d", tc.rows, tc.cols), func(t *testing.T) {
			f := make([]float32, tc.rows*tc.cols)
			for i := range f {
				f[i] = float32(math.Sin(float64(i)*0.37)) * float32(1+i%7)
			}
			o := quant.Options{GroupSize: 64, Bits: 8, ScaleType: core.BF16}
			want, err := quant.Quantize(f, tc.rows, tc.cols, o)
			require.NoError(t, err)
			got, err := quantizeRows(f, tc.rows, tc.cols, o)
			require.NoError(t, err)
			assert.Equal(t, want, got)
		})
	}
	_, err := quantizeRows(make([]float32, 64*100), 64, 100, quant.Options{GroupSize: 64})
	assert.ErrorContains(t, err, "not a multiple of the group size")
}

// probe: an op the capture refuses (ErrFailedPrecondition) is not
// recordable, and the answer is kept per kind; an op's own error is an
// error.
func TestProbeRecordable(t *testing.T) {
	_, dev := openMock(t)
	c := tinyConfig()
	m := testModel(t, dev, c, 1, 8, 1)
	for _, tc := range []struct {
		name, kind string
		run        func(s *core.Stream) error
		want       bool
		err        string
	}{
		{"recorded", "launch", func(s *core.Stream) error { return m.embedTokens(s, 1) }, true, ""},
		{"refused by the capture", "sync", func(s *core.Stream) error { return s.Synchronize() }, false, ""},
		{"the op's own error", "bad", func(s *core.Stream) error { return fmt.Errorf("llm: boom") }, false, "probing whether the plugin records bad in graphs: llm: boom"},
		{"kernels are not probed", opKernels, func(s *core.Stream) error { return fmt.Errorf("not called") }, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := m.probe(&stepOp{name: tc.name, kind: tc.kind, run: tc.run})
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			if tc.kind != opKernels {
				assert.Equal(t, tc.want, m.recordable[tc.kind], "kept per kind")
			}
		})
	}
}

// A replayed decode step allocates nothing once its graph is captured:
// staging, plan and launch (an eager step boxes its operand views).
// With rope scaling too (Llama 3.1's, and dynamic NTK within the
// trained length): the frequencies are not computed again each step.
func TestGraphDecodeAllocs(t *testing.T) {
	_, d := openMock(t)
	for _, sc := range []*RopeScaling{nil,
		{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPos: 8, AttentionFactor: 1},
		{Type: "dynamic", Factor: 2, OriginalMaxPos: 64, AttentionFactor: 1},
	} {
		name := "no scaling"
		if sc != nil {
			name = sc.Type
		}
		t.Run(name, func(t *testing.T) {
			c := tinyConfig()
			c.Scaling = sc
			m, err := NewModel(d, c, 2, 32, 4)
			require.NoError(t, err)
			defer m.Close()
			step := 0
			decode := func() {
				if step%8 == 0 { // the cache holds 32 tokens a request
					require.NoError(t, m.SetBatch(2))
				}
				require.NoError(t, m.Decode([]int32{1, 2}, true, nil, step))
				step++
			}
			decode() // captures the graph
			assert.Zero(t, testing.AllocsPerRun(10, decode))
		})
	}
}

// A replay the plugin refuses with ErrFailedPrecondition (on CUDA: the
// attention's workspace was reallocated, or its plan switched kernels,
// since the capture; on the mock: the refuse_replay_nth fault) makes the
// step capture its graph again and run once more: the tokens and logits
// stay byte-identical to eager and the model keeps the new graph.
func TestDecodeGraphRecapturesRefusedReplay(t *testing.T) {
	const batch, steps = 2, 5
	// 1 launch a step; the first graph run makes launches 1-5, so the
	// 7th (the second run's second step) is refused.
	rt := mockrt.Open(t, "refuse_replay_nth=7")
	dev := mockrt.Device0(t, rt)
	c := tinyConfig()
	m := testModel(t, dev, c, batch, 20+steps+1, 1)
	o := GenOptions{Prompt: PromptTokens(c.Seed, batch, 1, c.Vocab), P: 1, Ctx: 20, Steps: steps, Collect: true}
	eager := generate(t, rt, m, o)
	o.Graph = true
	sameRun(t, eager, generate(t, rt, m, o))
	old := m.graphs[graphKey{batch: batch}]
	require.NotNil(t, old)
	assert.Zero(t, m.GraphRecaptures(), "no replay was refused yet")
	assert.Equal(t, 1, m.GraphCaptures(), "one batch size, captured once")
	sameRun(t, eager, generate(t, rt, m, o), "a replay refused and captured again")
	assert.NotSame(t, old, m.graphs[graphKey{batch: batch}], "the refused graph is replaced")
	assert.Equal(t, 1, m.GraphRecaptures(), "the one refused replay is counted")
	assert.Equal(t, 2, m.GraphCaptures(), "the recapture is a capture")
	sameRun(t, eager, generate(t, rt, m, o), "the new graph replays")
	assert.Equal(t, 1, m.GraphRecaptures(), "the new graph's replays are not refused")
	assert.Equal(t, 2, m.GraphCaptures(), "replays capture nothing")
}

// A decode step uploads the page table only when it changed since the
// device block last got it (stepStage.putTable), and a prefill's table in
// between is not taken for it: with pages of 2 tokens and requests that
// cross page ends on different steps, the graph's tokens and logits stay
// eager's (TestDecoderMatchesReference checks eager against the
// reference with such pages).
func TestDecodeGraphPageTableChanges(t *testing.T) {
	rt, dev := openMock(t)
	c := tinyConfig()
	c.PageSize = 2
	const steps = 12
	m := testModel(t, dev, c, 3, 5+steps, 5)
	p := PromptTokens(c.Seed, 1, 5, c.Vocab)
	o := GenOptions{Prompts: [][]int32{p[:1], p[:4], p[:5]}, Steps: steps, Collect: true}
	eager := generate(t, rt, m, o)
	o.Graph = true
	sameRun(t, eager, generate(t, rt, m, o))
	assert.Greater(t, m.sched.ver, uint64(steps/2), "the page table changed on most steps")
}
