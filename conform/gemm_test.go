// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/metrale/gpurt/core"
	"github.com/metrale/gpurt/internal/abi"
)

// TestPlanUnsupported: only an unsupported error from plan creation skips
// a GEMM case, with the plugin's message; everything else fails it.
func TestPlanUnsupported(t *testing.T) {
	refused := &core.Error{Code: core.ErrorCode(abi.ErrUnsupported), Op: "gemm_plan_create", Backend: "cuda",
		Message: "bf16 A/B/D with an f32 bias: no cuBLASLt algorithm"}
	for _, tc := range []struct {
		name string
		err  error
		skip bool
	}{
		{"plan create unsupported", refused, true},
		{"wrapped", fmt.Errorf("gemm case: %w", refused), true},
		{"run unsupported", &core.Error{Code: core.ErrorCode(abi.ErrUnsupported), Op: "gemm", Backend: "cuda", Message: "fp8 at run time"}, false},
		{"plan create other error", &core.Error{Code: core.ErrorCode(abi.ErrInternal), Op: "gemm_plan_create", Message: "heuristic failed"}, false},
		{"plan create out of memory", &core.Error{Code: core.ErrorCode(abi.ErrOutOfMemory), Op: "gemm_plan_create"}, false},
		{"not a core error", errors.New("boom"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := planUnsupported(tc.err)
			if !tc.skip {
				assert.Empty(t, r)
				return
			}
			assert.Contains(t, r, "bf16 A/B/D with an f32 bias")
			// runOne reports it as skipped, with the reason.
			c := runOne(&env{}, check{"gemm/x", func(*env) error { return skip("%s", r) }})
			assert.True(t, c.Skipped)
			assert.False(t, c.Passed)
			assert.Contains(t, c.Message, "f32 bias")
		})
	}
}
