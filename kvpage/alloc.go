// SPDX-License-Identifier: Apache-2.0

// Package kvpage manages the pages of a paged KV cache (attention.KVCache) for
// a server: an Allocator hands pages to requests, counts their
// references, shares full pages between requests whose token prefixes are
// equal (prefix caching, as vLLM's block manager does: each full page is
// named by a hash chained over its tokens and its parent page's hash),
// copies a shared last page on write, and keeps pages no request holds
// any more cached until it needs them, evicting the least recently used
// first. A Table builds one step's device page table (FlashInfer's
// Indptr/Indices/LastPageLen, plus the query and append indices) in pinned
// host memory and uploads it with one copy. A Scheduler mixes chunked
// prefill with decode under a token budget on top of both.
//
// The Allocator is host bookkeeping only: it never touches the device.
// Join, Append, Fork, Leave and the lookups allocate nothing once the
// allocator is warm (each request slot keeps the capacity of its page
// list). An Allocator is not safe for concurrent use: a server's step loop
// owns it.
package kvpage

import (
	"errors"
	"fmt"
	"math"
)

// Errors the allocator wraps (match them with errors.Is).
var (
	// ErrOutOfPages: a request needs more pages than are free or
	// evictable. The message names the need and the free count.
	ErrOutOfPages = errors.New("out of KV pages")
	// ErrNoRequest: the request does not exist (it left, or its id was
	// never handed out).
	ErrNoRequest = errors.New("no such request")
	// ErrTooManyRequests: every request slot is in use.
	ErrTooManyRequests = errors.New("too many requests")
)

// ReqID names a live request of an Allocator. It carries the request's
// slot and a generation, so the id of a request that left never names a
// later request in the same slot: a second Leave is an error, never a
// second free of the pages. The zero ReqID names no request.
type ReqID uint64

func (id ReqID) slot() int      { return int(uint32(id)) - 1 }
func (id ReqID) gen() uint32    { return uint32(id >> 32) }
func (id ReqID) String() string { return fmt.Sprintf("request %d/%d", id.slot(), id.gen()) }

func makeID(slot int, gen uint32) ReqID { return ReqID(uint64(gen)<<32 | uint64(slot+1)) }

// Config sizes an Allocator.
type Config struct {
	// NumPages is the number of pages of the cache (KVCacheDesc.NumPages).
	NumPages int
	// PageSize is the number of tokens of a page (KVCacheDesc.PageSize).
	PageSize int
	// MaxRequests bounds the requests live at once (request slots).
	MaxRequests int
	// Salt is mixed into every page hash: caches of different models or
	// adapters sharing one allocator use different salts. Zero is a salt.
	Salt uint64
}

// Copy is a page the caller must copy on the device before writing into
// the request's last page: Dst is a fresh page that replaces the shared
// page Src in the request's page list, and its first Tokens token slots
// hold data (CopyPage enqueues the copy of K and V).
type Copy struct {
	Src, Dst int32
	Tokens   int
}

// Stats are the allocator's counters since New.
type Stats struct {
	// LookupTokens is the full-page tokens Join looked up in the prefix
	// cache, HitTokens those it found.
	LookupTokens, HitTokens int64
	// Evictions counts cached pages taken back for reuse or by Evict.
	Evictions int64
	// Copies counts the copy-on-write pages Append handed out.
	Copies int64
}

// HitRate is HitTokens / LookupTokens (0 before any lookup).
func (s Stats) HitRate() float64 {
	if s.LookupTokens == 0 {
		return 0
	}
	return float64(s.HitTokens) / float64(s.LookupTokens)
}

// A page is in exactly one state: held (ref > 0, in the page lists of
// ref requests; it may also be cached), evictable (ref 0 and cached: in
// the LRU list and the hash table) or free (ref 0, uncached: on the free
// stack).
const (
	none             = -1
	flagCached uint8 = 1
)

type request struct {
	gen      uint32
	live     bool
	pages    []int32
	tokens   int    // tokens written (or found in the cache)
	hashed   int    // full pages whose chain hash is known
	lastHash uint64 // chain hash of page hashed-1 (the root hash when 0)
}

// Allocator hands out the pages of one KV cache. See the package comment.
type Allocator struct {
	ps       int
	numPages int
	salt     uint64

	ref        []int32
	flags      []uint8
	hash       []uint64 // chain hash of a cached page
	parentHash []uint64 // its parent's chain hash
	toks       []int32  // the tokens of every page: numPages*ps
	prev, next []int32  // LRU links of evictable pages
	lruHead    int32    // least recently used
	lruTail    int32
	nLRU       int
	free       []int32 // stack of free pages

	tab hashTable

	reqs      []request
	freeSlots []int32
	live      int

	stats Stats
}

// New makes an allocator of cfg's shape with every page free.
func New(cfg Config) (*Allocator, error) {
	if cfg.NumPages <= 0 || cfg.NumPages > math.MaxInt32 || cfg.PageSize <= 0 || cfg.PageSize > math.MaxInt32 ||
		cfg.MaxRequests <= 0 || cfg.MaxRequests > math.MaxInt32-1 {
		return nil, fmt.Errorf("kvpage: pages %d, page size %d and max requests %d must be positive int32s",
			cfg.NumPages, cfg.PageSize, cfg.MaxRequests)
	}
	if uint64(cfg.NumPages)*uint64(cfg.PageSize) > math.MaxInt32 {
		return nil, fmt.Errorf("kvpage: %d pages of %d tokens exceed the int32 token count", cfg.NumPages, cfg.PageSize)
	}
	n := cfg.NumPages
	a := &Allocator{
		ps: cfg.PageSize, numPages: n, salt: cfg.Salt,
		ref: make([]int32, n), flags: make([]uint8, n), hash: make([]uint64, n), parentHash: make([]uint64, n),
		toks: make([]int32, n*cfg.PageSize), prev: make([]int32, n), next: make([]int32, n),
		lruHead: none, lruTail: none, free: make([]int32, n),
		reqs: make([]request, cfg.MaxRequests), freeSlots: make([]int32, cfg.MaxRequests),
	}
	a.tab.init(n)
	// Pop order: page 0 first.
	for i := range a.free {
		a.free[i] = int32(n - 1 - i)
	}
	for i := range a.freeSlots {
		a.freeSlots[i] = int32(cfg.MaxRequests - 1 - i)
	}
	return a, nil
}

// PageSize is the tokens of a page.
func (a *Allocator) PageSize() int { return a.ps }

// NumPages is the pages of the cache.
func (a *Allocator) NumPages() int { return a.numPages }

// FreePages is the pages an allocation can take now: free ones and
// cached ones no request holds (evicted on demand).
func (a *Allocator) FreePages() int { return len(a.free) + a.nLRU }

// CachedPages is the cached pages no request holds (evictable).
func (a *Allocator) CachedPages() int { return a.nLRU }

// Live is the number of live requests.
func (a *Allocator) Live() int { return a.live }

// Stats returns the counters.
func (a *Allocator) Stats() Stats { return a.stats }

func (a *Allocator) get(id ReqID) (*request, error) {
	s := id.slot()
	if s < 0 || s >= len(a.reqs) || !a.reqs[s].live || a.reqs[s].gen != id.gen() {
		return nil, fmt.Errorf("kvpage: %v: %w (it left, or was never joined)", id, ErrNoRequest)
	}
	return &a.reqs[s], nil
}

func (a *Allocator) newRequest() (ReqID, *request, error) {
	if len(a.freeSlots) == 0 {
		return 0, nil, fmt.Errorf("kvpage: %w: all %d request slots are live", ErrTooManyRequests, len(a.reqs))
	}
	s := a.freeSlots[len(a.freeSlots)-1]
	a.freeSlots = a.freeSlots[:len(a.freeSlots)-1]
	r := &a.reqs[s]
	r.gen++
	if r.gen == 0 {
		r.gen = 1
	}
	r.live = true
	r.pages = r.pages[:0]
	r.tokens, r.hashed, r.lastHash = 0, 0, a.rootHash()
	a.live++
	return makeID(int(s), r.gen), r, nil
}

// Join starts a request whose tokens begin with prompt and looks the
// prompt's full pages up in the prefix cache: the request starts holding
// the longest run of cached pages that match the prompt's first pages,
// and cached is their token count. The prompt's last token is never
// served from the cache (its logits are needed), so cached < len(prompt)
// for a non-empty prompt. Join writes nothing: Append the prompt's tokens
// from cached on (in chunks, for chunked prefill), then the generated
// ones. Join takes no free page.
func (a *Allocator) Join(prompt []int32) (id ReqID, cached int, err error) {
	id, r, err := a.newRequest()
	if err != nil {
		return 0, 0, err
	}
	if len(prompt) == 0 {
		return id, 0, nil
	}
	full := (len(prompt) - 1) / a.ps
	a.stats.LookupTokens += int64(full * a.ps)
	for i := 0; i < full; i++ {
		t := prompt[i*a.ps : (i+1)*a.ps]
		h := a.pageHash(r.lastHash, t)
		p := a.lookup(h, r.lastHash, t)
		if p == none {
			break
		}
		a.hold(p)
		r.pages = append(r.pages, p)
		r.lastHash = h
		r.hashed++
	}
	r.tokens = r.hashed * a.ps
	a.stats.HitTokens += int64(r.tokens)
	return id, r.tokens, nil
}

// Fork starts a request sharing all of id's pages and tokens (parallel
// sampling, beam search): the pages' references go up, and the first
// Append of either request into a shared partial last page copies it.
// Fork takes no free page.
func (a *Allocator) Fork(id ReqID) (ReqID, error) {
	src, err := a.get(id)
	if err != nil {
		return 0, err
	}
	cid, r, err := a.newRequest()
	if err != nil {
		return 0, err
	}
	src = &a.reqs[id.slot()]
	for _, p := range src.pages {
		a.hold(p)
	}
	r.pages = append(r.pages, src.pages...)
	r.tokens, r.hashed, r.lastHash = src.tokens, src.hashed, src.lastHash
	return cid, nil
}

// Need is the pages an Append of n tokens to id would take now (new pages
// plus a copy-on-write page).
func (a *Allocator) Need(id ReqID, n int) (int, error) {
	r, err := a.get(id)
	if err != nil {
		return 0, err
	}
	return a.need(r, n), nil
}

func (a *Allocator) need(r *request, n int) int {
	if n <= 0 {
		return 0
	}
	k := (r.tokens+n+a.ps-1)/a.ps - len(r.pages)
	if r.tokens%a.ps != 0 && a.ref[r.pages[len(r.pages)-1]] > 1 {
		k++
	}
	return k
}

// Append adds tokens to request id: it takes the pages they need (free
// ones first, then the least recently used cached ones), records the
// tokens, and caches each page that becomes full under its chain hash.
// When the request's partial last page is shared (after Fork), Append
// gives it a private copy and returns the copy to enqueue (CopyPage)
// before the step writes K/V; ok says whether there is one. Out of pages,
// Append changes nothing and returns an error wrapping ErrOutOfPages.
func (a *Allocator) Append(id ReqID, tokens []int32) (cp Copy, ok bool, err error) {
	r, err := a.get(id)
	if err != nil {
		return Copy{}, false, err
	}
	n := len(tokens)
	if n == 0 {
		return Copy{}, false, nil
	}
	if uint64(r.tokens)+uint64(n) > uint64(a.numPages)*uint64(a.ps) {
		return Copy{}, false, fmt.Errorf("kvpage: %v: %w: %d + %d tokens exceed the cache's %d pages of %d",
			id, ErrOutOfPages, r.tokens, n, a.numPages, a.ps)
	}
	if need, have := a.need(r, n), a.FreePages(); need > have {
		return Copy{}, false, fmt.Errorf("kvpage: %v: %w: %d tokens need %d pages, %d free (%d of them cached)",
			id, ErrOutOfPages, n, need, have, a.nLRU)
	}
	if off := r.tokens % a.ps; off != 0 {
		last := len(r.pages) - 1
		if src := r.pages[last]; a.ref[src] > 1 {
			dst := a.take()
			copy(a.toks[int(dst)*a.ps:int(dst)*a.ps+off], a.toks[int(src)*a.ps:])
			a.ref[src]--
			a.ref[dst] = 1
			r.pages[last] = dst
			cp, ok = Copy{Src: src, Dst: dst, Tokens: off}, true
			a.stats.Copies++
		}
	}
	for k := (r.tokens+n+a.ps-1)/a.ps - len(r.pages); k > 0; k-- {
		p := a.take()
		a.ref[p] = 1
		r.pages = append(r.pages, p)
	}
	for pos := r.tokens; len(tokens) > 0; {
		p, off := int(r.pages[pos/a.ps]), pos%a.ps
		m := copy(a.toks[p*a.ps+off:(p+1)*a.ps], tokens)
		tokens = tokens[m:]
		pos += m
	}
	r.tokens += n
	for r.hashed < r.tokens/a.ps {
		p := r.pages[r.hashed]
		t := a.toks[int(p)*a.ps : int(p+1)*a.ps]
		h := a.pageHash(r.lastHash, t)
		if a.flags[p]&flagCached == 0 && a.tab.find(h) == none {
			a.flags[p] |= flagCached
			a.hash[p], a.parentHash[p] = h, r.lastHash
			a.tab.insert(h, p)
		}
		r.lastHash = h
		r.hashed++
	}
	return cp, ok, nil
}

// Leave ends request id and drops its references: a page no request
// holds any more stays cached (evictable, the request's first pages the
// most recently used) if it is full and cached, else it is free. A second
// Leave of the same id is an error wrapping ErrNoRequest and frees
// nothing.
func (a *Allocator) Leave(id ReqID) error {
	r, err := a.get(id)
	if err != nil {
		return err
	}
	for i := len(r.pages) - 1; i >= 0; i-- {
		a.release(r.pages[i])
	}
	r.pages = r.pages[:0]
	r.live = false
	r.tokens, r.hashed = 0, 0
	a.freeSlots = append(a.freeSlots, int32(id.slot()))
	a.live--
	return nil
}

// Evict drops up to n cached pages no request holds, least recently used
// first, and returns how many it dropped.
func (a *Allocator) Evict(n int) int {
	k := 0
	for ; k < n && a.lruHead != none; k++ {
		p := a.lruHead
		a.lruRemove(p)
		a.uncache(p)
		a.free = append(a.free, p)
		a.stats.Evictions++
	}
	return k
}

// Pages is id's page list (first page first; read only, valid until the
// next call that changes the allocator) and its token count.
func (a *Allocator) Pages(id ReqID) (pages []int32, tokens int, err error) {
	r, err := a.get(id)
	if err != nil {
		return nil, 0, err
	}
	return r.pages, r.tokens, nil
}

// Tokens is the token count of id.
func (a *Allocator) Tokens(id ReqID) (int, error) {
	r, err := a.get(id)
	if err != nil {
		return 0, err
	}
	return r.tokens, nil
}

// take returns a page with ref 0 that no list holds: a free one, else
// the least recently used cached one. The caller checked FreePages.
func (a *Allocator) take() int32 {
	if n := len(a.free); n > 0 {
		p := a.free[n-1]
		a.free = a.free[:n-1]
		return p
	}
	p := a.lruHead
	a.lruRemove(p)
	a.uncache(p)
	a.stats.Evictions++
	return p
}

func (a *Allocator) hold(p int32) {
	if a.ref[p] == 0 {
		a.lruRemove(p)
	}
	a.ref[p]++
}

func (a *Allocator) release(p int32) {
	a.ref[p]--
	if a.ref[p] > 0 {
		return
	}
	if a.flags[p]&flagCached != 0 {
		a.lruPush(p)
	} else {
		a.free = append(a.free, p)
	}
}

func (a *Allocator) uncache(p int32) {
	a.tab.remove(a.hash[p], p)
	a.flags[p] &^= flagCached
}

func (a *Allocator) lruPush(p int32) {
	a.prev[p], a.next[p] = a.lruTail, none
	if a.lruTail != none {
		a.next[a.lruTail] = p
	} else {
		a.lruHead = p
	}
	a.lruTail = p
	a.nLRU++
}

func (a *Allocator) lruRemove(p int32) {
	pv, nx := a.prev[p], a.next[p]
	if pv != none {
		a.next[pv] = nx
	} else {
		a.lruHead = nx
	}
	if nx != none {
		a.prev[nx] = pv
	} else {
		a.lruTail = pv
	}
	a.prev[p], a.next[p] = none, none
	a.nLRU--
}

// lookup finds the cached page of chain hash h whose parent hash and
// tokens are parent and t (a hash collision is a miss, never a wrong
// page).
func (a *Allocator) lookup(h, parent uint64, t []int32) int32 {
	p := a.tab.find(h)
	if p == none || a.parentHash[p] != parent {
		return none
	}
	pt := a.toks[int(p)*a.ps : int(p+1)*a.ps]
	for i := range t {
		if pt[i] != t[i] {
			return none
		}
	}
	return p
}

func (a *Allocator) rootHash() uint64 { return mix(a.salt ^ 0x6b76706167652d30) }

// pageHash is the chain hash of a full page of tokens t under parent.
func (a *Allocator) pageHash(parent uint64, t []int32) uint64 {
	h := mix(parent + 0x9e3779b97f4a7c15)
	for _, x := range t {
		h = mix(h ^ uint64(uint32(x)))
	}
	return h
}

// mix is a 64-bit finaliser (splitmix64's).
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// hashTable maps chain hashes to pages: open addressing with linear
// probing and backward-shift deletion (no tombstones), sized at New for
// every page, so it never grows and never allocates.
type hashTable struct {
	keys []uint64
	vals []int32
	mask uint64
}

func (t *hashTable) init(n int) {
	c := 16
	for c < 2*n {
		c <<= 1
	}
	t.keys, t.vals, t.mask = make([]uint64, c), make([]int32, c), uint64(c-1)
	for i := range t.vals {
		t.vals[i] = none
	}
}

func (t *hashTable) find(h uint64) int32 {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		if t.vals[i] == none {
			return none
		}
		if t.keys[i] == h {
			return t.vals[i]
		}
	}
}

func (t *hashTable) insert(h uint64, p int32) {
	i := h & t.mask
	for t.vals[i] != none {
		i = (i + 1) & t.mask
	}
	t.keys[i], t.vals[i] = h, p
}

func (t *hashTable) remove(h uint64, p int32) {
	i := h & t.mask
	for t.vals[i] != p || t.keys[i] != h {
		if t.vals[i] == none {
			return
		}
		i = (i + 1) & t.mask
	}
	// Shift later entries of the probe run back over the hole.
	for j := i; ; {
		j = (j + 1) & t.mask
		if t.vals[j] == none {
			t.vals[i] = none
			return
		}
		k := t.keys[j] & t.mask
		// Entry j may move to i unless its home k lies cyclically in (i, j].
		if (i <= j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		t.keys[i], t.vals[i] = t.keys[j], t.vals[j]
		i = j
	}
}
