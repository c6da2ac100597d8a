// SPDX-License-Identifier: Apache-2.0

// Package decodestep is the decode-step benchmark of issue 11: the MLP
// part of a decoder's decode step, in bf16, written on gpurt as a user
// would, run eagerly (every operation enqueued on a stream) and replayed
// (captured once with Stream.Capture, one Graph.Launch per step).
//
// One step is
//
//	h = x_in                                    (a device copy)
//	per layer l:
//	  n = rmsnorm(h) * w_norm[l]                (eps 1e-5)
//	  g = n W_gate[l]^T;  u = n W_up[l]^T       (two GEMMs, bf16, f32 accumulation)
//	  a = silu(g) * u                           (silu_mul_bf16)
//	  d = a W_down[l]^T                         (GEMM)
//	  h = h + d                                 (add_bf16)
//
// with h and n of batch x hidden, g, u, a of batch x intermediate,
// row-major, and weights as torch.nn.Linear stores them (out x in,
// row-major): the "plain" variant, 6 operations a layer. The "fused"
// variant does the same work in 4: gate and up as one strided batched
// GEMM (batch 2 over W_gate and W_up stored one after the other), and the
// residual add inside the down GEMM (beta 1, C = D = h).
// scripts/decodestep_torch.py is its PyTorch twin (both variants).
//
// RMSNorm: on CUDA it is rmsnorm.cu, loaded as a user PTX module
// (rmsnorm.ptx, embedded), as a user would bring a kernel of their own;
// elsewhere it is the built-in rmsnorm_bf16 where the plugin has it (the
// mock), else composed of built-in kernels and GEMMs (see composedNorm),
// which computes the same function to bf16 accuracy.
package decodestep

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/floatbits"
	"github.com/metrale/gpurt/internal/commalist"
	"github.com/metrale/gpurt/internal/stats"
)

//go:embed rmsnorm.ptx
var rmsnormPTX []byte

// RMSNormPTX is the PTX of rmsnorm.cu (kernel decodestep_rmsnorm_bf16).
func RMSNormPTX() []byte { return slices.Clone(rmsnormPTX) }

// Eps is the RMSNorm epsilon.
const Eps = 1e-5

// Config is a model shape: hidden size, intermediate (MLP) size, layers.
type Config struct {
	Hidden, Inter, Layers int
}

// String is "hidden/inter/layers".
func (c Config) String() string { return fmt.Sprintf("%d/%d/%d", c.Hidden, c.Inter, c.Layers) }

// DefaultConfigs are issue 11's: an 8B-class, a 1B-class and a small model.
var DefaultConfigs = []Config{{4096, 14336, 32}, {2048, 8192, 16}, {1024, 4096, 24}}

// ParseConfigs parses a comma-separated list of hidden/inter/layers.
func ParseConfigs(s string) ([]Config, error) {
	return parseList(s, "config", func(f string) (Config, error) {
		p := strings.Split(f, "/")
		if len(p) != 3 {
			return Config{}, fmt.Errorf("decodestep: config %q: want hidden/intermediate/layers, e.g. 1024/4096/24", f)
		}
		var v [3]int
		for i, x := range p {
			n, err := strconv.Atoi(x)
			if err != nil || n <= 0 {
				return Config{}, fmt.Errorf("decodestep: config %q: %q is not a positive integer", f, x)
			}
			v[i] = n
		}
		return Config{v[0], v[1], v[2]}, nil
	})
}

// ParseBatches parses a comma-separated list of positive batch sizes.
func ParseBatches(s string) ([]int, error) {
	return parseList(s, "batch size", func(f string) (int, error) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("decodestep: batch %q is not a positive integer", f)
		}
		return n, nil
	})
}

// parseList parses each comma-separated field of s with parse, its white
// space trimmed and empty fields skipped; a list of none is an error naming
// what it lists.
func parseList[T any](s, what string, parse func(f string) (T, error)) ([]T, error) {
	out, err := commalist.Parse(s, func(f string) (T, error) { return parse(strings.TrimSpace(f)) })
	if err == nil && len(out) == 0 {
		return nil, fmt.Errorf("decodestep: no %s in %q", what, s)
	}
	return out, err
}

// Result is one line of the benchmark's output (JSON). The PyTorch twin
// writes the same fields.
type Result struct {
	Config string `json:"config"` // hidden/inter/layers
	Hidden int    `json:"hidden"`
	Inter  int    `json:"inter"`
	Layers int    `json:"layers"`
	Batch  int    `json:"batch"`
	// Variant is "plain" (6 operations a layer) or "fused" (4).
	Variant string `json:"variant"`
	// Impl is "gpurt eager", "gpurt replayed", "gpurt check" (a
	// comparison with the Go reference), "torch eager", "torch graph".
	Impl string `json:"impl"`
	// StepUs is the median time of one step, in µs, measured by events
	// recorded between steps enqueued back to back (GPU time: it includes
	// the device waiting for the host when the host is slower).
	StepUs float64 `json:"step_us"`
	MeanUs float64 `json:"mean_us"` // the mean of the same
	// HostUs is the median wall time of enqueueing one step on an idle
	// stream: every operation (eager) or one Graph.Launch (replayed).
	HostUs float64 `json:"host_us"`
	Ops    int     `json:"ops"`   // operations per step (graph nodes when replayed)
	Steps  int     `json:"steps"` // timed steps
	// Match is, for "gpurt replayed", how the replayed step's output
	// compares with the eager step's: "identical" or what differs.
	Match string `json:"match,omitempty"`
	// MaxErr is, for "gpurt check", the largest |gpurt - reference| /
	// max(|reference|, RMS of the reference) over the step's output; Tol
	// the bound it is checked against.
	MaxErr  float64 `json:"max_err,omitempty"`
	Tol     float64 `json:"tol,omitempty"`
	OK      *bool   `json:"ok,omitempty"`
	Norm    string  `json:"norm,omitempty"` // how RMSNorm ran: "ptx", "builtin" or "composed"
	Backend string  `json:"backend,omitempty"`
	Note    string  `json:"note,omitempty"` // an error, or what to know
}

// Options of Run.
type Options struct {
	Configs []Config // default DefaultConfigs
	Batches []int    // default 1 and 16
	Steps   int      // timed steps per mode (default 100)
	Warmup  int      // untimed steps first (default 5)
	// Variants are "plain" and/or "fused" (default plain).
	Variants []string
	// Norm says how RMSNorm runs: "ptx" (rmsnorm.cu as a PTX module),
	// "builtin" (the built-in rmsnorm_bf16), "composed" (other built-ins
	// and GEMMs), or "" / "auto": ptx on cuda, else builtin where the
	// plugin has it, else composed.
	Norm string
	// Emit receives each result as it is made (required).
	Emit func(Result) error
}

// Run benchmarks every config and batch on dev: for each, the eager
// step, the replayed step (and whether its output equals the eager
// step's, byte for byte). A config that fails is emitted with its error
// in Note and the others still run; Run returns the errors joined.
func Run(dev *core.Device, opt Options) error {
	if opt.Emit == nil {
		return errors.New("decodestep: Options.Emit is nil")
	}
	if len(opt.Configs) == 0 {
		opt.Configs = DefaultConfigs
	}
	if len(opt.Batches) == 0 {
		opt.Batches = []int{1, 16}
	}
	if opt.Steps <= 0 {
		opt.Steps = 100
	}
	if len(opt.Variants) == 0 {
		opt.Variants = []string{"plain"}
	}
	for _, v := range opt.Variants {
		if _, err := fused(v); err != nil {
			return err
		}
	}
	if opt.Warmup < 0 {
		opt.Warmup = 0
	} else if opt.Warmup == 0 {
		opt.Warmup = 5
	}
	k, err := newKit(dev, opt.Norm)
	if err != nil {
		return err
	}
	defer k.close()
	var errs []error
	for _, c := range opt.Configs {
		for _, b := range opt.Batches {
			for _, v := range opt.Variants {
				fu, _ := fused(v)
				rs, err := k.benchOne(c, b, fu, opt.Steps, opt.Warmup)
				for _, r := range rs {
					if e := opt.Emit(r); e != nil {
						return e
					}
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("decodestep %v batch %d %s: %w", c, b, v, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// fused says whether variant v is "fused" ("plain" is not).
func fused(v string) (bool, error) {
	switch v {
	case "plain":
		return false, nil
	case "fused":
		return true, nil
	}
	return false, fmt.Errorf("decodestep: variant %q: want plain or fused", v)
}

// variantName is fused's inverse.
func variantName(fuse bool) string {
	if fuse {
		return "fused"
	}
	return "plain"
}

// Check runs one eager step of c at batch b (variant "plain" or "fused";
// norm as Options.Norm) on dev and compares it with a float64 Go
// reference (rounded to bf16 where each operation rounds), and the
// replayed step with the eager one. The result's OK says whether the
// largest relative error (see Result.MaxErr) is within tol (0: 0.03 for
// the PTX and built-in norms, 0.08 for the composed one) and the replay
// is identical; a failure is also the error.
func Check(dev *core.Device, c Config, b int, variant, norm string, tol float64) (Result, error) {
	fu, err := fused(variant)
	if err != nil {
		return Result{}, err
	}
	k, err := newKit(dev, norm)
	if err != nil {
		return Result{}, err
	}
	defer k.close()
	return k.check(c, b, fu, tol)
}

// kit is what every model on a device shares: the kernels and the norm.
type kit struct {
	dev                               *core.Device
	s                                 *core.Stream
	add, silu, mul, axpy, fill, scale *core.Kernel
	ptxMod                            *core.Module
	norm                              *core.Kernel // the PTX or built-in kernel, or nil (composed)
	normName                          string
	backend                           string
	poolH, poolI                      *core.Buffer // random weights, scaled for fan-in hidden and inter
	poolElems                         int
	poolCfg                           [2]int // the fan-ins the pools were made for
	rng                               *rand.Rand
	tweak                             func(*model) // tests: changes a model before check runs it
}

func newKit(dev *core.Device, norm string) (*kit, error) {
	if dev == nil {
		return nil, errors.New("decodestep: nil device")
	}
	k := &kit{dev: dev, backend: dev.Runtime().Backend(), rng: rand.New(rand.NewPCG(11, 13))}
	switch norm {
	case "", "auto":
		norm = "auto"
		if k.backend == "cuda" {
			norm = "ptx"
		}
	case "ptx", "builtin", "composed":
	default:
		return nil, fmt.Errorf("decodestep: norm %q: want auto, ptx, builtin or composed", norm)
	}
	mod, err := dev.BuiltinModule()
	if err != nil {
		return nil, fmt.Errorf("decodestep: built-in module: %w", err)
	}
	if norm == "auto" || norm == "builtin" {
		k.norm, err = mod.Kernel("rmsnorm_bf16")
		switch {
		case err == nil:
			norm = "builtin"
		case norm == "builtin":
			return nil, fmt.Errorf("decodestep: norm builtin: the plugin has no rmsnorm_bf16 (it came with the row kernels): %w", err)
		default:
			norm = "composed"
		}
	}
	k.normName = norm
	for _, p := range []struct {
		k    **core.Kernel
		name string
	}{{&k.add, "add_bf16"}, {&k.silu, "silu_mul_bf16"}, {&k.mul, "mul_bf16"}, {&k.axpy, "axpy_bf16"},
		{&k.fill, "fill_bf16"}, {&k.scale, "scale_bf16"}} {
		if *p.k, err = mod.Kernel(p.name); err != nil {
			return nil, fmt.Errorf("decodestep: built-in kernel %s (silu_mul_bf16 needs a plugin from after its addition): %w", p.name, err)
		}
	}
	if norm == "ptx" {
		if k.ptxMod, err = dev.LoadModule(fmt.Sprintf("decodestep-rmsnorm-%p", k), core.ModulePTX, rmsnormPTX); err != nil {
			return nil, fmt.Errorf("decodestep: loading rmsnorm.ptx (norm ptx needs a backend that loads PTX: cuda): %w", err)
		}
		if k.norm, err = k.ptxMod.Kernel("decodestep_rmsnorm_bf16"); err != nil {
			k.close()
			return nil, fmt.Errorf("decodestep: rmsnorm.ptx: %w", err)
		}
	}
	if k.s, err = dev.NewStream(); err != nil {
		k.close()
		return nil, err
	}
	return k, nil
}

func (k *kit) close() {
	if k.s != nil {
		_ = k.s.Synchronize()
	}
	for _, b := range []*core.Buffer{k.poolH, k.poolI} {
		if b != nil {
			_ = b.Free()
		}
	}
	k.poolH, k.poolI = nil, nil
	if k.s != nil {
		_ = k.s.Close()
		k.s = nil
	}
	if k.ptxMod != nil {
		_ = k.ptxMod.Unload()
		k.ptxMod = nil
	}
}

// poolMaxElems bounds the random pools the weights are copied from.
const poolMaxElems = 4 << 20

// pools makes (or reuses) the random pools for fan-ins hidden and inter:
// normal values scaled by 1/sqrt(fan-in), so that activations stay O(1).
func (k *kit) pools(c Config) error {
	if k.poolH != nil && k.poolCfg == [2]int{c.Hidden, c.Inter} {
		return nil
	}
	for _, b := range []*core.Buffer{k.poolH, k.poolI} {
		if b != nil {
			_ = b.Free()
		}
	}
	k.poolH, k.poolI = nil, nil
	n := min(poolMaxElems, c.Hidden*c.Inter)
	var err error
	if k.poolH, err = k.upload(randBF16(k.rng, n, 1/math.Sqrt(float64(c.Hidden)), 0)); err != nil {
		return err
	}
	if k.poolI, err = k.upload(randBF16(k.rng, n, 1/math.Sqrt(float64(c.Inter)), 0)); err != nil {
		return err
	}
	k.poolElems, k.poolCfg = n, [2]int{c.Hidden, c.Inter}
	return nil
}

func (k *kit) upload(data []byte) (*core.Buffer, error) {
	b, err := k.dev.Alloc(len(data))
	if err != nil {
		return nil, err
	}
	if err := core.CopyFromHost(b, data); err != nil {
		_ = b.Free()
		return nil, err
	}
	return b, nil
}

// randBF16 is n bf16 values mean + scale * N(0, 1).
func randBF16(rng *rand.Rand, n int, scale, mean float64) []byte {
	p := make([]byte, 2*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint16(p[2*i:], floatbits.BF16FromFloat32(float32(mean+scale*rng.NormFloat64())))
	}
	return p
}

// layer is one layer's weights. Plain: wg and wu are buffers; fused:
// wgu holds W_gate then W_up, and wg and wu are views of it.
type layer struct {
	wn, wd, wgu *core.Buffer
	wg, wu      core.Region
}

// model is one config at one batch size on a kit's device.
type model struct {
	k                       *kit
	c                       Config
	batch                   int
	fuse                    bool
	layers                  []layer
	xin, h, xn, g, u, a, dn *core.Buffer
	gu                      *core.Buffer // fused: g then u (gv and uv are views of it)
	gv, uv                  core.Region
	up, down                core.GemmDesc // gate/up: inter x batch = W (stored hidden x inter) ^T . n; down likewise
	gateUp                  core.GemmDesc // fused: up, batch 2
	normCfg                 core.LaunchConfig
	cfgH, cfgI              core.LaunchConfig
	cn                      *composedNorm
	bufs                    []*core.Buffer
}

func (k *kit) newModel(c Config, batch int, fuse bool) (m *model, err error) {
	if c.Hidden <= 0 || c.Inter <= 0 || c.Layers <= 0 || batch <= 0 {
		return nil, fmt.Errorf("decodestep: config %v batch %d: every size must be positive", c, batch)
	}
	if err := k.pools(c); err != nil {
		return nil, err
	}
	m = &model{k: k, c: c, batch: batch, fuse: fuse}
	defer func() {
		if err != nil {
			m.close()
			m = nil
		}
	}()
	alloc := func(elems int) (*core.Buffer, error) {
		b, err := k.dev.Alloc(2 * elems)
		if err != nil {
			return nil, fmt.Errorf("allocating %d bf16 elements: %w", elems, err)
		}
		m.bufs = append(m.bufs, b)
		return b, nil
	}
	H, I, B := c.Hidden, c.Inter, batch
	for _, p := range []struct {
		b **core.Buffer
		n int
	}{{&m.xin, B * H}, {&m.h, B * H}, {&m.xn, B * H}, {&m.a, B * I}, {&m.dn, B * H}} {
		if *p.b, err = alloc(p.n); err != nil {
			return nil, err
		}
	}
	if fuse {
		if m.gu, err = alloc(2 * B * I); err != nil {
			return nil, err
		}
		if m.gv, m.uv, err = halves(m.gu); err != nil {
			return nil, err
		}
	} else {
		if m.g, err = alloc(B * I); err != nil {
			return nil, err
		}
		if m.u, err = alloc(B * I); err != nil {
			return nil, err
		}
		m.gv, m.uv = m.g, m.u
	}
	if err = core.CopyFromHost(m.xin, randBF16(k.rng, B*H, 1, 0)); err != nil {
		return nil, err
	}
	m.layers = make([]layer, c.Layers)
	seed := 0
	for li := range m.layers {
		l := &m.layers[li]
		if l.wn, err = alloc(H); err != nil {
			return nil, err
		}
		if err = core.CopyFromHost(l.wn, randBF16(k.rng, H, 0.1, 1)); err != nil {
			return nil, err
		}
		type wspec struct {
			b    **core.Buffer
			n    int
			pool *core.Buffer
		}
		var wg, wu *core.Buffer
		ws := []wspec{{&wg, H * I, k.poolH}, {&wu, H * I, k.poolH}, {&l.wd, H * I, k.poolI}}
		if fuse {
			ws = []wspec{{&l.wgu, 2 * H * I, k.poolH}, {&l.wd, H * I, k.poolI}}
		}
		for _, w := range ws {
			if *w.b, err = alloc(w.n); err != nil {
				return nil, err
			}
			seed += 7919
			if err = k.fillFrom(*w.b, w.pool, seed); err != nil {
				return nil, err
			}
		}
		if fuse {
			if l.wg, l.wu, err = halves(l.wgu); err != nil {
				return nil, err
			}
		} else {
			l.wg, l.wu = wg, wu
		}
	}
	if err = k.s.Synchronize(); err != nil {
		return nil, err
	}
	m.up = core.GemmDesc{AType: core.BF16, BType: core.BF16, DType: core.BF16, TransA: true, M: I, N: B, K: H}
	m.down = core.GemmDesc{AType: core.BF16, BType: core.BF16, DType: core.BF16, TransA: true, M: H, N: B, K: I}
	m.gateUp = m.up
	m.gateUp.Batch, m.gateUp.StrideA, m.gateUp.StrideB, m.gateUp.StrideD = 2, int64(I*H), 0, int64(I*B)
	m.cfgH, m.cfgI = core.Grid1D(B*H, 256), core.Grid1D(B*I, 256)
	threads := min(1024, max(32, (H/8+31)/32*32))
	m.normCfg = core.LaunchConfig{Grid: [3]uint32{uint32(B), 1, 1}, Block: [3]uint32{uint32(threads), 1, 1}}
	if k.norm == nil {
		if m.cn, err = newComposedNorm(m, alloc); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// halves are the two halves of b.
func halves(b *core.Buffer) (core.View, core.View, error) {
	n := b.Len() / 2
	lo, err := b.View(0, n)
	if err != nil {
		return core.View{}, core.View{}, err
	}
	hi, err := b.View(n, n)
	return lo, hi, err
}

// fillFrom fills dst with the pool's bytes, starting at a place seed
// picks and wrapping around (device copies on the kit's stream).
func (k *kit) fillFrom(dst, pool *core.Buffer, seed int) error {
	pn := pool.Len()
	off := (2 * seed) % pn
	for p := 0; p < dst.Len(); {
		n := min(pn-off, dst.Len()-p)
		dv, err := dst.View(p, n)
		if err != nil {
			return err
		}
		sv, err := pool.View(off, n)
		if err != nil {
			return err
		}
		if err := k.s.CopyDevice(dv, sv); err != nil {
			return err
		}
		p += n
		off = 0
	}
	return nil
}

func (m *model) close() {
	if m.k.s != nil {
		_ = m.k.s.Synchronize()
	}
	for _, b := range m.bufs {
		_ = b.Free()
	}
	m.bufs = nil
}

// ops is the number of operations of one eager step.
func (m *model) ops() int {
	per := 6
	if m.fuse {
		per = 4
	}
	if m.cn != nil {
		per += m.cn.ops() - 1
	}
	return 1 + m.c.Layers*per
}

// step enqueues (or, on a capturing stream, records) one decode step on s.
func (m *model) step(s *core.Stream) error {
	k := m.k
	nH, nI := core.ArgScalar[uint64](uint64(m.batch*m.c.Hidden)), core.ArgScalar[uint64](uint64(m.batch*m.c.Inter))
	if err := s.CopyDevice(m.h, m.xin); err != nil {
		return err
	}
	for li := range m.layers {
		l := &m.layers[li]
		if err := m.rmsnorm(s, m.xn, m.h, l.wn); err != nil {
			return fmt.Errorf("layer %d rmsnorm: %w", li, err)
		}
		if m.fuse {
			if err := s.Gemm(m.gateUp, core.GemmOperands{A: l.wgu, B: m.xn, D: m.gu, Alpha: 1}); err != nil {
				return fmt.Errorf("layer %d gate+up GEMM: %w", li, err)
			}
		} else {
			if err := s.Gemm(m.up, core.GemmOperands{A: l.wg, B: m.xn, D: m.g, Alpha: 1}); err != nil {
				return fmt.Errorf("layer %d gate GEMM: %w", li, err)
			}
			if err := s.Gemm(m.up, core.GemmOperands{A: l.wu, B: m.xn, D: m.u, Alpha: 1}); err != nil {
				return fmt.Errorf("layer %d up GEMM: %w", li, err)
			}
		}
		if err := s.Launch(k.silu, m.cfgI, core.ArgBuffer(m.a), core.ArgBuffer(m.gv), core.ArgBuffer(m.uv), nI); err != nil {
			return fmt.Errorf("layer %d silu_mul: %w", li, err)
		}
		if m.fuse {
			if err := s.Gemm(m.down, core.GemmOperands{A: l.wd, B: m.a, C: m.h, D: m.h, Alpha: 1, Beta: 1}); err != nil {
				return fmt.Errorf("layer %d down GEMM + residual: %w", li, err)
			}
			continue
		}
		if err := s.Gemm(m.down, core.GemmOperands{A: l.wd, B: m.a, D: m.dn, Alpha: 1}); err != nil {
			return fmt.Errorf("layer %d down GEMM: %w", li, err)
		}
		if err := s.Launch(k.add, m.cfgH, core.ArgBuffer(m.h), core.ArgBuffer(m.h), core.ArgBuffer(m.dn), nH); err != nil {
			return fmt.Errorf("layer %d residual add: %w", li, err)
		}
	}
	return nil
}

func (m *model) rmsnorm(s *core.Stream, y, x, w *core.Buffer) error {
	if m.cn != nil {
		return m.cn.run(s, y, x, w)
	}
	if m.k.normName == "builtin" { // rmsnorm_T(y, x, w, eps, rows, cols)
		return s.Launch(m.k.norm, m.normCfg, core.ArgBuffer(y), core.ArgBuffer(x), core.ArgBuffer(w),
			core.ArgScalar[float32](Eps), core.ArgScalar[uint64](uint64(m.batch)), core.ArgScalar[uint64](uint64(m.c.Hidden)))
	}
	return s.Launch(m.k.norm, m.normCfg, core.ArgBuffer(y), core.ArgBuffer(x), core.ArgBuffer(w),
		core.ArgScalar[float32](Eps), core.ArgScalar[uint64](uint64(m.c.Hidden)))
}

// composedNorm is RMSNorm from built-in kernels and GEMMs, for backends
// without PTX: sq = x*x; ms = sq^T ones / hidden + eps (a GEMM);
// r = 1/sqrt(ms) by newtonIters Newton steps r = r (1.5 - 0.5 ms r^2)
// from r = 0.25 (which converge for ms in about (0.005, 48): the
// benchmark's activations stay there, and Check's reference comparison
// fails if they do not); o = w r^T (an outer product, a GEMM with k 1);
// y = x * o. Everything is bf16, so it is accurate to a few bf16 ulps.
type composedNorm struct {
	m                          *model
	sq, ones, ms, msh, r, t, o *core.Buffer
	onesB                      core.View
	meanD, outerD              core.GemmDesc
	cfgN, cfgB                 core.LaunchConfig
}

const newtonIters = 12

func newComposedNorm(m *model, alloc func(int) (*core.Buffer, error)) (*composedNorm, error) {
	H, B := m.c.Hidden, m.batch
	cn := &composedNorm{m: m}
	var err error
	for _, p := range []struct {
		b **core.Buffer
		n int
	}{{&cn.sq, B * H}, {&cn.ones, max(H, B)}, {&cn.ms, B}, {&cn.msh, B}, {&cn.r, B}, {&cn.t, B}, {&cn.o, B * H}} {
		if *p.b, err = alloc(p.n); err != nil {
			return nil, err
		}
	}
	one := floatbits.BF16FromFloat32(1)
	if err = core.Memset16(cn.ones, one); err != nil {
		return nil, err
	}
	if cn.onesB, err = cn.ones.View(0, 2*B); err != nil {
		return nil, err
	}
	// ms (1 x B) = ones^T (1 x H) . sq (H x B), alpha 1/H
	cn.meanD = core.GemmDesc{AType: core.BF16, BType: core.BF16, DType: core.BF16, TransA: true, M: 1, N: B, K: H, LDA: H, LDB: H, LDD: 1}
	// o (H x B) = w (H x 1) . r^T (1 x B)
	cn.outerD = core.GemmDesc{AType: core.BF16, BType: core.BF16, DType: core.BF16, M: H, N: B, K: 1, LDA: H, LDB: 1, LDD: H}
	cn.cfgN, cn.cfgB = core.Grid1D(B*H, 256), core.Grid1D(B, 256)
	return cn, nil
}

func (cn *composedNorm) ops() int { return 7 + 4*newtonIters }

func (cn *composedNorm) run(s *core.Stream, y, x, w *core.Buffer) error {
	k := cn.m.k
	H, B := cn.m.c.Hidden, cn.m.batch
	nN, nB := core.ArgScalar[uint64](uint64(B*H)), core.ArgScalar[uint64](uint64(B))
	ones, err := cn.ones.View(0, 2*H)
	if err != nil {
		return err
	}
	r, t := core.ArgBuffer(cn.r), core.ArgBuffer(cn.t)
	steps := []func() error{
		func() error {
			return s.Launch(k.mul, cn.cfgN, core.ArgBuffer(cn.sq), core.ArgBuffer(x), core.ArgBuffer(x), nN)
		},
		func() error {
			return s.Gemm(cn.meanD, core.GemmOperands{A: ones, B: cn.sq, D: cn.ms, Alpha: 1 / float64(H)})
		},
		func() error {
			return s.Launch(k.axpy, cn.cfgB, core.ArgBuffer(cn.ms), core.ArgBuffer(cn.onesB), core.ArgScalar[float32](Eps), nB)
		},
		func() error {
			return s.Launch(k.scale, cn.cfgB, core.ArgBuffer(cn.msh), core.ArgBuffer(cn.ms), core.ArgScalar[float32](-0.5), nB)
		},
		func() error {
			return s.Launch(k.fill, cn.cfgB, r, core.ArgBF16Bits(floatbits.BF16FromFloat32(0.25)), nB)
		},
	}
	for _, f := range steps {
		if err := f(); err != nil {
			return err
		}
	}
	for i := 0; i < newtonIters; i++ {
		if err := s.Launch(k.mul, cn.cfgB, t, r, r, nB); err != nil {
			return err
		}
		if err := s.Launch(k.mul, cn.cfgB, t, t, core.ArgBuffer(cn.msh), nB); err != nil {
			return err
		}
		if err := s.Launch(k.axpy, cn.cfgB, t, core.ArgBuffer(cn.onesB), core.ArgScalar[float32](1.5), nB); err != nil {
			return err
		}
		if err := s.Launch(k.mul, cn.cfgB, r, r, t, nB); err != nil {
			return err
		}
	}
	if err := s.Gemm(cn.outerD, core.GemmOperands{A: w, B: cn.r, D: cn.o, Alpha: 1}); err != nil {
		return err
	}
	return s.Launch(k.mul, cn.cfgN, core.ArgBuffer(y), core.ArgBuffer(x), core.ArgBuffer(cn.o), nN)
}

// benchOne measures c at batch b: eager, then replayed.
func (k *kit) benchOne(c Config, b int, fuse bool, steps, warmup int) ([]Result, error) {
	base := Result{Config: c.String(), Hidden: c.Hidden, Inter: c.Inter, Layers: c.Layers, Batch: b,
		Variant: variantName(fuse), Norm: k.normName, Backend: k.backend, Steps: steps}
	fail := func(impl string, err error) Result {
		r := base
		r.Impl, r.Note = impl, err.Error()
		return r
	}
	m, err := k.newModel(c, b, fuse)
	if err != nil {
		return []Result{fail("gpurt eager", err), fail("gpurt replayed", err)}, err
	}
	defer m.close()
	s := k.s
	eager := func() error { return m.step(s) }
	var out []Result
	re := base
	re.Impl, re.Ops = "gpurt eager", m.ops()
	if err := k.measure(&re, eager, steps, warmup); err != nil {
		return append(out, fail("gpurt eager", err), fail("gpurt replayed", err)), err
	}
	out = append(out, re)
	want, err := m.output(eager)
	if err != nil {
		return append(out, fail("gpurt replayed", err)), err
	}
	g, err := s.Capture(m.step)
	if err != nil {
		err = fmt.Errorf("capture: %w", err)
		return append(out, fail("gpurt replayed", err)), err
	}
	defer g.Close()
	replay := func() error { return g.Launch(s) }
	rr := base
	rr.Impl, rr.Ops = "gpurt replayed", g.Len()
	got, err := m.output(replay)
	if err == nil {
		rr.Match = compare(got, want)
		err = k.measure(&rr, replay, steps, warmup)
	}
	if err == nil {
		// The output after the timed replays is the same again.
		if got, err = m.output(replay); err == nil && rr.Match == "identical" {
			rr.Match = compare(got, want)
		}
	}
	if err != nil {
		return append(out, fail("gpurt replayed", err)), err
	}
	out = append(out, rr)
	if rr.Match != "identical" {
		return out, fmt.Errorf("the replayed step's output differs from the eager step's: %s", rr.Match)
	}
	return out, nil
}

// output poisons h, runs one step with run, and returns h's bytes.
func (m *model) output(run func() error) ([]byte, error) {
	s := m.k.s
	if err := s.Memset16(m.h, 0xffff); err != nil { // bf16 NaN
		return nil, err
	}
	if err := run(); err != nil {
		return nil, err
	}
	if err := s.Synchronize(); err != nil {
		return nil, err
	}
	out := make([]byte, m.h.Len())
	return out, core.CopyToHost(out, m.h)
}

// compare says how got differs from want (bf16 arrays of equal length).
func compare(got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d bytes, want %d", len(got), len(want))
	}
	diff, first := 0, -1
	var worst float64
	for i := 0; i+1 < len(got); i += 2 {
		a, b := binary.LittleEndian.Uint16(got[i:]), binary.LittleEndian.Uint16(want[i:])
		if a == b {
			continue
		}
		diff++
		if first < 0 {
			first = i / 2
		}
		d := math.Abs(float64(floatbits.BF16ToFloat32(a)) - float64(floatbits.BF16ToFloat32(b)))
		if !(d <= worst) {
			worst = d
		}
	}
	if diff == 0 {
		return "identical"
	}
	return fmt.Sprintf("%d of %d elements differ (first at %d, largest difference %g)", diff, len(got)/2, first, worst)
}

// measure fills r.StepUs, r.MeanUs (events between steps enqueued back
// to back) and r.HostUs (wall time of one run on an idle stream).
func (k *kit) measure(r *Result, run func() error, steps, warmup int) error {
	s := k.s
	for i := 0; i < warmup; i++ {
		if err := run(); err != nil {
			return err
		}
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	evs := make([]*core.Event, steps+1)
	defer func() {
		for _, e := range evs {
			if e != nil {
				_ = e.Close()
			}
		}
	}()
	for i := range evs {
		e, err := k.dev.NewEvent(true)
		if err != nil {
			return err
		}
		evs[i] = e
	}
	for i := 0; i < steps; i++ {
		if err := evs[i].Record(s); err != nil {
			return err
		}
		if err := run(); err != nil {
			return err
		}
	}
	if err := evs[steps].Record(s); err != nil {
		return err
	}
	if err := evs[steps].Synchronize(); err != nil {
		return err
	}
	us := make([]float64, steps)
	var sum float64
	for i := range us {
		d, err := core.Elapsed(evs[i], evs[i+1])
		if err != nil {
			return err
		}
		us[i] = float64(d.Nanoseconds()) / 1e3
		sum += us[i]
	}
	r.StepUs, r.MeanUs = stats.Median(us), sum/float64(steps)
	host := make([]float64, 0, min(steps, 50))
	for i := 0; i < cap(host); i++ {
		if err := s.Synchronize(); err != nil {
			return err
		}
		t0 := time.Now()
		if err := run(); err != nil {
			return err
		}
		host = append(host, float64(time.Since(t0).Nanoseconds())/1e3)
	}
	r.HostUs = stats.Median(host)
	return s.Synchronize()
}
