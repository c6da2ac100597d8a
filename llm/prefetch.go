// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"errors"
	"fmt"

	"github.com/metrale/gpurt/core"
)

// L2 prefetch during decode attention (Options.PrefetchL2MiB).
//
// At small batches a decode step's attention reads little (4 MB of K and
// V a layer for an 8B-class model at 1K of context) and is bound by
// latency, so HBM idles while it runs; the output projection and the MLP
// after it are bound by HBM. Just before each layer's attention the step
// launches llm_prefetch_l2, which asks the L2 for the first bytes of that
// layer's output projection and then of its gate/up weights
// (cp.async.bulk.prefetch.L2: no registers, no completion to wait for;
// the kernel lets the attention start at once and exits), so those GEMMs
// find part of their weights in the L2. It changes no result: a prefetch
// is a hint.
//
// The kernel is PTX for sm_90 (the bulk prefetch is Hopper's), loaded as
// a module of the model's own; a plugin that does not load PTX (the mock,
// Metal) or a GPU before sm_90 refuses the option at NewModelWith.

// prefetchModule is the module's registry name on the device.
const prefetchModule = "llm_prefetch"

// prefetchPTX is llm_prefetch_l2(a0, n0, a1, n1, a2, n2, a3, n3): block
// row y of the grid asks the L2 for bytes [a_y, a_y + n_y) (y < 4),
// 16 KiB a thread and instruction, grid-stride over x. The start is
// rounded up and the end down to 16 bytes (the instruction's alignment),
// so nothing outside the region is asked for. Its first instruction lets
// the kernel after it be scheduled (programmatic dependent launch).
const prefetchPTX = `
.version 8.0
.target sm_90
.address_size 64

.visible .entry llm_prefetch_l2(
	.param .u64 a0, .param .u64 n0, .param .u64 a1, .param .u64 n1,
	.param .u64 a2, .param .u64 n2, .param .u64 a3, .param .u64 n3)
{
	.reg .pred %p<4>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<24>;

	griddepcontrol.launch_dependents;
	ld.param.u64 %rd0, [a0];
	ld.param.u64 %rd1, [n0];
	ld.param.u64 %rd2, [a1];
	ld.param.u64 %rd3, [n1];
	ld.param.u64 %rd4, [a2];
	ld.param.u64 %rd5, [n2];
	ld.param.u64 %rd6, [a3];
	ld.param.u64 %rd7, [n3];
	mov.u32 %r0, %ctaid.y;
	setp.eq.u32 %p0, %r0, 1;
	selp.b64 %rd0, %rd2, %rd0, %p0;
	selp.b64 %rd1, %rd3, %rd1, %p0;
	setp.eq.u32 %p0, %r0, 2;
	selp.b64 %rd0, %rd4, %rd0, %p0;
	selp.b64 %rd1, %rd5, %rd1, %p0;
	setp.eq.u32 %p0, %r0, 3;
	selp.b64 %rd0, %rd6, %rd0, %p0;
	selp.b64 %rd1, %rd7, %rd1, %p0;
	// [start, end): the region with its ends rounded inward to 16 bytes.
	add.u64 %rd8, %rd0, %rd1;
	and.b64 %rd8, %rd8, -16;
	add.u64 %rd9, %rd0, 15;
	and.b64 %rd9, %rd9, -16;
	// this thread's first piece and the grid's stride, 16 KiB pieces
	mov.u32 %r1, %ctaid.x;
	mov.u32 %r2, %ntid.x;
	mov.u32 %r3, %tid.x;
	mad.wide.u32 %rd10, %r1, %r2, 0;
	cvt.u64.u32 %rd11, %r3;
	add.u64 %rd10, %rd10, %rd11;
	shl.b64 %rd10, %rd10, 14;
	add.u64 %rd10, %rd9, %rd10;
	mov.u32 %r4, %nctaid.x;
	mul.wide.u32 %rd12, %r4, %r2;
	shl.b64 %rd12, %rd12, 14;
LOOP:
	setp.ge.u64 %p1, %rd10, %rd8;
	@%p1 bra DONE;
	sub.u64 %rd13, %rd8, %rd10;
	min.u64 %rd13, %rd13, 16384;
	cvt.u32.u64 %r5, %rd13;
	cp.async.bulk.prefetch.L2.global [%rd10], %r5;
	add.u64 %rd10, %rd10, %rd12;
	bra LOOP;
DONE:
	ret;
}
`

// prefetchPiece is the bytes one thread asks for per instruction.
const prefetchPiece = 16 << 10

// prefetcher is the loaded kernel and, per layer, the launch that asks
// for that layer's regions before its attention (built once: a step's
// launches allocate nothing).
type prefetcher struct {
	k      *core.Kernel
	layers []prefetchLaunch
}

type prefetchLaunch struct {
	rs   []core.Region // what is asked for: the first ns[i] bytes of rs[i]
	ns   []int
	cfg  core.LaunchConfig
	args []core.Arg // (region, bytes) four times; nil: nothing to ask for
}

// newPrefetcher loads the kernel on m's device and plans its launches
// (planPrefetch).
func newPrefetcher(m *Model, budget int) (*prefetcher, error) {
	if b := m.rt.Backend(); b != "cuda" {
		return nil, fmt.Errorf("llm: PrefetchL2MiB needs the cuda backend (its kernel is PTX for sm_90); this runtime's is %s", b)
	}
	if info := m.dev.Info(); info.ComputeMajor < 9 {
		return nil, fmt.Errorf("llm: PrefetchL2MiB needs an sm_90 or newer GPU (the L2 bulk prefetch); %s is sm_%d%d", info.Name, info.ComputeMajor, info.ComputeMinor)
	}
	mod, err := m.dev.Module(prefetchModule)
	if errors.Is(err, core.ErrNotFound) {
		mod, err = m.dev.LoadModule(prefetchModule, core.ModulePTX, []byte(prefetchPTX))
	}
	if err != nil {
		return nil, fmt.Errorf("llm: PrefetchL2MiB: loading the prefetch kernel: %w", err)
	}
	k, err := mod.Kernel("llm_prefetch_l2")
	if err != nil {
		return nil, fmt.Errorf("llm: PrefetchL2MiB: %w", err)
	}
	return &prefetcher{k: k, layers: planPrefetch(m.layers, budget)}, nil
}

// planPrefetch is, for each layer, the launch that asks for up to budget
// bytes: the output projection's weights (int8: its scales, biases and
// codes) and then the start of the gate/up weights (one GEMM's at one
// token, wgu1); four regions at most.
func planPrefetch(layers []layer, budget int) []prefetchLaunch {
	out := make([]prefetchLaunch, len(layers))
	for l := range layers {
		L, pl := &layers[l], &out[l]
		left := budget
		add := func(r core.Region) {
			if r == nil || r.Len() == 0 || left <= 0 || len(pl.rs) == 4 {
				return
			}
			n := min(r.Len(), left)
			pl.rs, pl.ns = append(pl.rs, r), append(pl.ns, n)
			left -= n
		}
		for _, lin := range []linear{L.wo, L.wgu1} {
			if lin.qw != nil {
				add(lin.qs)
				add(lin.qb)
				add(lin.qw)
			} else {
				add(lin.w)
			}
		}
		if len(pl.rs) == 0 {
			continue
		}
		most := 0
		pl.args = make([]core.Arg, 0, 8)
		for i := 0; i < 4; i++ {
			r, n := pl.rs[min(i, len(pl.rs)-1)], 0
			if i < len(pl.rs) {
				n = pl.ns[i]
			}
			most = max(most, n)
			pl.args = append(pl.args, core.ArgBuffer(r), core.ArgScalar[uint64](uint64(n)))
		}
		threads := (most + prefetchPiece - 1) / prefetchPiece
		pl.cfg = core.LaunchConfig{Grid: [3]uint32{uint32((threads + 127) / 128), uint32(len(pl.rs)), 1}, Block: [3]uint32{128, 1, 1}}
	}
	return out
}

// launch asks the L2 for layer l's regions (nothing when it has none).
func (p *prefetcher) launch(s *core.Stream, l int) error {
	pl := &p.layers[l]
	if pl.args == nil {
		return nil
	}
	if err := s.Launch(p.k, pl.cfg, pl.args...); err != nil {
		return fmt.Errorf("llm: layer %d L2 prefetch: %w", l, err)
	}
	return nil
}
