// SPDX-License-Identifier: Apache-2.0

// Package bind is the one door through which the core calls a plugin.
//
// The plugin's function table is copied once into an abi.API (only the
// slots the plugin's struct_size covers; later ones stay zero). Every slot
// has a typed method on *Plugin, generated from abi/gpurt.h into
// zslots.go: it checks that the plugin has the slot (an error wrapping
// ErrUnsupported, naming the plugin's ABI version, when it does not),
// calls through core/internal/ffi without allocating, and turns a returned
// gpurt_error* into a *Error (the only allocation, on the error path),
// freeing the error object at once. Nothing outside this package calls
// ffi or converts a pointer to a uintptr for a call.
//
// Pointers: a method's pointer parameters are converted to uintptr in the
// ffi call expression itself and kept alive until the call returns, so Go
// memory (an argument struct on the caller's stack) may be passed. Pointer
// fields inside argument structs that point at Go memory have Go pointer
// types in package abi (never uintptr), so a stack copy between filling a
// struct and the call moves them along.
//
// # Regenerating
//
// After changing abi/gpurt.h (the Go mirror in internal/abi is generated
// from it too), run from the module root
//
//	make generate        # or: go generate ./core/internal/bind
//
// which runs `go run ./internal/cmd/genbind` and rewrites zslots.go and
// internal/abi/z*.go. make test fails when a generated file is not what the generator makes from the
// header (genbind -check). Never edit them by hand; a slot shape the
// generator does not know is an error naming the line of the header.
package bind

//go:generate go run ../../../internal/cmd/genbind

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/metrale/gpurt/core/internal/ffi"
	"github.com/metrale/gpurt/internal/abi"
)

// Plugin is a negotiated, bound plugin. Its table never changes after Bind.
type Plugin struct {
	API     abi.API // slots past the plugin's struct_size are zero
	Backend string  // from plugin_info
	Version string
	// Priority orders backends in auto mode (higher first).
	Priority int32
	Path     string // absolute path of the shared library
	Major    uint32 // the plugin's ABI version
	Minor    uint32
	// OnError, when set, is called with the code of every error object
	// the plugin returns (before it becomes a *Error); for metrics.
	OnError func(Code)
}

// optional10 are the 1.0 slots a plugin may leave NULL; every other
// 1.0 slot is required. The core never calls shutdown (plugins are never
// unloaded), so the header makes it optional.
var optional10 = [NumSlots]bool{SlotShutdown: true}

// Supported reports whether this platform has a call path into plugins.
const Supported = ffi.Supported

// Bind copies the table at tablePtr (a const gpurt_api* returned by the
// plugin's entry) and checks that every 1.0 slot is present. The first
// missing slot is the error (a sticky first error: the plugin is either
// whole or rejected).
func Bind(tablePtr uintptr, path string) (*Plugin, error) {
	if tablePtr == 0 {
		return nil, fmt.Errorf("%w: the entry returned no function table", ErrABI)
	}
	size := *(*uint64)(ffi.Ptr(tablePtr)) // C memory, lives forever
	p := &Plugin{Path: path}
	n := uintptr(size)
	if n > unsafe.Sizeof(p.API) {
		n = unsafe.Sizeof(p.API)
	}
	if n < unsafe.Offsetof(p.API.ErrorGet) {
		return nil, fmt.Errorf("%w: function table struct_size %d is smaller than its header", ErrABI, size)
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(&p.API)), unsafe.Sizeof(p.API))
	src := unsafe.Slice((*byte)(ffi.Ptr(tablePtr)), n)
	copy(dst, src)
	p.API.StructSize = size
	p.Major, p.Minor = p.API.ABIMajor, p.API.ABIMinor
	for s := Slot(0); s < NumSlots; s++ {
		if slotInfo[s].minor == 0 && !optional10[s] && p.fn(s) == 0 {
			return nil, fmt.Errorf("%w: function table has no %s (struct_size %d)", ErrABI, slotInfo[s].name, size)
		}
	}
	var info abi.PluginInfo
	info.StructSize = uint64(unsafe.Sizeof(info))
	if err := p.PluginInfo("plugin_info", &info); err != nil {
		return nil, err
	}
	p.Backend = abi.CString(info.Backend[:])
	p.Version = abi.CString(info.Version[:])
	p.Priority = info.Priority
	if p.Backend == "" {
		return nil, fmt.Errorf("%w: plugin_info gave no backend name", ErrABI)
	}
	return p, nil
}

// Check turns a returned gpurt_error* into an error (nil for NULL) and
// frees the error object. op names the operation for the message.
func (p *Plugin) Check(op string, e abi.Error) error {
	if e == 0 {
		return nil
	}
	var info abi.ErrorInfo
	info.StructSize = uint64(unsafe.Sizeof(info))
	p.ErrorGet(e, &info)
	msg := ""
	if info.Message != 0 && info.MessageLen > 0 {
		msg = string(unsafe.Slice((*byte)(ffi.Ptr(info.Message)), info.MessageLen))
	}
	p.ErrorDestroy(e)
	if p.OnError != nil {
		p.OnError(Code(info.Code))
	}
	return NewError(Code(info.Code), info.VendorCode, msg, op, p.Backend)
}

// fail is a generated method's error path: the plugin's error e of slot
// s, under the name op ("" names the slot).
func (p *Plugin) fail(op string, s Slot, e abi.Error) error {
	if op == "" {
		op = slotInfo[s].name
	}
	return p.Check(op, e)
}

// Has reports whether the plugin has slot s: inside its struct_size and
// set.
func (p *Plugin) Has(s Slot) bool { return p.fn(s) != 0 }

// String is the slot's C name ("buffer_alloc").
func (s Slot) String() string {
	if s < 0 || s >= NumSlots {
		return fmt.Sprintf("slot %d", int(s))
	}
	return slotInfo[s].name
}

// Minor is the ABI minor version that added the slot.
func (s Slot) Minor() uint32 { return slotInfo[s].minor }

// unsupported is the error for calling slot s of a plugin that lacks it.
func (p *Plugin) unsupported(op string, s Slot) error {
	if op == "" {
		op = slotInfo[s].name
	}
	return p.Unsupported(op, s)
}

// Unsupported is the error for an operation that needs slot s, which the
// plugin lacks (an older minor, or a NULL slot). It wraps ErrUnsupported.
func (p *Plugin) Unsupported(op string, s Slot) error {
	why := fmt.Sprintf("needs ABI 1.%d", slotInfo[s].minor)
	if p.Minor >= slotInfo[s].minor {
		why = "the plugin left the slot NULL"
	}
	return NewError(abi.ErrUnsupported, 0, fmt.Sprintf("%s is unsupported by this plugin (ABI %d.%d; %s): %s", slotInfo[s].name, p.Major, p.Minor, why, p.Path), op, p.Backend)
}

// Negotiate calls a plugin's entry (GPURT_ENTRY_SYMBOL, at address entry)
// with args and returns its GPURT_OK / GPURT_ERR_* result.
func Negotiate(entry uintptr, args *abi.NegotiateArgs) int32 {
	rc := int32(ffi.Call1(entry, uintptr(unsafe.Pointer(args))))
	runtime.KeepAlive(args)
	return rc
}

// HostBytes is a view of size bytes of plugin-owned memory (pinned host
// memory from host_alloc) at addr+off. The memory is not Go's: the view
// is valid until the plugin frees it.
func HostBytes(addr uintptr, off, size uint64) []byte {
	return unsafe.Slice((*byte)(ffi.Ptr(addr+uintptr(off))), size)
}

// StringData is the address of s's bytes, for an argument struct's
// pointer field (never written through).
func StringData(s string) *byte { return unsafe.StringData(s) }

// IntsData is the address of s's first element as a C uint64_t array
// (int is 64 bits on every platform with a call path); nil where int is
// narrower, or for an empty s. The caller has checked the values are >= 0.
func IntsData(s []int) *uint64 {
	if unsafe.Sizeof(int(0)) != 8 || len(s) == 0 {
		return nil
	}
	return (*uint64)(unsafe.Pointer(unsafe.SliceData(s)))
}

// SliceData is the address of b's first byte (nil for a nil slice), for
// an argument struct's pointer field.
func SliceData(b []byte) *byte { return unsafe.SliceData(b) }
