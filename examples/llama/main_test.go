// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"errors"
	"flag"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Bad flags are usage errors naming the flag, before any runtime is opened.
func TestRunBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-preset", "huge"}, "-preset"},
		{[]string{"-weights", "int4"}, "-weights"},
		{[]string{"-modes", "fast"}, "-modes"},
		{[]string{"-steps", "0"}, "-steps"},
		{[]string{"-batch", "x"}, "-batch"},
		{[]string{"-plugin-dir", "build"}, "use -plugin-path"},
		{[]string{"-plugins", "build"}, "use -plugin-path"},
		{[]string{"-model", "dir", "-preset", "1b"}, "-preset sets seeded weights"},
		{[]string{"-prompt", "4", "-prompt-ids", "1,2"}, "exclude each other"},
		{[]string{"-prompt-ids", "1,x"}, "-prompt-ids"},
		{[]string{"-logits-n", "3"}, "-logits-n is ignored without -logits"},
		{[]string{"-top-k", "3"}, "-top-k is ignored"},
		{[]string{"-temperature", "1", "-top-p", "2"}, "-top-p"},
		{[]string{"-progress", "fancy"}, "-progress"},
		{[]string{"-batch", "1,2", "-logits-out", "x.f32"}, "{batch}"},
		{[]string{"-batch", "2", "-prompt-ids", "1;2;3"}, ""},
		{[]string{"-nope"}, "-nope"},
		{[]string{"stray"}, "unexpected argument"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			var o, e bytes.Buffer
			err := run(tc.args, &o, &e)
			if tc.want == "" { // three prompts for a batch of 2: fine (the first two)
				var ue usageError
				assert.False(t, errors.As(err, &ue), "%v", err)
				return
			}
			var ue usageError
			if assert.True(t, errors.As(err, &ue), "%v: %v", tc.args, err) {
				assert.Contains(t, err.Error(), tc.want)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	var o, e bytes.Buffer
	err := run([]string{"-h"}, &o, &e)
	assert.True(t, errors.Is(err, flag.ErrHelp))
	assert.Contains(t, o.String(), "-plugin-path")
	assert.Contains(t, o.String(), "-model")
	assert.Empty(t, e.String())
}
