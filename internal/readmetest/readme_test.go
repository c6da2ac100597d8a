// SPDX-License-Identifier: Apache-2.0

package readmetest

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

// command is one command README.md shows, with the line it starts on.
type command struct {
	text string
	line int
}

var (
	fenceRe = regexp.MustCompile("^```\\s*(\\w*)")
	spanRe  = regexp.MustCompile("`([^`]+)`")
	// An inline span is a command when it starts with a program this
	// repository's docs run (optionally after VAR=value assignments) and
	// has an argument (go: a verb and an argument; a bare "go build" is a
	// mention of the tool), or names a script of scripts/ or .ci/ to run.
	spanCmdRe = regexp.MustCompile(`^(?:[A-Z][A-Z0-9_]*=\S*\s+)*(?:(?:make|bash|build/\S+)\s+\S|go\s+(?:-C\s+\S+\s+)?\w+\s+\S|(?:scripts/\S+\.sh|\.ci/run)(?:\s|$))`)
)

// extract returns every command of a README: each line of its sh, bash and
// shell code blocks (comments and comment-only lines dropped) and each
// inline code span that is a command (spans may wrap across lines).
func extract(readme string) []command {
	var cmds []command
	var para []string // lines of the current paragraph outside code blocks
	paraStart := 0
	flush := func() {
		joined := strings.Join(para, " ")
		for _, m := range spanRe.FindAllStringSubmatch(joined, -1) {
			s := strings.Join(strings.Fields(m[1]), " ")
			if spanCmdRe.MatchString(s) {
				cmds = append(cmds, command{text: s, line: paraStart})
			}
		}
		para = para[:0]
	}
	inFence, shell := false, false
	sc := bufio.NewScanner(strings.NewReader(readme))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := fenceRe.FindStringSubmatch(line); m != nil {
			if !inFence {
				flush()
				shell = m[1] == "sh" || m[1] == "bash" || m[1] == "shell"
			}
			inFence = !inFence
			continue
		}
		if inFence {
			if !shell {
				continue
			}
			text, _, _ := strings.Cut(line, "#")
			if text = strings.TrimSpace(text); text != "" {
				cmds = append(cmds, command{text: text, line: n})
			}
			continue
		}
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if len(para) == 0 {
			paraStart = n
		}
		para = append(para, line)
	}
	flush()
	return cmds
}

// What to do with a command.
type action int

const (
	run      action = iota // run it as written (placeholders filled in), exit 0
	synopsis               // a usage line: every flag it names is in the command's -h output
	skip                   // not run here, for the reason given
)

type rule struct {
	re     *regexp.Regexp
	action action
	reason string // why skipped
	want   string // run: a line the output must hold
}

const (
	gpu     = "needs an NVIDIA GPU (scripts/gpu_all.sh runs it on the GPU machine)"
	nvcc    = "needs nvcc and the network (PyPI's CUDA compiler, ~870 MB, or FlashInfer's wheel): make test-cuda builds the CUDA plugin"
	network = "needs the network (a fresh mlx wheel from PyPI)"
	itself  = "is make test, which runs this test"
)

// rules, first match wins. Order matters only where patterns overlap.
var rules = []rule{
	// The GPU machine's scripts and their inputs.
	{re: regexp.MustCompile(`(^|/)gpu_\w+\.sh`), action: skip, reason: gpu},
	{re: regexp.MustCompile(`decodestep\.jsonl`), action: skip,
		reason: "plots decodestep.jsonl, the output of the GPU run (scripts/gpu_decodestep.sh)"},
	// nvcc or the network.
	{re: regexp.MustCompile(`build_cuda\.sh|build_fi_ref\.sh|gen_decodestep_ptx\.sh|CUDA=1|^make gpu-artifacts$|^make test-cuda$`), action: skip, reason: nvcc},
	{re: regexp.MustCompile(`^GPURT_MLX_LIVE=1 `), action: skip, reason: network},
	{re: regexp.MustCompile(`^make dist$|^make dist DIST_FLAGS=|^scripts/dist\.sh$`), action: skip,
		reason: "make test's dist-check step runs scripts/dist.sh (linux/amd64, without the CUDA plugin) twice and checks the archive"},
	// make test itself, its steps that would run this test again, and the
	// long ones it runs as steps.
	{re: regexp.MustCompile(`^make test$|^\.ci/run$`), action: skip, reason: itself},
	{re: regexp.MustCompile(`^go test -race\b.* \./\.\.\.$`), action: skip, reason: "is make test's go-test step, which runs this test"},
	{re: regexp.MustCompile(`^go test \./conform$`), action: skip, reason: "make test's go-test step runs it in full"},
	{re: regexp.MustCompile(`^go test \./core/attention -run FP8 -v$`), action: skip, reason: "make test's go-test step runs core/attention's FP8 tests"},
	{re: regexp.MustCompile(`^scripts/abi_suite\.sh --mock$|^scripts/abi_fuzz\.sh --quick$`), action: skip, reason: "make test's abi-suite step runs it"},
	{re: regexp.MustCompile(`^make fuzz$|^scripts/fuzz_go\.sh( \[REGEXP\])?$`), action: skip,
		reason: "coverage-guided fuzzing, FUZZTIME per target (minutes); make test runs the Go targets' seeds and the C fuzzer's fixed inputs"},
	{re: regexp.MustCompile(`^(bash )?scripts/cuda_emu\.sh`), action: skip,
		reason: "make test-cuda runs it (the CUDA headers come from PyPI with the compiler)"},
	{re: regexp.MustCompile(`^make mock$|^scripts/build_mock\.sh OUTDIR$`), action: skip,
		reason: "make run runs it (make run builds make mock, which runs scripts/build_mock.sh build)"},
	{re: regexp.MustCompile(`^scripts/dist_check\.sh$`), action: skip, reason: "make test's dist-check step runs it"},
	{re: regexp.MustCompile(`^scripts/test_cpu\.sh$`), action: skip, reason: "runs make test's steps again in a fresh clone, to measure them"},
	{re: regexp.MustCompile(`^go test (\./[\w/.]+ )?-bench `), action: skip,
		reason: "benchmarks (minutes); make test runs these packages' tests"},
	// macOS only.
	{re: regexp.MustCompile(`build_metal\.sh`), action: skip, reason: "needs macOS (Xcode's Metal toolchain)"},
	// Usage synopses: [optional] parts.
	{re: regexp.MustCompile(`^build/gpurt \w+ .*\[`), action: synopsis},
	// Run as written.
	{re: regexp.MustCompile(`^make run$`), action: run, want: "== build/gpurt bench --quick"},
	{re: regexp.MustCompile(`^make (cuda|metal|cgobench)$`), action: run},
	{re: regexp.MustCompile(`^build/gpurt version$`), action: run, want: "abi "},
	{re: regexp.MustCompile(`^scripts/version\.sh$`), action: run, want: "v"},
	{re: regexp.MustCompile(`^scripts/mod_check\.sh$`), action: run, want: "mod_check: ok"},
	{re: regexp.MustCompile(`^go list -m all$`), action: run, want: "github.com/ebitengine/purego"},
	{re: regexp.MustCompile(`^go run \./internal/cmd/genbind -check$`), action: run},
	{re: regexp.MustCompile(`^bash scripts/abi_suite\.sh PLUGIN$`), action: run, want: " 0 failed"},
	{re: regexp.MustCompile(`^gofmt -l$|^go vet \./\.\.\.$|^CGO_ENABLED=0 go build (-o build/gpurt )?\./(cmd/gpurt|\.\.\.)$`), action: run},
	{re: regexp.MustCompile(`^go test -run Layout \./internal/abi/$`), action: run, want: "ok"},
	{re: regexp.MustCompile(`^GPURT_PLUGIN_PATH=\$PWD/build go -C examples run \./llama `), action: run, want: `"tokens"`},
	{re: regexp.MustCompile(`^GPURT_PLUGIN_PATH=\$PWD/build go -C examples run \./decoderbench `), action: run, want: "decoder tiny on mock"},
}

func classify(cmd string) (rule, bool) {
	for _, r := range rules {
		if r.re.MatchString(cmd) {
			return r, true
		}
	}
	return rule{}, false
}

func TestExtract(t *testing.T) {
	readme := "# t\n\n```sh\nmake run    # a comment\n            # more comment\nmake test\n```\n\n" +
		"Text with `make mock` and `build/gpurt` and\n`GPURT_PLUGIN_PATH=$PWD/build go -C\nexamples run ./llama -steps 8` too.\n\n" +
		"```go\nrt, err := core.Open(core.Config{})\n```\n\n`scripts/gpu_check.sh` and `scripts/x.py`.\n"
	got := extract(readme)
	want := []command{
		{"make run", 4}, {"make test", 6},
		{"make mock", 9}, {"GPURT_PLUGIN_PATH=$PWD/build go -C examples run ./llama -steps 8", 9},
		{"scripts/gpu_check.sh", 17},
	}
	assert.Equal(t, want, got)
}

func TestRules(t *testing.T) {
	cases := []struct {
		cmd    string
		action action
		known  bool
	}{
		{"make run", run, true},
		{"make test", skip, true},
		{"bash scripts/gpu_all.sh [check conform]", skip, true},
		{"build/gpurt probe [--json]", synopsis, true},
		{"scripts/build_cuda.sh OUTDIR", skip, true},
		{"scripts/build_mock.sh OUTDIR", skip, true},
		{"bash scripts/abi_suite.sh PLUGIN", run, true},
		{"GPURT_PLUGIN_PATH=$PWD/build go -C examples run ./llama -preset tiny", run, true},
		{"GPURT_PLUGIN_PATH=$PWD/build go -C examples run ./decoderbench -preset tiny", run, true},
		{"make frobnicate", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.cmd, func(t *testing.T) {
			r, ok := classify(tc.cmd)
			require.Equal(t, tc.known, ok)
			if ok {
				assert.Equal(t, tc.action, r.action)
			}
		})
	}
}

// TestEveryREADMECommandHasARule: every command README.md shows is run
// or skipped for a stated reason (TestREADMECommands runs them; this
// check alone is instant).
func TestEveryREADMECommandHasARule(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "README.md"))
	require.NoError(t, err)
	cmds := extract(string(readme))
	require.NotEmpty(t, cmds)
	for _, c := range cmds {
		_, ok := classify(c.text)
		assert.True(t, ok, "README.md:%d: %q: no rule of internal/readmetest says how to run it or why it is skipped; add one", c.line, c.text)
	}
}

// env is the environment the commands run in: this one without make's
// own variables (a make inside go test inside make must not join the
// outer make's jobserver) and without gpurt's plugin settings.
func env() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES", "GPURT_PLUGIN_PATH", "GPURT_BACKEND":
			continue
		}
		out = append(out, kv)
	}
	return out
}

func runBash(t *testing.T, dir, script string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestREADMECommands runs README.md's commands in order (make run first,
// as the README says), in the repository root.
func TestREADMECommands(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the README's commands are for Linux and macOS")
	}
	for _, tool := range []string{"bash", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	testutil.CC(t) // skips without a C compiler: make run builds the mock plugin
	root := testutil.RepoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	cmds := extract(string(readme))
	require.NotEmpty(t, cmds, "no commands found in README.md")
	ext := testutil.PluginExt()
	seen := map[string]bool{}
	for _, c := range cmds {
		if seen[c.text] {
			continue
		}
		seen[c.text] = true
		t.Run(c.text, func(t *testing.T) {
			r, ok := classify(c.text)
			if !ok {
				t.Fatalf("README.md:%d: %q: no rule of internal/readmetest says how to run it or why it is skipped; add one", c.line, c.text)
			}
			switch r.action {
			case skip:
				t.Skipf("README.md:%d: %s", c.line, r.reason)
			case synopsis:
				checkSynopsis(t, root, c)
			case run:
				script := c.text
				script = placeholderRe.ReplaceAllStringFunc(script, func(p string) string {
					if p == "OUTDIR" {
						return t.TempDir()
					}
					return filepath.Join(root, "build", "libgpurt_mock"+ext)
				})
				// go build ./cmd/gpurt writes ./gpurt: keep the tree as it was.
				if strings.HasPrefix(c.text, "CGO_ENABLED=0 go build ./cmd/gpurt") {
					if _, err := os.Stat(filepath.Join(root, "gpurt")); err != nil {
						t.Cleanup(func() { _ = os.Remove(filepath.Join(root, "gpurt")) })
					}
				}
				out, err := runBash(t, root, script)
				require.NoError(t, err, "README.md:%d: %s failed:\n%s", c.line, c.text, out)
				if r.want != "" {
					assert.Contains(t, out, r.want, "README.md:%d: %s", c.line, c.text)
				}
				if c.text == "gofmt -l" {
					assert.Empty(t, strings.TrimSpace(out), "gofmt -l lists files")
				}
			}
		})
	}
}

// The README's placeholders: a folder to write into, a plugin file.
var placeholderRe = regexp.MustCompile(`\b(OUTDIR|PLUGIN)\b`)

var flagRe = regexp.MustCompile(`(?:^|[\s\[|])--?([a-z][a-z0-9-]*)`)

// checkSynopsis runs "PROGRAM SUBCOMMAND -h" for a usage line such as
// "build/gpurt probe [--json] [--backend NAME]" and checks that the help
// names every flag the line does.
func checkSynopsis(t *testing.T, root string, c command) {
	t.Helper()
	f := strings.Fields(c.text)
	require.GreaterOrEqual(t, len(f), 2)
	bin := filepath.Join(root, f[0])
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("README.md:%d: %s not built (make run builds it, and runs before this): %v", c.line, f[0], err)
	}
	cmd := exec.Command(bin, f[1], "-h")
	cmd.Env = env()
	out, _ := cmd.CombinedOutput() // the help's exit status is cmd/'s business; its text is checked here
	help := string(out)
	for _, m := range flagRe.FindAllStringSubmatch(strings.Join(f[2:], " "), -1) {
		listed := regexp.MustCompile(`(?m)^\s*--?` + regexp.QuoteMeta(m[1]) + `(\s|$)`)
		assert.Regexp(t, listed, help, "README.md:%d: %q names -%s, which `%s %s -h` does not list:\n%s",
			c.line, c.text, m[1], f[0], f[1], help)
	}
}
