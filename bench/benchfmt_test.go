// SPDX-License-Identifier: Apache-2.0

package bench_test

import (
	"bufio"
	"bytes"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/bench"
)

// The Go benchmark format, strictly
// (https://go.googlesource.com/proposal/+/master/design/14313-benchmark-format.md
// and golang.org/x/perf/benchfmt): a configuration line is a key that
// starts with a lower-case letter and holds no space or upper-case letter,
// a colon, a value; a result line is "Benchmark" followed by a capital (or
// nothing), the name's -procs suffix, an iteration count, then value-unit
// pairs, the unit without spaces.
var (
	benchConfig = regexp.MustCompile(`^[a-z][^\s:A-Z]*: \S.*$`)
	benchResult = regexp.MustCompile(`^Benchmark([A-Z][^\s]*)?-[1-9][0-9]*\s+[1-9][0-9]*(\s+\S+\s+\S+)+$`)
)

// checkBenchfmt parses out as benchstat would and returns each name's
// value and unit.
func checkBenchfmt(t *testing.T, out string) map[string][2]string {
	t.Helper()
	got := map[string][2]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	inResults := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case benchResult.MatchString(line):
			inResults = true
			f := strings.Fields(line)
			require.Len(t, f, 4, "one value-unit pair: %q", line)
			v, err := strconv.ParseFloat(f[2], 64)
			require.NoError(t, err, "value of %q", line)
			assert.False(t, math.IsNaN(v) || math.IsInf(v, 0), line)
			got[f[0]] = [2]string{f[2], f[3]}
		case benchConfig.MatchString(line):
			assert.False(t, inResults, "configuration after the results: %q", line)
		default:
			t.Errorf("neither a configuration nor a result line: %q", line)
		}
	}
	return got
}

func TestWriteBenchfmt(t *testing.T) {
	base := 2.0
	rep := &bench.Report{Backend: "mock", Plugin: "/x/libgpurt_mock.so", ABI: "1.6", Device: "device 0: mock  device",
		Results: []bench.Result{
			{Metric: "dispatch_ns", Value: 112.5, Unit: "ns/op", Baseline: &base},
			{Metric: "launch_us", Value: 4.25, Unit: "us"},
			{Metric: "startup_ms", Value: 12, Unit: "ms"},
			{Metric: "htod_pinned_gbps", Value: 3.5, Unit: "GB/s", Bytes: 64 << 10},
			{Metric: "launches_per_s", Value: 1e5, Unit: "1/s"},
			{Metric: "dispatch_allocs", Value: 0, Unit: "allocs/op"},
			{Metric: "decoder_eager_tokens_per_s", Value: 99.5, Unit: "tokens/s"},
			{Metric: "opcache hits", Value: 3, Unit: ""},
			{Metric: "nan", Value: math.NaN(), Unit: "us"},
		}}
	var b bytes.Buffer
	require.NoError(t, rep.WriteBenchfmt(&b, 8))
	got := checkBenchfmt(t, b.String())
	assert.Equal(t, map[string][2]string{
		"BenchmarkDispatch_ns-8":                 {"112.5", "ns/op"},
		"BenchmarkLaunch_us-8":                   {"4250", "ns/op"},
		"BenchmarkStartup_ms-8":                  {"1.2e+07", "ns/op"},
		"BenchmarkHtod_pinned_gbps/size=64KiB-8": {"3.5e+09", "B/s"},
		"BenchmarkLaunches_per_s-8":              {"100000", "1/s"},
		"BenchmarkDispatch_allocs-8":             {"0", "allocs/op"},
		"BenchmarkDecoder_eager_tokens_per_s-8":  {"99.5", "tokens/s"},
		"BenchmarkOpcache_hits-8":                {"3", "count"},
	}, got)
	assert.Contains(t, b.String(), "backend: mock\n")
	assert.Contains(t, b.String(), "device: device 0: mock device\n", "spaces in a value are kept, runs squeezed")
}

// The report of a real run, in the format, parses line by line.
func TestBenchfmtOfARun(t *testing.T) {
	opts := quickOnMock(t)
	opts.Sizes = []int{64 << 10}
	rep, err := bench.Run(opts)
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, rep.WriteBenchfmt(&b, 2))
	got := checkBenchfmt(t, b.String())
	assert.Contains(t, got, "BenchmarkDispatch_ns-2")
	assert.Contains(t, got, "BenchmarkHtod_pinned_gbps/size=64KiB-2")
	assert.Equal(t, len(rep.Results), len(got), "one line per figure")
}
