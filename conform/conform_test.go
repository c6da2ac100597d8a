// SPDX-License-Identifier: Apache-2.0

package conform_test

import (
	"context"
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
	dir := testutil.MockPlugin(t)
	cfg := core.Config{PluginPaths: []string{dir}, Backend: "mock", PluginOptions: "devices=2"}
	rt, err := core.Open(cfg)
	require.NoError(t, err)
	defer rt.Close()
	res := conform.Run(context.Background(), rt, conform.Options{
		Quick:       testing.Short(),
		Seed:        1,
		OpenRuntime: func() (*core.Runtime, error) { return core.Open(cfg) },
	})
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
