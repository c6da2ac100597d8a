// SPDX-License-Identifier: Apache-2.0

package core

import (
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/internal/abi"
)

// LaunchConfig is a launch's geometry: blocks in the grid, threads in a
// block, and bytes of dynamic shared memory. Zero dimensions count as 1.
type LaunchConfig struct {
	Grid      [3]uint32
	Block     [3]uint32
	SharedMem uint32

	// bad1D: Grid1D(n1D, block1D) has no grid (a negative n, or more
	// blocks or threads than a uint32 dimension holds); launches refuse it.
	bad1D        bool
	n1D, block1D int
}

// Grid1D is a one-dimensional LaunchConfig of enough blocks of block
// threads for n elements (block <= 0 counts as 1). When no grid fits (n
// negative, more than 2^32-1 blocks, or block above 2^32-1) it returns a
// config that Launch and LaunchBatch.Add reject with an error naming n
// and block, never a truncated grid.
func Grid1D(n, block int) LaunchConfig {
	if block <= 0 {
		block = 1
	}
	var blocks uint64
	if n > 0 {
		blocks = (uint64(n) + uint64(block) - 1) / uint64(block)
	}
	if n < 0 || uint64(block) > math.MaxUint32 || blocks > math.MaxUint32 {
		return LaunchConfig{bad1D: true, n1D: n, block1D: block}
	}
	return LaunchConfig{Grid: [3]uint32{uint32(blocks), 1, 1}, Block: [3]uint32{uint32(block), 1, 1}}
}

// checkConfig refuses a config Grid1D could not make.
func checkConfig(op string, item int, cfg *LaunchConfig) error {
	if cfg.bad1D {
		return launchErr(codeInvalidArgument, op, item, "Grid1D(%d, %d) has no grid: %s", cfg.n1D, cfg.block1D, cfg.why1D())
	}
	return nil
}

func (cfg *LaunchConfig) why1D() string {
	switch {
	case cfg.n1D < 0:
		return "the element count is negative"
	case uint64(cfg.block1D) > math.MaxUint32:
		return "a block holds at most 4294967295 threads"
	}
	return fmt.Sprintf("%d elements need more than 4294967295 blocks of %d threads", cfg.n1D, cfg.block1D)
}

// Launch enqueues kernel k on s with the given arguments, packed as the
// ABI says in a fixed array on the stack (at most 32; no allocation).
// The arguments are checked against the kernel's parameters (count, and
// kind and size where the plugin knows them); buffers must be live, of the
// stream's runtime and on its device. It returns once the launch is
// enqueued.
func (s *Stream) Launch(k *Kernel, cfg LaunchConfig, args ...Arg) (err error) {
	if err := s.enter("launch"); err != nil {
		return err
	}
	defer s.sticky(&err)
	l := launchCall{s: s, args: args}
	defer l.finish()
	err = l.run(s, k, &cfg)
	if err == nil {
		s.dev.rt.metrics.launches.Add(1)
	}
	return err
}

// launchSmall: launches of at most this many arguments pack them in a
// smaller array (less stack to clear per call).
const launchSmall = 8

// launchCall is one Launch call's state: the module it holds a use of and
// which arguments hold a use of their buffer (one per distinct buffer).
type launchCall struct {
	s    *Stream
	m    *Module
	args []Arg
	held uint32 // bit i: args[i].buf is acquired
}

// finish releases what the call holds and ends its use of the stream.
func (l *launchCall) finish() {
	for m := l.held; m != 0; m &= m - 1 {
		l.args[bits.TrailingZeros32(m)].buf.l.release()
	}
	if l.m != nil {
		l.m.l.release()
	}
	l.s.exit()
}

// run takes s apart from l.s: escape analysis does not tell the fields
// of l apart, and s.dev escaping (into errors) would make the arguments'
// contents escape too (an allocation for each View passed to ArgBuffer).
func (l *launchCall) run(s *Stream, k *Kernel, cfg *LaunchConfig) error {
	const op = "launch"
	if err := checkKernel(op, -1, s, k, len(l.args)); err != nil {
		return err
	}
	if err := checkConfig(op, -1, cfg); err != nil {
		return err
	}
	m := k.mod
	if !m.l.acquire() {
		return moduleClosed(op, -1, k)
	}
	l.m = m
	la := launchArgs(cfg, len(l.args))
	// la.Args is a Go pointer: the array may live on the stack.
	if len(l.args) <= launchSmall {
		var ka [launchSmall]abi.KernelArg
		if err := l.pack(s, k, ka[:len(l.args)]); err != nil {
			return err
		}
		la.Args = &ka[0]
		c := submission{slot: bind.SlotLaunch, obj: uintptr(k.h), args: unsafe.Pointer(&la), size: unsafe.Sizeof(la), kernel: k, kargs: l.args}
		return s.submit(op, &c)
	}
	var ka [abi.MaxKernelParams]abi.KernelArg
	if err := l.pack(s, k, ka[:len(l.args)]); err != nil {
		return err
	}
	la.Args = &ka[0]
	c := submission{slot: bind.SlotLaunch, obj: uintptr(k.h), args: unsafe.Pointer(&la), size: unsafe.Sizeof(la), kernel: k, kargs: l.args}
	return s.submit(op, &c)
}

// launchErr is a launch's core-side error; in a batch (item >= 0) the
// message begins with the item's index.
func launchErr(c ErrorCode, op string, item int, format string, args ...any) error {
	if item >= 0 {
		return errf(c, op, "item %d: "+format, append([]any{item}, args...)...)
	}
	return errf(c, op, format, args...)
}

// itemPrefix is "item N: " in a batch (item >= 0), "" otherwise.
func itemPrefix(item int) string {
	if item < 0 {
		return ""
	}
	return fmt.Sprintf("item %d: ", item)
}

// checkKernel checks what a launch of k with nargs arguments on s needs
// of the kernel alone: shared by Stream.Launch and LaunchBatch.Add.
func checkKernel(op string, item int, s *Stream, k *Kernel, nargs int) error {
	if k == nil {
		return launchErr(codeInvalidArgument, op, item, "nil kernel")
	}
	if !k.ok() {
		return launchErr(codeInvalidArgument, op, item, "zero-value kernel (not made by Module.Kernel)")
	}
	if k.mod.dev != s.dev {
		return launchErr(codeInvalidArgument, op, item, "%s", misplaced(fmt.Sprintf("kernel %q", k.name), k.mod.dev, "stream", s.dev))
	}
	if nargs != len(k.info.params) {
		return launchErr(codeInvalidArgument, op, item, "kernel %q takes %d arguments, got %d", k.name, len(k.info.params), nargs)
	}
	return nil
}

// moduleClosed is the error for a kernel whose module was unloaded.
func moduleClosed(op string, item int, k *Kernel) error {
	return errClosed(op, itemPrefix(item)+"module "+k.mod.name+" of kernel "+k.name)
}

// argFreed is the error for a buffer argument freed before the launch.
func argFreed(op string, item int, k *Kernel, i int) error {
	return errFreed(op, fmt.Sprintf("%skernel %q argument %d: buffer", itemPrefix(item), k.name, i))
}

// launchArgs is the ABI's launch arguments for cfg (zero dimensions made
// 1) and n arguments; Args is left for the caller.
func launchArgs(cfg *LaunchConfig, n int) abi.LaunchArgs {
	la := abi.LaunchArgs{StructSize: abi.SizeofLaunchArgs, Grid: cfg.Grid, Block: cfg.Block,
		SharedMemBytes: cfg.SharedMem, NumArgs: uint32(n)}
	for d := 0; d < 3; d++ {
		if la.Grid[d] == 0 {
			la.Grid[d] = 1
		}
		if la.Block[d] == 0 {
			la.Block[d] = 1
		}
	}
	return la
}

// pack checks the arguments against k's parameters, holds a use of each
// distinct buffer (the stream's use holds the runtime) and fills ka
// (len(l.args) long).
func (l *launchCall) pack(s *Stream, k *Kernel, ka []abi.KernelArg) error {
	const op = "launch"
	params := k.info.params[:len(ka)]
	args := l.args[:len(ka)]
	for i := range args {
		b, err := packArg(op, -1, s, k, i, &args[i], params[i], &ka[i])
		if err != nil {
			return err
		}
		if b != nil && !l.holds(b) {
			if !b.l.acquire() {
				return argFreed(op, -1, k, i)
			}
			l.held |= 1 << i
		}
	}
	return nil
}

// packArg checks argument i (a) against its parameter p and converts it
// into *ka; for a buffer argument it returns the buffer, whose use the
// caller takes (packArg takes none). Shared by Stream.Launch and
// LaunchBatch.Add; item is the batch item (-1 for Launch).
func packArg(op string, item int, s *Stream, k *Kernel, i int, a *Arg, p paramInfo, ka *abi.KernelArg) (*Buffer, error) {
	if a.kind == 0 {
		return nil, launchErr(codeInvalidArgument, op, item, "kernel %q argument %d: zero Arg", k.name, i)
	}
	if p.kind == abi.ArgAny {
		if p.size != 0 && a.size != p.size {
			return nil, launchErr(codeInvalidArgument, op, item, "kernel %q argument %d: %d bytes (%v), the parameter has %d", k.name, i, a.size, a.kind, p.size)
		}
	} else if p.kind != a.kind {
		return nil, launchErr(codeInvalidArgument, op, item, "kernel %q argument %d: %v given, the parameter is %v", k.name, i, a.kind, p.kind)
	}
	if a.kind != abi.ArgBuffer {
		*ka = abi.KernelArg{Kind: int32(a.kind), Size: a.size, Value: a.val}
		return nil, nil
	}
	b := a.buf
	if b == nil {
		return nil, launchErr(codeInvalidArgument, op, item, "kernel %q argument %d: nil buffer", k.name, i)
	}
	if !b.ok() {
		return nil, launchErr(codeInvalidArgument, op, item, "kernel %q argument %d: zero-value buffer", k.name, i)
	}
	if a.n == 0 {
		return nil, launchErr(codeInvalidArgument, op, item, "kernel %q argument %d: a zero-length view (the plugin would read length 0 as the rest of the buffer)", k.name, i)
	}
	if b.dev != s.dev {
		return nil, launchErr(codeInvalidArgument, op, item, "kernel %q argument %d: %s", k.name, i, misplaced("the buffer", b.dev, "stream", s.dev))
	}
	*ka = abi.KernelArg{Kind: int32(a.kind), Size: a.size, Value: a.val, Buffer: b.h, Offset: a.off, Length: a.n}
	return b, nil
}

// holds reports whether the call already holds a use of b (of the last
// few buffers held: a long list of distinct buffers is not scanned).
func (l *launchCall) holds(b *Buffer) bool {
	for m, n := l.held, 0; m != 0 && n < 8; n++ {
		j := 31 - bits.LeadingZeros32(m)
		if l.args[j].buf == b {
			return true
		}
		m &^= 1 << j
	}
	return false
}
