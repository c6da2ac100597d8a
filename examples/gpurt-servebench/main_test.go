// SPDX-License-Identifier: Apache-2.0

package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/metrale/gpurt/internal/cli/clitest"
	"github.com/metrale/gpurt/internal/testutil"
)

// TestConvention: the CLI convention of internal/cli, and this program's
// usage and setup errors.
func TestConvention(t *testing.T) {
	clitest.CheckCommand(t, run,
		clitest.Usage("preset", `-preset "70b": want tiny, 1b or 8b`, "-preset", "70b"),
		clitest.Usage("rates", `-rates: "x" is not a number >= 0`, "-rates", "1,x"),
		clitest.Usage("prompt", `-prompt: "9-3": want MIN-MAX`, "-prompt", "9-3"),
		clitest.Usage("batch", "max batch 0", "-max-batch", "0"),
		clitest.Usage("stray argument", `unexpected argument "now"`, "now"),
		clitest.MissingPluginPath(),
	)
}

// TestMockSweep: the whole program on the mock, auto rates: the offline
// run, then two rate points, every line JSON, each result complete.
func TestMockSweep(t *testing.T) {
	out, _ := clitest.RunOnMock(t, run, "-preset", "tiny", "-requests", "8",
		"-sweep-requests", "4", "-prompt", "5-30", "-output", "2-6", "-shared", "32", "-token-budget", "24", "-max-batch", "4",
		"-chunk", "16", "-copy-mib", "2", "-fractions", "0.5,2")
	kinds := map[string]int{}
	for _, m := range testutil.JSONLines[map[string]any](t, out) {
		k, _ := m["kind"].(string)
		kinds[k]++
		if k == "serve" {
			assert.Positive(t, m["output_tokens_per_s"])
			assert.Equal(t, m["kv_pages"], m["kv_pages_free_at_end"])
		}
	}
	assert.Equal(t, map[string]int{"env": 1, "bandwidth": 1, "model": 1, "serve": 3, "pool": 1}, kinds)
}
