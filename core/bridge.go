// SPDX-License-Identifier: Apache-2.0

package core

import (
	"unsafe"

	"github.com/hashicorp/go-hclog"

	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/core/internal/bridge"
	"github.com/metrale/gpurt/internal/abi"
)

// The internal bridge (core/internal/bridge) to the LLM family packages
// under core: a stream operation of a family enters the stream, resolves
// and holds its operands and ends in Stream.submit, exactly as core's own
// operations do.

func init() {
	// What core/inspect reads of a runtime.
	bridge.Diag.Metrics = func(rt any) diag.Metrics { return rt.(*Runtime).snapshotMetrics() }
	bridge.Diag.SetOpTiming = func(rt any, on bool) { rt.(*Runtime).setOpTiming(on) }
	bridge.Diag.OpCache = func(rt any) diag.OpCache { return rt.(*Runtime).opCacheStats() }
	bridge.Diag.Stats = func(rt any) (diag.Stats, error) { return rt.(*Runtime).liveStats() }
	bridge.Diag.Report = func(rt any) *diag.Report { return rt.(*Runtime).loadReport() }
	bridge.Diag.Logger = func(rt any) hclog.Logger { return rt.(*Runtime).logger() }
	bridge.Diag.PluginPath = func(rt any) string { return rt.(*Runtime).pluginPath() }
	bridge.Diag.PluginVersion = func(rt any) (string, uint32, uint32) { return rt.(*Runtime).pluginVersion() }
	bridge.Diag.Control = func(rt any, key string, value int64) error { return rt.(*Runtime).control(key, value) }
	bridge.Diag.Probe = func(cfg any) (*diag.Report, error) { return probeReport(cfg.(Config)) }
	bridge.Diag.Backends = func(cfg any) ([]string, error) { return findBackends(cfg.(Config)) }
	bridge.Diag.HostHeap = func(rt any) diag.Heap { return rt.(*Runtime).heapStats() }
	bridge.Diag.Kernel = func(k any) diag.Kernel { return k.(*Kernel).describe() }
	bridge.Diag.DeviceInfo = func(d any) (any, error) { return d.(*Device).refresh() }
	bridge.Diag.GraphUpdate = func(g any) string { return g.(*Graph).updateMethod() }

	bridge.Core.Begin = bridgeBegin
	bridge.Core.Operand = bridgeOperand
	bridge.Core.Submit = bridgeSubmit
	bridge.Core.Finish = bridgeFinish
	bridge.Core.DeviceBegin = func(d any, op string) (*bind.Plugin, abi.Runtime, uint32, error) {
		dev, _ := d.(*Device)
		if err := dev.enter(op); err != nil {
			return nil, 0, 0, err
		}
		return dev.rt.p, dev.rt.h, dev.index, nil
	}
	bridge.Core.DeviceEnd = func(d any) { d.(*Device).rt.exit() }
	bridge.Core.NewLife = func(d any, what string) (unsafe.Pointer, func()) {
		dev := d.(*Device)
		l := new(life)
		n := leakNote{rt: dev.rt.self, l: l, what: what}
		return unsafe.Pointer(l), func() {
			if rt := n.rt.Value(); rt != nil && n.l.alive() && rt.l.alive() {
				rt.log.Warn("leak: a "+n.what+" was garbage collected without Close", "backend", rt.p.Backend)
			}
		}
	}
	bridge.Core.Acquire = func(l unsafe.Pointer) bool { return (*life)(l).acquire() }
	bridge.Core.Release = func(l unsafe.Pointer) { (*life)(l).release() }
	bridge.Core.Destroy = func(d any, l unsafe.Pointer, op, what string, free func() error) error {
		return destroy(d.(*Device).rt, (*life)(l), op, what, byGraph, errClosed, free)
	}
	bridge.Core.RuntimeBegin = func(r any, op string) (*bind.Plugin, abi.Runtime, error) {
		rt, _ := r.(*Runtime)
		if err := rt.enter(op); err != nil {
			return nil, 0, err
		}
		return rt.p, rt.h, nil
	}
	bridge.Core.RuntimeEnd = func(r any) { r.(*Runtime).exit() }
	bridge.Core.DeviceOf = func(d any) (any, uint32, bool) {
		dev, _ := d.(*Device)
		if !dev.ok() {
			return nil, 0, false
		}
		return dev.rt, dev.index, true
	}
	bridge.Core.StreamOf = func(x any) (any, abi.Stream, unsafe.Pointer, bool) {
		s, _ := x.(*Stream)
		if !s.ok() {
			return nil, 0, nil, false
		}
		return s.dev, s.h, unsafe.Pointer(s.l), true
	}
	bridge.Core.Capturing = func(s any, op string) error { return s.(*Stream).syncErr(op) }
	bridge.Core.BufferOf = func(x any) (abi.Buffer, unsafe.Pointer) {
		b := x.(*Buffer)
		return b.h, unsafe.Pointer(b.l)
	}
	bridge.Core.MetricBegin = func(r any) int64 { return r.(*Runtime).metrics.begin() }
	bridge.Core.MetricEnd = func(r any, m bridge.Metric, t0 int64, err error) error {
		if m != bridge.MetricCommRun {
			return err
		}
		return r.(*Runtime).metrics.end(opCommRun, t0, err)
	}
	bridge.Core.Error = func(kind error, op, msg string) error {
		c := codeInternal
		for code, i := range codeInfo {
			if i.sentinel == kind {
				c = code
				break
			}
		}
		return &Error{Code: c, Op: op, Message: msg}
	}
	bridge.Core.Within = within
	bridge.Core.DevicePool = devicePool
	bridge.Core.Region = func(op string, r unsafe.Pointer) (any, any, uint64, uint64, error) {
		b, off, n, err := resolve(op, *(*Region)(r))
		if err != nil {
			return nil, nil, 0, 0, err
		}
		return b.dev, b, off, n, nil
	}
}

func bridgeStream(c *bridge.Op) *Stream {
	s, _ := c.S.(*Stream)
	return s
}

func bridgeBegin(c *bridge.Op) error {
	s := bridgeStream(c)
	if err := s.enter(c.Name); err != nil {
		return err
	}
	c.P, c.RT = s.dev.rt.p, s.dev.rt.h
	return nil
}

func bridgeFinish(c *bridge.Op, err *error) {
	s := bridgeStream(c)
	s.sticky(err)
	for i := range c.Opr {
		if o := &c.Opr[i]; o.IsHeld() {
			o.Buf.(*Buffer).l.release()
			o.SetHeld(false)
		}
	}
	s.exit()
}

// bridgeOperand resolves *r as operand i of c: on the stream's device,
// aligned, long enough; it holds a use of the buffer (one per distinct
// buffer of the operation).
func bridgeOperand(c *bridge.Op, i int, name string, rp unsafe.Pointer, need, align uint64) error {
	op := c.Name
	r := *(*Region)(rp)
	if r == nil {
		return errf(codeInvalidArgument, op, "operand %s is required", name)
	}
	b, off, n, err := resolve(op, r)
	if err != nil {
		return within(op, "operand "+name+": ", err)
	}
	s := bridgeStream(c)
	if b.dev != s.dev {
		return errf(codeInvalidArgument, op, "%s", misplaced("operand "+name, b.dev, "stream", s.dev))
	}
	held := false
	for j := range c.Opr {
		if o := &c.Opr[j]; o.IsHeld() && o.Buf.(*Buffer) == b {
			held = true
			break
		}
	}
	o := &c.Opr[i]
	*o = bridge.Operand{Buf: b, H: b.h, Off: off, N: n}
	if !held {
		if !b.l.acquire() {
			o.Buf = nil
			return errFreed(op, "operand "+name+": buffer")
		}
		o.SetHeld(true)
	}
	if off%align != 0 {
		return errf(codeInvalidArgument, op, "operand %s starts at offset %d of its buffer, not a multiple of %d", name, off, align)
	}
	if need > n {
		return errf(codeOutOfRange, op, "operand %s needs %d bytes, its region has %d", name, need, n)
	}
	return nil
}

func bridgeSubmit(c *bridge.Op, slot bind.Slot, obj uintptr, args unsafe.Pointer, size uintptr, fix func(unsafe.Pointer, *[]uint64)) error {
	var opr [bridge.MaxOperands]gemmOperand
	for i := range c.Opr {
		if b, ok := c.Opr[i].Buf.(*Buffer); ok {
			opr[i] = gemmOperand{b, c.Opr[i].Off, c.Opr[i].N}
		}
	}
	sub := submission{slot: slot, obj: obj, args: args, size: size, opr: opr[:], fix: fix}
	switch c.Metric {
	case bridge.MetricQuantMatmul:
		sub.timed, sub.metric = true, opQuantMatmul
	case bridge.MetricGroupedGemm:
		sub.timed, sub.metric = true, opGroupedGemm
	case bridge.MetricAttentionRun:
		sub.timed, sub.metric = true, opAttentionRun
	}
	sub.lives[0] = (*life)(c.Hold)
	return bridgeStream(c).submit(c.Name, &sub)
}
