// SPDX-License-Identifier: Apache-2.0

package cuda_test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil/backendsrc"
)

// What can be held about the CUDA plugin without a GPU, by reading its
// source: it is a backend of csrc's engine (issue 21), its table sets every
// entry its ABI minor promises, and its built-in fatbin has every kernel of
// csrc's built-in table.

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
	require.Regexp(t, `\.graph_once\s*=\s*1\s*,`, backendsrc.Source(t, filepath.Join("src", "cuda_plugin.c")),
		"CUDA replays an instantiated graph: its table sets graph_once = 1")
}

// Every kernel of csrc's built-in table (gp_builtin.c) is an extern "C"
// kernel of the plugin's built-in fatbin (cuda_kernels.cu and the files it
// includes): kernel_get of a built-in finds the function by that name.
func TestCudaHasEveryBuiltin(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "csrc", "gp_builtin.c"))
	require.NoError(t, err)
	// The table's names are string literals: keep them, drop comments.
	ctext := regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(string(raw), " ")
	want := backendsrc.Expand(ctext, regexp.MustCompile(`\{"(\w+)",\s*GP_BK_`), regexp.MustCompile(`\{"(\w+)"\s+sfx`), 0)
	require.Contains(t, want, "fill_f32")
	require.Contains(t, want, "rope_neox_freqs_bf16")

	have := map[string]bool{}
	// Source blanks string literals: `extern "C" __global__` reads
	// `extern   __global__`.
	for _, f := range []string{"cuda_kernels.cu", "cuda_sample.cu", "cuda_fused.cu"} {
		text := backendsrc.Source(t, filepath.Join("src", f))
		for k := range backendsrc.Expand(text, regexp.MustCompile(`extern\s+__global__\s+void\s+(\w+)\s*\(`),
			regexp.MustCompile(`__global__[\s\\]+void[\s\\]+(?:__launch_bounds__\([^)]*\)[\s\\]+)?(\w+?)##SFX\s*\(`), 1) {
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

// The plugin launches every built-in with programmatic dependent launch
// (cuda_module.c: a built-in may be scheduled while the kernel before it
// still runs), so every kernel of the built-in fatbin must wait for that
// kernel before anything else: its body's first statement is
// gpurt_pdl_enter() (or, in sleep_ns, the bare griddepcontrol.wait). A new
// built-in without it would read its inputs early, unseen by any test that
// does not race.
func TestEveryBuiltinWaitsForItsPredecessorFirst(t *testing.T) {
	// (a kernel may declare __launch_bounds__ before its name, and a macro's
	// lines end in backslashes)
	first := regexp.MustCompile(`(?s)extern\s+"C"\s+__global__[\s\\]+void[\s\\]+(?:__launch_bounds__\([^)]*\)[\s\\]+)?([\w#]+)\s*\([^)]*\)\s*\{\s*\\?\s*(\S+)`)
	n := 0
	for _, f := range []string{"cuda_kernels.cu", "cuda_sample.cu", "cuda_fused.cu"} {
		raw, err := os.ReadFile(filepath.Join("src", f))
		require.NoError(t, err)
		for _, m := range first.FindAllStringSubmatch(string(raw), -1) {
			name, stmt := m[1], m[2]
			if strings.HasPrefix(name, "gpurt_internal_") { // launched plainly by cuda_gemm.c
				continue
			}
			n++
			if name == "sleep_ns" {
				require.Equal(t, "#if", stmt, "sleep_ns must start with its (guarded) griddepcontrol.wait")
				continue
			}
			require.True(t, strings.HasPrefix(stmt, "gpurt_pdl_enter();"),
				"%s: kernel %s starts with %q, not gpurt_pdl_enter();", f, name, stmt)
		}
	}
	require.GreaterOrEqual(t, n, 15, "the scan found too few kernels: it is broken")
}

// TestGEMVReadsOnlyWhatMayBeReadBeforeItsWait: the 16-bit GEMV
// (cuda_quant.cu's bgemv_body) runs with programmatic dependent launch, so
// before its gpurt_pdl_enter it may touch only what the kernel before it
// cannot be writing: with BG_CONST_A (the caller's GPURT_GEMM_FLAG_CONST_A)
// A's rows, else nothing but an L2 prefetch of A. x (B), C and D come
// after the wait in both branches. A read of x moved ahead of the wait
// would compute with the previous kernel's half-written activations; this
// scan of the source fails then.
func TestGEMVReadsOnlyWhatMayBeReadBeforeItsWait(t *testing.T) {
	body := quantKernelBody(t, "bgemv_body")
	// The copy of slot sl reads A for sl < BG_RB and x above it.
	require.Regexp(t, `if \(sl < BG_RB\) \{\s*if \(row0 \+ sl < a\.m\) src = w \+`, body,
		"issue_part no longer copies A for the slots below BG_RB")
	cst := strings.Index(body, "if (a.flags & BG_CONST_A) {")
	els := strings.Index(body, "} else {")
	require.True(t, cst >= 0 && els > cst, "the two prologues (constant A, else) were not found")
	before := func(seg string) string {
		w := strings.Index(seg, "gpurt_pdl_enter();")
		require.GreaterOrEqual(t, w, 0, "a prologue without gpurt_pdl_enter")
		return seg[:w]
	}
	pre := before(body[cst:els])
	assert.Contains(t, pre, "issue_part(c, 0, BG_RB)", "the constant-A prologue no longer copies A before the wait")
	assert.Equal(t, strings.Count(pre, "issue_part("), strings.Count(pre, "issue_part(c, 0, BG_RB)"),
		"the constant-A prologue copies more than A's slots [0, BG_RB) before the wait")
	for _, banned := range []string{"issue(", "issue_part(c, BG_RB", "a.x", "a.c", "a.d", "x +"} {
		assert.NotContains(t, pre, banned, "the constant-A prologue touches %q before the wait", banned)
	}
	pre = before(body[els:])
	assert.Contains(t, pre, "cp.async.bulk.prefetch.L2", "the plain prologue no longer prefetches A into the L2")
	for _, banned := range []string{"issue(", "issue_part(", "cp_async16", "a.x", "a.c", "a.d"} {
		assert.NotContains(t, pre, banned, "the plain prologue touches %q before the wait", banned)
	}
	// Nothing before the two prologues reads memory: only the lambdas'
	// definitions (issue_part, issue) come first.
	head := body[:cst]
	head = head[strings.Index(head, "{")+1:]
	for _, call := range []string{"issue(0", "issue(c)", "issue_part(c", "gpurt_pdl_enter"} {
		assert.NotContains(t, head, call+";", "bgemv_body calls %q before its prologues", call)
	}
}

// quantKernelBody: the text of cuda_quant.cu's device function name, from
// its signature to its closing brace.
func quantKernelBody(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("src", "cuda_quant.cu"))
	require.NoError(t, err)
	src := string(raw)
	i := strings.Index(src, "void "+name+"(")
	require.GreaterOrEqual(t, i, 0, "%s not found", name)
	body := src[i:]
	e := strings.Index(body, "\n}\n")
	require.GreaterOrEqual(t, e, 0, "the end of %s not found", name)
	return body[:e]
}

// TestKernelParamStructsMirrorTheirHostStructs: cuda_quant.cu's kernels
// take their parameters as a struct whose host mirror the launching C file
// writes again (a kernel parameter is the struct's bytes); a field added
// to one side only shifts every field after it. Each pair must list the
// same fields' kinds, in the same order (pointers as pointers, whatever
// they point to; CUdeviceptr is a pointer).
func TestKernelParamStructsMirrorTheirHostStructs(t *testing.T) {
	read := func(file string) string {
		raw, err := os.ReadFile(filepath.Join("src", file))
		require.NoError(t, err)
		return regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`).ReplaceAllString(string(raw), "")
	}
	// fields is the kinds of struct name's fields in src, one a declarator.
	fields := func(src, file, name string) []string {
		m := regexp.MustCompile(`(?s)struct ` + name + ` \{(.*?)\}`).FindStringSubmatch(src)
		require.NotNil(t, m, "struct %s in %s", name, file)
		kind := map[string]string{"u32": "u32", "uint32_t": "u32", "u64": "u64", "uint64_t": "u64",
			"long long": "i64", "int64_t": "i64", "float": "f32", "CUdeviceptr": "ptr"}
		var out []string
		for _, decl := range strings.Split(m[1], ";") {
			decl = strings.Join(strings.Fields(decl), " ")
			if decl == "" {
				continue
			}
			words := regexp.MustCompile(`^((?:const )?(?:long long|[A-Za-z_][A-Za-z0-9_]*))\s*(.*)$`).FindStringSubmatch(decl)
			require.NotNil(t, words, "%s.%s: %q", file, name, decl)
			base := strings.TrimPrefix(words[1], "const ")
			for _, d := range strings.Split(words[2], ",") {
				d = strings.TrimSpace(d)
				k, ok := kind[base]
				if strings.HasPrefix(d, "*") {
					k, ok = "ptr", true
				}
				require.True(t, ok, "%s.%s: the type of %q", file, name, decl)
				if i := strings.Index(d, "["); i >= 0 {
					k += strings.ReplaceAll(d[i:], " ", "")
				}
				out = append(out, k)
			}
		}
		return out
	}
	dev := read("cuda_quant.cu")
	for _, c := range []struct{ kernel, file, host string }{
		{"BgemvArgs", "cuda_internal.h", "cu_bgemv_args"},
		{"GemmArgs", "cuda_quant.c", "gg_args"},
		{"GroupTable", "cuda_quant.c", "gg_table"},
	} {
		want := fields(dev, "cuda_quant.cu", c.kernel)
		assert.NotEmpty(t, want)
		assert.Equal(t, want, fields(read(c.file), c.file, c.host), "%s (cuda_quant.cu) and %s (%s)", c.kernel, c.host, c.file)
	}
}
