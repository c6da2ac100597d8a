// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"github.com/metrale/gpurt/core"
)

// Example shows the shape of a program on gpurt: open a runtime on the best
// backend, allocate, copy, launch a built-in kernel and wait. (Compiled, not
// run: it needs a plugin beside the test binary.)
func Example() {
	run := func(data []byte, n int) error {
		rt, err := core.Open(core.Config{}) // probe, choose, create a runtime
		if err != nil {
			return err // names every candidate's reason and the folders searched
		}
		defer rt.Close()
		dev, err := rt.Device(0)
		if err != nil {
			return err
		}
		buf, err := dev.Alloc(4 * n)
		if err != nil {
			return err // out of memory names the size and the free bytes
		}
		defer buf.Free()
		if err := core.CopyFromHost(buf, data); err != nil {
			return err
		}
		s, err := dev.NewStream()
		if err != nil {
			return err
		}
		defer s.Close()
		mod, err := dev.BuiltinModule()
		if err != nil {
			return err
		}
		fill, err := mod.Kernel("fill_f32")
		if err != nil {
			return err
		}
		if err := s.Launch(fill, core.Grid1D(n, 256), core.ArgBuffer(buf), core.ArgScalar[float32](1.5), core.ArgScalar[uint64](uint64(n))); err != nil {
			return err
		}
		return s.Synchronize()
	}
	_ = run
}
