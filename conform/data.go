// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"bytes"
	"fmt"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/inspect"
)

func dataChecks() []check {
	return []check{
		{"data/roundtrip_sizes", func(e *env) error {
			for _, n := range []int{0, 1, 3, 4095, 4096, 65535, 65537, 1<<20 + 7} {
				for _, off := range []int{0, 1, 3, 255} {
					if err := roundTrip(e, n, off); err != nil {
						return err
					}
				}
			}
			return nil
		}},
		{"data/roundtrip_large", func(e *env) error {
			n := 32 << 20
			if !e.opts.Quick {
				n = largeSize(e.dev)
			}
			return roundTrip(e, n, 7)
		}},
		{"data/pinned_async", func(e *env) error {
			return withStream(e, func(s *core.Stream) error {
				for _, n := range []int{1, 3, 4095, 65537, 3<<20 + 1} {
					src, err := e.rt.AllocHostFromHeap(n)
					if err != nil {
						return err
					}
					dst, err := e.rt.AllocHost(n + 16)
					if err != nil {
						src.Free()
						return err
					}
					err = func() error {
						data := randomBytes(e.rng, n)
						copy(src.Bytes(), data)
						b, err := e.dev.Alloc(n + 300)
						if err != nil {
							return err
						}
						defer b.Free()
						v, _ := b.View(299, n)
						dv, _ := dst.View(5, n)
						poison(dst.Bytes())
						if err := firstErr(s.CopyFromPinned(v, src), s.CopyToPinned(dv, v), s.Synchronize()); err != nil {
							return err
						}
						if !bytes.Equal(dv.Bytes(), data) {
							return fmt.Errorf("%d bytes through pinned memory came back different", n)
						}
						if dst.Bytes()[4] != 0xff || dst.Bytes()[5+n] != 0xff {
							return fmt.Errorf("%d-byte async copy wrote outside its pinned view", n)
						}
						return nil
					}()
					err = firstErr(err, src.Free(), dst.Free())
					if err != nil {
						return err
					}
				}
				return nil
			})
		}},
		{"data/memset", func(e *env) error {
			const n = 4099
			b, s, done, err := bufferAndStream(e, n)
			if err != nil {
				return err
			}
			defer done()
			want := make([]byte, n)
			for i := range want {
				want[i] = 0x5a
			}
			v1, _ := b.View(7, 100)
			v2, _ := b.View(200, 64)
			v4, _ := b.View(400, 1000)
			err = firstErr(core.Memset(b, 0x5a), core.Memset(v1, 0xc3), core.Memset16(v2, 0xbeef), s.Memset32(v4, 0x01020304), s.Synchronize())
			if err != nil {
				return err
			}
			for i := 7; i < 107; i++ {
				want[i] = 0xc3
			}
			for i := 200; i < 264; i += 2 {
				want[i], want[i+1] = 0xef, 0xbe
			}
			for i := 400; i < 1400; i += 4 {
				copy(want[i:], []byte{4, 3, 2, 1})
			}
			got := make([]byte, n)
			if err := core.CopyToHost(got, b); err != nil {
				return err
			}
			if i := firstDiff(got, want); i >= 0 {
				return fmt.Errorf("byte %d is %#x, want %#x", i, got[i], want[i])
			}
			return nil
		}},
		{"data/device_copy", func(e *env) error {
			const n = 3<<20 + 5
			a, err := e.dev.Alloc(n)
			if err != nil {
				return err
			}
			defer a.Free()
			b, s, done, err := bufferAndStream(e, n+8)
			if err != nil {
				return err
			}
			defer done()
			data := randomBytes(e.rng, n)
			if err := core.CopyFromHost(a, data); err != nil {
				return err
			}
			if err := core.Memset(b, 0xff); err != nil {
				return err
			}
			bv, _ := b.View(3, n)
			av, _ := a.View(1, n-1)
			bv2, _ := b.View(3, n-1)
			if err := firstErr(core.Copy(bv, a), s.CopyDevice(bv2, av), s.Synchronize()); err != nil {
				return err
			}
			got := make([]byte, n+8)
			if err := core.CopyToHost(got, b); err != nil {
				return err
			}
			want := append(append([]byte{0xff, 0xff, 0xff}, data[1:]...), data[n-1], 0xff, 0xff, 0xff, 0xff, 0xff)
			if i := firstDiff(got, want); i >= 0 {
				return fmt.Errorf("byte %d is %#x, want %#x", i, got[i], want[i])
			}
			return nil
		}},
	}
}

// largeSize sizes the large round trip by device memory: 256 MiB on the
// mock or small devices, up to 1/4 of free memory and at most 4 GiB on a
// GPU, at least 1 GiB where it fits.
func largeSize(d *core.Device) int {
	in, err := inspect.DeviceInfo(d)
	if err != nil || in.Arch == "cpu" || in.MemoryFree < 8<<30 {
		return 256 << 20
	}
	n := in.MemoryFree / 4
	if n > 4<<30 {
		n = 4 << 30
	}
	return int(n)
}

func roundTrip(e *env, n, off int) error {
	b, err := e.dev.Alloc(n + off + 64)
	if err != nil {
		return err
	}
	defer b.Free()
	if err := core.Memset(b, 0xff); err != nil {
		return err
	}
	v, err := b.View(off, n)
	if err != nil {
		return err
	}
	data := randomBytes(e.rng, n)
	if err := core.CopyFromHost(v, data); err != nil {
		return fmt.Errorf("%d bytes at offset %d up: %w", n, off, err)
	}
	got := make([]byte, n+off+64)
	if err := core.CopyToHost(got, b); err != nil {
		return fmt.Errorf("%d bytes at offset %d down: %w", n, off, err)
	}
	for i := 0; i < off; i++ {
		if got[i] != 0xff {
			return fmt.Errorf("%d bytes at offset %d: byte %d before the view was overwritten", n, off, i)
		}
	}
	for i := off + n; i < len(got); i++ {
		if got[i] != 0xff {
			return fmt.Errorf("%d bytes at offset %d: byte %d after the view was overwritten", n, off, i)
		}
	}
	if i := firstDiff(got[off:off+n], data); i >= 0 {
		return fmt.Errorf("%d bytes at offset %d: byte %d is %#x, want %#x", n, off, i, got[off+i], data[i])
	}
	// and down through a view, into a slice exactly its size
	got2 := make([]byte, n)
	if err := core.CopyToHost(got2, v); err != nil {
		return err
	}
	if i := firstDiff(got2, data); i >= 0 {
		return fmt.Errorf("%d bytes at offset %d read through the view: byte %d differs", n, off, i)
	}
	return nil
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

func poison(b []byte) {
	for i := range b {
		b[i] = 0xff
	}
}
