// SPDX-License-Identifier: Apache-2.0

package core

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/metrale/gpurt/core/internal/bridge"
	"github.com/metrale/gpurt/internal/bytesize"
)

// What core keeps of the devices' memory pools: the allocator itself is
// package core/pool (over core/internal/bridge); core holds each device's
// pool, resolves its budget from Config.PoolBudget at Open and trims it in
// Runtime.Trim.

// poolSlot holds a device's pool (a *pool.Pool, opaque to core).
type poolSlot struct{ p any }

// devicePool is bridge.Core.DevicePool: d's pool, made by make with the
// runtime's budget for d at first use.
func devicePool(d any, make func(d any, budget uint64, from string) any) any {
	dev, _ := d.(*Device)
	if !dev.ok() {
		return nil
	}
	if s := dev.pool.Load(); s != nil {
		return s.p
	}
	if make == nil {
		return nil
	}
	budget, from := dev.rt.poolBudget.of(dev.info.MemoryTotal)
	if s := (&poolSlot{p: make(dev, budget, from)}); dev.pool.CompareAndSwap(nil, s) {
		return s.p
	}
	return dev.pool.Load().p
}

// trimPool returns the cached blocks of the device's pool, if it has one.
func (d *Device) trimPool() {
	if s := d.pool.Load(); s != nil && bridge.Pool.Trim != nil {
		bridge.Pool.Trim(s.p)
	}
}

// poolBudget is Config.PoolBudget resolved: a fraction of each device's
// memory, or bytes.
type poolBudget struct {
	fraction float64 // in (0, 1], or 0
	bytes    uint64  // when fraction is 0; 0: the device's memory
	from     string
}

// of is the budget of a device of total bytes, and what set it.
func (pb poolBudget) of(total uint64) (uint64, string) {
	switch {
	case pb.fraction > 0 && total > 0:
		return uint64(pb.fraction * float64(total)), fmt.Sprintf("%s=%g of the device's %d bytes", pb.from, pb.fraction, total)
	case pb.bytes > 0:
		return pb.bytes, pb.from
	case total > 0:
		return total, "the device's memory; Config.PoolBudget unset"
	}
	return ^uint64(0), "unbounded: the device reports no memory size"
}

// resolvePoolBudget reads Config.PoolBudget, else GPURT_POOL_BUDGET: a
// fraction in (0, 1] of each device's memory, or a byte count (above 1;
// the variable reads it as internal/bytesize does: K, M, G, T, binary).
func resolvePoolBudget(op string, v float64, getenv func(string) string) (poolBudget, error) {
	want := "a fraction in (0, 1] of the device's memory, or a byte count above 1"
	if v != 0 {
		switch {
		case v < 0 || v != v || v > 1<<62 || v > 1 && v != math.Trunc(v): // 1.5 is neither
			return poolBudget{}, errf(codeInvalidArgument, op, "Config.PoolBudget=%q: want %s", strconv.FormatFloat(v, 'g', -1, 64), want)
		case v <= 1:
			return poolBudget{fraction: v, from: "Config.PoolBudget"}, nil
		}
		return poolBudget{bytes: uint64(v), from: fmt.Sprintf("Config.PoolBudget=%d", uint64(v))}, nil
	}
	s := strings.TrimSpace(getenv("GPURT_POOL_BUDGET"))
	if s == "" {
		return poolBudget{}, nil
	}
	if n, err := bytesize.Parse(s); err == nil && n > 1 {
		return poolBudget{bytes: uint64(n), from: "GPURT_POOL_BUDGET=" + s}, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f > 0 && f <= 1) {
		return poolBudget{}, errf(codeInvalidArgument, op, "GPURT_POOL_BUDGET=%q: want %s (%v)", s, want, bytesize.ErrSyntax)
	}
	return poolBudget{fraction: f, from: "GPURT_POOL_BUDGET"}, nil
}
