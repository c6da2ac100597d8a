// SPDX-License-Identifier: Apache-2.0

package llm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"unsafe"
)

// The fuzz targets of the checkpoint reader (a safetensors shard, a
// checkpoint's index): bad bytes are an error naming the file, never a
// crash, and what is accepted is what the bytes say. `go test` runs the
// seeds; scripts/fuzz_go.sh fuzzes them.

// stFile is a safetensors file: the header's length (8 bytes,
// little-endian), the header as given and data.
func stFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

// counting is n bytes 0, 1, 2, ... (so that a tensor read from the wrong
// place shows).
func counting(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

// validShard is a small well-formed shard: a bf16 matrix, an f32 vector,
// an f16 scalar, an empty tensor and __metadata__, 36 data bytes.
func validShard() []byte {
	return stFile(`{"__metadata__":{"format":"pt"},`+
		`"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},`+
		`"v":{"dtype":"F32","shape":[4],"data_offsets":[12,28]},`+
		`"s":{"dtype":"F16","shape":[],"data_offsets":[28,30]},`+
		`"e":{"dtype":"U8","shape":[0,5],"data_offsets":[30,30]},`+
		`"i":{"dtype":"I16","shape":[3],"data_offsets":[30,36]}}`, counting(36))
}

func shardSeeds() [][]byte {
	valid := validShard()
	seeds := [][]byte{valid, stFile(`{}`, nil), stFile(`{}    `, nil), stFile(`null`, nil)}
	for _, n := range []int{0, 1, 7, 8, 9, 20, len(valid) - 1} { // truncations
		seeds = append(seeds, valid[:n])
	}
	seeds = append(seeds, append(slices.Clone(valid), 0)) // a byte past the tensors
	for _, hdr := range []string{
		`{`, `[]`, `"x"`, `{"a":1}`, `{"a":null}`, `{"a":{}}`, `{} x`,
		// offsets past the end, overlapping, with a hole, out of order
		`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`,
		`{"a":{"dtype":"U8","shape":[1000],"data_offsets":[0,1000]}}`,
		`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`,
		`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}`,
		`{"a":{"dtype":"U8","shape":[2],"data_offsets":[2,0]}}`,
		`{"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`,
		// shapes: negative, overflowing, beyond int32 but empty, not numbers
		`{"a":{"dtype":"U8","shape":[-1,2],"data_offsets":[0,2]}}`,
		`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`,
		`{"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}}`,
		`{"a":{"dtype":"U8","shape":[4294967296,0],"data_offsets":[0,0]}}`,
		`{"a":{"dtype":"U8","shape":[0,9223372036854775807,3],"data_offsets":[0,0]}}`,
		`{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,2]}}`,
		`{"a":{"dtype":"U8","shape":["2"],"data_offsets":[0,2]}}`,
		`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,18446744073709551616]}}`,
		`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2,4]}}`,
		// dtypes: unknown, lower case, not a string
		`{"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}}`,
		`{"a":{"dtype":"bf16","shape":[1],"data_offsets":[0,2]}}`,
		`{"a":{"dtype":7,"shape":[1],"data_offsets":[0,2]}}`,
		// keys: missing, extra, duplicated, __metadata__ of the wrong kind
		`{"a":{"dtype":"U8","shape":[2]}}`,
		`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"x":1}}`,
		`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`,
		`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"dtype":"I16"}}`,
		`{"__metadata__":{"n":1},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`,
		`{"__metadata__":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`,
		`{"\ud800":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"\udfff":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`,
	} {
		for _, n := range []int{0, 2, 4} { // the data some want, more or less
			seeds = append(seeds, stFile(hdr, counting(n)))
		}
	}
	// header lengths: huge, one past the file, the library's limit + 1
	for _, n := range []uint64{math.MaxUint64, math.MaxInt64 + 1, 100_000_001, uint64(len(valid) - 7)} {
		b := slices.Clone(valid)
		binary.LittleEndian.PutUint64(b, n)
		seeds = append(seeds, b)
	}
	return seeds
}

// refTensor is a header entry as the format defines it.
type refTensor struct {
	DType   string    `json:"dtype"`
	Shape   []uint64  `json:"shape"`
	Offsets [2]uint64 `json:"data_offsets"`
}

// refHeader reads a safetensors header independently of the reader under
// test: the header's length and its tensors (without __metadata__).
func refHeader(file []byte) (uint64, map[string]refTensor, error) {
	n := binary.LittleEndian.Uint64(file)
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(file[8:8+n], &raw); err != nil {
		return 0, nil, err
	}
	out := map[string]refTensor{}
	for k, v := range raw {
		if k == "__metadata__" {
			continue
		}
		var r refTensor
		if err := json.Unmarshal(v, &r); err != nil {
			return 0, nil, err
		}
		out[k] = r
	}
	return n, out, nil
}

var dtypeSize = map[string]uint64{"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}

// checkOpened checks what OpenCheckpoint accepted from a directory holding
// one shard, at path, of the bytes file.
func checkOpened(t *testing.T, ck *Checkpoint, path string, file []byte) {
	t.Helper()
	if len(file) < 8 || binary.LittleEndian.Uint64(file) > uint64(len(file)-8) {
		t.Fatalf("accepted a file whose header does not fit: %d bytes", len(file))
	}
	n, ref, err := refHeader(file)
	if err != nil {
		t.Fatalf("accepted a header that is not an object of tensors: %v", err)
	}
	if ck.Bytes() != int64(len(file)) {
		t.Fatalf("Bytes() = %d, the file has %d", ck.Bytes(), len(file))
	}
	names := ck.Names()
	want := make([]string, 0, len(ref))
	for k := range ref {
		want = append(want, k)
	}
	sort.Strings(want)
	if !slices.Equal(names, want) {
		t.Fatalf("Names() = %q, the header has %q", names, want)
	}
	if len(ck.shards) != 1 {
		t.Fatalf("%d shards mapped, want 1", len(ck.shards))
	}
	mem := ck.shards[0].mem
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	type span struct{ s, e uint64 }
	var spans []span
	data := uint64(len(file)) - 8 - n
	for _, name := range names {
		r := ref[name]
		size, ok := dtypeSize[r.DType]
		if !ok {
			t.Fatalf("tensor %q: accepted dtype %q", name, r.DType)
		}
		elems, tooBig := uint64(1), false
		for _, d := range r.Shape {
			hi, prod := bits.Mul64(elems, d)
			if hi != 0 {
				t.Fatalf("tensor %q: accepted shape %v, whose element count overflows", name, r.Shape)
			}
			elems = prod
			tooBig = tooBig || d > math.MaxInt32
		}
		hi, nbytes := bits.Mul64(elems, size)
		s, e := r.Offsets[0], r.Offsets[1]
		if hi != 0 || s > e || e-s != nbytes || e > data {
			t.Fatalf("tensor %q: accepted %s %v at bytes [%d, %d) of %d", name, r.DType, r.Shape, s, e, data)
		}
		spans = append(spans, span{s, e})
		tn, err := ck.Tensor(name)
		if tooBig {
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), name) {
				t.Fatalf("tensor %q of shape %v (a dimension beyond int32): err %v, want one naming it and %s", name, r.Shape, err, path)
			}
			continue
		}
		if err != nil {
			t.Fatalf("tensor %q: %v", name, err)
		}
		if tn.Name != name || tn.File != path || tn.DType.String() != r.DType || len(tn.Shape) != len(r.Shape) {
			t.Fatalf("tensor %q: got %q in %s, %s %v; the header says %s %v", name, tn.Name, tn.File, tn.DType, tn.Shape, r.DType, r.Shape)
		}
		for i, d := range r.Shape {
			if uint64(tn.Shape[i]) != d {
				t.Fatalf("tensor %q: shape %v, the header says %v", name, tn.Shape, r.Shape)
			}
		}
		if uint64(len(tn.Data)) != nbytes || uint64(tn.elems())*size != nbytes {
			t.Fatalf("tensor %q: %d bytes (%d elements), %s %v is %d", name, len(tn.Data), tn.elems(), r.DType, r.Shape, nbytes)
		}
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(tn.Data))); len(tn.Data) > 0 && (p < lo || p+uintptr(len(tn.Data)) > lo+uintptr(len(mem))) {
			t.Fatalf("tensor %q: its bytes are not inside the file's mapping", name)
		}
		if !bytes.Equal(tn.Data, file[8+n+s:8+n+e]) {
			t.Fatalf("tensor %q: its bytes are not bytes [%d, %d) of the data", name, s, e)
		}
	}
	// the tensors tile the data: no overlap, no hole, nothing after them
	sort.Slice(spans, func(i, j int) bool {
		return spans[i].s < spans[j].s || spans[i].s == spans[j].s && spans[i].e < spans[j].e
	})
	end := uint64(0)
	for _, sp := range spans {
		if sp.s != end {
			t.Fatalf("tensors at %v: overlap or hole at byte %d of the data", spans, end)
		}
		end = sp.e
	}
	if end != data {
		t.Fatalf("tensors at %v end at byte %d of %d bytes of data", spans, end, data)
	}
	if _, err := ck.Tensor("\x00absent"); err == nil || !strings.Contains(err.Error(), ck.Dir) {
		t.Fatalf("an absent tensor: err %v, want one naming %s", err, ck.Dir)
	}
}

// FuzzOpenShard: a model directory with one model.safetensors of
// arbitrary bytes. OpenCheckpoint never panics; what it accepts is what
// the header says (every tensor's bytes inside the file, of dtype x
// shape, the tensors tiling the data, the names unique); an error starts
// "llm: " and names the file.
func FuzzOpenShard(f *testing.F) {
	for _, s := range shardSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "model.safetensors")
		ck, ok := writeAndOpen(t, dir, path, file, path, path)
		if !ok {
			return
		}
		defer ck.Close()
		checkOpened(t, ck, path, file)
	})
}

// writeAndOpen writes data to the file path of dir and opens dir with
// OpenCheckpoint. On an error it checks it (no checkpoint comes with it;
// it starts "llm: " and holds names, which the failure calls what) and
// returns false.
func writeAndOpen(t *testing.T, dir, path string, data []byte, names, what string) (*Checkpoint, bool) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ck, err := OpenCheckpoint(dir)
	if err != nil {
		if ck != nil {
			t.Fatalf("error %v with a checkpoint", err)
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "llm: ") || !strings.Contains(msg, names) {
			t.Fatalf("error %q does not start with \"llm: \" and name %s", msg, what)
		}
		return nil, false
	}
	return ck, true
}

// indexShards are the shards of FuzzOpenCheckpointIndex's directory:
// two valid ones, one holding a tensor of another and one that is not a
// safetensors file.
var indexShards = map[string][]byte{
	"model-00001-of-00002.safetensors": stFile(`{"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, counting(8)),
	"model-00002-of-00002.safetensors": stFile(`{"c":{"dtype":"F16","shape":[1,2],"data_offsets":[0,4]}}`, counting(4)),
	"dup.safetensors":                  stFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, counting(1)),
	"bad.safetensors":                  []byte("not a safetensors file"),
}

var indexShardTensors = map[string][]string{
	"model-00001-of-00002.safetensors": {"a", "b"},
	"model-00002-of-00002.safetensors": {"c"},
	"dup.safetensors":                  {"a"},
}

// FuzzOpenCheckpointIndex: a model directory of fixed shards and a
// model.safetensors.index.json of arbitrary bytes. OpenCheckpoint never
// panics; when it accepts, every tensor the index names is in the shard
// the index says, and the tensors are those of the shards it names; an
// error starts "llm: " and names a file of the directory.
func FuzzOpenCheckpointIndex(f *testing.F) {
	for _, s := range []string{
		`{"metadata":{"total_size":12},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}}`,
		`{"weight_map":{"c":"model-00002-of-00002.safetensors"}}`,
		`{"weight_map":{"a":"model-00001-of-00002.safetensors"}}`,
		`{"weight_map":{}}`, `{}`, `null`, `[]`, `{"weight_map":[]}`, `{"weight_map":{"a":1}}`, `{"weight_map":`, ``,
		`{"weight_map":{"a":"model-00002-of-00002.safetensors"}}`,                                         // the wrong shard
		`{"weight_map":{"z":"model-00001-of-00002.safetensors"}}`,                                         // a tensor it lacks
		`{"weight_map":{"a":"missing.safetensors"}}`,                                                      // no such shard
		`{"weight_map":{"a":"../model-00001-of-00002.safetensors"}}`,                                      // outside
		`{"weight_map":{"a":"sub/x.safetensors"}}`, `{"weight_map":{"a":""}}`, `{"weight_map":{"a":"."}}`, // not a file name
		`{"weight_map":{"a":"model-00001-of-00002.bin"}}`, `{"weight_map":{"a":"x\u0000.safetensors"}}`, // not safetensors
		`{"weight_map":{"a":"bad.safetensors"}}`, // not a safetensors file
		`{"weight_map":{"a":"dup.safetensors","c":"model-00002-of-00002.safetensors","b":"dup.safetensors"}}`, // b not there
		`{"weight_map":{"a":"dup.safetensors","b":"model-00001-of-00002.safetensors"}}`,                       // a in both
		`{"weight_map":{"a":"model-00001-of-00002.safetensors"},"weight_map":{"c":"model-00002-of-00002.safetensors"}}`,
	} {
		f.Add([]byte(s))
	}
	// the shards are written once (the inputs of a process run one at a
	// time); each input rewrites the index
	dir := f.TempDir()
	for name, b := range indexShards {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, index []byte) {
		idxPath := filepath.Join(dir, "model.safetensors.index.json")
		ck, ok := writeAndOpen(t, dir, idxPath, index, dir+string(filepath.Separator), "a file of "+dir)
		if !ok {
			return
		}
		defer ck.Close()
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(index, &idx); err != nil || len(idx.WeightMap) == 0 {
			t.Fatalf("accepted an index without a weight_map (%v)", err)
		}
		var want []string
		var size int64
		named := map[string]bool{}
		for name, file := range idx.WeightMap {
			tn, err := ck.Tensor(name)
			if err != nil {
				t.Fatalf("tensor %q the index names: %v", name, err)
			}
			if tn.File != filepath.Join(dir, file) {
				t.Fatalf("tensor %q is in %s, the index says %s", name, tn.File, file)
			}
			if !named[file] {
				named[file] = true
				want = append(want, indexShardTensors[file]...)
				size += int64(len(indexShards[file]))
			}
		}
		sort.Strings(want)
		if got := ck.Names(); !slices.Equal(got, want) {
			t.Fatalf("Names() = %q, the shards the index names hold %q", got, want)
		}
		if ck.Bytes() != size {
			t.Fatalf("Bytes() = %d, the shards the index names have %d", ck.Bytes(), size)
		}
	})
}
