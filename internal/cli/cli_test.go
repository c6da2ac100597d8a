// SPDX-License-Identifier: Apache-2.0

package cli_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/cli"
	"github.com/metrale/gpurt/internal/cli/clitest"
	"github.com/metrale/gpurt/internal/testutil"
)

// demo is a command built on cli, as the commands are.
func demo(args []string, stdout, stderr io.Writer) int {
	f := cli.New("demo", "[flags] [FILE]", "demo does nothing.", stdout, stderr)
	paths := f.PluginPath()
	n := f.Int("n", 1, "how many")
	internal := f.Bool("internal", false, "not shown")
	f.Hide("internal")
	if st, ok := f.Parse(args, false); !ok {
		return st
	}
	if *n < 1 {
		return f.Usage("-n %d: must be at least 1", *n)
	}
	if *internal {
		return f.Fail(errors.New("demo: internal given"))
	}
	if err := paths.Check(); err != nil {
		return f.Fail(err)
	}
	_, _ = io.WriteString(stdout, paths.String())
	return cli.ExitOK
}

func TestConvention(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "libgpurt_mock.so")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	missing := filepath.Join(dir, "nonexistent")
	cases := append(clitest.Convention(),
		clitest.Case{Name: "bad value", Args: []string{"-n", "x"}, Status: cli.ExitUsage, Stderr: []string{"-n", "parse error"}},
		clitest.Case{Name: "checked value", Args: []string{"-n", "0"}, Status: cli.ExitUsage, Stderr: []string{"demo: -n 0: must be at least 1"}},
		clitest.Case{Name: "stray argument", Args: []string{"now"}, Status: cli.ExitUsage, Stderr: []string{`unexpected argument "now"`}},
		clitest.Case{Name: "runtime error", Args: []string{"-internal"}, Status: cli.ExitError, Stderr: []string{"demo: internal given\n"}},
		clitest.Case{Name: "missing path", Args: []string{"-plugin-path", missing}, Status: cli.ExitError,
			Stderr: []string{"demo: -plugin-path " + missing + ": no such file or folder"}},
		clitest.Case{Name: "paths", Args: []string{"--plugin-path", dir + "::" + file, "-plugin-path", dir}, Status: cli.ExitOK,
			Stdout: []string{dir + ":" + file + ":" + dir}},
	)
	clitest.Check(t, demo, cases)
}

func TestHelpHidesInternalFlags(t *testing.T) {
	stdout, stderr := clitest.RunOK(t, demo, "-h")
	assert.Empty(t, stderr.String())
	out := stdout.String()
	assert.Contains(t, out, "usage: demo [flags] [FILE]\n\ndemo does nothing.\n")
	assert.Contains(t, out, "-n int")
	assert.Contains(t, out, "(default 1)")
	for _, hidden := range append([]string{"internal"}, cli.OldPluginFlags...) {
		assert.NotContains(t, out, "-"+hidden+"\n", "hidden flag %s shown", hidden)
		assert.NotContains(t, out, "-"+hidden+" ", "hidden flag %s shown", hidden)
	}
}

func TestAbortRecover(t *testing.T) {
	run := func(deep func()) (status int, stderr string) {
		var out, errb bytes.Buffer
		f := cli.New("demo", "", "", &out, &errb)
		status = func() (st int) {
			defer f.Recover(&st)
			deep()
			return cli.ExitOK
		}()
		return status, errb.String()
	}
	st, msg := run(func() { cli.Abort(errors.New("buffer_alloc: out of memory")) })
	assert.Equal(t, cli.ExitError, st)
	assert.Equal(t, "demo: buffer_alloc: out of memory\n", msg)
	st, msg = run(func() {})
	assert.Equal(t, cli.ExitOK, st)
	assert.Empty(t, msg)
	assert.PanicsWithValue(t, "other", func() { run(func() { panic("other") }) })
}

// Runtime's Open checks -plugin-path, opens the runtime of -backend with
// the config's other fields and returns device 0.
func TestRuntimeOpen(t *testing.T) {
	open := func(args ...string) (*core.Runtime, *core.Device, error) {
		var out bytes.Buffer
		f := cli.New("demo", "", "", &out, &out)
		rf := f.Runtime("mock", "backend")
		_, ok := f.Parse(args, false)
		require.True(t, ok, out.String())
		return rf.Open(core.Config{PluginOptions: "devices=2"})
	}
	missing := filepath.Join(t.TempDir(), "nonexistent")
	_, _, err := open("-plugin-path", missing)
	require.EqualError(t, err, "-plugin-path "+missing+": no such file or folder")
	rt, dev, err := open("-plugin-path", testutil.MockPlugin(t))
	require.NoError(t, err)
	defer rt.Close()
	assert.Equal(t, "mock", rt.Backend())
	assert.Len(t, rt.Devices(), 2)
	assert.Equal(t, 0, dev.Index())
	_, _, err = open("-plugin-path", testutil.MockPlugin(t), "-backend", "nosuch")
	assert.ErrorIs(t, err, core.ErrUnknownBackend)
}
