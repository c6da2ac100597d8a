// SPDX-License-Identifier: Apache-2.0

package cuda_test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil/backendsrc"
)

// What can be held about the CUDA plugin without a GPU, by reading its
// source: it is a backend of csrc's engine (issue 21), its table sets every
// entry its ABI minor promises, and its built-in fatbin has every kernel of
// csrc's built-in table.

// source is the file at path with its comments and string literals blanked.
func source(t *testing.T, path string) string { return backendsrc.Source(t, path) }

// CUDA is a backend of csrc's engine (csrc/gp_backend.h): the engine
// implements every gpurt_api slot (handles, the caller's structs, checks,
// errors) and CUDA implements gp_backend entries only. So no file of
// plugins/cuda/src (host C, headers, the nvcc adapters and kernels) names a
// gpurt_* handle type, the api table, a struct_size, or the engine's struct
// and handle helpers; only cuda_plugin.c includes gp_engine.h (for the
// entry).
func TestCudaIsOnlyABackend(t *testing.T) {
	backendsrc.CheckOnlyABackend(t, "src", "cuda_plugin.c", "*.c", "*.h", "*.cu")
	_, err := os.Stat(filepath.Join("src", "cuda_handles.c"))
	require.True(t, os.IsNotExist(err), "src/cuda_handles.c is back: handles are the engine's (csrc/gp_handles.c)")
}

// The checker above finds what it must: a front half's slot function.
func TestCudaIsOnlyABackendFinds(t *testing.T) {
	text := backendsrc.Blank(
		"gpurt_error *cu_copy(gpurt_runtime *h, const gpurt_copy_args *a) { /* gpurt_api */ if (a->struct_size) {} }")
	require.ElementsMatch(t, []string{"gpurt_runtime: a gpurt_* handle",
		"struct_size: a caller's struct (the engine reads it)"}, backendsrc.Forbidden(text))
}

// cudaTable returns the designated initializers of cuda_plugin.c's
// gp_backend table: field -> value.
func cudaTable(t *testing.T) map[string]string {
	t.Helper()
	return backendsrc.Table(t, filepath.Join("src", "cuda_plugin.c"), "gp_backend cu_backend = {")
}

// CUDA declares the header's minor (abi_minor = GPURT_ABI_MINOR), so its
// table must set every entry csrc/gp_backend.c's gp_backend_needs lists
// (gp_backend_check refuses it at negotiation otherwise); every field it
// sets is a member of gp_backend, and every function it names is defined
// in plugins/cuda/src. It records graphs once (graph_once) with a
// preparing pass (graph_capture) and patches launch nodes (graph_patchable
// and graph_patch, both or neither).
func TestCudaTableSetsWhatItsMinorPromises(t *testing.T) {
	table := cudaTable(t)
	backendsrc.CheckTable(t, table, "cuda_plugin.c", filepath.Join("..", "..", "csrc"), filepath.Join("src", "*.c"), "cu_")
	for _, f := range []string{"graph_capture", "graph_patchable", "graph_patch", "launch_many", "gemm_plan", "gemm_plan_free"} {
		require.Containsf(t, table, f, "cuda_plugin.c's table leaves .%s unset", f)
	}
	require.Regexp(t, `\.graph_once\s*=\s*1\s*,`, source(t, filepath.Join("src", "cuda_plugin.c")),
		"CUDA replays an instantiated graph: its table sets graph_once = 1")
}

var (
	reMacro = regexp.MustCompile(`(?m)^#define\s+(\w+)\(`)
	reCall  = regexp.MustCompile(`(?m)^\s*(\w+)\(([^()]*)\)`)
)

// expand collects the names text defines: plain ones (plain matches the
// name) and, inside each `#define M(...)` macro (with its continuation
// lines), prefixes (prefix matches them) completed by the suffix argument
// (index arg) of every invocation `M(..., sfx, ...)` at the start of a line.
func expand(text string, plain, prefix *regexp.Regexp, arg int) map[string]bool {
	out := map[string]bool{}
	lines := strings.Split(text, "\n")
	macros := map[string][]string{}
	for i := 0; i < len(lines); i++ {
		m := reMacro.FindStringSubmatch(lines[i])
		if m == nil {
			for _, k := range plain.FindAllStringSubmatch(lines[i], -1) {
				out[k[1]] = true
			}
			continue
		}
		for ; i < len(lines); i++ {
			for _, k := range prefix.FindAllStringSubmatch(lines[i], -1) {
				macros[m[1]] = append(macros[m[1]], k[1])
			}
			if !strings.HasSuffix(strings.TrimSpace(lines[i]), `\`) {
				break
			}
		}
	}
	for _, c := range reCall.FindAllStringSubmatch(text, -1) {
		pre, ok := macros[c[1]]
		if !ok {
			continue
		}
		args := strings.Split(c[2], ",")
		if arg >= len(args) {
			continue
		}
		sfx := strings.Trim(strings.TrimSpace(args[arg]), `"`)
		for _, p := range pre {
			out[p+sfx] = true
		}
	}
	return out
}

// Every kernel of csrc's built-in table (gp_builtin.c) is an extern "C"
// kernel of the plugin's built-in fatbin (cuda_kernels.cu and the files it
// includes): kernel_get of a built-in finds the function by that name.
func TestCudaHasEveryBuiltin(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "csrc", "gp_builtin.c"))
	require.NoError(t, err)
	// The table's names are string literals: keep them, drop comments.
	ctext := regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(string(raw), " ")
	want := expand(ctext, regexp.MustCompile(`\{"(\w+)",\s*GP_BK_`), regexp.MustCompile(`\{"(\w+)"\s+sfx`), 0)
	require.Contains(t, want, "fill_f32")
	require.Contains(t, want, "rope_neox_freqs_bf16")

	have := map[string]bool{}
	// source() blanks string literals: `extern "C" __global__` reads
	// `extern   __global__`.
	for _, f := range []string{"cuda_kernels.cu", "cuda_sample.cu", "cuda_fused.cu"} {
		text := source(t, filepath.Join("src", f))
		for k := range expand(text, regexp.MustCompile(`extern\s+__global__\s+void\s+(\w+)\s*\(`),
			regexp.MustCompile(`__global__\s+void\s+(\w+?)##SFX\s*\(`), 1) {
			have[k] = true
		}
	}
	var missing []string
	for k := range want {
		if !have[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "built-ins of csrc/gp_builtin.c without a kernel in plugins/cuda/src/cuda_kernels.cu")
}
