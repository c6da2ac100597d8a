// SPDX-License-Identifier: Apache-2.0

package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Bad flags are errors naming the flag, before any runtime is opened.
func TestRunBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-preset", "huge"},
		{"-weights", "int4"},
		{"-modes", "fast"},
		{"-steps", "0"},
		{"-batch", "x"},
	} {
		assert.Error(t, run(args), "%v", args)
	}
}
