// SPDX-License-Identifier: Apache-2.0

package core

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/metrale/gpurt/internal/abi"
)

// Device is one device of a runtime. It lives as long as the runtime; its
// methods are safe for concurrent use.
type Device struct {
	rt    *Runtime
	index uint32
	info  DeviceInfo // as read at Open

	// staging for synchronous copies of Go slices (stage.go): idle
	// stagers, and one token per copy running (at most maxStagers)
	stagers     chan *stager
	stageTokens chan struct{}

	modMu   sync.Mutex
	modules map[string]*Module

	capturing atomic.Int32             // Stream.Captures in progress on the device (graph.go)
	pool      atomic.Pointer[poolSlot] // the memory pool (package core/pool), made at first use (pool.go)
}

// DeviceInfo describes a device.
type DeviceInfo struct {
	Index               int
	Name                string
	Vendor              string
	Arch                string // "sm_90a", "apple9", "cpu"
	PCIBusID            string // "" where none
	UUID                string // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"; "" where none (plugins before ABI 1.6)
	DriverVersion       string
	DriverVersionCode   uint32
	MemoryTotal         uint64 // bytes
	MemoryFree          uint64 // bytes, when the info was read
	ComputeMajor        uint32
	ComputeMinor        uint32
	MultiprocessorCount uint32
	MaxThreadsPerBlock  uint32
	WarpSize            uint32
	UnifiedMemory       bool // host and device share memory
	BF16                bool // bf16 arithmetic
	FP8                 bool // fp8 GEMM
}

func (d *Device) queryInfo() (DeviceInfo, error) {
	var in abi.DeviceInfo
	in.StructSize = abi.SizeofDeviceInfo
	if err := d.rt.p.DeviceInfo("device_info", d.rt.h, d.index, &in); err != nil {
		return DeviceInfo{}, err
	}
	return DeviceInfo{
		Index: int(d.index), Name: abi.CString(in.Name[:]), Vendor: abi.CString(in.Vendor[:]),
		Arch: abi.CString(in.Arch[:]), PCIBusID: abi.CString(in.PCIBusID[:]), UUID: abi.CString(in.UUID[:]),
		DriverVersion: abi.CString(in.DriverVersion[:]), DriverVersionCode: in.DriverVersionCode,
		MemoryTotal: in.MemoryTotal, MemoryFree: in.MemoryFree,
		ComputeMajor: in.ComputeMajor, ComputeMinor: in.ComputeMinor,
		MultiprocessorCount: in.MultiprocessorCount, MaxThreadsPerBlock: in.MaxThreadsPerBlock,
		WarpSize:      in.WarpSize,
		UnifiedMemory: in.Flags&abi.DeviceUnifiedMemory != 0,
		BF16:          in.Flags&abi.DeviceBF16 != 0,
		FP8:           in.Flags&abi.DeviceFP8 != 0,
	}, nil
}

// Runtime is the device's runtime.
func (d *Device) Runtime() *Runtime {
	if d == nil {
		return nil
	}
	return d.rt
}

// Index is the device's number in its runtime (-1 for a nil device).
func (d *Device) Index() int {
	if d == nil {
		return -1
	}
	return int(d.index)
}

// Info returns the device's description as read at Open (MemoryFree from
// then; inspect.DeviceInfo reads it again).
func (d *Device) Info() DeviceInfo {
	if d == nil {
		return DeviceInfo{}
	}
	return d.info
}

// refresh reads the device's description now (inspect.DeviceInfo).
func (d *Device) refresh() (DeviceInfo, error) {
	if err := d.enter("device_info"); err != nil {
		return DeviceInfo{}, err
	}
	defer d.rt.exit()
	return d.queryInfo()
}

func (d *Device) String() string {
	if d == nil {
		return "nil device"
	}
	return fmt.Sprintf("device %d (%s)", d.index, d.info.Name)
}

// Synchronize waits for all work of the runtime on this device (every
// stream), then destroys GEMM plans the op cache evicted before the call.
func (d *Device) Synchronize() error {
	if err := d.enter("device_synchronize"); err != nil {
		return err
	}
	defer d.rt.exit()
	if err := d.capturingErr("device_synchronize"); err != nil {
		return err
	}
	dead := d.rt.plans.takeDead(d)
	err := d.sync()
	if err == nil || deviceLost(err) {
		d.rt.plans.destroy(dead)
	} else {
		d.rt.plans.giveBack(dead)
	}
	return err
}

// enter begins a use of the device's runtime (see Runtime.enter), after
// checking for a nil or zero-value device.
func (d *Device) enter(op string) error {
	if !d.ok() {
		return errInvalid(op, "device")
	}
	return d.rt.enter(op)
}

// sync is device_synchronize; the caller has entered the runtime.
func (d *Device) sync() error {
	return d.rt.metrics.end(opDeviceSynchronize, d.rt.metrics.begin(), d.rt.p.DeviceSynchronize("device_synchronize", d.rt.h, d.index))
}
