// SPDX-License-Identifier: Apache-2.0

package conform

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/metrale/gpurt/internal/abi"
)

// TestEverySlotHasAConformanceCheck fails, naming the slot, when a slot of
// the table (abi.API, generated from the header) has no entry in
// slotChecks, or its entry names no check of the suite: a new operation
// needs its conformance checks (CONTRIBUTING.md, step 12).
func TestEverySlotHasAConformanceCheck(t *testing.T) {
	var names []string
	for _, c := range checks() {
		names = append(names, c.name)
	}
	api := reflect.TypeOf(abi.API{})
	seen := map[string]bool{}
	for i := 3; i < api.NumField(); i++ { // after struct_size, abi_major, abi_minor
		slot := api.Field(i).Tag.Get("c")
		seen[slot] = true
		want, ok := slotChecks[slot]
		if !assert.True(t, ok, "slot %s has no conformance check: add conform/<op>.go, register it in checks() (conform.go) and name it in slotChecks", slot) || want == "" {
			continue
		}
		found := false
		for _, n := range names {
			found = found || n == want || strings.HasPrefix(n, strings.TrimSuffix(want, "/")+"/")
		}
		assert.True(t, found, "slot %s: slotChecks names %q, which is no check of the suite", slot, want)
	}
	for slot := range slotChecks {
		assert.True(t, seen[slot], "slotChecks names %s, which is no slot of gpurt_api", slot)
	}
}
