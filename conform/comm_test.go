// SPDX-License-Identifier: Apache-2.0

package conform_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/conform"
	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/testutil"
)

// TestCommOnMockDevices runs the peer-copy and collective checks on the
// mock with 2, 3 and 8 devices (TestConformanceOnMock runs them with 2
// among the rest). None may skip there: the mock has every 1.6 slot.
func TestCommOnMockDevices(t *testing.T) {
	dir := testutil.MockPlugin(t)
	for _, n := range []int{2, 3, 8} {
		t.Run(fmt.Sprintf("devices=%d", n), func(t *testing.T) {
			cfg := core.Config{PluginPaths: []string{dir}, Backend: "mock", PluginOptions: fmt.Sprintf("devices=%d", n)}
			rt, err := core.Open(cfg)
			require.NoError(t, err)
			defer rt.Close()
			res := conform.Run(context.Background(), rt, conform.Options{
				Quick:       true,
				Seed:        uint64(n),
				Filter:      regexp.MustCompile(`^(comm|peer)/`),
				OpenRuntime: func() (*core.Runtime, error) { return core.Open(cfg) },
			})
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
