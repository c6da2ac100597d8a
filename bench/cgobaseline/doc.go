// SPDX-License-Identifier: Apache-2.0

// Package cgobaseline is the cgo side of gpurt's dispatch benchmark: it
// loads a plugin on its own (dlopen, the same negotiation the core does,
// runtime_create, stream_create) and calls a table slot from C through
// cgo, so that `go test -bench Dispatch ./bench/cgobaseline/` and
// cmd/gpurt-cgobench can print gpurt's zero-allocation call path beside a
// cgo call of the same C function, measured in the same run.
//
// It is the only package of this module that imports "C" (in files built
// with the cgo tag; without cgo, Open returns ErrNoCgo). Nothing the
// shipped gpurt binary links depends on it.
package cgobaseline

import "errors"

// ErrUnsupported is wrapped by PrepareGemm's error when the plugin has no
// GEMM (ABI 1.0) or refuses the descriptor.
var ErrUnsupported = errors.New("unsupported")

// ErrNoCgo is returned by Open in a build without cgo.
var ErrNoCgo = errors.New("cgobaseline: built without cgo (build with CGO_ENABLED=1)")
