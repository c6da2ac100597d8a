// SPDX-License-Identifier: Apache-2.0

// Package collective is gpurt's collectives (ABI 1.6), as NCCL has them:
// a Comm joins NRanks ranks, one device each, and Comm.Run enqueues a
// group of operations (all-reduce, all-gather, reduce-scatter, broadcast,
// send, recv) on the ranks' streams. One process may drive several
// devices (New: every rank is local) or hold some ranks of a communicator
// that spans processes (Join, with an ID made by one of them by NewID and
// passed by the caller). abi/gpurt.h ("Collectives (1.6)") states the
// exact semantics; the mock plugin is the float64 reference; the CUDA
// plugin runs NCCL (libnccl.so.2, opened on first use; GPURT_NCCL_PATH
// names the file) with non-blocking communicators and NVLink SHARP
// (NCCL_NVLS_ENABLE) off unless the environment sets it.
//
// Collectives are not recorded in graphs: a Run on a stream inside
// core.Stream.Capture is refused with core.ErrFailedPrecondition. Errors
// are *core.Error values, matched with errors.Is against core's sentinels
// (a plugin older than ABI 1.6 gives core.ErrUnsupported). A Run of up to
// 16 operations allocates nothing; each counts in the runtime's metrics
// (diag.Metrics.Collectives).
package collective

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"
	"unsafe"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/core/internal/bridge"
	"github.com/metrale/gpurt/internal/abi"
)

// ID is a communicator's unique id: made once (NewID) in any one process
// and given to every rank's Join.
type ID [abi.CommIDBytes]byte

// Kind is a collective operation (GPURT_COLL_*).
type Kind int32

// Collective operations. Sizes are in elements of the op's DType:
//
//	AllReduce:     Send and Recv Count elements (the same region: in place)
//	AllGather:     Send Count, Recv NRanks*Count (rank r's Send at r*Count)
//	ReduceScatter: Send NRanks*Count, Recv Count (rank r gets block r)
//	Broadcast:     Recv Count on every rank, Send Count on the root (Peer)
//	Send, Recv:    Count elements to / from rank Peer
const (
	AllReduce     Kind = abi.CollAllReduce
	AllGather     Kind = abi.CollAllGather
	ReduceScatter Kind = abi.CollReduceScatter
	Broadcast     Kind = abi.CollBroadcast
	Send          Kind = abi.CollSend
	Recv          Kind = abi.CollRecv
)

func (k Kind) String() string {
	switch k {
	case AllReduce:
		return "all_reduce"
	case AllGather:
		return "all_gather"
	case ReduceScatter:
		return "reduce_scatter"
	case Broadcast:
		return "broadcast"
	case Send:
		return "send"
	case Recv:
		return "recv"
	}
	return fmt.Sprintf("collective.Kind(%d)", int32(k))
}

// ReduceOp is the reduction of AllReduce and ReduceScatter.
type ReduceOp int32

// Reductions (f32, f16, bf16).
const (
	ReduceSum ReduceOp = abi.ReduceSum
	ReduceMax ReduceOp = abi.ReduceMax
)

// Op is one operation of a group (Comm.Run).
type Op struct {
	Kind   Kind
	DType  core.DType
	Reduce ReduceOp     // AllReduce, ReduceScatter; else ReduceSum (0)
	Rank   int          // the rank that runs it: one of the Comm's local ranks
	Peer   int          // Broadcast: the root; Send: the receiver; Recv: the sender
	Count  int          // elements (see Kind)
	Stream *core.Stream // on the rank's device; orders the operation
	Send   core.Region  // nil for Recv, and for Broadcast off the root
	Recv   core.Region  // nil for Send
}

// Comm is a communicator's local ranks. Its methods are safe for
// concurrent use; Run calls of one Comm from several goroutines are
// matched across ranks in the order they reach the plugin, so callers
// that need a specific order serialise them.
type Comm struct {
	rt     *core.Runtime
	p      *bind.Plugin
	rth    abi.Runtime
	h      abi.Comm
	l      unsafe.Pointer // its lifetime in core (bridge.NewLife)
	devs   []*core.Device // devs[i] runs rank first+i
	first  int
	nranks int
}

// maxStackOps is the size of Run's stack scratch: larger groups allocate.
const maxStackOps = 16

// slots is nil when the plugin has the 1.6 slots, else the error naming
// the first it lacks.
func slots(p *bind.Plugin, op string) error {
	for _, slot := range [...]bind.Slot{bind.SlotCommUniqueID, bind.SlotCommCreate, bind.SlotCommDestroy,
		bind.SlotCommAbort, bind.SlotCommQuery, bind.SlotCommRun} {
		if !p.Has(slot) {
			return p.Unsupported(op, slot)
		}
	}
	return nil
}

// NewID makes a new unique id for a communicator that spans processes
// (NCCL: ncclGetUniqueId), on rt's plugin. Send it to the other processes
// by your own means; use it for one communicator only. A plugin without
// collectives (ABI < 1.6) gives ErrUnsupported.
func NewID(rt *core.Runtime) (ID, error) {
	const op = "comm_unique_id"
	p, h, err := bridge.RuntimeBegin(rt, op)
	if err != nil {
		return ID{}, err
	}
	defer bridge.RuntimeEnd(rt)
	if err := slots(p, op); err != nil {
		return ID{}, err
	}
	out := abi.CommID{StructSize: abi.SizeofCommID}
	if err := p.CommUniqueID(op, h, &out); err != nil {
		return ID{}, err
	}
	return ID(out.Bytes), nil
}

// New makes a communicator of which runtime rt holds every rank: devs[r]
// is rank r (distinct devices of rt). It returns when the plugin made
// every rank (on CUDA: NCCL's initialisation, seconds). The caller must
// Close it.
func New(rt *core.Runtime, devs ...*core.Device) (*Comm, error) {
	return newComm(rt, "comm_create", devs, 0, 0, nil, 0)
}

// JoinConfig says which ranks of a communicator that spans processes a
// runtime holds: Devices[i] is rank FirstRank+i of NRanks, and ID the
// communicator's unique id (the same in every process). Timeout bounds
// the wait for the other ranks (0: 60 s).
type JoinConfig struct {
	ID        ID
	NRanks    int
	FirstRank int
	Devices   []*core.Device
	Timeout   time.Duration
}

// Join makes runtime rt's ranks of a communicator that spans processes
// (or runtimes); it returns once every rank of every process joined, or
// after j.Timeout with an error wrapping ErrUnavailable. The caller must
// Close it.
func Join(rt *core.Runtime, j JoinConfig) (*Comm, error) {
	const op = "comm_create"
	if j.NRanks <= 0 || j.NRanks > math.MaxInt32 || j.FirstRank < 0 || j.FirstRank+len(j.Devices) > j.NRanks {
		return nil, errorf(core.ErrInvalidArgument, op, "ranks %d..%d of %d: NRanks must be positive and the ranks inside 0..NRanks-1",
			j.FirstRank, j.FirstRank+len(j.Devices)-1, j.NRanks)
	}
	if j.Timeout < 0 {
		return nil, errorf(core.ErrInvalidArgument, op, "timeout %v is negative", j.Timeout)
	}
	ms := uint64(j.Timeout / time.Millisecond)
	if j.Timeout > 0 && ms == 0 {
		ms = 1
	}
	return newComm(rt, op, j.Devices, j.NRanks, j.FirstRank, &j.ID, ms)
}

func newComm(rt *core.Runtime, op string, devs []*core.Device, nranks, first int, id *ID, timeoutMS uint64) (*Comm, error) {
	p, rth, err := bridge.RuntimeBegin(rt, op)
	if err != nil {
		return nil, err
	}
	defer bridge.RuntimeEnd(rt)
	if err := slots(p, op); err != nil {
		return nil, err
	}
	if len(devs) == 0 {
		return nil, errorf(core.ErrInvalidArgument, op, "no devices (a communicator's handle has at least one local rank)")
	}
	if len(devs) > 64 {
		return nil, errorf(core.ErrInvalidArgument, op, "%d devices: a handle has at most 64 local ranks", len(devs))
	}
	idx := make([]uint32, len(devs))
	for i, d := range devs {
		drt, index, ok := bridge.DeviceOf(d)
		if !ok {
			return nil, errorf(core.ErrInvalidArgument, op, "device %d: nil or zero-value device (not made by gpurt)", i)
		}
		if drt.(*core.Runtime) != rt {
			return nil, errorf(core.ErrInvalidArgument, op, "device %d (%v) belongs to another runtime", i, d)
		}
		for j := 0; j < i; j++ {
			if devs[j] == d {
				return nil, errorf(core.ErrInvalidArgument, op, "devices %d and %d are both %v (one rank per device)", j, i, d)
			}
		}
		idx[i] = index
	}
	a := abi.CommCreateArgs{StructSize: abi.SizeofCommCreateArgs, DeviceCount: uint32(len(devs)),
		NRanks: uint32(nranks), Devices: &idx[0], FirstRank: uint32(first), TimeoutMS: timeoutMS}
	if id != nil {
		a.UniqueID, a.UniqueIDLen = &id[0], abi.CommIDBytes
	}
	var h abi.Comm
	if err := p.CommCreate(op, rth, &a, &h); err != nil {
		return nil, err
	}
	if nranks == 0 {
		nranks = len(devs)
	}
	l, leak := bridge.NewLife(devs[0], "communicator")
	c := &Comm{rt: rt, p: p, rth: rth, h: h, l: l, devs: append([]*core.Device(nil), devs...), first: first, nranks: nranks}
	runtime.AddCleanup(c, func(f func()) { f() }, leak)
	return c, nil
}

func (c *Comm) ok() bool { return c != nil && c.l != nil }

// NRanks is the communicator's size (0 for a nil Comm).
func (c *Comm) NRanks() int {
	if c == nil {
		return 0
	}
	return c.nranks
}

// LocalRanks are the ranks this Comm holds: first .. first+n-1.
func (c *Comm) LocalRanks() (first, n int) {
	if c == nil {
		return 0, 0
	}
	return c.first, len(c.devs)
}

// Device is the device of a local rank.
func (c *Comm) Device(rank int) (*core.Device, error) {
	if !c.ok() {
		return nil, errInvalid("comm")
	}
	if rank < c.first || rank >= c.first+len(c.devs) {
		return nil, errorf(core.ErrInvalidArgument, "comm", "rank %d is not local (ranks %d..%d of %d)", rank, c.first, c.first+len(c.devs)-1, c.nranks)
	}
	return c.devs[rank-c.first], nil
}

// Close waits for the communicator's work (that of every local rank),
// then frees it. A second Close, or any later use, is an error wrapping
// ErrClosed. After Abort, Close only frees.
func (c *Comm) Close() error {
	const op = "comm_destroy"
	if !c.ok() {
		return errInvalid(op)
	}
	return bridge.Destroy(c.devs[0], c.l, op, "communicator", func() error { return c.p.CommDestroy(op, c.rth, c.h) })
}

// Abort stops the communicator's work in flight without waiting for the
// other ranks (ncclCommAbort): the way out of a hang or an error. Later
// Run and Err calls fail with ErrFailedPrecondition; Close still frees.
func (c *Comm) Abort() error { return c.call("comm_abort", (*bind.Plugin).CommAbort) }

// Err is nil while the communicator is healthy (its work may still be
// pending), else the error that broke it (a peer that did not come, a
// mismatch between processes, a lost device, Abort); it stays broken.
func (c *Comm) Err() error { return c.call("comm_query", (*bind.Plugin).CommQuery) }

// call is a slot of the plugin on the communicator alone, op, inside a use
// of it (enter and exit).
func (c *Comm) call(op string, slot func(p *bind.Plugin, op string, rt abi.Runtime, c abi.Comm) error) error {
	if err := c.enter(op); err != nil {
		return err
	}
	defer c.exit()
	return slot(c.p, op, c.rth, c.h)
}

// enter begins a use of the runtime, then of the communicator; end a
// successful enter with exit.
func (c *Comm) enter(op string) error {
	if !c.ok() {
		return errInvalid(op)
	}
	if _, _, err := bridge.RuntimeBegin(c.rt, op); err != nil {
		return err
	}
	if !bridge.Acquire(c.l) {
		bridge.RuntimeEnd(c.rt)
		return errorf(core.ErrClosed, op, "communicator is closed")
	}
	return nil
}

func (c *Comm) exit() {
	bridge.Release(c.l)
	bridge.RuntimeEnd(c.rt)
}

// Run enqueues ops as one group (ncclGroupStart/End inside one plugin
// call) and returns: each op runs on its stream, after the stream's
// earlier work. The sends and receives of one group run concurrently;
// collectives are matched across ranks by order, and a Comm with several
// local ranks gives each collective for all of them in one Run. All the
// ops of one rank in one Run use one stream. Every op is checked before
// any is enqueued (errors name it: "op 3: ..."). A group of up to 16 ops
// allocates nothing.
func (c *Comm) Run(ops ...Op) error {
	const op = "comm_run"
	if err := c.enter(op); err != nil {
		return err
	}
	defer c.exit()
	if len(ops) == 0 {
		return errorf(core.ErrInvalidArgument, op, "no ops")
	}
	var stackOps [maxStackOps]abi.CollOp
	var stackHeld [maxStackOps][3]unsafe.Pointer
	aops, held := stackOps[:], stackHeld[:]
	if len(ops) > maxStackOps {
		aops, held = make([]abi.CollOp, len(ops)), make([][3]unsafe.Pointer, len(ops))
	}
	n := 0
	defer func() {
		for i := 0; i < n; i++ {
			for _, l := range held[i] {
				if l != nil {
					bridge.Release(l)
				}
			}
		}
	}()
	for i := range ops {
		n = i + 1
		if err := c.prepare(op, i, &ops[i], &aops[i], &held[i]); err != nil {
			return err
		}
	}
	a := abi.CommRunArgs{StructSize: abi.SizeofCommRunArgs, Count: uint64(len(ops)), Ops: &aops[0], OpSize: abi.SizeofCollOp}
	t0 := bridge.MetricBegin(c.rt)
	return bridge.MetricEnd(c.rt, bridge.MetricCommRun, t0, c.p.CommRun(op, c.rth, c.h, &a))
}

// prepare checks one op in Go (what the plugin cannot see: a View's
// length, which runtime an object is of), acquires its stream and
// buffers into held, and fills its ABI form.
func (c *Comm) prepare(op string, i int, o *Op, a *abi.CollOp, held *[3]unsafe.Pointer) error {
	if o.Rank < c.first || o.Rank >= c.first+len(c.devs) {
		return errorf(core.ErrInvalidArgument, op, "op %d: rank %d is not one of this Comm's (%d..%d of %d)", i, o.Rank, c.first, c.first+len(c.devs)-1, c.nranks)
	}
	if o.Peer < 0 || o.Peer >= c.nranks {
		return errorf(core.ErrInvalidArgument, op, "op %d: peer %d is outside ranks 0..%d", i, o.Peer, c.nranks-1)
	}
	if o.Count < 0 {
		return errorf(core.ErrInvalidArgument, op, "op %d: count %d is negative", i, o.Count)
	}
	es := o.DType.Size()
	if es == 0 {
		return errorf(core.ErrInvalidArgument, op, "op %d: dtype %v is not an element type", i, o.DType)
	}
	if uint64(o.Count) > (uint64(1)<<62)/uint64(es)/uint64(c.nranks) {
		return errorf(core.ErrInvalidArgument, op, "op %d: count %d is too large", i, o.Count)
	}
	dev := c.devs[o.Rank-c.first]
	sdev, sh, sl, ok := bridge.StreamOf(o.Stream)
	if !ok {
		return errorf(core.ErrInvalidArgument, op, "op %d: nil or zero-value stream (not made by gpurt)", i)
	}
	if sd := sdev.(*core.Device); sd != dev {
		return errorf(core.ErrInvalidArgument, op, "op %d: %s", i, misplaced("the stream", sd, "rank "+fmt.Sprint(o.Rank), dev))
	}
	if err := bridge.Capturing(o.Stream, op); err != nil {
		return errorf(core.ErrFailedPrecondition, op, "op %d: collectives are not recorded in graphs: %s", i, messageOf(err))
	}
	if !bridge.Acquire(sl) {
		return errorf(core.ErrClosed, op, "stream is closed")
	}
	held[0] = sl
	b := uint64(o.Count) * uint64(es)
	sendN, recvN := b, b
	switch o.Kind {
	case AllGather:
		recvN = b * uint64(c.nranks)
	case ReduceScatter:
		sendN = b * uint64(c.nranks)
	case Broadcast:
		if o.Rank != o.Peer {
			sendN = 0
		}
	case Send:
		recvN = 0
	case Recv:
		sendN = 0
	case AllReduce:
	default:
		return errorf(core.ErrInvalidArgument, op, "op %d: kind %d is not a collective.Kind", i, o.Kind)
	}
	*a = abi.CollOp{StructSize: abi.SizeofCollOp, Kind: int32(o.Kind), DType: int32(o.DType), Reduce: int32(o.Reduce),
		Rank: uint32(o.Rank), Peer: uint32(o.Peer), Count: uint64(o.Count), Stream: sh}
	sides := [2]struct {
		name string
		r    *core.Region
		need uint64
		use  bool
	}{{"send", &o.Send, sendN, o.Kind != Recv && !(o.Kind == Broadcast && o.Rank != o.Peer)},
		{"recv", &o.Recv, recvN, o.Kind != Send}}
	for k, sd := range sides {
		if !sd.use {
			if *sd.r != nil && o.Kind != Broadcast {
				return errorf(core.ErrInvalidArgument, op, "op %d: %v has a %s region (must be nil)", i, o.Kind, sd.name)
			}
			continue
		}
		if *sd.r == nil {
			if o.Count == 0 {
				continue
			}
			return errorf(core.ErrInvalidArgument, op, "op %d: %v needs a %s region", i, o.Kind, sd.name)
		}
		bdev, buf, off, rn, err := bridge.Region(op, unsafe.Pointer(sd.r))
		if err != nil {
			return errorf(core.ErrInvalidArgument, op, "op %d: %s: %v", i, sd.name, err)
		}
		if bd := bdev.(*core.Device); bd != dev {
			return errorf(core.ErrInvalidArgument, op, "op %d: %s", i, misplaced("the "+sd.name+" region", bd, "rank "+fmt.Sprint(o.Rank), dev))
		}
		if rn < sd.need {
			return errorf(core.ErrOutOfRange, op, "op %d: the %s region has %d bytes; %v of %d %v needs %d", i, sd.name, rn, o.Kind, o.Count, o.DType, sd.need)
		}
		bh, bl := bridge.BufferOf(buf)
		if !bridge.Acquire(bl) {
			return errorf(core.ErrFreed, op, "buffer was freed")
		}
		held[1+k] = bl
		if k == 0 {
			a.Send, a.SendOffset = bh, off
		} else {
			a.Recv, a.RecvOffset = bh, off
		}
	}
	return nil
}

// errorf is a *core.Error of the code whose sentinel is kind
// (core.ErrInvalidArgument, ...).
func errorf(kind error, op, format string, args ...any) error {
	return bridge.Error(kind, op, fmt.Sprintf(format, args...))
}

// errInvalid is the error for a nil or zero-value Comm.
func errInvalid(op string) error {
	return errorf(core.ErrInvalidArgument, op, "nil or zero-value communicator (not made by collective.New or Join)")
}

// misplaced says that what (on device x) is not on the device of whose
// (ref).
func misplaced(what string, x *core.Device, whose string, ref *core.Device) string {
	if x.Runtime() != ref.Runtime() {
		return what + " belongs to another runtime than the " + whose
	}
	return fmt.Sprintf("%s is on %v, the %s on %v", what, x, whose, ref)
}

// messageOf is err's message without the op.
func messageOf(err error) string {
	var e *core.Error
	if errors.As(err, &e) && e.Message != "" {
		return e.Message
	}
	return err.Error()
}
