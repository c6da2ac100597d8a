// SPDX-License-Identifier: Apache-2.0

package kvpage

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
)

// benchDevice opens the mock, or with GPURT_KVPAGE_BENCH_ENV=1 the
// runtime GPURT_BACKEND and GPURT_PLUGIN_PATH name (a GPU plugin).
func benchDevice(b *testing.B) *core.Device {
	if os.Getenv("GPURT_KVPAGE_BENCH_ENV") != "1" {
		return mockDevice(b)
	}
	rt, err := core.Open(core.Config{})
	require.NoError(b, err)
	b.Cleanup(func() { _ = rt.Close() })
	d, err := rt.Device(0)
	require.NoError(b, err)
	return d
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loop runs step in b.Loop and reports the CPU time per step too (the
// wall time of a shared, loaded machine overstates the host cost).
func loop(b *testing.B, step func()) {
	b.ReportAllocs()
	n := 0
	c0 := cpuTime()
	for b.Loop() {
		step()
		n++
	}
	b.ReportMetric(float64(cpuTime()-c0)/float64(n), "cpu-ns/op")
}

// decodeBatch is 256 live requests of about 1K-2K tokens (page 16), half
// of them sharing a 512-token system prompt, each a fixed length cycle:
// at 2K tokens it leaves and joins again (a prefix hit for the shared
// half), so the allocator sees steady continuous batching.
type decodeBatch struct {
	a      *Allocator
	ids    []ReqID
	prompt [][]int32
	tok    []int32
}

const (
	benchBatch  = 256
	benchPS     = 16
	benchMaxTok = 2048
)

func newDecodeBatch(b *testing.B) *decodeBatch {
	a, err := New(Config{NumPages: benchBatch * (benchMaxTok/benchPS + 2), PageSize: benchPS, MaxRequests: benchBatch})
	require.NoError(b, err)
	db := &decodeBatch{a: a, tok: []int32{1}}
	sys := seq(1, 512)
	for i := 0; i < benchBatch; i++ {
		p := seq(10_000*(i+1), 1024+3*i)
		if i%2 == 0 {
			p = cat(sys, p[512:])
		}
		db.prompt = append(db.prompt, p)
		id, cached, err := a.Join(p)
		require.NoError(b, err)
		_, _, err = a.Append(id, p[cached:])
		require.NoError(b, err)
		db.ids = append(db.ids, id)
	}
	return db
}

// decode appends one token to every request, cycling those at the cap.
func (db *decodeBatch) decode() {
	for i, id := range db.ids {
		n, err := db.a.Tokens(id)
		if err != nil {
			panic(err)
		}
		if n >= benchMaxTok {
			if err := db.a.Leave(id); err != nil {
				panic(err)
			}
			p := db.prompt[i]
			if id, _, err = db.a.Join(p); err != nil {
				panic(err)
			}
			c, _ := db.a.Tokens(id)
			if _, _, err := db.a.Append(id, p[c:]); err != nil {
				panic(err)
			}
			db.ids[i] = id
			continue
		}
		if _, _, err := db.a.Append(id, db.tok); err != nil {
			panic(err)
		}
	}
}

// table is a page table for db's batch on d, closed at the benchmark's
// end.
func (db *decodeBatch) table(b *testing.B, d *core.Device) *Table {
	tab, err := NewTable(d, TableConfig{MaxBatch: benchBatch, MaxPages: db.a.NumPages(), MaxRows: benchBatch})
	require.NoError(b, err)
	b.Cleanup(func() { _ = tab.Close() })
	return tab
}

// fill begins tab and adds one row of every request of db.
func (db *decodeBatch) fill(tab *Table) {
	if err := tab.Begin(); err != nil {
		panic(err)
	}
	for _, id := range db.ids {
		if _, err := tab.Add(db.a, id, 1); err != nil {
			panic(err)
		}
	}
}

// BenchmarkAllocatorDecodeStep is the allocator's part of a decode step
// at batch 256: one Append per request (a new page every 16 steps; a
// leave and a prefix-cached rejoin at 2K tokens).
func BenchmarkAllocatorDecodeStep(b *testing.B) {
	db := newDecodeBatch(b)
	loop(b, db.decode)
}

// BenchmarkTableStep is the page table of a decode step at batch 256
// (about 100 pages a request): Begin, 256 Adds, and the one upload.
func BenchmarkTableStep(b *testing.B) {
	d := benchDevice(b)
	db := newDecodeBatch(b)
	tab := db.table(b, d)
	s := mockrt.Stream(b, d)
	step := func() {
		db.fill(tab)
		if _, err := tab.Upload(s); err != nil {
			panic(err)
		}
	}
	step()
	loop(b, step)
	require.NoError(b, s.Synchronize())
}

// BenchmarkDecodeStepHost is a decode step's whole host cost at batch
// 256: the allocator's appends, then the page table and its upload.
func BenchmarkDecodeStepHost(b *testing.B) {
	d := benchDevice(b)
	db := newDecodeBatch(b)
	tab := db.table(b, d)
	s := mockrt.Stream(b, d)
	pages := 0
	step := func() {
		db.decode()
		db.fill(tab)
		st, err := tab.Upload(s)
		if err != nil {
			panic(err)
		}
		pages = st.Pages
	}
	step()
	loop(b, step)
	require.NoError(b, s.Synchronize())
	b.ReportMetric(float64(pages), "pages/step")
	b.ReportMetric(float64(tab.UploadBytes(pages)), "upload-B/step")
}

// BenchmarkTableFill is the host part of BenchmarkTableStep alone: Begin
// and 256 Adds, no upload (so no device work and no wait).
func BenchmarkTableFill(b *testing.B) {
	d := benchDevice(b)
	db := newDecodeBatch(b)
	tab := db.table(b, d)
	loop(b, func() { db.fill(tab) })
}

// BenchmarkSchedulerDecodeStep is the scheduler's host cost of a step at
// batch 256 (Next and Complete, the fake model's tokens given): 256
// requests of 1K-token prompts, half sharing a 512-token system prompt,
// each generating 512 tokens and then submitted again (so admissions with
// prefix hits and chunked prefills mix in, as in a steady load).
func BenchmarkSchedulerDecodeStep(b *testing.B) {
	a, err := New(Config{NumPages: benchBatch * (1536/benchPS + 2), PageSize: benchPS, MaxRequests: benchBatch})
	require.NoError(b, err)
	s, err := NewScheduler(a, SchedConfig{TokenBudget: 2048, MaxBatch: benchBatch, ChunkSize: 512, EOS: -1})
	require.NoError(b, err)
	sys := seq(1, 512)
	prompts := make([][]int32, benchBatch)
	for i := range prompts {
		prompts[i] = seq(10_000*(i+1), 1024)
		if i%2 == 0 {
			prompts[i] = cat(sys, prompts[i][512:])
		}
		_, err := s.Submit(prompts[i], 512)
		require.NoError(b, err)
	}
	sampled := make([]int32, benchBatch)
	next := 0
	step := func() {
		bt, err := s.Next()
		if err != nil {
			panic(err)
		}
		n := 0
		for _, e := range bt.Entries {
			if e.Sample {
				n++
			}
		}
		done, err := s.Complete(sampled[:n])
		if err != nil {
			panic(err)
		}
		for range done {
			if _, err := s.Submit(prompts[next%benchBatch], 512); err != nil {
				panic(err)
			}
			next++
		}
	}
	for i := 0; i < 2000; i++ {
		step()
	}
	loop(b, step)
	st := s.Stats()
	b.ReportMetric(float64(st.CachedTokens)/float64(st.PromptTokens), "prefix-hit-rate")
}
