// SPDX-License-Identifier: Apache-2.0

package core

import (
	"runtime"
	"sync"
	"unsafe"
	"weak"

	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/internal/abi"
)

// Graph is a recorded list of stream operations that the plugin has
// built into one device graph (a CUDA graph, a Metal command buffer, the
// mock's op list): Graph.Launch replays all of it on a stream with one
// call into the plugin. Make one with Stream.Capture.
//
// A live graph holds every buffer, host buffer, module and event its
// operations use: Free, Unload or Close of one of them is refused with
// an error wrapping ErrFailedPrecondition until Graph.Close. Kernel
// arguments (scalars and buffers) can be changed between replays with
// SetArg, without capturing again.
//
// A Graph is safe for concurrent use: replays of one graph are ordered
// (each Launch runs after the earlier ones it follows on its stream, as
// any stream work), and SetArg takes effect for the replays launched
// after it.
type Graph struct {
	dev *Device
	h   abi.Graph
	l   *life

	mu      sync.Mutex
	r       *recording
	dirty   []uint64        // items changed by SetArg since the last update
	isDirty []bool          // per item
	upd     []abi.GraphItem // scratch for graph_update, cap len(items)
	applied int32           // how the last update was applied (GPURT_GRAPH_UPDATE_*)
	stream  *Stream         // the stream captured (for argument checks)
}

// Node names an operation of a graph: its index in the order the
// operations were recorded (the first recorded is 0). Stream.NextNode,
// called during capture, says which Node the next recorded operation
// gets.
type Node int

// recording is what a capture collects: the items in the ABI's form,
// their argument structs, and what the graph must hold.
type recording struct {
	mu    sync.Mutex
	s     *Stream // the stream Capture was called on
	ended bool    // Capture returned: the capturing stream is spent
	err   error   // the first error of a recorded call (sticky)

	items   []abi.GraphItem
	sub     []int     // per item: index into its kind's array
	lo      []int     // per item: its first entry in lives
	kernels []*Kernel // per item: the kernel of a launch, else nil
	las     []abi.LaunchArgs
	kargOff []int // per launch: its first argument in kargs
	kargs   []abi.KernelArg
	gemms   []abi.GemmRunArgs
	copies  []abi.CopyArgs
	memsets []abi.MemsetArgs
	calls   [][]uint64   // per CALL item: its copy of the argument struct
	keep    [][]uint64   // Go memory recorded arguments name (grouped GEMM counts)
	lives   []*life      // holds taken (nil entries hold nothing)
	plans   []*planEntry // op-cache references taken (one per gemm)
}

const graphItemSize = abi.SizeofGraphItem

// Capture records the operations fn enqueues on the stream it is given,
// and builds them into a Graph without running them.
//
// The capture rules:
//
//   - Inside fn, the given stream (a capturing view of s) records every
//     operation the plugin can put in a graph, with the same checks as
//     when it enqueues: Launch (the built-in kernels included), Gemm (with
//     its workspace), CopyFromPinned, CopyToPinned, CopyDevice, Memset*,
//     WaitEvent and Event.Record; on plugins of ABI 1.7 and later also
//     the operations the plugin marks recordable. Any other operation on
//     it (attention, quantized or grouped matmul on an older plugin; a
//     LaunchBatch; a collective) is refused with an error wrapping
//     ErrFailedPrecondition. The first error of a recorded call is also
//     Capture's error, and nothing is built.
//   - Work enqueued on s itself (the *Stream Capture was called on), from
//     any goroutine, while the capture lasts is refused with
//     ErrFailedPrecondition rather than run eagerly and missing from the
//     graph. A Capture of s inside fn (nested, or from another goroutine
//     while one is in progress) is refused the same way.
//   - Synchronous calls are refused with ErrFailedPrecondition:
//     Synchronize, Query, Time and Close of the capturing stream or of s,
//     and, on the stream's device, CopyFromHost, CopyToHost, Copy, Memset
//     and Device.Synchronize from any goroutine while the capture lasts
//     (as CUDA's global capture mode). Making GEMM plans (the op cache)
//     is fine.
//   - The capturing stream must not be used after fn returns. fn may use
//     other streams as usual (they are not captured).
//   - A recorded operation holds what it uses (buffers, host buffers,
//     modules, events, plans) until Graph.Close; when fn fails or panics
//     the holds are released before Capture returns (or the panic goes
//     on).
//
// The plugin captures the whole list inside one call (ABI 1.3); a plugin
// without graphs gives an error wrapping ErrUnsupported.
func (s *Stream) Capture(fn func(s *Stream) error) (g *Graph, err error) {
	const op = "graph_create"
	if err := s.enter(op); err != nil {
		return nil, err
	}
	defer s.exit()
	if s.rec != nil {
		return nil, s.rec.refuse(op, "a capture cannot be nested")
	}
	if fn == nil {
		return nil, errf(codeInvalidArgument, op, "nil capture function")
	}
	rt := s.dev.rt
	for _, slot := range []bind.Slot{bind.SlotGraphCreate, bind.SlotGraphLaunch, bind.SlotGraphDestroy} {
		if !rt.p.Has(slot) {
			return nil, rt.p.Unsupported(op, slot)
		}
	}
	if !s.capturing.CompareAndSwap(false, true) {
		return nil, errf(codeFailedPrecondition, op, "a Stream.Capture of this stream is in progress: captures cannot be nested, nor run on one stream from two goroutines at once")
	}
	r := &recording{s: s}
	// Whatever happens below (an error, a panic in fn), a recording that
	// did not become a graph lets go of its holds.
	defer func() {
		if g == nil {
			r.release(rt)
		}
	}()
	// No plugin handle: the capturing view never reaches the plugin (every
	// stream operation goes through Stream.submit, which records).
	cs := &Stream{dev: s.dev, l: s.l, rec: r}
	err = r.run(fn, cs)
	if err == nil && len(r.items) == 0 {
		err = errf(codeInvalidArgument, op, "nothing was recorded: the capture function enqueued no operation on the stream it was given")
	}
	if err != nil {
		return nil, err
	}
	return r.build(op)
}

// run calls fn with the capturing stream while the device counts a
// capture, and ends the recording (even when fn panics).
func (r *recording) run(fn func(*Stream) error, cs *Stream) (err error) {
	d := r.s.dev
	d.capturing.Add(1)
	defer func() {
		d.capturing.Add(-1)
		r.mu.Lock()
		r.ended = true
		if err == nil {
			err = r.err
		}
		r.mu.Unlock()
		r.s.capturing.Store(false)
	}()
	return fn(cs)
}

// build hands the recorded list to the plugin.
func (r *recording) build(op string) (*Graph, error) {
	s := r.s
	rt := s.dev.rt
	r.pointers()
	a := abi.GraphCreateArgs{StructSize: abi.SizeofGraphCreateArgs, Device: s.dev.index,
		Count: uint64(len(r.items)), Items: &r.items[0], ItemSize: graphItemSize}
	var h abi.Graph
	if err := rt.p.GraphCreate(op, rt.h, &a, &h); err != nil {
		return nil, err
	}
	n := len(r.items)
	g := &Graph{dev: s.dev, h: h, l: new(life), r: r, stream: s,
		dirty: make([]uint64, 0, n), isDirty: make([]bool, n), upd: make([]abi.GraphItem, 0, n)}
	runtime.AddCleanup(g, releaseDroppedGraph, droppedGraph{rt: rt.self, h: h, l: g.l, r: r})
	return g, nil
}

// droppedGraph is what a Graph's cleanup needs (never the Graph itself).
type droppedGraph struct {
	rt weak.Pointer[Runtime]
	h  abi.Graph
	l  *life
	r  *recording
}

// releaseDroppedGraph runs when a Graph is garbage collected without
// Close: it logs the leak, destroys the plugin's graph and lets go of
// everything the graph held, as Close would (replays already enqueued
// still complete, as after Close). After Runtime.Close there is nothing
// left to free.
func releaseDroppedGraph(d droppedGraph) {
	if d.l.kill() != killed {
		return // closed
	}
	rt := d.rt.Value()
	if rt == nil || rt.enter("graph_destroy") != nil {
		d.r.release(nil)
		return
	}
	defer rt.exit()
	rt.log.Warn("leak: a Graph was garbage collected without Close; it is destroyed and its holds released now",
		"items", len(d.r.items), "holds", len(d.r.lives), "backend", rt.p.Backend)
	_ = rt.p.GraphDestroy("graph_destroy", rt.h, d.h)
	d.r.release(rt)
}

// pointers sets the items' pointers into the argument arrays (append may
// have moved them while the recording grew; they do not move after).
func (r *recording) pointers() {
	for i := range r.items {
		it := &r.items[i]
		j := r.sub[i]
		switch it.Kind {
		case abi.GraphOpLaunch:
			la := &r.las[j]
			la.Args = nil
			if la.NumArgs != 0 {
				la.Args = &r.kargs[r.kargOff[j]]
			}
			it.Launch = la
		case abi.GraphOpGemm:
			it.Gemm = &r.gemms[j]
		case abi.GraphOpCopy:
			it.Copy = &r.copies[j]
		case abi.GraphOpMemset:
			it.Memset = &r.memsets[j]
		}
	}
}

// release gives back every hold and plan reference the recording took.
func (r *recording) release(rt *Runtime) {
	for i, l := range r.lives {
		if l != nil {
			l.unhold()
		}
		r.lives[i] = nil
	}
	for _, e := range r.plans {
		if rt != nil {
			rt.plans.put(e)
		}
	}
	r.lives, r.plans = nil, nil
}

// refuse is the error of a call the capturing stream cannot record; it
// is also the capture's error.
func (r *recording) refuse(op, why string) error {
	err := errf(codeFailedPrecondition, op, "during Stream.Capture: %s", why)
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	return err
}

// fail makes err the capture's error unless it has one.
func (r *recording) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
}

// refuseSync is refuse for a synchronous call on the capturing stream.
func (r *recording) refuseSync(op string) error {
	return r.refuse(op, "a synchronous call cannot be recorded (call it before or after the capture)")
}

// begin locks the recording for one recorded call; it fails once the
// capture has ended.
func (r *recording) begin(op string) error {
	r.mu.Lock()
	if r.ended {
		r.mu.Unlock()
		return errf(codeFailedPrecondition, op, "the capture has ended: the stream given to the capture function records nothing after it returns (use the stream Capture was called on)")
	}
	return nil
}

// end unlocks the recording; a call's error becomes the capture's.
func (r *recording) end(err error) error {
	if err != nil && r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	return err
}

// NextNode is the Node the next operation recorded on s gets; -1 when s
// is not a capturing stream.
func (s *Stream) NextNode() Node {
	if s == nil || s.rec == nil {
		return -1
	}
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	return Node(len(s.rec.items))
}

// record appends the submitted operation c to the recording as one graph
// item, holding what it uses until the graph is closed (or the capture
// fails). It is the recording half of Stream.submit, and the one place
// that decides which operations a graph records.
func (r *recording) record(op string, c *submission) error {
	if err := r.begin(op); err != nil {
		return err
	}
	return r.end(r.item(op, c))
}

// item records c; r.mu is held.
func (r *recording) item(op string, c *submission) error {
	var kind int32
	switch c.slot {
	case bind.SlotLaunch:
		return r.launch(op, c)
	case bind.SlotGemmRun:
		kind = abi.GraphOpGemm
	case bind.SlotCopy:
		kind = abi.GraphOpCopy
	case bind.SlotMemset:
		kind = abi.GraphOpMemset
	case bind.SlotEventRecord:
		kind = abi.GraphOpEventRecord
	case bind.SlotStreamWaitEvent:
		kind = abi.GraphOpEventWait
	default:
		return r.call(op, c)
	}
	nl := len(r.lives)
	if !r.holdAll(c) {
		if kind == abi.GraphOpEventRecord || kind == abi.GraphOpEventWait {
			return errClosed(op, "event")
		}
		return errFreed(op, "buffer")
	}
	switch kind {
	case abi.GraphOpGemm:
		c.plan.refs.Add(1) // the graph holds one: the plan cannot be destroyed meanwhile
		r.plans = append(r.plans, c.plan)
		r.add(kind, len(r.gemms), nil, nl)
		r.items[len(r.items)-1].Plan = abi.GemmPlan(c.obj)
		r.gemms = append(r.gemms, *(*abi.GemmRunArgs)(c.args))
	case abi.GraphOpCopy:
		r.add(kind, len(r.copies), nil, nl)
		r.copies = append(r.copies, *(*abi.CopyArgs)(c.args))
	case abi.GraphOpMemset:
		r.add(kind, len(r.memsets), nil, nl)
		r.memsets = append(r.memsets, *(*abi.MemsetArgs)(c.args))
	default: // an event record or wait
		r.add(kind, 0, nil, nl)
		r.items[len(r.items)-1].Event = abi.Event(c.obj)
	}
	return nil
}

// call records an operation of any other slot as a CALL item (ABI 1.7):
// the slot's offset in the table, its object and a copy of its argument
// struct, checked by the plugin at graph_create as the eager call would
// be. The plugin says which slots it records (graph_recordable); any
// other, and every slot on plugins of ABI 1.6 and older (which record
// only launches, GEMMs, copies, memsets and events), is refused with an
// error naming the operation.
func (r *recording) call(op string, c *submission) error {
	p := r.s.dev.rt.p
	if !r.recordable(c.slot) {
		return errf(codeFailedPrecondition, op, "during Stream.Capture: this operation is not recorded in graphs by this plugin (%s, ABI %d.%d, records launches, GEMMs, copies, memsets and events, and from ABI 1.7 the operations it marks recordable); enqueue it before or after the capture",
			p.Backend, p.Major, p.Minor)
	}
	nl := len(r.lives)
	if !r.holdAll(c) {
		return errf(codeFailedPrecondition, op, "during Stream.Capture: an object of the operation was freed or closed")
	}
	// The copy is the recording's own (8-byte aligned words), as long as
	// the graph lives; fix repoints what it names in the caller's memory.
	args := make([]uint64, (c.size+7)/8)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&args[0])), c.size), unsafe.Slice((*byte)(c.args), c.size))
	if c.fix != nil {
		var keep []uint64
		c.fix(unsafe.Pointer(&args[0]), &keep)
		r.keep = append(r.keep, keep)
	}
	r.add(abi.GraphOpCall, len(r.calls), nil, nl)
	it := &r.items[len(r.items)-1]
	it.Slot, it.Object, it.Args = c.slot.Offset(), c.obj, unsafe.Pointer(&args[0])
	r.calls = append(r.calls, args)
	return nil
}

// recordable reports whether the plugin records calls of slot in graphs
// (graph_recordable, ABI 1.7; false on older plugins).
func (r *recording) recordable(slot bind.Slot) bool {
	rt := r.s.dev.rt
	if !rt.p.Has(bind.SlotGraphRecordable) {
		return false
	}
	var out uint8
	err := rt.p.GraphRecordable("graph_recordable", rt.h, slot.Offset(), &out)
	return err == nil && out == 1
}

// holdAll takes a hold of every object c names (its operands' buffers and
// c.lives), appended to r.lives; on failure it drops the holds it took
// and returns false.
func (r *recording) holdAll(c *submission) bool {
	nl := len(r.lives)
	ok := true
	for i := range c.opr {
		if b := c.opr[i].b; b != nil {
			if !b.l.hold() {
				ok = false
				break
			}
			r.lives = append(r.lives, b.l)
		}
	}
	for _, l := range c.lives {
		if !ok {
			break
		}
		if l != nil {
			if !l.hold() {
				ok = false
				break
			}
			r.lives = append(r.lives, l)
		}
	}
	if !ok {
		r.undo(len(r.kargs), nl)
	}
	return ok
}

// launch records a checked launch: its packed arguments are copied, and
// each buffer argument (one hold per argument, so SetArg can swap it) and
// the module are held.
func (r *recording) launch(op string, c *submission) error {
	la := *(*abi.LaunchArgs)(c.args)
	k := c.kernel
	off, nl := len(r.kargs), len(r.lives)
	for i := range c.kargs {
		var l *life
		if a := &c.kargs[i]; a.kind == abi.ArgBuffer {
			if l = a.buf.l; !l.hold() {
				r.undo(off, nl)
				return argFreed(op, -1, k, i)
			}
		}
		r.lives = append(r.lives, l)
	}
	if !k.mod.l.hold() {
		r.undo(off, nl)
		return moduleClosed(op, -1, k)
	}
	r.lives = append(r.lives, k.mod.l)
	if la.NumArgs != 0 {
		r.kargs = append(r.kargs, unsafe.Slice(la.Args, la.NumArgs)...)
	}
	la.Args = nil // set by pointers() once the recording stops growing
	r.add(abi.GraphOpLaunch, len(r.las), k, nl)
	r.items[len(r.items)-1].Kernel = abi.Kernel(c.obj)
	r.las = append(r.las, la)
	r.kargOff = append(r.kargOff, off)
	return nil
}

// add appends an item of kind k (sub: its index in its kind's array)
// whose holds begin at r.lives[lo].
func (r *recording) add(kind int32, sub int, k *Kernel, lo int) {
	r.items = append(r.items, abi.GraphItem{StructSize: graphItemSize, Kind: kind})
	r.sub = append(r.sub, sub)
	r.lo = append(r.lo, lo)
	r.kernels = append(r.kernels, k)
}

// undo drops the arguments and holds a failed item took (kargs from off,
// lives from nl).
func (r *recording) undo(off, nl int) {
	r.kargs = r.kargs[:off]
	for i := nl; i < len(r.lives); i++ {
		if r.lives[i] != nil {
			r.lives[i].unhold()
		}
		r.lives[i] = nil
	}
	r.lives = r.lives[:nl]
}

// ok reports whether g was made by Capture (see valid.go).
func (g *Graph) ok() bool { return g != nil && g.l != nil && g.r != nil && g.dev.ok() }

// Len is the number of operations in the graph.
func (g *Graph) Len() int {
	if !g.ok() {
		return 0
	}
	return len(g.r.items)
}

// Launch enqueues one replay of the graph on s, which must be on the
// graph's device: the recorded operations run in order, after the work
// enqueued on s before, as if they had been enqueued one by one. Changes
// made by SetArg are applied first (one more call into the plugin). A
// replay allocates nothing.
func (g *Graph) Launch(s *Stream) error {
	const op = "graph_launch"
	if !g.ok() {
		return errInvalid(op, "graph")
	}
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.exit()
	if s.rec != nil {
		return s.rec.refuse(op, "a graph cannot be launched inside a capture")
	}
	if !g.l.acquire() {
		return errClosed(op, "graph")
	}
	defer g.l.release()
	if s.dev != g.dev {
		return errf(codeInvalidArgument, op, "the graph was captured on %v, the stream is on %v: a graph replays on its own device", g.dev, s.dev)
	}
	rt := s.dev.rt
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.dirty) > 0 {
		if err := g.update(); err != nil {
			return err
		}
	}
	return rt.p.GraphLaunch(op, rt.h, g.h, s.h)
}

// lock enters a use of the graph (op's errors: an invalid or closed graph)
// and holds g.mu; unlock undoes both.
func (g *Graph) lock(op string) error {
	if !g.ok() {
		return errInvalid(op, "graph")
	}
	if err := enterLife(g.dev.rt, g.l, op, "graph", errClosed); err != nil {
		return err
	}
	g.mu.Lock()
	return nil
}

func (g *Graph) unlock() {
	g.mu.Unlock()
	exitLife(g.dev.rt, g.l)
}

// update sends the changed items in one graph_update call; g.mu is held,
// and a use of the graph and the runtime.
func (g *Graph) update() error {
	const op = "graph_update"
	if len(g.dirty) == 0 {
		return nil
	}
	rt := g.dev.rt
	r := g.r
	g.upd = g.upd[:0]
	for _, i := range g.dirty {
		g.upd = append(g.upd, r.items[i])
	}
	a := abi.GraphUpdateArgs{StructSize: abi.SizeofGraphUpdateArgs, Count: uint64(len(g.dirty)),
		Indices: &g.dirty[0], Items: &g.upd[0], ItemSize: graphItemSize}
	if err := rt.p.GraphUpdate(op, rt.h, g.h, &a); err != nil {
		return err
	}
	g.applied = a.Applied
	for _, i := range g.dirty {
		g.isDirty[i] = false
	}
	g.dirty = g.dirty[:0]
	return nil
}

// updateMethod says how the plugin applied the last update
// (inspect.GraphUpdate).
func (g *Graph) updateMethod() string {
	if !g.ok() {
		return "none"
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch g.applied {
	case abi.GraphUpdatePatched:
		return "patched"
	case abi.GraphUpdateExecUpdate:
		return "exec-update"
	case abi.GraphUpdateReinstantiated:
		return "reinstantiated"
	}
	return "none"
}

// SetArg changes argument i of the launch recorded as node, for the
// replays launched after it, checked as Launch checks arguments (kind,
// size, a live buffer of the graph's device). A new buffer is held by
// the graph from now on, and the one it replaces is let go. The change
// reaches the plugin at the next Launch, with the other changes made
// meanwhile, in one call. Allocates nothing.
func (g *Graph) SetArg(node Node, i int, arg Arg) error {
	const op = "graph_set_arg"
	if err := g.lock(op); err != nil {
		return err
	}
	defer g.unlock()
	r := g.r
	if node < 0 || int(node) >= len(r.items) {
		return errf(codeOutOfRange, op, "node %d does not exist (the graph has %d)", node, len(r.items))
	}
	k := r.kernels[node]
	if k == nil {
		return errf(codeInvalidArgument, op, "node %d is not a kernel launch", node)
	}
	if i < 0 || i >= len(k.info.params) {
		return errf(codeOutOfRange, op, "node %d: kernel %q has %d arguments, not an argument %d", node, k.name, len(k.info.params), i)
	}
	var ka abi.KernelArg
	buf, err := packArg(op, int(node), g.stream, k, i, &arg, k.info.params[i], &ka)
	if err != nil {
		return err
	}
	slot := &r.lives[r.lo[node]+i]
	var l *life
	if buf != nil {
		l = buf.l
		if !l.hold() {
			return argFreed(op, int(node), k, i)
		}
	}
	if *slot != nil {
		(*slot).unhold()
	}
	*slot = l
	r.kargs[r.kargOff[r.sub[node]]+i] = ka
	if !g.isDirty[node] {
		g.isDirty[node] = true
		g.dirty = append(g.dirty, uint64(node))
	}
	return nil
}

// Close frees the graph and lets go of everything it held. Replays
// already enqueued still complete (synchronize before freeing what they
// use). A second Close, or a later use, is an error wrapping ErrClosed.
func (g *Graph) Close() error {
	const op = "graph_destroy"
	if !g.ok() {
		return errInvalid(op, "graph")
	}
	rt := g.dev.rt
	return destroy(rt, g.l, op, "graph", byGraph, errClosed, func() error { // a graph holds no graph
		err := rt.p.GraphDestroy(op, rt.h, g.h)
		g.mu.Lock()
		g.r.release(rt)
		g.mu.Unlock()
		return err
	})
}

// capturingErr is the error of a synchronous call on device d while a
// capture is in progress there; nil when none is.
func (d *Device) capturingErr(op string) error {
	if d.capturing.Load() == 0 {
		return nil
	}
	return errf(codeFailedPrecondition, op, "a Stream.Capture is in progress on %v: synchronous calls on the device are refused until it returns (they cannot be recorded)", d)
}
