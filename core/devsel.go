// SPDX-License-Identifier: Apache-2.0

package core

import (
	"strconv"
	"strings"
)

// FindDevice returns the device that s names, in one of three forms:
//
//   - its index in the runtime: "0", "1", ...
//   - its UUID: "GPU-8f6b2c1e-...", as nvidia-smi -L prints it; a prefix
//     of at least "GPU-" and 8 hex digits that only one device has is
//     enough (as CUDA_VISIBLE_DEVICES accepts);
//   - its PCI bus id: "0000:3b:00.0", "3b:00.0" (domain 0) or nvidia-smi's
//     "00000000:3B:00.0"; case does not matter.
//
// A name that matches no device, or a UUID prefix that matches several,
// is an error wrapping ErrNotFound or ErrInvalidArgument that lists the
// devices. Safe for concurrent use; it reads the information of Open.
func (rt *Runtime) FindDevice(s string) (*Device, error) {
	const op = "find_device"
	if !rt.ok() {
		return nil, errInvalid(op, "runtime")
	}
	name := strings.TrimSpace(s)
	if name == "" {
		return nil, errf(codeInvalidArgument, op, "empty device name (an index, a GPU- UUID or a PCI bus id)")
	}
	if i, err := strconv.ParseUint(name, 10, 32); err == nil {
		if i >= uint64(len(rt.devices)) {
			return nil, errf(codeNotFound, op, "no device %d: the runtime has %d (%s)", i, len(rt.devices), rt.deviceList())
		}
		return rt.devices[i], nil
	}
	lower := strings.ToLower(name)
	if strings.HasPrefix(lower, "gpu-") || strings.HasPrefix(lower, "mig-") {
		if len(lower) < len("gpu-")+8 {
			return nil, errf(codeInvalidArgument, op, "UUID prefix %q is too short (GPU- and at least 8 hex digits)", name)
		}
		var found *Device
		for _, d := range rt.devices {
			if u := strings.ToLower(d.info.UUID); u != "" && strings.HasPrefix(u, lower) {
				if found != nil {
					return nil, errf(codeInvalidArgument, op, "UUID prefix %q matches %v and %v (%s)", name, found, d, rt.deviceList())
				}
				found = d
			}
		}
		if found == nil {
			return nil, errf(codeNotFound, op, "no device has UUID %q (%s)", name, rt.deviceList())
		}
		return found, nil
	}
	if want, ok := normPCI(lower); ok {
		for _, d := range rt.devices {
			if got, ok := normPCI(strings.ToLower(d.info.PCIBusID)); ok && got == want {
				return d, nil
			}
		}
		return nil, errf(codeNotFound, op, "no device has PCI bus id %q (%s)", name, rt.deviceList())
	}
	return nil, errf(codeInvalidArgument, op, "%q is neither a device index, a GPU- UUID nor a PCI bus id like 0000:3b:00.0", name)
}

// normPCI parses [domain:]bus:device.function (hex) into a canonical
// form; false when s is not one.
func normPCI(s string) (string, bool) {
	parts := strings.Split(s, ":")
	if len(parts) == 2 {
		parts = append([]string{"0"}, parts...)
	}
	if len(parts) != 3 {
		return "", false
	}
	df := strings.Split(parts[2], ".")
	if len(df) != 2 {
		return "", false
	}
	var v [4]uint64
	for i, f := range []string{parts[0], parts[1], df[0], df[1]} {
		n, err := strconv.ParseUint(f, 16, 32)
		if err != nil || f == "" {
			return "", false
		}
		v[i] = n
	}
	if v[1] > 0xff || v[2] > 0x1f || v[3] > 7 {
		return "", false
	}
	return strconv.FormatUint(v[0], 16) + ":" + strconv.FormatUint(v[1], 16) + ":" +
		strconv.FormatUint(v[2], 16) + "." + strconv.FormatUint(v[3], 16), true
}

// deviceList names the devices for error messages.
func (rt *Runtime) deviceList() string {
	var b strings.Builder
	for i, d := range rt.devices {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(strconv.Itoa(i))
		if d.info.UUID != "" {
			b.WriteString(" " + d.info.UUID)
		}
		if d.info.PCIBusID != "" {
			b.WriteString(" " + d.info.PCIBusID)
		}
	}
	if b.Len() == 0 {
		return "no devices"
	}
	return "devices: " + b.String()
}
