// SPDX-License-Identifier: Apache-2.0

package core

import (
	"sync"

	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/internal/abi"
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
	info kernelInfo
}

// kernelInfo is what the plugin says of a kernel (kernel_info): launches
// check their arguments against params; inspect.Kernel shows it.
type kernelInfo struct {
	maxThreadsPerBlock uint32
	staticSharedBytes  uint32
	params             []paramInfo
}

// paramInfo is one kernel parameter: its kind (abi.ArgAny when the plugin
// knows only the size) and its size in bytes.
type paramInfo struct {
	kind argKind
	size uint32
}

// LoadModule loads code onto the device and registers it under name
// (unique per device; BuiltinModuleName is taken by BuiltinModule). data
// is copied by the plugin; the call may be slow (compilation).
func (d *Device) LoadModule(name string, format ModuleFormat, data []byte) (*Module, error) {
	const op = "module_load"
	if name == "" {
		return nil, errf(codeInvalidArgument, op, "empty module name")
	}
	if format != ModuleBuiltin && len(data) == 0 {
		return nil, errf(codeInvalidArgument, op, "module %q: no data", name)
	}
	if err := d.enter(op); err != nil {
		return nil, err
	}
	rt := d.rt
	defer rt.exit()
	d.modMu.Lock()
	defer d.modMu.Unlock()
	if _, dup := d.modules[name]; dup {
		return nil, errf(codeInvalidArgument, op, "a module named %q is already loaded on %v", name, d)
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
// kernels listed in gpurt.h (abi.BuiltinKernels): the element-wise
// fill_T, scale_T, axpy_T, add_T, mul_T, silu_mul_T and softcap_T, the
// row kernels rmsnorm_T, rope_llama_T, rope_neox_T, embed_T, argmax_T,
// sample_T and (ABI 1.8) sample_rows_T (per-request sampling: package
// sampling), for T in f32, f16, bf16, and sleep_ns.
//
// argmax_T and sample_T on non-finite logits, the same on every backend:
// the token is always an index of the row, never -1. NaN ranks below
// every number and weighs nothing, so it is never drawn while the row
// has a number; a +Inf logit (an f16 logit past 65504 is one) wins, the
// first of several; a row of -Inf (and NaN) gives its first -Inf; a row of
// NaN gives 0, which cannot be told from a real token 0 (check the logits
// when that matters).
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
	return nil, errf(codeNotFound, "module", "no module named %q on %v", name, d)
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
	return destroy(rt, m.l, op, "module "+m.name, byBatchOrGraph, errClosed, func() error {
		m.dev.modMu.Lock()
		if m.dev.modules[m.name] == m {
			delete(m.dev.modules, m.name)
		}
		m.dev.modMu.Unlock()
		return rt.p.ModuleUnload(op, rt.h, m.h)
	})
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
		return nil, errf(codeInternal, "kernel_info", "kernel %q reports %d parameters (at most %d)", name, in.NumParams, abi.MaxKernelParams)
	}
	k := &Kernel{mod: m, name: name, h: h, info: kernelInfo{
		maxThreadsPerBlock: in.MaxThreadsPerBlock, staticSharedBytes: in.StaticSharedBytes,
		params: make([]paramInfo, in.NumParams)}}
	for i := range k.info.params {
		k.info.params[i] = paramInfo{kind: argKind(in.ParamKind[i]), size: in.ParamSize[i]}
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

// describe is the kernel's description (inspect.Kernel): a copy, with
// each parameter's kind as the Arg constructors name it.
func (k *Kernel) describe() diag.Kernel {
	if k == nil {
		return diag.Kernel{}
	}
	d := diag.Kernel{MaxThreadsPerBlock: k.info.maxThreadsPerBlock, StaticSharedBytes: k.info.staticSharedBytes,
		Params: make([]diag.Param, len(k.info.params))}
	for i, p := range k.info.params {
		d.Params[i] = diag.Param{Kind: p.kind.String(), Size: p.size}
	}
	return d
}
