// SPDX-License-Identifier: Apache-2.0

package core

import (
	"runtime"

	"github.com/hashicorp/go-hclog"

	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/internal/abi"
)

// LaunchBatch is a reusable list of kernel launches on one stream,
// enqueued together by Submit with one crossing into the plugin (the
// launch_batch slot of ABI 1.2). Make it with Stream.NewLaunchBatch and
// keep it: its arrays grow to the largest batch it held and are reused
// after Submit and Reset, so a batch of a steady size allocates nothing.
//
// Add checks each launch in Go as Stream.Launch does (the kernel's
// device and parameter count, each argument's kind and size, and each
// buffer's runtime, device and liveness) and holds every buffer and every
// kernel's module it references until Submit or Reset. While a batch
// holds it, a Free of such a buffer (or Unload of such a module) is
// refused with an error wrapping ErrFailedPrecondition (waiting instead
// could deadlock the goroutine that owns the batch); after Submit or
// Reset it succeeds. So a freed handle never reaches C. A buffer already
// freed when Add runs is an error wrapping ErrFreed.
//
// An Add error is sticky, as in a bufio.Writer: the failed launch is not
// added, later Adds return the same error and add nothing, and Submit
// enqueues nothing, returns it and resets the batch. A batch is thus
// enqueued whole or not at all as far as Go can tell; Reset drops the
// launches and the error.
//
// When the plugin lacks the launch_batch slot (ABI minor < 2), Submit
// falls back to one launch call per item, in order; there, a launch the
// plugin refuses midway leaves the earlier ones enqueued (Submit's count
// says how many). With the slot, the plugin checks every item before it
// enqueues any (see gpurt.h).
//
// A LaunchBatch is used by one goroutine at a time (it is not safe for
// concurrent use); the stream it launches on may be shared as usual.
type LaunchBatch struct {
	s     *Stream
	items []abi.LaunchItem // per launch; Args set by Submit
	las   []abi.LaunchArgs // per launch; Args set by Submit
	offs  []int            // per launch: its first argument in args
	args  []abi.KernelArg  // every launch's arguments, one after another
	err   error            // the first Add error (sticky)
	// the holds, apart from the batch so that a cleanup can give them
	// back when a batch is dropped without Submit or Reset
	*batchHeld
}

// batchHeld is what a batch holds: buffers (their lives, not *Buffer:
// see add) and modules, one hold each.
type batchHeld struct {
	bufs []*life
	mods []*Module
	log  hclog.Logger // the stream's runtime's, for the leak report
}

// release gives back every hold (Reset, and the cleanup of a dropped
// batch); it returns how many buffers and modules were held.
func (h *batchHeld) release() (nbufs, nmods int) {
	nbufs, nmods = len(h.bufs), len(h.mods)
	for i, l := range h.bufs {
		l.unhold()
		h.bufs[i] = nil
	}
	for i, m := range h.mods {
		m.l.unhold()
		h.mods[i] = nil
	}
	h.bufs, h.mods = h.bufs[:0], h.mods[:0]
	return nbufs, nmods
}

// releaseDropped is the cleanup of a batch that became unreachable: a
// batch dropped while it held something would keep its buffers from
// Free and its modules from Unload until Close, so the holds are given
// back here, with a leak report.
// The report comes first: once the holds are back, a Free waiting for
// them may return before the leak is logged.
func releaseDropped(h *batchHeld) {
	if nb, nm := len(h.bufs), len(h.mods); nb+nm > 0 && h.log != nil {
		h.log.Warn("leak: a LaunchBatch was garbage collected holding buffers and modules without Submit or Reset; its holds are released now",
			"buffers", nb, "modules", nm)
	}
	h.release()
}

// batchRecent: Add looks for a buffer among the last few held before
// taking another use of it.
const batchRecent = 4

// NewLaunchBatch makes an empty batch of launches on s.
// When the batch is garbage collected while it holds buffers or modules
// (dropped without Submit or Reset), the holds are released and a leak is
// logged.
func (s *Stream) NewLaunchBatch() *LaunchBatch {
	h := &batchHeld{}
	if s.ok() {
		h.log = s.dev.rt.log
	}
	b := &LaunchBatch{s: s, batchHeld: h}
	runtime.AddCleanup(b, releaseDropped, h)
	return b
}

// Len is the number of launches added since the last Submit or Reset.
func (b *LaunchBatch) Len() int {
	if b == nil {
		return 0
	}
	return len(b.items)
}

// Add appends a launch of k with cfg and args, checked as Stream.Launch
// checks them; an error names the item's index and is sticky (see
// LaunchBatch). Nothing is enqueued before Submit.
func (b *LaunchBatch) Add(k *Kernel, cfg LaunchConfig, args ...Arg) error {
	const op = "launch_batch"
	if b == nil {
		return errf(codeInvalidArgument, op, "nil LaunchBatch")
	}
	if b.err != nil {
		return b.err
	}
	if err := b.add(op, k, &cfg, args); err != nil {
		b.err = err
		return err
	}
	return nil
}

func (b *LaunchBatch) add(op string, k *Kernel, cfg *LaunchConfig, args []Arg) error {
	s := b.s
	item := len(b.items)
	if !s.ok() {
		return launchErr(codeInvalidArgument, op, item, "nil or zero-value stream")
	}
	if !s.dev.rt.l.alive() {
		return errClosed(op, "runtime")
	}
	if !s.l.alive() {
		return errClosed(op, "stream")
	}
	if err := checkKernel(op, item, s, k, len(args)); err != nil {
		return err
	}
	if err := checkConfig(op, item, cfg); err != nil {
		return err
	}
	off, nb := len(b.args), len(b.bufs)
	b.args = grow(b.args, len(args))
	ka := b.args[off : off+len(args)]
	params := k.info.params[:len(args)]
	for i := range args {
		buf, err := packArg(op, item, s, k, i, &args[i], params[i], &ka[i])
		// The held list keeps the buffer's life, not the *Buffer: a
		// pointer taken from args and stored would make escape analysis
		// move every View passed to ArgBuffer to the heap.
		if err == nil && buf != nil && !b.holds(buf.l, nb) {
			if buf.l.hold() {
				b.bufs = append(b.bufs, buf.l)
			} else {
				err = argFreed(op, item, k, i)
			}
		}
		if err != nil {
			b.drop(off, nb)
			return err
		}
	}
	if m := k.mod; len(b.mods) == 0 || b.mods[len(b.mods)-1] != m {
		if !m.l.hold() {
			b.drop(off, nb)
			return moduleClosed(op, item, k)
		}
		b.mods = append(b.mods, m)
	}
	b.items = append(b.items, abi.LaunchItem{Kernel: k.h})
	b.las = append(b.las, launchArgs(cfg, len(args)))
	b.offs = append(b.offs, off)
	return nil
}

// grow lengthens a by n, reusing its capacity (doubling when short).
func grow(a []abi.KernelArg, n int) []abi.KernelArg {
	if len(a)+n > cap(a) {
		c := 2*cap(a) + n
		if c < 64 {
			c = 64
		}
		a2 := make([]abi.KernelArg, len(a), c)
		copy(a2, a)
		a = a2
	}
	return a[:len(a)+n]
}

// holds reports whether the batch already holds a use of buf: among the
// buffers this Add took (from nb) and the last few before.
func (b *LaunchBatch) holds(l *life, nb int) bool {
	lo := min(nb, len(b.bufs)) - batchRecent
	for i := len(b.bufs) - 1; i >= 0 && i >= lo; i-- {
		if b.bufs[i] == l {
			return true
		}
	}
	return false
}

// drop undoes a failed Add: its arguments and the uses it took.
func (b *LaunchBatch) drop(off, nb int) {
	b.args = b.args[:off]
	for i := nb; i < len(b.bufs); i++ {
		b.bufs[i].unhold()
		b.bufs[i] = nil
	}
	b.bufs = b.bufs[:nb]
}

// Reset drops every launch added and the sticky error, and releases the
// uses the batch held; nothing is enqueued. The arrays are kept for reuse.
func (b *LaunchBatch) Reset() {
	if b == nil {
		return
	}
	if b.batchHeld != nil {
		b.release()
	}
	b.items, b.las, b.offs, b.args = b.items[:0], b.las[:0], b.offs[:0], b.args[:0]
	b.err = nil
}

// Submit enqueues the batch's launches on its stream, in the order they
// were added, with one call into the plugin (one per launch on a plugin
// without the launch_batch slot), then releases what the batch held and
// resets it, whether it succeeded or not. It returns how many launches
// were enqueued: all of them on success; 0 when an Add failed (that
// error is returned) or the plugin rejected an item before enqueueing
// any; on a driver failure midway, the launches before the failed item,
// which stay enqueued. The plugin's errors name the item ("item 3: ...").
// An empty batch is a no-op.
func (b *LaunchBatch) Submit() (enqueued int, err error) {
	const op = "launch_batch"
	if b == nil {
		return 0, errf(codeInvalidArgument, op, "nil LaunchBatch")
	}
	defer b.Reset()
	if b.err != nil {
		return 0, b.err
	}
	n := len(b.items)
	if n == 0 {
		return 0, nil
	}
	s := b.s
	if err := s.enterSync(op); err != nil {
		return 0, err
	}
	defer s.exit()
	// The pointers are set now because append may have moved the arrays
	// while the batch grew.
	for i := range b.items {
		if b.las[i].NumArgs != 0 {
			b.las[i].Args = &b.args[b.offs[i]]
		} else {
			b.las[i].Args = nil
		}
		b.items[i].Args = &b.las[i]
	}
	rt := s.dev.rt
	if !rt.p.Has(bind.SlotLaunchBatch) {
		return b.fallback(op)
	}
	var done uint64
	if err := rt.p.LaunchBatch(op, rt.h, s.h, uint64(n), &b.items[0], &done); err != nil {
		return int(min(done, uint64(n))), err
	}
	rt.metrics.batches.Add(1)
	rt.metrics.batchLaunches.Add(uint64(n))
	return n, nil
}

// fallback enqueues the items one launch call each (a plugin of ABI 1.0
// or 1.1), stopping at the first error, which names the item.
func (b *LaunchBatch) fallback(op string) (int, error) {
	s := b.s
	rt := s.dev.rt
	for i := range b.items {
		if err := rt.p.Launch(op, rt.h, s.h, b.items[i].Kernel, &b.las[i]); err != nil {
			if be, ok := err.(*Error); ok {
				be.Message = itemPrefix(i) + be.Message
			}
			return i, err
		}
	}
	return len(b.items), nil
}
