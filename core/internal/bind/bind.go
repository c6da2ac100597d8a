// SPDX-License-Identifier: Apache-2.0

// Package bind is how a call crosses from the core into a plugin: the
// plugin's function table is copied once into an abi.API of uintptrs
// (only the slots the plugin's struct_size covers; later ones stay zero),
// and every call goes through ffi.CallN, which allocates nothing.
//
// A returned gpurt_error* becomes a *Error (the only allocation, on the
// error path) and is freed at once.
package bind

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/metrale/gpurt/abi"
	"github.com/metrale/gpurt/core/internal/ffi"
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
}

// required10 names the 1.0 slots a plugin must fill to be usable.
var required10 = []string{
	"ErrorGet", "ErrorDestroy", "PluginInfo", "Probe", "Shutdown",
	"RuntimeCreate", "RuntimeDestroy", "RuntimeStats", "RuntimeControl",
	"DeviceCount", "DeviceInfo", "DeviceSynchronize", "BufferAlloc",
	"BufferFree", "HostAlloc", "HostFree", "Copy", "Memset",
	"StreamCreate", "StreamDestroy", "StreamSynchronize", "StreamQuery",
	"StreamWaitEvent", "EventCreate", "EventDestroy", "EventRecord",
	"EventQuery", "EventSynchronize", "EventElapsed", "ModuleLoad",
	"ModuleUnload", "KernelGet", "KernelInfo", "Launch",
}

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
	v := reflect.ValueOf(&p.API).Elem()
	for _, name := range required10 {
		if v.FieldByName(name).Uint() == 0 {
			f, _ := v.Type().FieldByName(name)
			return nil, fmt.Errorf("%w: function table has no %s (struct_size %d)", ErrABI, f.Tag.Get("c"), size)
		}
	}
	var info abi.PluginInfo
	info.StructSize = uint64(unsafe.Sizeof(info))
	if err := p.Check("plugin_info", ffi.Call1(p.API.PluginInfo, uintptr(unsafe.Pointer(&info)))); err != nil {
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
func (p *Plugin) Check(op string, e uintptr) error {
	if e == 0 {
		return nil
	}
	var info abi.ErrorInfo
	info.StructSize = uint64(unsafe.Sizeof(info))
	ffi.Call2(p.API.ErrorGet, e, uintptr(unsafe.Pointer(&info)))
	msg := ""
	if info.Message != 0 && info.MessageLen > 0 {
		msg = string(unsafe.Slice((*byte)(ffi.Ptr(info.Message)), info.MessageLen))
	}
	ffi.Call1(p.API.ErrorDestroy, e)
	return NewError(Code(info.Code), info.VendorCode, msg, op, p.Backend)
}

// Has reports whether the table holds a slot (non-zero means: inside the
// plugin's struct_size and set).
func Has(slot uintptr) bool { return slot != 0 }

// Unsupported is the error for a slot an older plugin does not have.
func (p *Plugin) Unsupported(op string, minor int) error {
	return NewError(CodeUnsupported, 0, fmt.Sprintf("plugin %s speaks ABI %d.%d; %s needs 1.%d", p.Path, p.Major, p.Minor, op, minor), op, p.Backend)
}
