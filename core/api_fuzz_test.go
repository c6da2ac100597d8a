// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/metrale/gpurt/core"
)

// FuzzCalls drives core's public API on the mock with programs read from
// the input: allocations, views (stale ones too), copies, memsets, streams,
// events, built-in kernel launches with arguments of any kind, launch
// batches, GEMMs with any descriptor, captures and graph replays, pinned
// host memory. csrc/test/abi_fuzz.c fuzzes the plugin's C ABI; this one
// fuzzes the Go checks in front of it (views, regions, argument packing,
// descriptors, capture rules), which only Go can make because only Go
// knows a view's length.
//
// What must hold: no panic; every error is a *core.Error with a message;
// closing the runtime at the end succeeds. `go test` runs the seeds below;
// `go test -fuzz FuzzCalls ./core` (scripts/fuzz_go.sh, make fuzz) searches.
func FuzzCalls(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 16, 0, 2, 0, 0, 4, 5, 9, 3, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add([]byte("\x00\x10\x00\x00\x10\x00\x08\x00\x01\x0b\x02\x05\x01\x0c\x00\x03\x0e\x01\x02"))
	for s := uint64(1); s <= 8; s++ { // longer programs
		b := make([]byte, 256)
		for i := range b {
			s ^= s << 13
			s ^= s >> 7
			s ^= s << 17
			b[i] = byte(s)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rt := openMock(t, "delay_us=0")
		p := &prog{t: t, in: data, rt: rt, dev: dev0(t, rt)}
		p.run()
		p.closeAll()
		if err := rt.Close(); err != nil {
			t.Fatalf("Runtime.Close: %v", err)
		}
	})
}

type prog struct {
	t   *testing.T
	in  []byte
	rt  *core.Runtime
	dev *core.Device

	bufs    []*core.Buffer
	regions []core.Region // views and buffers, live or freed
	streams []*core.Stream
	events  []*core.Event
	kernels []*core.Kernel
	graphs  []*core.Graph
	hosts   []*core.HostBuffer
	pinned  []core.Pinned
}

func (p *prog) u8() byte {
	if len(p.in) == 0 {
		return 0
	}
	b := p.in[0]
	p.in = p.in[1:]
	return b
}

func (p *prog) u64() uint64 {
	var b [8]byte
	for i := range b {
		b[i] = p.u8()
	}
	return binary.LittleEndian.Uint64(b[:])
}

// n is a count or size: small mostly, an edge or any int now and then.
func (p *prog) n() int {
	switch c := p.u8(); {
	case c < 160:
		return int(c)
	case c < 200:
		return int(c) * 64
	case c < 220:
		return []int{-1, -4096, 1 << 20, 1<<31 - 1, 1 << 31, 1<<32 + 1, math.MaxInt64, math.MinInt64}[c%8]
	default:
		return int(p.u64())
	}
}

// check: err is nil or a well-formed *core.Error.
func (p *prog) check(what string, err error) {
	if err == nil {
		return
	}
	var ce *core.Error
	if !errors.As(err, &ce) {
		p.t.Fatalf("%s: error %T is not a *core.Error: %v", what, err, err)
	}
	if err.Error() == "" {
		p.t.Fatalf("%s: empty error message", what)
	}
}

func pick[T any](p *prog, s []T) (T, bool) {
	var zero T
	if len(s) == 0 {
		return zero, false
	}
	return s[int(p.u8())%len(s)], true
}

func (p *prog) region() core.Region {
	if r, ok := pick(p, p.regions); ok && p.u8()%8 != 0 {
		return r
	}
	return nil
}

func (p *prog) stream() *core.Stream {
	s, _ := pick(p, p.streams)
	return s
}

var fuzzKernels = []string{"fill_f32", "scale_f16", "axpy_bf16", "add_f32", "mul_f16", "silu_mul_bf16",
	"softcap_f32", "rmsnorm_bf16", "rope_neox_f16", "rope_llama_f32", "embed_bf16", "argmax_f32", "sample_f32",
	"sample_rows_f16", "add_rmsnorm_f32", "rope_neox_freqs_bf16", "nope"}

func (p *prog) arg() core.Arg {
	switch p.u8() % 10 {
	case 0, 1, 2:
		return core.ArgBuffer(p.region())
	case 3:
		return core.ArgScalar(uint64(p.n()))
	case 4:
		return core.ArgScalar(math.Float32frombits(uint32(p.u64())))
	case 5:
		return core.ArgScalar(int32(p.n()))
	case 6:
		return core.ArgF16Bits(uint16(p.u64()))
	case 7:
		return core.ArgBF16Bits(uint16(p.u64()))
	case 8:
		return core.Arg{} // the zero Arg: invalid
	default:
		return core.ArgScalar(float32(1e-5))
	}
}

func (p *prog) args() []core.Arg {
	a := make([]core.Arg, p.u8()%9)
	for i := range a {
		a[i] = p.arg()
	}
	return a
}

func (p *prog) cfg() core.LaunchConfig {
	if p.u8()%4 != 0 {
		return core.Grid1D(p.n(), 32<<(p.u8()%5))
	}
	return core.LaunchConfig{Grid: [3]uint32{uint32(p.n()), uint32(p.u8()), 1},
		Block: [3]uint32{uint32(p.n()), 1, uint32(p.u8() % 3)}, SharedMem: uint32(p.u64())}
}

var fuzzTypes = []core.DType{core.F32, core.F16, core.BF16, core.F64, core.I8, core.FP8E4M3, 0, 99}

func (p *prog) gemm(s *core.Stream) error {
	m, n, k := 1+int(p.u8()%16), 1+int(p.u8()%16), 1+int(p.u8()%16)
	t, _ := pick(p, fuzzTypes[:3])
	d := core.GemmDesc{AType: t, BType: t, DType: t, M: m, N: n, K: k}
	for i := p.u8() % 4; i > 0; i-- {
		switch p.u8() % 12 {
		case 0:
			d.AType, _ = pick(p, fuzzTypes)
		case 1:
			d.DType, _ = pick(p, fuzzTypes)
		case 2:
			d.TransA, d.TransB = p.u8()%2 == 0, p.u8()%2 == 0
		case 3:
			d.M = p.n()
		case 4:
			d.N = p.n()
		case 5:
			d.K = p.n()
		case 6:
			d.LDA, d.LDB = p.n(), p.n()
		case 7:
			d.Batch, d.StrideA, d.StrideD = p.n(), int64(p.n()), int64(p.n())
		case 8:
			d.Epilogue, d.BiasType = core.Epilogue(p.u8()%7), t
		case 9:
			d.RMSNormB = true
		case 10:
			d.SwiGLUB = true
		default:
			d.ConstA = true
		}
	}
	ops := core.GemmOperands{A: p.region(), B: p.region(), D: p.region(), Alpha: 1}
	switch p.u8() % 6 {
	case 0:
		ops.C, ops.Beta = p.region(), 0.5
	case 1:
		ops.Bias = p.region()
	case 2:
		ops.NormWeight, ops.NormEps = p.region(), math.Float64frombits(p.u64())
	case 3:
		ops.Alpha = math.Float64frombits(p.u64())
	}
	return s.Gemm(d, ops)
}

// op runs one operation on s; inside a capture, s is the capturing stream.
func (p *prog) op(s *core.Stream, capturing bool) {
	switch p.u8() % 24 {
	case 0:
		b, err := p.dev.Alloc(p.n())
		p.check("Alloc", err)
		if err == nil {
			p.bufs = append(p.bufs, b)
			p.regions = append(p.regions, b)
		}
	case 1:
		if b, ok := pick(p, p.bufs); ok && !capturing {
			p.check("Buffer.Free", b.Free())
		}
	case 2, 3:
		if b, ok := pick(p, p.bufs); ok {
			v, err := b.View(p.n(), p.n())
			p.check("Buffer.View", err)
			if err == nil {
				p.regions = append(p.regions, v)
				if w, err := v.Sub(p.n(), p.n()); err == nil {
					p.regions = append(p.regions, w)
				} else {
					p.check("View.Sub", err)
				}
			}
		}
	case 4:
		p.check("Stream.CopyDevice", s.CopyDevice(p.region(), p.region()))
	case 5:
		if !capturing {
			p.check("Copy", core.Copy(p.region(), p.region()))
		}
	case 6:
		if !capturing {
			buf := make([]byte, int(uint(p.n())%4096))
			p.check("CopyFromHost", core.CopyFromHost(p.region(), buf))
			p.check("CopyToHost", core.CopyToHost(buf, p.region()))
		}
	case 7:
		switch p.u8() % 3 {
		case 0:
			p.check("Stream.Memset", s.Memset(p.region(), p.u8()))
		case 1:
			p.check("Stream.Memset16", s.Memset16(p.region(), uint16(p.u64())))
		default:
			p.check("Stream.Memset32", s.Memset32(p.region(), uint32(p.u64())))
		}
	case 8:
		if k, ok := pick(p, p.kernels); ok {
			p.check("Stream.Launch", s.Launch(k, p.cfg(), p.args()...))
		}
	case 9:
		b := s.NewLaunchBatch()
		for i := p.u8() % 4; i > 0; i-- {
			if k, ok := pick(p, p.kernels); ok {
				p.check("LaunchBatch.Add", b.Add(k, p.cfg(), p.args()...))
			}
		}
		n, err := b.Submit()
		p.check("LaunchBatch.Submit", err)
		if n < 0 || n > b.Len() {
			p.t.Fatalf("LaunchBatch.Submit: %d enqueued of %d", n, b.Len())
		}
	case 10:
		p.check("Stream.Gemm", p.gemm(s))
	case 11:
		if !capturing {
			m, err := p.dev.BuiltinModule()
			p.check("BuiltinModule", err)
			if err == nil {
				name, _ := pick(p, fuzzKernels)
				k, err := m.Kernel(name)
				p.check("Module.Kernel", err)
				if err == nil {
					p.kernels = append(p.kernels, k)
				}
			}
		}
	case 12:
		if !capturing {
			st, err := p.dev.NewStream()
			p.check("NewStream", err)
			if err == nil {
				p.streams = append(p.streams, st)
			}
		}
	case 13:
		if st := p.stream(); st != nil && !capturing {
			switch p.u8() % 3 {
			case 0:
				p.check("Stream.Synchronize", st.Synchronize())
			case 1:
				_, err := st.Query()
				p.check("Stream.Query", err)
			default:
				p.check("Stream.Close", st.Close())
			}
		}
	case 14:
		if !capturing {
			ev, err := p.dev.NewEvent(p.u8()%2 == 0)
			p.check("NewEvent", err)
			if err == nil {
				p.events = append(p.events, ev)
			}
		}
	case 15:
		if ev, ok := pick(p, p.events); ok {
			switch p.u8() % 5 {
			case 0:
				p.check("Event.Record", ev.Record(s))
			case 1:
				p.check("Stream.WaitEvent", s.WaitEvent(ev))
			case 2:
				if !capturing {
					_, err := ev.Query()
					p.check("Event.Query", err)
				}
			case 3:
				if ev2, ok := pick(p, p.events); ok && !capturing {
					_, err := core.Elapsed(ev, ev2)
					p.check("Elapsed", err)
				}
			default:
				if !capturing {
					p.check("Event.Close", ev.Close())
				}
			}
		}
	case 16:
		if !capturing {
			p.capture(s)
		}
	case 17:
		if g, ok := pick(p, p.graphs); ok && !capturing {
			switch p.u8() % 3 {
			case 0:
				p.check("Graph.Launch", g.Launch(s))
			case 1:
				p.check("Graph.SetArg", g.SetArg(core.Node(p.n()), p.n(), p.arg()))
			default:
				p.check("Graph.Close", g.Close())
			}
		}
	case 18:
		if !capturing {
			var hb *core.HostBuffer
			var err error
			if p.u8()%2 == 0 {
				hb, err = p.rt.AllocHost(p.n() % (1 << 20))
				p.check("AllocHost", err)
			} else {
				hb, err = p.rt.AllocHostFromHeap(p.n() % (1 << 20))
				p.check("AllocHostFromHeap", err)
			}
			if err == nil {
				p.hosts = append(p.hosts, hb)
				p.pinned = append(p.pinned, hb)
				if v, err := hb.View(p.n(), p.n()); err == nil {
					p.pinned = append(p.pinned, v)
				} else {
					p.check("HostBuffer.View", err)
				}
			}
		}
	case 19:
		if pv, ok := pick(p, p.pinned); ok {
			if p.u8()%2 == 0 {
				p.check("Stream.CopyFromPinned", s.CopyFromPinned(p.region(), pv))
			} else {
				p.check("Stream.CopyToPinned", s.CopyToPinned(pv, p.region()))
			}
		}
	case 20:
		if hb, ok := pick(p, p.hosts); ok && !capturing {
			p.check("HostBuffer.Free", hb.Free())
		}
	case 21:
		if !capturing {
			p.check("Device.Synchronize", p.dev.Synchronize())
			p.check("Runtime.Trim", p.rt.Trim())
		}
	case 22:
		if !capturing {
			k := int(p.u8() % 12)
			_, err := p.rt.FindDevice(string(p.in[:min(len(p.in), k)]))
			p.check("FindDevice", err)
		}
	default:
		if !capturing {
			_, err := p.rt.Device(p.n())
			p.check("Runtime.Device", err)
		}
	}
}

// capture records a few operations on s into a graph.
func (p *prog) capture(s *core.Stream) {
	g, err := s.Capture(func(cs *core.Stream) error {
		for i := p.u8() % 5; i > 0; i-- {
			p.op(cs, true)
		}
		return nil
	})
	p.check("Stream.Capture", err)
	if err == nil {
		p.graphs = append(p.graphs, g)
	}
}

func (p *prog) run() {
	s, err := p.dev.NewStream()
	if err != nil {
		p.t.Fatalf("NewStream: %v", err)
	}
	p.streams = append(p.streams, s)
	for steps := 0; len(p.in) > 0 && steps < 64; steps++ {
		st := p.stream()
		if st == nil {
			st = s
		}
		p.op(st, false)
	}
}

// closeAll releases what the program left, in reverse order of kinds
// (graphs hold buffers); every error must still be well formed.
func (p *prog) closeAll() {
	for _, g := range p.graphs {
		p.check("Graph.Close", g.Close())
	}
	for _, s := range p.streams {
		p.check("Stream.Close", s.Close())
	}
	for _, e := range p.events {
		p.check("Event.Close", e.Close())
	}
	for _, b := range p.bufs {
		p.check("Buffer.Free", b.Free())
	}
	for _, h := range p.hosts {
		p.check("HostBuffer.Free", h.Free())
	}
}
