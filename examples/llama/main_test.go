// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
	"github.com/metrale/gpurt/internal/tinyckpt"
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

// The command on a tiny Hugging Face checkpoint on the mock: the load
// line, one step line per step with every request's tokens, teacher
// forcing, and the logits file ([step][request][vocab] f32).
func TestModelOnMock(t *testing.T) {
	dir := t.TempDir()
	sp := tinyckpt.Spec{Family: "qwen2", Layers: 2, Hidden: 128, Heads: 2, KVHeads: 1, Inter: 192, Vocab: 300, Tied: true, Seed: 5}
	_, err := tinyckpt.Write(dir, sp)
	require.NoError(t, err)
	force := filepath.Join(dir, "force.txt")
	require.NoError(t, os.WriteFile(force, []byte("7,8,9\n10,11,12\n"), 0o644))
	lo := filepath.Join(dir, "logits_{batch}_{mode}.f32")
	var o, e bytes.Buffer
	err = run([]string{"-model", dir, "-backend", "mock", "-plugin-path", testutil.MockPlugin(t), "-batch", "1,2",
		"-prompt-ids", "1,2,3,4;5,6", "-force-file", force, "-steps", "4", "-warmup", "1", "-logits-out", lo, "-progress", "line"}, &o, &e)
	require.NoError(t, err, e.String())
	assert.Contains(t, e.String(), "llama: loaded "+dir)
	kinds := map[string]int{}
	var steps []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(o.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		kinds[m["kind"].(string)]++
		if m["kind"] == "step" {
			steps = append(steps, m)
		}
		if m["kind"] == "config" {
			assert.Equal(t, "qwen2", m["family"])
			assert.Equal(t, true, m["qkv_bias"])
		}
	}
	assert.Equal(t, map[string]int{"load": 1, "config": 1, "step": 2 * 2 * 4, "summary": 4}, kinds)
	for b, V := range map[int]int{1: 300, 2: 300} {
		for _, mode := range []string{"eager", "graph"} {
			fi, err := os.Stat(strings.NewReplacer("{batch}", strconv.Itoa(b), "{mode}", mode).Replace(lo))
			require.NoError(t, err)
			assert.Equal(t, int64(4*b*V*4), fi.Size(), "batch %d %s", b, mode)
		}
	}
	// the forced tokens do not change what the picks are computed from at
	// step 0, and eager and graph agree on every step (the mock is
	// deterministic)
	byKey := map[string][]any{}
	for _, s := range steps {
		key := fmt.Sprintf("%v/%v", s["batch"], s["step"])
		if prev, ok := byKey[key]; ok {
			assert.Equal(t, prev, s["tokens"], key)
		}
		byKey[key] = s["tokens"].([]any)
	}
	// a missing model directory is a runtime error (exit 1), not a usage one
	err = run([]string{"-model", filepath.Join(dir, "nope"), "-backend", "mock", "-plugin-path", testutil.MockPlugin(t)}, &o, &e)
	var ue usageError
	assert.ErrorContains(t, err, "config.json")
	assert.False(t, errors.As(err, &ue))
}
