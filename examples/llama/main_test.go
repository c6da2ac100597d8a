// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/cli"
	"github.com/metrale/gpurt/internal/cli/clitest"
	"github.com/metrale/gpurt/internal/testutil"
	"github.com/metrale/gpurt/internal/tinyckpt"
)

// The CLI convention, and bad flags as usage errors naming the flag,
// before any runtime is opened.
func TestRunFlags(t *testing.T) {
	clitest.CheckCommand(t, run,
		clitest.Case{Name: "help names -model", Args: []string{"-h"}, Status: cli.ExitOK, Stdout: []string{"-model", "-prompt-ids", "-logits-out"}},
		clitest.Usage("preset", "-preset", "-preset", "huge"),
		clitest.Usage("weights", "-weights", "-weights", "int4"),
		clitest.Usage("modes", "-modes", "-modes", "fast"),
		clitest.Usage("steps", "-steps", "-steps", "0"),
		clitest.Usage("batch", "-batch", "-batch", "x"),
		clitest.Usage("seeded flag with -model", "-preset sets seeded weights", "-model", "dir", "-preset", "1b"),
		clitest.Usage("two prompt sources", "exclude each other", "-prompt", "4", "-prompt-ids", "1,2"),
		clitest.Usage("bad prompt ids", "-prompt-ids", "-prompt-ids", "1,x"),
		clitest.Usage("logits-n without logits", "-logits-n is ignored without -logits", "-logits-n", "3"),
		clitest.Usage("top-k without temperature", "-top-k is ignored", "-top-k", "3"),
		clitest.Usage("top-p out of range", "-top-p", "-temperature", "1", "-top-p", "2"),
		clitest.Usage("progress", "-progress", "-progress", "fancy"),
		clitest.Usage("logits-out without {batch}", "{batch}", "-batch", "1,2", "-logits-out", "x.f32"),
		clitest.Usage("too few prompts", "2 prompts for a batch of 3", "-batch", "3", "-prompt-ids", "1;2"),
		clitest.Usage("stray argument", "unexpected argument", "stray"),
		// a setup error, not a usage one: exit 1
		clitest.Case{Name: "missing model", Args: append([]string{"-model", "/nonexistent/model"}, clitest.MockArgs(t)...), Status: cli.ExitError, Stderr: []string{"llama: llm: model config: ", "config.json"}},
	)
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
	o, e := clitest.RunOnMock(t, run, "-model", dir, "-batch", "1,2",
		"-prompt-ids", "1,2,3,4;5,6", "-force-file", force, "-steps", "4", "-warmup", "1", "-logits-out", lo, "-progress", "line")
	assert.Contains(t, e.String(), "llama: loaded "+dir)
	kinds := map[string]int{}
	var steps []map[string]any
	for _, m := range testutil.JSONLines[map[string]any](t, o) {
		kinds[m["kind"].(string)]++
		if m["kind"] == "step" {
			steps = append(steps, m)
		}
		if m["kind"] == "summary" { // the host time per step and, of it, the graph launch and the attention plan
			host, launch, plan := m["host_us_per_step"].(float64), m["host_launch_us_per_step"].(float64), m["host_plan_us_per_step"].(float64)
			assert.Positive(t, plan, m)
			if m["mode"] == "graph" {
				assert.Positive(t, launch, m)
			} else {
				assert.Zero(t, launch, m)
			}
			assert.LessOrEqual(t, launch+plan, host*(1+1e-9), m)
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
}

// -weights int8-all quantizes the LM head too: the run reports it, and the
// graph replays give eager's tokens at every step.
func TestInt8AllOnMock(t *testing.T) {
	o, _ := clitest.RunOnMock(t, run, "-preset", "tiny", "-weights", "int8-all", "-batch", "2", "-steps", "3", "-modes", "eager,graph", "-progress", "none")
	tokens := map[string][]any{}
	summaries := 0
	for _, m := range testutil.JSONLines[map[string]any](t, o) {
		switch m["kind"] {
		case "step":
			tokens[m["mode"].(string)] = append(tokens[m["mode"].(string)], m["tokens"])
		case "summary":
			summaries++
			assert.Equal(t, "int8-all", m["weights"], m)
		}
	}
	assert.Equal(t, 2, summaries)
	require.Len(t, tokens["eager"], 3)
	assert.Equal(t, tokens["eager"], tokens["graph"])
}
