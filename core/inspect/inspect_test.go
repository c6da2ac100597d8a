// SPDX-License-Identifier: Apache-2.0

package inspect_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
)

// TestNilAndClosedRuntime: a nil runtime gives zero answers or an error
// naming the call, never a crash; a closed one keeps its counters.
func TestNilAndClosedRuntime(t *testing.T) {
	var nilRT *core.Runtime
	_, err := inspect.Stats(nilRT)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "runtime_stats")
	err = inspect.Control(nilRT, "fail_alloc_nth", 1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "runtime_control")
	assert.Equal(t, "", inspect.PluginPath(nilRT))
	assert.Nil(t, inspect.Report(nilRT))
	assert.NotNil(t, inspect.Logger(nilRT))
	assert.NotNil(t, inspect.Metrics(nilRT).BytesCopied)
	assert.Zero(t, inspect.OpCache(nilRT))
	inspect.SetOpTiming(nilRT, true) // nothing to do, no crash

	rt, err := core.Open(core.Config{Backend: "mock"})
	require.NoError(t, err)
	dev, err := rt.Device(0)
	require.NoError(t, err)
	require.NoError(t, core.CopyFromHost(mustAlloc(t, dev, 256), make([]byte, 256)))
	require.NoError(t, rt.Close())
	assert.Equal(t, uint64(256), inspect.Metrics(rt).BytesCopied["host_to_device"], "a closed runtime keeps its counters")
	_, err = inspect.Stats(rt)
	assert.True(t, errors.Is(err, core.ErrClosed), "%v", err)
	_, err = inspect.DeviceInfo(dev)
	assert.True(t, errors.Is(err, core.ErrClosed), "%v", err)
	assert.Zero(t, inspect.HostHeap(nilRT))
	assert.Zero(t, inspect.Kernel(nil))
}

// TestDeviceInfo: read now, it is the description of Open with the free
// memory of now; a nil device is an argument error.
func TestDeviceInfo(t *testing.T) {
	rt, err := core.Open(core.Config{Backend: "mock"})
	require.NoError(t, err)
	defer rt.Close()
	dev, err := rt.Device(0)
	require.NoError(t, err)
	b := mustAlloc(t, dev, 1<<20)
	defer b.Free()
	now, err := inspect.DeviceInfo(dev)
	require.NoError(t, err)
	atOpen := dev.Info()
	assert.Equal(t, atOpen.MemoryTotal, now.MemoryTotal)
	assert.Equal(t, atOpen.Name, now.Name)
	assert.NotZero(t, now.MemoryTotal)
	assert.LessOrEqual(t, now.MemoryFree, now.MemoryTotal)
	_, err = inspect.DeviceInfo(nil)
	assert.True(t, errors.Is(err, core.ErrInvalidArgument), "%v", err)
}

func mustAlloc(t *testing.T, d *core.Device, n int) *core.Buffer {
	b, err := d.Alloc(n)
	require.NoError(t, err)
	return b
}

// TestProbeAndBackends: the loader's view without a runtime; a bad
// backend name is the loader's error.
func TestProbeAndBackends(t *testing.T) {
	rep, err := inspect.Probe(core.Config{Backend: "mock"})
	require.NoError(t, err)
	require.NotNil(t, rep)
	assert.Contains(t, rep.Selected, "libgpurt_mock")
	names, err := inspect.Backends(core.Config{})
	require.NoError(t, err)
	assert.Contains(t, names, "mock")
	_, err = inspect.Probe(core.Config{Backend: "no-such-backend"})
	assert.True(t, errors.Is(err, core.ErrUnknownBackend), "%v", err)
}
