// SPDX-License-Identifier: Apache-2.0

package kvpage

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// check verifies the allocator's invariants against the model: each
// live request's pages hold exactly its tokens, every page is in exactly
// one state (held with ref = the number of page lists holding it,
// evictable in the LRU list and the hash table, or free), and the
// counters agree.
func (a *Allocator) check(model map[ReqID][]int32) error {
	occ := make([]int32, a.numPages)
	live := 0
	for s := range a.reqs {
		r := &a.reqs[s]
		if !r.live {
			continue
		}
		live++
		id := makeID(s, r.gen)
		want, ok := model[id]
		if !ok {
			return fmt.Errorf("%v is live but not in the model", id)
		}
		if r.tokens != len(want) {
			return fmt.Errorf("%v has %d tokens, the model %d", id, r.tokens, len(want))
		}
		if len(r.pages) != (len(want)+a.ps-1)/a.ps {
			return fmt.Errorf("%v has %d pages for %d tokens", id, len(r.pages), len(want))
		}
		for i, x := range want {
			p := r.pages[i/a.ps]
			if got := a.toks[int(p)*a.ps+i%a.ps]; got != x {
				return fmt.Errorf("%v token %d is %d in page %d, the model says %d", id, i, got, p, x)
			}
		}
		for _, p := range r.pages {
			occ[p]++
		}
	}
	if live != len(model) || live != a.live {
		return fmt.Errorf("%d live slots, model %d, counter %d", live, len(model), a.live)
	}
	state := make([]byte, a.numPages) // 'h' held, 'l' lru, 'f' free
	for p := range occ {
		if occ[p] != a.ref[p] {
			return fmt.Errorf("page %d has ref %d but %d holders", p, a.ref[p], occ[p])
		}
		if occ[p] > 0 {
			state[p] = 'h'
		}
	}
	n := 0
	prev := int32(none)
	for p := a.lruHead; p != none; p = a.next[p] {
		if state[p] != 0 {
			return fmt.Errorf("page %d is in the LRU list and %c", p, state[p])
		}
		if a.flags[p]&flagCached == 0 || a.prev[p] != prev {
			return fmt.Errorf("LRU page %d: cached %v, prev %d (want %d)", p, a.flags[p]&flagCached != 0, a.prev[p], prev)
		}
		state[p] = 'l'
		prev = p
		n++
	}
	if n != a.nLRU || prev != a.lruTail {
		return fmt.Errorf("LRU list of %d pages ending at %d; counter %d, tail %d", n, prev, a.nLRU, a.lruTail)
	}
	for _, p := range a.free {
		if state[p] != 0 {
			return fmt.Errorf("free page %d is also %c", p, state[p])
		}
		if a.flags[p]&flagCached != 0 {
			return fmt.Errorf("free page %d is cached", p)
		}
		state[p] = 'f'
	}
	cached := 0
	for p := range state {
		if state[p] == 0 {
			return fmt.Errorf("page %d leaked: not held, not cached, not free", p)
		}
		if a.flags[p]&flagCached != 0 {
			cached++
			if got := a.tab.find(a.hash[p]); got != int32(p) {
				return fmt.Errorf("cached page %d: the table gives %d for its hash", p, got)
			}
		}
	}
	entries := 0
	for _, v := range a.tab.vals {
		if v != none {
			entries++
		}
	}
	if entries != cached {
		return fmt.Errorf("the hash table has %d entries for %d cached pages", entries, cached)
	}
	return nil
}

// TestAllocatorProperty runs 10^5 seeded random join / leave / fork /
// append / evict steps on a small cache (so pages run out and cached
// pages get evicted) and checks every invariant after every step.
func TestAllocatorProperty(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			const ps, steps = 4, 100_000
			a, err := New(Config{NumPages: 32, PageSize: ps, MaxRequests: 12, Salt: seed})
			require.NoError(t, err)
			r := rand.New(rand.NewPCG(seed, 26))
			// A few shared system prompts make prefix hits common.
			prefixes := make([][]int32, 3)
			for i := range prefixes {
				prefixes[i] = make([]int32, 3+r.IntN(4*ps))
				for j := range prefixes[i] {
					prefixes[i][j] = int32(r.IntN(5))
				}
			}
			model := map[ReqID][]int32{}
			pending := map[ReqID][]int32{} // prompt tokens not yet appended
			var ids []ReqID
			var gone []ReqID
			counts := map[string]int{}
			for step := 0; step < steps; step++ {
				op := r.IntN(10)
				switch {
				case op < 2: // join
					prompt := append([]int32(nil), prefixes[r.IntN(len(prefixes))]...)
					for k := r.IntN(2 * ps); k > 0; k-- {
						prompt = append(prompt, int32(r.IntN(5)))
					}
					id, cached, err := a.Join(prompt)
					if len(ids) == 12 {
						require.ErrorIs(t, err, ErrTooManyRequests)
						counts["join full"]++
						break
					}
					require.NoError(t, err)
					require.Less(t, cached, len(prompt))
					require.Zero(t, cached%ps)
					model[id] = append([]int32(nil), prompt[:cached]...)
					pending[id] = prompt[cached:]
					ids = append(ids, id)
					counts["join"]++
					if cached > 0 {
						counts["prefix hit"]++
					}
				case op < 4 && len(ids) > 0: // leave
					i := r.IntN(len(ids))
					id := ids[i]
					free0 := a.FreePages()
					require.NoError(t, a.Leave(id))
					require.GreaterOrEqual(t, a.FreePages(), free0)
					ids = append(ids[:i], ids[i+1:]...)
					delete(model, id)
					delete(pending, id)
					gone = append(gone, id)
					counts["leave"]++
				case op < 5 && len(ids) > 0: // fork
					src := ids[r.IntN(len(ids))]
					id, err := a.Fork(src)
					if len(ids) == 12 {
						require.ErrorIs(t, err, ErrTooManyRequests)
						break
					}
					require.NoError(t, err)
					model[id] = append([]int32(nil), model[src]...)
					pending[id] = append([]int32(nil), pending[src]...)
					ids = append(ids, id)
					counts["fork"]++
				case op < 9 && len(ids) > 0: // append a prefill chunk or decode tokens
					id := ids[r.IntN(len(ids))]
					var tok []int32
					if p := pending[id]; len(p) > 0 {
						tok = p[:1+r.IntN(len(p))]
					} else {
						for k := 1 + r.IntN(1+r.IntN(3*ps)); k > 0; k-- {
							tok = append(tok, int32(r.IntN(5)))
						}
					}
					need, err := a.Need(id, len(tok))
					require.NoError(t, err)
					free0, ref0 := a.FreePages(), append([]int32(nil), a.ref...)
					cp, ok, err := a.Append(id, tok)
					if need > free0 {
						require.ErrorIs(t, err, ErrOutOfPages)
						require.Equal(t, free0, a.FreePages(), "a failed append changes nothing")
						require.Equal(t, ref0, a.ref)
						counts["out of pages"]++
						break
					}
					require.NoError(t, err)
					require.Equal(t, free0-need, a.FreePages())
					if ok {
						require.Equal(t, len(model[id])%ps, cp.Tokens)
						require.Equal(t, int32(1), a.ref[cp.Dst])
						require.Positive(t, a.ref[cp.Src], "the source page stays held by the other sharers")
						counts["copy on write"]++
					}
					model[id] = append(model[id], tok...)
					if len(pending[id]) > 0 {
						pending[id] = pending[id][len(tok):]
					}
					counts["append"]++
				case op == 9: // evict
					c := a.CachedPages()
					k := a.Evict(r.IntN(3))
					require.LessOrEqual(t, k, c)
					require.Equal(t, c-k, a.CachedPages())
					counts["evict"]++
				}
				if err := a.check(model); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			}
			// Ids of requests that left name nothing: no double free.
			for _, id := range gone[:min(len(gone), 100)] {
				require.ErrorIs(t, a.Leave(id), ErrNoRequest)
			}
			require.NoError(t, a.check(model))
			for _, id := range ids {
				require.NoError(t, a.Leave(id))
			}
			require.NoError(t, a.check(map[ReqID][]int32{}))
			require.Equal(t, a.NumPages(), a.FreePages(), "every page is free or evictable at the end")
			t.Logf("steps: %v; stats %+v (hit rate %.2f)", counts, a.Stats(), a.Stats().HitRate())
			for _, k := range []string{"join", "leave", "fork", "append", "prefix hit", "copy on write", "out of pages", "evict", "join full"} {
				assert.Positive(t, counts[k], "the walk exercised %q", k)
			}
			assert.Positive(t, a.Stats().Evictions)
		})
	}
}
