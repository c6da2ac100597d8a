// SPDX-License-Identifier: Apache-2.0

package metal_test

import (
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
	"github.com/metrale/gpurt/internal/testutil/backendsrc"
)

// The Metal plugin cannot be compiled or run on Linux, so what can be held
// here is held by reading its source: it is a backend of csrc's engine
// (issue 21), its table sets every entry its ABI minor promises, and its
// built-in library has every kernel of csrc's built-in table.

// Metal is a backend of csrc's engine (csrc/gp_backend.h): the engine
// implements every gpurt_api slot (handles, the caller's structs, checks,
// errors) and Metal implements gp_backend entries only. So no file of
// plugins/metal/src names a gpurt_* handle type, the api table, a
// struct_size, or the engine's struct and handle helpers; only
// metal_plugin.m includes gp_engine.h (for the entry).
func TestMetalIsOnlyABackend(t *testing.T) {
	backendsrc.CheckOnlyABackend(t, "src", "metal_plugin.m", "*.m", "*.h")
}

// metalTable returns the designated initializers of metal_plugin.m's
// gp_backend table: field -> value.
func metalTable(t *testing.T) map[string]string {
	t.Helper()
	return backendsrc.Table(t, filepath.Join("src", "metal_plugin.m"), "gp_backend metal_backend = {")
}

// Metal declares the header's minor (abi_minor = GPURT_ABI_MINOR), so its
// table must set every entry csrc/gp_backend.c's gp_backend_needs lists
// (gp_backend_check refuses it at negotiation otherwise, on a Mac only);
// every field it sets is a member of gp_backend, and every function it
// names is defined in plugins/metal/src.
func TestMetalTableSetsWhatItsMinorPromises(t *testing.T) {
	backendsrc.CheckTable(t, metalTable(t), "metal_plugin.m", filepath.Join("..", "..", "csrc"),
		filepath.Join("src", "*.m"), "gm_", "m_")
}

var reNameLine = regexp.MustCompile(`"([a-z0-9_]+)"`)

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
		for k := range backendsrc.Expand(backendsrc.Source(t, f), regexp.MustCompile(`kernel\s+void\s+(\w+)\s*\(`),
			regexp.MustCompile(`kernel\s+void\s+(\w+?)##SUFFIX\s*\(`), 0) {
			out[k] = true
		}
	}
	return out
}

// Every built-in kernel of csrc's table (gp_builtin_kernels, the names
// kernel_get answers on every backend) is a kernel of Metal's built-in
// library: a row added there without its Metal kernel (sample_rows_T at
// ABI 1.8) would fail only on a Mac, at the first kernel_get of it.
func TestMetalHasEveryBuiltinKernel(t *testing.T) {
	root := filepath.Join("..", "..")
	out := testutil.CProgram(t, "csrc/gp_builtin.c's table", `#include <stdio.h>
#include "gp_common.h"
const char gp_plugin_prefix[] = "test";
int main(void) {
  for (size_t i = 0; i < gp_builtin_kernel_count; i++) printf("\"%s\"\n", gp_builtin_kernels[i].name);
  return 0;
}
`, "-std=c11", "-I", filepath.Join(root, "abi"), "-I", filepath.Join(root, "csrc"),
		filepath.Join(root, "csrc", "gp_builtin.c"), filepath.Join(root, "csrc", "gp_dtype_info.c"))
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
