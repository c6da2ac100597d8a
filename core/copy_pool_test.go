// SPDX-License-Identifier: Apache-2.0

package core

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

// TestCopyPool: the parallel memmove copies exactly len(src) bytes for
// sizes around the piece boundaries, unaligned ends, pools of one to
// maxCopyParts goroutines, and several copies sharing a pool at once.
func TestCopyPool(t *testing.T) {
	sizes := []int{1, 4095, minCopyPiece - 1, minCopyPiece, minCopyPiece + 1, 2*minCopyPiece + 4097,
		3*minCopyPiece - 7, 8*minCopyPiece + 12345, 11 * minCopyPiece}
	for _, parts := range []int{1, 2, 3, maxCopyParts} {
		t.Run(fmt.Sprintf("parts=%d", parts), func(t *testing.T) {
			p := newCopyPool(parts)
			defer p.stop()
			var wg sync.WaitGroup
			for g := range 3 { // three callers, each with its own job
				wg.Add(1)
				go func() {
					defer wg.Done()
					var j memJob
					r := rand.New(rand.NewPCG(uint64(parts), uint64(g)))
					for _, n := range sizes {
						off := 1 + g // unaligned source and destination
						src := make([]byte, n+off)
						for i := range src {
							src[i] = byte(r.Uint32())
						}
						dst := make([]byte, n+off+3)
						for i := range dst {
							dst[i] = 0xee
						}
						p.copy(&j, dst[off:], src[off:])
						if !assert.Equal(t, src[off:], dst[off:off+n], "size %d", n) {
							return
						}
						for _, i := range []int{0, off - 1, off + n, off + n + 2} {
							assert.Equal(t, byte(0xee), dst[i], "size %d: byte %d outside the copy written", n, i)
						}
						assert.Nil(t, j.src, "the job keeps no slice after a copy")
					}
				}()
			}
			wg.Wait()
		})
	}
}

// TestCopyPoolSize: the shared pool has min(GOMAXPROCS-1, maxCopyParts)
// participants (at least one) and is made once.
func TestCopyPoolSize(t *testing.T) {
	p := stagePool()
	require.Same(t, p, stagePool())
	assert.GreaterOrEqual(t, p.parts, 1)
	assert.LessOrEqual(t, p.parts, maxCopyParts)
}

// TestStagedCopyPoolNoAllocs: a warm staged copy whose chunks split into
// parallel pieces allocates nothing and moves the right bytes, with a pool
// of three whatever the machine's size (the shared one may be serial).
func TestStagedCopyPoolNoAllocs(t *testing.T) {
	rt, err := Open(Config{PluginPaths: []string{testutil.MockPlugin(t)}, Backend: "mock"})
	require.NoError(t, err)
	defer rt.Close()
	shared := stagePool()
	p := newCopyPool(3)
	sharedCopyPool.p = p
	defer func() { sharedCopyPool.p = shared; p.stop() }()
	const n = 20<<20 + 5
	buf, err := rt.devices[0].Alloc(n)
	require.NoError(t, err)
	defer buf.Free()
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i * 7 / 3)
	}
	got := make([]byte, n)
	require.NoError(t, CopyFromHost(buf, src)) // warm a stager
	require.NoError(t, CopyToHost(got, buf))
	require.Equal(t, src, got)
	assert.Zero(t, testing.AllocsPerRun(3, func() {
		_ = CopyFromHost(buf, src)
		_ = CopyToHost(got, buf)
	}))
	require.Equal(t, src, got)
}
