// SPDX-License-Identifier: Apache-2.0

package core

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/abi"
)

// Every error code of the header (abi.ErrorCodes, generated from its enum)
// is a core ErrorCode with the header's name and a sentinel: a new code
// that the core does not know fails here (and at init).
func TestEveryABIErrorCodeIsCoreVocabulary(t *testing.T) {
	require.NotEmpty(t, abi.ErrorCodes)
	for _, c := range abi.ErrorCodes {
		t.Run(c.Enum, func(t *testing.T) {
			code := ErrorCode(c.Code)
			assert.Equal(t, c.Name, code.String())
			sentinel := abiSentinels[code]
			require.NotNil(t, sentinel, "no core sentinel for %s", c.Enum)
			assert.True(t, errors.Is(&Error{Code: code}, sentinel))
			assert.Contains(t, (&Error{Code: code, Op: "x", Message: "m"}).Error(), c.Name)
		})
	}
}

// Every slot of the header (abi.API mirrors gpurt_api, and genbind checks
// the mirror) has a caller in the core, its family packages or its loader: a new op mirrored
// in abi but given no Go method fails here, by name.
func TestEverySlotHasACaller(t *testing.T) {
	var src strings.Builder
	for _, glob := range []string{"*.go", "*/*.go", "internal/loader/*.go"} { // core, its family packages, the loader
		files, err := filepath.Glob(glob)
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			src.WriteString(string(b))
		}
	}
	all := src.String()
	// Called by package bind itself, or never (plugins are not unloaded).
	exempt := map[string]bool{"ErrorGet": true, "ErrorDestroy": true, "PluginInfo": true, "Shutdown": true}
	api := reflect.TypeOf(abi.API{})
	for i := 3; i < api.NumField(); i++ { // after struct_size, abi_major, abi_minor
		name := api.Field(i).Name
		t.Run(name, func(t *testing.T) {
			if exempt[name] {
				return
			}
			assert.True(t, strings.Contains(all, "p."+name+"(") || strings.Contains(all, "bind.Slot"+name),
				"slot %s (%s) has no caller in core: add its Go method (CONTRIBUTING.md, step 11)", name, api.Field(i).Tag.Get("c"))
		})
	}
}
