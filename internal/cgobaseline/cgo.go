// SPDX-License-Identifier: Apache-2.0

//go:build cgo

package cgobaseline

/*
#cgo CFLAGS: -I${SRCDIR}/../../abi -O2
#cgo linux LDFLAGS: -ldl
#include <stdlib.h>
#include "baseline.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Plugin is a plugin loaded by C: its negotiated table, a runtime made
// with the options given to Open, and one stream on device 0. Not safe
// for concurrent Close; StreamQuery may be called from many goroutines.
type Plugin struct {
	p C.gb_plugin
}

// Open loads the plugin at path (an absolute path; dlopen of a library the
// core already loaded returns the same one), negotiates ABI
// GPURT_ABI_MAJOR.GPURT_ABI_MINOR, creates a runtime and a stream.
func Open(path string) (*Plugin, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	pl := &Plugin{}
	if C.gb_open(cpath, nil, &pl.p, &msg[0], C.size_t(len(msg))) != 0 {
		return nil, fmt.Errorf("cgobaseline: %s", C.GoString(&msg[0]))
	}
	return pl, nil
}

// StreamQuery calls the table's stream_query on the idle stream: one cgo
// call into C, which calls the slot. It reports whether the stream was
// idle.
func (p *Plugin) StreamQuery() bool {
	return C.gb_stream_query(p.p.api, p.p.rt, p.p.s) == 0
}

// StreamQueryLoop calls stream_query n times inside one cgo call (the
// cost of the C function alone) and returns how many found work pending.
func (p *Plugin) StreamQueryLoop(n int) int {
	return int(C.gb_stream_query_loop(p.p.api, p.p.rt, p.p.s, C.int(n)))
}

// Close destroys the stream and the runtime (the library stays loaded).
func (p *Plugin) Close() {
	if p != nil {
		C.gb_close(&p.p)
	}
}
