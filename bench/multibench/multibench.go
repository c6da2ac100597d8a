// SPDX-License-Identifier: Apache-2.0

// Package multibench times the several-GPU paths of gpurt (the command
// gpurt-multibench runs it; scripts/gpu_multi.sh runs that on 2 GPUs):
//
//   - all-reduce (Comm.Run, sum) at 8 KiB .. 1 GiB: one process driving
//     every GPU (collective.New), and with -procs one process per GPU
//     (the command starts itself once per rank, joined by a unique id:
//     collective.Join);
//   - peer copies (Stream.CopyDevice between device 0 and 1, both ways).
//
// Timing is what torch.distributed users measure (scripts/multi_torch.py
// does the same): after warm-up, every stream is synchronised, N
// operations are enqueued back to back, every stream is synchronised
// again; the figure is the wall time over N. Bus bandwidth is NCCL's
// definition: algbw = bytes / time, busbw = algbw * 2 (n-1) / n for an
// all-reduce. Every line of output is one JSON object; the shell script
// makes the table.
package multibench

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/collective"
	"github.com/metrale/gpurt/internal/bytesize"
)

// Result is one figure, one JSON object per line of output.
type Result struct {
	Name  string  `json:"name"`
	Impl  string  `json:"impl"`
	Bytes int64   `json:"bytes"`
	Us    float64 `json:"us"`
	AlgBW float64 `json:"algbw_gb_s"`
	BusBW float64 `json:"busbw_gb_s"`
	Iters int     `json:"iters"`
	Note  string  `json:"note,omitempty"`
}

// Iters is how many timed operations a size gets (about 0.2 s of a 300
// GB/s link, between 5 and 200).
func Iters(bytes int64) int {
	return int(max(5, min(200, int64(60e9)/max(bytes, 1))))
}

// rankSet is one stream and buffer per local rank.
type rankSet struct {
	streams []*core.Stream
	bufs    []*core.Buffer
}

func (r *rankSet) close() {
	for _, s := range r.streams {
		_ = s.Synchronize()
		_ = s.Close()
	}
	for _, b := range r.bufs {
		_ = b.Free()
	}
}

func (r *rankSet) sync() error {
	for _, s := range r.streams {
		if err := s.Synchronize(); err != nil {
			return err
		}
	}
	return nil
}

// Sweep times an in-place all-reduce of every size on c (whose local ranks
// are devs, ranks first..) and prints one result per size.
func Sweep(out *json.Encoder, impl string, c *collective.Comm, devs []*core.Device, sizes []int64, dt core.DType) error {
	first, _ := c.LocalRanks()
	n := c.NRanks()
	maxB := int64(0)
	for _, s := range sizes {
		maxB = max(maxB, s)
	}
	r := &rankSet{}
	defer r.close()
	for _, d := range devs {
		s, err := d.NewStream()
		if err != nil {
			return err
		}
		r.streams = append(r.streams, s)
		b, err := d.Alloc(int(max(maxB, 256)))
		if err != nil {
			return err
		}
		if err := core.Memset(b, 0); err != nil { // zeros stay zeros: no overflow over many sums
			return err
		}
		r.bufs = append(r.bufs, b)
	}
	ops := make([]collective.Op, len(devs))
	for _, bytes := range sizes {
		count := int(bytes / int64(dt.Size()))
		for k := range devs {
			ops[k] = collective.Op{Kind: collective.AllReduce, DType: dt, Rank: first + k, Count: count, Stream: r.streams[k], Send: r.bufs[k], Recv: r.bufs[k]}
		}
		it := Iters(bytes)
		run := func(times int) error {
			for i := 0; i < times; i++ {
				if err := c.Run(ops...); err != nil {
					return err
				}
			}
			return nil
		}
		if err := errors.Join(run(5), r.sync()); err != nil {
			_ = out.Encode(Result{Name: "all_reduce " + bytesize.Format(bytes), Impl: impl, Bytes: bytes, Note: err.Error()})
			continue
		}
		t0 := time.Now()
		err := errors.Join(run(it), r.sync())
		el := time.Since(t0)
		if err == nil {
			err = c.Err()
		}
		res := Result{Name: "all_reduce " + bytesize.Format(bytes), Impl: impl, Bytes: bytes, Iters: it}
		if err != nil {
			res.Note = err.Error()
		} else {
			res.Us = float64(el.Nanoseconds()) / 1e3 / float64(it)
			res.AlgBW = float64(bytes) / (res.Us * 1e3)
			res.BusBW = res.AlgBW * 2 * float64(n-1) / float64(n)
		}
		if first == 0 {
			_ = out.Encode(res)
		}
	}
	return nil
}

// Peer times copies of n bytes from src to dst on a stream of src.
func Peer(out *json.Encoder, src, dst *core.Device, n int64) {
	name := fmt.Sprintf("peer_copy %s %d->%d", bytesize.Format(n), src.Index(), dst.Index())
	res := Result{Name: name, Impl: "gpurt", Bytes: n}
	err := func() error {
		a, err := src.Alloc(int(n))
		if err != nil {
			return err
		}
		defer a.Free()
		b, err := dst.Alloc(int(n))
		if err != nil {
			return err
		}
		defer b.Free()
		s, err := src.NewStream()
		if err != nil {
			return err
		}
		defer s.Close()
		for i := 0; i < 3; i++ {
			if err := s.CopyDevice(b, a); err != nil {
				return err
			}
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		it := Iters(n) / 2
		t0 := time.Now()
		for i := 0; i < it; i++ {
			if err := s.CopyDevice(b, a); err != nil {
				return err
			}
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		res.Iters = it
		res.Us = float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(it)
		res.AlgBW = float64(n) / (res.Us * 1e3)
		res.BusBW = res.AlgBW
		return nil
	}()
	if err != nil {
		res.Note = err.Error()
	}
	_ = out.Encode(res)
}
