// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"testing"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
)

// The mock runtime and the setup on it that core's tests share with its
// family packages' (package mockrt): each value made is released at the
// test's end.
var (
	openMock    = mockrt.Open       // a runtime on the mock, with plugin options
	openMockCfg = mockrt.OpenConfig // a runtime on the mock, of a Config
	dev0        = mockrt.Device0    // its device 0
	stream      = mockrt.Stream     // a new stream
	builtin     = mockrt.Builtin    // a kernel of the built-in module
	alloc       = mockrt.Alloc      // a new buffer of n bytes
	upload      = mockrt.Upload     // a new buffer holding data (64 bytes longer)
	halves      = mockrt.Halves     // f16 or bf16 bytes
	i32le       = mockrt.I32LE      // little-endian int32 bytes
)

// fillSetup opens the mock with options and returns its device 0, a
// stream there, its fill_f32 kernel and a buffer of n bytes.
func fillSetup(t testing.TB, options string, n int) (*core.Device, *core.Stream, *core.Kernel, *core.Buffer) {
	t.Helper()
	d := dev0(t, openMock(t, options))
	return d, stream(t, d), builtin(t, d, "fill_f32"), alloc(t, d, n)
}
