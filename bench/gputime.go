// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"time"

	"github.com/metrale/gpurt/core"
)

// GPUTimeBehindSleep is the GPU time of one call of fn, in µs: the
// stream is first held by the built-in sleep_ns kernel (sleep) for hold,
// so that all iters calls are enqueued before the first runs and the
// events around them time the GPU's work alone, not the host's enqueue.
// hold is capped at 2 s.
func GPUTimeBehindSleep(dev *core.Device, s *core.Stream, sleep *core.Kernel, hold time.Duration, iters int,
	fn func() error) (float64, error) {
	start, err := dev.NewEvent(true)
	if err != nil {
		return 0, err
	}
	defer start.Close()
	end, err := dev.NewEvent(true)
	if err != nil {
		return 0, err
	}
	defer end.Close()
	if err := s.Launch(sleep, core.Grid1D(1, 1), core.ArgU64(uint64(min(hold, 2*time.Second).Nanoseconds()))); err != nil {
		return 0, err
	}
	if err := start.Record(s); err != nil {
		return 0, err
	}
	for i := 0; i < iters; i++ {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	if err := end.Record(s); err != nil {
		return 0, err
	}
	if err := end.Synchronize(); err != nil {
		return 0, err
	}
	d, err := core.Elapsed(start, end)
	if err != nil {
		return 0, err
	}
	return float64(d.Nanoseconds()) / 1e3 / float64(iters), nil
}
