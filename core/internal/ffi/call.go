// SPDX-License-Identifier: Apache-2.0

//go:build (linux || darwin) && (amd64 || arm64)

// Package ffi is the one place where gpurt crosses from Go into a plugin.
//
// A call goes through runtime.cgocall (the same path cgo uses) into a small
// assembly trampoline that loads up to six integer/pointer arguments into
// the platform's C argument registers and calls the function pointer. The
// argument frame lives on the caller's goroutine stack and nothing escapes,
// so a call allocates nothing.
//
// Stack safety: a pointer to Go stack memory passed as an argument (an
// argument struct in the caller's frame) stays valid because every function
// from the caller's uintptr conversion to the C call is nosplit: the
// goroutine stack cannot grow, and so cannot move, in between; and during
// the C call the goroutine is in a system call, where its stack is never
// moved or shrunk. Callers must compute the uintptr in the call expression
// itself and keep the pointed-to values alive with runtime.KeepAlive.
package ffi

import (
	"unsafe"

	// purego provides the cgo runtime hooks (fakecgo) when CGO_ENABLED=0,
	// which runtime.cgocall needs, and dlopen/dlsym.
	_ "github.com/ebitengine/purego"
)

// frame is read by the trampoline; its layout is fixed: fn, a1..a6, r1.
type frame struct {
	fn uintptr
	a  [6]uintptr
	r1 uintptr
}

//go:linkname runtime_cgocall runtime.cgocall
//go:noescape
func runtime_cgocall(fn uintptr, arg unsafe.Pointer) int32

// trampolineABI0 holds the address of the assembly trampoline (set in asm).
var trampolineABI0 uintptr

// Supported reports whether this platform has a call path.
const Supported = true

// Call0 calls fn() and returns its integer/pointer result.
//
//go:nosplit
func Call0(fn uintptr) uintptr {
	f := frame{fn: fn}
	runtime_cgocall(trampolineABI0, unsafe.Pointer(&f))
	return f.r1
}

// Call1 calls fn(a1).
//
//go:nosplit
func Call1(fn, a1 uintptr) uintptr {
	f := frame{fn: fn, a: [6]uintptr{a1}}
	runtime_cgocall(trampolineABI0, unsafe.Pointer(&f))
	return f.r1
}

// Call2 calls fn(a1, a2).
//
//go:nosplit
func Call2(fn, a1, a2 uintptr) uintptr {
	f := frame{fn: fn, a: [6]uintptr{a1, a2}}
	runtime_cgocall(trampolineABI0, unsafe.Pointer(&f))
	return f.r1
}

// Call3 calls fn(a1, a2, a3).
//
//go:nosplit
func Call3(fn, a1, a2, a3 uintptr) uintptr {
	f := frame{fn: fn, a: [6]uintptr{a1, a2, a3}}
	runtime_cgocall(trampolineABI0, unsafe.Pointer(&f))
	return f.r1
}

// Call4 calls fn(a1, a2, a3, a4).
//
//go:nosplit
func Call4(fn, a1, a2, a3, a4 uintptr) uintptr {
	f := frame{fn: fn, a: [6]uintptr{a1, a2, a3, a4}}
	runtime_cgocall(trampolineABI0, unsafe.Pointer(&f))
	return f.r1
}

// Call6 calls fn(a1, ..., a6).
//
//go:nosplit
func Call6(fn, a1, a2, a3, a4, a5, a6 uintptr) uintptr {
	f := frame{fn: fn, a: [6]uintptr{a1, a2, a3, a4, a5, a6}}
	runtime_cgocall(trampolineABI0, unsafe.Pointer(&f))
	return f.r1
}

// Ptr converts an address of C memory (never Go memory) to a pointer, for
// reading plugin-owned data such as an error message or a static table.
func Ptr(addr uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&addr))
}
