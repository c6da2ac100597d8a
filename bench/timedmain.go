// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/metrale/gpurt/internal/cli"
)

// Timed are the options every GPU-timed benchmark (bench/attnbench,
// bench/quantbench) has; each embeds them in its Options, whose doc says
// what Only takes and how large Shrink may be.
type Timed struct {
	Timer  *GPUTimer // device 0 and its stream (the caller opens and closes it)
	Iters  int       // timed calls per figure (at least 1)
	Only   string    // "": every part of the benchmark; else the one part to run
	Shrink int       // divide every size by this, 1 to the benchmark's MaxShrink (a quick run on the mock)
	Out    io.Writer // one JSON result per line
}

// TimedFlags are the flags the GPU-timed benchmark commands
// (gpurt-attnbench, gpurt-quantbench) share: -iters, -only, -backend and
// -shrink, registered on one cli.Flags with their help texts, and the
// plugin search path.
type TimedFlags struct {
	cli.Runtime // Paths and Backend
}

// AddTimedFlags registers the shared flags on fs into o's Iters, Only and
// Shrink; onlyHelp and shrinkHelp say what -only and -shrink take.
func AddTimedFlags(fs *cli.Flags, o *Timed, onlyHelp, shrinkHelp string) TimedFlags {
	tf := TimedFlags{fs.Runtime("cuda", "backend to open (the mock, with -shrink, checks this program)")}
	fs.IntVar(&o.Iters, "iters", 50, "timed calls per figure")
	fs.StringVar(&o.Only, "only", "", onlyHelp)
	fs.IntVar(&o.Shrink, "shrink", 1, shrinkHelp)
	return tf
}

// TimedMain is the rest of such a command's run: it parses args, checks
// the options (check, called after parsing: a closure over the options,
// not a method value bound before; an error is a usage error) and the
// plugin path,
// opens a GPUTimer on the backend, runs run with it and closes it. It
// returns the exit status.
func (tf TimedFlags) TimedMain(fs *cli.Flags, args []string, check func() error, run func(*GPUTimer) error) int {
	if st, ok := fs.Parse(args, false); !ok {
		return st
	}
	if err := check(); err != nil {
		return fs.Usage("-%v", err)
	}
	if err := tf.Paths.Check(); err != nil {
		return fs.Fail(err)
	}
	t, err := OpenGPUTimer(*tf.Paths, *tf.Backend)
	if err != nil {
		return fs.Fail(err)
	}
	defer t.Close()
	if err := run(t); err != nil {
		return fs.Fail(err)
	}
	return cli.ExitOK
}

// Abort ends a benchmark's Run from deep inside a figure with err (a
// setup step or the output failed): it panics with a value only Guard
// recovers.
func Abort(err error) { panic(abort{err}) }

type abort struct{ err error }

// Guard, deferred by a benchmark's Run (defer bench.Guard(&err)), makes
// an Abort's error Run's; any other panic goes on.
func Guard(err *error) {
	if r := recover(); r != nil {
		a, ok := r.(abort)
		if !ok {
			panic(r)
		}
		*err = a.err
	}
}

// CheckTimed returns an error naming the first of a timed benchmark's
// shared options out of range: Shrink from 1 to maxShrink, Iters at least
// 1, Only "" or one of onlyWant. A benchmark's Options.Check calls it.
func CheckTimed(o Timed, maxShrink int, onlyWant ...string) error {
	switch {
	case o.Shrink < 1 || o.Shrink > maxShrink:
		return fmt.Errorf("shrink %d: want 1 to %d", o.Shrink, maxShrink)
	case o.Iters < 1:
		return fmt.Errorf("iters %d: want at least 1", o.Iters)
	case o.Only != "" && !slices.Contains(onlyWant, o.Only):
		want := onlyWant[len(onlyWant)-1]
		if len(onlyWant) > 1 {
			want = strings.Join(onlyWant[:len(onlyWant)-1], ", ") + " or " + want
		}
		return fmt.Errorf("only %q: want %s", o.Only, want)
	}
	return nil
}

// StartTimed is the start of a timed benchmark's Run (pkg names it):
// check is its Options.Check, and o's Timer and Out are required.
func StartTimed(pkg string, check func() error, o Timed) error {
	if err := check(); err != nil {
		return err
	}
	if o.Timer == nil || o.Out == nil {
		return errors.New(pkg + ": Options.Timer and Options.Out are required")
	}
	return nil
}
