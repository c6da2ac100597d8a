// SPDX-License-Identifier: Apache-2.0

package attention_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"testing"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/floatbits"
	"github.com/metrale/gpurt/internal/testutil"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
)

// TestMain puts a freshly built mock plugin on GPURT_PLUGIN_PATH, for the
// runnable examples (they open a runtime as a program would).
func TestMain(m *testing.M) { os.Exit(testutil.RunWithMockPlugin(m, "attention")) }

// One decode step of one request whose 3 cached tokens all have V = 2: the
// attention output is 2 whatever the scores, in every head.
func ExampleAttention_Run() {
	mockrt.Example(core.Config{}, func(_ *core.Runtime, dev *core.Device, s *core.Stream) error {
		cd := attention.KVCacheDesc{DType: core.F16, Layout: attention.KVLayoutNHD, PageSize: 4, NumKVHeads: 1, HeadDim: 64, NumPages: 2}
		cache, _ := attention.AllocKVCache(dev, cd)
		defer cache.Free()
		_ = core.Memset16(cache.K(), floatbits.F16FromFloat32(0.5))
		_ = core.Memset16(cache.V(), floatbits.F16FromFloat32(2))
		// The page table: request 0 owns page 1, which holds 3 tokens.
		i32 := func(v ...int32) *core.Buffer {
			b := make([]byte, 4*len(v))
			for i, x := range v {
				binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
			}
			buf, _ := dev.Alloc(len(b))
			_ = core.CopyFromHost(buf, b)
			return buf
		}
		indptr, indices, last := i32(0, 1), i32(1), i32(3)
		defer indptr.Free()
		defer indices.Free()
		defer last.Free()
		q, _ := dev.Alloc(2 * 2 * 64) // 1 row of 2 query heads of 64 f16
		o, _ := dev.Alloc(2 * 2 * 64)
		defer q.Free()
		defer o.Free()
		_ = core.Memset16(q, floatbits.F16FromFloat32(1))

		a, err := attention.New(dev, attention.Desc{Kind: attention.Decode, NumQOHeads: 2, Cache: cd, MaxBatch: 1})
		if err != nil {
			return err
		}
		defer a.Close()
		if err := a.Plan(s, attention.Schedule{KVIndptr: []int32{0, 1}, KVLastPageLen: []int32{3}}); err != nil {
			return err
		}
		ops := attention.Operands{Q: q, O: o, Pages: attention.PageTable{Indptr: indptr, Indices: indices, LastPageLen: last}}
		if err := a.Run(s, cache, ops); err != nil {
			return err
		}
		_ = s.Synchronize()
		out := make([]byte, 2*2*64)
		_ = core.CopyToHost(out, o)
		fmt.Println("head 0:", floatbits.F16ToFloat32(binary.LittleEndian.Uint16(out)),
			"head 1:", floatbits.F16ToFloat32(binary.LittleEndian.Uint16(out[2*64:])))
		// Planning during a capture is refused: plan between replays.
		_, err = s.Capture(func(cs *core.Stream) error {
			return a.Plan(cs, attention.Schedule{KVIndptr: []int32{0, 1}, KVLastPageLen: []int32{3}})
		})
		fmt.Println(err != nil)
		return nil
	})
	// Output:
	// head 0: 2 head 1: 2
	// true
}
