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

// TestCopyPoolSize: the shared pool has StagingConfig().Workers
// participants (by default min(GOMAXPROCS-1, maxCopyParts), at least one)
// and is made once.
func TestCopyPoolSize(t *testing.T) {
	p := stagePool()
	require.Same(t, p, stagePool())
	assert.Equal(t, StagingConfig().Workers, p.parts)
	assert.GreaterOrEqual(t, p.parts, 1)
}

// TestCopyPoolStartFinish: several memmoves started on one pool before
// any finishes (as the staged copies pipeline them) all complete, and
// finish on a job that never started, or twice, does nothing.
func TestCopyPoolStartFinish(t *testing.T) {
	p := newCopyPool(4)
	defer p.stop()
	var idle memJob
	p.finish(&idle)
	const n, k = 5<<20 + 17, 3
	var jobs [k]memJob
	srcs, dsts := make([][]byte, k), make([][]byte, k)
	for i := range k {
		srcs[i], dsts[i] = make([]byte, n), make([]byte, n)
		for x := range srcs[i] {
			srcs[i][x] = byte(x*13 + i)
		}
		p.start(&jobs[i], dsts[i], srcs[i])
	}
	for i := range k {
		p.finish(&jobs[i])
		p.finish(&jobs[i])
		assert.Equal(t, srcs[i], dsts[i], "job %d", i)
		assert.Nil(t, jobs[i].src, "job %d keeps no slice", i)
	}
	small := []byte{1, 2, 3}
	got := make([]byte, 3)
	p.start(&idle, got, small) // too small to split: copied at once
	assert.Equal(t, small, got)
	p.finish(&idle)
}

// TestParseStageSettings: defaults by core count, valid settings with and
// without size suffixes, and invalid ones ignored with one warning each.
func TestParseStageSettings(t *testing.T) {
	tests := []struct {
		name  string
		env   map[string]string
		procs int
		want  StageSettings
		warns int
	}{
		{"defaults 16 cores", nil, 16, StageSettings{Chunk: 8 << 20, BigAuto: true, Slots: 4, Workers: 12}, 0},
		{"defaults 4 cores", nil, 4, StageSettings{Chunk: 8 << 20, BigAuto: true, Slots: 4, Workers: 3}, 0},
		{"defaults 1 core", nil, 1, StageSettings{Chunk: 8 << 20, BigAuto: true, Slots: 4, Workers: 1}, 0},
		{"all set", map[string]string{"GPURT_STAGE_CHUNK": "16M", "GPURT_STAGE_SLOTS": "6", "GPURT_COPY_WORKERS": "15"}, 16,
			StageSettings{Chunk: 16 << 20, Slots: 6, Workers: 15}, 0},
		{"bytes rounded to pages", map[string]string{"GPURT_STAGE_CHUNK": "1000000"}, 16,
			StageSettings{Chunk: 1003520, Slots: 4, Workers: 12}, 0},
		{"suffixes", map[string]string{"GPURT_STAGE_CHUNK": " 512k "}, 16, StageSettings{Chunk: 512 << 10, Slots: 4, Workers: 12}, 0},
		{"1G", map[string]string{"GPURT_STAGE_CHUNK": "1G"}, 16, StageSettings{Chunk: 1 << 30, Slots: 4, Workers: 12}, 0},
		{"invalid", map[string]string{"GPURT_STAGE_CHUNK": "0M", "GPURT_STAGE_SLOTS": "1", "GPURT_COPY_WORKERS": "x"}, 16,
			StageSettings{Chunk: 8 << 20, BigAuto: true, Slots: 4, Workers: 12}, 3},
		{"out of range", map[string]string{"GPURT_STAGE_CHUNK": "2G", "GPURT_STAGE_SLOTS": "17", "GPURT_COPY_WORKERS": "-2"}, 16,
			StageSettings{Chunk: 8 << 20, BigAuto: true, Slots: 4, Workers: 12}, 3},
		{"overflow", map[string]string{"GPURT_STAGE_CHUNK": "99999999999999G"}, 16,
			StageSettings{Chunk: 8 << 20, BigAuto: true, Slots: 4, Workers: 12}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var warns []string
			got := parseStageSettings(func(k string) string { return tt.env[k] }, tt.procs,
				func(m string) { warns = append(warns, m) })
			assert.Equal(t, tt.want, got)
			assert.Len(t, warns, tt.warns)
			for _, w := range warns {
				assert.Contains(t, w, "gpurt: ignoring GPURT_")
			}
		})
	}
}

// TestChunkFor: a slots-th of the copy between stageMin and the chunk
// setting; 16 MiB for big copies only while the chunk is not set.
func TestChunkFor(t *testing.T) {
	auto := StageSettings{Chunk: 8 << 20, BigAuto: true, Slots: 4, Workers: 8}
	fixed := StageSettings{Chunk: 32 << 20, Slots: 4, Workers: 8}
	tests := []struct {
		n    uint64
		cfg  StageSettings
		want uint64
	}{
		{64 << 10, auto, stageMin},
		{4<<20 + 16384, auto, 1<<20 + 4096},
		{64 << 20, auto, 8 << 20},
		{bigCopy - 1, auto, 8 << 20},
		{bigCopy, auto, 16 << 20},
		{1 << 30, auto, 16 << 20},
		{64 << 20, fixed, 16 << 20},
		{1 << 30, fixed, 32 << 20},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d/%s", tt.n, tt.cfg), func(t *testing.T) {
			assert.Equal(t, tt.want, chunkFor(tt.n, tt.cfg))
			assert.LessOrEqual(t, tt.want, uint64(tt.cfg.maxChunk()))
		})
	}
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
