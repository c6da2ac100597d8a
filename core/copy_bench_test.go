// SPDX-License-Identifier: Apache-2.0

package core

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

// BenchmarkStagedCopy measures synchronous copies of a Go []byte (the
// staged path: pageable memory through pinned chunks), up and down, at the
// sizes gpurt bench reports, each twice in the same run: "serial" with the
// memmove on the calling goroutine alone (a pool of one), "pool" with the
// runtime's copy pool (a pool of two where the shared one is serial, as on a
// 2-core machine). On the mock the "DMA" is a memcpy by the stream's
// worker thread, which competes with the memmove for cores, so on a small
// machine the figures say little about a GPU; they show that the staging
// is not slower. The mock runs without its injected per-op delay here.
func BenchmarkStagedCopy(b *testing.B) {
	dir := testutil.MockPlugin(b)
	rt, err := Open(Config{PluginPaths: []string{dir}, Backend: "mock", PluginOptions: "delay_us=0"})
	require.NoError(b, err)
	defer rt.Close()
	d := rt.devices[0]
	shared := rt.pool
	serial := newCopyPool(1)
	pool := shared
	if pool.parts < 2 { // a small machine: still measure a pool of two
		pool = newCopyPool(2)
		defer pool.stop()
	}
	b.Logf("copy pool: %d goroutines per memmove (the shared one: %d)", pool.parts, shared.parts)
	for _, n := range []int{1 << 20, 16 << 20, 256 << 20} {
		buf, err := d.Alloc(n)
		require.NoError(b, err)
		host := make([]byte, n)
		r := rand.New(rand.NewPCG(uint64(n), 3))
		for i := range host {
			host[i] = byte(r.Uint32())
		}
		require.NoError(b, CopyFromHost(buf, host)) // warm a stager and the heap
		for _, dir := range []string{"up", "down"} {
			for _, mode := range []struct {
				name string
				p    *copyPool
			}{{"serial", serial}, {"pool", pool}} {
				b.Run(fmt.Sprintf("%s/%dMiB/%s", dir, n>>20, mode.name), func(b *testing.B) {
					rt.pool = mode.p
					b.SetBytes(int64(n))
					b.ReportAllocs()
					for b.Loop() {
						if dir == "up" {
							err = CopyFromHost(buf, host)
						} else {
							err = CopyToHost(host, buf)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
		require.NoError(b, buf.Free())
	}
}
