// SPDX-License-Identifier: Apache-2.0

//go:build !((linux || darwin) && (amd64 || arm64))

package ffi

import "unsafe"

// Supported reports whether this platform has a call path. On this
// platform it does not: the loader reports it and never calls Call*.
const Supported = false

func unsupported() uintptr { panic("gpurt/ffi: no plugin call path on this platform") }

func Call0(fn uintptr) uintptr                         { return unsupported() }
func Call1(fn, a1 uintptr) uintptr                     { return unsupported() }
func Call2(fn, a1, a2 uintptr) uintptr                 { return unsupported() }
func Call3(fn, a1, a2, a3 uintptr) uintptr             { return unsupported() }
func Call4(fn, a1, a2, a3, a4 uintptr) uintptr         { return unsupported() }
func Call6(fn, a1, a2, a3, a4, a5, a6 uintptr) uintptr { return unsupported() }

// Ptr converts an address of C memory (never Go memory) to a pointer.
func Ptr(addr uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&addr))
}
