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

// A device-to-device copy between overlapping ranges of one buffer is
// refused by Copy and Stream.CopyDevice alike (CUDA's copy is undefined
// there, the mock would memmove): ErrInvalidArgument naming both ranges,
// and the buffer is left as it was. Disjoint ranges of one buffer, and
// two buffers, still copy.
func TestCopyOverlapInOneBuffer(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	s := stream(t, d)
	buf := alloc(t, d, 64)
	other := alloc(t, d, 64)
	view := func(off, n int) core.View {
		v, err := buf.View(off, n)
		require.NoError(t, err)
		return v
	}
	pattern := make([]byte, 64)
	for i := range pattern {
		pattern[i] = byte(i)
	}
	copiers := []struct {
		name string
		copy func(dst, src core.Region) error
	}{
		{"Copy", core.Copy},
		{"Stream.CopyDevice", func(dst, src core.Region) error {
			if err := s.CopyDevice(dst, src); err != nil {
				return err
			}
			return s.Synchronize()
		}},
	}
	cases := []struct {
		name     string
		dst, src core.Region
		msg      string // "" = copies
		want     func([]byte) []byte
	}{
		{"the whole buffer onto itself", buf, buf, "the destination [0, 64) and the source [0, 64) overlap in one buffer", nil},
		{"one view twice", view(8, 16), view(8, 16), "the destination [8, 24) and the source [8, 24) overlap", nil},
		{"forward by one byte", view(1, 16), view(0, 16), "the destination [1, 17) and the source [0, 16) overlap", nil},
		{"backward by one byte", view(0, 16), view(1, 16), "the destination [0, 16) and the source [1, 17) overlap", nil},
		{"a long destination over a short source's end", view(10, 40), view(0, 12), "the destination [10, 22) and the source [0, 12) overlap", nil},
		{"adjacent ranges", view(16, 16), view(0, 16), "", func(b []byte) []byte { copy(b[16:32], pattern[0:16]); return b }},
		{"a long destination past a short source", view(12, 40), view(0, 12), "", func(b []byte) []byte { copy(b[12:24], pattern[0:12]); return b }},
		{"two buffers", other, buf, "", nil},
	}
	for _, c := range copiers {
		for _, tc := range cases {
			t.Run(c.name+"/"+tc.name, func(t *testing.T) {
				require.NoError(t, core.CopyFromHost(buf, pattern))
				err := c.copy(tc.dst, tc.src)
				got := make([]byte, 64)
				require.NoError(t, core.CopyToHost(got, buf))
				if tc.msg == "" {
					require.NoError(t, err)
					want := bytes.Clone(pattern)
					if tc.want != nil {
						want = tc.want(want)
					}
					assert.Equal(t, want, got)
					return
				}
				require.ErrorIs(t, err, core.ErrInvalidArgument)
				assert.Contains(t, err.Error(), "gpurt: copy_device: ")
				assert.Contains(t, err.Error(), tc.msg)
				assert.Equal(t, pattern, got, "a refused copy changed the buffer")
			})
		}
	}
	t.Run("two buffers copied", func(t *testing.T) {
		got := make([]byte, 64)
		require.NoError(t, core.CopyToHost(got, other))
		assert.Equal(t, pattern, got)
	})
}
