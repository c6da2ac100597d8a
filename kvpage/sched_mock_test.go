// SPDX-License-Identifier: Apache-2.0

package kvpage

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
)

type rowKey struct {
	handle int64
	pos    int
}

// runSched drives s on the mock through r's table, AppendKV and causal
// prefill attention (decodes are one-row prefills, so one attention
// serves a mixed step), sampling with the fake model, until nothing is
// pending. It returns each attention output row by request and position,
// and the outputs.
func runSched(t *testing.T, r *rig, s *Scheduler) (map[rowKey][]byte, map[int64][]int32) {
	rows := map[rowKey][]byte{}
	outs := map[int64][]int32{}
	kvRow, qRow := tKVHeads*tHeadDim*2, tQOHeads*tHeadDim*2
	for steps := 0; s.Pending() > 0; steps++ {
		require.Less(t, steps, 1000)
		b, err := s.Next()
		require.NoError(t, err)
		if len(b.Entries) == 0 {
			continue
		}
		for _, cp := range b.Copies {
			require.NoError(t, CopyPage(r.s, r.cache, cp))
		}
		require.NoError(t, r.tab.Begin())
		for _, e := range b.Entries {
			_, err := r.tab.Add(r.a, e.ID, len(e.Tokens))
			require.NoError(t, err)
		}
		st, err := r.tab.Upload(r.s)
		require.NoError(t, err)
		kb, vb, qb := make([]byte, st.Rows*kvRow), make([]byte, st.Rows*kvRow), make([]byte, st.Rows*qRow)
		var keys []rowKey
		var sampled []int32
		n := 0
		for _, e := range b.Entries {
			pages, tokens, err := r.a.Pages(e.ID)
			require.NoError(t, err)
			seq := make([]int32, tokens)
			for i := range seq {
				seq[i] = r.a.toks[int(pages[i/tPS])*tPS+i%tPS]
			}
			for i := tokens - len(e.Tokens); i < tokens; i++ {
				row(kb[n*kvRow:], tKVHeads, seq[i], int32(i), 0)
				row(vb[n*kvRow:], tKVHeads, seq[i], int32(i), 1)
				row(qb[n*qRow:], tQOHeads, seq[i], int32(i), 2)
				keys = append(keys, rowKey{e.Handle, i})
				n++
			}
			if e.Sample {
				sampled = append(sampled, fakeNext(seq))
			}
		}
		require.NoError(t, r.s.Synchronize())
		require.NoError(t, core.CopyFromHost(r.k, kb))
		require.NoError(t, core.CopyFromHost(r.v, vb))
		require.NoError(t, core.CopyFromHost(r.q, qb))
		require.NoError(t, r.cache.Append(r.s, st.PageTable, st.Batch, st.KVRows(r.k, r.v)))
		require.NoError(t, r.pre.Plan(r.s, st.Schedule(true)))
		require.NoError(t, r.pre.Run(r.s, r.cache,
			attention.Operands{Q: r.q, O: r.o, Pages: st.PageTable, QOIndptr: st.QOIndptr}))
		require.NoError(t, r.s.Synchronize())
		out := make([]byte, st.Rows*qRow)
		require.NoError(t, core.CopyToHost(out, r.o))
		for i, k := range keys {
			rows[k] = out[i*qRow : (i+1)*qRow]
		}
		done, err := s.Complete(sampled)
		require.NoError(t, err)
		for _, f := range done {
			outs[f.Handle] = append([]int32(nil), f.Output...)
		}
	}
	return rows, outs
}

// The scheduler's mixed steps (decodes and prompt chunks together,
// prefix hits) through the table, AppendKV and attention on the mock give
// every request's every row the same attention output as the request run
// alone in one prefill, and the same tokens.
func TestSchedulerOnMock(t *testing.T) {
	d := mockDevice(t)
	sys := seq(100, 9)
	prompts := [][]int32{cat(sys, seq(200, 5)), cat(sys, seq(300, 2)), cat(sys, seq(400, 7)), seq(500, 6)}
	const maxNew = 5

	r := newRig(t, d)
	s, err := NewScheduler(r.a, SchedConfig{TokenBudget: 8, MaxBatch: 4, ChunkSize: 5, EOS: -1})
	require.NoError(t, err)
	for _, p := range prompts {
		_, err := s.Submit(p, maxNew)
		require.NoError(t, err)
	}
	mixed, outs := runSched(t, r, s)
	assert.Positive(t, s.Stats().CachedTokens, "prefix hits")

	for i, p := range prompts {
		alone := newRig(t, d)
		sa, err := NewScheduler(alone.a, SchedConfig{TokenBudget: 64, MaxBatch: 4, EOS: -1})
		require.NoError(t, err)
		_, err = sa.Submit(p, maxNew)
		require.NoError(t, err)
		ref, refOut := runSched(t, alone, sa)
		h := int64(i + 1)
		assert.Equal(t, refOut[1], outs[h], "request %d's tokens", h)
		compared := 0
		for k, want := range ref {
			got, ok := mixed[rowKey{h, k.pos}]
			if !ok {
				continue // a prefix-cache hit: the mixed run never computed it
			}
			assert.Equal(t, want, got, "request %d position %d", h, k.pos)
			compared++
		}
		assert.GreaterOrEqual(t, compared, len(p)-len(sys)+maxNew-1, "request %d's rows compared", h)
	}
}
