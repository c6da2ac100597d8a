// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/metrale/gpurt/core"
)

// source gives a model's weights: fill writes elements [lo, lo+len(dst)/2)
// of t as bf16 (little-endian); floats returns all of t (bf16-rounded).
type source interface {
	fill(t tensorSpec, lo int, dst []byte) error
	floats(t tensorSpec) ([]float32, error)
}

// ckptSource reads a checkpoint's tensors (checked against the config
// before anything is uploaded).
type ckptSource struct {
	ck      *Checkpoint
	tensors map[string]Tensor
}

func newCkptSource(ck *Checkpoint, c *Config) (*ckptSource, error) {
	// Every layer has several tensors: more layers than the checkpoint has
	// tensors is refused before the specs are listed (num_hidden_layers
	// 2e9 would list 18e9 of them); fewer missing ones are named below.
	if have := len(ck.where); c.Layers > have {
		return nil, fmt.Errorf("llm: %s: num_hidden_layers %d is more than the checkpoint's %d tensors",
			ck.Dir, c.Layers, have)
	}
	src := &ckptSource{ck: ck, tensors: map[string]Tensor{}}
	for _, sp := range c.specs() {
		t, err := ck.Tensor(sp.hf)
		if err != nil {
			return nil, err
		}
		cols := sp.cols
		rows := sp.rows
		if sp.rows == 1 { // a vector
			rows, cols = sp.cols, 0
		}
		if err := t.want(rows, cols); err != nil {
			return nil, err
		}
		src.tensors[sp.hf] = t
	}
	return src, nil
}

func (s *ckptSource) fill(t tensorSpec, lo int, dst []byte) error {
	s.tensors[t.hf].toBF16(dst, lo)
	return nil
}

func (s *ckptSource) floats(t tensorSpec) ([]float32, error) { return s.tensors[t.hf].floats(), nil }

// LoadStats are a load's figures: Bytes of bf16 weights uploaded (after
// conversion) from FileBytes of files, in Elapsed (from opening the files
// to the last weight's copy done); Total adds the KV caches, buffers and
// attention plans.
type LoadStats struct {
	Bytes, FileBytes int64
	Elapsed, Total   time.Duration
}

// GBps is the upload rate, bf16 bytes per second / 1e9.
func (s LoadStats) GBps() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Bytes) / s.Elapsed.Seconds() / 1e9
}

// Load reads a Hugging Face model directory (config.json, safetensors
// files: see ReadConfig and OpenCheckpoint), checks every tensor's
// presence, shape and dtype against the config, and uploads the weights
// (bf16; f16 and f32 converted) through pinned staging buffers while the
// next chunk is read, with buffers sized by o (o.Int8: the blocks' linears
// quantized to int8 at load; o.Int8Head: the LM head too).
func Load(dev *core.Device, dir string, o Options) (*Model, error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	cfg.Int8, cfg.Int8Head = o.Int8, o.Int8Head
	return LoadConfig(dev, dir, cfg, o)
}

// LoadConfig is Load with the config given (as ReadConfig returns it,
// perhaps changed: Int8, Int8Head, GroupSize, PageSize).
func LoadConfig(dev *core.Device, dir string, cfg Config, o Options) (*Model, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	ck, err := OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	src, err := newCkptSource(ck, &cfg)
	if err != nil {
		return nil, err
	}
	m, err := newModel(dev, cfg, src, o)
	if err != nil {
		return nil, err
	}
	var n int64
	for _, t := range cfg.specs() {
		n += int64(2 * t.elems())
	}
	m.LoadStats = LoadStats{Bytes: n, FileBytes: ck.Bytes(), Elapsed: m.uploaded.Sub(t0), Total: time.Since(t0)}
	return m, nil
}

// uploader copies tensors to the device through a ring of pinned staging
// slots from the runtime's host heap: a slot is filled on the host (read
// from the mapping, converted, on several goroutines) while the copies of
// the others run; a slot is refilled once the event after its copy fired.
type uploader struct {
	s        *core.Stream
	src      source
	slots    []*core.HostBuffer
	evs      []*core.Event
	used     []bool
	next     int
	chunk    int
	done     int64
	total    int64
	progress func(done, total int64)
}

const (
	uploadSlots = 4
	uploadChunk = 16 << 20
)

func newUploader(rt *core.Runtime, s *core.Stream, src source, total int64, progress func(done, total int64)) (u *uploader, err error) {
	u = &uploader{s: s, src: src, chunk: uploadChunk, total: total, progress: progress}
	if total < int64(uploadSlots*uploadChunk) { // small models: small slots
		u.chunk = max(4096, int(total/uploadSlots+4095)&^4095)
	}
	defer func() {
		if err != nil {
			_ = u.close()
		}
	}()
	for i := 0; i < uploadSlots; i++ {
		hs, err := rt.AllocHostFromHeap(u.chunk)
		if err != nil {
			return nil, fmt.Errorf("llm: pinned staging: %w", err)
		}
		u.slots = append(u.slots, hs)
		ev, err := s.Device().NewEvent(false)
		if err != nil {
			return nil, err
		}
		u.evs = append(u.evs, ev)
		u.used = append(u.used, false)
	}
	if progress != nil {
		progress(0, total)
	}
	return u, nil
}

// put uploads t (bf16) to b at byte offset off.
func (u *uploader) put(b *core.Buffer, off int, t tensorSpec) error {
	n := 2 * t.elems()
	for pos := 0; pos < n; pos += u.chunk {
		sz := min(u.chunk, n-pos)
		k := u.next
		u.next = (u.next + 1) % len(u.slots)
		if u.used[k] {
			if err := u.evs[k].Synchronize(); err != nil {
				return err
			}
		}
		pv, err := u.slots[k].View(0, sz)
		if err != nil {
			return err
		}
		if err := u.fill(t, pos/2, pv.Bytes()); err != nil {
			return err
		}
		dst, err := b.View(off+pos, sz)
		if err != nil {
			return err
		}
		if err := firstErr(u.s.CopyFromPinned(dst, pv), u.evs[k].Record(u.s)); err != nil {
			return err
		}
		u.used[k] = true
		u.advance(int64(sz))
	}
	return nil
}

// fill splits a chunk among goroutines (the page faults of the mapping
// and the conversions run in parallel).
func (u *uploader) fill(t tensorSpec, lo int, dst []byte) error {
	n := len(dst) / 2
	w := min(runtime.GOMAXPROCS(0), 8, max(1, n/(256<<10)))
	if w <= 1 {
		return u.src.fill(t, lo, dst)
	}
	per := (n + w - 1) / w
	errs := make([]error, w)
	var wg sync.WaitGroup
	for i := 0; i < w; i++ {
		a, b := i*per, min(n, (i+1)*per)
		if a >= b {
			break
		}
		wg.Add(1)
		go func(i, a, b int) {
			defer wg.Done()
			errs[i] = u.src.fill(t, lo+a, dst[2*a:2*b])
		}(i, a, b)
	}
	wg.Wait()
	return firstErr(errs...)
}

func (u *uploader) advance(n int64) {
	u.done += n
	if u.progress != nil {
		u.progress(u.done, u.total)
	}
}

// finish waits for the copies.
func (u *uploader) finish() error { return u.s.Synchronize() }

func (u *uploader) close() error {
	err := u.s.Synchronize()
	for _, e := range u.evs {
		_ = e.Close()
	}
	for _, hs := range u.slots {
		_ = hs.Free()
	}
	u.evs, u.slots = nil, nil
	return err
}
