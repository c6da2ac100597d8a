// SPDX-License-Identifier: Apache-2.0

package core

import "fmt"

// Nil and zero-value receivers. Every exported method of a core type
// accepts a nil receiver and the zero value of its type (an object not
// made by this package: &Buffer{}, &Stream{}, ...): methods that can fail
// return an error wrapping ErrInvalidArgument, accessors return the zero
// value. ok reports whether an object was made by this package.

func (rt *Runtime) ok() bool { return rt != nil && rt.p != nil && rt.heap != nil && rt.plans != nil }
func (d *Device) ok() bool   { return d != nil && d.rt.ok() && d.stageTokens != nil }
func (b *Buffer) ok() bool   { return b != nil && b.l != nil && b.dev.ok() }
func (hb *HostBuffer) ok() bool {
	return hb != nil && ((hb.hs != nil && hb.hs.ok()) || (hb.l != nil && hb.rt.ok()))
}
func (hh *hostHeap) ok() bool  { return hh != nil && hh.rt.ok() }
func (hs *heapSlice) ok() bool { return hs != nil && hs.l != nil && hs.blk != nil && hs.heap.ok() }
func (s *Stream) ok() bool     { return s != nil && s.l != nil && s.dev.ok() }
func (ev *Event) ok() bool     { return ev != nil && ev.l != nil && ev.dev.ok() }
func (m *Module) ok() bool     { return m != nil && m.l != nil && m.dev.ok() }
func (k *Kernel) ok() bool     { return k != nil && k.mod.ok() }

// misplaced describes, for an error, what (an object on device x) used
// with the object whose lives on ref: the runtimes when they differ
// (devices of two runtimes may have the same name), else the devices.
func misplaced(what string, x *Device, whose string, ref *Device) string {
	if x.rt != ref.rt {
		return what + " belongs to another runtime than the " + whose
	}
	return fmt.Sprintf("%s is on %v, the %s on %v", what, x, whose, ref)
}

// errInvalid is the error for a nil or zero-value object (what: "buffer",
// "stream", ...).
func errInvalid(op, what string) error {
	return errf(codeInvalidArgument, op, "nil or zero-value %s (not made by gpurt)", what)
}
