// SPDX-License-Identifier: Apache-2.0

package core

import (
	"fmt"
	"math"
	"math/bits"
	"sync"

	"github.com/metrale/gpurt/abi"
	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/floatbits"
)

// ModuleFormat says what the data of a module is.
type ModuleFormat int32

// Module formats.
const (
	ModuleBuiltin     ModuleFormat = abi.ModuleBuiltin // the plugin's own kernels
	ModulePTX         ModuleFormat = abi.ModulePTX
	ModuleCubin       ModuleFormat = abi.ModuleCubin
	ModuleFatbin      ModuleFormat = abi.ModuleFatbin
	ModuleMetallib    ModuleFormat = abi.ModuleMetallib
	ModuleMetalSource ModuleFormat = abi.ModuleMetalSource
)

// BuiltinModuleName is the registry name of a device's built-in module.
const BuiltinModuleName = "builtin"

// Module is loaded code on one device, registered under a name in the
// device's registry. Its kernels are looked up by name and cached. Safe
// for concurrent use; Unload racing with a launch makes the launch fail
// with ErrClosed.
type Module struct {
	dev  *Device
	name string
	h    abi.Module
	l    *life

	mu      sync.Mutex
	kernels map[string]*Kernel
}

// Kernel is a function of a module. It stays valid while its module is
// loaded.
type Kernel struct {
	mod  *Module
	name string
	h    abi.Kernel // owned by the module
	info KernelInfo
}

// KernelInfo describes a kernel's parameters.
type KernelInfo struct {
	MaxThreadsPerBlock uint32
	StaticSharedBytes  uint32
	Params             []ParamInfo
}

// ParamInfo is one kernel parameter: its kind (an Arg kind; ArgKindAny
// when the plugin knows only the size) and its size in bytes.
type ParamInfo struct {
	Kind ArgKind
	Size uint32
}

// LoadModule loads code onto the device and registers it under name
// (unique per device; BuiltinModuleName is taken by BuiltinModule). data
// is copied by the plugin; the call may be slow (compilation).
func (d *Device) LoadModule(name string, format ModuleFormat, data []byte) (*Module, error) {
	const op = "module_load"
	if name == "" {
		return nil, errf(CodeInvalidArgument, op, "empty module name")
	}
	if format != ModuleBuiltin && len(data) == 0 {
		return nil, errf(CodeInvalidArgument, op, "module %q: no data", name)
	}
	if err := d.enter(op); err != nil {
		return nil, err
	}
	rt := d.rt
	defer rt.exit()
	d.modMu.Lock()
	defer d.modMu.Unlock()
	if _, dup := d.modules[name]; dup {
		return nil, errf(CodeInvalidArgument, op, "a module named %q is already loaded on %v", name, d)
	}
	a := abi.ModuleLoadArgs{StructSize: abi.SizeofModuleLoadArgs, Device: d.index,
		Format: int32(format), DataLen: uint64(len(data)), NameLen: uint64(len(name))}
	var h abi.Module
	a.Data = bind.SliceData(data)
	a.Name = bind.StringData(name)
	if err := rt.p.ModuleLoad(op, rt.h, &a, &h); err != nil {
		return nil, err
	}
	m := &Module{dev: d, name: name, h: h, l: new(life), kernels: map[string]*Kernel{}}
	if d.modules == nil {
		d.modules = map[string]*Module{}
	}
	d.modules[name] = m
	return m, nil
}

// BuiltinModule returns the device's built-in module (loaded on first
// use, then from the registry). Every plugin's built-in module has the
// kernels listed in gpurt.h: fill_T, scale_T, axpy_T, add_T, mul_T for T
// in f32, f16, bf16, and sleep_ns.
func (d *Device) BuiltinModule() (*Module, error) {
	if m, err := d.Module(BuiltinModuleName); err == nil {
		return m, nil
	}
	m, err := d.LoadModule(BuiltinModuleName, ModuleBuiltin, nil)
	if err != nil {
		if m2, err2 := d.Module(BuiltinModuleName); err2 == nil { // lost a race
			return m2, nil
		}
	}
	return m, err
}

// Module returns the module registered under name on the device.
func (d *Device) Module(name string) (*Module, error) {
	if !d.ok() {
		return nil, errInvalid("module", "device")
	}
	if !d.rt.l.alive() {
		return nil, errClosed("module", "runtime")
	}
	d.modMu.Lock()
	defer d.modMu.Unlock()
	if m, ok := d.modules[name]; ok {
		return m, nil
	}
	return nil, errf(CodeNotFound, "module", "no module named %q on %v", name, d)
}

// Name is the module's registry name.
func (m *Module) Name() string {
	if m == nil {
		return ""
	}
	return m.name
}

// Device is the module's device.
func (m *Module) Device() *Device {
	if m == nil {
		return nil
	}
	return m.dev
}

// Unload removes the module from the registry and the device; its kernels
// become invalid (launching one is an error wrapping ErrClosed).
func (m *Module) Unload() error {
	const op = "module_unload"
	if !m.ok() {
		return errInvalid(op, "module")
	}
	rt := m.dev.rt
	if err := rt.enter(op); err != nil {
		return err
	}
	defer rt.exit()
	switch m.l.kill() {
	case killDead:
		return errClosed(op, "module "+m.name)
	case killRefused:
		return errf(CodeFailedPrecondition, op, "module %s is held by a pending LaunchBatch or a live Graph: Submit or Reset the batch, or Close the graph, first", m.name)
	}
	m.dev.modMu.Lock()
	if m.dev.modules[m.name] == m {
		delete(m.dev.modules, m.name)
	}
	m.dev.modMu.Unlock()
	return rt.p.ModuleUnload(op, rt.h, m.h)
}

// Kernel returns the kernel named name (looked up once, then cached).
func (m *Module) Kernel(name string) (*Kernel, error) {
	const op = "kernel_get"
	if !m.ok() {
		return nil, errInvalid(op, "module")
	}
	rt := m.dev.rt
	if err := rt.enter(op); err != nil {
		return nil, err
	}
	defer rt.exit()
	if !m.l.acquire() {
		return nil, errClosed(op, "module "+m.name)
	}
	defer m.l.release()
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.kernels[name]; ok {
		return k, nil
	}
	var h abi.Kernel
	if err := rt.p.KernelGet(op, rt.h, m.h, name, &h); err != nil {
		return nil, err
	}
	var in abi.KernelInfo
	in.StructSize = abi.SizeofKernelInfo
	if err := rt.p.KernelInfo("kernel_info", rt.h, h, &in); err != nil {
		return nil, err
	}
	if in.NumParams > abi.MaxKernelParams {
		return nil, errf(CodeInternal, "kernel_info", "kernel %q reports %d parameters (at most %d)", name, in.NumParams, abi.MaxKernelParams)
	}
	k := &Kernel{mod: m, name: name, h: h, info: KernelInfo{
		MaxThreadsPerBlock: in.MaxThreadsPerBlock, StaticSharedBytes: in.StaticSharedBytes,
		Params: make([]ParamInfo, in.NumParams)}}
	for i := range k.info.Params {
		k.info.Params[i] = ParamInfo{Kind: ArgKind(in.ParamKind[i]), Size: in.ParamSize[i]}
	}
	m.kernels[name] = k
	return k, nil
}

// Name is the kernel's name.
func (k *Kernel) Name() string {
	if k == nil {
		return ""
	}
	return k.name
}

// Module is the kernel's module.
func (k *Kernel) Module() *Module {
	if k == nil {
		return nil
	}
	return k.mod
}

// Info describes the kernel's parameters (the slice is shared: do not
// change it).
func (k *Kernel) Info() KernelInfo {
	if k == nil {
		return KernelInfo{}
	}
	return k.info
}

// ArgKind is the kind of a kernel argument (GPURT_ARG_*).
type ArgKind int32

// Argument kinds.
const (
	ArgKindBuffer ArgKind = abi.ArgBuffer
	ArgKindI8     ArgKind = abi.ArgI8
	ArgKindI16    ArgKind = abi.ArgI16
	ArgKindI32    ArgKind = abi.ArgI32
	ArgKindI64    ArgKind = abi.ArgI64
	ArgKindU8     ArgKind = abi.ArgU8
	ArgKindU16    ArgKind = abi.ArgU16
	ArgKindU32    ArgKind = abi.ArgU32
	ArgKindU64    ArgKind = abi.ArgU64
	ArgKindF16    ArgKind = abi.ArgF16
	ArgKindBF16   ArgKind = abi.ArgBF16
	ArgKindF32    ArgKind = abi.ArgF32
	ArgKindF64    ArgKind = abi.ArgF64
	ArgKindAny    ArgKind = abi.ArgAny // in ParamInfo only
)

var argKindNames = map[ArgKind]string{
	ArgKindBuffer: "buffer", ArgKindI8: "i8", ArgKindI16: "i16", ArgKindI32: "i32", ArgKindI64: "i64",
	ArgKindU8: "u8", ArgKindU16: "u16", ArgKindU32: "u32", ArgKindU64: "u64", ArgKindF16: "f16",
	ArgKindBF16: "bf16", ArgKindF32: "f32", ArgKindF64: "f64", ArgKindAny: "any",
}

func (k ArgKind) String() string {
	if s, ok := argKindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("kind %d", int32(k))
}

// Arg is one typed kernel argument, made by ArgBuffer, ArgI32, ... It is
// a small value; the zero Arg is invalid.
type Arg struct {
	kind ArgKind
	size uint32
	val  uint64
	buf  *Buffer
	off  uint64
	n    uint64
}

// ArgBuffer passes the device address of a region (a buffer or a view).
func ArgBuffer(r Region) Arg {
	switch v := r.(type) {
	case *Buffer:
		if v != nil {
			return Arg{kind: ArgKindBuffer, size: 8, buf: v, n: v.size}
		}
	case View:
		if v.buf != nil {
			return Arg{kind: ArgKindBuffer, size: 8, buf: v.buf, off: v.off, n: v.n}
		}
	}
	return Arg{kind: ArgKindBuffer, size: 8} // nil: rejected by Launch
}

func scalar(k ArgKind, size uint32, v uint64) Arg { return Arg{kind: k, size: size, val: v} }

// Scalar arguments of each width.
func ArgI8(v int8) Arg     { return scalar(ArgKindI8, 1, uint64(uint8(v))) }
func ArgI16(v int16) Arg   { return scalar(ArgKindI16, 2, uint64(uint16(v))) }
func ArgI32(v int32) Arg   { return scalar(ArgKindI32, 4, uint64(uint32(v))) }
func ArgI64(v int64) Arg   { return scalar(ArgKindI64, 8, uint64(v)) }
func ArgU8(v uint8) Arg    { return scalar(ArgKindU8, 1, uint64(v)) }
func ArgU16(v uint16) Arg  { return scalar(ArgKindU16, 2, uint64(v)) }
func ArgU32(v uint32) Arg  { return scalar(ArgKindU32, 4, uint64(v)) }
func ArgU64(v uint64) Arg  { return scalar(ArgKindU64, 8, v) }
func ArgF32(v float32) Arg { return scalar(ArgKindF32, 4, uint64(math.Float32bits(v))) }
func ArgF64(v float64) Arg { return scalar(ArgKindF64, 8, math.Float64bits(v)) }

// ArgF16 passes v rounded to f16 (round to nearest even).
func ArgF16(v float32) Arg { return scalar(ArgKindF16, 2, uint64(floatbits.F16FromFloat32(v))) }

// ArgF16Bits passes raw f16 bits.
func ArgF16Bits(bits uint16) Arg { return scalar(ArgKindF16, 2, uint64(bits)) }

// ArgBF16 passes v rounded to bf16 (round to nearest even).
func ArgBF16(v float32) Arg { return scalar(ArgKindBF16, 2, uint64(floatbits.BF16FromFloat32(v))) }

// ArgBF16Bits passes raw bf16 bits.
func ArgBF16Bits(bits uint16) Arg { return scalar(ArgKindBF16, 2, uint64(bits)) }

// Kind is the argument's kind.
func (a Arg) Kind() ArgKind { return a.kind }

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
		return launchErr(CodeInvalidArgument, op, item, "Grid1D(%d, %d) has no grid: %s", cfg.n1D, cfg.block1D, cfg.why1D())
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
func (s *Stream) Launch(k *Kernel, cfg LaunchConfig, args ...Arg) error {
	if s != nil && s.rec != nil {
		return s.rec.launch(s, k, &cfg, args)
	}
	if err := s.enter("launch"); err != nil {
		return err
	}
	l := launchCall{s: s, args: args}
	defer l.finish()
	err := l.run(s, k, &cfg)
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
	rt := s.dev.rt
	la := launchArgs(cfg, len(l.args))
	// la.Args is a Go pointer: the array may live on the stack.
	if len(l.args) <= launchSmall {
		var ka [launchSmall]abi.KernelArg
		if err := l.pack(s, k, ka[:len(l.args)]); err != nil {
			return err
		}
		la.Args = &ka[0]
		return rt.p.Launch(op, rt.h, s.h, k.h, &la)
	}
	var ka [abi.MaxKernelParams]abi.KernelArg
	if err := l.pack(s, k, ka[:len(l.args)]); err != nil {
		return err
	}
	la.Args = &ka[0]
	return rt.p.Launch(op, rt.h, s.h, k.h, &la)
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
		return launchErr(CodeInvalidArgument, op, item, "nil kernel")
	}
	if !k.ok() {
		return launchErr(CodeInvalidArgument, op, item, "zero-value kernel (not made by Module.Kernel)")
	}
	if k.mod.dev != s.dev {
		return launchErr(CodeInvalidArgument, op, item, "%s", misplaced(fmt.Sprintf("kernel %q", k.name), k.mod.dev, "stream", s.dev))
	}
	if nargs != len(k.info.Params) {
		return launchErr(CodeInvalidArgument, op, item, "kernel %q takes %d arguments, got %d", k.name, len(k.info.Params), nargs)
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
	params := k.info.Params[:len(ka)]
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
func packArg(op string, item int, s *Stream, k *Kernel, i int, a *Arg, p ParamInfo, ka *abi.KernelArg) (*Buffer, error) {
	if a.kind == 0 {
		return nil, launchErr(CodeInvalidArgument, op, item, "kernel %q argument %d: zero Arg", k.name, i)
	}
	if p.Kind == ArgKindAny {
		if p.Size != 0 && a.size != p.Size {
			return nil, launchErr(CodeInvalidArgument, op, item, "kernel %q argument %d: %d bytes (%v), the parameter has %d", k.name, i, a.size, a.kind, p.Size)
		}
	} else if p.Kind != a.kind {
		return nil, launchErr(CodeInvalidArgument, op, item, "kernel %q argument %d: %v given, the parameter is %v", k.name, i, a.kind, p.Kind)
	}
	if a.kind != ArgKindBuffer {
		*ka = abi.KernelArg{Kind: int32(a.kind), Size: a.size, Value: a.val}
		return nil, nil
	}
	b := a.buf
	if b == nil {
		return nil, launchErr(CodeInvalidArgument, op, item, "kernel %q argument %d: nil buffer", k.name, i)
	}
	if !b.ok() {
		return nil, launchErr(CodeInvalidArgument, op, item, "kernel %q argument %d: zero-value buffer", k.name, i)
	}
	if a.n == 0 {
		return nil, launchErr(CodeInvalidArgument, op, item, "kernel %q argument %d: a zero-length view (the plugin would read length 0 as the rest of the buffer)", k.name, i)
	}
	if b.dev != s.dev {
		return nil, launchErr(CodeInvalidArgument, op, item, "kernel %q argument %d: %s", k.name, i, misplaced("the buffer", b.dev, "stream", s.dev))
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
