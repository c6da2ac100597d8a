// SPDX-License-Identifier: Apache-2.0

package inspect_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/internal/testutil"
	"github.com/metrale/gpurt/internal/testutil/mockrt"
)

// TestMain puts a freshly built mock plugin on GPURT_PLUGIN_PATH, for the
// runnable examples (they open a runtime as a program would).
func TestMain(m *testing.M) { os.Exit(testutil.RunWithMockPlugin(m, "inspect")) }

// Example reads a runtime's plugin, counters, live objects, a kernel's
// parameters and the host heap, and uses a control of the mock to make the
// next allocation fail.
func Example() {
	mockrt.Example(core.Config{}, func(rt *core.Runtime, dev *core.Device, _ *core.Stream) error {
		_, major, minor := inspect.PluginVersion(rt)
		fmt.Println("plugin:", rt.Backend(), "ABI", major, minor >= 8, inspect.Report(rt).Selected == inspect.PluginPath(rt))

		b, _ := dev.Alloc(1 << 20)
		_ = core.CopyFromHost(b, make([]byte, 4096))
		st, _ := inspect.Stats(rt)
		fmt.Println("device bytes >= 1 MiB:", st.DeviceBytes >= 1<<20)
		m := inspect.Metrics(rt)
		fmt.Println("copied to the device:", m.BytesCopied["host_to_device"], "buffer bytes:", m.BufferBytes[0])

		// A kernel's parameters, which launches are checked against, and the
		// host heap's counters.
		mod, _ := dev.BuiltinModule()
		fill, _ := mod.Kernel("fill_f32")
		fmt.Println("fill_f32 takes:", inspect.Kernel(fill).Params)
		hb, _ := rt.AllocHostFromHeap(1000)
		fmt.Println("host heap: live", inspect.HostHeap(rt).Live, "in use", inspect.HostHeap(rt).InUse)
		_ = hb.Free()

		_ = inspect.Control(rt, "fail_alloc_nth", 1)
		_, err := dev.Alloc(64)
		fmt.Println("injected:", errors.Is(err, core.ErrOutOfMemory))
		fmt.Println("unknown control:", errors.Is(inspect.Control(rt, "no_such_knob", 1), core.ErrUnsupported))
		_ = b.Free()
		return nil
	})
	// Output:
	// plugin: mock ABI 1 true true
	// device bytes >= 1 MiB: true
	// copied to the device: 4096 buffer bytes: 1048576
	// fill_f32 takes: [{buffer 8} {f32 4} {u64 8}]
	// host heap: live 1 in use 1024
	// injected: true
	// unknown control: true
}
