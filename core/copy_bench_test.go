// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
)

// BenchmarkStagedCopy measures synchronous copies of a Go []byte (the
// staged path: pageable memory through pinned chunks), up and down, at the
// sizes gpurt bench reports. On the mock the "DMA" is a memcpy by the
// stream's worker thread, so the figures say little about a GPU; they show
// that the staging does not slow things down. The mock runs without its
// injected per-op delay here.
func BenchmarkStagedCopy(b *testing.B) {
	rt := openMock(b, "delay_us=0") // no injected latency: measure the staging
	d := dev0(b, rt)
	for _, n := range []int{1 << 20, 16 << 20, 256 << 20} {
		buf, err := d.Alloc(n)
		require.NoError(b, err)
		host := randBytes(n, 3)
		require.NoError(b, core.CopyFromHost(buf, host)) // warm a stager and the heap
		b.Run(fmt.Sprintf("up/%dMiB", n>>20), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if err := core.CopyFromHost(buf, host); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("down/%dMiB", n>>20), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if err := core.CopyToHost(host, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
		require.NoError(b, buf.Free())
	}
}
