// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/collective"
	"github.com/metrale/gpurt/core/inspect"
)

// Several devices: peer copies, device choice and the collectives of ABI
// 1.6, on every device of the runtime (the mock in CI runs them with 2, 3
// and 8 devices), against float64 references on random data. A runtime
// with one device skips them; a plugin older than 1.6 skips the
// collectives (peer copies and device choice still run).
//
// Tolerance of a sum, per element: nranks * eps * sum_r |x_r|, with eps
// the dtype's unit (2^-23 f32, 2^-10 f16, 2^-7 bf16): NCCL reduces in
// the element type along its ring or tree, rounding once per step. A max
// is exact. A wrong rank, block or offset is off by about a value and
// fails.

func commChecks() []check {
	cs := []check{
		{"peer/copy", peerCopy},
		{"peer/find_device", peerFindDevice},
	}
	add := func(name string, fn func(e *env) error) {
		cs = append(cs, check{"comm/" + name, func(e *env) error {
			if err := has16(e); err != nil {
				return err
			}
			if len(e.rt.Devices()) < 2 {
				return skip("the runtime has %d device; collectives need 2 or more", len(e.rt.Devices()))
			}
			return fn(e)
		}})
	}
	for _, dt := range []core.DType{core.F32, core.F16, core.BF16} {
		for _, red := range []collective.ReduceOp{collective.ReduceSum, collective.ReduceMax} {
			add(fmt.Sprintf("all_reduce/%v/%s", dt, redName(red)), func(e *env) error {
				return commReduce(e, collective.AllReduce, dt, red, commCount(e), false)
			})
		}
		add(fmt.Sprintf("reduce_scatter/%v/sum", dt), func(e *env) error {
			return commReduce(e, collective.ReduceScatter, dt, collective.ReduceSum, commCount(e)/4+1, false)
		})
	}
	add("reduce_scatter/f32/max", func(e *env) error {
		return commReduce(e, collective.ReduceScatter, core.F32, collective.ReduceMax, 333, false)
	})
	add("all_reduce/in_place", func(e *env) error {
		return commReduce(e, collective.AllReduce, core.BF16, collective.ReduceSum, 1000, true)
	})
	add("all_reduce/sizes", func(e *env) error {
		for _, n := range []int{1, 2, 7, 64, 1023, 4099} {
			if err := commReduce(e, collective.AllReduce, core.F32, collective.ReduceSum, n, false); err != nil {
				return fmt.Errorf("count %d: %w", n, err)
			}
		}
		return nil
	})
	add("all_gather", func(e *env) error { return commMove(e, collective.AllGather, 777) })
	add("broadcast", func(e *env) error { return commMove(e, collective.Broadcast, 1001) })
	add("send_recv_ring", func(e *env) error { return commMove(e, collective.Send, 513) })
	add("group_mixed", commGroupMixed)
	add("count_zero", commCountZero)
	add("multi_runtime", commMultiRuntime)
	add("misuse", commMisuse)
	add("join_timeout", commJoinTimeout)
	add("abort", commAbort)
	return cs
}

func has16(e *env) error {
	if _, _, minor := inspect.PluginVersion(e.rt); minor < 6 {
		return skip("the plugin speaks ABI 1.%d; collectives need 1.6", minor)
	}
	return nil
}

func redName(r collective.ReduceOp) string {
	if r == collective.ReduceMax {
		return "max"
	}
	return "sum"
}

// commCount is the element count of the main checks.
func commCount(e *env) int {
	if e.opts.Quick || e.dev.Info().Arch == "cpu" {
		return 4096 + 3
	}
	return 1<<22 + 3
}

func dtEps(t core.DType) float64 {
	switch t {
	case core.F16:
		return 0x1p-10
	case core.BF16:
		return 0x1p-7
	}
	return 0x1p-23
}

// ranks is one stream per device and the buffers of a check.
type ranks struct {
	devs    []*core.Device
	streams []*core.Stream
	bufs    []*core.Buffer
}

func newRanks(e *env, devs []*core.Device) (*ranks, error) {
	r := &ranks{devs: devs}
	for _, d := range devs {
		s, err := d.NewStream()
		if err != nil {
			r.close()
			return nil, err
		}
		r.streams = append(r.streams, s)
	}
	return r, nil
}

func (r *ranks) alloc(d *core.Device, n int) (*core.Buffer, error) {
	b, err := d.Alloc(max(n, 1))
	if err != nil {
		return nil, err
	}
	r.bufs = append(r.bufs, b)
	return b, nil
}

// upload allocates a buffer of len(data) bytes (at least n) on d and
// fills it.
func (r *ranks) upload(d *core.Device, data []byte, n int) (*core.Buffer, error) {
	b, err := r.alloc(d, max(n, len(data)))
	if err != nil {
		return nil, err
	}
	if len(data) > 0 {
		if err := core.CopyFromHost(b, data); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (r *ranks) sync() error {
	for _, s := range r.streams {
		if err := s.Synchronize(); err != nil {
			return err
		}
	}
	return nil
}

// run runs ops as one group of c, waits for every rank's stream, and
// returns the first error of the three, c's own last.
func (r *ranks) run(c *collective.Comm, ops ...collective.Op) error {
	return firstErrOf(func() error { return c.Run(ops...) }, r.sync, c.Err)
}

func (r *ranks) close() {
	for _, s := range r.streams {
		_ = s.Synchronize()
	}
	for _, b := range r.bufs {
		_ = b.Free()
	}
	for _, s := range r.streams {
		_ = s.Close()
	}
}

func download(b core.Region, n int) ([]byte, error) {
	out := make([]byte, n)
	return out, core.CopyToHost(out, b)
}

func openComm(e *env) (*collective.Comm, *ranks, error) {
	devs := e.rt.Devices()
	r, err := newRanks(e, devs)
	if err != nil {
		return nil, nil, err
	}
	c, err := collective.New(e.rt, devs...)
	if err != nil {
		r.close()
		return nil, nil, err
	}
	return c, r, nil
}

func closeComm(c *collective.Comm, r *ranks) {
	_ = r.sync()
	_ = c.Close()
	r.close()
}

// commReduce checks all_reduce or reduce_scatter of count (per-rank
// result) elements.
func commReduce(e *env, kind collective.Kind, dt core.DType, red collective.ReduceOp, count int, inPlace bool) error {
	c, r, err := openComm(e)
	if err != nil {
		return err
	}
	defer closeComm(c, r)
	n := c.NRanks()
	in := count
	if kind == collective.ReduceScatter {
		in = count * n
	}
	es := dt.Size()
	vals := make([][]float64, n)
	ops := make([]collective.Op, n)
	recvs := make([]*core.Buffer, n)
	for k := 0; k < n; k++ {
		vals[k] = randomValues(e.rng, dt, in, 4)
		send, err := r.upload(r.devs[k], encode(dt, vals[k]), in*es)
		if err != nil {
			return err
		}
		recv := send
		if !inPlace {
			p := make([]byte, count*es)
			poison(p)
			if recv, err = r.upload(r.devs[k], p, count*es); err != nil {
				return err
			}
		}
		recvs[k] = recv
		ops[k] = collective.Op{Kind: kind, DType: dt, Reduce: red, Rank: k, Count: count, Stream: r.streams[k], Send: send, Recv: recv}
	}
	if err := r.run(c, ops...); err != nil {
		return err
	}
	for k := 0; k < n; k++ {
		raw, err := download(recvs[k], count*es)
		if err != nil {
			return err
		}
		got := decode(dt, raw)
		base := 0
		if kind == collective.ReduceScatter {
			base = k * count
		}
		for i := 0; i < count; i++ {
			acc, mag := vals[0][base+i], math.Abs(vals[0][base+i])
			for q := 1; q < n; q++ {
				x := vals[q][base+i]
				if red == collective.ReduceMax {
					acc = math.Max(acc, x)
				} else {
					acc += x
				}
				mag += math.Abs(x)
			}
			want := roundTo(dt, acc)
			tol := 0.0
			if red == collective.ReduceSum {
				tol = float64(n)*dtEps(dt)*mag + 1e-30
			}
			if d := math.Abs(got[i] - want); !(d <= tol) {
				return fmt.Errorf("%v %s of %d %v on %d ranks: rank %d element %d is %g, want %g (tolerance %g)",
					kind, redName(red), count, dt, n, k, i, got[i], want, tol)
			}
		}
	}
	return nil
}

// commMove checks all_gather, broadcast (root: the last rank) or a ring
// of send/recv (rank k sends to k+1, receives from k-1, one group).
func commMove(e *env, kind collective.Kind, count int) error {
	c, r, err := openComm(e)
	if err != nil {
		return err
	}
	defer closeComm(c, r)
	n := c.NRanks()
	dt := core.F16
	es := dt.Size()
	data := make([][]byte, n)
	recvs := make([]*core.Buffer, n)
	var ops []collective.Op
	outN := count * es
	if kind == collective.AllGather {
		outN *= n
	}
	root := n - 1
	for k := 0; k < n; k++ {
		data[k] = randomBytes(e.rng, count*es)
		send, err := r.upload(r.devs[k], data[k], count*es)
		if err != nil {
			return err
		}
		p := make([]byte, outN)
		poison(p)
		if recvs[k], err = r.upload(r.devs[k], p, outN); err != nil {
			return err
		}
		switch kind {
		case collective.AllGather:
			ops = append(ops, collective.Op{Kind: kind, DType: dt, Rank: k, Count: count, Stream: r.streams[k], Send: send, Recv: recvs[k]})
		case collective.Broadcast:
			o := collective.Op{Kind: kind, DType: dt, Rank: k, Peer: root, Count: count, Stream: r.streams[k], Recv: recvs[k]}
			if k == root {
				o.Send = send
			}
			ops = append(ops, o)
		default: // ring: the recv first on even ranks, the send first on odd ones (a group has no order)
			sendOp := collective.Op{Kind: collective.Send, DType: dt, Rank: k, Peer: (k + 1) % n, Count: count, Stream: r.streams[k], Send: send}
			recvOp := collective.Op{Kind: collective.Recv, DType: dt, Rank: k, Peer: (k + n - 1) % n, Count: count, Stream: r.streams[k], Recv: recvs[k]}
			if k%2 == 0 {
				ops = append(ops, recvOp, sendOp)
			} else {
				ops = append(ops, sendOp, recvOp)
			}
		}
	}
	if err := r.run(c, ops...); err != nil {
		return err
	}
	for k := 0; k < n; k++ {
		got, err := download(recvs[k], outN)
		if err != nil {
			return err
		}
		var want []byte
		switch kind {
		case collective.AllGather:
			want = bytes.Join(data, nil)
		case collective.Broadcast:
			want = data[root]
		default:
			want = data[(k+n-1)%n]
		}
		if i := firstDiff(got, want); i >= 0 {
			return fmt.Errorf("%v of %d f16 on %d ranks: rank %d differs at byte %d", kind, count, n, k, i)
		}
	}
	return nil
}

// commGroupMixed runs an all_reduce, an all_gather and a send/recv pair
// in one group, then a second group on the same buffers (ordering).
func commGroupMixed(e *env) error {
	c, r, err := openComm(e)
	if err != nil {
		return err
	}
	defer closeComm(c, r)
	n := c.NRanks()
	const cnt = 300
	vals := make([][]float64, n)
	red := make([]*core.Buffer, n)
	gat := make([]*core.Buffer, n)
	var ops []collective.Op
	for k := 0; k < n; k++ {
		vals[k] = randomValues(e.rng, core.F32, cnt, 2)
		if red[k], err = r.upload(r.devs[k], encode(core.F32, vals[k]), 0); err != nil {
			return err
		}
		if gat[k], err = r.alloc(r.devs[k], cnt*4*n); err != nil {
			return err
		}
		ops = append(ops,
			collective.Op{Kind: collective.AllReduce, DType: core.F32, Rank: k, Count: cnt, Stream: r.streams[k], Send: red[k], Recv: red[k]},
			collective.Op{Kind: collective.AllGather, DType: core.F32, Rank: k, Count: cnt, Stream: r.streams[k], Send: red[k], Recv: gat[k]})
	}
	if err := c.Run(ops...); err != nil {
		return err
	}
	// A second group reads what the first wrote: all_reduce again in place.
	ops = ops[:0]
	for k := 0; k < n; k++ {
		ops = append(ops, collective.Op{Kind: collective.AllReduce, DType: core.F32, Rank: k, Count: cnt, Stream: r.streams[k], Send: red[k], Recv: red[k]})
	}
	if err := c.Run(ops...); err != nil {
		return err
	}
	if err := r.sync(); err != nil {
		return err
	}
	for k := 0; k < n; k++ {
		raw, err := download(gat[k], cnt*4*n)
		if err != nil {
			return err
		}
		g := decode(core.F32, raw)
		raw2, err := download(red[k], cnt*4)
		if err != nil {
			return err
		}
		twice := decode(core.F32, raw2)
		for i := 0; i < cnt; i++ {
			sum, mag := 0.0, 0.0
			for q := 0; q < n; q++ {
				sum += vals[q][i]
				mag += math.Abs(vals[q][i])
			}
			tol := 2 * float64(n) * dtEps(core.F32) * mag * float64(n)
			for q := 0; q < n; q++ { // every block of the gather is the first reduction
				if d := math.Abs(g[q*cnt+i] - sum); !(d <= tol) {
					return fmt.Errorf("rank %d: all_gather block %d element %d is %g, want the first all_reduce's %g", k, q, i, g[q*cnt+i], sum)
				}
			}
			if d := math.Abs(twice[i] - float64(n)*sum); !(d <= tol*float64(n)) {
				return fmt.Errorf("rank %d: element %d after two all_reduces is %g, want %g", k, i, twice[i], float64(n)*sum)
			}
		}
	}
	return c.Err()
}

// commCountZero: count 0 is a no-op (nil regions allowed).
func commCountZero(e *env) error {
	c, r, err := openComm(e)
	if err != nil {
		return err
	}
	defer closeComm(c, r)
	var ops []collective.Op
	for k := 0; k < c.NRanks(); k++ {
		ops = append(ops, collective.Op{Kind: collective.AllReduce, DType: core.F32, Rank: k, Stream: r.streams[k]})
	}
	return r.run(c, ops...)
}

// commMultiRuntime: one runtime per rank (as one process per GPU would
// be), joined by a unique id made in the first; an all_reduce and a
// send/recv between ranks 0 and 1.
func commMultiRuntime(e *env) error {
	if e.opts.OpenRuntime == nil {
		return skip("no OpenRuntime: a second runtime is needed")
	}
	n := min(len(e.rt.Devices()), 4)
	rts := []*core.Runtime{e.rt}
	defer func() {
		for _, rt := range rts[1:] {
			_ = rt.Close()
		}
	}()
	for len(rts) < n {
		rt, err := e.opts.OpenRuntime()
		if err != nil {
			return err
		}
		rts = append(rts, rt)
		if len(rt.Devices()) < n {
			return fmt.Errorf("a new runtime has %d devices, the first %d", len(rt.Devices()), n)
		}
	}
	id, err := collective.NewID(e.rt)
	if err != nil {
		return err
	}
	const cnt = 1000
	vals := make([][]float64, n)
	out := make([][]float64, n)
	p2p := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for k := 0; k < n; k++ {
		vals[k] = randomValues(e.rng, core.BF16, cnt, 3)
		p2p[k] = randomBytes(e.rng, 96)
	}
	for k := 0; k < n; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			errs[k] = func() error {
				d, err := rts[k].Device(k)
				if err != nil {
					return err
				}
				c, err := collective.Join(rts[k], collective.JoinConfig{ID: id, NRanks: n, FirstRank: k, Devices: []*core.Device{d}, Timeout: 30 * time.Second})
				if err != nil {
					return err
				}
				r, err := newRanks(e, []*core.Device{d})
				if err != nil {
					_ = c.Close()
					return err
				}
				defer closeComm(c, r)
				b, err := r.upload(d, encode(core.BF16, vals[k]), 0)
				if err != nil {
					return err
				}
				pb, err := r.upload(d, p2p[k], 0)
				if err != nil {
					return err
				}
				ops := []collective.Op{{Kind: collective.AllReduce, DType: core.BF16, Rank: k, Count: cnt, Stream: r.streams[0], Send: b, Recv: b}}
				switch k {
				case 0:
					ops = append(ops, collective.Op{Kind: collective.Send, DType: core.U8, Rank: 0, Peer: 1, Count: 96, Stream: r.streams[0], Send: pb})
				case 1:
					ops = append(ops, collective.Op{Kind: collective.Recv, DType: core.U8, Rank: 1, Peer: 0, Count: 96, Stream: r.streams[0], Recv: pb})
				}
				if err := r.run(c, ops...); err != nil {
					return err
				}
				raw, err := download(b, cnt*2)
				if err != nil {
					return err
				}
				out[k] = decode(core.BF16, raw)
				if k == 1 {
					got, err := download(pb, 96)
					if err != nil {
						return err
					}
					if i := firstDiff(got, p2p[0]); i >= 0 {
						return fmt.Errorf("rank 1's recv from rank 0 differs at byte %d", i)
					}
				}
				return nil
			}()
		}(k)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for k := 0; k < n; k++ {
		for i := 0; i < cnt; i++ {
			sum, mag := 0.0, 0.0
			for q := 0; q < n; q++ {
				sum += vals[q][i]
				mag += math.Abs(vals[q][i])
			}
			want := roundTo(core.BF16, sum)
			if d := math.Abs(out[k][i] - want); !(d <= float64(n)*dtEps(core.BF16)*mag) {
				return fmt.Errorf("rank %d (own runtime) element %d is %g, want %g", k, i, out[k][i], want)
			}
		}
	}
	return nil
}

// commMisuse: what a caller can get wrong is an error naming it, and the
// communicator still works afterwards.
func commMisuse(e *env) error {
	c, r, err := openComm(e)
	if err != nil {
		return err
	}
	n := c.NRanks()
	bufs := make([]*core.Buffer, n)
	for k := range bufs {
		if bufs[k], err = r.alloc(r.devs[k], 256); err != nil {
			closeComm(c, r)
			return err
		}
	}
	all := func(count int) []collective.Op {
		var ops []collective.Op
		for k := 0; k < n; k++ {
			ops = append(ops, collective.Op{Kind: collective.AllReduce, DType: core.F32, Rank: k, Count: count, Stream: r.streams[k], Send: bufs[k], Recv: bufs[k]})
		}
		return ops
	}
	small, _ := bufs[0].View(0, 16)
	freed, err := r.devs[0].Alloc(64)
	if err != nil {
		closeComm(c, r)
		return err
	}
	_ = freed.Free()
	for _, m := range []struct {
		name string
		ops  func() []collective.Op
		want error
	}{
		{"mismatched counts", func() []collective.Op { o := all(16); o[n-1].Count = 8; return o }, core.ErrInvalidArgument},
		{"mismatched kinds", func() []collective.Op { o := all(4); o[1].Kind = collective.AllGather; return o }, core.ErrInvalidArgument},
		{"a rank missing", func() []collective.Op { return all(16)[:n-1] }, core.ErrInvalidArgument},
		{"stream of another device", func() []collective.Op { o := all(16); o[0].Stream = r.streams[1]; return o }, core.ErrInvalidArgument},
		{"buffer of another device", func() []collective.Op { o := all(16); o[0].Recv = bufs[1]; return o }, core.ErrInvalidArgument},
		{"view too small", func() []collective.Op { o := all(16); o[0].Recv = small; return o }, core.ErrOutOfRange},
		{"buffer too small", func() []collective.Op { return all(65) }, core.ErrOutOfRange},
		{"freed buffer", func() []collective.Op { o := all(4); o[0].Send = freed; return o }, core.ErrFreed},
		{"rank outside", func() []collective.Op { o := all(16); o[0].Rank = n; return o }, core.ErrInvalidArgument},
		{"reduce of int32", func() []collective.Op {
			o := all(16)
			for k := range o {
				o[k].DType = core.I32
			}
			return o
		}, core.ErrUnsupported},
		{"send without its recv", func() []collective.Op {
			return []collective.Op{{Kind: collective.Send, DType: core.U8, Rank: 0, Peer: 1, Count: 8, Stream: r.streams[0], Send: bufs[0]}}
		}, core.ErrInvalidArgument},
		{"send and recv of different sizes", func() []collective.Op {
			return []collective.Op{{Kind: collective.Send, DType: core.U8, Rank: 0, Peer: 1, Count: 8, Stream: r.streams[0], Send: bufs[0]},
				{Kind: collective.Recv, DType: core.U8, Rank: 1, Peer: 0, Count: 4, Stream: r.streams[1], Recv: bufs[1]}}
		}, core.ErrInvalidArgument},
		{"recv with a send region", func() []collective.Op {
			return []collective.Op{{Kind: collective.Recv, DType: core.U8, Rank: 1, Peer: 0, Count: 4, Stream: r.streams[1], Recv: bufs[1], Send: bufs[1]}}
		}, core.ErrInvalidArgument},
		{"no stream", func() []collective.Op { o := all(16); o[0].Stream = nil; return o }, core.ErrInvalidArgument},
		{"empty group", func() []collective.Op { return nil }, core.ErrInvalidArgument},
	} {
		if err := expect(m.name, c.Run(m.ops()...), m.want); err != nil {
			closeComm(c, r)
			return err
		}
	}
	if len(r.streams) > 1 {
		s2, err := r.devs[0].NewStream()
		if err != nil {
			closeComm(c, r)
			return err
		}
		o := all(4)
		o = append(o, collective.Op{Kind: collective.AllReduce, DType: core.F32, Rank: 0, Count: 4, Stream: s2, Send: bufs[0], Recv: bufs[0]})
		err = expect("a second stream for a rank", c.Run(o...), core.ErrInvalidArgument)
		_ = s2.Close()
		if err != nil {
			closeComm(c, r)
			return err
		}
	}
	if _, err := collective.New(e.rt, r.devs[0], r.devs[0]); expect("a device twice", err, core.ErrInvalidArgument) != nil {
		closeComm(c, r)
		return expect("a device twice", err, core.ErrInvalidArgument)
	}
	// Still healthy: a good group runs.
	if err := c.Run(all(16)...); err != nil {
		closeComm(c, r)
		return fmt.Errorf("a good group after the misuse: %w", err)
	}
	if err := c.Err(); err != nil {
		closeComm(c, r)
		return err
	}
	closeComm(c, r)
	if err := expect("run after close", c.Run(all(16)...), core.ErrClosed); err != nil {
		return err
	}
	return expect("close twice", c.Close(), core.ErrClosed)
}

// commJoinTimeout: a rank that never comes makes collective.Join fail after its
// timeout with ErrUnavailable (and not hang).
func commJoinTimeout(e *env) error {
	id, err := collective.NewID(e.rt)
	if err != nil {
		return err
	}
	d := e.rt.Devices()[0]
	t0 := time.Now()
	c, err := collective.Join(e.rt, collective.JoinConfig{ID: id, NRanks: 2, FirstRank: 0, Devices: []*core.Device{d}, Timeout: 300 * time.Millisecond})
	if err == nil {
		_ = c.Close()
		return fmt.Errorf("Join of rank 0 of 2 succeeded without rank 1")
	}
	if err := expect("join without the other rank", err, core.ErrUnavailable); err != nil {
		return err
	}
	if el := time.Since(t0); el > 20*time.Second {
		return fmt.Errorf("Join took %v to time out (asked 300ms)", el)
	}
	return nil
}

// commAbort: after Abort, Run and Err fail with ErrFailedPrecondition and
// Close frees. On the mock, a rank of another runtime that issues a
// collective nobody else issues is released by the abort.
func commAbort(e *env) error {
	c, r, err := openComm(e)
	if err != nil {
		return err
	}
	defer r.close()
	if err := c.Abort(); err != nil {
		_ = c.Close()
		return err
	}
	errRun := c.Run(collective.Op{Kind: collective.AllReduce, DType: core.F32, Rank: 0, Stream: r.streams[0]})
	errQ := c.Err()
	if err := c.Close(); err != nil {
		return fmt.Errorf("close after abort: %w", err)
	}
	if err := expect("run after abort", errRun, core.ErrFailedPrecondition); err != nil {
		return err
	}
	if err := expect("err after abort", errQ, core.ErrFailedPrecondition); err != nil {
		return err
	}
	if e.rt.Backend() != "mock" {
		return nil
	}
	// The mock reports a mismatch between handles (processes) through Err.
	if e.opts.OpenRuntime == nil {
		return nil
	}
	rt2, err := e.opts.OpenRuntime()
	if err != nil {
		return err
	}
	defer rt2.Close()
	id, err := collective.NewID(e.rt)
	if err != nil {
		return err
	}
	var c1 *collective.Comm
	var err1 error
	done := make(chan struct{})
	go func() {
		defer close(done)
		d1, _ := rt2.Device(1)
		c1, err1 = collective.Join(rt2, collective.JoinConfig{ID: id, NRanks: 2, FirstRank: 1, Devices: []*core.Device{d1}, Timeout: 10 * time.Second})
	}()
	c0, err := collective.Join(e.rt, collective.JoinConfig{ID: id, NRanks: 2, FirstRank: 0, Devices: []*core.Device{r.devs[0]}, Timeout: 10 * time.Second})
	<-done
	if err != nil || err1 != nil {
		if c0 != nil {
			_ = c0.Close()
		}
		if c1 != nil {
			_ = c1.Close()
		}
		return errors.Join(err, err1)
	}
	r1, err := newRanks(e, []*core.Device{c1Dev(c1)})
	if err != nil {
		_ = c0.Close()
		_ = c1.Close()
		return err
	}
	defer r1.close()
	b0, err0 := r.alloc(r.devs[0], 64)
	b1, err1 := r1.alloc(c1Dev(c1), 64)
	if err := errors.Join(err0, err1); err != nil {
		_ = c0.Close()
		_ = c1.Close()
		return err
	}
	e0 := c0.Run(collective.Op{Kind: collective.AllReduce, DType: core.F32, Rank: 0, Count: 16, Stream: r.streams[0], Send: b0, Recv: b0})
	e1 := c1.Run(collective.Op{Kind: collective.AllReduce, DType: core.F32, Rank: 1, Count: 8, Stream: r1.streams[0], Send: b1, Recv: b1})
	_ = r.sync()
	_ = r1.sync()
	q := c0.Err()
	_ = c0.Abort()
	_ = c1.Abort()
	_ = c0.Close()
	_ = c1.Close()
	if err := errors.Join(e0, e1); err != nil {
		return err
	}
	if err := expect("a count mismatch between runtimes", q, core.ErrInvalidArgument); err != nil {
		return err
	}
	if !strings.Contains(q.Error(), "16") || !strings.Contains(q.Error(), "8") {
		return fmt.Errorf("the mismatch error does not name both counts: %v", q)
	}
	return nil
}

func c1Dev(c *collective.Comm) *core.Device {
	first, _ := c.LocalRanks()
	d, _ := c.Device(first)
	return d
}

// peerCopy copies between device 0 and every other device, both ways,
// synchronously and on a stream of either device, at odd offsets.
func peerCopy(e *env) error {
	devs := e.rt.Devices()
	if len(devs) < 2 {
		return skip("the runtime has %d device; peer copies need 2 or more", len(devs))
	}
	const n = 4096 + 13
	for k := 1; k < len(devs); k++ {
		for _, pair := range [][2]*core.Device{{devs[0], devs[k]}, {devs[k], devs[0]}} {
			src, err := pair[0].Alloc(n + 64)
			if err != nil {
				return err
			}
			dst, err := pair[1].Alloc(n + 64)
			if err != nil {
				_ = src.Free()
				return err
			}
			err = func() error {
				data := randomBytes(e.rng, n+64)
				if err := core.CopyFromHost(src, data); err != nil {
					return err
				}
				sv, _ := src.View(7, n)
				dv, _ := dst.View(3, n)
				check := func(how string) error {
					got := make([]byte, n)
					if err := core.CopyToHost(got, dv); err != nil {
						return err
					}
					if i := firstDiff(got, data[7:7+n]); i >= 0 {
						return fmt.Errorf("%s copy %v -> %v differs at byte %d", how, pair[0], pair[1], i)
					}
					return core.Memset(dst, 0xEE)
				}
				if err := core.Copy(dv, sv); err != nil {
					return fmt.Errorf("synchronous peer copy %v -> %v: %w", pair[0], pair[1], err)
				}
				if err := check("synchronous"); err != nil {
					return err
				}
				for i, d := range pair {
					s, err := d.NewStream()
					if err != nil {
						return err
					}
					err = s.CopyDevice(dv, sv)
					if err == nil {
						err = s.Synchronize()
					}
					_ = s.Close()
					if err != nil {
						return fmt.Errorf("peer copy %v -> %v on a stream of the %s: %w", pair[0], pair[1], [2]string{"source", "destination"}[i], err)
					}
					if err := check("stream"); err != nil {
						return err
					}
				}
				return nil
			}()
			_ = src.Free()
			_ = dst.Free()
			if err != nil {
				return err
			}
		}
	}
	if len(devs) >= 3 { // a stream on neither device is refused
		s, err := devs[2].NewStream()
		if err != nil {
			return err
		}
		defer s.Close()
		a, err := devs[0].Alloc(64)
		if err != nil {
			return err
		}
		defer a.Free()
		b, err := devs[1].Alloc(64)
		if err != nil {
			return err
		}
		defer b.Free()
		if err := expect("peer copy on a third device's stream", s.CopyDevice(b, a), core.ErrInvalidArgument); err != nil {
			return err
		}
	}
	return nil
}

// peerFindDevice finds every device by index, UUID and PCI bus id.
func peerFindDevice(e *env) error {
	for i, d := range e.rt.Devices() {
		info := d.Info()
		names := []string{fmt.Sprint(i)}
		if info.UUID != "" {
			names = append(names, info.UUID, strings.ToUpper(info.UUID[:12]))
		}
		if info.PCIBusID != "" {
			names = append(names, info.PCIBusID, strings.ToLower(info.PCIBusID))
			if p := strings.SplitN(info.PCIBusID, ":", 2); len(p) == 2 && strings.Trim(p[0], "0") == "" {
				names = append(names, p[1], "0000"+info.PCIBusID)
			}
		}
		for _, name := range names {
			got, err := e.rt.FindDevice(name)
			if err != nil {
				return fmt.Errorf("FindDevice(%q): %w", name, err)
			}
			if got != d {
				return fmt.Errorf("FindDevice(%q) is %v, want %v", name, got, d)
			}
		}
	}
	for _, m := range []struct {
		name string
		want error
	}{
		{fmt.Sprint(len(e.rt.Devices())), core.ErrNotFound},
		{"GPU-ffffffff-ffff-ffff-ffff-ffffffffffff", core.ErrNotFound},
		{"GPU-12", core.ErrInvalidArgument},
		{"ff:1f.7", core.ErrNotFound},
		{"", core.ErrInvalidArgument},
		{"cuda:0", core.ErrInvalidArgument},
	} {
		_, err := e.rt.FindDevice(m.name)
		if err := expect(fmt.Sprintf("FindDevice(%q)", m.name), err, m.want); err != nil {
			return err
		}
	}
	return nil
}
