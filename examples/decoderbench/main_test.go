// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/cli"
	"github.com/metrale/gpurt/internal/cli/clitest"
	"github.com/metrale/gpurt/internal/testutil"
)

// The decoder on the mock, both modes: positive tokens/s as JSON lines,
// and the same metrics in the Go benchmark format in the -benchfmt file.
func TestDecoderOnMock(t *testing.T) {
	testutil.QuietEnv(t)
	bf := filepath.Join(t.TempDir(), "bench.txt")
	stdout, _ := clitest.RunOnMock(t, run, "-json", "-benchfmt", bf, "-preset", "tiny",
		"-steps", "2", "-warmup", "1")
	seen := map[string]float64{}
	for _, m := range testutil.JSONLines[struct {
		Metric string  `json:"metric"`
		Value  float64 `json:"value"`
	}](t, stdout) {
		seen[m.Metric] = m.Value
	}
	assert.Greater(t, seen["decoder_eager_tokens_per_s"], 0.0)
	assert.Greater(t, seen["decoder_graph_tokens_per_s"], 0.0)
	assert.Greater(t, seen["decoder_eager_step_us"], 0.0)
	assert.Greater(t, seen["decoder_graph_step_us"], 0.0)
	b, err := os.ReadFile(bf)
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^BenchmarkDecoder_eager_tokens_per_s-\d+\t1\t[0-9.e+]+ tokens/s$`, string(b))
	assert.Regexp(t, `(?m)^BenchmarkDecoder_graph_step_us-\d+\t1\t[0-9.e+]+ ns/op$`, string(b))

	// The table: a header line and one line per mode.
	stdout, _ = clitest.RunOnMock(t, run, "-steps", "1", "-warmup", "0")
	assert.Contains(t, stdout.String(), "decoder tiny on mock: batch 1, context 0, 1 decode steps")
	assert.Regexp(t, `(?m)^  eager +\d`, stdout.String())
	assert.Regexp(t, `(?m)^  graph +\d`, stdout.String())
}

// The CLI convention; bad sizes are usage errors naming the flag, before
// a runtime is opened; --options reaches the plugin.
func TestConvention(t *testing.T) {
	testutil.QuietEnv(t)
	m := clitest.MockArgs(t)
	// usage: a usage error on the mock.
	usage := func(name, want string, args ...string) clitest.Case {
		return clitest.Usage(name, want, append(append([]string{}, m...), args...)...)
	}
	clitest.CheckCommand(t, run,
		usage("stray argument", `unexpected argument "now"`, "now"),
		usage("not a preset", `-preset "huge": not a preset`, "-preset", "huge"),
		usage("steps 0", "-steps 0: want 1 to", "-steps", "0"),
		usage("batch 0", "-batch 0: want 1 to 4096", "-batch", "0"),
		usage("warmup negative", "-warmup -1: want 0 to", "-warmup", "-1"),
		usage("huge ctx", "-ctx 9223372036854775000: want 0 to 1048576", "-ctx", "9223372036854775000"),
		usage("ctx and steps together", "together at most 1048576 tokens", "-ctx", "1048000", "-steps", "1000"),
		usage("json and benchfmt on stdout", "-json and -benchfmt -", "-json", "-benchfmt", "-"),
		usage("unknown backend", "unknown backend", "-backend", "nonesuch"),
		clitest.MissingPluginPath(),
		clitest.Case{Name: "honours -options", Args: append([]string{"-options", "devices=x"}, m...),
			Status: cli.ExitError, Stderr: []string{"devices"}},
	)
	// no negative number anywhere in a bounded message
	_, _, stderr := clitest.Run(run, append([]string{"-ctx", "9223372036854775000", "-steps", "1000"}, m...)...)
	assert.NotContains(t, stderr.String(), "-9", "no overflow into a negative count")
	assert.NotContains(t, stderr.String(), "pages")
}
