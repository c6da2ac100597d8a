// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"fmt"
	"math"
	"slices"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/floatbits"
	"github.com/metrale/gpurt/internal/abi"
)

var elemTypes = []core.DType{core.F32, core.F16, core.BF16}

// kernelTol is the relative tolerance of a built-in kernel's result in t,
// measured against the magnitude of its terms (a device may fuse a
// multiply-add, which changes the last bit).
func kernelTol(t core.DType) float64 {
	switch t {
	case core.F16:
		return 2e-3
	case core.BF16:
		return 1.6e-2
	}
	return 1e-6
}

func valueArg(t core.DType, v float64) core.Arg {
	switch t {
	case core.F16:
		return core.ArgF16Bits(floatbits.F16FromFloat32(float32(v)))
	case core.BF16:
		return core.ArgBF16Bits(floatbits.BF16FromFloat32(float32(v)))
	}
	return core.ArgScalar[float32](float32(v))
}

// kernelChecks has one check per built-in kernel of abi.BuiltinKernels
// (the one Go list; see CONTRIBUTING.md): the typed ones against the Go
// reference in checkKernel, sleep_ns in checkSleep. A kernel added to the
// list without a reference here is a failing check.
func kernelChecks() []check {
	var cs []check
	for _, bk := range abi.BuiltinKernels {
		name, op, t := bk.Name, bk.Op, core.DType(bk.DType)
		run := func(e *env) error { return checkKernel(e, op, t) }
		switch {
		case op == "sleep_ns":
			run = checkSleep
		case slices.Contains(elemTypes, t) && rowKernelChecks[op] != nil:
			run = func(e *env) error { return checkRowKernel(e, op, t) }
		case !slices.Contains(elemTypes, t) || !slices.Contains(typedKernelOps, op):
			run = func(*env) error {
				return fmt.Errorf("built-in kernel %s has no reference in conform/kernels.go (add its op to typedKernelOps and checkKernel)", name)
			}
		}
		cs = append(cs, check{"kernel/" + name, run})
	}
	return cs
}

// typedKernelOps are the ops checkKernel has a reference for.
var typedKernelOps = []string{"fill", "scale", "axpy", "add", "mul", "silu_mul", "softcap"}

// checkSleep: sleep_ns on one thread completes, and the stream reports
// it done afterwards.
func checkSleep(e *env) error {
	kn, err := kernel(e.dev, "sleep_ns")
	if err != nil {
		return err
	}
	return withStream(e, func(s *core.Stream) error {
		if err := firstErr(s.Launch(kn, core.Grid1D(1, 1), core.ArgScalar[uint64](1000)), s.Synchronize()); err != nil {
			return err
		}
		done, err := s.Query()
		if err == nil && !done {
			err = fmt.Errorf("stream not complete after Synchronize")
		}
		return err
	})
}

func checkKernel(e *env, name string, t core.DType) error {
	const n = 4099
	kn, err := kernel(e.dev, name+"_"+t.String())
	if err != nil {
		return err
	}
	return withStream(e, func(s *core.Stream) error {
		sz := t.Size()
		bufs := make([]*core.Buffer, 3) // out, x, y
		for i := range bufs {
			if bufs[i], err = e.dev.Alloc(n*sz + 512); err != nil {
				return err
			}
			defer bufs[i].Free()
		}
		// unaligned views (by one element) to catch offset handling
		out, _ := bufs[0].View(sz, n*sz)
		xv, _ := bufs[1].View(2*sz, n*sz)
		yv, _ := bufs[2].View(0, n*sz)
		for _, geom := range []struct {
			block, grid int
		}{{1, n}, {32, (n + 31) / 32}, {256, (n + 255) / 256}, {1024, (n + 1023) / 1024}, {256, 10}} {
			x := randomValues(e.rng, t, n, 2)
			y := randomValues(e.rng, t, n, 2)
			alpha := float64(float32(0.5 + e.rng.Float64()))
			value := roundTo(t, 1+e.rng.Float64())
			if err := firstErr(core.Memset(bufs[0], 0xff), core.CopyFromHost(xv, encode(t, x)), core.CopyFromHost(yv, encode(t, y))); err != nil {
				return err
			}
			var args []core.Arg
			var ref func(i int) (float64, float64) // result, magnitude of its terms
			f := func(v float64) float64 { return float64(float32(v)) }
			switch name {
			case "fill":
				args = []core.Arg{core.ArgBuffer(out), valueArg(t, value), core.ArgScalar[uint64](n)}
				ref = func(i int) (float64, float64) { return value, math.Abs(value) }
			case "scale":
				args = []core.Arg{core.ArgBuffer(out), core.ArgBuffer(xv), core.ArgScalar[float32](float32(alpha)), core.ArgScalar[uint64](n)}
				ref = func(i int) (float64, float64) { r := f(alpha * x[i]); return r, math.Abs(r) }
			case "axpy": // out is y here: copy y into out first
				if err := core.Copy(out, yv); err != nil {
					return err
				}
				args = []core.Arg{core.ArgBuffer(out), core.ArgBuffer(xv), core.ArgScalar[float32](float32(alpha)), core.ArgScalar[uint64](n)}
				ref = func(i int) (float64, float64) {
					return f(f(alpha*x[i]) + y[i]), math.Abs(alpha*x[i]) + math.Abs(y[i])
				}
			case "add":
				args = []core.Arg{core.ArgBuffer(out), core.ArgBuffer(xv), core.ArgBuffer(yv), core.ArgScalar[uint64](n)}
				ref = func(i int) (float64, float64) { return f(x[i] + y[i]), math.Abs(x[i]) + math.Abs(y[i]) }
			case "mul":
				args = []core.Arg{core.ArgBuffer(out), core.ArgBuffer(xv), core.ArgBuffer(yv), core.ArgScalar[uint64](n)}
				ref = func(i int) (float64, float64) { r := f(x[i] * y[i]); return r, math.Abs(r) }
			case "silu_mul": // x is the gate, y the up projection
				args = []core.Arg{core.ArgBuffer(out), core.ArgBuffer(xv), core.ArgBuffer(yv), core.ArgScalar[uint64](n)}
				ref = func(i int) (float64, float64) {
					r := x[i] / (1 + math.Exp(-x[i])) * y[i]
					return r, math.Abs(x[i]*y[i]) + math.Abs(r)
				}
			case "softcap": // cap in [1, 3) against |x| up to 2: the tanh bends
				args = []core.Arg{core.ArgBuffer(out), core.ArgBuffer(xv), core.ArgScalar[float32](float32(alpha * 2)), core.ArgScalar[uint64](n)}
				ref = func(i int) (float64, float64) {
					c := float64(float32(alpha * 2))
					r := c * math.Tanh(x[i]/c)
					return r, math.Abs(x[i]) + math.Abs(r)
				}
			}
			cfg := core.LaunchConfig{Grid: [3]uint32{uint32(geom.grid), 1, 1}, Block: [3]uint32{uint32(geom.block), 1, 1}}
			if err := firstErr(s.Launch(kn, cfg, args...), s.Synchronize()); err != nil {
				return fmt.Errorf("block %d grid %d: %w", geom.block, geom.grid, err)
			}
			raw := make([]byte, n*sz+512)
			if err := core.CopyToHost(raw, bufs[0]); err != nil {
				return err
			}
			covered := min(n, geom.block*geom.grid)
			got := decode(t, raw[sz:sz+n*sz])
			tol := kernelTol(t)
			for i := 0; i < covered; i++ {
				want, mag := ref(i)
				want = roundTo(t, want)
				if math.IsNaN(got[i]) || math.Abs(got[i]-want) > tol*mag+1e-30 {
					return fmt.Errorf("block %d grid %d: element %d is %g, want %g", geom.block, geom.grid, i, got[i], want)
				}
			}
			// elements past the grid (and the bytes around the view) untouched
			if name == "axpy" { // out held y before the launch
				for i := covered; i < n; i++ {
					if got[i] != y[i] {
						return fmt.Errorf("block %d grid %d: element %d past the grid was written", geom.block, geom.grid, i)
					}
				}
			} else {
				for i := covered * sz; i < n*sz; i++ {
					if raw[sz+i] != 0xff {
						return fmt.Errorf("block %d grid %d: byte %d past the grid was written", geom.block, geom.grid, i)
					}
				}
			}
			for i := 0; i < sz; i++ {
				if raw[i] != 0xff || raw[sz+n*sz+i] != 0xff {
					return fmt.Errorf("block %d grid %d: the kernel wrote outside its view", geom.block, geom.grid)
				}
			}
		}
		return nil
	})
}
