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
)

// What can be held about the CUDA plugin without a GPU, by reading its
// source: it is a backend of csrc's engine (issue 21), its table sets every
// entry its ABI minor promises, and its built-in fatbin has every kernel of
// csrc's built-in table.

var (
	reTok = regexp.MustCompile(`[A-Za-z_]\w*`)
	// Comments and string literals say names without using them.
	reComment = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*|"(?:[^"\\\n]|\\.)*"`)
)

func source(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return reComment.ReplaceAllString(string(b), " ")
}

// forbiddenIn reports every token of text that names the engine's side of
// the ABI, with why.
func forbiddenIn(text string) []string {
	forbidden := map[string]string{
		"gpurt_api": "the ABI table (the engine's)", "struct_size": "a caller's struct (the engine reads it)",
		"gp_read_struct": "a caller's struct", "gp_write_struct": "a caller's struct", "gp_check_out": "a caller's struct",
		"gp_table_insert": "a handle table", "gp_table_lookup": "a handle table", "gp_table_remove": "a handle table",
		"gp_table_take": "a handle table", "gp_handle_error": "a handle",
		"gp_negotiate": "negotiation (gp_engine_negotiate is the entry)",
	}
	for _, h := range []string{"runtime", "buffer", "host_buffer", "stream", "event", "module", "kernel",
		"gemm_plan", "graph", "attention", "comm"} {
		forbidden["gpurt_"+h] = "a gpurt_* handle"
	}
	var out []string
	for _, tok := range reTok.FindAllString(text, -1) {
		if why, ok := forbidden[tok]; ok {
			out = append(out, tok+": "+why)
		}
	}
	return out
}

// CUDA is a backend of csrc's engine (csrc/gp_backend.h): the engine
// implements every gpurt_api slot (handles, the caller's structs, checks,
// errors) and CUDA implements gp_backend entries only. So no file of
// plugins/cuda/src (host C, headers, the nvcc adapters and kernels) names a
// gpurt_* handle type, the api table, a struct_size, or the engine's struct
// and handle helpers; only cuda_plugin.c includes gp_engine.h (for the
// entry).
func TestCudaIsOnlyABackend(t *testing.T) {
	var files []string
	for _, pat := range []string{"*.c", "*.h", "*.cu"} {
		m, err := filepath.Glob(filepath.Join("src", pat))
		require.NoError(t, err)
		files = append(files, m...)
	}
	require.NotEmpty(t, files)
	for _, f := range files {
		for _, bad := range forbiddenIn(source(t, f)) {
			t.Errorf("%s uses %s; a backend sees resolved operands only (csrc/gp_backend.h)", f, bad)
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		if filepath.Base(f) != "cuda_plugin.c" {
			require.NotContains(t, string(b), `#include "gp_engine.h"`, "%s includes the engine's header", f)
		}
	}
	_, err := os.Stat(filepath.Join("src", "cuda_handles.c"))
	require.True(t, os.IsNotExist(err), "src/cuda_handles.c is back: handles are the engine's (csrc/gp_handles.c)")
}

// The checker above finds what it must: a front half's slot function.
func TestCudaIsOnlyABackendFinds(t *testing.T) {
	text := reComment.ReplaceAllString(
		"gpurt_error *cu_copy(gpurt_runtime *h, const gpurt_copy_args *a) { /* gpurt_api */ if (a->struct_size) {} }", " ")
	require.ElementsMatch(t, []string{"gpurt_runtime: a gpurt_* handle",
		"struct_size: a caller's struct (the engine reads it)"}, forbiddenIn(text))
}

var (
	reNeed  = regexp.MustCompile(`NEED\((\w+),\s*(\d+)\)`)
	reEntry = regexp.MustCompile(`(?m)^\s*\.(\w+)\s*=\s*([A-Za-z_]\w*)\s*,`)
	// A GP_ZCALLS entry: X(name, NAME, minor, idx, atype, obj).
	reZCall = regexp.MustCompile(`(?m)^\s*X\((\w+), [A-Z0-9_]+, (\d+), \d+, \w+, [01]\)`)
	// A member of gp_backend: `type (*name)(` or `type name;`.
	reMember = regexp.MustCompile(`\(\*(\w+)\)\(|\b(\w+);`)
	reCDef   = regexp.MustCompile(`(?m)^[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;{]*\)\s*\{`)
)

// cudaTable returns the designated initializers of cuda_plugin.c's
// gp_backend table: field -> value.
func cudaTable(t *testing.T) map[string]string {
	t.Helper()
	text := source(t, filepath.Join("src", "cuda_plugin.c"))
	start := strings.Index(text, "gp_backend cu_backend = {")
	require.GreaterOrEqual(t, start, 0, "cuda_plugin.c has no `gp_backend cu_backend = {` table")
	end := strings.Index(text[start:], "};")
	require.Greater(t, end, 0)
	table := map[string]string{}
	for _, m := range reEntry.FindAllStringSubmatch(text[start:start+end], -1) {
		table[m[1]] = m[2]
	}
	require.NotEmpty(t, table)
	return table
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
	require.Equal(t, "GPURT_ABI_MINOR", table["abi_minor"], "cuda_plugin.c's table must declare abi_minor = GPURT_ABI_MINOR")

	needs := reNeed.FindAllStringSubmatch(source(t, filepath.Join("..", "..", "csrc", "gp_backend.c")), -1)
	require.NotEmpty(t, needs, "csrc/gp_backend.c lists no NEED(entry, minor)")
	// The runs of the recordable ops are entries of gp_backend, promised
	// from their slot's minor, through csrc/gp_zslots.h's GP_ZCALLS.
	calls := reZCall.FindAllStringSubmatch(source(t, filepath.Join("..", "..", "csrc", "gp_zslots.h")), -1)
	require.NotEmpty(t, calls, "csrc/gp_zslots.h lists no GP_ZCALLS entry")
	needs = append(needs, calls...)
	for _, n := range needs {
		v, ok := table[n[1]]
		require.Truef(t, ok && v != "NULL", "cuda_plugin.c's table leaves %s unset, which ABI 1.%s promises", n[1], n[2])
	}
	for _, f := range []string{"graph_capture", "graph_patchable", "graph_patch", "launch_many", "gemm_plan", "gemm_plan_free"} {
		require.Containsf(t, table, f, "cuda_plugin.c's table leaves .%s unset", f)
	}
	require.Regexp(t, `\.graph_once\s*=\s*1\s*,`, source(t, filepath.Join("src", "cuda_plugin.c")),
		"CUDA replays an instantiated graph: its table sets graph_once = 1")

	hdr := source(t, filepath.Join("..", "..", "csrc", "gp_backend.h"))
	start := strings.Index(hdr, "typedef struct gp_backend {")
	end := strings.Index(hdr, "} gp_backend;")
	require.True(t, start >= 0 && end > start, "csrc/gp_backend.h has no gp_backend struct")
	members := map[string]bool{}
	for _, m := range reMember.FindAllStringSubmatch(hdr[start:end], -1) {
		members[m[1]+m[2]] = true
	}
	for _, c := range calls {
		members[c[1]] = true
	}
	defined := map[string]bool{}
	files, err := filepath.Glob(filepath.Join("src", "*.c"))
	require.NoError(t, err)
	for _, f := range files {
		for _, m := range reCDef.FindAllStringSubmatch(source(t, f), -1) {
			defined[m[1]] = true
		}
	}
	for field, v := range table {
		require.Truef(t, members[field], "cuda_plugin.c sets .%s, which gp_backend does not have", field)
		if strings.HasPrefix(v, "cu_") {
			require.Truef(t, defined[v], "cuda_plugin.c's .%s = %s names no function of plugins/cuda/src", field, v)
		}
	}
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
