// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/metrale/gpurt/core/internal/bind"
)

// cand is a candidate while Choose works on it.
type cand struct {
	Candidate
	real     string       // the file with symlinks resolved (what is checked and dlopened)
	dir      string       // the folder it was listed in
	order    int          // position in search order
	fromFS   string       // backend named by the file name ("" when the name does not say)
	plugin   *bind.Plugin // non-nil once negotiated and bound
	deps     []dep        // what the file needs, and whether each was found
	ident    fileID       // the file's identity when it was checked
	done     bool         // State is final
	sealed   string       // what verify said of an accepted file ("" when nothing was verified)
	explicit bool         // a plugin file named in Options.Paths: it must load (see Options.Paths)
	file     *os.File     // the checked file, opened once (pin_unix.go): what is hashed, probed and loaded
	keepFile bool         // file is never closed: a dlopen went through its name
	origin   bool         // its RUNPATH names $ORIGIN: loaded by path (pin_unix.go)
}

// testHookVerified, when set (tests only), runs after a candidate's file
// was checked and its checksum verified, before it is probed and loaded:
// a test swaps or rewrites the file there.
var testHookVerified func(path string)

func (c *cand) fail(reason, detail string) {
	c.State, c.Reason, c.Detail, c.done = StateFailed, reason, detail, true
}

func (c *cand) skip(reason string) {
	c.State, c.Reason, c.done = StateSkipped, reason, true
}

// Choose searches, checks, loads, probes and chooses, as the package doc
// says. The report is never nil. On failure the error is an *Error that
// wraps ErrNoBackend, ErrBackendUnavailable or ErrUnknownBackend and names
// every candidate's reason and every folder searched.
func Choose(opts Options) (*Report, *bind.Plugin, error) {
	log := opts.Logger
	if log == nil {
		log = newLogger()
	}
	rep := &Report{Searched: []string{}, Candidates: []Candidate{}}
	req, from := requested(opts)
	rep.Requested = req
	log.Debug("choosing a backend", "requested", req, "from", from)

	cands := discover(searchEntries(opts, log), rep, log)
	if err := known(req, from, cands); err != nil {
		log.Debug("unknown backend requested", "value", req, "from", from)
		for _, c := range cands {
			if !c.done {
				c.skip(fmt.Sprintf("not requested (%s=%s)", from, req))
			}
		}
		return finish(rep, cands), nil, &Error{Kind: ErrUnknownBackend, Msg: err.Error(), Report: rep}
	}

	if !platformOK {
		msg := fmt.Sprintf("plugins cannot be loaded on %s/%s (gpurt needs linux or darwin on amd64 or arm64)", runtime.GOOS, runtime.GOARCH)
		for _, c := range cands {
			if !c.done {
				c.skip(msg)
			}
		}
		return finish(rep, cands), nil, failure(req, from, rep, "gpurt: "+msg)
	}

	winners := map[string]*cand{}
	for _, c := range cands {
		if !c.done {
			examine(c, req, from, opts, winners, log)
		}
		log.Debug("decision", "path", c.Path, "backend", orDash(c.Backend), "state", stateOrAvailable(c),
			"score", c.Score, "reason", c.Reason, "detail", c.Detail)
	}

	// A plugin file the program named must load: never test another one
	// in its place.
	if err := explicitFailure(rep, cands); err != nil {
		log.Debug("no backend chosen", "summary", summary(rep))
		return rep, nil, err
	}

	// Choose among the available ones.
	var avail []*cand
	for _, c := range cands {
		if !c.done {
			avail = append(avail, c)
		}
	}
	sort.SliceStable(avail, func(i, j int) bool {
		a, b := avail[i], avail[j]
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		if a.Score != b.Score {
			return a.Score > b.Score
		}
		return a.order < b.order
	})
	if len(avail) == 0 {
		finish(rep, cands)
		var msg string
		if req == "auto" {
			msg = "gpurt: no usable backend (put libgpurt_<backend>" + pluginExt() + " beside the executable, in lib/gpurt, or in GPURT_PLUGIN_PATH)"
		} else {
			n := 0
			for _, c := range cands {
				if c.Backend == req {
					n++
				}
			}
			msg = fmt.Sprintf("gpurt: backend %q requested (%s) cannot run here", req, from)
			if n == 0 {
				msg += fmt.Sprintf(": no libgpurt_%s%s found", req, pluginExt())
			}
		}
		log.Debug("no backend chosen", "summary", summary(rep))
		return rep, nil, failure(req, from, rep, msg)
	}

	sel := avail[0]
	sel.State, sel.done = StateSelected, true
	if req == "auto" {
		sel.Reason = fmt.Sprintf("auto: highest priority available (%d)", sel.Priority)
	} else {
		sel.Reason = fmt.Sprintf("requested (%s=%s)", from, req)
	}
	for _, c := range avail[1:] {
		c.State, c.done = StateAvailable, true
		switch {
		case c.Priority != sel.Priority:
			c.Reason = fmt.Sprintf("not chosen: %s has a higher priority (%d > %d)", sel.Backend, sel.Priority, c.Priority)
		case c.Score != sel.Score:
			c.Reason = fmt.Sprintf("not chosen: %s has a higher score (%d > %d)", sel.Path, sel.Score, c.Score)
		default:
			c.Reason = fmt.Sprintf("not chosen: %s comes first in search order", sel.Path)
		}
	}
	rep.Selected, rep.Backend = sel.Path, sel.Backend
	finish(rep, cands)
	log.Info("backend chosen", "backend", sel.Backend, "path", sel.Path, "requested", req,
		"why", sel.Reason, "passed_over", passedOver(rep, sel))
	if req == "auto" && sel.Backend == "mock" {
		warnGPUPassedOver(rep, sel, log)
	}
	return rep, sel.plugin, nil
}

// examine takes one candidate as far as it goes: admitted, checked,
// loaded, probed. It leaves c available (not done) or final.
func examine(c *cand, req, from string, opts Options, winners map[string]*cand, log hclog.Logger) {
	defer releaseFile(c)
	if !admit(c, c.fromFS, req, from, opts, winners) {
		return
	}
	if checkFile(c, log); c.done {
		return
	}
	if verify(c, opts, besideExe(c, exeDirs(opts))); c.done {
		return
	}
	if testHookVerified != nil {
		testHookVerified(c.real)
	}
	isolated := !opts.ProbeInProcess && platformOK
	if isolated {
		if probeIsolated(c, opts, log); c.done {
			return
		}
	}
	if openPlugin(c, log); c.done {
		return
	}
	be := c.plugin.Backend
	c.Backend, c.Version, c.Priority = be, c.plugin.Version, c.plugin.Priority
	if c.fromFS != "" && be != c.fromFS {
		c.fail(fmt.Sprintf("file name says backend %q but the plugin says %q", c.fromFS, be), "")
		return
	}
	if c.fromFS == "" && !admit(c, be, req, from, opts, winners) {
		return
	}
	winners[be] = c
	if !isolated {
		probePlugin(c, log)
	}
	c.Detail = appendDetail(c.Detail, c.sealed)
}

// explicitFailure is the error when a plugin file named in Options.Paths
// failed (missing, refused, broken, rejected by its entry): every other
// candidate still available is marked not chosen because of it.
func explicitFailure(rep *Report, cands []*cand) error {
	var bad []*cand
	for _, c := range cands {
		if c.explicit && c.done && c.State == StateFailed {
			bad = append(bad, c)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	names := make([]string, len(bad))
	for i, c := range bad {
		names[i] = c.Path + ": " + c.Reason
	}
	for _, c := range cands {
		if !c.done {
			c.State, c.done = StateAvailable, true
			c.Reason = "not chosen: the plugin file given in " + originPaths + " cannot be used (" + bad[0].Path + ")"
		}
	}
	finish(rep, cands)
	msg := fmt.Sprintf("gpurt: plugin file given in %s cannot be used: %s", originPaths, strings.Join(names, "; "))
	return &Error{Kind: ErrBackendUnavailable, Msg: msg + "; " + summary(rep), Report: rep}
}

// admit applies the decisions that need no loading: not requested,
// shadowed, mock fallback forbidden. It reports whether c goes on.
func admit(c *cand, be, req, from string, opts Options, winners map[string]*cand) bool {
	switch {
	case be == "":
		return true // the name does not say; decide after loading
	case req != "auto" && be != req:
		c.skip(fmt.Sprintf("not requested (%s=%s)", from, req))
	case winners[be] != nil:
		c.skip("shadowed by " + winners[be].Path)
	case req == "auto" && opts.NoMockFallback && be == "mock":
		c.skip("mock fallback disabled (Config.NoMockFallback)")
	default:
		return true
	}
	return false
}

func stateOrAvailable(c *cand) State {
	if !c.done {
		return StateAvailable
	}
	return c.State
}

// finish copies the candidates into the report.
func finish(rep *Report, cands []*cand) *Report {
	rep.Candidates = rep.Candidates[:0]
	for _, c := range cands {
		if c.Devices == nil {
			c.Devices = []Device{}
		}
		rep.Candidates = append(rep.Candidates, c.Candidate)
	}
	return rep
}

func failure(req, from string, rep *Report, msg string) error {
	kind := ErrNoBackend
	if req != "auto" {
		kind = ErrBackendUnavailable
	}
	return &Error{Kind: kind, Msg: msg + "; " + summary(rep), Report: rep}
}

// gpuWarned holds the warnings warnGPUPassedOver already gave in this
// process, so that a program opening many runtimes sees each once.
var gpuWarned sync.Map

// warnGPUPassedOver warns, once per process and situation, when auto
// settled on the mock while a GPU plugin file (a backend of higher
// priority) was found but could not run: the program would otherwise run
// on the CPU reference without a word at the default level. It names each
// such plugin and why it was passed over.
func warnGPUPassedOver(rep *Report, sel *cand, log hclog.Logger) {
	var parts []string
	for _, c := range rep.Candidates {
		if c.Backend == sel.Backend || (c.State != StateFailed && c.State != StateSkipped) ||
			strings.HasPrefix(c.Reason, "shadowed by ") {
			continue
		}
		p := c.Priority
		if p == 0 {
			p = knownPriority[c.Backend]
		}
		if p <= sel.Priority {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s (%s): %s", c.Backend, c.Path, c.Reason))
	}
	if len(parts) == 0 {
		return
	}
	msg := strings.Join(parts, "; ")
	if _, done := gpuWarned.LoadOrStore(msg, true); done {
		return
	}
	log.Warn("auto chose the mock backend (the CPU reference): a GPU plugin is present but cannot run", "passed_over", msg)
}

// passedOver says, for each backend better than the chosen one, why it was
// not taken: its candidates' reasons, or that no plugin was found.
func passedOver(rep *Report, sel *cand) string {
	var parts []string
	seen := map[string]bool{}
	for _, c := range rep.Candidates {
		if c.Path == sel.Path {
			continue
		}
		p := c.Priority
		if p == 0 {
			p = knownPriority[c.Backend]
		}
		if p > sel.Priority || (c.Backend == sel.Backend && c.State != StateAvailable) {
			parts = append(parts, fmt.Sprintf("%s (%s): %s: %s", orDash(c.Backend), c.Path, c.State, c.Reason))
		}
		seen[c.Backend] = true
	}
	for _, be := range platformBackends() {
		if !seen[be] && knownPriority[be] > sel.Priority {
			parts = append(parts, be+": no plugin found")
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// platformBackends are the backends that can exist on this OS, best first.
func platformBackends() []string {
	switch runtime.GOOS {
	case "darwin":
		return []string{"metal", "mock"}
	case "linux":
		return []string{"cuda", "mock"}
	}
	return []string{"mock"}
}

func pluginExt() string {
	if runtime.GOOS == "darwin" {
		return ".dylib"
	}
	return ".so"
}
