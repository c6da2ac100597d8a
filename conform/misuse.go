// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"errors"
	"fmt"
	"strings"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
)

// misuse is one thing a user can get wrong and the error it must give.
type misuse struct {
	name string
	run  func() error
	want error
}

func runMisuse(cases []misuse) error {
	var bad []string
	for _, c := range cases {
		err := c.run()
		if c.want == nil { // any error
			if err == nil {
				bad = append(bad, c.name+": no error")
			}
			continue
		}
		if err := expect(c.name, err, c.want); err != nil {
			bad = append(bad, err.Error())
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

func misuseChecks() []check {
	return []check{
		{"misuse/freed_buffer", func(e *env) error {
			b, err := e.dev.Alloc(256)
			if err != nil {
				return err
			}
			v, _ := b.View(16, 16)
			if err := b.Free(); err != nil {
				return err
			}
			return withStream(e, func(s *core.Stream) error {
				k, err := kernel(e.dev, "fill_f32")
				if err != nil {
					return err
				}
				hb, err := e.rt.AllocHostFromHeap(16)
				if err != nil {
					return err
				}
				defer hb.Free()
				return runMisuse([]misuse{
					{"double free", b.Free, core.ErrFreed},
					{"copy to a freed buffer", func() error { return core.CopyFromHost(b, []byte{1}) }, core.ErrFreed},
					{"copy from a freed view", func() error { return core.CopyToHost(make([]byte, 4), v) }, core.ErrFreed},
					{"memset of a freed buffer", func() error { return core.Memset(v, 1) }, core.ErrFreed},
					{"device copy from a freed buffer", func() error { return s.CopyDevice(v, v) }, core.ErrFreed},
					{"async copy to a freed buffer", func() error { return s.CopyFromPinned(v, hb) }, core.ErrFreed},
					{"launch with a freed buffer", func() error {
						return s.Launch(k, core.Grid1D(4, 4), core.ArgBuffer(v), core.ArgScalar[float32](1), core.ArgScalar[uint64](4))
					}, core.ErrFreed},
				})
			})
		}},
		{"misuse/out_of_range", func(e *env) error {
			b, s, done, err := bufferAndStream(e, 100)
			if err != nil {
				return err
			}
			defer done()
			v, _ := b.View(50, 50)
			hb, err := e.rt.AllocHost(64)
			if err != nil {
				return err
			}
			defer hb.Free()
			return runMisuse([]misuse{
				{"view past the end", func() error { return errOf(b.View(99, 2)) }, core.ErrOutOfRange},
				{"negative view", func() error { return errOf(b.View(-1, 2)) }, core.ErrOutOfRange},
				{"pinned view past the end", func() error { return errOf(hb.View(60, 5)) }, core.ErrOutOfRange},
				{"copy into a short view", func() error { return core.CopyFromHost(v, make([]byte, 51)) }, core.ErrOutOfRange},
				{"large copy into a short view", func() error { return core.CopyFromHost(v, make([]byte, 1<<20)) }, core.ErrOutOfRange},
				{"copy out of a short view", func() error { return core.CopyToHost(make([]byte, 51), v) }, core.ErrOutOfRange},
				{"device copy into a short view", func() error { return core.Copy(v, b) }, core.ErrOutOfRange},
				{"async copy into a short view", func() error { return s.CopyFromPinned(v, hb) }, core.ErrOutOfRange},
				{"async copy out of a short view", func() error { return s.CopyToPinned(hb, v) }, core.ErrOutOfRange},
				{"unaligned 4-byte memset", func() error { return core.Memset32(v, 0) }, core.ErrInvalidArgument},
				{"odd 2-byte memset", func() error { w, _ := b.View(1, 2); return core.Memset16(w, 0) }, core.ErrInvalidArgument},
			})
		}},
		{"misuse/launch_arguments", func(e *env) error {
			b, s, k, done, err := fillSetup(e)
			if err != nil {
				return err
			}
			defer done()
			g := core.Grid1D(16, 16)
			return runMisuse([]misuse{
				{"too few", func() error { return s.Launch(k, g, core.ArgBuffer(b), core.ArgScalar[float32](1)) }, core.ErrInvalidArgument},
				{"too many", func() error {
					return s.Launch(k, g, core.ArgBuffer(b), core.ArgScalar[float32](1), core.ArgScalar[uint64](16), core.ArgScalar[uint64](1))
				}, core.ErrInvalidArgument},
				{"none", func() error { return s.Launch(k, g) }, core.ErrInvalidArgument},
				{"f64 for f32", func() error {
					return s.Launch(k, g, core.ArgBuffer(b), core.ArgScalar[float64](1), core.ArgScalar[uint64](16))
				}, core.ErrInvalidArgument},
				{"u32 for u64", func() error {
					return s.Launch(k, g, core.ArgBuffer(b), core.ArgScalar[float32](1), core.ArgScalar[uint32](16))
				}, core.ErrInvalidArgument},
				{"scalar for a buffer", func() error {
					return s.Launch(k, g, core.ArgScalar[uint64](0), core.ArgScalar[float32](1), core.ArgScalar[uint64](16))
				}, core.ErrInvalidArgument},
				{"buffer for a scalar", func() error { return s.Launch(k, g, core.ArgBuffer(b), core.ArgBuffer(b), core.ArgScalar[uint64](16)) }, core.ErrInvalidArgument},
				{"nil buffer", func() error {
					return s.Launch(k, g, core.ArgBuffer(nil), core.ArgScalar[float32](1), core.ArgScalar[uint64](16))
				}, core.ErrInvalidArgument},
				{"zero Arg", func() error {
					return s.Launch(k, g, core.Arg{}, core.ArgScalar[float32](1), core.ArgScalar[uint64](16))
				}, core.ErrInvalidArgument},
				{"nil kernel", func() error { return s.Launch(nil, g) }, core.ErrInvalidArgument},
			})
		}},
		{"misuse/other_device", func(e *env) error {
			if len(e.rt.Devices()) < 2 {
				return skip("one device")
			}
			d1, _ := e.rt.Device(1)
			b0, err := e.dev.Alloc(64)
			if err != nil {
				return err
			}
			defer b0.Free()
			b1, err := d1.Alloc(64)
			if err != nil {
				return err
			}
			defer b1.Free()
			return withStream(e, func(s0 *core.Stream) error {
				ev1, err := d1.NewEvent(false)
				if err != nil {
					return err
				}
				defer ev1.Close()
				k, err := kernel(e.dev, "fill_f32")
				if err != nil {
					return err
				}
				return runMisuse([]misuse{
					{"launch with a buffer of another device", func() error { return fill16(s0, k, b1) }, core.ErrInvalidArgument},
					// (a copy between b0 and b1 is a peer copy, checked by peer/copy)
					{"stream copy with both buffers on another device", func() error {
						v, err := b1.View(0, 32)
						if err != nil {
							return err
						}
						return s0.CopyDevice(b1, v)
					}, core.ErrInvalidArgument},
					{"stream memset of another device", func() error { return s0.Memset(b1, 0) }, core.ErrInvalidArgument},
					{"event of another device recorded", func() error { return ev1.Record(s0) }, core.ErrInvalidArgument},
					{"gemm with an operand of another device", func() error {
						d := core.GemmDesc{AType: core.F32, BType: core.F32, DType: core.F32, M: 2, N: 2, K: 2}
						return s0.Gemm(d, core.GemmOperands{A: b0, B: b1, D: b0, Alpha: 1})
					}, core.ErrInvalidArgument},
				})
			})
		}},
		{"misuse/other_runtime", func(e *env) error {
			if e.opts.OpenRuntime == nil {
				return skip("no way to open a second runtime")
			}
			rt2, err := e.opts.OpenRuntime()
			if err != nil {
				return fmt.Errorf("opening a second runtime: %w", err)
			}
			defer rt2.Close()
			d2, _ := rt2.Device(0)
			foreign, err := d2.Alloc(64)
			if err != nil {
				return err
			}
			ev2, err := d2.NewEvent(false)
			if err != nil {
				return err
			}
			b, s, k, done, err := fillSetup(e)
			if err != nil {
				return err
			}
			defer done()
			return runMisuse([]misuse{
				{"launch with a buffer of another runtime", func() error { return fill16(s, k, foreign) }, core.ErrInvalidArgument},
				{"copy between runtimes", func() error { return core.Copy(b, foreign) }, core.ErrInvalidArgument},
				{"stream copy from another runtime", func() error { return s.CopyDevice(b, foreign) }, core.ErrInvalidArgument},
				{"wait on an event of another runtime", func() error { return s.WaitEvent(ev2) }, core.ErrInvalidArgument},
			})
		}},
		{"misuse/closed", func(e *env) error {
			s, err := e.dev.NewStream()
			if err != nil {
				return err
			}
			if err := s.Close(); err != nil {
				return err
			}
			ev, err := e.dev.NewEvent(true)
			if err != nil {
				return err
			}
			if err := ev.Close(); err != nil {
				return err
			}
			b, err := e.dev.Alloc(64)
			if err != nil {
				return err
			}
			defer b.Free()
			cases := []misuse{
				{"closed stream synchronize", s.Synchronize, core.ErrClosed},
				{"closed stream close", s.Close, core.ErrClosed},
				{"closed stream memset", func() error { return s.Memset(b, 0) }, core.ErrClosed},
				{"closed event query", func() error { return errOf(ev.Query()) }, core.ErrClosed},
				{"closed event close", ev.Close, core.ErrClosed},
			}
			if e.opts.OpenRuntime != nil {
				rt2, err := e.opts.OpenRuntime()
				if err != nil {
					return fmt.Errorf("opening a second runtime: %w", err)
				}
				d2, _ := rt2.Device(0)
				b2, err2 := d2.Alloc(64)
				s2, err3 := d2.NewStream()
				hb2, err4 := rt2.AllocHost(64)
				m2, err5 := d2.BuiltinModule()
				if err := firstErr(err2, err3, err4, err5, rt2.Close()); err != nil {
					return err
				}
				cases = append(cases,
					misuse{"closed runtime close", rt2.Close, core.ErrClosed},
					misuse{"closed runtime alloc", func() error { return errOf(d2.Alloc(1)) }, core.ErrClosed},
					misuse{"closed runtime free", b2.Free, core.ErrClosed},
					misuse{"closed runtime copy", func() error { return core.CopyFromHost(b2, []byte{1}) }, core.ErrClosed},
					misuse{"closed runtime stream", s2.Synchronize, core.ErrClosed},
					misuse{"closed runtime host free", hb2.Free, core.ErrClosed},
					misuse{"closed runtime stats", func() error { return errOf(inspect.Stats(rt2)) }, core.ErrClosed},
					misuse{"closed runtime kernel", func() error { return errOf(m2.Kernel("fill_f32")) }, core.ErrClosed},
				)
			}
			return runMisuse(cases)
		}},
		{"misuse/unloaded_module", func(e *env) error {
			m, err := e.dev.LoadModule("conform_builtin_copy", core.ModuleBuiltin, nil)
			if err != nil {
				return err
			}
			k, err := m.Kernel("fill_f32")
			if err != nil {
				m.Unload()
				return err
			}
			if err := m.Unload(); err != nil {
				return err
			}
			b, s, done, err := bufferAndStream(e, 64)
			if err != nil {
				return err
			}
			defer done()
			return runMisuse([]misuse{
				{"launch of an unloaded module's kernel", func() error { return fill16(s, k, b) }, core.ErrClosed},
				{"second unload", m.Unload, core.ErrClosed},
				{"garbage module", func() error {
					return errOf(e.dev.LoadModule("conform_garbage", core.ModulePTX, []byte("not a module")))
				}, nil},
			})
		}},
		{"misuse/sizes", func(e *env) error {
			b, err := e.dev.Alloc(64)
			if err != nil {
				return err
			}
			defer b.Free()
			total := e.dev.Info().MemoryTotal
			cases := []misuse{
				{"alloc of 0", func() error { return errOf(e.dev.Alloc(0)) }, core.ErrInvalidArgument},
				{"alloc of -1", func() error { return errOf(e.dev.Alloc(-1)) }, core.ErrInvalidArgument},
				{"host alloc of 0", func() error { return errOf(e.rt.AllocHost(0)) }, core.ErrInvalidArgument},
				{"heap alloc of 0", func() error { return errOf(e.rt.AllocHostFromHeap(0)) }, core.ErrInvalidArgument},
				{"alloc beyond the device", func() error { return errOf(e.dev.Alloc(int(total) + 1)) }, core.ErrOutOfMemory},
				{"alloc of 2^62", func() error { return errOf(e.dev.Alloc(1 << 62)) }, core.ErrOutOfMemory},
				{"nil source slice", func() error { return core.CopyFromHost(b, nil) }, core.ErrInvalidArgument},
				{"nil destination slice", func() error { return core.CopyToHost(nil, b) }, core.ErrInvalidArgument},
				{"nil region", func() error { return core.CopyFromHost(nil, []byte{1}) }, core.ErrInvalidArgument},
				{"nil buffer", func() error { return core.Memset((*core.Buffer)(nil), 0) }, core.ErrInvalidArgument},
				{"zero View", func() error { return core.Memset(core.View{}, 0) }, core.ErrInvalidArgument},
			}
			if err := runMisuse(cases); err != nil {
				return err
			}
			_, err = e.dev.Alloc(int(total) + 1)
			if !strings.Contains(err.Error(), fmt.Sprint(total+1)) || !strings.Contains(err.Error(), "free") {
				return fmt.Errorf("out-of-memory error does not name the size asked for and the memory free: %v", err)
			}
			empty := []byte{}
			return firstErr(core.CopyFromHost(b, empty), core.CopyToHost(empty, b))
		}},
	}
}

// fill16 launches fill_f32 (k) on s over 16 f32 values of r.
func fill16(s *core.Stream, k *core.Kernel, r core.Region) error {
	return s.Launch(k, core.Grid1D(16, 16), core.ArgBuffer(r), core.ArgScalar[float32](1), core.ArgScalar[uint64](16))
}

// fillSetup is bufferAndStream's 64 bytes and stream, and fill_f32.
func fillSetup(e *env) (*core.Buffer, *core.Stream, *core.Kernel, func(), error) {
	k, err := kernel(e.dev, "fill_f32")
	if err != nil {
		return nil, nil, nil, nil, err
	}
	b, s, done, err := bufferAndStream(e, 64)
	return b, s, k, done, err
}

// kernel returns a built-in kernel of d.
func kernel(d *core.Device, name string) (*core.Kernel, error) {
	m, err := d.BuiltinModule()
	if err != nil {
		return nil, err
	}
	return m.Kernel(name)
}
