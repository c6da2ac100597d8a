// SPDX-License-Identifier: Apache-2.0

package loader

// Crash-isolated probe. A GPU driver that crashes or hangs while a plugin
// probes would take the whole server with it, so by default the loader
// probes each plugin in a child process: the executable itself (the
// running image: /proc/self/exe on Linux), run again with a hidden
// subcommand (argv[1] = childArg and GPURT_PROBE_CHILD=1 in
// its environment). This package's init intercepts that before main runs,
// in any program that imports gpurt, loads and probes the one plugin,
// writes a versioned JSON report to stdout (the plugin's own writes to
// stdout are redirected to stderr) and exits. The parent gives the child
// an allow-listed environment and a watchdog; a crash, a hang or garbage
// becomes the candidate's reason, with the child's stderr as detail. Only
// a plugin the child found available is then loaded in the parent, which
// uses the child's probe result instead of probing again. Results are
// cached, in memory and on disk, keyed by the plugin file's identity, the
// driver version and the environment the child saw.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

const (
	childArg = "__gpurt_probe"
	childEnv = "GPURT_PROBE_CHILD"
	// reportVersion is the child report's format version; a parent
	// refuses a report of another version.
	reportVersion = 1
	// DefaultProbeTimeout is the watchdog of an isolated probe.
	DefaultProbeTimeout = 30 * time.Second
	maxChildOutput      = 1 << 20
	// childFD is the descriptor the child finds the plugin file at.
	childFD = 3
)

// childReport is what the child writes to stdout.
type childReport struct {
	Version   int       `json:"gpurt_probe_report"`
	Candidate Candidate `json:"candidate"`
}

func init() {
	if len(os.Args) == 3 && os.Args[1] == childArg && os.Getenv(childEnv) == "1" {
		os.Exit(runChild(os.Args[2]))
	}
}

// runChild is the child's whole life: probe one plugin, report, exit.
// The parent passes the file it checked and verified as descriptor
// childFD (path names it, for messages); the child loads that open file,
// never the path (pin_unix.go).
func runChild(path string) int {
	out, err := reserveStdout()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpurt: probe child: cannot reserve stdout:", err)
		return 3
	}
	log := hclog.NewNullLogger()
	c := &cand{dir: filepath.Dir(path)}
	c.Path = path
	c.fromFS, _ = pluginBackend(filepath.Base(path))
	c.Backend = c.fromFS
	c.real = path
	if real, err := filepath.EvalSymlinks(path); err == nil {
		c.real = real
	}
	examineChild(c, os.NewFile(childFD, path), log)
	if !c.done {
		c.State = StateAvailable
	}
	if c.Devices == nil {
		c.Devices = []Device{}
	}
	b, _ := json.Marshal(childReport{Version: reportVersion, Candidate: c.Candidate})
	b = append(b, '\n')
	if _, err := out.Write(b); err != nil {
		return 3
	}
	return 0
}

// examineChild checks the format of the file the parent passed, loads it
// and probes it.
func examineChild(c *cand, f *os.File, log hclog.Logger) {
	fi, err := f.Stat()
	if err != nil {
		c.fail("probe failed: the isolated probe was given no plugin file (descriptor 3)", err.Error())
		return
	}
	if !fi.Mode().IsRegular() {
		c.fail(fmt.Sprintf("probe failed: the isolated probe was given no regular file (mode %s)", fi.Mode()), "")
		return
	}
	c.file, c.ident = f, identityOf(fi)
	if checkPinnedFormat(c, log); c.done {
		return
	}
	if openPlugin(c, log); c.done {
		return
	}
	c.Backend, c.Version, c.Priority = c.plugin.Backend, c.plugin.Version, c.plugin.Priority
	probePlugin(c, log)
}

// childEnvironment is the allow-listed environment of the child.
func childEnvironment() []string {
	keep := func(k string) bool {
		switch k {
		case "PATH", "HOME", "TMPDIR", "LANG", "TZ", "USER", "LD_LIBRARY_PATH", "GOCOVERDIR", "GORACE":
			return true
		}
		for _, p := range []string{"LC_", "CUDA_", "NVIDIA_", "GPURT_", "METAL_", "MTL_"} {
			if strings.HasPrefix(k, p) {
				return k != childEnv
			}
		}
		return false
	}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, ok := strings.Cut(kv, "="); ok && keep(k) {
			env = append(env, kv)
		}
	}
	return append(env, childEnv+"=1")
}

// probeIsolated probes c in a child process (or takes a cached result).
// It leaves c failed or skipped, or available (not done) with the child's
// probe fields set; the caller then loads c in this process.
func probeIsolated(c *cand, opts Options, log hclog.Logger) {
	env := childEnvironment()
	key := cacheKey(c, env)
	r, cached := Candidate{}, false
	if key != "" {
		r, cached = cacheGet(opts, key, c.Path, log)
	}
	if !cached {
		var ok bool
		if r, ok = runProbeChild(c, opts, env, log); !ok {
			return // c failed
		}
		if key != "" {
			cachePut(opts, key, r, log)
		}
	}
	log.Debug("isolated probe", "path", c.Path, "cached", cached, "state", r.State, "reason", r.Reason)
	if r.Backend != "" && c.fromFS != "" && r.Backend != c.fromFS {
		c.fail(fmt.Sprintf("file name says backend %q but the plugin says %q", c.fromFS, r.Backend), "")
		return
	}
	c.Version, c.ABI, c.Priority, c.Score, c.Devices = r.Version, r.ABI, r.Priority, r.Score, r.Devices
	if r.Backend != "" {
		c.Backend = r.Backend
	}
	switch r.State {
	case StateAvailable:
		c.Detail = r.Detail
	case StateSkipped:
		c.skip(r.Reason)
	default:
		c.fail(r.Reason, r.Detail)
	}
}

// runProbeChild runs the child for c and parses its report. On a crash,
// a hang, a non-zero exit or an unreadable report it fails c and returns
// false.
func runProbeChild(c *cand, opts Options, env []string, log hclog.Logger) (Candidate, bool) {
	if c.file == nil {
		c.fail("internal: plugin file not opened before the isolated probe", "")
		return Candidate{}, false
	}
	exe, err := childExecutable()
	if err != nil {
		c.fail("cannot run the isolated probe: the executable's path is unknown", err.Error())
		return Candidate{}, false
	}
	timeout := opts.ProbeTimeout
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, childArg, c.Path)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.Stdin = nil
	cmd.ExtraFiles = []*os.File{c.file} // childFD: the file checked here
	stdout, stderr := &limitedBuffer{max: maxChildOutput}, &limitedBuffer{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second
	start := time.Now()
	err = cmd.Run()
	elapsed := time.Since(start)
	errText := strings.TrimSpace(stderr.String())
	log.Debug("isolated probe child", "path", c.Path, "elapsed", elapsed, "error", err, "stderr", errText)
	var ee *exec.ExitError
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		c.fail(fmt.Sprintf("probe hung: no answer from the isolated probe within %s (killed)", timeout), errText)
		return Candidate{}, false
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			c.fail(fmt.Sprintf("probe crashed: the isolated probe died of signal %d (%s)", int(ws.Signal()), ws.Signal()), errText)
		} else if what := crashLine(errText); what != "" {
			// The Go runtime turns a fatal signal in C code into a
			// report on stderr and exit status 2.
			c.fail("probe crashed: the isolated probe died: "+what, errText)
		} else {
			c.fail(fmt.Sprintf("probe failed: the isolated probe exited with status %d", ee.ExitCode()), errText)
		}
		return Candidate{}, false
	case err != nil:
		c.fail("cannot run the isolated probe", err.Error())
		return Candidate{}, false
	}
	var r childReport
	line := bytes.TrimSpace(stdout.Bytes())
	if i := bytes.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if err := json.Unmarshal(line, &r); err != nil || r.Version != reportVersion {
		why := fmt.Sprintf("report version %d, want %d", r.Version, reportVersion)
		if err != nil {
			why = err.Error()
		}
		c.fail("probe failed: the isolated probe's report is unreadable ("+why+")", errText)
		return Candidate{}, false
	}
	return r.Candidate, true
}

// limitedBuffer keeps the first max bytes written and drops the rest.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// crashLine finds the Go runtime's crash report in a child's stderr (a
// fatal signal in the plugin, a panic) and returns its first line.
func crashLine(stderr string) string {
	for _, l := range strings.Split(stderr, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "fatal error:") || strings.HasPrefix(l, "panic:") ||
			(strings.HasPrefix(l, "SIG") && strings.Contains(l, ":")) {
			return l
		}
	}
	return ""
}

// probeRelevant says whether an environment entry the child sees can
// change what a plugin's probe answers (the device set, the driver, the
// mock's configuration); only those key the cache, so that a log level or
// a backend choice does not cost a new child.
func probeRelevant(kv string) bool {
	k, _, _ := strings.Cut(kv, "=")
	if k == "LD_LIBRARY_PATH" {
		return true
	}
	for _, p := range []string{"CUDA_", "NVIDIA_", "GPURT_MOCK_", "METAL_", "MTL_"} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}
