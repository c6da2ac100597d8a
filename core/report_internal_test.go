// SPDX-License-Identifier: Apache-2.0

package core

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/internal/loader"
)

// TestReportOfCopies: reportOf copies every field of the loader's report
// (its types are diag's) and shares no slice with it.
func TestReportOfCopies(t *testing.T) {
	lr := &loader.Report{Requested: "auto", Searched: []string{"/a"}, Selected: "/a/x", Backend: "mock",
		Candidates: []loader.Candidate{{Path: "/a/x", Backend: "mock", Version: "1", ABI: "1.2", Priority: 100,
			Score: 5, State: loader.StateSelected, Reason: "r", Detail: "d", Devices: []loader.Device{{Name: "cpu", MemoryTotal: 9}}}}}
	r := reportOf(lr)
	assert.Equal(t, diag.Candidate{Path: "/a/x", Backend: "mock", Version: "1", ABI: "1.2", Priority: 100, Score: 5,
		State: diag.StateSelected, Reason: "r", Detail: "d", Devices: []diag.ProbedDevice{{Name: "cpu", MemoryTotal: 9}}}, r.Candidates[0])
	assert.Equal(t, []string{"/a"}, r.Searched)
	assert.Equal(t, "/a/x", r.Selected)
	r.Searched[0], r.Candidates[0].Devices[0].Name = "/b", "gpu"
	assert.Equal(t, "/a", lr.Searched[0])
	assert.Equal(t, "cpu", lr.Candidates[0].Devices[0].Name)
	assert.Equal(t, []diag.Candidate{}, reportOf(&loader.Report{}).Candidates, "an empty list, not null, in JSON")
}
