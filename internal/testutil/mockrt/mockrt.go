// SPDX-License-Identifier: Apache-2.0

// Package mockrt opens a runtime on the mock plugin for the tests of
// core's family packages (core/attention, core/matmul, core/collective): one place for what
// each of them wrote out.
package mockrt

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/testutil"
)

// Open opens a runtime on the mock plugin with the given options and
// closes it when the test ends.
func Open(t testing.TB, options string) *core.Runtime {
	t.Helper()
	rt, err := core.Open(core.Config{PluginPaths: []string{testutil.MockPlugin(t)}, Backend: "mock", PluginOptions: options})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	return rt
}

// Device0 is rt's device 0.
func Device0(t testing.TB, rt *core.Runtime) *core.Device {
	t.Helper()
	d, err := rt.Device(0)
	require.NoError(t, err)
	return d
}
