// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/cli"
	"github.com/metrale/gpurt/internal/cli/clitest"
	"github.com/metrale/gpurt/internal/testutil"
)

// TestConvention: the CLI convention of internal/cli, and this program's
// usage and setup errors.
func TestConvention(t *testing.T) {
	clitest.Check(t, func(a []string, o, e *bytes.Buffer) int { return run(a, o, e) }, append(clitest.Convention(),
		clitest.Case{Name: "shrink 0", Args: []string{"-shrink", "0"}, Status: cli.ExitUsage, Stderr: []string{"-shrink 0: want 1 to 2048"}},
		clitest.Case{Name: "shrink huge", Args: []string{"-shrink", "4096"}, Status: cli.ExitUsage, Stderr: []string{"-shrink 4096: want 1 to 2048"}},
		clitest.Case{Name: "only", Args: []string{"-only", "gemx"}, Status: cli.ExitUsage, Stderr: []string{`-only "gemx": want gemv, gemm or grouped`}},
		clitest.Case{Name: "iters", Args: []string{"-iters", "0"}, Status: cli.ExitUsage, Stderr: []string{"-iters 0: want at least 1"}},
		clitest.Case{Name: "stray argument", Args: []string{"now"}, Status: cli.ExitUsage, Stderr: []string{`unexpected argument "now"`}},
		clitest.Case{Name: "missing plugin path", Args: []string{"-plugin-path", "/nonexistent"}, Status: cli.ExitError,
			Stderr: []string{"-plugin-path /nonexistent: no such file or folder"}},
		clitest.Case{Name: "no plugin there", Args: []string{"-plugin-path", t.TempDir(), "-backend", "mock"}, Status: cli.ExitError,
			Stderr: []string{"gpurt-quantbench: "}},
	))
}

// TestShrinkOnMock: every figure's line on the mock, at -shrink 64 (which
// once divided fp8's K below one 128-wide scale block: "size 0") and 256.
func TestShrinkOnMock(t *testing.T) {
	dir := testutil.MockPlugin(t)
	for _, shrink := range []string{"64", "256"} {
		t.Run(shrink, func(t *testing.T) {
			var out, errb bytes.Buffer
			st := run([]string{"-plugin-path", dir, "-backend", "mock", "-shrink", shrink, "-iters", "2"}, &out, &errb)
			require.Equal(t, cli.ExitOK, st, "stderr: %s", errb.String())
			impls := map[string]int{}
			sc := bufio.NewScanner(&out)
			for sc.Scan() {
				var r result
				require.NoError(t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
				if r.Impl == "cuBLASLt per expert" {
					assert.Regexp(t, `^\d+ calls`, r.Note, "an error instead of the calls: %+v", r)
				} else {
					assert.Empty(t, r.Note, "an error instead of a figure: %+v", r)
				}
				assert.Positive(t, r.GPUus, "%+v", r)
				impls[r.Impl]++
			}
			assert.Equal(t, map[string]int{"gpurt int8": 6, "cuBLASLt bf16": 6, "gpurt grouped": 4, "cuBLASLt per expert": 4}, impls)
		})
	}
}
