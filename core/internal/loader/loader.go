// SPDX-License-Identifier: Apache-2.0

// Package loader finds gpurt plugins, checks them before loading, loads
// them, negotiates the ABI, probes them and chooses one backend. It is the
// one file's worth of policy that decides which plugin a process uses:
//
//  1. Search, in order: Options.Paths, GPURT_PLUGIN_PATH (ignored when the
//     process is setuid/setgid; relative entries ignored), the executable's
//     folder (symlinks resolved), <exe dir>/lib/gpurt, <exe dir>/../lib/gpurt.
//     Never the working directory, never LD_LIBRARY_PATH.
//  2. Each file named libgpurt_<backend>.so (.dylib on macOS) is a
//     candidate. A candidate for a backend that was not requested, or one
//     shadowed by an earlier file of the same backend, is skipped unloaded.
//  3. Before dlopen: resolve the path one component at a time and refuse
//     it unless every folder from /, every symbolic link and the file are
//     owned by root or the effective user, no folder is writable by group
//     or others (sticky folders excepted) and the file is a regular file
//     others cannot write (trust_unix.go); refuse a file that changed on
//     disk since this process loaded it (identity.go); check the file
//     format and architecture (debug/elf, debug/macho); list its DT_NEEDED
//     and whether each can be found.
//     The file is opened once, right after the path checks (pin_unix.go):
//     the format check, the checksum of a `make dist` build (integrity.go),
//     the isolated probe (the child inherits the descriptor) and dlopen
//     all read that open file, so a file renamed into place meanwhile is
//     never loaded; its identity is compared again after loading.
//  4. dlopen (RTLD_NOW|RTLD_LOCAL) through /proc/self/fd/N on Linux, by
//     absolute path on macOS; look up the entry with dlsym; negotiate
//     (major exact, any minor); bind the table.
//  5. Probe; choose: an explicit backend must be usable or Choose fails with
//     the whole report; auto takes the highest priority, then the higher
//     score, then the earlier in search order.
//
// Every candidate ends in exactly one State. Nothing here calls into a
// plugin that failed a check, and bad files are reasons, never crashes.
package loader

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/metrale/gpurt/core/diag"
)

// Sentinels matched with errors.Is on the error Choose returns.
var (
	// ErrNoBackend: auto found no usable plugin.
	ErrNoBackend = errors.New("gpurt: no usable backend")
	// ErrBackendUnavailable: an explicitly requested backend cannot run.
	ErrBackendUnavailable = errors.New("gpurt: requested backend unavailable")
	// ErrUnknownBackend: the requested backend is neither a built-in name
	// nor the backend of a plugin file found.
	ErrUnknownBackend = errors.New("gpurt: unknown backend")
)

// Backends are the names gpurt ships plugins for ("auto" chooses among
// whatever is found). The list is open: Options.Backend and GPURT_BACKEND
// also accept the backend of any plugin file the search finds
// (libgpurt_rocm.so gives "rocm"); only a name that is neither is
// ErrUnknownBackend. A plugin announces its own priority in plugin_info,
// so an out-of-tree backend takes part in auto mode at the priority it
// chose.
var Backends = []string{"auto", "cuda", "metal", "mock"}

// knownPriority is the priority each known backend's plugin announces; it
// is used only to say why a better backend was passed over when no plugin
// of it was found.
var knownPriority = map[string]int32{"cuda": 300, "metal": 200, "mock": 100}

// Options says where to look and what to take. The zero value searches
// the default places and honours GPURT_BACKEND.
type Options struct {
	// Paths are folders or plugin files, searched first (before
	// GPURT_PLUGIN_PATH). An entry is a plugin file when it names an
	// existing file that is not a folder, or when its base name has a
	// plugin's form (libgpurt_<name>.so, .dylib on macOS) even if missing;
	// anything else is a folder. A plugin file named here must load: when
	// it fails (missing, refused, wrong format, rejected by its entry),
	// Choose fails with ErrBackendUnavailable naming it, even when another
	// plugin could run. A folder here that does not exist is searched in
	// vain, not an error.
	Paths          []string
	Backend        string       // "", "auto", a built-in name or one found on disk; "" means GPURT_BACKEND, else auto
	NoMockFallback bool         // auto must not fall back to mock
	Logger         hclog.Logger // nil: hclog named "gpurt" at GPURT_LOG_LEVEL (default warn), to stderr
	ExePath        string       // "" = os.Executable(); tests set it

	// ProbeInProcess probes plugins in this process instead of in a
	// child process (see isolate.go): faster by a process start, but a
	// driver that crashes or hangs in probe takes the process with it.
	ProbeInProcess bool
	// ProbeTimeout is the isolated probe's watchdog (0: DefaultProbeTimeout).
	ProbeTimeout time.Duration
	// ProbeCacheDir holds isolated probe results between processes: ""
	// is the user's cache folder (os.UserCacheDir()/gpurt/probe), "-"
	// keeps them in memory only.
	ProbeCacheDir string
	// AllowUnverified lets plugins load that the checksums recorded by
	// `make dist` do not cover (see integrity.go); GPURT_ALLOW_UNVERIFIED=1
	// does the same.
	AllowUnverified bool
}

// probeCapacity is how many devices a probe may describe. A variable, so
// that the array it sizes is on the heap and never moves during a call.
var probeCapacity = 16

// The report's types are core/diag's, which core returns as they are
// (the isolated probe's child writes a Candidate as JSON, the probe cache
// keeps it): where a candidate ended, a device a plugin's probe reported,
// one plugin file looked at, and everything Choose looked at and decided.
type (
	State     = diag.CandidateState
	Device    = diag.ProbedDevice
	Candidate = diag.Candidate
	Report    = diag.Report
)

// The four states.
const (
	StateSelected  = diag.StateSelected  // the plugin Choose returned
	StateAvailable = diag.StateAvailable // could run here, not chosen
	StateSkipped   = diag.StateSkipped   // not tried, or not applicable here (Reason says which)
	StateFailed    = diag.StateFailed    // broken or refused (Reason, and Detail where there is one)
)

// Error is the error Choose returns: it wraps one of the sentinels and
// carries the whole report.
type Error struct {
	Kind   error // ErrNoBackend, ErrBackendUnavailable or ErrUnknownBackend
	Msg    string
	Report *Report
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Kind }

// summary lists every candidate's state and reason and every folder
// searched, one clause each, for error messages.
func summary(r *Report) string {
	var b strings.Builder
	if len(r.Candidates) == 0 {
		b.WriteString("no plugin files found")
	} else {
		b.WriteString("candidates: ")
		for i, c := range r.Candidates {
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "%s (%s): %s: %s", c.Path, orDash(c.Backend), c.State, c.Reason)
			if c.Detail != "" && c.State == StateFailed {
				fmt.Fprintf(&b, " [%s]", c.Detail)
			}
		}
	}
	b.WriteString("; folders searched: ")
	if len(r.Searched) == 0 {
		b.WriteString("none")
	} else {
		b.WriteString(strings.Join(r.Searched, ", "))
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// newLogger is the default logger: "gpurt" at GPURT_LOG_LEVEL (warn).
func newLogger() hclog.Logger {
	lvl := hclog.Warn
	bad := ""
	if s := strings.TrimSpace(os.Getenv("GPURT_LOG_LEVEL")); s != "" {
		if l := hclog.LevelFromString(s); l != hclog.NoLevel {
			lvl = l
		} else {
			bad = s
		}
	}
	l := hclog.New(&hclog.LoggerOptions{Name: "gpurt", Level: lvl, Output: os.Stderr})
	if bad != "" {
		l.Warn("unknown GPURT_LOG_LEVEL, using warn", "value", bad, "valid", "trace, debug, info, warn, error, off")
	}
	return l
}

// requested resolves Options.Backend / GPURT_BACKEND to a name, and says
// where it came from (as the user knows it: Config.Backend is the public
// name of Options.Backend). Whether the name exists is decided after the
// search (known).
func requested(opts Options) (name, from string) {
	name, from = opts.Backend, "Config.Backend"
	if strings.TrimSpace(name) == "" {
		name, from = os.Getenv("GPURT_BACKEND"), "GPURT_BACKEND"
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" {
		return "auto", "default"
	}
	return name, from
}

// known checks a requested name against the built-in names and the
// backends of the files found; the error lists both.
func known(name, from string, cands []*cand) error {
	valid := append([]string{}, Backends...)
	for _, b := range foundBackends(cands) {
		if b == name {
			return nil
		}
		if !slices.Contains(valid, b) {
			valid = append(valid, b)
		}
	}
	if slices.Contains(Backends, name) {
		return nil
	}
	return fmt.Errorf("%w %q (from %s); valid values: %s", ErrUnknownBackend, name, from, strings.Join(valid, ", "))
}

// foundBackends are the backends the candidates' file names say, each
// once, in search order.
func foundBackends(cands []*cand) []string {
	out := []string{}
	for _, c := range cands {
		if c.fromFS != "" && !slices.Contains(out, c.fromFS) {
			out = append(out, c.fromFS)
		}
	}
	return out
}

// Found searches as Choose does and returns the backends of the plugin
// files found, each once, in search order. It loads nothing.
func Found(opts Options) []string {
	log := opts.Logger
	if log == nil {
		log = newLogger()
	}
	return foundBackends(discover(searchEntries(opts, log), &Report{}, log))
}
