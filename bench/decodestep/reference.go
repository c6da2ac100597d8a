// SPDX-License-Identifier: Apache-2.0

package decodestep

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/floatbits"
)

// check is Check on the kit's device.
func (k *kit) check(c Config, b int, fuse bool, tol float64) (Result, error) {
	if tol <= 0 {
		tol = 0.03
		if k.normName == "composed" {
			tol = 0.08
		}
	}
	r := Result{Config: c.String(), Hidden: c.Hidden, Inter: c.Inter, Layers: c.Layers, Batch: b,
		Variant: variantName(fuse), Impl: "gpurt check", Norm: k.normName, Backend: k.backend, Tol: tol, Steps: 1}
	ok := false
	r.OK = &ok
	fail := func(err error) (Result, error) {
		r.Note = err.Error()
		return r, err
	}
	m, err := k.newModel(c, b, fuse)
	if err != nil {
		return fail(err)
	}
	defer m.close()
	if k.tweak != nil {
		k.tweak(m)
	}
	r.Ops = m.ops()
	got, err := m.output(func() error { return m.step(k.s) })
	if err != nil {
		return fail(fmt.Errorf("eager step: %w", err))
	}
	ref, err := m.reference()
	if err != nil {
		return fail(err)
	}
	var ss float64
	for _, v := range ref {
		ss += v * v
	}
	rms := math.Sqrt(ss / float64(len(ref)))
	worst, worstAt := 0.0, 0
	for i, v := range ref {
		d := math.Abs(float64(floatbits.BF16ToFloat32(binary.LittleEndian.Uint16(got[2*i:]))) - v)
		if e := d / max(math.Abs(v), rms); !(e <= worst) { // NaN counts as worst
			worst, worstAt = e, i
		}
	}
	r.MaxErr = worst
	g, err := k.s.Capture(m.step)
	if err != nil {
		return fail(fmt.Errorf("capture: %w", err))
	}
	defer g.Close()
	rep, err := m.output(func() error { return g.Launch(k.s) })
	if err != nil {
		return fail(fmt.Errorf("replay: %w", err))
	}
	r.Match = compare(rep, got)
	switch {
	case !(r.MaxErr <= tol):
		return fail(fmt.Errorf("the eager step differs from the Go reference: element %d (row %d) is %g, the reference %g: relative error %.3g (of the larger of the value and the reference's RMS %.3g), more than the tolerance %g",
			worstAt, worstAt/c.Hidden, floatbits.BF16ToFloat32(binary.LittleEndian.Uint16(got[2*worstAt:])), ref[worstAt], r.MaxErr, rms, tol))
	case r.Match != "identical":
		return fail(fmt.Errorf("the replayed step differs from the eager step: %s", r.Match))
	}
	ok = true
	return r, nil
}

// reference computes the step on the host in float64 from the weights on
// the device, rounding to bf16 where each operation of the step writes
// bf16 (the fused variant rounds h + a W_down^T once); it returns h
// (batch x hidden).
func (m *model) reference() ([]float64, error) {
	H, I, B := m.c.Hidden, m.c.Inter, m.batch
	read := func(b core.Region) ([]float64, error) {
		n := 0
		switch v := b.(type) {
		case *core.Buffer:
			n = v.Len()
		case core.View:
			n = v.Len()
		}
		raw := make([]byte, n)
		if err := core.CopyToHost(raw, b); err != nil {
			return nil, err
		}
		v := make([]float64, len(raw)/2)
		for i := range v {
			v[i] = float64(floatbits.BF16ToFloat32(binary.LittleEndian.Uint16(raw[2*i:])))
		}
		return v, nil
	}
	rb := func(x float64) float64 {
		return float64(floatbits.BF16ToFloat32(floatbits.BF16FromFloat32(float32(x))))
	}
	// y (B x out) = bf16(x (B x in) W^T + y0), W out x in row-major, y0
	// y's old value when add (else 0).
	linear := func(y, x, w []float64, in, out int, add bool) {
		for b := 0; b < B; b++ {
			xr := x[b*in : (b+1)*in]
			for o := 0; o < out; o++ {
				wr := w[o*in : (o+1)*in]
				var s float64
				for i, xv := range xr {
					s += xv * wr[i]
				}
				if add {
					s += y[b*out+o]
				}
				y[b*out+o] = rb(s)
			}
		}
	}
	h, err := read(m.xin)
	if err != nil {
		return nil, err
	}
	n := make([]float64, B*H)
	g, u, a := make([]float64, B*I), make([]float64, B*I), make([]float64, B*I)
	d := make([]float64, B*H)
	for li := range m.layers {
		l := &m.layers[li]
		var ws [4][]float64
		for i, buf := range []core.Region{l.wn, l.wg, l.wu, l.wd} {
			if ws[i], err = read(buf); err != nil {
				return nil, err
			}
		}
		wn, wg, wu, wd := ws[0], ws[1], ws[2], ws[3]
		for b := 0; b < B; b++ {
			row := h[b*H : (b+1)*H]
			var ss float64
			for _, v := range row {
				ss += v * v
			}
			r := 1 / math.Sqrt(ss/float64(H)+Eps)
			for i, v := range row {
				n[b*H+i] = rb(v * r * wn[i])
			}
		}
		linear(g, n, wg, H, I, false)
		linear(u, n, wu, H, I, false)
		for i := range a {
			a[i] = rb(g[i] / (1 + math.Exp(-g[i])) * u[i])
		}
		if m.fuse {
			linear(h, a, wd, I, H, true)
			continue
		}
		linear(d, a, wd, I, H, false)
		for i := range h {
			h[i] = rb(h[i] + d[i])
		}
	}
	return h, nil
}
