// SPDX-License-Identifier: Apache-2.0

package metal_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

// The Metal plugin cannot be compiled or run on Linux, so what can be held
// here is held by reading its source: it is a backend of csrc's engine
// (issue 21), its table sets every entry its ABI minor promises, and its
// built-in library has every kernel of csrc's built-in table.

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

// forbiddenIn reports every token of text that forbidden names, with why.
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

// Metal is a backend of csrc's engine (csrc/gp_backend.h): the engine
// implements every gpurt_api slot (handles, the caller's structs, checks,
// errors) and Metal implements gp_backend entries only. So no file of
// plugins/metal/src names a gpurt_* handle type, the api table, a
// struct_size, or the engine's struct and handle helpers; only
// metal_plugin.m includes gp_engine.h (for the entry).
func TestMetalIsOnlyABackend(t *testing.T) {
	var files []string
	for _, pat := range []string{"*.m", "*.h"} {
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
		if filepath.Base(f) != "metal_plugin.m" {
			require.NotContains(t, string(b), `#include "gp_engine.h"`, "%s includes the engine's header", f)
		}
	}
}

// The checker above finds what it must: a front half's slot function.
func TestMetalIsOnlyABackendFinds(t *testing.T) {
	text := reComment.ReplaceAllString(
		"gpurt_error *gm_copy(gpurt_runtime *h, const gpurt_copy_args *a) { /* gpurt_api */ if (a->struct_size) {} }", " ")
	require.ElementsMatch(t, []string{"gpurt_runtime: a gpurt_* handle",
		"struct_size: a caller's struct (the engine reads it)"}, forbiddenIn(text))
}

var (
	reNeed = regexp.MustCompile(`NEED\((\w+),\s*(\d+)\)`)
	// A GP_ZCALLS entry: X(name, NAME, minor, idx, atype, obj).
	reZCall = regexp.MustCompile(`(?m)^\s*X\((\w+), [A-Z0-9_]+, (\d+), \d+, \w+, [01]\)`)
	reEntry = regexp.MustCompile(`(?m)^\s*\.(\w+)\s*=\s*([A-Za-z_]\w*)\s*,`)
	// A member of gp_backend: `type (*name)(` or `type name;`.
	reMember = regexp.MustCompile(`\(\*(\w+)\)\(|\b(\w+);`)
	reCDef   = regexp.MustCompile(`(?m)^[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;{]*\)\s*\{`)
)

// metalTable returns the designated initializers of metal_plugin.m's
// gp_backend table: field -> value.
func metalTable(t *testing.T) map[string]string {
	t.Helper()
	text := source(t, filepath.Join("src", "metal_plugin.m"))
	start := strings.Index(text, "gp_backend metal_backend = {")
	require.GreaterOrEqual(t, start, 0, "metal_plugin.m has no `gp_backend metal_backend = {` table")
	end := strings.Index(text[start:], "};")
	require.Greater(t, end, 0)
	table := map[string]string{}
	for _, m := range reEntry.FindAllStringSubmatch(text[start:start+end], -1) {
		table[m[1]] = m[2]
	}
	require.NotEmpty(t, table)
	return table
}

// Metal declares the header's minor (abi_minor = GPURT_ABI_MINOR), so its
// table must set every entry csrc/gp_backend.c's gp_backend_needs lists
// (gp_backend_check refuses it at negotiation otherwise, on a Mac only);
// every field it sets is a member of gp_backend, and every function it
// names is defined in plugins/metal/src.
func TestMetalTableSetsWhatItsMinorPromises(t *testing.T) {
	table := metalTable(t)
	require.Equal(t, "GPURT_ABI_MINOR", table["abi_minor"], "metal_plugin.m's table must declare abi_minor = GPURT_ABI_MINOR")

	needs := reNeed.FindAllStringSubmatch(source(t, filepath.Join("..", "..", "csrc", "gp_backend.c")), -1)
	require.NotEmpty(t, needs, "csrc/gp_backend.c lists no NEED(entry, minor)")
	// The runs of the recordable ops are entries of gp_backend, promised
	// from their slot's minor, through csrc/gp_zslots.h's GP_ZCALLS.
	calls := reZCall.FindAllStringSubmatch(source(t, filepath.Join("..", "..", "csrc", "gp_zslots.h")), -1)
	require.NotEmpty(t, calls, "csrc/gp_zslots.h lists no GP_ZCALLS entry")
	needs = append(needs, calls...)
	for _, n := range needs {
		v, ok := table[n[1]]
		require.Truef(t, ok && v != "NULL", "metal_plugin.m's table leaves %s unset, which ABI 1.%s promises", n[1], n[2])
	}

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
	files, err := filepath.Glob(filepath.Join("src", "*.m"))
	require.NoError(t, err)
	for _, f := range files {
		for _, m := range reCDef.FindAllStringSubmatch(source(t, f), -1) {
			defined[m[1]] = true
		}
	}
	for field, v := range table {
		require.Truef(t, members[field], "metal_plugin.m sets .%s, which gp_backend does not have", field)
		if strings.HasPrefix(v, "gm_") || strings.HasPrefix(v, "m_") {
			require.Truef(t, defined[v], "metal_plugin.m's .%s = %s names no function of plugins/metal/src", field, v)
		}
	}
}

var (
	// `kernel void name(` with name possibly built from a macro's SUFFIX.
	reKernel   = regexp.MustCompile(`kernel\s+void\s+(\w+?)(##SUFFIX)?\s*\(`)
	reDefine   = regexp.MustCompile(`(?m)^#define\s+(\w+)\(SUFFIX\b`)
	reNameLine = regexp.MustCompile(`"([a-z0-9_]+)"`)
)

// metalKernels expands kernels/*.metal's kernel names: plain `kernel void
// name(` and, in a `#define M(SUFFIX, ...)` macro, `kernel void pre_##SUFFIX(`
// for each `M(sfx, ...)` invocation.
func metalKernels(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("kernels", "*.metal"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	out := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		text := reComment.ReplaceAllString(string(b), " ")
		// Split into macro bodies (a #define and its continuation lines) and the rest.
		lines := strings.Split(text, "\n")
		macros := map[string][]string{} // macro -> name prefixes
		for i := 0; i < len(lines); i++ {
			m := reDefine.FindStringSubmatch(lines[i])
			if m == nil {
				for _, k := range reKernel.FindAllStringSubmatch(lines[i], -1) {
					if k[2] == "" {
						out[k[1]] = true
					}
				}
				continue
			}
			for ; i < len(lines); i++ {
				for _, k := range reKernel.FindAllStringSubmatch(lines[i], -1) {
					if k[2] != "" {
						macros[m[1]] = append(macros[m[1]], k[1])
					}
				}
				if !strings.HasSuffix(strings.TrimSpace(lines[i]), `\`) {
					break
				}
			}
		}
		for name, prefixes := range macros {
			for _, inv := range regexp.MustCompile(`(?m)^`+name+`\((\w+)\s*,`).FindAllStringSubmatch(text, -1) {
				for _, p := range prefixes {
					out[p+inv[1]] = true
				}
			}
		}
	}
	return out
}

// Every built-in kernel of csrc's table (gp_builtin_kernels, the names
// kernel_get answers on every backend) is a kernel of Metal's built-in
// library: a row added there without its Metal kernel (sample_rows_T at
// ABI 1.8) would fail only on a Mac, at the first kernel_get of it.
func TestMetalHasEveryBuiltinKernel(t *testing.T) {
	cc := testutil.CC(t)
	dir := t.TempDir()
	prog := filepath.Join(dir, "names.c")
	require.NoError(t, os.WriteFile(prog, []byte(`#include <stdio.h>
#include "gp_common.h"
const char gp_plugin_prefix[] = "test";
int main(void) {
  for (size_t i = 0; i < gp_builtin_kernel_count; i++) printf("\"%s\"\n", gp_builtin_kernels[i].name);
  return 0;
}
`), 0o644))
	root := filepath.Join("..", "..")
	bin := filepath.Join(dir, "names")
	out, err := exec.Command(cc, "-std=c11", "-I", filepath.Join(root, "abi"), "-I", filepath.Join(root, "csrc"),
		"-o", bin, prog, filepath.Join(root, "csrc", "gp_builtin.c"), filepath.Join(root, "csrc", "gp_dtype_info.c")).CombinedOutput()
	require.NoError(t, err, "compiling csrc/gp_builtin.c's table: %s", out)
	out, err = exec.Command(bin).Output()
	require.NoError(t, err)
	var want []string
	for _, m := range reNameLine.FindAllStringSubmatch(string(out), -1) {
		want = append(want, m[1])
	}
	require.Contains(t, want, "sample_rows_bf16", "csrc's built-in table (the test reads it wrong?)")
	have := metalKernels(t)
	require.True(t, have["gpurt_copy_u8"] && have["fill_f32"], "the .metal reader finds no kernels (%d)", len(have))
	var missing []string
	for _, n := range want {
		if !have[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "csrc's built-in kernels without a kernel in plugins/metal/kernels/*.metal")
}
