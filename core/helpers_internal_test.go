// SPDX-License-Identifier: Apache-2.0

package core

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

// The internal tests' shared setup: each value is released at the test's
// (or benchmark's) end, in the reverse order of its making.

// testRuntime opens the mock plugin built for this test binary with
// options, and returns it and its device 0.
func testRuntime(tb testing.TB, options string) (*Runtime, *Device) {
	tb.Helper()
	rt, err := Open(Config{PluginPaths: []string{testutil.MockPlugin(tb)}, Backend: "mock", PluginOptions: options})
	require.NoError(tb, err, "open the mock (options %q)", options)
	tb.Cleanup(func() { _ = rt.Close() })
	dev, err := rt.Device(0)
	require.NoError(tb, err, "device 0")
	return rt, dev
}

// testStream is a new stream on dev.
func testStream(tb testing.TB, dev *Device) *Stream {
	tb.Helper()
	s, err := dev.NewStream()
	require.NoError(tb, err, "NewStream")
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// testKernels are dev's built-in module and its kernels names, in order.
func testKernels(tb testing.TB, dev *Device, names ...string) (*Module, []*Kernel) {
	tb.Helper()
	mod, err := dev.BuiltinModule()
	require.NoError(tb, err, "BuiltinModule")
	ks := make([]*Kernel, len(names))
	for i, name := range names {
		ks[i], err = mod.Kernel(name)
		require.NoError(tb, err, "built-in kernel %s", name)
	}
	return mod, ks
}

// testAlloc is a new buffer of n bytes on dev.
func testAlloc(tb testing.TB, dev *Device, n int) *Buffer {
	tb.Helper()
	b, err := dev.Alloc(n)
	require.NoError(tb, err, "Alloc(%d)", n)
	tb.Cleanup(func() { _ = b.Free() })
	return b
}
