// SPDX-License-Identifier: Apache-2.0

// Package abi is the Go mirror of abi/gpurt.h (at the repository's root:
// the public C contract), the C ABI between the core and its plugins. It
// is internal: programs use package core; plugin authors use the header.
//
// The mirror is generated from the header (go run ./internal/cmd/genbind,
// `make generate`): zabi.go holds a Go type per opaque handle, a struct
// per header struct with its exact layout (each field tagged with its C
// name) and API, the function table; zconsts.go and zerrors.go the
// constants and the error codes; zsizes.go the struct sizes. A header
// change is `make generate`; TestLayoutMatchesHeader compiles the header
// at test time and fails on any drift in a size, an offset or a constant.
//
// The rules the generator follows for a field's Go type: a handle is its
// handle type; a pointer the core sets to Go memory has a Go pointer type
// (so the garbage collector and the stack copier see it); a pointer the
// plugin writes out (plugin-owned memory) and a C function pointer stay
// uintptr; each `void *` field is listed in genbind's voidPointers.
//
// Nothing here calls anything: the binding layer (core/internal/bind) does.
package abi

// CString returns the NUL-terminated prefix of a fixed char array.
func CString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
