// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/attention"
	"github.com/metrale/gpurt/core/collective"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/internal/testutil"
)

// Tests of issue 9: hangs, leaks, wrong results that succeed, crashes.

// hangLimit bounds a call that must return: far longer than any of these
// calls takes even under -race on a loaded 2-core machine, so reaching it
// means a hang, not slowness.
const hangLimit = 60 * time.Second

// bounded runs fn and fails the test when it has not returned within
// hangLimit (fn's goroutine is then left behind; the test does not stall).
func bounded(t testing.TB, what string, fn func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("%s did not return within %v: it hangs", what, hangLimit)
	}
}

// stagedSize takes the staged path (at least 64 KiB) in one small chunk.
const stagedSize = 128 << 10

// Item 1: copies waiting for a staging slot wake when the slot's creation
// fails, and Close then returns.
func TestStagedCopyWaitersWake(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(rt *core.Runtime) error
		want  error
	}{
		{"device lost", func(rt *core.Runtime) error { return inspect.Control(rt, "lose_device", 0) }, core.ErrDeviceLost},
		// The first pinned allocation of the copies fails: one stager's
		// slots cannot be made while others wait.
		{"pinned memory exhausted", func(rt *core.Runtime) error { return inspect.Control(rt, "fail_alloc_nth", 1) }, core.ErrOutOfMemory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := openMock(t, "delay_us=0")
			d := dev0(t, rt)
			const copies = 64
			buf, err := d.Alloc(copies * stagedSize)
			require.NoError(t, err)
			require.NoError(t, tc.fault(rt))
			errs := make(chan error, copies)
			bounded(t, "64 concurrent staged copies", func() {
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i := 0; i < copies; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						v, err := buf.View(i*stagedSize, stagedSize)
						if err == nil {
							if i%2 == 0 {
								err = core.CopyFromHost(v, make([]byte, stagedSize))
							} else {
								err = core.CopyToHost(make([]byte, stagedSize), v)
							}
						}
						errs <- err
					}()
				}
				close(start)
				wg.Wait()
			})
			close(errs)
			failed := 0
			for err := range errs {
				if err != nil {
					failed++
					assert.ErrorIs(t, err, tc.want)
				}
			}
			assert.NotZero(t, failed, "the fault made no copy fail")
			bounded(t, "Close after the copies", func() { assert.NoError(t, rt.Close()) })
		})
	}
}

// Item 1: Close racing large copies returns, and so does every copy
// (each either completes or fails with ErrClosed).
func TestCloseRacingStagedCopies(t *testing.T) {
	for round := 0; round < 20; round++ {
		rt := openMock(t, "delay_us=0")
		d := dev0(t, rt)
		const copies = 16
		buf, err := d.Alloc(copies * stagedSize)
		require.NoError(t, err)
		bounded(t, "copies racing Close", func() {
			var wg, started sync.WaitGroup
			started.Add(copies)
			for i := 0; i < copies; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v, err := buf.View(i*stagedSize, stagedSize)
					require.NoError(t, err)
					src := make([]byte, stagedSize)
					started.Done()
					for {
						if err := core.CopyFromHost(v, src); err != nil {
							assert.ErrorIs(t, err, core.ErrClosed)
							return
						}
					}
				}()
			}
			// Close while the first copies make the device's stagers.
			started.Wait()
			assert.NoError(t, rt.Close())
			wg.Wait()
		})
	}
}

// callAll is testutil.CallAll.
var callAll = testutil.CallAll

// Item 4: nil and zero-value receivers of every core type return errors
// (or zero values, for accessors), never panic; so do valid receivers
// given zero arguments.
func TestNilAndZeroReceiversNeverPanic(t *testing.T) {
	values := []any{
		(*core.Runtime)(nil), &core.Runtime{},
		(*core.Device)(nil), &core.Device{},
		(*core.Buffer)(nil), &core.Buffer{}, core.View{},
		(*core.HostBuffer)(nil), &core.HostBuffer{},
		core.PinnedView{},
		(*core.Stream)(nil), &core.Stream{},
		(*core.Event)(nil), &core.Event{},
		(*core.Module)(nil), &core.Module{},
		(*core.Kernel)(nil), &core.Kernel{},
		(*core.LaunchBatch)(nil), &core.LaunchBatch{},
		(*core.Graph)(nil), &core.Graph{},
		(*attention.Attention)(nil), &attention.Attention{}, (*attention.KVCache)(nil), &attention.KVCache{}, attention.KVCacheDesc{},
		(*collective.Comm)(nil), &collective.Comm{}, collective.Kind(0), collective.ReduceOp(0),
		core.Arg{}, core.DType(0), core.Epilogue(0),
	}
	for _, v := range values {
		name := fmt.Sprintf("%T", v)
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
			name = "nil " + name
		} else {
			name = "zero " + name
		}
		t.Run(name, func(t *testing.T) { callAll(t, name, reflect.ValueOf(v)) })
	}

	// The example from the issue.
	rt := openMock(t, "delay_us=0")
	d, err := rt.Device(7)
	require.Error(t, err)
	_, err = d.Alloc(1)
	assert.ErrorIs(t, err, core.ErrInvalidArgument)

	// Valid receivers, zero arguments; methods that end the object are
	// called last, on objects of their own.
	d = dev0(t, rt)
	live := func() []any {
		buf, err := d.Alloc(256)
		require.NoError(t, err)
		hb, err := rt.AllocHost(256)
		require.NoError(t, err)
		hs, err := rt.AllocHostFromHeap(256)
		require.NoError(t, err)
		s, err := d.NewStream()
		require.NoError(t, err)
		ev, err := d.NewEvent(true)
		require.NoError(t, err)
		mod, err := d.BuiltinModule()
		require.NoError(t, err)
		k, err := mod.Kernel("fill_f32")
		require.NoError(t, err)
		whole, err := buf.View(0, buf.Len())
		require.NoError(t, err)
		return []any{rt, d, buf, whole, hb, hs, s, ev, mod, k, s.NewLaunchBatch()}
	}
	enders := []string{"Close", "Free", "Unload"}
	for _, v := range live() {
		name := fmt.Sprintf("live %T", v)
		t.Run(name, func(t *testing.T) { callAll(t, name, reflect.ValueOf(v), enders...) })
	}
	// Functions of the package, on nil and zero values.
	zeroBuf := &core.Buffer{}
	for name, f := range map[string]func() error{
		"CopyFromHost zero Buffer": func() error { return core.CopyFromHost(zeroBuf, []byte{1}) },
		"CopyToHost zero Buffer":   func() error { return core.CopyToHost([]byte{1}, zeroBuf) },
		"Copy zero Buffers":        func() error { return core.Copy(zeroBuf, zeroBuf) },
		"Memset zero Buffer":       func() error { return core.Memset(zeroBuf, 1) },
		"Memset32 nil":             func() error { return core.Memset32(nil, 1) },
		"Elapsed nil":              func() error { _, err := core.Elapsed(nil, nil); return err },
		"Elapsed zero":             func() error { _, err := core.Elapsed(&core.Event{}, &core.Event{}); return err },
		"Stream.Time nil fn": func() error {
			s, err := d.NewStream()
			require.NoError(t, err)
			defer s.Close()
			_, err = s.Time(nil)
			return err
		},
		"Launch zero Kernel": func() error {
			s, err := d.NewStream()
			require.NoError(t, err)
			defer s.Close()
			return s.Launch(&core.Kernel{}, core.LaunchConfig{})
		},
		"Record zero Stream": func() error {
			ev, err := d.NewEvent(false)
			require.NoError(t, err)
			defer ev.Close()
			return ev.Record(&core.Stream{})
		},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("%s panicked: %v", name, p)
					}
				}()
				err = f()
			}()
			assert.ErrorIs(t, err, core.ErrInvalidArgument, name)
		})
	}

	for _, v := range append(live()[1:], rt) { // the runtime last
		name := fmt.Sprintf("live %T", v)
		t.Run(name+" enders", func(t *testing.T) {
			for _, e := range enders {
				if m := reflect.ValueOf(v).MethodByName(e); m.IsValid() {
					func() {
						defer func() {
							if p := recover(); p != nil {
								t.Errorf("%s.%s panicked: %v", name, e, p)
							}
						}()
						m.Call(nil)
					}()
				}
			}
		})
	}
}

// Item 4: Bytes after Free or Close is nil, never memory that is gone or
// belongs to another slice.
func TestBytesAfterFreeOrClose(t *testing.T) {
	rt := openMock(t, "delay_us=0")
	hb, err := rt.AllocHost(4096)
	require.NoError(t, err)
	hs, err := rt.AllocHostFromHeap(4096)
	require.NoError(t, err)
	hbv, err := hb.View(16, 32)
	require.NoError(t, err)
	hsv, err := hs.View(16, 32)
	require.NoError(t, err)
	require.Len(t, hb.Bytes(), 4096)
	require.Len(t, hs.Bytes(), 4096)
	require.Len(t, hsv.Bytes(), 32)
	require.NoError(t, hs.Free())
	assert.Nil(t, hs.Bytes(), "HostSlice.Bytes after Free")
	assert.Nil(t, hsv.Bytes(), "PinnedView.Bytes of a freed HostSlice")
	// The freed span goes to the next slice: the old one must not see it.
	hs2, err := rt.AllocHostFromHeap(4096)
	require.NoError(t, err)
	assert.Nil(t, hs.Bytes())
	require.NoError(t, hb.Free())
	assert.Nil(t, hb.Bytes(), "HostBuffer.Bytes after Free")
	assert.Nil(t, hbv.Bytes(), "PinnedView.Bytes of a freed HostBuffer")

	hb2, err := rt.AllocHost(64)
	require.NoError(t, err)
	require.NoError(t, rt.Close())
	assert.Nil(t, hs2.Bytes(), "HostSlice.Bytes after Close")
	assert.Nil(t, hb2.Bytes(), "HostBuffer.Bytes after Close")
}

// Item 3: a zero-length View as a kernel argument is an error (the ABI
// reads length 0 as "to the end of the buffer"), for Launch and
// LaunchBatch; the kernel never runs and the buffer is untouched.
func TestZeroLengthViewKernelArgument(t *testing.T) {
	_, s, fill, buf := fillSetup(t, "delay_us=0", 64)
	empty, err := buf.View(16, 0)
	require.NoError(t, err)
	for name, launch := range map[string]func() error{
		"Launch": func() error {
			return s.Launch(fill, core.Grid1D(4, 4), core.ArgBuffer(empty), core.ArgScalar[float32](1), core.ArgScalar[uint64](4))
		},
		"LaunchBatch": func() error {
			b := s.NewLaunchBatch()
			addErr := b.Add(fill, core.Grid1D(4, 4), core.ArgBuffer(empty), core.ArgScalar[float32](1), core.ArgScalar[uint64](4))
			n, err := b.Submit()
			assert.Zero(t, n)
			assert.Equal(t, addErr, err)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, core.Memset(buf, 0))
			err := launch()
			require.ErrorIs(t, err, core.ErrInvalidArgument)
			assert.Contains(t, err.Error(), "zero-length")
			require.NoError(t, s.Synchronize())
			got := make([]byte, 64)
			require.NoError(t, core.CopyToHost(got, buf))
			assert.Equal(t, make([]byte, 64), got, "the kernel wrote outside the empty view")
		})
	}
}

// Item 3: HostSlice.Free waits for a copy still queued into the slice,
// so the freed span, handed to the next slice, is not written afterwards
// (as HostBuffer.Free waits).
func TestHostSliceFreeWaitsForQueuedCopy(t *testing.T) {
	rt := openMock(t, "delay_us=100000") // each stream op waits 100 ms first
	d := dev0(t, rt)
	s := stream(t, d)
	const n = 4096
	buf := alloc(t, d, n)
	require.NoError(t, core.Memset(buf, 0xaa))
	hs, err := rt.AllocHostFromHeap(n)
	require.NoError(t, err)
	addr := &hs.Bytes()[0]
	require.NoError(t, s.CopyToPinned(hs, buf))
	require.NoError(t, hs.Free())
	hs2, err := rt.AllocHostFromHeap(n)
	require.NoError(t, err)
	defer hs2.Free()
	mem := hs2.Bytes()
	require.Same(t, addr, &mem[0], "the heap hands the freed span out again")
	for i := range mem {
		mem[i] = 0x55
	}
	require.NoError(t, s.Synchronize())
	assert.Equal(t, bytes.Repeat([]byte{0x55}, n), mem, "a copy queued before Free wrote into the next slice")
}

// Item 3: Grid1D of more blocks than a uint32 holds (or of a negative
// size) gives a config that Launch rejects naming the size, instead of a
// truncated grid.
func TestGrid1DOverflow(t *testing.T) {
	_, s, fill, buf := fillSetup(t, "delay_us=0", 16)
	for _, tc := range []struct {
		n, block int
		want     string
	}{
		{1 << 40, 256, "1099511627776"},
		{1<<32*256 + 1, 256, "1099511627777"},
		{-5, 256, "-5"},
		{1024, 1 << 33, "8589934592"},
	} {
		t.Run(fmt.Sprintf("%d/%d", tc.n, tc.block), func(t *testing.T) {
			cfg := core.Grid1D(tc.n, tc.block)
			err := s.Launch(fill, cfg, core.ArgBuffer(buf), core.ArgScalar[float32](1), core.ArgScalar[uint64](4))
			require.ErrorIs(t, err, core.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.want)
			b := s.NewLaunchBatch()
			require.ErrorIs(t, b.Add(fill, cfg, core.ArgBuffer(buf), core.ArgScalar[float32](1), core.ArgScalar[uint64](4)), core.ErrInvalidArgument)
			b.Reset()
		})
	}
	// The largest grid that fits is fine.
	cfg := core.Grid1D(1<<32-1, 1)
	assert.Equal(t, uint32(1<<32-1), cfg.Grid[0])
}

// Item 3: a negative leading dimension is an error (not "packed"), and a
// GEMM whose operand extent overflows 64 bits is out of range before any
// plan is made or cached.
func TestGemmDescChecks(t *testing.T) {
	rt := openMock(t, "delay_us=0")
	d := dev0(t, rt)
	s := stream(t, d)
	buf := alloc(t, d, 4*4*4)
	ops := core.GemmOperands{A: buf, B: buf, D: buf, Alpha: 1}
	base := core.GemmDesc{AType: core.F32, BType: core.F32, DType: core.F32, M: 2, N: 2, K: 2}
	for _, tc := range []struct {
		name string
		mod  func(*core.GemmDesc)
		want error
		text string
	}{
		{"negative lda", func(g *core.GemmDesc) { g.LDA = -1 }, core.ErrInvalidArgument, "lda"},
		{"negative ldb", func(g *core.GemmDesc) { g.LDB = -2 }, core.ErrInvalidArgument, "ldb"},
		{"negative ldc", func(g *core.GemmDesc) { g.LDC = -3 }, core.ErrInvalidArgument, "ldc"},
		{"negative ldd", func(g *core.GemmDesc) { g.LDD = -4 }, core.ErrInvalidArgument, "ldd"},
		// (2-1)*2^62 + 2*1 + 2 elements of 4 bytes wraps to 16 bytes.
		{"stride overflow", func(g *core.GemmDesc) { g.Batch, g.StrideA = 2, 1<<62 }, core.ErrOutOfRange, "64 bits"},
		{"ld overflow", func(g *core.GemmDesc) { g.LDB = 1 << 62 }, core.ErrOutOfRange, "64 bits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := base
			tc.mod(&g)
			err := s.Gemm(g, ops)
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.text)
			st := inspect.OpCache(rt)
			assert.Zero(t, st.Size, "a plan was cached")
			assert.Zero(t, st.Misses, "a plan was made")
		})
	}
	require.NoError(t, s.Gemm(base, ops)) // the base is valid
}

// collected reports whether the object that cleanup was registered on
// (via watch) is garbage collected within hangLimit, running the GC.
func collected(t *testing.T, gone <-chan struct{}) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	for {
		runtime.GC()
		select {
		case <-gone:
			return true
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// logBuffer is a concurrency-safe sink for an hclog logger.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func openLogged(t *testing.T, options string) (*core.Runtime, *logBuffer) {
	t.Helper()
	lb := &logBuffer{}
	log := hclog.New(&hclog.LoggerOptions{Name: "gpurt", Level: hclog.Warn, Output: lb})
	rt, err := core.Open(core.Config{PluginPaths: []string{testutil.MockPlugin(t)}, Backend: "mock",
		PluginOptions: options, Logger: log})
	require.NoError(t, err)
	return rt, lb
}

// Item 2: a closed Runtime that did a large (staged) copy is garbage
// collected: nothing of its own (the leak watcher's cleanups on its
// staging slots) keeps it reachable.
func TestClosedRuntimeIsCollected(t *testing.T) {
	gone := make(chan struct{})
	func() {
		rt, _ := openLogged(t, "delay_us=0")
		d := dev0(t, rt)
		buf, err := d.Alloc(1 << 20)
		require.NoError(t, err)
		require.NoError(t, core.CopyFromHost(buf, make([]byte, 1<<20)))
		require.NoError(t, core.CopyToHost(make([]byte, 1<<20), buf))
		require.NoError(t, buf.Free())
		require.NoError(t, rt.Close())
		runtime.AddCleanup(rt, func(ch chan struct{}) { close(ch) }, gone)
	}()
	assert.True(t, collected(t, gone), "the closed runtime was never garbage collected")
}

// Item 2: a LaunchBatch dropped without Submit or Reset gives back its
// holds when it is garbage collected (and logs a leak), so its buffers
// can be freed and its module unloaded before Close.
func TestDroppedLaunchBatchReleasesHolds(t *testing.T) {
	rt, logs := openLogged(t, "delay_us=0")
	defer rt.Close()
	d := dev0(t, rt)
	s, err := d.NewStream()
	require.NoError(t, err)
	defer s.Close()
	mod, err := d.LoadModule("dropped", core.ModuleBuiltin, nil)
	require.NoError(t, err)
	fill, err := mod.Kernel("fill_f32")
	require.NoError(t, err)
	buf, err := d.Alloc(64)
	require.NoError(t, err)
	gone := make(chan struct{})
	func() {
		b := s.NewLaunchBatch()
		require.NoError(t, b.Add(fill, core.Grid1D(16, 16), core.ArgBuffer(buf), core.ArgScalar[float32](1), core.ArgScalar[uint64](16)))
		require.ErrorIs(t, buf.Free(), core.ErrFailedPrecondition) // held while the batch lives
		runtime.AddCleanup(b, func(ch chan struct{}) { close(ch) }, gone)
	}()
	require.True(t, collected(t, gone), "the dropped batch was never garbage collected")
	// The batch's own cleanup runs on the cleanup goroutine, after the
	// one above or before it: wait for the holds to go, bounded.
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	var ferr error
	for {
		if ferr = buf.Free(); ferr == nil || ctx.Err() != nil {
			break
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, ferr, "the buffer stays held by a batch nobody can reach")
	require.NoError(t, mod.Unload())
	assert.Contains(t, logs.String(), "LaunchBatch")
	assert.Contains(t, logs.String(), "leak")
}

// Item 2: on a lost device, Trim releases the cached GEMM plans (no
// work can run on the device any more), before Close.
func TestLostDeviceReleasesPlans(t *testing.T) {
	rt := openMock(t, "delay_us=0")
	d := dev0(t, rt)
	s := stream(t, d)
	buf := alloc(t, d, 8*8*4)
	desc := core.GemmDesc{AType: core.F32, BType: core.F32, DType: core.F32, M: 8, N: 8, K: 8}
	require.NoError(t, s.Gemm(desc, core.GemmOperands{A: buf, B: buf, D: buf, Alpha: 1}))
	require.NoError(t, s.Synchronize())
	st, err := inspect.Stats(rt)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.LivePlans)
	require.NoError(t, inspect.Control(rt, "lose_device", 0))
	_ = rt.Trim() // may report the lost device
	st, err = inspect.Stats(rt)
	require.NoError(t, err)
	assert.Zero(t, st.LivePlans, "cached plans of a lost device outlive Trim")
	assert.Zero(t, inspect.OpCache(rt).Pending)
}

// Item 6: leak reports carry one "gpurt:" prefix (the logger's name),
// not two.
func TestLeakReportPrefix(t *testing.T) {
	rt, logs := openLogged(t, "delay_us=0")
	defer rt.Close()
	d := dev0(t, rt)
	gone := make(chan struct{})
	func() {
		buf, err := d.Alloc(64)
		require.NoError(t, err)
		runtime.AddCleanup(buf, func(ch chan struct{}) { close(ch) }, gone)
	}()
	require.True(t, collected(t, gone))
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	for !strings.Contains(logs.String(), "leak") && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	out := logs.String()
	assert.Contains(t, out, "gpurt: leak: a device buffer")
	assert.NotContains(t, out, "gpurt: gpurt:")
}

// Item 6: an error for an object of another runtime says so, and does
// not name the same device twice ("device 0 (...), the stream on device
// 0 (...)").
func TestAnotherRuntimeErrors(t *testing.T) {
	a, b := openMock(t, "delay_us=0"), openMock(t, "delay_us=0")
	da, db := dev0(t, a), dev0(t, b)
	sa, err := da.NewStream()
	require.NoError(t, err)
	bufA, err := da.Alloc(256)
	require.NoError(t, err)
	bufB, err := db.Alloc(256)
	require.NoError(t, err)
	evB, err := db.NewEvent(false)
	require.NoError(t, err)
	hsB, err := b.AllocHostFromHeap(256)
	require.NoError(t, err)
	fillA := builtin(t, da, "fill_f32")
	fillB := builtin(t, db, "fill_f32")
	gemm := core.GemmDesc{AType: core.F32, BType: core.F32, DType: core.F32, M: 2, N: 2, K: 2}
	for name, f := range map[string]func() error{
		"Copy":           func() error { return core.Copy(bufA, bufB) },
		"Stream.Memset":  func() error { return sa.Memset(bufB, 0) },
		"Event.Record":   func() error { return evB.Record(sa) },
		"CopyFromPinned": func() error { return sa.CopyFromPinned(bufA, hsB) },
		"CopyToPinned":   func() error { return sa.CopyToPinned(hsB, bufA) },
		"CopyDevice":     func() error { return sa.CopyDevice(bufA, bufB) },
		"Gemm":           func() error { return sa.Gemm(gemm, core.GemmOperands{A: bufA, B: bufB, D: bufA, Alpha: 1}) },
		"Launch kernel": func() error {
			return sa.Launch(fillB, core.Grid1D(4, 4), core.ArgBuffer(bufA), core.ArgScalar[float32](1), core.ArgScalar[uint64](4))
		},
		"Launch arg": func() error {
			return sa.Launch(fillA, core.Grid1D(4, 4), core.ArgBuffer(bufB), core.ArgScalar[float32](1), core.ArgScalar[uint64](4))
		},
		"LaunchBatch.Add": func() error {
			return sa.NewLaunchBatch().Add(fillB, core.Grid1D(4, 4), core.ArgBuffer(bufA), core.ArgScalar[float32](1), core.ArgScalar[uint64](4))
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := f()
			require.ErrorIs(t, err, core.ErrInvalidArgument)
			msg := err.Error()
			assert.Contains(t, msg, "another runtime")
			assert.LessOrEqual(t, strings.Count(msg, da.String()), 1, "the same device named twice: %s", msg)
		})
	}
}
