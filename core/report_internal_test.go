// SPDX-License-Identifier: Apache-2.0

package core

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/metrale/gpurt/core/diag"
	"github.com/metrale/gpurt/core/internal/loader"
)

// TestReportMirrorsLoader: every field of the loader's report and
// candidate has a public twin of the same name, so a field the loader
// gains is not silently dropped by reportOf (diag.ProbedDevice is converted
// from loader.Device, which the compiler checks).
func TestReportMirrorsLoader(t *testing.T) {
	for _, pair := range [][2]any{{loader.Report{}, diag.Report{}}, {loader.Candidate{}, diag.Candidate{}}} {
		in, pub := reflect.TypeOf(pair[0]), reflect.TypeOf(pair[1])
		for i := range in.NumField() {
			f := in.Field(i)
			g, ok := pub.FieldByName(f.Name)
			if assert.True(t, ok, "core.%s lacks loader.%s.%s", pub.Name(), in.Name(), f.Name) {
				assert.Equal(t, f.Tag.Get("json"), g.Tag.Get("json"), "%s.%s json name", pub.Name(), f.Name)
			}
		}
		assert.Equal(t, in.NumField(), pub.NumField(), "core.%s has fields the loader does not fill", pub.Name())
	}
	// and reportOf copies them
	lr := &loader.Report{Requested: "auto", Searched: []string{"/a"}, Selected: "/a/x", Backend: "mock",
		Candidates: []loader.Candidate{{Path: "/a/x", Backend: "mock", Version: "1", ABI: "1.2", Priority: 100,
			Score: 5, State: loader.StateSelected, Reason: "r", Detail: "d", Devices: []loader.Device{{Name: "cpu", MemoryTotal: 9}}}}}
	r := reportOf(lr)
	assert.Equal(t, diag.Candidate{Path: "/a/x", Backend: "mock", Version: "1", ABI: "1.2", Priority: 100, Score: 5,
		State: diag.StateSelected, Reason: "r", Detail: "d", Devices: []diag.ProbedDevice{{Name: "cpu", MemoryTotal: 9}}}, r.Candidates[0])
	assert.Equal(t, []string{"/a"}, r.Searched)
	assert.Equal(t, "/a/x", r.Selected)
}
