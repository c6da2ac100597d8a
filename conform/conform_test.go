// SPDX-License-Identifier: Apache-2.0

package conform_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/conform"
	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/testutil"
)

// TestConformanceOnMock runs the whole suite on the mock with two devices
// (for the cross-device checks), each check a subtest.
func TestConformanceOnMock(t *testing.T) {
	res := runOnMock(t, "devices=2", conform.Options{Quick: testing.Short(), Seed: 1, Filter: raceFilter()})
	if raceFilter() != nil {
		for _, c := range res.Checks {
			assert.False(t, strings.HasPrefix(c.Name, "grouped/") || strings.HasPrefix(c.Name, "quant/"), "%s ran under -race -short", c.Name)
		}
		assert.Greater(t, len(res.Checks), 100, "the filter left the other checks")
	}
	for _, c := range res.Checks {
		t.Run(c.Name, func(t *testing.T) {
			if c.Skipped {
				t.Skip(c.Message)
			}
			if !c.Passed {
				t.Error(c.Message)
			}
		})
	}
	// The mock supports every GEMM descriptor: a skipped gemm check there
	// is a bug of the mock, not a backend's honest limit.
	for _, c := range res.Checks {
		if strings.HasPrefix(c.Name, "gemm/") {
			assert.False(t, c.Skipped, "%s skipped on the mock: %s", c.Name, c.Message)
		}
	}
	t.Log(res.Summary())
	require.True(t, res.OK(), res.Summary())
}

// raceFilter: under -race -short (make test's race pass) every check but
// the grouped and quantized GEMMs (grouped/, quant/). Those compare the
// plugin's kernels with float64 references computed on one goroutine:
// under the race detector they took 3 of the suite's 4 minutes and
// exercise no Go code the gemm/ checks do not. make test's plain pass
// (no -race, full sizes) runs them. Elsewhere nil: every check.
func raceFilter() *regexp.Regexp {
	if !raceDetector || !testing.Short() {
		return nil
	}
	// Go's regexp has no negative lookahead: a name matches unless it
	// starts with "grouped/" or "quant/" (spelled out letter by letter).
	return regexp.MustCompile(`^(?:[^gq]|g[^r]|gr[^o]|gro[^u]|grou[^p]|group[^e]|groupe[^d]|grouped[^/]|q[^u]|qu[^a]|qua[^n]|quan[^t]|quant[^/])`)
}

// runOnMock runs the suite with o on a runtime of the mock plugin with
// plugin options options; o.OpenRuntime opens another runtime like it.
func runOnMock(t *testing.T, options string, o conform.Options) *conform.Result {
	t.Helper()
	cfg := core.Config{PluginPaths: []string{testutil.MockPlugin(t)}, Backend: "mock", PluginOptions: options}
	rt, err := core.Open(cfg)
	require.NoError(t, err)
	defer rt.Close()
	o.OpenRuntime = func() (*core.Runtime, error) { return core.Open(cfg) }
	return conform.Run(context.Background(), rt, o)
}

// TestCommOnMockDevices runs the peer-copy and collective checks on the
// mock with 2, 3 and 8 devices (TestConformanceOnMock runs them with 2
// among the rest). None may skip there: the mock has every 1.6 slot.
func TestCommOnMockDevices(t *testing.T) {
	for _, n := range []int{2, 3, 8} {
		t.Run(fmt.Sprintf("devices=%d", n), func(t *testing.T) {
			res := runOnMock(t, fmt.Sprintf("devices=%d", n),
				conform.Options{Quick: true, Seed: uint64(n), Filter: regexp.MustCompile(`^(comm|peer)/`)})
			names := 0
			for _, c := range res.Checks {
				t.Run(c.Name, func(t *testing.T) {
					assert.False(t, c.Skipped, "skipped on the mock: %s", c.Message)
					if !c.Passed && !c.Skipped {
						t.Error(c.Message)
					}
				})
				if c.Name != "leaks" {
					names++
				}
			}
			assert.Greater(t, names, 20, "the comm and peer checks ran")
			require.True(t, res.OK(), res.Summary())
		})
	}
}
