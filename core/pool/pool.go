// SPDX-License-Identifier: Apache-2.0

// Package pool is gpurt's device memory pool: a stream-ordered caching
// allocator over core.Device.Alloc, one per device (Of), for servers that
// allocate and free activations and KV pages at every step. A freed block
// is kept for reuse (at once on its stream, after an event wait on
// another), the bytes the pool reserves are bounded by a budget
// (core.Config.PoolBudget or GPURT_POOL_BUDGET), and a warm Alloc/Free
// allocates nothing on the Go heap. Its errors are *core.Error values,
// matched with errors.Is against core's sentinels (core.ErrOutOfMemory,
// core.ErrFreed, ...); its counters are inspect.Pool and
// inspect.DevicePool (exported by package metrics as gpurt_pool_*).
// core.Runtime.Trim trims every device's pool.
package pool

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/internal/bridge"
)

// Pool is a device's stream-ordered caching allocator over Device.Alloc
// (what cuMemAllocAsync's pools do in the driver, done in Go over any
// plugin's buffer_alloc): a freed block is not returned to the plugin but
// kept on the free list of its size class, tagged with the stream that
// last used it and an event recorded on that stream at Free.
//
//   - Reuse on the same stream is immediate: the stream's order already
//     puts the new owner's work after the old owner's.
//   - Reuse on another stream takes the oldest cached block of the class
//     and makes the new stream wait for its event (core.Stream.WaitEvent), so
//     the new owner's work never runs before the old owner's last use.
//   - Reserved bytes (every block the pool holds, cached or handed out)
//     never exceed the budget (core.Config.PoolBudget). The budget bounds
//     the pool alone: memory from Device.Alloc outside it is not counted.
//     A miss that would pass it first returns cached blocks to the plugin (trim), then fails with
//     an error wrapping core.ErrOutOfMemory that names the budget, the request
//     and what is reserved and in use. A plugin allocation that fails for
//     lack of memory is retried once after a trim.
//
// Size classes: requests are rounded up to 512 bytes, then to a quarter
// of their power of two (at most 25% rounding) up to 64 MiB, and to a
// multiple of 2 MiB above; a class's blocks are all the same size, so a
// cached block fits exactly any request of its class.
//
// Steady state (every class already holding a cached block) Alloc and
// Free allocate nothing on the Go heap: blocks and their events are made
// on a miss and kept. All methods are safe for concurrent use (one mutex
// per pool; the plugin calls of a miss run under it). A Pool lives as
// long as its runtime; after its Close every call fails with
// core.ErrClosed.
// Streams in a Capture cannot allocate from or free to the pool.
type Pool struct {
	dev    *core.Device
	budget uint64
	from   string // what set the budget, for the errors

	mu    sync.Mutex
	lists map[uint64]*poolList // by class size
	stats diag.Pool
}

// poolList is one size class's cached blocks, oldest first.
type poolList struct{ blocks []*Block }

// Block is device memory from a Pool: a block of its size class, of
// which the first Len bytes were asked for. Return it with Free. A Block
// must not be used after Free (the pool hands it out again).
type Block struct {
	pool   *Pool
	buf    *core.Buffer
	ev     *core.Event
	stream *core.Stream // the stream of its last use: the Alloc's, then the Free's
	class  uint64
	n      uint64
	live   atomic.Bool
	// recorded: ev marks the end of the last owner's work (Free recorded
	// it); false for a block never freed.
	recorded bool
}

const (
	poolMinBlock  = 512
	poolLargeFrom = 64 << 20
	poolLargeStep = 2 << 20
)

// poolClass is the block size that serves a request of n bytes.
func poolClass(n uint64) uint64 {
	if n <= poolMinBlock {
		return poolMinBlock
	}
	if n > poolLargeFrom {
		return (n + poolLargeStep - 1) &^ (poolLargeStep - 1)
	}
	k := bits.Len64(n - 1) // 2^(k-1) < n <= 2^k
	step := uint64(1) << (k - 3)
	return (n + step - 1) &^ (step - 1)
}

// Of is device d's memory pool, made at first use with the runtime's
// budget (core.Config.PoolBudget): one pool per device, the same at every
// call. Nil for a nil or zero-value device.
func Of(d *core.Device) *Pool {
	p, _ := bridge.DevicePool(d, newPool).(*Pool)
	return p
}

// newPool makes d's pool (bridge.DevicePool's make; d is never nil).
func newPool(d any, budget uint64, from string) any {
	p := &Pool{dev: d.(*core.Device), lists: map[uint64]*poolList{}, budget: budget, from: from}
	p.stats.Budget = budget
	return p
}

// devicePool is d's pool when it was ever used (inspect.DevicePool).
func devicePool(d any) (diag.Pool, bool) {
	p, _ := bridge.DevicePool(d, nil).(*Pool)
	if p == nil {
		return diag.Pool{}, false
	}
	return p.snapshot(), true
}

func init() {
	bridge.Pool.Trim = func(p any) { p.(*Pool).trim() }
	bridge.Diag.Pool = func(p any) diag.Pool { return p.(*Pool).snapshot() }
	bridge.Diag.DevicePool = devicePool
}

// Device is the pool's device.
func (p *Pool) Device() *core.Device {
	if p == nil {
		return nil
	}
	return p.dev
}

// Budget is the most bytes the pool may reserve.
func (p *Pool) Budget() uint64 {
	if p == nil {
		return 0
	}
	return p.budget
}

// snapshot returns the pool's counters (inspect.Pool).
func (p *Pool) snapshot() diag.Pool {
	if p == nil {
		return diag.Pool{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Alloc returns a block of at least n bytes whose first use is ordered
// on s (a stream of the pool's device): a cached block of n's size class
// (see Pool), else a new one from the plugin. Its content is undefined.
func (p *Pool) Alloc(s *core.Stream, n int) (*Block, error) {
	const op = "pool_alloc"
	if p == nil || p.dev == nil {
		return nil, errInvalid(op, "pool")
	}
	if n <= 0 {
		return nil, bridge.Error(core.ErrInvalidArgument, op, fmt.Sprintf("size %d: a block needs at least one byte", n))
	}
	if err := p.streamErr(op, s); err != nil {
		return nil, err
	}
	if _, _, _, err := bridge.DeviceBegin(p.dev, op); err != nil {
		return nil, err
	}
	defer bridge.DeviceEnd(p.dev)
	class := poolClass(uint64(n))
	p.mu.Lock()
	defer p.mu.Unlock()
	if b, err := p.reuse(s, class); b != nil || err != nil {
		if err != nil {
			return nil, err
		}
		p.handOut(b, s, uint64(n))
		p.stats.Hits++
		return b, nil
	}
	b, err := p.grow(op, class, uint64(n))
	if err != nil {
		return nil, err
	}
	p.handOut(b, s, uint64(n))
	p.stats.Misses++
	return b, nil
}

// streamErr checks that s can allocate from or free to the pool.
func (p *Pool) streamErr(op string, s *core.Stream) error {
	dev, _, _, ok := bridge.StreamOf(s)
	if !ok {
		return errInvalid(op, "stream")
	}
	if sd := dev.(*core.Device); sd != p.dev {
		return bridge.Error(core.ErrInvalidArgument, op, misplaced(p.dev, sd))
	}
	if bridge.Capturing(s, op) != nil {
		return bridge.Error(core.ErrFailedPrecondition, op, "the stream is being captured: allocate from the pool before the Capture")
	}
	return nil
}

// misplaced says that the pool (on pd) and a stream (on sd) are on
// different devices.
func misplaced(pd, sd *core.Device) string {
	if pd.Runtime() != sd.Runtime() {
		return "the pool belongs to another runtime than the stream"
	}
	return fmt.Sprintf("the pool is on %v, the stream on %v", pd, sd)
}

// errInvalid is the error for a nil or zero-value object (what: "pool",
// "stream", ...).
func errInvalid(op, what string) error {
	return bridge.Error(core.ErrInvalidArgument, op, "nil or zero-value "+what+" (not made by gpurt)")
}

// reuse takes a cached block of the class for s (p.mu held): the newest
// one last used on s, else the oldest, made safe for s by a wait on its
// Free's event. Nil when the class has none.
func (p *Pool) reuse(s *core.Stream, class uint64) (*Block, error) {
	l := p.lists[class]
	if l == nil || len(l.blocks) == 0 {
		return nil, nil
	}
	for i := len(l.blocks) - 1; i >= 0; i-- {
		if b := l.blocks[i]; b.stream == s {
			p.uncache(l, i)
			return b, nil
		}
	}
	// The oldest block of another stream: s waits for its Free's event
	// (a wait on a completed event costs the device nothing; asking first
	// would cost a plugin call too, and a not-ready answer an error value).
	b := l.blocks[0]
	if b.recorded {
		if err := s.WaitEvent(b.ev); err != nil {
			return nil, bridge.Within("pool_alloc", "ordering a cached block after its last stream: ", err)
		}
		p.stats.StreamWaits++
	}
	p.uncache(l, 0)
	return b, nil
}

// uncache takes block i off list l (p.mu held).
func (p *Pool) uncache(l *poolList, i int) {
	p.stats.Cached -= l.blocks[i].class
	p.stats.CachedBlocks--
	l.remove(i)
}

func (l *poolList) remove(i int) {
	copy(l.blocks[i:], l.blocks[i+1:])
	l.blocks[len(l.blocks)-1] = nil
	l.blocks = l.blocks[:len(l.blocks)-1]
}

// handOut marks b live for s (p.mu held).
func (p *Pool) handOut(b *Block, s *core.Stream, n uint64) {
	if b.live.Load() {
		panic("gpurt: pool: a cached block is live (handed out twice)")
	}
	b.live.Store(true)
	b.stream, b.n = s, n
	st := &p.stats
	st.InUse += n
	st.LiveBlocks++
	st.PeakInUse = max(st.PeakInUse, st.InUse)
}

// grow makes a new block of the class within the budget (p.mu held),
// trimming cached blocks first when it would pass it.
func (p *Pool) grow(op string, class, n uint64) (*Block, error) {
	st := &p.stats
	if st.Reserved+class > p.budget {
		p.release(st.Reserved + class - p.budget)
	}
	if st.Reserved+class > p.budget {
		st.OutOfMemory++
		return nil, p.oom(op, n, class, "exceed the pool's budget")
	}
	buf, err := p.dev.Alloc(int(class))
	if err != nil && isOOM(err) && st.Cached > 0 {
		p.release(st.Cached)
		st.PluginRetries++
		buf, err = p.dev.Alloc(int(class))
	}
	if err != nil {
		if isOOM(err) {
			st.OutOfMemory++
			return nil, bridge.Within(op, fmt.Sprintf("%s; the device refused: ", p.account(n, class, "")), err)
		}
		return nil, err
	}
	ev, err := p.dev.NewEvent(false)
	if err != nil {
		_ = buf.Free()
		return nil, err
	}
	st.Reserved += class
	st.PeakReserved = max(st.PeakReserved, st.Reserved)
	return &Block{pool: p, buf: buf, ev: ev, class: class}, nil
}

// oom is the pool's out-of-memory error for a request of n bytes.
func (p *Pool) oom(op string, n, class uint64, why string) error {
	return bridge.Error(core.ErrOutOfMemory, op, p.account(n, class, why))
}

func (p *Pool) account(n, class uint64, why string) string {
	st := &p.stats
	var b strings.Builder
	fmt.Fprintf(&b, "%d bytes asked (a block of %d) on device %d", n, class, p.dev.Index())
	if why != "" {
		fmt.Fprintf(&b, " %s", why)
	}
	fmt.Fprintf(&b, " of %d bytes (%s): %d bytes reserved, %d in use by %d blocks, %d cached after trimming",
		p.budget, p.from, st.Reserved, st.InUse, st.LiveBlocks, st.Cached)
	return b.String()
}

func isOOM(err error) bool { return errors.Is(err, core.ErrOutOfMemory) }

// release returns cached blocks to the plugin until want bytes are
// released or none is left (p.mu held): the largest classes first, each
// block after its last owner's work completed. Errors are counted in the
// plugin's metrics; a block that cannot be freed is dropped from the
// pool's accounting all the same (the runtime's Close frees it).
func (p *Pool) release(want uint64) {
	var got uint64
	for got < want && p.stats.CachedBlocks > 0 {
		var l *poolList
		var class uint64
		for c, x := range p.lists {
			if len(x.blocks) > 0 && c > class {
				l, class = x, c
			}
		}
		for got < want && len(l.blocks) > 0 {
			b := l.blocks[0]
			l.remove(0)
			if b.recorded {
				_ = b.ev.Synchronize()
			}
			_ = b.ev.Close()
			_ = b.buf.Free()
			b.buf, b.ev = nil, nil
			p.stats.Reserved -= class
			p.stats.Cached -= class
			p.stats.CachedBlocks--
			p.stats.Released++
			got += class
		}
	}
}

// Trim returns every cached block to the plugin (after the work of its
// last owner); core.Runtime.Trim does it for every device. Blocks in use
// stay.
func (p *Pool) Trim() error {
	const op = "pool_trim"
	if p == nil || p.dev == nil {
		return errInvalid(op, "pool")
	}
	if _, _, _, err := bridge.DeviceBegin(p.dev, op); err != nil {
		return err
	}
	defer bridge.DeviceEnd(p.dev)
	p.trim()
	return nil
}

// trim releases every cached block (a nil pool: nothing).
func (p *Pool) trim() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.release(p.stats.Cached)
}

// Free returns the block to the pool after the work enqueued so far on s
// (nil: the stream given to Alloc), which must hold the block's last use
// (work on other streams that uses it must be ordered before, with an
// event). It records an event on s: the block is handed out again at once
// on s, and on another stream only after that event. A second Free is an
// error wrapping core.ErrFreed.
func (b *Block) Free(s *core.Stream) error {
	const op = "pool_free"
	if b == nil || b.pool == nil {
		return errInvalid(op, "pool block")
	}
	p := b.pool
	if s == nil {
		s = b.stream
	}
	if err := p.streamErr(op, s); err != nil {
		return err
	}
	if !b.live.CompareAndSwap(true, false) {
		return bridge.Error(core.ErrFreed, op, "pool block was freed")
	}
	err := b.ev.Record(s)
	p.mu.Lock()
	defer p.mu.Unlock()
	st := &p.stats
	st.InUse -= b.n
	st.LiveBlocks--
	if err != nil {
		// Without the event the block cannot be ordered: keep it out of
		// the lists, back to the plugin (buffer_free waits for the
		// device's work).
		_ = b.ev.Close()
		_ = b.buf.Free()
		st.Reserved -= b.class
		st.Released++
		return bridge.Within(op, "recording the block's event (the block goes back to the plugin): ", err)
	}
	b.stream, b.recorded = s, true
	l := p.lists[b.class]
	if l == nil {
		l = &poolList{}
		p.lists[b.class] = l
	}
	l.blocks = append(l.blocks, b)
	st.Cached += b.class
	st.CachedBlocks++
	return nil
}

// Len is the bytes asked for.
func (b *Block) Len() int {
	if b == nil {
		return 0
	}
	return int(b.n)
}

// Cap is the block's size (its size class).
func (b *Block) Cap() int {
	if b == nil {
		return 0
	}
	return int(b.class)
}

// Buffer is the block's whole buffer (Cap bytes). It must not be freed
// with Buffer.Free: the pool owns it.
func (b *Block) Buffer() *core.Buffer {
	if b == nil {
		return nil
	}
	return b.buf
}

// View is the block's first Len bytes.
func (b *Block) View() core.View {
	if b == nil || b.buf == nil {
		return core.View{}
	}
	v, _ := b.buf.View(0, int(b.n)) // n <= the buffer's size: never an error
	return v
}
