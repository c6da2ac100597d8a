// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/internal/abi"
)

// apiChecks: every API function once, on its happy path.
func apiChecks() []check {
	return []check{
		{"api/devices", func(e *env) error {
			if len(e.rt.Devices()) < 1 {
				return errors.New("no devices")
			}
			for _, d := range e.rt.Devices() {
				in, err := inspect.DeviceInfo(d)
				if err != nil {
					return err
				}
				if in.Name == "" || in.MemoryTotal == 0 || in.MemoryFree > in.MemoryTotal {
					return fmt.Errorf("device %d: implausible info %+v", d.Index(), in)
				}
			}
			return nil
		}},
		{"api/stats_and_control", func(e *env) error {
			if _, err := inspect.Stats(e.rt); err != nil {
				return err
			}
			return expect("control of an unknown key", inspect.Control(e.rt, "gpurt_conform_no_such_key", 1), core.ErrUnsupported)
		}},
		{"api/buffer_views", func(e *env) error {
			b, err := e.dev.Alloc(1000)
			if err != nil {
				return err
			}
			defer b.Free()
			if b.Len() != 1000 {
				return fmt.Errorf("size %d", b.Len())
			}
			v, err := b.View(10, 100)
			if err != nil {
				return err
			}
			w, err := v.Sub(5, 10)
			if err != nil {
				return err
			}
			if w.Offset() != 15 || w.Len() != 10 || w.Buffer() != b {
				return fmt.Errorf("sub-view %v", w)
			}
			return expect("sub-view beyond its view", errOf(v.Sub(95, 10)), core.ErrOutOfRange)
		}},
		{"api/host_buffer", func(e *env) error {
			hb, err := e.rt.AllocHost(4097)
			if err != nil {
				return err
			}
			data := randomBytes(e.rng, 4097)
			copy(hb.Bytes(), data)
			if !bytes.Equal(hb.Bytes(), data) {
				return errors.New("pinned memory does not keep what was written")
			}
			if err := hb.Free(); err != nil {
				return err
			}
			return expect("second free", hb.Free(), core.ErrFreed)
		}},
		{"api/host_heap", func(e *env) error {
			hh := e.rt
			before := inspect.HostHeap(hh)
			var sl []*core.HostBuffer
			for i := 0; i < 64; i++ {
				s, err := hh.AllocHostFromHeap(1 + e.rng.IntN(300000))
				if err != nil {
					return err
				}
				b := s.Bytes()
				b[0], b[len(b)-1] = byte(i), byte(i)
				sl = append(sl, s)
			}
			for i, s := range sl {
				b := s.Bytes()
				if b[0] != byte(i) || b[len(b)-1] != byte(i) {
					return fmt.Errorf("slice %d overlaps another", i)
				}
			}
			st := inspect.HostHeap(hh)
			if st.Live != before.Live+64 || st.InUse <= before.InUse || st.Peak < st.InUse {
				return fmt.Errorf("stats %+v after 64 allocations (before %+v)", st, before)
			}
			for i := len(sl) - 1; i >= 0; i -= 2 {
				if err := sl[i].Free(); err != nil {
					return err
				}
			}
			for i := len(sl) - 2; i >= 0; i -= 2 {
				if err := sl[i].Free(); err != nil {
					return err
				}
			}
			if st := inspect.HostHeap(hh); st.InUse != before.InUse || st.Live != before.Live {
				return fmt.Errorf("stats %+v after freeing everything (before %+v)", st, before)
			}
			return expect("second free", sl[0].Free(), core.ErrFreed)
		}},
		{"api/streams_and_events", func(e *env) error {
			s, err := e.dev.NewStream()
			if err != nil {
				return err
			}
			ev, err := e.dev.NewEvent(false)
			if err != nil {
				s.Close()
				return err
			}
			done, qerr := ev.Query() // never recorded: complete
			err = firstErr(qerr, ev.Record(s), s.WaitEvent(ev), ev.Synchronize(), s.Synchronize())
			idle, serr := s.Query()
			err = firstErr(err, serr, ev.Close(), s.Close())
			if err == nil && (!done || !idle) {
				err = fmt.Errorf("an idle stream or unrecorded event is not complete (event %v, stream %v)", done, idle)
			}
			return err
		}},
		{"api/modules", func(e *env) error {
			m, err := e.dev.BuiltinModule()
			if err != nil {
				return err
			}
			m2, err := e.dev.Module(core.BuiltinModuleName)
			if err != nil || m2 != m {
				return fmt.Errorf("registry lookup: %v", err)
			}
			// every built-in kernel, with exactly the header's parameters
			for _, bk := range abi.BuiltinKernels {
				kn, err := m.Kernel(bk.Name)
				if errors.Is(err, core.ErrNotFound) && slices.Contains(after18Ops, bk.Op) {
					continue // a plugin may lack them (gpurt.h)
				}
				if err != nil {
					return err
				}
				ps := inspect.Kernel(kn).Params
				if len(ps) != len(bk.Params) {
					return fmt.Errorf("%s: %d parameters, want %d", bk.Name, len(ps), len(bk.Params))
				}
				for i, p := range ps {
					if want := abi.ArgKindNames[bk.Params[i]]; p.Kind != want {
						return fmt.Errorf("%s: parameter %d is %v, want %v", bk.Name, i, p.Kind, want)
					}
				}
			}
			if err := expect("unknown kernel", errOf(m.Kernel("gpurt_no_such_kernel")), core.ErrNotFound); err != nil {
				return err
			}
			return expect("unknown module", errOf(e.dev.Module("gpurt_no_such_module")), core.ErrNotFound)
		}},
	}
}

func errOf[T any](_ T, err error) error { return err }
