// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nlpodyssey/safetensors"

	"github.com/metrale/gpurt/floatbits"
)

// Checkpoint is a Hugging Face model directory's tensors: one
// model.safetensors, or the shards that model.safetensors.index.json
// names, each mapped read-only into memory (the page cache, no copy).
type Checkpoint struct {
	Dir    string
	shards []*shard
	where  map[string]*shard // tensor name -> its shard
}

type shard struct {
	path string
	mem  []byte
	st   safetensors.SafeTensors
}

// Tensor is one tensor of a checkpoint: its file, dtype, shape and bytes
// (a view of the mapping).
type Tensor struct {
	Name, File string
	DType      safetensors.DType
	Shape      []int
	Data       []byte
}

// OpenCheckpoint maps dir's safetensors files: model.safetensors.index.json
// when present (every shard it names must be there), else every
// *.safetensors in dir.
func OpenCheckpoint(dir string) (ck *Checkpoint, err error) {
	ck = &Checkpoint{Dir: dir, where: map[string]*shard{}}
	defer func() {
		if err != nil {
			ck.Close()
			ck = nil
		}
	}()
	var files []string
	var index map[string]string
	idxPath := filepath.Join(dir, "model.safetensors.index.json")
	if raw, err := readRegular(idxPath, maxJSON); err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(raw, &idx); err != nil {
			return nil, fmt.Errorf("llm: %s: bad JSON: %w", idxPath, err)
		}
		if len(idx.WeightMap) == 0 {
			return nil, fmt.Errorf("llm: %s: weight_map is empty", idxPath)
		}
		index = idx.WeightMap
		seen := map[string]bool{}
		for _, f := range idx.WeightMap {
			if f != filepath.Base(f) || !strings.HasSuffix(f, ".safetensors") {
				return nil, fmt.Errorf("llm: %s: shard %q is not a .safetensors file in the model directory", idxPath, f)
			}
			if !seen[f] {
				seen[f] = true
				files = append(files, f)
			}
		}
		sort.Strings(files)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("llm: %w", err)
	} else {
		m, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
		for _, p := range m {
			files = append(files, filepath.Base(p))
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("llm: %s: no *.safetensors file and no model.safetensors.index.json", dir)
		}
	}
	for _, f := range files {
		p := filepath.Join(dir, f)
		sh, err := openShard(p)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && index != nil {
				return nil, fmt.Errorf("llm: missing shard %s (named by %s): %w", p, idxPath, err)
			}
			return nil, err
		}
		ck.shards = append(ck.shards, sh)
		for _, name := range sh.st.Names() {
			if prev, dup := ck.where[name]; dup {
				return nil, fmt.Errorf("llm: tensor %s is in both %s and %s", name, prev.path, p)
			}
			ck.where[name] = sh
		}
	}
	for name, f := range index {
		sh, ok := ck.where[name]
		if !ok {
			return nil, fmt.Errorf("llm: tensor %s: %s names shard %s, which does not hold it", name, idxPath, f)
		}
		if filepath.Base(sh.path) != f {
			return nil, fmt.Errorf("llm: tensor %s: %s names shard %s, but it is in %s", name, idxPath, f, sh.path)
		}
	}
	return ck, nil
}

func openShard(p string) (*shard, error) {
	f, fi, err := openRegular(p)
	if err != nil {
		return nil, fmt.Errorf("llm: %w", err)
	}
	defer f.Close()
	if fi.Size() < 8 {
		return nil, fmt.Errorf("llm: %s: truncated: %d bytes, not even the 8-byte header length", p, fi.Size())
	}
	var hdr [8]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return nil, fmt.Errorf("llm: %s: %w", p, err)
	}
	if n := binary.LittleEndian.Uint64(hdr[:]); n > uint64(fi.Size()-8) {
		return nil, fmt.Errorf("llm: %s: truncated: a %d-byte header in a %d-byte file", p, n, fi.Size())
	}
	mem, err := mapFile(f, fi.Size())
	if err != nil {
		return nil, fmt.Errorf("llm: %s: %w", p, err)
	}
	st, err := safetensors.Deserialize(mem)
	if err != nil {
		_ = unmapFile(mem)
		if strings.Contains(err.Error(), "incomplete buffer") {
			// the header's offsets run past (or short of) the file's end
			return nil, fmt.Errorf("llm: %s: truncated or padded: the header's tensors do not end at the file's %d bytes (%w)", p, fi.Size(), err)
		}
		return nil, fmt.Errorf("llm: %s: not a safetensors file: %w", p, err)
	}
	return &shard{path: p, mem: mem, st: st}, nil
}

// Close unmaps the files.
func (ck *Checkpoint) Close() {
	if ck == nil {
		return
	}
	for _, sh := range ck.shards {
		_ = unmapFile(sh.mem)
	}
	ck.shards = nil
}

// Bytes is the size of the files.
func (ck *Checkpoint) Bytes() int64 {
	var n int64
	for _, sh := range ck.shards {
		n += int64(len(sh.mem))
	}
	return n
}

// Names lists the tensors, sorted.
func (ck *Checkpoint) Names() []string {
	out := make([]string, 0, len(ck.where))
	for n := range ck.where {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Tensor looks up a tensor by name.
func (ck *Checkpoint) Tensor(name string) (Tensor, error) {
	sh, ok := ck.where[name]
	if !ok {
		return Tensor{}, fmt.Errorf("llm: tensor %s is missing from the checkpoint in %s", name, ck.Dir)
	}
	tv, _ := sh.st.Tensor(name)
	shape := make([]int, len(tv.Shape()))
	for i, d := range tv.Shape() {
		if d > math.MaxInt32 {
			return Tensor{}, fmt.Errorf("llm: tensor %s in %s: dimension %d is %d", name, sh.path, i, d)
		}
		shape[i] = int(d)
	}
	return Tensor{Name: name, File: sh.path, DType: tv.DType(), Shape: shape, Data: tv.Data()}, nil
}

// want checks t's shape against rows x cols (cols 0: a vector of rows)
// and its dtype (bf16, f16 or f32).
func (t Tensor) want(rows, cols int) error {
	var ok bool
	if cols == 0 {
		ok = len(t.Shape) == 1 && t.Shape[0] == rows
	} else {
		ok = len(t.Shape) == 2 && t.Shape[0] == rows && t.Shape[1] == cols
	}
	if !ok {
		exp := fmt.Sprintf("[%d %d]", rows, cols)
		if cols == 0 {
			exp = fmt.Sprintf("[%d]", rows)
		}
		return fmt.Errorf("llm: tensor %s in %s: shape %v, the config needs %s", t.Name, t.File, t.Shape, exp)
	}
	switch t.DType {
	case safetensors.BF16, safetensors.F16, safetensors.F32:
		return nil
	}
	return fmt.Errorf("llm: tensor %s in %s: dtype %s is unsupported (bf16, f16, f32)", t.Name, t.File, t.DType)
}

// elems is the number of elements.
func (t Tensor) elems() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// toBF16 writes elements [lo, lo+len(dst)/2) of t as bf16 into dst
// (little-endian; a plain copy for bf16, rounding to nearest even from f16
// and f32).
func (t Tensor) toBF16(dst []byte, lo int) {
	n := len(dst) / 2
	switch t.DType {
	case safetensors.BF16:
		copy(dst, t.Data[2*lo:2*(lo+n)])
	case safetensors.F16:
		src := t.Data[2*lo:]
		for i := 0; i < n; i++ {
			f := floatbits.F16ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
			binary.LittleEndian.PutUint16(dst[2*i:], floatbits.BF16FromFloat32(f))
		}
	case safetensors.F32:
		src := t.Data[4*lo:]
		for i := 0; i < n; i++ {
			f := math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
			binary.LittleEndian.PutUint16(dst[2*i:], floatbits.BF16FromFloat32(f))
		}
	}
}

// floats returns t's values as float32 (after the bf16 rounding the
// model applies).
func (t Tensor) floats() []float32 {
	b := make([]byte, 2*t.elems())
	t.toBF16(b, 0)
	out := make([]float32, t.elems())
	for i := range out {
		out[i] = floatbits.BF16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return out
}
