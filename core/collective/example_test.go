// SPDX-License-Identifier: Apache-2.0

package collective_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/collective"
	"github.com/metrale/gpurt/internal/testutil"
)

// TestMain puts a freshly built mock plugin on GPURT_PLUGIN_PATH, for the
// runnable examples (they open a runtime as a program would).
func TestMain(m *testing.M) { os.Exit(testutil.RunWithMockPlugin(m, "collective")) }

// An in-place sum all-reduce over two devices driven by one process: rank
// r starts with r+1 in every element, and both end with 1+2.
func ExampleComm_Run() {
	rt, err := core.Open(core.Config{Backend: "mock", PluginOptions: "devices=2"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rt.Close()
	devs := rt.Devices()
	c, err := collective.New(rt, devs...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	const n = 256 // f32 elements per rank
	ops := make([]collective.Op, len(devs))
	for r, d := range devs {
		s, _ := d.NewStream()
		defer s.Close()
		b, _ := d.Alloc(4 * n)
		defer b.Free()
		_ = core.Memset32(b, math.Float32bits(float32(r+1)))
		ops[r] = collective.Op{Kind: collective.AllReduce, DType: core.F32, Reduce: collective.ReduceSum,
			Rank: r, Count: n, Stream: s, Send: b, Recv: b}
	}
	if err := c.Run(ops...); err != nil {
		fmt.Println(err)
		return
	}
	for r, o := range ops {
		_ = o.Stream.Synchronize()
		out := make([]byte, 4*n)
		_ = core.CopyToHost(out, o.Recv)
		fmt.Println("rank", r, "first", math.Float32frombits(binary.LittleEndian.Uint32(out)),
			"last", math.Float32frombits(binary.LittleEndian.Uint32(out[4*(n-1):])))
	}
	// A rank this Comm does not hold is refused before anything runs.
	err = c.Run(collective.Op{Kind: collective.AllReduce, DType: core.F32, Rank: 2, Count: n, Stream: ops[0].Stream})
	fmt.Println(err)
	fmt.Println(c.Err())
	// Output:
	// rank 0 first 3 last 3
	// rank 1 first 3 last 3
	// gpurt: comm_run: invalid argument: op 0: rank 2 is not one of this Comm's (0..1 of 2)
	// <nil>
}
