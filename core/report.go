// SPDX-License-Identifier: Apache-2.0

package core

import (
	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/internal/loader"
)

// reportOf copies the loader's report (nil for nil): the loader's types
// are diag's, and the copy shares no slice with the loader's.
func reportOf(r *loader.Report) *diag.Report {
	if r == nil {
		return nil
	}
	out := *r
	out.Searched = append([]string{}, r.Searched...)
	out.Candidates = make([]diag.Candidate, 0, len(r.Candidates))
	for _, c := range r.Candidates {
		c.Devices = append(make([]diag.ProbedDevice, 0, len(c.Devices)), c.Devices...)
		out.Candidates = append(out.Candidates, c)
	}
	return &out
}

// Probe runs the loader's search and choice without creating a runtime,
// and returns its report (also on error, when there is one). What only
// runtime creation finds (a malformed plugin setting such as
// GPURT_MOCK_DEVICES=x, a device held by another process) shows in Open,
// not here; `gpurt probe` runs both to report what Open would do. The error is
// an *Error matching ErrNoBackend, ErrBackendUnavailable or
// ErrUnknownBackend, or a Config error. Safe from any goroutine.
func probeReport(cfg Config) (*diag.Report, error) {
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
func findBackends(cfg Config) ([]string, error) {
	set, err := cfg.resolve("backends")
	if err != nil {
		return nil, err
	}
	return loader.Found(cfg.loaderOptions(set.log)), nil
}
