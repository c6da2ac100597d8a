// SPDX-License-Identifier: Apache-2.0

package kvpage

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func seq(from, n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(from + i)
	}
	return s
}

func cat(parts ...[]int32) []int32 {
	var s []int32
	for _, p := range parts {
		s = append(s, p...)
	}
	return s
}

func newAlloc(t *testing.T, pages, ps, reqs int) *Allocator {
	t.Helper()
	a, err := New(Config{NumPages: pages, PageSize: ps, MaxRequests: reqs})
	require.NoError(t, err)
	return a
}

// joinAll joins prompt and appends its uncached tokens.
func joinAll(t *testing.T, a *Allocator, prompt []int32) (ReqID, int) {
	t.Helper()
	id, cached, err := a.Join(prompt)
	require.NoError(t, err)
	_, ok, err := a.Append(id, prompt[cached:])
	require.NoError(t, err)
	require.False(t, ok)
	return id, cached
}

func TestNewChecks(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no pages", Config{PageSize: 16, MaxRequests: 1}},
		{"no page size", Config{NumPages: 4, MaxRequests: 1}},
		{"no requests", Config{NumPages: 4, PageSize: 16}},
		{"token count overflows", Config{NumPages: 1 << 28, PageSize: 16, MaxRequests: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "kvpage: ")
		})
	}
}

func TestPrefixHits(t *testing.T) {
	const ps = 4
	sys := seq(100, 10) // two full pages and two tokens
	tests := []struct {
		name   string
		prompt []int32
		cached int
	}{
		{"same system prompt, other question", cat(sys, seq(500, 5)), 8},
		{"the whole first prompt again: its last token is recomputed", cat(sys, seq(200, 3)), 12},
		{"first page differs", cat(seq(0, 4), sys), 0},
		{"second page differs", cat(sys[:4], seq(0, 8)), 4},
		{"shorter than a page", sys[:3], 0},
		{"exactly the two pages: the last page is recomputed", sys[:8], 4},
		{"empty", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newAlloc(t, 16, ps, 4)
			first, cached := joinAll(t, a, cat(sys, seq(200, 3)))
			require.Zero(t, cached)
			id, cached, err := a.Join(tc.prompt)
			require.NoError(t, err)
			assert.Equal(t, tc.cached, cached)
			pages, n, err := a.Pages(id)
			require.NoError(t, err)
			assert.Equal(t, cached, n)
			fp, _, _ := a.Pages(first)
			assert.Equal(t, fp[:cached/ps], append([]int32{}, pages...), "the hit pages are the first request's")
			for _, p := range pages {
				assert.Equal(t, int32(2), a.ref[p])
			}
			// After the first request leaves, its full pages stay cached
			// and a third request still finds them.
			require.NoError(t, a.Leave(first))
			require.NoError(t, a.Leave(id))
			assert.Equal(t, 3, a.CachedPages())
			_, again, err := a.Join(tc.prompt)
			require.NoError(t, err)
			assert.Equal(t, tc.cached, again)
			require.NoError(t, a.check2())
		})
	}
}

// check2 runs the invariant check without a token model (only the
// structural part is meaningful for tests that do not keep one).
func (a *Allocator) check2() error {
	model := map[ReqID][]int32{}
	for s := range a.reqs {
		r := &a.reqs[s]
		if r.live {
			tok := make([]int32, r.tokens)
			for i := range tok {
				tok[i] = a.toks[int(r.pages[i/a.ps])*a.ps+i%a.ps]
			}
			model[makeID(s, r.gen)] = tok
		}
	}
	return a.check(model)
}

func TestCopyOnWrite(t *testing.T) {
	const ps = 4
	a := newAlloc(t, 8, ps, 4)
	parent, _ := joinAll(t, a, seq(0, 6)) // one full page, one with 2 tokens
	child, err := a.Fork(parent)
	require.NoError(t, err)
	pp, _, _ := a.Pages(parent)
	cp0, _, _ := a.Pages(child)
	require.Equal(t, pp, cp0)
	shared := pp[1]
	assert.Equal(t, int32(2), a.ref[shared])

	need, err := a.Need(child, 1)
	require.NoError(t, err)
	assert.Equal(t, 1, need, "the copy of the shared last page")
	c, ok, err := a.Append(child, []int32{77})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, shared, c.Src)
	assert.Equal(t, 2, c.Tokens)
	assert.NotEqual(t, shared, c.Dst)
	cp, _, _ := a.Pages(child)
	assert.Equal(t, []int32{pp[0], c.Dst}, cp, "the full page stays shared, the last one is private")
	assert.Equal(t, int32(1), a.ref[shared])
	assert.Equal(t, int32(2), a.ref[pp[0]])

	// The parent now owns its last page alone: no copy.
	_, ok, err = a.Append(parent, []int32{88})
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Equal(t, int32(88), a.toks[int(shared)*ps+2])
	assert.Equal(t, int32(77), a.toks[int(c.Dst)*ps+2])
	assert.Equal(t, []int32{4, 5}, a.toks[int(c.Dst)*ps:int(c.Dst)*ps+2], "the copy carries the shared tokens")

	// A fork at a page boundary shares only full pages: no copy.
	b, _ := joinAll(t, a, seq(50, 4))
	fb, err := a.Fork(b)
	require.NoError(t, err)
	_, ok, err = a.Append(fb, []int32{1})
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Equal(t, int64(1), a.Stats().Copies)
	require.NoError(t, a.check2())
}

func TestLRUOrder(t *testing.T) {
	const ps = 2
	a := newAlloc(t, 6, ps, 4)
	// Three requests of two full pages (+1 token so both are cached),
	// leaving in the order x, y: x's pages are evicted first, each
	// request's last page before its first.
	x, _ := joinAll(t, a, seq(0, 5))
	y, _ := joinAll(t, a, seq(10, 5))
	xp := append([]int32(nil), mustPages(t, a, x)...)
	yp := append([]int32(nil), mustPages(t, a, y)...)
	require.NoError(t, a.Leave(x))
	require.NoError(t, a.Leave(y))
	assert.Equal(t, 4, a.CachedPages())
	assert.Equal(t, 6, a.FreePages())
	// A hit refreshes x's first page: it moves to the back.
	h, cached, err := a.Join(cat(seq(0, 2), seq(90, 3)))
	require.NoError(t, err)
	require.Equal(t, 2, cached)
	require.NoError(t, a.Leave(h))

	want := []int32{xp[1], yp[1], yp[0], xp[0]}
	var got []int32
	for p := a.lruHead; p != none; p = a.next[p] {
		got = append(got, p)
	}
	assert.Equal(t, want, got, "least recently used first")

	// Allocation takes the free pages first, then evicts in that order.
	z, _, err := a.Join(nil)
	require.NoError(t, err)
	for i := 0; i < 4; i++ {
		_, _, err := a.Append(z, seq(1000+ps*i, ps))
		require.NoError(t, err)
	}
	assert.Equal(t, int64(2), a.Stats().Evictions)
	zp := mustPages(t, a, z)
	assert.Equal(t, want[:2], zp[2:])
	// The evicted pages are no longer found; the others are.
	y2, cached, err := a.Join(seq(10, 5))
	require.NoError(t, err)
	assert.Equal(t, 2, cached, "y's first page survived, its second did not")
	x2, cached, err := a.Join(seq(0, 5))
	require.NoError(t, err)
	assert.Equal(t, 2, cached, "x's first page survived, its second did not")
	require.NoError(t, a.Leave(y2))
	require.NoError(t, a.Leave(x2))
	assert.Equal(t, 2, a.Evict(10))
	assert.Zero(t, a.CachedPages())
	require.NoError(t, a.check2())
}

func mustPages(t *testing.T, a *Allocator, id ReqID) []int32 {
	t.Helper()
	p, _, err := a.Pages(id)
	require.NoError(t, err)
	return p
}

func TestErrors(t *testing.T) {
	a := newAlloc(t, 6, 4, 2)
	id, _ := joinAll(t, a, seq(0, 9))     // 3 pages
	other, _ := joinAll(t, a, seq(50, 8)) // 2 pages
	tests := []struct {
		name string
		fn   func() error
		want error
		msg  string
	}{
		{"out of pages", func() error { _, _, err := a.Append(id, seq(0, 8)); return err }, ErrOutOfPages,
			"kvpage: request 0/1: out of KV pages: 8 tokens need 2 pages, 1 free (0 of them cached)"},
		{"beyond the whole cache", func() error { _, _, err := a.Append(other, seq(0, 17)); return err }, ErrOutOfPages,
			"8 + 17 tokens exceed the cache's 6 pages of 4"},
		{"too many requests", func() error { _, _, err := a.Join(nil); return err }, ErrTooManyRequests, "all 2 request slots are live"},
		{"fork with no slot", func() error { _, err := a.Fork(id); return err }, ErrTooManyRequests, "request slots"},
		{"zero id", func() error { return a.Leave(0) }, ErrNoRequest, "never joined"},
		{"unknown slot", func() error { _, err := a.Tokens(makeID(7, 1)); return err }, ErrNoRequest, "request 7/1"},
		{"leave", func() error { return a.Leave(other) }, nil, ""},
		{"double leave", func() error { return a.Leave(other) }, ErrNoRequest, "request 1/1: no such request"},
		{"append after leave", func() error { _, _, err := a.Append(other, seq(0, 1)); return err }, ErrNoRequest, ""},
		{"fork after leave", func() error { _, err := a.Fork(other); return err }, ErrNoRequest, ""},
		{"need after leave", func() error { _, err := a.Need(other, 1); return err }, ErrNoRequest, ""},
		{"pages after leave", func() error { _, _, err := a.Pages(other); return err }, ErrNoRequest, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			free := a.FreePages()
			err := tc.fn()
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.msg)
			assert.Equal(t, free, a.FreePages(), "a failed call frees or takes nothing")
			require.NoError(t, a.check2())
		})
	}
	// The slot is reused with a new generation: the stale id still
	// names nothing.
	fresh, _, err := a.Join(nil)
	require.NoError(t, err)
	assert.Equal(t, other.slot(), fresh.slot())
	require.ErrorIs(t, a.Leave(other), ErrNoRequest)
	require.NoError(t, a.Leave(fresh))
}

// Join, Append, Fork, Leave, Pages and Evict allocate nothing once warm.
func TestAllocatorZeroAllocs(t *testing.T) {
	const ps = 16
	a := newAlloc(t, 1024, ps, 64)
	sys := seq(0, 100)
	prompt := cat(sys, seq(1000, 37))
	tok := []int32{5}
	round := func() {
		id, cached, err := a.Join(prompt)
		if err != nil {
			panic(err)
		}
		if _, _, err := a.Append(id, prompt[cached:]); err != nil {
			panic(err)
		}
		f, err := a.Fork(id)
		if err != nil {
			panic(err)
		}
		for i := 0; i < 40; i++ {
			if _, _, err := a.Append(id, tok); err != nil {
				panic(err)
			}
			if _, _, err := a.Append(f, tok); err != nil {
				panic(err)
			}
			if _, _, err := a.Pages(id); err != nil {
				panic(err)
			}
		}
		if err := a.Leave(f); err != nil {
			panic(err)
		}
		if err := a.Leave(id); err != nil {
			panic(err)
		}
		a.Evict(3)
	}
	round()
	round()
	assert.Zero(t, testing.AllocsPerRun(100, round))
	assert.Positive(t, a.Stats().HitTokens)
	require.NoError(t, a.check2())
}
