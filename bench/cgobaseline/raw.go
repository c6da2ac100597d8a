// SPDX-License-Identifier: Apache-2.0

//go:build cgo

package cgobaseline

/*
#cgo CFLAGS: -O2 -I${SRCDIR}/../../csrc
#cgo linux LDFLAGS: -ldl
#include <stdlib.h>
#include "raw.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Raw is the CUDA driver and cuBLASLt called directly from C, without a
// plugin: device 0's primary context (the one the cuda plugin uses), a
// non-blocking stream of its own, a fill kernel of its own (hand-written
// PTX with fill_f32's parameters) and a cuBLASLt plan made as the cuda
// plugin makes it. It is the "raw" side of gpurt-cgobench's launch and
// GEMM comparisons. Not safe for concurrent use.
type Raw struct {
	g C.gbr
}

// OpenRaw loads libcuda.so.1, initialises the driver, retains device 0's
// primary context and creates a stream. It fails (naming the step) on a
// machine without the driver or a device.
func OpenRaw() (*Raw, error) {
	r := &Raw{}
	if err := cCall("cgobaseline: raw: ", func(msg *C.char, n C.size_t) C.int { return C.gbr_open(&r.g, msg, n) }); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Raw) cuFailure(res C.gbr_CUresult, op string) error {
	if res == 0 {
		return nil
	}
	return cMessage("cgobaseline: raw: ", op, func(op, msg *C.char, n C.size_t) { C.gbr_result_message(&r.g, res, op, msg, n) })
}

// PrepareLaunch loads the fill kernel's PTX (the driver JITs it), gets the
// function, allocates its 256-byte buffer and runs one launch to
// completion (once).
func (r *Raw) PrepareLaunch() error {
	return cCall("cgobaseline: raw: ", func(msg *C.char, n C.size_t) C.int { return C.gbr_prepare_launch(&r.g, msg, n) })
}

// LaunchLoop calls cuLaunchKernel n times from C inside one cgo call
// (fill(y, 1.0, n = 1), grid 1, block 1, on the raw stream); it stops at
// the first error. PrepareLaunch must have succeeded.
func (r *Raw) LaunchLoop(n int) error {
	return r.cuFailure(C.gbr_launch_loop(&r.g, C.int(n)), "cuLaunchKernel")
}

// Synchronize waits for the raw stream.
func (r *Raw) Synchronize() error {
	return r.cuFailure(C.gbr_synchronize(&r.g), "cuStreamSynchronize")
}

// PrepareGemm opens cuBLASLt (GPURT_CUBLASLT_PATH, libcublasLt.so.13, the
// toolkit's folders), creates a handle and the plan the cuda plugin makes
// for PrepareGemm's descriptor (bf16, op(A) = A^T, f32 compute and scale,
// C = D, beta 0, 32 MiB workspace, the heuristic's first algorithm),
// allocates A, B, D and the workspace and copies a (2*k*m bytes) and b
// (2*k*n bytes) in.
func (r *Raw) PrepareGemm(m, n, k int, a, b []byte) error {
	if m <= 0 || n <= 0 || k <= 0 || len(a) != 2*k*m || len(b) != 2*k*n {
		return fmt.Errorf("cgobaseline: raw: gemm m %d n %d k %d needs %d and %d bytes of A and B, got %d and %d",
			m, n, k, 2*k*m, 2*k*n, len(a), len(b))
	}
	return cCall("cgobaseline: raw: ", func(msg *C.char, cap C.size_t) C.int {
		return C.gbr_prepare_gemm(&r.g, C.uint64_t(m), C.uint64_t(n), C.uint64_t(k), unsafe.Pointer(&a[0]), unsafe.Pointer(&b[0]), msg, cap)
	})
}

// GemmLoop calls cublasLtMatmul n times from C inside one cgo call on the
// raw stream; it stops at the first error. PrepareGemm must have
// succeeded.
func (r *Raw) GemmLoop(n int) error {
	var cu C.gbr_CUresult
	s := C.gbr_gemm_loop(&r.g, C.int(n), &cu)
	if cu != 0 {
		return r.cuFailure(cu, "cuCtxSetCurrent")
	}
	if s != 0 {
		return cMessage("cgobaseline: raw: ", "cublasLtMatmul", func(op, msg *C.char, n C.size_t) { C.gbr_status_message(&r.g, s, op, msg, n) })
	}
	return nil
}

// Close waits for the raw stream, frees what Prepare* made, destroys the
// stream and releases the primary context (the libraries stay loaded).
func (r *Raw) Close() {
	if r != nil {
		C.gbr_close(&r.g)
	}
}
