// SPDX-License-Identifier: Apache-2.0

package core

import (
	"fmt"
	"math"
	"time"

	"github.com/metrale/gpurt/abi"
	"github.com/metrale/gpurt/core/internal/bind"
)

// Collectives (ABI 1.6), as NCCL has them: a Comm joins nranks ranks, one
// device each, and Comm.Run enqueues a group of operations (all-reduce,
// all-gather, reduce-scatter, broadcast, send, recv) on the ranks'
// streams. One process may drive several devices (Runtime.NewComm: every
// rank is local) or hold some ranks of a communicator that spans
// processes (Runtime.JoinComm with a CommID made by one of them and
// passed by the caller). abi/gpurt.h ("Collectives (1.6)") states the
// exact semantics; the mock plugin is the float64 reference; the CUDA
// plugin runs NCCL (libnccl.so.2, opened on first use; GPURT_NCCL_PATH
// names the file) with non-blocking communicators and NVLink SHARP
// (NCCL_NVLS_ENABLE) off unless the environment sets it.

// CommID is a communicator's unique id: made once (Runtime.NewCommID) in
// any one process and given to every rank's JoinComm.
type CommID [abi.CommIDBytes]byte

// CollKind is a collective operation (GPURT_COLL_*).
type CollKind int32

// Collective operations. Sizes are in elements of the op's DType:
//
//	AllReduce:     Send and Recv Count elements (the same region: in place)
//	AllGather:     Send Count, Recv NRanks*Count (rank r's Send at r*Count)
//	ReduceScatter: Send NRanks*Count, Recv Count (rank r gets block r)
//	Broadcast:     Recv Count on every rank, Send Count on the root (Peer)
//	Send, Recv:    Count elements to / from rank Peer
const (
	AllReduce     CollKind = abi.CollAllReduce
	AllGather     CollKind = abi.CollAllGather
	ReduceScatter CollKind = abi.CollReduceScatter
	Broadcast     CollKind = abi.CollBroadcast
	Send          CollKind = abi.CollSend
	Recv          CollKind = abi.CollRecv
)

func (k CollKind) String() string {
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
	return fmt.Sprintf("CollKind(%d)", int32(k))
}

// ReduceOp is the reduction of AllReduce and ReduceScatter.
type ReduceOp int32

// Reductions (f32, f16, bf16).
const (
	ReduceSum ReduceOp = abi.ReduceSum
	ReduceMax ReduceOp = abi.ReduceMax
)

// CollOp is one operation of a group (Comm.Run).
type CollOp struct {
	Kind   CollKind
	DType  DType
	Reduce ReduceOp // AllReduce, ReduceScatter; else ReduceSum (0)
	Rank   int      // the rank that runs it: one of the Comm's local ranks
	Peer   int      // Broadcast: the root; Send: the receiver; Recv: the sender
	Count  int      // elements (see CollKind)
	Stream *Stream  // on the rank's device; orders the operation
	Send   Region   // nil for Recv, and for Broadcast off the root
	Recv   Region   // nil for Send
}

// Comm is a communicator's local ranks. Its methods are safe for
// concurrent use; Run calls of one Comm from several goroutines are
// matched across ranks in the order they reach the plugin, so callers
// that need a specific order serialise them.
type Comm struct {
	rt     *Runtime
	h      abi.Comm
	l      *life
	devs   []*Device // devs[i] runs rank first+i
	first  int
	nranks int
}

// commOps is the size of Run's stack scratch: larger groups allocate.
const commOps = 16

// commSlots is nil when the plugin has the 1.6 slots, else the error
// naming the first it lacks.
func (rt *Runtime) commSlots(op string) error {
	for _, slot := range [...]bind.Slot{bind.SlotCommUniqueID, bind.SlotCommCreate, bind.SlotCommDestroy,
		bind.SlotCommAbort, bind.SlotCommQuery, bind.SlotCommRun} {
		if !rt.p.Has(slot) {
			return rt.p.Unsupported(op, slot)
		}
	}
	return nil
}

// NewCommID makes a new unique id for a communicator that spans
// processes (NCCL: ncclGetUniqueId). Send it to the other processes by
// your own means; use it for one communicator only. A plugin without
// collectives (ABI < 1.6) gives ErrUnsupported.
func (rt *Runtime) NewCommID() (CommID, error) {
	const op = "comm_unique_id"
	if !rt.ok() {
		return CommID{}, errInvalid(op, "runtime")
	}
	if err := rt.enter(op); err != nil {
		return CommID{}, err
	}
	defer rt.exit()
	if err := rt.commSlots(op); err != nil {
		return CommID{}, err
	}
	out := abi.CommID{StructSize: abi.SizeofCommID}
	if err := rt.p.CommUniqueID(op, rt.h, &out); err != nil {
		return CommID{}, err
	}
	return CommID(out.Bytes), nil
}

// NewComm makes a communicator of which this runtime holds every rank:
// devs[r] is rank r (distinct devices of the runtime). It returns when the
// plugin made every rank (on CUDA: NCCL's initialisation, seconds). The
// caller must Close it.
func (rt *Runtime) NewComm(devs ...*Device) (*Comm, error) {
	return rt.newComm("comm_create", devs, 0, 0, nil, 0)
}

// CommJoin says which ranks of a communicator that spans processes this
// runtime holds: Devices[i] is rank FirstRank+i of NRanks, and ID the
// communicator's unique id (the same in every process). Timeout bounds
// the wait for the other ranks (0: 60 s).
type CommJoin struct {
	ID        CommID
	NRanks    int
	FirstRank int
	Devices   []*Device
	Timeout   time.Duration
}

// JoinComm makes this runtime's ranks of a communicator that spans
// processes (or runtimes); it returns once every rank of every process
// joined, or after j.Timeout with an error wrapping ErrUnavailable. The
// caller must Close it.
func (rt *Runtime) JoinComm(j CommJoin) (*Comm, error) {
	const op = "comm_create"
	if j.NRanks <= 0 || j.NRanks > math.MaxInt32 || j.FirstRank < 0 || j.FirstRank+len(j.Devices) > j.NRanks {
		return nil, errf(CodeInvalidArgument, op, "ranks %d..%d of %d: NRanks must be positive and the ranks inside 0..NRanks-1",
			j.FirstRank, j.FirstRank+len(j.Devices)-1, j.NRanks)
	}
	if j.Timeout < 0 {
		return nil, errf(CodeInvalidArgument, op, "timeout %v is negative", j.Timeout)
	}
	ms := uint64(j.Timeout / time.Millisecond)
	if j.Timeout > 0 && ms == 0 {
		ms = 1
	}
	return rt.newComm(op, j.Devices, j.NRanks, j.FirstRank, &j.ID, ms)
}

func (rt *Runtime) newComm(op string, devs []*Device, nranks, first int, id *CommID, timeoutMS uint64) (*Comm, error) {
	if !rt.ok() {
		return nil, errInvalid(op, "runtime")
	}
	if err := rt.enter(op); err != nil {
		return nil, err
	}
	defer rt.exit()
	if err := rt.commSlots(op); err != nil {
		return nil, err
	}
	if len(devs) == 0 {
		return nil, errf(CodeInvalidArgument, op, "no devices (a communicator's handle has at least one local rank)")
	}
	if len(devs) > 64 {
		return nil, errf(CodeInvalidArgument, op, "%d devices: a handle has at most 64 local ranks", len(devs))
	}
	idx := make([]uint32, len(devs))
	for i, d := range devs {
		if !d.ok() {
			return nil, errf(CodeInvalidArgument, op, "device %d: %v", i, errInvalid(op, "device"))
		}
		if d.rt != rt {
			return nil, errf(CodeInvalidArgument, op, "device %d (%v) belongs to another runtime", i, d)
		}
		for j := 0; j < i; j++ {
			if devs[j] == d {
				return nil, errf(CodeInvalidArgument, op, "devices %d and %d are both %v (one rank per device)", j, i, d)
			}
		}
		idx[i] = d.index
	}
	a := abi.CommCreateArgs{StructSize: abi.SizeofCommCreateArgs, DeviceCount: uint32(len(devs)),
		NRanks: uint32(nranks), Devices: &idx[0], FirstRank: uint32(first), TimeoutMS: timeoutMS}
	if id != nil {
		a.UniqueID, a.UniqueIDLen = &id[0], abi.CommIDBytes
	}
	var h abi.Comm
	if err := rt.p.CommCreate(op, rt.h, &a, &h); err != nil {
		return nil, err
	}
	if nranks == 0 {
		nranks = len(devs)
	}
	c := &Comm{rt: rt, h: h, l: new(life), devs: append([]*Device(nil), devs...), first: first, nranks: nranks}
	watchLeak(c, rt, c.l, "communicator", 0)
	return c, nil
}

func (c *Comm) ok() bool { return c != nil && c.l != nil && c.rt.ok() }

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
func (c *Comm) Device(rank int) (*Device, error) {
	if !c.ok() {
		return nil, errInvalid("comm", "communicator")
	}
	if rank < c.first || rank >= c.first+len(c.devs) {
		return nil, errf(CodeInvalidArgument, "comm", "rank %d is not local (ranks %d..%d of %d)", rank, c.first, c.first+len(c.devs)-1, c.nranks)
	}
	return c.devs[rank-c.first], nil
}

// Close waits for the communicator's work (that of every local rank),
// then frees it. A second Close, or any later use, is an error wrapping
// ErrClosed. After Abort, Close only frees.
func (c *Comm) Close() error {
	const op = "comm_destroy"
	if !c.ok() {
		return errInvalid(op, "communicator")
	}
	rt := c.rt
	return destroy(rt, c.l, op, "communicator", errClosed, func() error { return rt.p.CommDestroy(op, rt.h, c.h) })
}

// Abort stops the communicator's work in flight without waiting for the
// other ranks (ncclCommAbort): the way out of a hang or an error. Later
// Run and Err calls fail with ErrFailedPrecondition; Close still frees.
func (c *Comm) Abort() error {
	const op = "comm_abort"
	if err := c.enter(op); err != nil {
		return err
	}
	defer exitLife(c.rt, c.l)
	return c.rt.p.CommAbort(op, c.rt.h, c.h)
}

// Err is nil while the communicator is healthy (its work may still be
// pending), else the error that broke it (a peer that did not come, a
// mismatch between processes, a lost device, Abort); it stays broken.
func (c *Comm) Err() error {
	const op = "comm_query"
	if err := c.enter(op); err != nil {
		return err
	}
	defer exitLife(c.rt, c.l)
	return c.rt.p.CommQuery(op, c.rt.h, c.h)
}

func (c *Comm) enter(op string) error {
	if !c.ok() {
		return errInvalid(op, "communicator")
	}
	return enterLife(c.rt, c.l, op, "communicator", errClosed)
}

// Run enqueues ops as one group (ncclGroupStart/End inside one plugin
// call) and returns: each op runs on its stream, after the stream's
// earlier work. The sends and receives of one group run concurrently;
// collectives are matched across ranks by order, and a Comm with several
// local ranks gives each collective for all of them in one Run. All the
// ops of one rank in one Run use one stream. Every op is checked before
// any is enqueued (errors name it: "op 3: ..."). A group of up to 16 ops
// allocates nothing.
func (c *Comm) Run(ops ...CollOp) error {
	const op = "comm_run"
	if err := c.enter(op); err != nil {
		return err
	}
	defer exitLife(c.rt, c.l)
	if len(ops) == 0 {
		return errf(CodeInvalidArgument, op, "no ops")
	}
	var stackOps [commOps]abi.CollOp
	var stackHeld [commOps][3]*life
	aops, held := stackOps[:], stackHeld[:]
	if len(ops) > commOps {
		aops, held = make([]abi.CollOp, len(ops)), make([][3]*life, len(ops))
	}
	n := 0
	defer func() {
		for i := 0; i < n; i++ {
			for _, l := range held[i] {
				if l != nil {
					l.release()
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
	return c.rt.metrics.end(opCommRun, c.rt.metrics.begin(), c.rt.p.CommRun(op, c.rt.h, c.h, &a))
}

// prepare checks one op in Go (what the plugin cannot see: a View's
// length, which runtime an object is of), acquires its stream and
// buffers into held, and fills its ABI form.
func (c *Comm) prepare(op string, i int, o *CollOp, a *abi.CollOp, held *[3]*life) error {
	if o.Rank < c.first || o.Rank >= c.first+len(c.devs) {
		return errf(CodeInvalidArgument, op, "op %d: rank %d is not one of this Comm's (%d..%d of %d)", i, o.Rank, c.first, c.first+len(c.devs)-1, c.nranks)
	}
	if o.Peer < 0 || o.Peer >= c.nranks {
		return errf(CodeInvalidArgument, op, "op %d: peer %d is outside ranks 0..%d", i, o.Peer, c.nranks-1)
	}
	if o.Count < 0 {
		return errf(CodeInvalidArgument, op, "op %d: count %d is negative", i, o.Count)
	}
	es := o.DType.Size()
	if es == 0 {
		return errf(CodeInvalidArgument, op, "op %d: dtype %v is not an element type", i, o.DType)
	}
	if uint64(o.Count) > (uint64(1)<<62)/uint64(es)/uint64(c.nranks) {
		return errf(CodeInvalidArgument, op, "op %d: count %d is too large", i, o.Count)
	}
	dev := c.devs[o.Rank-c.first]
	s := o.Stream
	if !s.ok() {
		return errf(CodeInvalidArgument, op, "op %d: %v", i, errInvalid(op, "stream"))
	}
	if s.dev != dev {
		return errf(CodeInvalidArgument, op, "op %d: %s", i, misplaced("the stream", s.dev, "rank "+fmt.Sprint(o.Rank), dev))
	}
	if err := s.syncErr(op); err != nil {
		return errf(CodeFailedPrecondition, op, "op %d: collectives are not recorded in graphs: %s", i, messageOf(err))
	}
	if !s.l.acquire() {
		return errClosed(op, "stream")
	}
	held[0] = s.l
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
		return errf(CodeInvalidArgument, op, "op %d: kind %d is not a CollKind", i, o.Kind)
	}
	*a = abi.CollOp{StructSize: abi.SizeofCollOp, Kind: int32(o.Kind), DType: int32(o.DType), Reduce: int32(o.Reduce),
		Rank: uint32(o.Rank), Peer: uint32(o.Peer), Count: uint64(o.Count), Stream: s.h}
	sides := [2]struct {
		name string
		r    Region
		need uint64
		use  bool
	}{{"send", o.Send, sendN, o.Kind != Recv && !(o.Kind == Broadcast && o.Rank != o.Peer)},
		{"recv", o.Recv, recvN, o.Kind != Send}}
	for k, sd := range sides {
		if !sd.use {
			if sd.r != nil && o.Kind != Broadcast {
				return errf(CodeInvalidArgument, op, "op %d: %v has a %s region (must be nil)", i, o.Kind, sd.name)
			}
			continue
		}
		if sd.r == nil {
			if o.Count == 0 {
				continue
			}
			return errf(CodeInvalidArgument, op, "op %d: %v needs a %s region", i, o.Kind, sd.name)
		}
		bb, off, rn, err := resolve(op, sd.r)
		if err != nil {
			return errf(CodeInvalidArgument, op, "op %d: %s: %v", i, sd.name, err)
		}
		if bb.dev != dev {
			return errf(CodeInvalidArgument, op, "op %d: %s", i, misplaced("the "+sd.name+" region", bb.dev, "rank "+fmt.Sprint(o.Rank), dev))
		}
		if rn < sd.need {
			return errf(CodeOutOfRange, op, "op %d: the %s region has %d bytes; %v of %d %v needs %d", i, sd.name, rn, o.Kind, o.Count, o.DType, sd.need)
		}
		if !bb.l.acquire() {
			return errFreed(op, "buffer")
		}
		held[1+k] = bb.l
		if k == 0 {
			a.Send, a.SendOffset = bb.h, off
		} else {
			a.Recv, a.RecvOffset = bb.h, off
		}
	}
	return nil
}
