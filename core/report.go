// SPDX-License-Identifier: Apache-2.0

package core

import (
	"github.com/metrale/gpurt/core/internal/loader"
)

// Report is the loader's account of one search for a plugin: where it
// looked, every plugin file it found and what became of it, and the one
// it selected. Probe returns it, Runtime.Report keeps the one of Open, and
// the *Error of a failed Open or Probe carries it. Its JSON form is what
// `gpurt probe --json` prints.
type Report struct {
	// Requested is the backend asked for: "auto", a backend name, or the
	// unknown value that was refused.
	Requested string `json:"requested"`
	// Searched are the folders (and explicit plugin files) looked at, in
	// search order.
	Searched []string `json:"searched"`
	// Candidates are the plugin files found, in search order.
	Candidates []Candidate `json:"candidates"`
	// Selected is the path of the chosen plugin, "" when none was chosen.
	Selected string `json:"selected"`
	// Backend is the chosen plugin's backend, "" when none was chosen.
	Backend string `json:"backend"`
}

// CandidateState is where the loader left a candidate.
type CandidateState string

// The four states: every candidate ends in exactly one.
const (
	StateSelected  CandidateState = "selected"  // the plugin the runtime uses
	StateAvailable CandidateState = "available" // could run here, not chosen (Reason says why)
	StateSkipped   CandidateState = "skipped"   // not tried, or not applicable here (Reason says which)
	StateFailed    CandidateState = "failed"    // broken or refused (Reason, and Detail where there is one)
)

// Candidate is one plugin file the loader looked at.
type Candidate struct {
	// Path is the file's absolute path as found (before symbolic links
	// are resolved).
	Path string `json:"path"`
	// Backend is the backend the file name says (libgpurt_<backend>),
	// then the one its plugin_info reports once loaded.
	Backend string `json:"backend"`
	// Version is the plugin's own version string ("" if not loaded).
	Version string `json:"version"`
	// ABI is the "major.minor" ABI version the plugin speaks ("" if it
	// was not negotiated).
	ABI string `json:"abi"`
	// Priority orders backends in auto mode, higher first; each plugin
	// announces its own (cuda 300, metal 200, mock 100); 0 if not loaded.
	Priority int32 `json:"priority"`
	// Score orders plugins of one priority, higher first; the plugin's
	// probe returns it (0 if not probed).
	Score int32 `json:"score"`
	// State is where the candidate ended.
	State CandidateState `json:"state"`
	// Reason says, in one line, why the candidate is in its state.
	Reason string `json:"reason"`
	// Detail says more where there is more: the dynamic loader's text,
	// the probe's own message, the missing dependencies.
	Detail string `json:"detail"`
	// Devices are the devices the plugin's probe reported (empty when it
	// was not probed).
	Devices []ProbedDevice `json:"devices"`
}

// ProbedDevice is one device as a plugin's probe describes it, before any
// runtime exists (Device.Info describes an opened runtime's devices).
type ProbedDevice struct {
	Index               int    `json:"index"`                // the device's number in the plugin
	Name                string `json:"name"`                 // "NVIDIA H200", "Apple M3 Max"
	Vendor              string `json:"vendor"`               // "NVIDIA", "Apple"
	Arch                string `json:"arch"`                 // "sm_90a", "apple9", "cpu"
	PCIBusID            string `json:"pci_bus_id"`           // "" where there is none
	DriverVersion       string `json:"driver_version"`       // the vendor driver's version
	MemoryTotal         uint64 `json:"memory_total"`         // bytes
	MemoryFree          uint64 `json:"memory_free"`          // bytes, when probed
	ComputeMajor        int    `json:"compute_major"`        // compute capability (CUDA), family (Metal)
	ComputeMinor        int    `json:"compute_minor"`        //
	MultiprocessorCount int    `json:"multiprocessor_count"` // SMs, GPU cores
	Flags               uint32 `json:"flags"`                // GPURT_DEVICE_* bits
}

// reportOf copies the loader's report into the public type (nil for nil).
func reportOf(r *loader.Report) *Report {
	if r == nil {
		return nil
	}
	out := &Report{
		Requested:  r.Requested,
		Searched:   append([]string{}, r.Searched...),
		Candidates: make([]Candidate, 0, len(r.Candidates)),
		Selected:   r.Selected,
		Backend:    r.Backend,
	}
	for _, c := range r.Candidates {
		pc := Candidate{
			Path: c.Path, Backend: c.Backend, Version: c.Version, ABI: c.ABI,
			Priority: c.Priority, Score: c.Score, State: CandidateState(c.State),
			Reason: c.Reason, Detail: c.Detail, Devices: make([]ProbedDevice, 0, len(c.Devices)),
		}
		for _, d := range c.Devices {
			pc.Devices = append(pc.Devices, ProbedDevice(d))
		}
		out.Candidates = append(out.Candidates, pc)
	}
	return out
}

// Probe runs the loader's search and choice without creating a runtime,
// and returns its report (also on error, when there is one). What only
// runtime creation finds (a malformed plugin setting such as
// GPURT_MOCK_DEVICES=x, a device held by another process) shows in Open,
// not here; `gpurt probe` runs both to report what Open would do. The error is
// an *Error matching ErrNoBackend, ErrBackendUnavailable or
// ErrUnknownBackend, or a Config error. Safe from any goroutine.
func Probe(cfg Config) (*Report, error) {
	set, err := cfg.resolve("probe")
	if err != nil {
		return nil, err
	}
	rep, _, err := loader.Choose(cfg.loaderOptions(set.log))
	return reportOf(rep), chooseError("probe", err)
}

// Backends lists the backends of the plugin files found where Open with
// cfg would search (libgpurt_<backend>.so, .dylib on macOS), each once, in
// search order. It loads and checks nothing: a backend listed may still
// be unusable here (Probe says whether it is). Every name listed can be
// asked for in Config.Backend, including ones gpurt does not ship (a
// libgpurt_rocm.so found gives "rocm").
func Backends(cfg Config) ([]string, error) {
	set, err := cfg.resolve("backends")
	if err != nil {
		return nil, err
	}
	return loader.Found(cfg.loaderOptions(set.log)), nil
}
