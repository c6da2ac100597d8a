// SPDX-License-Identifier: Apache-2.0

package sampling

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Known answers of Philox4x32-10 (Random123's kat_vectors).
func TestPhiloxKnownAnswers(t *testing.T) {
	for _, c := range []struct {
		ctr  [4]uint32
		key  [2]uint32
		want [4]uint32
	}{
		{[4]uint32{0, 0, 0, 0}, [2]uint32{0, 0}, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[4]uint32{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, [2]uint32{0xffffffff, 0xffffffff}, [4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{[4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, [2]uint32{0xa4093822, 0x299f31d0}, [4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	} {
		assert.Equal(t, c.want, philox4x32(c.ctr, c.key), "ctr %x key %x", c.ctr, c.key)
	}
	assert.Equal(t, uint32(0x6627e8d5), Philox(0, 0))
	assert.Equal(t, philox4x32([4]uint32{7, 1, 0, 0}, [2]uint32{5, 3})[0], Philox(3<<32|5, 1<<32|7), "seed and offset map to key and counter low word first")
	u := Uniform(1, 2)
	assert.True(t, u >= 0 && u < 1, "%g", u)
}

func TestValidate(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	ok := []Params{Greedy(), Default(7), {Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05, RepetitionPenalty: 1.1, PresencePenalty: -0.5}}
	for _, p := range ok {
		assert.NoError(t, p.Validate(), "%+v", p)
	}
	for _, c := range []struct {
		mod  func(*Params)
		want string
	}{
		{func(p *Params) { p.Temperature = -0.1 }, "temperature -0.1 must be finite and >= 0"},
		{func(p *Params) { p.Temperature = nan }, "temperature NaN"},
		{func(p *Params) { p.Temperature = inf }, "temperature +Inf"},
		{func(p *Params) { p.TopK = -1 }, "top_k -1"},
		{func(p *Params) { p.TopP = 0 }, "top_p 0 is outside (0, 1]"},
		{func(p *Params) { p.TopP = 1.5 }, "top_p 1.5 is outside (0, 1]"},
		{func(p *Params) { p.TopP = nan }, "top_p NaN"},
		{func(p *Params) { p.MinP = -0.01 }, "min_p -0.01 is outside [0, 1]"},
		{func(p *Params) { p.MinP = 2 }, "min_p 2"},
		{func(p *Params) { p.RepetitionPenalty = -1 }, "repetition_penalty -1"},
		{func(p *Params) { p.RepetitionPenalty = inf }, "repetition_penalty +Inf"},
		{func(p *Params) { p.PresencePenalty = nan }, "presence_penalty NaN"},
	} {
		p := Default(1)
		c.mod(&p)
		err := p.Validate()
		if assert.Error(t, err) {
			assert.Contains(t, err.Error(), c.want)
		}
	}
	assert.Error(t, (&Params{}).Validate(), "the zero value has top_p 0")
}

func TestBatch(t *testing.T) {
	for _, c := range []struct {
		rows, vocab, hist int
		want              string
	}{{0, 10, 0, "rows 0"}, {2, 0, 0, "vocab 0"}, {2, 10, -1, "hist -1"}, {2, 10, MaxHistory + 1, "hist 65537"}} {
		_, err := NewBatch(c.rows, c.vocab, c.hist)
		if assert.Error(t, err) {
			assert.Contains(t, err.Error(), c.want)
		}
	}
	b, err := NewBatch(3, 100, 2)
	require.NoError(t, err)
	require.Len(t, b.Bytes(), ParamsBytes(3, 2))
	p := Params{Temperature: 0.5, TopK: 7, TopP: 0.25, MinP: 0.125, RepetitionPenalty: 1.5, PresencePenalty: -2, Seed: 0x1122334455667788, Offset: 9, History: []int32{42}}
	require.NoError(t, b.Set(1, &p))
	le := binary.LittleEndian
	raw := b.Bytes()
	R := 3
	assert.Equal(t, p.Seed, le.Uint64(raw[8*1:]))
	assert.Equal(t, uint64(9), le.Uint64(raw[8*R+8:]))
	assert.Equal(t, float32(0.5), math.Float32frombits(le.Uint32(raw[16*R+4:])))
	assert.Equal(t, uint32(7), le.Uint32(raw[20*R+4:]))
	assert.Equal(t, float32(0.25), math.Float32frombits(le.Uint32(raw[24*R+4:])))
	assert.Equal(t, float32(0.125), math.Float32frombits(le.Uint32(raw[28*R+4:])))
	assert.Equal(t, float32(1.5), math.Float32frombits(le.Uint32(raw[32*R+4:])))
	assert.Equal(t, float32(-2), math.Float32frombits(le.Uint32(raw[36*R+4:])))
	assert.Equal(t, int32(42), int32(le.Uint32(raw[40*R+8:])), "row 1's first history slot")
	assert.Equal(t, int32(-1), int32(le.Uint32(raw[40*R+12:])), "an unused slot is -1")
	assert.Equal(t, float32(0), math.Float32frombits(le.Uint32(raw[16*R:])), "row 0 stays greedy")
	b.Advance()
	assert.Equal(t, uint64(10), le.Uint64(raw[8*R+8:]))
	require.NoError(t, b.SetOffset(2, 77))
	assert.Equal(t, uint64(77), le.Uint64(raw[8*R+16:]))

	for _, c := range []struct {
		row  int
		p    Params
		want string
	}{
		{3, Default(1), "row 3 outside the batch's 3 rows"},
		{0, Params{TopP: 2}, "top_p 2 is outside (0, 1] (1 keeps all) (row 0)"},
		{0, Params{TopP: 1, History: []int32{1, 2, 3}}, "history of 3 ids exceeds the batch's 2 slots"},
		{0, Params{TopP: 1, History: []int32{100}}, "history[0] = 100 is outside the vocabulary [0, 100)"},
		{2, Params{TopP: 1, History: []int32{-1}}, "history[0] = -1"},
	} {
		err := b.Set(c.row, &c.p)
		if assert.Error(t, err) {
			assert.Contains(t, err.Error(), c.want)
		}
	}
	assert.Error(t, b.SetOffset(-1, 0))
	assert.Equal(t, 0.0, testing.AllocsPerRun(100, func() { _ = b.Set(1, &p) }), "Batch.Set allocates nothing")

	out := make([]byte, OutBytes(2))
	le.PutUint32(out[4:], 5)
	le.PutUint32(out[12:], math.Float32bits(-1.5))
	tok, lp := make([]int32, 2), make([]float32, 2)
	require.NoError(t, Decode(out, 2, tok, lp))
	assert.Equal(t, int32(5), tok[1])
	assert.Equal(t, float32(-1.5), lp[1])
	assert.Error(t, Decode(out[:15], 2, tok, lp))
	assert.Error(t, Decode(out, 2, tok[:1], nil))
}

// The reference itself on rows whose answer is known by hand.
func TestReferenceByHand(t *testing.T) {
	x := []float64{1, 3, 2, 3, 0} // order: 1, 3 (tie: lower index), 2, 0, 4
	g := Reference(x, &Params{TopP: 1}, nil)
	assert.Equal(t, 1, g.Token)
	z := math.Exp(-2) + 1 + math.Exp(-1) + 1 + math.Exp(-3)
	assert.InDelta(t, -math.Log(z), g.LogProb, 1e-12)

	r := Reference(x, &Params{Temperature: 1, TopK: 3, TopP: 1}, nil)
	assert.Len(t, r.Probs, 3)
	for _, c := range []int{1, 3, 2} {
		assert.Contains(t, r.Probs, c)
	}
	// top_p 0.6 of {3, 3, 2}: 1/(2+e^-1) = 0.42 < 0.6, two 3s reach 0.84
	r = Reference(x, &Params{Temperature: 1, TopK: 3, TopP: 0.6}, nil)
	assert.Equal(t, map[int]float64{1: 0.5, 3: 0.5}, r.Probs)
	// min_p 0.5: e^-1 = 0.37 < 0.5 drops index 2
	r = Reference(x, &Params{Temperature: 1, TopP: 1, MinP: 0.5}, nil)
	assert.Equal(t, map[int]float64{1: 0.5, 3: 0.5}, r.Probs)
	// penalties: token 1 (3 -> 3/2 - 1 = 0.5), token 4 (0 * 2 - 1 = -1), once each
	r = Reference(x, &Params{TopP: 1, RepetitionPenalty: 2, PresencePenalty: 1, History: []int32{1, 4, 1, -1, 9}}, nil)
	assert.Equal(t, []float64{1, 0.5, 2, 3, -1}, r.Logits)
	assert.Equal(t, 3, r.Token)
	// +Inf: the argmax and a NaN logprob
	r = Reference([]float64{1, math.Inf(1), 2}, &Params{Temperature: 1, TopP: 1}, nil)
	assert.Equal(t, 1, r.Token)
	assert.True(t, math.IsNaN(r.LogProb))
}
