// SPDX-License-Identifier: Apache-2.0

package kvpage

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const fakeVocab = 50

// fakeNext is the fake model: the next token is a hash of the whole
// sequence, so any token the scheduler feeds wrong, out of order or
// twice changes every later token.
func fakeNext(seq []int32) int32 {
	h := uint64(len(seq))
	for _, t := range seq {
		h = mix(h ^ uint64(t))
	}
	return int32(h % fakeVocab)
}

// reference generates what one request alone, unbatched, would.
func reference(prompt []int32, maxNew int, eos int32) []int32 {
	seq := append([]int32(nil), prompt...)
	var out []int32
	for len(out) < maxNew {
		t := fakeNext(seq)
		out = append(out, t)
		seq = append(seq, t)
		if t == eos {
			break
		}
	}
	return out
}

// fakeStep plays the model for a batch: it checks that each request's
// cache holds exactly the start of its sequence (full: prompt, then the
// tokens sampled so far) through the step's tokens, and samples with
// fakeNext, appending the samples to full.
func fakeStep(t *testing.T, a *Allocator, b *Batch, full map[int64][]int32) []int32 {
	var sampled []int32
	rows := 0
	for _, e := range b.Entries {
		rows += len(e.Tokens)
		pages, n, err := a.Pages(e.ID)
		require.NoError(t, err)
		want := full[e.Handle]
		require.LessOrEqual(t, n, len(want), "request %d's cache length", e.Handle)
		require.Equal(t, want[n-len(e.Tokens):n], e.Tokens, "request %d's new tokens", e.Handle)
		for i, x := range want[:n] {
			p := pages[i/a.ps]
			require.Equal(t, x, a.toks[int(p)*a.ps+i%a.ps], "request %d token %d", e.Handle, i)
		}
		if e.Sample {
			require.Equal(t, len(want), n, "request %d samples after its whole sequence", e.Handle)
			tok := fakeNext(want)
			sampled = append(sampled, tok)
			full[e.Handle] = append(full[e.Handle], tok)
		}
	}
	require.Equal(t, b.Rows, rows)
	return sampled
}

// A synthetic load through the scheduler with the fake model on the
// CPU: requests arrive at random, half share a system prompt, prompts
// and outputs vary in length, the cache is small enough to preempt.
// Every request's output equals its unbatched reference, every step
// keeps the budget, and at the end no page is held.
func TestSchedulerLoad(t *testing.T) {
	tests := []struct {
		name                      string
		pages, budget, batch, chk int
		eos                       int32
	}{
		{"roomy", 256, 64, 16, 32, -1},
		{"tight: preemptions", 40, 48, 8, 16, -1},
		{"eos, small chunks", 128, 24, 12, 5, 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const ps, n = 4, 200
			a, err := New(Config{NumPages: tc.pages, PageSize: ps, MaxRequests: 32})
			require.NoError(t, err)
			s, err := NewScheduler(a, SchedConfig{TokenBudget: tc.budget, MaxBatch: tc.batch, ChunkSize: tc.chk, EOS: tc.eos})
			require.NoError(t, err)
			r := rand.New(rand.NewPCG(26, uint64(tc.pages)))
			sys := make([]int32, 37)
			for i := range sys {
				sys[i] = int32(r.IntN(fakeVocab))
			}
			want := map[int64][]int32{}
			full := map[int64][]int32{}
			got := map[int64]Finished{}
			submitted := 0
			for step := 0; submitted < n || s.Pending() > 0; step++ {
				require.Less(t, step, 100_000, "the load finishes")
				// Poisson-like arrivals: a few per step.
				for k := r.IntN(3); k > 0 && submitted < n; k-- {
					var prompt []int32
					if r.IntN(2) == 0 {
						prompt = append(prompt, sys...)
					}
					for m := 1 + r.IntN(30); m > 0; m-- {
						prompt = append(prompt, int32(r.IntN(fakeVocab)))
					}
					maxNew := 1 + r.IntN(25)
					h, err := s.Submit(prompt, maxNew)
					require.NoError(t, err)
					want[h] = reference(prompt, maxNew, tc.eos)
					full[h] = prompt
					submitted++
				}
				b, err := s.Next()
				require.NoError(t, err)
				if len(b.Entries) == 0 {
					continue
				}
				assert.LessOrEqual(t, b.Rows, tc.budget)
				assert.LessOrEqual(t, len(b.Entries), tc.batch)
				assert.Empty(t, b.Copies, "no forks, no copies")
				done, err := s.Complete(fakeStep(t, a, b, full))
				require.NoError(t, err)
				for _, f := range done {
					got[f.Handle] = Finished{Handle: f.Handle, Output: append([]int32(nil), f.Output...), ArrivalStep: f.ArrivalStep,
						FirstTokenStep: f.FirstTokenStep, FinishStep: f.FinishStep, CachedTokens: f.CachedTokens, Preemptions: f.Preemptions}
				}
			}
			require.Len(t, got, n)
			for h, w := range want {
				assert.Equal(t, w, got[h].Output, "request %d", h)
				assert.LessOrEqual(t, got[h].ArrivalStep, got[h].FirstTokenStep)
				assert.LessOrEqual(t, got[h].FirstTokenStep, got[h].FinishStep)
			}
			st := s.Stats()
			t.Logf("%+v; allocator %+v", st, a.Stats())
			assert.Equal(t, int64(n), st.Finished)
			assert.Positive(t, st.CachedTokens, "prefix hits")
			assert.Zero(t, a.Live())
			assert.Equal(t, a.NumPages(), a.FreePages())
			require.NoError(t, a.check(map[ReqID][]int32{}))
			if tc.pages == 40 {
				assert.Positive(t, st.Preemptions)
			}
			if tc.eos >= 0 {
				ended := 0
				for _, f := range got {
					if f.Output[len(f.Output)-1] == tc.eos {
						ended++
					}
				}
				assert.Positive(t, ended, "some requests ended at EOS")
			}
		})
	}
}

func TestSchedulerChunkedPrefill(t *testing.T) {
	a, err := New(Config{NumPages: 64, PageSize: 4, MaxRequests: 8})
	require.NoError(t, err)
	s, err := NewScheduler(a, SchedConfig{TokenBudget: 10, MaxBatch: 4, ChunkSize: 6, EOS: -1})
	require.NoError(t, err)
	long := seq(0, 20)
	h1, err := s.Submit(long, 3)
	require.NoError(t, err)
	full := map[int64][]int32{h1: long}
	type shape struct {
		handle int64
		n      int
		sample bool
	}
	steps := [][]shape{
		{{h1, 6, false}},
		{{h1, 6, false}},
		{{h1, 6, false}},
		{{h1, 2, true}},               // the last chunk samples the first token
		{{h1, 1, true}, {2, 5, true}}, // decode first, then the new request's prompt past its 12 cached tokens
		{{h1, 1, true}, {2, 1, true}}, // the last tokens of both
	}
	for i, want := range steps {
		if i == 4 {
			p2 := cat(long[:12], seq(90, 5))
			h2, err := s.Submit(p2, 2)
			require.NoError(t, err)
			full[h2] = p2
			require.Equal(t, int64(2), h2)
		}
		b, err := s.Next()
		require.NoError(t, err)
		var got []shape
		for _, e := range b.Entries {
			got = append(got, shape{e.Handle, len(e.Tokens), e.Sample})
		}
		require.Equal(t, want, got, "step %d", i+1)
		_, err = s.Complete(fakeStep(t, a, b, full))
		require.NoError(t, err)
	}
	assert.Equal(t, int64(12), s.Stats().CachedTokens, "request 2 found three pages of request 1's prompt")
	assert.Zero(t, s.Pending())
}

func TestSchedulerErrors(t *testing.T) {
	a, err := New(Config{NumPages: 4, PageSize: 4, MaxRequests: 2})
	require.NoError(t, err)
	_, err = NewScheduler(nil, SchedConfig{TokenBudget: 1, MaxBatch: 1})
	assert.ErrorContains(t, err, "nil allocator")
	_, err = NewScheduler(a, SchedConfig{MaxBatch: 1})
	assert.ErrorContains(t, err, "token budget 0")
	s, err := NewScheduler(a, SchedConfig{TokenBudget: 8, MaxBatch: 2, EOS: -1})
	require.NoError(t, err)
	tests := []struct {
		name string
		fn   func() error
		msg  string
	}{
		{"empty prompt", func() error { _, err := s.Submit(nil, 1); return err }, "needs a prompt (0 tokens)"},
		{"no new tokens", func() error { _, err := s.Submit(seq(0, 3), 0); return err }, "max new tokens (0)"},
		{"beyond the cache", func() error { _, err := s.Submit(seq(0, 10), 7); return err }, "10 prompt + 7 new tokens exceed the cache's 16 tokens"},
		{"complete first", func() error { _, err := s.Complete(nil); return err }, "Complete without a step"},
		{"submit", func() error { _, err := s.Submit(seq(0, 3), 2); return err }, ""},
		{"next", func() error { _, err := s.Next(); return err }, ""},
		{"next again", func() error { _, err := s.Next(); return err }, "Next before the last step's Complete"},
		{"wrong sample count", func() error { _, err := s.Complete([]int32{1, 2}); return err }, "2 sampled tokens for the step's 1 sampling entries"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.fn()
			if tc.msg == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.msg)
			assert.Contains(t, err.Error(), "kvpage: scheduler: ")
		})
	}
}

// Requests part-way through long prompts that together need more pages
// than the cache has do not stall: the newest gives its pages up and is
// recomputed, and every request still ends with its reference output.
func TestSchedulerLongPromptsPreempt(t *testing.T) {
	tests := []struct {
		name                  string
		pages, budget, chunk  int
		prompts, promptTokens int
	}{
		{"two prompts of 30 in 40 tokens", 10, 8, 4, 2, 30},
		{"four prompts of 50 in 64 tokens", 16, 12, 3, 4, 50},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(Config{NumPages: tc.pages, PageSize: 4, MaxRequests: 8})
			require.NoError(t, err)
			s, err := NewScheduler(a, SchedConfig{TokenBudget: tc.budget, MaxBatch: 4, ChunkSize: tc.chunk, EOS: -1})
			require.NoError(t, err)
			want := map[int64][]int32{}
			full := map[int64][]int32{}
			for i := 0; i < tc.prompts; i++ {
				p := seq(100*i, tc.promptTokens)
				h, err := s.Submit(p, 4)
				require.NoError(t, err)
				want[h], full[h] = reference(p, 4, -1), p
			}
			got := map[int64][]int32{}
			for step := 0; s.Pending() > 0; step++ {
				require.Less(t, step, 1000, "the requests make progress")
				b, err := s.Next()
				require.NoError(t, err)
				require.NotEmpty(t, b.Entries, "step %d schedules work while %d requests are pending", step, s.Pending())
				done, err := s.Complete(fakeStep(t, a, b, full))
				require.NoError(t, err)
				for _, f := range done {
					got[f.Handle] = append([]int32(nil), f.Output...)
				}
			}
			assert.Equal(t, want, got)
			assert.Positive(t, s.Stats().Preemptions)
			require.NoError(t, a.check(map[ReqID][]int32{}))
		})
	}
}
