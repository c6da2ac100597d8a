// SPDX-License-Identifier: Apache-2.0

package core

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkGoSide isolates the Go-side host cost of Stream.Gemm and
// Stream.Launch from the plugin's: a private copy of the runtime's slot
// table points gemm_run and launch at the mock's stream_query (which reads
// only its first two arguments, the runtime and the stream, and returns
// at once for an idle stream), so a call costs the Go work plus one bare
// dispatch. Subtract the "query" figure (Stream.Query, the bare dispatch)
// to get what Go adds per call. Timings are never asserted.
func BenchmarkGoSide(b *testing.B) {
	rt, dev := testRuntime(b, "delay_us=0")
	s := testStream(b, dev)
	_, ks := testKernels(b, dev, "fill_f32")
	fill := ks[0]
	buf := testAlloc(b, dev, 64<<10)
	view, err := buf.View(32768, 4096)
	require.NoError(b, err)
	a, err := buf.View(0, 8192)
	require.NoError(b, err)
	bb, err := buf.View(8192, 8192)
	require.NoError(b, err)
	d, err := buf.View(16384, 8192)
	require.NoError(b, err)
	desc := GemmDesc{AType: BF16, BType: BF16, DType: BF16, TransA: true, M: 64, N: 64, K: 64}
	ops := GemmOperands{A: a, B: bb, D: d, Alpha: 1}
	require.NoError(b, s.Gemm(desc, ops)) // warm the op cache with the real slot
	require.NoError(b, s.Synchronize())

	stub := *rt.p
	stub.API.GemmRun, stub.API.Launch = stub.API.StreamQuery, stub.API.StreamQuery
	real := rt.p
	rt.p = &stub
	defer func() { rt.p = real }()

	b.Run("query", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Query(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gemm", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := s.Gemm(desc, ops); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("launch", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := s.Launch(fill, Grid1D(1, 1), ArgBuffer(view), ArgScalar[float32](1), ArgScalar[uint64](1)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
