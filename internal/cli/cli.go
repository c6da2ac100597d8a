// SPDX-License-Identifier: Apache-2.0

// Package cli holds the conventions every command of gpurt follows (the
// commands under cmd/ and examples/):
//
//   - where plugins are: one flag, -plugin-path (Go's flag package takes
//     --plugin-path too), a folder or a plugin file, repeatable, ':'
//     separating several; and one environment variable, GPURT_PLUGIN_PATH,
//     with the same meaning, searched after the flag (the loader reads it).
//     The old spellings (-plugin, -plugins, -plugin-dir) are usage errors
//     naming the new one;
//   - -h and --help print the usage to stdout and exit 0;
//   - a usage error (an unknown flag, a bad value, flags that make no sense
//     together, a flag that is ignored without another) prints one line
//     naming the flag and the cause, and a hint, to stderr, and exits 2;
//   - a runtime or setup error prints "<command>: <cause>" and exits 1.
//
// A command's main is Main(run); run makes its flags with New, parses with
// Parse, and returns the status Parse, Usage or Fail returns. One that opens a runtime takes
// -plugin-path and -backend with Runtime and opens it with Runtime.Open
// (Runtime.OpenRuntime when it does not want device 0 alone).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/metrale/gpurt/core"
)

// The exit statuses.
const (
	ExitOK    = 0 // done
	ExitError = 1 // a runtime or setup error
	ExitUsage = 2 // a usage error
)

// OldPluginFlags are the spellings of -plugin-path that earlier versions of
// the commands used; each is a usage error that names -plugin-path.
var OldPluginFlags = []string{"plugin", "plugins", "plugin-dir"}

// Flags is a command's flag set with the convention built in.
type Flags struct {
	*flag.FlagSet
	name     string // "gpurt conform", "gpurt-quantbench"
	synopsis string // the usage line after the name, e.g. "[flags]"
	about    string // what the command does, printed under the usage line
	stdout   io.Writer
	stderr   io.Writer
	hidden   map[string]bool
	renamed  string // the old spelling of -plugin-path given, if any
}

// Main runs run, a command's run function, on the process's arguments,
// stdout and stderr, and exits with the status it returns.
func Main(run func(args []string, stdout, stderr io.Writer) int) {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// New returns the flags of command name. synopsis follows the name on the
// usage line ("[flags]"); about, when not empty, is printed under it.
func New(name, synopsis, about string, stdout, stderr io.Writer) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // Parse's errors are printed by Parse, the usage by Help
	fs.Usage = func() {}
	return &Flags{FlagSet: fs, name: name, synopsis: synopsis, about: about, stdout: stdout, stderr: stderr,
		hidden: map[string]bool{}}
}

// Name is the command's name as its messages begin.
func (f *Flags) Name() string { return f.name }

// Stdout and Stderr are the writers the command was given.
func (f *Flags) Stdout() io.Writer { return f.stdout }

// Stderr is where errors go.
func (f *Flags) Stderr() io.Writer { return f.stderr }

// PluginPath registers -plugin-path (and the old spellings, as usage
// errors) and returns the list it fills.
func (f *Flags) PluginPath() *PathList {
	var p PathList
	f.Var(&p, "plugin-path", "plugin folder or file to search first (repeatable; ':' separates several); then $GPURT_PLUGIN_PATH, then beside the executable")
	for _, old := range OldPluginFlags {
		f.Var(&oldFlag{name: old, f: f}, old, "")
		f.hidden[old] = true
	}
	return &p
}

// Hide keeps flag name out of the usage (an internal flag).
func (f *Flags) Hide(name string) { f.hidden[name] = true }

// Parse parses args. ok is false when the command must stop and return
// status: 0 after -h/--help (the usage printed on stdout), 2 after a usage
// error (one line and a hint on stderr), and also 2 for arguments after
// the flags unless extra allows them.
func (f *Flags) Parse(args []string, extra bool) (status int, ok bool) {
	err := f.FlagSet.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		f.Help(f.stdout)
		return ExitOK, false
	}
	if f.renamed != "" {
		return f.Usage("-%s was renamed: use -plugin-path FOLDER_OR_FILE (or $GPURT_PLUGIN_PATH)", f.renamed), false
	}
	if err != nil {
		return f.Usage("%s", err.Error()), false
	}
	if !extra && f.NArg() > 0 {
		return f.Usage("unexpected argument %q", f.Arg(0)), false
	}
	return ExitOK, true
}

// Help prints the usage: the usage line, the description and every flag
// that is not hidden.
func (f *Flags) Help(w io.Writer) {
	fmt.Fprintf(w, "usage: %s %s\n", f.name, f.synopsis)
	if f.about != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(f.about, "\n"))
	}
	shown := flag.NewFlagSet(f.name, flag.ContinueOnError)
	any := false
	f.VisitAll(func(fl *flag.Flag) {
		if !f.hidden[fl.Name] {
			shown.Var(fl.Value, fl.Name, fl.Usage)
			shown.Lookup(fl.Name).DefValue = fl.DefValue
			any = true
		}
	})
	if any {
		fmt.Fprintln(w, "\nflags:")
		shown.SetOutput(w)
		shown.PrintDefaults()
	}
}

// Usage prints a usage error, "<name>: <message>" and the hint, to stderr
// and returns ExitUsage. The message names the flag and the cause.
func (f *Flags) Usage(format string, args ...any) int {
	fmt.Fprintf(f.stderr, "%s: %s\n", f.name, fmt.Sprintf(format, args...))
	fmt.Fprintf(f.stderr, "run '%s -h' for usage\n", f.name)
	return ExitUsage
}

// Fail prints a runtime or setup error, "<name>: <err>", to stderr and
// returns ExitError.
func (f *Flags) Fail(err error) int {
	fmt.Fprintf(f.stderr, "%s: %s\n", f.name, strings.TrimPrefix(err.Error(), f.name+": "))
	return ExitError
}

// Given reports whether flag name was given on the command line.
func (f *Flags) Given(name string) bool {
	set := false
	f.Visit(func(fl *flag.Flag) {
		if fl.Name == name {
			set = true
		}
	})
	return set
}

// PathList is the value of -plugin-path: each use may hold several paths
// separated by ':'.
type PathList []string

func (p *PathList) String() string { return strings.Join(*p, ":") }

// Set adds the ':'-separated paths of v.
func (p *PathList) Set(v string) error {
	for _, s := range strings.Split(v, ":") {
		if s != "" {
			*p = append(*p, s)
		}
	}
	return nil
}

// Check returns a setup error for the first path that does not exist,
// naming it and the cause ("no such file or folder"). The loader itself
// searches a missing folder in vain; a command told to look somewhere says
// when there is nothing there.
func (p PathList) Check() error {
	for _, s := range p {
		if _, err := os.Stat(s); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("-plugin-path %s: no such file or folder", s)
			}
			return fmt.Errorf("-plugin-path %s: %w", s, err)
		}
	}
	return nil
}

// oldFlag is an old spelling of -plugin-path: giving it, with or without
// a value, is a usage error (a boolean flag, so that "-plugin build" stops
// at -plugin).
type oldFlag struct {
	name string
	f    *Flags
}

func (o *oldFlag) String() string { return "" }

func (o *oldFlag) IsBoolFlag() bool { return true }

func (o *oldFlag) Set(string) error {
	o.f.renamed = o.name
	return errors.New("renamed to -plugin-path")
}

// abort is what Abort panics with.
type abort struct{ err error }

// Abort stops a command from deep inside its work with a runtime error:
// it panics, and Recover, deferred by the command's run function, turns
// the panic into Fail's message and status. (The benchmark programs stop
// at their first failed setup step, far below run.)
func Abort(err error) { panic(abort{err}) }

// Recover, deferred in a run function with its status variable, turns an
// Abort into Fail(err); any other panic goes on.
func (f *Flags) Recover(status *int) {
	if r := recover(); r != nil {
		a, ok := r.(abort)
		if !ok {
			panic(r)
		}
		*status = f.Fail(a.err)
	}
}

// Runtime is what a command that opens a runtime takes from its flags:
// the plugin search path and the backend.
type Runtime struct {
	Paths   *PathList
	Backend *string
}

// Runtime registers -plugin-path (as PluginPath) and -backend, whose
// default is backend and whose help is usage.
func (f *Flags) Runtime(backend, usage string) Runtime {
	return Runtime{Paths: f.PluginPath(), Backend: f.String("backend", backend, usage)}
}

// UnknownBackend reports whether err is core.ErrUnknownBackend for a
// backend that -backend named: the commands make that a usage error (an
// unknown backend from $GPURT_BACKEND stays a setup error).
func (r Runtime) UnknownBackend(err error) bool {
	return *r.Backend != "" && errors.Is(err, core.ErrUnknownBackend)
}

// OpenRuntime checks the plugin paths (a setup error names the first
// missing one) and opens the runtime of cfg with the flags' plugin paths
// and backend.
func (r Runtime) OpenRuntime(cfg core.Config) (*core.Runtime, error) {
	if err := r.Paths.Check(); err != nil {
		return nil, err
	}
	cfg.PluginPaths, cfg.Backend = *r.Paths, *r.Backend
	return core.Open(cfg)
}

// Open is OpenRuntime, returning the runtime with its device 0. On an
// error nothing stays open.
func (r Runtime) Open(cfg core.Config) (*core.Runtime, *core.Device, error) {
	rt, err := r.OpenRuntime(cfg)
	if err != nil {
		return nil, nil, err
	}
	dev, err := rt.Device(0)
	if err != nil {
		rt.Close()
		return nil, nil, err
	}
	return rt, dev, nil
}
