// SPDX-License-Identifier: Apache-2.0

package kvpage

import (
	"errors"
	"fmt"
)

// SchedConfig shapes a Scheduler's steps.
type SchedConfig struct {
	// TokenBudget is the most new tokens (query rows) of a step: one per
	// decoding request plus the prefill chunks.
	TokenBudget int
	// MaxBatch is the most requests of a step.
	MaxBatch int
	// ChunkSize is the most prompt tokens of one request in a step (0:
	// the token budget).
	ChunkSize int
	// EOS ends a request when sampled (with MaxNew the other end); a
	// negative EOS is none.
	EOS int32
}

// Entry is one request's part of a step: Tokens are its new tokens (a
// prefill chunk, or for decode the last sampled token), already appended
// to the allocator; the model writes their K/V and, when Sample is set,
// samples the request's next token from the last row's logits.
type Entry struct {
	Handle int64
	ID     ReqID
	Tokens []int32
	Sample bool
}

// Batch is a step's work: the entries (decodes first, then prefill
// chunks) and the copy-on-write page copies to enqueue before it.
type Batch struct {
	Step    int64
	Entries []Entry
	Copies  []Copy
	Rows    int
}

// Finished is a request that ended in the last Complete.
type Finished struct {
	Handle int64
	// Output is the generated tokens.
	Output []int32
	// ArrivalStep, FirstTokenStep and FinishStep are the step counts at
	// Submit, at the first generated token and at the last.
	ArrivalStep, FirstTokenStep, FinishStep int64
	// CachedTokens is the prompt tokens found in the prefix cache (over
	// all admissions); Preemptions counts the times it lost its pages and
	// was recomputed.
	CachedTokens, Preemptions int
}

// SchedStats are the scheduler's counters.
type SchedStats struct {
	Steps, Submitted, Finished                  int64
	PromptTokens, CachedTokens, PrefillTokens   int64
	DecodeTokens, Preemptions, MaxRows, MaxSeqs int64
}

type seqState struct {
	handle          int64
	prompt          []int32 // to prefill: the prompt (plus the output after a preemption)
	plen            int     // the prompt's own length
	out             []int32
	maxNew          int
	id              ReqID
	done            int   // prompt tokens in the cache
	pending         bool  // out's last token is the next decode input
	sample          bool  // scheduled to sample this step
	stepped         int64 // the last step that scheduled it
	arrival, first  int64
	cached, preempt int
}

// Scheduler is continuous batching on an Allocator: requests arrive
// (Submit), each step (Next) decodes one token for every request past its
// prompt and fills the rest of the token budget with prompt chunks
// (chunked prefill) of running and newly admitted requests (admission
// looks the prompt up in the prefix cache), and Complete takes the
// sampled tokens, ending requests at MaxNew tokens or EOS and freeing
// their pages. Out of pages, a decode preempts the most recently admitted
// request (it leaves and is queued first, to be recomputed from its
// prompt and output). A Scheduler is not safe for concurrent use.
type Scheduler struct {
	a        *Allocator
	cfg      SchedConfig
	waiting  []*seqState
	running  []*seqState
	batch    Batch
	seqs     []*seqState // the batch's entries' requests
	finished []Finished
	step     int64
	handle   int64
	open     bool
	stats    SchedStats
}

// NewScheduler makes a scheduler on a (which it then owns: do not Join
// or Leave a's requests yourself).
func NewScheduler(a *Allocator, cfg SchedConfig) (*Scheduler, error) {
	if a == nil {
		return nil, errors.New("kvpage: scheduler: nil allocator")
	}
	if cfg.TokenBudget <= 0 || cfg.MaxBatch <= 0 || cfg.ChunkSize < 0 {
		return nil, fmt.Errorf("kvpage: scheduler: token budget %d and max batch %d must be positive, chunk size %d not negative",
			cfg.TokenBudget, cfg.MaxBatch, cfg.ChunkSize)
	}
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = cfg.TokenBudget
	}
	return &Scheduler{a: a, cfg: cfg}, nil
}

// Submit queues a request of prompt (at least one token) generating at
// most maxNew tokens, and returns its handle. The prompt is copied.
func (s *Scheduler) Submit(prompt []int32, maxNew int) (int64, error) {
	if len(prompt) == 0 || maxNew <= 0 {
		return 0, fmt.Errorf("kvpage: scheduler: a request needs a prompt (%d tokens) and max new tokens (%d) > 0", len(prompt), maxNew)
	}
	if cap := s.a.NumPages() * s.a.PageSize(); len(prompt)+maxNew > cap {
		return 0, fmt.Errorf("kvpage: scheduler: %d prompt + %d new tokens exceed the cache's %d tokens", len(prompt), maxNew, cap)
	}
	s.handle++
	r := &seqState{handle: s.handle, prompt: append([]int32(nil), prompt...), plen: len(prompt), maxNew: maxNew, arrival: s.step, first: -1,
		out: make([]int32, 0, min(maxNew, 1024))}
	s.waiting = append(s.waiting, r)
	s.stats.Submitted++
	s.stats.PromptTokens += int64(len(prompt))
	return r.handle, nil
}

// Pending is the requests waiting plus running.
func (s *Scheduler) Pending() int { return len(s.waiting) + len(s.running) }

// Stats returns the counters.
func (s *Scheduler) Stats() SchedStats { return s.stats }

// Next plans the next step: it appends the step's tokens to the
// allocator and returns the batch (valid until the next Next), empty when
// nothing is pending. Complete must follow before the next Next.
func (s *Scheduler) Next() (*Batch, error) {
	if s.open {
		return nil, errors.New("kvpage: scheduler: Next before the last step's Complete")
	}
	b := &s.batch
	b.Entries, b.Copies, b.Rows = b.Entries[:0], b.Copies[:0], 0
	s.seqs = s.seqs[:0]
	s.step++
	b.Step = s.step
	budget := s.cfg.TokenBudget
	// Decodes first, oldest first; a victim of preemption is taken from
	// the back (the newest), never one already in the step.
	for i := 0; i < len(s.running) && len(b.Entries) < s.cfg.MaxBatch && budget > 0; i++ {
		r := s.running[i]
		if !r.pending {
			continue
		}
		for {
			cp, ok, err := s.a.Append(r.id, r.out[len(r.out)-1:])
			if err == nil {
				if ok {
					b.Copies = append(b.Copies, cp)
				}
				break
			}
			if !errors.Is(err, ErrOutOfPages) {
				return nil, err
			}
			last := len(s.running) - 1
			if err := s.preempt(last); err != nil {
				return nil, err
			}
			if last == i {
				r = nil
				break
			}
		}
		if r == nil {
			break // r itself was the newest: preempted
		}
		r.pending, r.sample, r.stepped = false, true, s.step
		b.Entries = append(b.Entries, Entry{Handle: r.handle, ID: r.id, Tokens: r.out[len(r.out)-1:], Sample: true})
		s.seqs = append(s.seqs, r)
		budget--
		s.stats.DecodeTokens++
	}
	// Prompt chunks of running requests, then admissions.
	for i := 0; i < len(s.running) && len(b.Entries) < s.cfg.MaxBatch && budget > 0; i++ {
		r := s.running[i]
		if r.done == len(r.prompt) {
			continue
		}
		n, err := s.chunk(r, budget)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			// Out of pages: the newest request not in this step gives its
			// pages up (else requests part-way through their prompts
			// could hold the whole cache and none progress).
			j := len(s.running) - 1
			for j > i && s.running[j].stepped == s.step {
				j--
			}
			if j <= i {
				break
			}
			if err := s.preempt(j); err != nil {
				return nil, err
			}
			i--
			continue
		}
		budget -= n
	}
	for len(s.waiting) > 0 && len(b.Entries) < s.cfg.MaxBatch && budget > 0 {
		r := s.waiting[0]
		id, cached, err := s.a.Join(r.prompt)
		if errors.Is(err, ErrTooManyRequests) {
			break
		}
		if err != nil {
			return nil, err
		}
		r.id, r.done = id, cached
		n, err := s.chunk(r, budget)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			if err := s.a.Leave(id); err != nil {
				return nil, err
			}
			break
		}
		budget -= n
		r.cached += cached
		s.stats.CachedTokens += int64(cached)
		s.waiting = s.waiting[1:]
		s.running = append(s.running, r)
	}
	b.Rows = s.cfg.TokenBudget - budget
	s.stats.MaxRows = max(s.stats.MaxRows, int64(b.Rows))
	s.stats.MaxSeqs = max(s.stats.MaxSeqs, int64(len(b.Entries)))
	if len(b.Entries) > 0 {
		s.open = true
		s.stats.Steps++
	}
	return b, nil
}

// chunk schedules the largest prompt chunk of r that fits the budget,
// the chunk size and the free pages, and returns its length (0: none).
func (s *Scheduler) chunk(r *seqState, budget int) (int, error) {
	n := min(len(r.prompt)-r.done, budget, s.cfg.ChunkSize)
	// Shrink to the pages there are (the request's partial last page is
	// never shared here: the scheduler does not fork).
	ps := s.a.PageSize()
	tok, err := s.a.Tokens(r.id)
	if err != nil {
		return 0, err
	}
	room := s.a.FreePages()*ps + (ps-tok%ps)%ps
	n = min(n, room)
	if n <= 0 {
		return 0, nil
	}
	cp, ok, err := s.a.Append(r.id, r.prompt[r.done:r.done+n])
	if err != nil {
		return 0, err
	}
	if ok {
		s.batch.Copies = append(s.batch.Copies, cp)
	}
	r.done += n
	r.sample, r.stepped = r.done == len(r.prompt), s.step
	s.batch.Entries = append(s.batch.Entries, Entry{Handle: r.handle, ID: r.id, Tokens: r.prompt[r.done-n : r.done], Sample: r.sample})
	s.seqs = append(s.seqs, r)
	s.stats.PrefillTokens += int64(n)
	return n, nil
}

// preempt makes running request i leave and queues it first, to prefill
// its prompt and output again.
func (s *Scheduler) preempt(i int) error {
	r := s.running[i]
	if err := s.a.Leave(r.id); err != nil {
		return err
	}
	s.running = append(s.running[:i], s.running[i+1:]...)
	// Its output, written or not, becomes prompt: the last chunk's
	// sample is its next token.
	r.prompt = append(r.prompt[:r.plen], r.out...)
	r.done, r.pending, r.sample, r.id = 0, false, false, 0
	r.preempt++
	s.stats.Preemptions++
	s.waiting = append([]*seqState{r}, s.waiting...)
	return nil
}

// Complete takes the step's sampled tokens, one for each entry with
// Sample in entry order, and returns the requests that ended (valid
// until the next Complete).
func (s *Scheduler) Complete(sampled []int32) ([]Finished, error) {
	if !s.open {
		return nil, errors.New("kvpage: scheduler: Complete without a step (Next first)")
	}
	want := 0
	for _, e := range s.batch.Entries {
		if e.Sample {
			want++
		}
	}
	if len(sampled) != want {
		return nil, fmt.Errorf("kvpage: scheduler: %d sampled tokens for the step's %d sampling entries", len(sampled), want)
	}
	s.open = false
	s.finished = s.finished[:0]
	k := 0
	for _, r := range s.seqs {
		if !r.sample {
			continue
		}
		tok := sampled[k]
		k++
		r.sample, r.pending = false, true
		r.out = append(r.out, tok)
		if r.first < 0 {
			r.first = s.step
		}
		if len(r.out) < r.maxNew && (s.cfg.EOS < 0 || tok != s.cfg.EOS) {
			continue
		}
		if err := s.a.Leave(r.id); err != nil {
			return nil, err
		}
		for i, q := range s.running {
			if q == r {
				s.running = append(s.running[:i], s.running[i+1:]...)
				break
			}
		}
		s.finished = append(s.finished, Finished{Handle: r.handle, Output: r.out, ArrivalStep: r.arrival,
			FirstTokenStep: r.first, FinishStep: s.step, CachedTokens: r.cached, Preemptions: r.preempt})
		s.stats.Finished++
	}
	return s.finished, nil
}
