// SPDX-License-Identifier: Apache-2.0

//go:build (linux || darwin) && (amd64 || arm64)

package loader

import (
	"fmt"
	"strings"

	"github.com/ebitengine/purego"
	"github.com/hashicorp/go-hclog"

	"github.com/metrale/gpurt/core/internal/bind"
	"github.com/metrale/gpurt/internal/abi"
)

// platformOK: this platform can dlopen and call plugins.
const platformOK = bind.Supported

var errorCodeNames = map[int32]string{
	abi.OK: "ok", abi.ErrInvalidArgument: "invalid argument", abi.ErrInvalidHandle: "invalid handle",
	abi.ErrOutOfRange: "out of range", abi.ErrOutOfMemory: "out of memory", abi.ErrNotFound: "not found",
	abi.ErrUnsupported: "unsupported", abi.ErrUnavailable: "unavailable", abi.ErrDeviceLost: "device lost",
	abi.ErrLaunchFailed: "launch failed", abi.ErrNotReady: "not ready", abi.ErrABIMismatch: "abi mismatch",
	abi.ErrInternal: "internal", abi.ErrFailedPrecondition: "failed precondition",
}

var probeReasonNames = map[int32]string{
	abi.ProbeOK: "ok", abi.ProbeDriverMissing: "driver missing", abi.ProbeNoDevice: "no device",
	abi.ProbeDriverTooOld: "driver too old", abi.ProbePlatformUnsupported: "platform unsupported",
	abi.ProbeInitFailed: "init failed", abi.ProbeDisabled: "disabled",
}

func codeName(m map[int32]string, c int32) string {
	if s, ok := m[c]; ok {
		return s
	}
	return fmt.Sprintf("code %d", c)
}

// openPlugin dlopens a checked file, negotiates and binds it. On success
// c.plugin is set; otherwise c is failed.
func openPlugin(c *cand, log hclog.Logger) {
	h, r, err := dlopenVerified(c, func(name string) (uintptr, error) {
		return purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL)
	})
	if r != nil {
		c.fail(r.reason, r.detail)
		return
	}
	if err != nil {
		detail := "dlopen: " + err.Error() + "; needs: " + depsString(c.deps)
		if miss := missingDeps(c.deps); len(miss) > 0 {
			c.fail("missing dependency "+strings.Join(miss, ", ")+" (not in the plugin's RUNPATH, ld.so.cache or the system library folders)", detail)
		} else {
			c.fail("dlopen failed", detail)
		}
		return
	}
	// Mapped now, and never unmapped: later searches must find the same file.
	rememberLoaded(c.real, c.ident)
	sym, err := purego.Dlsym(h, abi.EntrySymbol)
	if err != nil || sym == 0 {
		d := ""
		if err != nil {
			d = err.Error()
		}
		c.fail("no entry symbol "+abi.EntrySymbol+" (not a gpurt plugin)", d)
		return
	}
	var args abi.NegotiateArgs
	args.StructSize = abi.SizeofNegotiateArgs
	args.HostABIMajor, args.HostABIMinor = abi.Major, abi.Minor
	rc := bind.Negotiate(sym, &args)
	msg := abi.CString(args.Message[:])
	if args.PluginABIMajor != 0 || args.PluginABIMinor != 0 {
		c.ABI = fmt.Sprintf("%d.%d", args.PluginABIMajor, args.PluginABIMinor)
	}
	switch {
	case rc == abi.ErrABIMismatch || (rc == abi.OK && args.PluginABIMajor != abi.Major):
		c.fail(fmt.Sprintf("ABI major mismatch: the plugin speaks %d.%d, this core speaks %d.%d",
			args.PluginABIMajor, args.PluginABIMinor, abi.Major, abi.Minor), msg)
	case rc != abi.OK:
		r := fmt.Sprintf("entry %s returned an error (%s)", abi.EntrySymbol, codeName(errorCodeNames, rc))
		if msg != "" {
			r += ": " + msg
		}
		c.fail(r, "")
	case args.API == 0:
		c.fail("entry "+abi.EntrySymbol+" returned no function table", msg)
	}
	if c.done {
		return
	}
	p, err := bind.Bind(args.API, c.Path)
	if err != nil {
		c.fail("function table rejected: "+err.Error(), "")
		return
	}
	if p.Major != abi.Major {
		c.fail(fmt.Sprintf("ABI major mismatch: the function table says %d.%d, this core speaks %d.%d", p.Major, p.Minor, abi.Major, abi.Minor), "")
		return
	}
	c.ABI = fmt.Sprintf("%d.%d", p.Major, p.Minor)
	c.plugin = p
	log.Debug("loaded", "path", c.Path, "backend", p.Backend, "version", p.Version, "abi", c.ABI, "priority", p.Priority)
}

// entryAddress is the address of a loaded library's entry symbol.
func entryAddress(h uintptr) (uintptr, error) {
	return purego.Dlsym(h, abi.EntrySymbol)
}

// probePlugin asks a bound plugin whether it can run here; c ends
// available (not done), skipped (unavailable) or failed (probe error).
func probePlugin(c *cand, log hclog.Logger) {
	p := c.plugin
	devs := make([]abi.DeviceInfo, probeCapacity)
	for i := range devs {
		devs[i].StructSize = abi.SizeofDeviceInfo
	}
	var a abi.ProbeArgs
	a.StructSize = abi.SizeofProbeArgs
	a.Devices = &devs[0]
	a.DeviceCapacity = uint32(len(devs))
	err := p.Probe("probe", &a)
	if err != nil {
		c.fail("probe returned an error: "+err.Error(), "")
		return
	}
	n := min(int(a.DeviceCount), len(devs))
	c.Devices = make([]Device, 0, n)
	for i := 0; i < n; i++ {
		d := &devs[i]
		c.Devices = append(c.Devices, Device{
			Index: i, Name: abi.CString(d.Name[:]), Vendor: abi.CString(d.Vendor[:]),
			Arch: abi.CString(d.Arch[:]), PCIBusID: abi.CString(d.PCIBusID[:]),
			DriverVersion: abi.CString(d.DriverVersion[:]),
			MemoryTotal:   d.MemoryTotal, MemoryFree: d.MemoryFree,
			ComputeMajor: int(d.ComputeMajor), ComputeMinor: int(d.ComputeMinor),
			MultiprocessorCount: int(d.MultiprocessorCount), Flags: d.Flags,
		})
	}
	c.Score = a.Score
	reason := abi.CString(a.Reason[:])
	if a.Available == 0 {
		code := codeName(probeReasonNames, a.ReasonCode)
		r := "probe: unavailable (" + code + ")"
		switch {
		case strings.HasPrefix(reason, code+":"): // the plugin's line already names the code
			r = "probe: unavailable: " + reason
		case reason != "":
			r += ": " + reason
		}
		c.skip(r)
		return
	}
	c.Detail = fmt.Sprintf("probe: %s; %d device(s)", orDash(reason), a.DeviceCount)
}
