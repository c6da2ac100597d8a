// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"time"

	"github.com/metrale/gpurt/core"
)

// GPUTimer is what the GPU-machine benchmark programs (gpurt-attnbench,
// gpurt-quantbench) time on: device 0 of a runtime, one stream, and the
// built-in sleep_ns kernel that holds the stream while calls are enqueued.
type GPUTimer struct {
	Runtime *core.Runtime
	Device  *core.Device
	Stream  *core.Stream
	sleep   *core.Kernel
}

// OpenGPUTimer opens backend with the plugins of pluginPaths (searched
// first, then GPURT_PLUGIN_PATH and the running executable's folder, as
// core.Open does) and makes the stream. Close releases it.
func OpenGPUTimer(pluginPaths []string, backend string) (*GPUTimer, error) {
	rt, err := core.Open(core.Config{PluginPaths: pluginPaths, Backend: backend})
	if err != nil {
		return nil, err
	}
	t := &GPUTimer{Runtime: rt}
	if t.Device, err = rt.Device(0); err == nil {
		if t.Stream, err = t.Device.NewStream(); err == nil {
			var mod *core.Module
			if mod, err = t.Device.BuiltinModule(); err == nil {
				t.sleep, err = mod.Kernel("sleep_ns")
			}
		}
	}
	if err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// Close closes the stream and the runtime.
func (t *GPUTimer) Close() {
	if t.Stream != nil {
		t.Stream.Close()
	}
	t.Runtime.Close()
}

// BehindSleep is the GPU time of one call of fn, in µs: the stream is
// first held by sleep_ns for hold (at most 2 s), so that all iters calls
// are enqueued before the first runs and the events around them time the
// GPU's work alone, not the host's enqueue.
func (t *GPUTimer) BehindSleep(hold time.Duration, iters int, fn func() error) (float64, error) {
	if err := t.Stream.Launch(t.sleep, core.Grid1D(1, 1), core.ArgScalar[uint64](uint64(min(hold, 2*time.Second).Nanoseconds()))); err != nil {
		return 0, err
	}
	d, err := t.Stream.Time(func() error {
		for i := 0; i < iters; i++ {
			if err := fn(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return float64(d.Nanoseconds()) / 1e3 / float64(iters), nil
}

// Time is the benchmark programs' measurement of fn: 5 warm-up calls,
// then iters calls timed from the host (wall, µs per call, the stream
// synchronized after them) and iters calls behind a sleep three times as
// long as that enqueue took, plus 2 ms (gpu, µs per call: BehindSleep).
func (t *GPUTimer) Time(iters int, fn func() error) (gpu, wall float64, err error) {
	for i := 0; i < 5; i++ {
		if err = fn(); err != nil {
			return
		}
	}
	if err = t.Stream.Synchronize(); err != nil {
		return
	}
	t0 := time.Now()
	for i := 0; i < iters; i++ {
		if err = fn(); err != nil {
			return
		}
	}
	if err = t.Stream.Synchronize(); err != nil {
		return
	}
	elapsed := time.Since(t0)
	wall = float64(elapsed.Nanoseconds()) / 1e3 / float64(iters)
	gpu, err = t.BehindSleep(3*elapsed+2*time.Millisecond, iters, fn)
	return
}
