// SPDX-License-Identifier: Apache-2.0

package core_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/inspect"
	"github.com/metrale/gpurt/internal/abi"
	"github.com/metrale/gpurt/internal/testutil"
)

// onlyMock is a Config that searches the mock's folder alone: the
// environment's plugin path and backend are cleared.
func onlyMock(t *testing.T) core.Config {
	t.Setenv("GPURT_PLUGIN_PATH", "")
	t.Setenv("GPURT_BACKEND", "")
	return core.Config{PluginPaths: []string{testutil.MockPluginPath(t)}}
}

// TestBackendSentinels: a user matches the three backend-choice failures
// with errors.Is and reads the report from the *Error.
func TestBackendSentinels(t *testing.T) {
	tests := []struct {
		name     string
		cfg      func(t *testing.T) core.Config
		sentinel error
		code     string // the code's name
		text     string
	}{
		{"no backend", func(t *testing.T) core.Config {
			cfg := onlyMock(t)
			cfg.NoMockFallback = true
			return cfg
		}, core.ErrNoBackend, "no usable backend", "gpurt: open: no usable backend (put libgpurt_<backend>"},
		{"requested backend missing", func(t *testing.T) core.Config {
			cfg := onlyMock(t)
			cfg.Backend = "cuda"
			return cfg
		}, core.ErrBackendUnavailable, "backend unavailable", `gpurt: open: backend "cuda" requested (Config.Backend) cannot run here`},
		{"unknown backend", func(t *testing.T) core.Config {
			cfg := onlyMock(t)
			cfg.Backend = "vulkan"
			return cfg
		}, core.ErrUnknownBackend, "unknown backend", `gpurt: open: unknown backend "vulkan" (from Config.Backend); valid values: auto, cuda, metal, mock`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg(t)
			rt, err := core.Open(cfg)
			require.Nil(t, rt)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.sentinel)
			for _, other := range []error{core.ErrNoBackend, core.ErrBackendUnavailable, core.ErrUnknownBackend} {
				if other != tt.sentinel {
					assert.NotErrorIs(t, err, other)
				}
			}
			assert.True(t, strings.HasPrefix(err.Error(), tt.text), "%q does not start with %q", err.Error(), tt.text)
			assert.NotContains(t, err.Error(), "Options.", "no internal names")
			var ce *core.Error
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tt.code, ce.Code.String())
			assert.Equal(t, "open", ce.Op)
			require.NotNil(t, ce.Report)
			assert.Len(t, ce.Report.Candidates, 1)

			rep, perr := inspect.Probe(cfg)
			assert.ErrorIs(t, perr, tt.sentinel)
			require.NotNil(t, rep)
			assert.Len(t, rep.Candidates, 1)
		})
	}
}

// TestClosedFreedFamily: ErrClosed and ErrFreed are *Error codes, matched
// with errors.Is, and their text says it once.
func TestClosedFreedFamily(t *testing.T) {
	rt := openMock(t, "")
	d := dev0(t, rt)
	b, err := d.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, b.Free())
	err = b.Free()
	require.ErrorIs(t, err, core.ErrFreed)
	assert.NotErrorIs(t, err, core.ErrClosed)
	assert.Equal(t, "gpurt: buffer_free: buffer was freed", err.Error())
	var ce *core.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "freed", ce.Code.String())
	assert.Empty(t, ce.Backend, "raised by the core")

	s, err := d.NewStream()
	require.NoError(t, err)
	require.NoError(t, s.Close())
	err = s.Synchronize()
	require.ErrorIs(t, err, core.ErrClosed)
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "closed", ce.Code.String())
	assert.Equal(t, "gpurt: stream_synchronize: stream is closed", err.Error())
}

// TestErrorText: the text of each kind of *Error.
func TestErrorText(t *testing.T) {
	tests := []struct {
		err  core.Error
		want string
	}{
		{core.Error{Op: "buffer_alloc", Code: core.ErrorCode(abi.ErrOutOfMemory), Message: "1 TiB asked, 80 GiB free", Backend: "cuda", VendorCode: 2},
			"gpurt: cuda: buffer_alloc: out of memory: 1 TiB asked, 80 GiB free (vendor code 2)"},
		{core.Error{Op: "copy", Code: core.ErrorCode(abi.ErrInvalidArgument)}, "gpurt: copy: invalid argument"},
		{core.Error{Op: "stream_query", Code: 1001 /* closed: a code only the core raises */, Message: "stream is closed"}, "gpurt: stream_query: stream is closed"},
		{core.Error{Code: 77, Message: "new"}, "gpurt: code 77: new"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.err.Error())
		})
	}
	unknown := &core.Error{Code: 77}
	assert.ErrorIs(t, unknown, core.ErrInternal, "an unknown code matches ErrInternal")
}

// TestPluginErrorIsCoreError: an error the plugin reports is a *core.Error
// naming the backend.
func TestPluginErrorIsCoreError(t *testing.T) {
	rt := openMock(t, "")
	err := inspect.Control(rt, "no_such_control", 1)
	require.Error(t, err)
	var ce *core.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "mock", ce.Backend)
	assert.Equal(t, "runtime_control", ce.Op)
	assert.True(t, strings.HasPrefix(err.Error(), "gpurt: mock: runtime_control: "), err.Error())
}

// TestBackendsListsFound: Backends lists the backend of every plugin file
// found, built-in or not, and such a backend can be asked for by name.
func TestBackendsListsFound(t *testing.T) {
	cfg := onlyMock(t)
	// A copy of the mock under another name: its plugin_info still says
	// "mock", so the loader refuses it, but the name is found and listed.
	name := "libgpurt_rocm" + testutil.PluginExt()
	dir := testutil.PrivateCopy(t, name, testutil.MockPluginBytes(t))
	other := filepath.Join(dir, name)
	cfg.PluginPaths = append(cfg.PluginPaths, dir)
	got, err := inspect.Backends(cfg)
	require.NoError(t, err)
	assert.Equal(t, []string{"mock", "rocm"}, got)

	cfg.Backend = "rocm"
	rep, err := inspect.Probe(cfg)
	require.Error(t, err)
	assert.ErrorIs(t, err, core.ErrBackendUnavailable, "a known name now, not ErrUnknownBackend")
	require.NotNil(t, rep)
	var found bool
	for _, c := range rep.Candidates {
		if c.Path == other {
			found = true
			assert.Equal(t, diag.StateFailed, c.State)
			assert.Contains(t, c.Reason, `file name says backend "rocm" but the plugin says "mock"`)
		}
	}
	assert.True(t, found)

	cfg.LogLevel = "loud"
	_, err = inspect.Backends(cfg)
	assert.ErrorIs(t, err, core.ErrInvalidArgument)
}

// TestGoDocShowsFields: the public vocabulary is made of real types whose
// fields `go doc` shows (not aliases of internal types).
func TestGoDocShowsFields(t *testing.T) {
	for sym, fields := range map[string][]string{
		"core.Error":     {"Op string", "Code ErrorCode", "Message string", "Backend string", "VendorCode int64", "Report *diag.Report"},
		"diag.Report":    {"Requested string", "Candidates []Candidate", "Selected string"},
		"diag.Candidate": {"State CandidateState", "Reason string", "Devices []ProbedDevice"},
	} {
		pkg, name, _ := strings.Cut(sym, ".")
		path := "github.com/metrale/gpurt/core"
		if pkg != "core" {
			path += "/" + pkg
		}
		out := testutil.Go(t, "", nil, "doc", path, name)
		assert.NotContains(t, string(out), "type "+name+" = ", "%s is an alias:\n%s", sym, out)
		for _, f := range fields {
			assert.Regexp(t, `\n\s+`+strings.ReplaceAll(strings.ReplaceAll(f, "[", `\[`), "*", `\*`), string(out), "%s: field %s", sym, f)
		}
	}
}
