// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
)

// TestStagedCopies: staged copies up and down at sizes that are multiples
// of nothing (several chunks, a short last one, chunks that split into
// parallel pieces) and at odd offsets into Views; the bytes around the
// view stay as they were. The mock's stream workers run late, so a missed
// wait shows up as wrong data.
func TestStagedCopies(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	const guard = 4099
	sizes := []int{64 << 10, 1<<20 - 1, 2<<20 + 4097, 8<<20 + 1, 33<<20 + 12345}
	if testing.Short() {
		// -short (make test's -race pass, where every byte compared is
		// instrumented): up to two full chunks and a short last one (8 MiB
		// chunks; mid-sized copies already split into several); the
		// 33 MiB copy of four chunks and a short one runs without -short.
		sizes = sizes[:4]
	}
	for _, n := range sizes {
		for _, off := range []int{0, 3, 4097} {
			t.Run(fmt.Sprintf("%d@%d", n, off), func(t *testing.T) {
				buf := alloc(t, d, off+n+guard)
				require.NoError(t, core.Memset(buf, 0x5a))
				v, err := buf.View(off, n)
				require.NoError(t, err)
				src := randBytes(n, uint64(n)^uint64(off))
				require.NoError(t, core.CopyFromHost(v, src))
				got := make([]byte, n)
				require.NoError(t, core.CopyToHost(got, v))
				require.Equal(t, src, got)
				all := make([]byte, off+n+guard)
				require.NoError(t, core.CopyToHost(all, buf))
				// the bytes outside the view kept the fill (counted, not
				// compared one by one: under -race each comparison costs)
				require.Equal(t, off, bytes.Count(all[:off], []byte{0x5a}), "a byte before the view changed")
				require.Equal(t, guard, bytes.Count(all[off+n:], []byte{0x5a}), "a byte after the view changed")
				// A prefix of the view, down into a larger slice's middle.
				part := make([]byte, n/2+7)
				require.NoError(t, core.CopyToHost(part[7:], v))
				assert.Equal(t, src[:n/2], part[7:])
			})
		}
	}
}

// TestStagedCopiesConcurrent: more goroutines than a device has stagers
// copy different data through distinct views of one buffer at once.
func TestStagedCopiesConcurrent(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	const g, n = 7, 9<<20 + 333
	buf := alloc(t, d, g*(n+1))
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := buf.View(i*(n+1)+1, n)
			if !assert.NoError(t, err) {
				return
			}
			src := randBytes(n, uint64(100+i))
			got := make([]byte, n)
			for range 3 {
				if !assert.NoError(t, core.CopyFromHost(v, src)) || !assert.NoError(t, core.CopyToHost(got, v)) {
					return
				}
				if !assert.Equal(t, src, got, "goroutine %d", i) {
					return
				}
				src[0]++
			}
		}()
	}
	wg.Wait()
}

// TestStagedCopyNoAllocs: a warm staged copy large enough for parallel
// memmove pieces allocates nothing, up or down.
func TestStagedCopyNoAllocs(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	const n = 20<<20 + 5
	buf := alloc(t, d, n)
	data := randBytes(n, 9)
	require.NoError(t, core.CopyFromHost(buf, data)) // warm a stager and the pool
	require.NoError(t, core.CopyToHost(data, buf))
	assert.Zero(t, testing.AllocsPerRun(3, func() {
		_ = core.CopyFromHost(buf, data)
		_ = core.CopyToHost(data, buf)
	}))
}
