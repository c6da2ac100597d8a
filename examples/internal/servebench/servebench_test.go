// SPDX-License-Identifier: Apache-2.0

package servebench

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
	"github.com/metrale/gpurt/llm"
)

func tiny() llm.Config {
	c := llm.Presets["tiny"]
	c.Eps, c.Seed, c.Rope = 1e-5, 3, "neox"
	return c
}

func openMock(t *testing.T) *core.Device {
	t.Helper()
	return mockrt.Device0(t, mockrt.OpenConfig(t, core.Config{PluginOptions: "delay_us=0", PoolBudget: 0.9}))
}

// unbatched is each request run alone through llm's Generate (greedy).
func unbatched(t *testing.T, d *core.Device, load *Load) [][]int32 {
	t.Helper()
	maxP, maxN := 0, 0
	for _, r := range load.Requests {
		maxP, maxN = max(maxP, len(r.Prompt)), max(maxN, r.MaxNew)
	}
	m, err := llm.NewModel(d, tiny(), 1, maxP+maxN, maxP)
	require.NoError(t, err)
	defer m.Close()
	out := make([][]int32, len(load.Requests))
	for i, r := range load.Requests {
		run, err := m.Generate(d.Runtime(), llm.GenOptions{Prompts: [][]int32{r.Prompt}, Steps: r.MaxNew})
		require.NoError(t, err)
		for _, st := range run.Tokens {
			out[i] = append(out[i], st[0])
		}
	}
	return out
}

// TestServeOnMock: a small load through the server on the mock, in two
// cache sizes (roomy, and tight enough to preempt): every request ends
// with its exact length and the tokens it makes alone; no page is leaked;
// the shared prompt's pages are hit.
func TestServeOnMock(t *testing.T) {
	d := openMock(t)
	lo := LoadOptions{Requests: 10, Rate: 2000, PromptMin: 5, PromptMax: 40, OutMin: 2, OutMax: 9, Shared: 48, SharedShare: 0.5, Vocab: tiny().Vocab, Seed: 5}
	load, err := NewLoad(lo)
	require.NoError(t, err)
	shared := 0
	for _, r := range load.Requests {
		if r.Shared {
			shared++
		}
	}
	require.GreaterOrEqual(t, shared, 2, "the seed gives shared prompts")
	want := unbatched(t, d, load)

	// The same requests all at once.
	burst := &Load{Options: load.Options, Requests: append([]Request(nil), load.Requests...)}
	burst.Options.Rate = 0
	for i := range burst.Requests {
		burst.Requests[i].Arrival = 0
	}
	for _, c := range []struct {
		name            string
		load            *Load
		kvTokens, chunk int
		preempt         bool
		graphs          bool
	}{{"roomy", load, 1024, 16, false, false}, {"tight burst", burst, 192, 8, true, false},
		{"roomy graphs", load, 1024, 16, false, true}, {"tight burst graphs", burst, 192, 8, true, true}} {
		t.Run(c.name, func(t *testing.T) {
			sv, err := NewServer(d, ServerOptions{Model: tiny(), TokenBudget: 24, MaxBatch: 4, ChunkSize: c.chunk, KVTokens: c.kvTokens, Graphs: c.graphs})
			require.NoError(t, err)
			defer sv.Close()
			res, err := sv.Run(c.load, 0, "")
			require.NoError(t, err)
			var outTok int64
			for i, r := range load.Requests {
				require.Len(t, res.Outputs[i], r.MaxNew, "request %d's length", i)
				assert.Equal(t, want[i], res.Outputs[i], "request %d: batched and alone differ", i)
				outTok += int64(r.MaxNew)
			}
			assert.Equal(t, outTok, res.OutputTokens)
			assert.Equal(t, res.Pages, res.PagesFreeAtEnd, "every page back (free or cached)")
			assert.Zero(t, res.LiveAtEnd)
			assert.Positive(t, res.CachedTokens, "prefix hits")
			assert.Positive(t, res.SharedSkipped)
			assert.LessOrEqual(t, res.SharedSkipped, 1.0)
			assert.Positive(t, res.DecodeSteps)
			assert.Positive(t, res.HostMsPerStep)
			assert.Positive(t, res.DecodeBytes)
			assert.Positive(t, res.TTFT.P99)
			assert.GreaterOrEqual(t, res.TTFT.P99, res.TTFT.P50)
			assert.GreaterOrEqual(t, res.TPOT.P99, res.TPOT.P50)
			if c.preempt {
				assert.Positive(t, res.Preemptions, "the tight cache preempts")
			}
			if c.graphs {
				// one capture per decode batch size met (at most MaxBatch), none refused on the mock
				assert.Positive(t, res.GraphCaptures, "decode steps captured")
				assert.LessOrEqual(t, res.GraphCaptures, 4)
			} else {
				assert.Zero(t, res.GraphCaptures, "eager steps capture nothing")
			}
			assert.Zero(t, res.GraphRecaptures)
			js, err := json.Marshal(res)
			require.NoError(t, err)
			assert.Contains(t, string(js), `"kind":"serve"`)
		})
	}
}

// With per-request sampling a request draws the same tokens in any batch
// (its own Philox seed, its offset the tokens it has made): batches of up
// to 4, eager and with graphs, and under preemption, give what batches of
// one give; and the draws are not the argmax.
func TestServeSampledOnMock(t *testing.T) {
	d := openMock(t)
	lo := LoadOptions{Requests: 8, Rate: 0, PromptMin: 5, PromptMax: 30, OutMin: 3, OutMax: 8, Shared: 32, SharedShare: 0.5, Vocab: tiny().Vocab, Seed: 9}
	load, err := NewLoad(lo)
	require.NoError(t, err)
	serve := func(maxBatch, kvTokens int, sample, graphs bool) *Result {
		sv, err := NewServer(d, ServerOptions{Model: tiny(), TokenBudget: 24, MaxBatch: maxBatch, ChunkSize: 16, KVTokens: kvTokens,
			Sample: sample, Graphs: graphs})
		require.NoError(t, err)
		defer sv.Close()
		res, err := sv.Run(load, 0, "")
		require.NoError(t, err)
		assert.Equal(t, sample, res.Sampled)
		return res
	}
	alone := serve(1, 1024, true, false).Outputs
	for _, c := range []struct {
		kvTokens int
		graphs   bool
	}{{1024, false}, {1024, true}, {96, false}} {
		res := serve(4, c.kvTokens, true, c.graphs)
		assert.Equal(t, alone, res.Outputs, "kv tokens %d, graphs %v", c.kvTokens, c.graphs)
		if c.kvTokens < 1024 {
			assert.Positive(t, res.Preemptions, "the tight cache preempts")
		}
	}
	assert.NotEqual(t, serve(4, 1024, false, false).Outputs, alone, "sampled, not greedy")
}

func TestLoadShape(t *testing.T) {
	o := DefaultLoad(32000)
	o.Rate = 10
	l, err := NewLoad(o)
	require.NoError(t, err)
	require.Len(t, l.Requests, 1000)
	shared := 0
	for i, r := range l.Requests {
		n := len(r.Prompt)
		if r.Shared {
			shared++
			n -= 2048
			require.Equal(t, l.Requests[0].Prompt[:0], r.Prompt[:0])
		}
		require.True(t, n >= 128 && n <= 4096, "request %d prompt %d", i, n)
		require.True(t, r.MaxNew >= 32 && r.MaxNew <= 512)
		if i > 0 {
			require.GreaterOrEqual(t, r.Arrival, l.Requests[i-1].Arrival)
		}
	}
	assert.InDelta(t, 500, shared, 60)
	// Poisson at 10/s: 1000 arrivals in about 100 s.
	assert.InDelta(t, 100, l.Requests[999].Arrival.Seconds(), 15)
	_, err = NewLoad(LoadOptions{Requests: 1, PromptMin: 5, PromptMax: 4, OutMin: 1, OutMax: 1, Vocab: 9})
	require.ErrorContains(t, err, "prompt 5-4")
}
