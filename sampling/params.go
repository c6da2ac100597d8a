// SPDX-License-Identifier: Apache-2.0

// Package sampling draws one token per request from a batch of logits, each
// request with its own parameters: temperature, top-k, top-p, min-p, a
// repetition and a presence penalty over the request's earlier tokens, and
// a Philox seed and offset, so that a request's draw is reproducible and
// does not depend on its row in the batch. It also returns the chosen
// token's log-probability.
//
// The work is the built-in kernel sample_rows_T (gpurt.h; ABI 1.8), a
// launch like any other, so a decoder step that samples can be recorded
// into a graph. Its parameters are per-row arrays in one device buffer,
// whose bytes a Batch lays out on the host (copy them to the device once
// per step, with the other step inputs). Reference computes the same
// result in float64 for tests and conformance.
//
// Rules (gpurt.h, sample_rows_T): the penalties are applied in place to the
// logits; the row is ordered by value (descending), then index; greedy
// rows (temperature 0) and top_k 1 take the argmax; the kept set is the
// top_k first tokens, then the shortest prefix of them holding top_p of
// their mass, then those whose weight is at least min_p times the
// maximum's; the draw is u = (Philox4x32-10(seed, offset) >> 8) / 2^24.
// Non-finite logits follow sample_T's rule: a row whose maximum is not
// finite gives argmax_T's choice and a NaN logprob; NaN logits are never
// drawn.
package sampling

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Params are one request's sampling parameters. The zero value is not
// valid (TopP 0 is outside (0, 1]); Greedy and Default give valid ones.
type Params struct {
	// Temperature divides the logits: 0 is greedy (the argmax), else > 0
	// and finite.
	Temperature float32
	// TopK keeps the TopK most likely tokens; 0 keeps all.
	TopK int
	// TopP keeps the shortest prefix (most likely first) holding TopP of
	// the mass, in (0, 1]; 1 keeps all.
	TopP float32
	// MinP keeps the tokens whose probability is at least MinP times the
	// most likely one's, in [0, 1]; 0 keeps all.
	MinP float32
	// RepetitionPenalty divides a positive logit and multiplies a negative
	// one of every token in History (each once); 0 or 1: none, else > 0
	// and finite.
	RepetitionPenalty float32
	// PresencePenalty is subtracted from the logit of every token in
	// History (each once); 0: none; finite.
	PresencePenalty float32
	// Seed and Offset select the draw (Philox4x32-10's key and counter):
	// the same logits, parameters, seed and offset give the same token on
	// a backend, in any row. Advance Offset by one per step.
	Seed, Offset uint64
	// History are the request's earlier token ids, for the penalties
	// (each in [0, vocab)); at most the Batch's history capacity.
	History []int32
}

// Greedy is the argmax, with its logprob at temperature 1.
func Greedy() Params { return Params{TopP: 1} }

// Default samples the full distribution at temperature 1 with seed.
func Default(seed uint64) Params { return Params{Temperature: 1, TopP: 1, Seed: seed} }

func finite(f float32) bool { return !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) }

// Validate says what is wrong with p, naming the field and the value.
func (p *Params) Validate() error {
	switch {
	case !finite(p.Temperature) || p.Temperature < 0:
		return fmt.Errorf("sampling: temperature %g must be finite and >= 0 (0 is greedy)", p.Temperature)
	case p.TopK < 0 || p.TopK > math.MaxInt32:
		return fmt.Errorf("sampling: top_k %d must be in 0 .. 2^31-1 (0 keeps all)", p.TopK)
	case !(p.TopP > 0 && p.TopP <= 1):
		return fmt.Errorf("sampling: top_p %g is outside (0, 1] (1 keeps all)", p.TopP)
	case !(p.MinP >= 0 && p.MinP <= 1):
		return fmt.Errorf("sampling: min_p %g is outside [0, 1] (0 keeps all)", p.MinP)
	case !finite(p.RepetitionPenalty) || p.RepetitionPenalty < 0:
		return fmt.Errorf("sampling: repetition_penalty %g must be finite and > 0 (0 or 1: none)", p.RepetitionPenalty)
	case !finite(p.PresencePenalty):
		return fmt.Errorf("sampling: presence_penalty %g must be finite", p.PresencePenalty)
	}
	return nil
}

// The per-row arrays of sample_rows_T's params buffer, as byte offsets
// for R rows (gpurt.h).
const (
	offSeed   = 0
	offOffset = 8
	offTemp   = 16
	offTopK   = 20
	offTopP   = 24
	offMinP   = 28
	offRep    = 32
	offPres   = 36
	offHist   = 40
	// MaxHistory is the most history slots per row sample_rows_T takes.
	MaxHistory = 65536
)

// ParamsBytes is the size of the params buffer of rows rows with hist
// history slots each.
func ParamsBytes(rows, hist int) int { return rows * (offHist + 4*hist) }

// OutBytes is the size of the out buffer of rows rows: int32 tokens, then
// float32 logprobs.
func OutBytes(rows int) int { return 8 * rows }

// Batch is the host image of a step's params buffer: rows requests over a
// vocabulary of vocab tokens, with room for hist history ids per request.
// Set fills a row; Bytes is what to copy to the device. Not safe for
// concurrent use.
type Batch struct {
	rows, vocab, hist int
	buf               []byte
}

// NewBatch makes a Batch of rows rows (>= 1), vocab tokens (>= 1) and hist
// history slots per row (0 .. MaxHistory; 0: no penalty lists). Every row
// starts greedy.
func NewBatch(rows, vocab, hist int) (*Batch, error) {
	switch {
	case rows < 1 || rows > math.MaxInt32:
		return nil, fmt.Errorf("sampling: rows %d must be in 1 .. 2^31-1", rows)
	case vocab < 1 || vocab > math.MaxInt32:
		return nil, fmt.Errorf("sampling: vocab %d must be in 1 .. 2^31-1", vocab)
	case hist < 0 || hist > MaxHistory:
		return nil, fmt.Errorf("sampling: hist %d must be in 0 .. %d", hist, MaxHistory)
	}
	b := &Batch{rows: rows, vocab: vocab, hist: hist, buf: make([]byte, ParamsBytes(rows, hist))}
	g := Greedy()
	for r := range rows {
		_ = b.Set(r, &g)
	}
	return b, nil
}

// Rows, Vocab and Hist are the batch's shape.
func (b *Batch) Rows() int  { return b.rows }
func (b *Batch) Vocab() int { return b.vocab }
func (b *Batch) Hist() int  { return b.hist }

// Bytes is the params buffer's content (ParamsBytes(rows, hist) bytes);
// it aliases the batch.
func (b *Batch) Bytes() []byte { return b.buf }

// Set writes request p into row r. It validates p and its history (at
// most Hist ids, each in [0, vocab)) and allocates nothing.
func (b *Batch) Set(r int, p *Params) error {
	if r < 0 || r >= b.rows {
		return fmt.Errorf("sampling: row %d outside the batch's %d rows", r, b.rows)
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%w (row %d)", err, r)
	}
	if len(p.History) > b.hist {
		return fmt.Errorf("sampling: row %d: history of %d ids exceeds the batch's %d slots", r, len(p.History), b.hist)
	}
	for i, id := range p.History {
		if id < 0 || int(id) >= b.vocab {
			return fmt.Errorf("sampling: row %d: history[%d] = %d is outside the vocabulary [0, %d)", r, i, id, b.vocab)
		}
	}
	R, le := b.rows, binary.LittleEndian
	le.PutUint64(b.buf[offSeed*R+8*r:], p.Seed)
	le.PutUint64(b.buf[offOffset*R+8*r:], p.Offset)
	le.PutUint32(b.buf[offTemp*R+4*r:], math.Float32bits(p.Temperature))
	le.PutUint32(b.buf[offTopK*R+4*r:], uint32(int32(p.TopK)))
	le.PutUint32(b.buf[offTopP*R+4*r:], math.Float32bits(p.TopP))
	le.PutUint32(b.buf[offMinP*R+4*r:], math.Float32bits(p.MinP))
	le.PutUint32(b.buf[offRep*R+4*r:], math.Float32bits(p.RepetitionPenalty))
	le.PutUint32(b.buf[offPres*R+4*r:], math.Float32bits(p.PresencePenalty))
	h := b.buf[offHist*R+4*r*b.hist : offHist*R+4*(r+1)*b.hist]
	for i := range b.hist {
		id := int32(-1)
		if i < len(p.History) {
			id = p.History[i]
		}
		le.PutUint32(h[4*i:], uint32(id))
	}
	return nil
}

// SetOffset sets row r's Philox offset (a step counter).
func (b *Batch) SetOffset(r int, offset uint64) error {
	if r < 0 || r >= b.rows {
		return fmt.Errorf("sampling: row %d outside the batch's %d rows", r, b.rows)
	}
	binary.LittleEndian.PutUint64(b.buf[offOffset*b.rows+8*r:], offset)
	return nil
}

// Advance adds one to every row's offset (one step).
func (b *Batch) Advance() {
	o := b.buf[offOffset*b.rows : offOffset*b.rows+8*b.rows]
	for r := range b.rows {
		binary.LittleEndian.PutUint64(o[8*r:], binary.LittleEndian.Uint64(o[8*r:])+1)
	}
}

// Decode reads an out buffer's bytes (OutBytes(rows)) into tokens and
// logprobs (each at least rows long; either may be nil).
func Decode(raw []byte, rows int, tokens []int32, logprobs []float32) error {
	if rows < 0 || len(raw) < OutBytes(rows) {
		return fmt.Errorf("sampling: %d bytes hold no %d rows (%d bytes)", len(raw), rows, OutBytes(rows))
	}
	if (tokens != nil && len(tokens) < rows) || (logprobs != nil && len(logprobs) < rows) {
		return fmt.Errorf("sampling: tokens (%d) and logprobs (%d) must hold %d rows", len(tokens), len(logprobs), rows)
	}
	for r := range rows {
		if tokens != nil {
			tokens[r] = int32(binary.LittleEndian.Uint32(raw[4*r:]))
		}
		if logprobs != nil {
			logprobs[r] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*rows+4*r:]))
		}
	}
	return nil
}
