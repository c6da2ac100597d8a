// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
)

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
