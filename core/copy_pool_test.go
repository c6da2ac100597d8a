// SPDX-License-Identifier: Apache-2.0

package core

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
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
	if testing.Short() {
		// -short (make test's -race pass, where every byte filled is
		// instrumented): the piece boundaries and copies of two and three
		// pieces; the 8- and 11-piece copies run without -short.
		sizes = sizes[:7]
	}
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
						// eight bytes a draw, the fill by bytes.Repeat:
						// under -race every store in a loop is instrumented
						src := make([]byte, n+off+7)
						for i := 0; i < n+off; i += 8 {
							binary.LittleEndian.PutUint64(src[i:], r.Uint64())
						}
						src = src[: n+off : n+off]
						dst := bytes.Repeat([]byte{0xee}, n+off+3)
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

// TestCopyPoolSize: a runtime's pool has its CopyWorkers participants
// (by default min(GOMAXPROCS-1, maxCopyParts), at least one), and
// runtimes of one setting share one pool.
func TestCopyPoolSize(t *testing.T) {
	dir := testutil.MockPlugin(t)
	rt, err := Open(Config{PluginPaths: []string{dir}, Backend: "mock"})
	require.NoError(t, err)
	defer rt.Close()
	assert.Equal(t, max(min(runtime.GOMAXPROCS(0)-1, maxCopyParts), 1), rt.pool.parts)
	rt3, err := Open(Config{PluginPaths: []string{dir}, Backend: "mock", CopyWorkers: 3})
	require.NoError(t, err)
	defer rt3.Close()
	assert.Equal(t, 3, rt3.pool.parts)
	assert.Same(t, rt3.pool, copyPoolOf(3))
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

// TestResolveStageSettings: defaults by core count, valid settings from
// the environment with and without size suffixes, fields beating
// variables, and invalid values refused with an error naming the
// variable (or field) and the value.
func TestResolveStageSettings(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		env   map[string]string
		procs int
		want  stageSettings
		err   string
	}{
		{"defaults 16 cores", Config{}, nil, 16, stageSettings{Chunk: 8 << 20, BigAuto: true, Slots: 4, Workers: 12}, ""},
		{"defaults 4 cores", Config{}, nil, 4, stageSettings{Chunk: 8 << 20, BigAuto: true, Slots: 4, Workers: 3}, ""},
		{"defaults 1 core", Config{}, nil, 1, stageSettings{Chunk: 8 << 20, BigAuto: true, Slots: 4, Workers: 1}, ""},
		{"all set", Config{}, map[string]string{"GPURT_STAGE_CHUNK": "16M", "GPURT_STAGE_SLOTS": "6", "GPURT_COPY_WORKERS": "15"}, 16,
			stageSettings{Chunk: 16 << 20, Slots: 6, Workers: 15}, ""},
		{"fields beat variables", Config{StageChunk: 1 << 20, StageSlots: 3, CopyWorkers: 2},
			map[string]string{"GPURT_STAGE_CHUNK": "16M", "GPURT_STAGE_SLOTS": "6", "GPURT_COPY_WORKERS": "15"}, 16,
			stageSettings{Chunk: 1 << 20, Slots: 3, Workers: 2}, ""},
		{"bytes rounded to pages", Config{}, map[string]string{"GPURT_STAGE_CHUNK": "1000000"}, 16,
			stageSettings{Chunk: 1003520, Slots: 4, Workers: 12}, ""},
		{"suffixes", Config{}, map[string]string{"GPURT_STAGE_CHUNK": " 512k "}, 16, stageSettings{Chunk: 512 << 10, Slots: 4, Workers: 12}, ""},
		{"1G", Config{}, map[string]string{"GPURT_STAGE_CHUNK": "1G"}, 16, stageSettings{Chunk: 1 << 30, Slots: 4, Workers: 12}, ""},
		{"zero chunk", Config{}, map[string]string{"GPURT_STAGE_CHUNK": "0M"}, 16, stageSettings{},
			`gpurt: open: invalid argument: GPURT_STAGE_CHUNK="0M": want a byte count (K, M, G suffixes) from 64KiB to 1GiB`},
		{"one slot", Config{}, map[string]string{"GPURT_STAGE_SLOTS": "1"}, 16, stageSettings{},
			`gpurt: open: invalid argument: GPURT_STAGE_SLOTS="1": want a whole number from 2 to 16`},
		{"not a number", Config{}, map[string]string{"GPURT_COPY_WORKERS": "x"}, 16, stageSettings{},
			`gpurt: open: invalid argument: GPURT_COPY_WORKERS="x": want a whole number from 1 to 256`},
		{"negative", Config{}, map[string]string{"GPURT_COPY_WORKERS": "-2"}, 16, stageSettings{},
			`GPURT_COPY_WORKERS="-2"`},
		{"too big", Config{}, map[string]string{"GPURT_STAGE_CHUNK": "2G"}, 16, stageSettings{}, `GPURT_STAGE_CHUNK="2G"`},
		{"overflow", Config{}, map[string]string{"GPURT_STAGE_CHUNK": "99999999999999G"}, 16, stageSettings{}, `GPURT_STAGE_CHUNK="99999999999999G"`},
		{"bad field", Config{StageSlots: 17}, nil, 16, stageSettings{},
			`gpurt: open: invalid argument: Config.StageSlots="17": want a whole number from 2 to 16`},
		{"negative field", Config{CopyWorkers: -1}, nil, 16, stageSettings{}, `Config.CopyWorkers="-1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, ok := resolveCase(t, tt.cfg, tt.env, tt.procs, tt.err); ok {
				assert.Equal(t, tt.want, got.stage)
			}
		})
	}
}

// resolveCase resolves cfg with the environment env on procs cores: with
// wantErr set, it checks the error (ErrInvalidArgument, containing
// wantErr) and returns false; else it requires no error and returns the
// settings and true.
func resolveCase(t *testing.T, cfg Config, env map[string]string, procs int, wantErr string) (settings, bool) {
	t.Helper()
	got, err := cfg.resolveEnv("open", func(k string) string { return env[k] }, procs)
	if wantErr != "" {
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrInvalidArgument)
		assert.Contains(t, err.Error(), wantErr)
		return got, false
	}
	require.NoError(t, err)
	return got, true
}

// TestResolveOpCacheAndLogLevel: GPURT_OPCACHE_SIZE and GPURT_LOG_LEVEL
// (and their fields) are checked like the staging knobs.
func TestResolveOpCacheAndLogLevel(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		env  map[string]string
		size int
		err  string
	}{
		{"defaults", Config{}, nil, 1024, ""},
		{"variable", Config{}, map[string]string{"GPURT_OPCACHE_SIZE": "64", "GPURT_LOG_LEVEL": "debug"}, 64, ""},
		{"field beats variable", Config{OpCacheSize: 8, LogLevel: "off"}, map[string]string{"GPURT_OPCACHE_SIZE": "x", "GPURT_LOG_LEVEL": "loud"}, 8, ""},
		{"bad size", Config{}, map[string]string{"GPURT_OPCACHE_SIZE": "lots"}, 0,
			`gpurt: open: invalid argument: GPURT_OPCACHE_SIZE="lots": want a whole number from 1 to 1048576`},
		{"zero size", Config{}, map[string]string{"GPURT_OPCACHE_SIZE": "0"}, 0, `GPURT_OPCACHE_SIZE="0"`},
		{"negative size field", Config{OpCacheSize: -5}, nil, 0, `Config.OpCacheSize="-5"`},
		{"bad level", Config{}, map[string]string{"GPURT_LOG_LEVEL": "loud"}, 0,
			`gpurt: open: invalid argument: GPURT_LOG_LEVEL="loud": want trace, debug, info, warn, error or off`},
		{"bad level field", Config{LogLevel: "verbose"}, nil, 0, `Config.LogLevel="verbose"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, ok := resolveCase(t, tt.cfg, tt.env, 4, tt.err); ok {
				assert.Equal(t, tt.size, got.opCacheSize)
				assert.NotNil(t, got.log)
			}
		})
	}
}

// TestChunkFor: a slots-th of the copy between stageMin and the chunk
// setting; 16 MiB for big copies only while the chunk is not set.
func TestChunkFor(t *testing.T) {
	auto := stageSettings{Chunk: 8 << 20, BigAuto: true, Slots: 4, Workers: 8}
	fixed := stageSettings{Chunk: 32 << 20, Slots: 4, Workers: 8}
	tests := []struct {
		n    uint64
		cfg  stageSettings
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
// of three whatever the machine's size (the default one may be serial).
func TestStagedCopyPoolNoAllocs(t *testing.T) {
	rt, err := Open(Config{PluginPaths: []string{testutil.MockPlugin(t)}, Backend: "mock"})
	require.NoError(t, err)
	defer rt.Close()
	p := newCopyPool(3)
	rt.pool = p
	defer p.stop()
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
