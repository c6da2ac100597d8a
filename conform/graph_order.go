// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"fmt"
	"time"

	"github.com/metrale/gpurt/core"
)

// graphOrderChecks check gpurt.h's order rule of graph_launch: a later
// replay of a graph runs after an earlier one, whatever stream each is
// enqueued on (CUDA serialises the launches of one executable graph; the
// mock must too). Issue 22, item 6.
func graphOrderChecks() []check {
	return []check{
		{"graph/replays_ordered_across_streams", graphReplaysOrderedAcrossStreams},
	}
}

// graphReplaysOrderedAcrossStreams: a graph that reads x, waits, and writes
// x+1 (t = x; sleep; x = t; x += 1) is replayed eight times, alternating
// between two streams, with no synchronisation in between. Replays that
// overlapped would read the same x and lose increments; in order, x ends
// at 8.
func graphReplaysOrderedAcrossStreams(e *env) error {
	const replays = 8
	return withBatchEnv(e, 256, func(be *batchEnv) error {
		return withStream(e, func(s2 *core.Stream) error {
			t, err := e.dev.Alloc(4 * be.n)
			if err != nil {
				return err
			}
			defer t.Free()
			if err := firstErr(be.s.Launch(be.fill, be.cfg, be.fillArgs(be.x, 0)...),
				be.s.Launch(be.fill, be.cfg, be.fillArgs(be.y, 1)...), be.s.Synchronize()); err != nil {
				return err
			}
			N := core.ArgScalar[uint64](uint64(be.n))
			g, err := capture(be.s, func(s *core.Stream) error {
				return firstErrOf(
					func() error { return s.CopyDevice(t, be.x) },
					func() error { return s.Launch(be.sleep, core.Grid1D(1, 1), sleepArg(300*time.Microsecond)) },
					func() error { return s.CopyDevice(be.x, t) },
					func() error {
						return s.Launch(be.axpy, be.cfg, core.ArgBuffer(be.x), core.ArgBuffer(be.y), core.ArgScalar[float32](1), N)
					},
				)
			})
			if err != nil {
				return fmt.Errorf("capture: %w", err)
			}
			defer g.Close()
			streams := [2]*core.Stream{be.s, s2}
			for i := 0; i < replays; i++ {
				if err := g.Launch(streams[i%2]); err != nil {
					return fmt.Errorf("replay %d on stream %d: %w", i, i%2, err)
				}
			}
			if err := firstErr(s2.Synchronize(), be.s.Synchronize()); err != nil {
				return err
			}
			if err := be.expectAll(be.x, replays); err != nil {
				return fmt.Errorf("x after %d replays alternating between two streams (a replay overlapped an earlier one "+
					"and lost its update): %w", replays, err)
			}
			return nil
		})
	})
}
