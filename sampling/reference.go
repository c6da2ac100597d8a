// SPDX-License-Identifier: Apache-2.0

package sampling

import (
	"math"
	"sort"

	"github.com/metrale/gpurt/internal/rank"
)

// Result is what Reference computes for one row.
type Result struct {
	// Token is the chosen token; LogProb its log-probability after the
	// penalties and the temperature (NaN for a row without a finite
	// maximum).
	Token   int
	LogProb float64
	// Probs is the distribution the token is drawn from: the kept tokens
	// and their probabilities (a greedy or non-finite row: the argmax,
	// probability 1).
	Probs map[int]float64
	// Near is set when the draw u lies so close to a boundary of the
	// kept tokens' running sum (relative 1e-4 of the kept mass), or a
	// top-p or min-p cut so close to a weight, that a backend summing in
	// another order or precision may pick the neighbour or cut elsewhere.
	Near bool
	// Logits are the row after the penalties (as written back).
	Logits []float64
}

// Reference is sample_rows_T for one row of logits x (the values the
// device holds, in float64) with parameters p, in float64. round rounds a
// penalised logit to the logits' element type (nil: float32). It does not
// validate p: it follows the kernel's rule for every value.
func Reference(x []float64, p *Params, round func(float64) float64) Result {
	if round == nil {
		round = func(v float64) float64 { return float64(float32(v)) }
	}
	cols := len(x)
	row := append([]float64(nil), x...)
	rep, pres := float64(p.RepetitionPenalty), float64(p.PresencePenalty)
	useRep := finite(p.RepetitionPenalty) && rep > 0 && rep != 1
	usePres := finite(p.PresencePenalty) && pres != 0
	if useRep || usePres {
		seen := map[int32]bool{}
		for _, id := range p.History {
			if id < 0 || int(id) >= cols || seen[id] {
				continue
			}
			seen[id] = true
			v := float64(float32(row[id]))
			if useRep {
				if v > 0 {
					v = float64(float32(v) / float32(rep))
				} else {
					v = float64(float32(v) * float32(rep))
				}
			}
			if usePres {
				v = float64(float32(v) - float32(pres))
			}
			row[id] = round(v)
		}
	}
	order := make([]int, cols)
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return rank.Key(row[order[a]], order[a]) > rank.Key(row[order[b]], order[b]) })
	top := order[0]
	mx := row[top]
	res := Result{Token: top, LogProb: math.NaN(), Probs: map[int]float64{top: 1}, Logits: row}
	if math.IsNaN(mx) || math.IsInf(mx, 0) {
		return res
	}
	temp := float64(p.Temperature)
	greedy := !(p.Temperature > 0)
	if greedy {
		temp = 1
	}
	w := make([]float64, cols)
	var zall float64
	for c, v := range row {
		w[c] = math.Exp((v - mx) / temp)
		if math.IsNaN(w[c]) {
			w[c] = 0
		}
		zall += w[c]
	}
	logprob := func(c int) float64 { return (row[c]-mx)/temp - math.Log(zall) }
	res.LogProb = logprob(top)
	if greedy || p.TopK == 1 {
		return res
	}
	n := cols
	if p.TopK > 0 && p.TopK < cols {
		n = p.TopK
	}
	const rel = 1e-4
	if p.TopP < 1 {
		if p.TopP > 0 {
			var z float64
			for _, c := range order[:n] {
				z += w[c]
			}
			want, cum := float64(p.TopP)*z, 0.0
			for i, c := range order[:n] {
				cum += w[c]
				if cum >= want {
					if math.Abs(cum-want) <= rel*z || math.Abs(cum-w[c]-want) <= rel*z {
						res.Near = true
					}
					n = i + 1
					break
				}
			}
		} else {
			n = 1
		}
	}
	kept := order[:n]
	if p.MinP > 0 {
		minp := float64(p.MinP)
		m := 1
		for m < n && w[order[m]] >= minp {
			m++
		}
		if m < n && math.Abs(w[order[m]]-minp) <= rel*minp || math.Abs(w[order[m-1]]-minp) <= rel*minp {
			res.Near = true
		}
		kept = order[:m]
	}
	var z float64
	for _, c := range kept {
		z += w[c]
	}
	res.Probs = make(map[int]float64, len(kept))
	for _, c := range kept {
		if w[c] > 0 {
			res.Probs[c] = w[c] / z
		}
	}
	u := Uniform(p.Seed, p.Offset) * z
	cum := 0.0
	res.Token = kept[len(kept)-1]
	for _, c := range kept {
		if w[c] == 0 {
			continue
		}
		prev := cum
		cum += w[c]
		if cum > u {
			res.Token = c
			if math.Abs(cum-u) <= rel*z || math.Abs(prev-u) <= rel*z {
				res.Near = true
			}
			break
		}
	}
	res.LogProb = logprob(res.Token)
	return res
}
