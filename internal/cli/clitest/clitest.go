// SPDX-License-Identifier: Apache-2.0

// Package clitest checks a command against the convention of package cli:
// -h and --help exit 0 with the usage on stdout, an unknown flag exits 2
// naming it, each old spelling of -plugin-path exits 2 naming the new one.
// Each command's test runs Convention on its run function, with the
// command's own cases added.
package clitest

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/cli"
	"github.com/metrale/gpurt/internal/testutil"
)

// RunFunc is a command's run function: its arguments, stdout and stderr in,
// its exit status out.
type RunFunc func(args []string, stdout, stderr io.Writer) int

// Case is one command line and what it must do.
type Case struct {
	Name   string
	Args   []string
	Status int      // the exit status
	Stdout []string // substrings stdout must hold
	Stderr []string // substrings stderr must hold
	// NoStdout requires stdout to be empty.
	NoStdout bool
	// Then, when set, checks the outputs further (after the checks above).
	Then func(t *testing.T, stdout, stderr string)
}

// Usage is the case of a usage error: args exit 2, with want on stderr
// and nothing on stdout.
func Usage(name, want string, args ...string) Case {
	return Case{Name: name, Args: args, Status: cli.ExitUsage, NoStdout: true, Stderr: []string{want}}
}

// MissingPluginPath is the case of a -plugin-path that does not exist,
// before args (what else the command needs to get that far): exit 1,
// naming it.
func MissingPluginPath(args ...string) Case {
	return Case{Name: "missing plugin path", Args: append([]string{"-plugin-path", "/nonexistent"}, args...),
		Status: cli.ExitError, Stderr: []string{"-plugin-path /nonexistent: no such file or folder"}}
}

// Convention returns the cases every command must pass.
func Convention() []Case {
	cs := []Case{
		{Name: "-h", Args: []string{"-h"}, Status: cli.ExitOK, Stdout: []string{"usage:", "-plugin-path"}},
		{Name: "--help", Args: []string{"--help"}, Status: cli.ExitOK, Stdout: []string{"usage:", "-plugin-path"}},
		{Name: "unknown flag", Args: []string{"--no-such-flag"}, Status: cli.ExitUsage, NoStdout: true,
			Stderr: []string{"no-such-flag", "-h' for usage"}},
	}
	for _, old := range cli.OldPluginFlags {
		cs = append(cs,
			Case{Name: "old -" + old, Args: []string{"-" + old, "build"}, Status: cli.ExitUsage, NoStdout: true,
				Stderr: []string{"-" + old + " was renamed", "-plugin-path"}},
			Case{Name: "old --" + old + "=", Args: []string{"--" + old + "=build"}, Status: cli.ExitUsage, NoStdout: true,
				Stderr: []string{"-" + old + " was renamed", "-plugin-path"}})
	}
	return cs
}

// CheckCommand runs Convention's cases and the command's own on run.
func CheckCommand(t *testing.T, run RunFunc, own ...Case) {
	t.Helper()
	Check(t, run, append(Convention(), own...))
}

// Run runs run on args and returns its exit status and what it wrote to
// stdout and stderr.
func Run(run RunFunc, args ...string) (status int, stdout, stderr *bytes.Buffer) {
	stdout, stderr = new(bytes.Buffer), new(bytes.Buffer)
	return run(args, stdout, stderr), stdout, stderr
}

// RunOK is Run of a command line that must succeed: an exit status other
// than 0 fails t, naming args and stderr.
func RunOK(t testing.TB, run RunFunc, args ...string) (stdout, stderr *bytes.Buffer) {
	t.Helper()
	status, stdout, stderr := Run(run, args...)
	require.Equal(t, cli.ExitOK, status, "%v\nstderr: %s", args, stderr)
	return stdout, stderr
}

// MockArgs are the flags that choose the mock plugin, built for t
// (testutil.MockPlugin): -backend mock -plugin-path DIR.
func MockArgs(t testing.TB) []string {
	return []string{"-backend", "mock", "-plugin-path", testutil.MockPlugin(t)}
}

// RunOnMock is RunOK of MockArgs followed by args: a command line that
// must succeed on the mock plugin.
func RunOnMock(t testing.TB, run RunFunc, args ...string) (stdout, stderr *bytes.Buffer) {
	t.Helper()
	return RunOK(t, run, append(MockArgs(t), args...)...)
}

// Check runs every case on run, each in its own subtest.
func Check(t *testing.T, run RunFunc, cases []Case) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			status, stdout, stderr := Run(run, c.Args...)
			assert.Equal(t, c.Status, status, "%v\nstdout: %s\nstderr: %s", c.Args, stdout.String(), stderr.String())
			for _, s := range c.Stdout {
				assert.Contains(t, stdout.String(), s, "stdout of %v", c.Args)
			}
			for _, s := range c.Stderr {
				assert.Contains(t, stderr.String(), s, "stderr of %v", c.Args)
			}
			if c.NoStdout {
				assert.Empty(t, stdout.String(), "stdout of %v", c.Args)
			}
			if c.Status == cli.ExitOK && len(c.Stderr) == 0 {
				assert.NotContains(t, stderr.String(), "help requested", "%v", c.Args)
			}
			if c.Status == cli.ExitUsage {
				assert.Contains(t, stderr.String(), "for usage", "a usage error gives the hint")
			}
			if c.Then != nil {
				c.Then(t, stdout.String(), stderr.String())
			}
		})
	}
}
