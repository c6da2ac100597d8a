// SPDX-License-Identifier: Apache-2.0

package backendsrc

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The checker of CheckOnlyABackend finds what it must: a front half's
// slot function (a gpurt_* handle, a caller's struct read by struct_size),
// and not what a comment or a string says.
func TestForbiddenFinds(t *testing.T) {
	text := Blank(
		"gpurt_error *cu_copy(gpurt_runtime *h, const gpurt_copy_args *a) { /* gpurt_api */ if (a->struct_size) {} }")
	require.ElementsMatch(t, []string{"gpurt_runtime: a gpurt_* handle",
		"struct_size: a caller's struct (the engine reads it)"}, Forbidden(text))
	assert.Empty(t, Forbidden(Blank(`// gpurt_stream
const char *s = "gpurt_api struct_size";`)))
}

// Expand finds plain names outside macros and the names a macro makes for
// each of its invocations, from the argument asked for.
func TestExpand(t *testing.T) {
	text := `kernel void plain_one(int x) {}
#define DEFINE(SUFFIX, T)                      \
  kernel void fill_##SUFFIX(T *y) {}           \
  kernel void scale_##SUFFIX(T *y) {}
#define OTHER(T, SUFFIX) kernel void add_##SUFFIX(T *y) {}
DEFINE(f32, float)
DEFINE(bf16, bfloat)
  OTHER(float, f16)
kernel void plain_two(int x) {}
`
	plain := regexp.MustCompile(`kernel\s+void\s+(\w+)\s*\(`)
	prefix := regexp.MustCompile(`kernel\s+void\s+(\w+?)##SUFFIX\s*\(`)
	got := Expand(text, plain, prefix, 0)
	assert.Equal(t, map[string]bool{"plain_one": true, "plain_two": true, "fill_f32": true, "scale_f32": true,
		"fill_bf16": true, "scale_bf16": true, "add_float": true}, got)
	got = Expand(text, plain, prefix, 1)
	assert.True(t, got["fill_float"] && got["add_f16"], "%v", got)
	assert.False(t, got["fill_f32"], "%v", got)
}

// Functions finds the definitions that start at column 0 (a declaration is
// none), the static ones only when asked for all.
func TestFunctions(t *testing.T) {
	text := "static int helper(void) {\n  return 0;\n}\ngpurt_error *m_copy(void *ctx,\n    int n) {\n}\nint decl(void);\n"
	assert.Equal(t, []string{"helper", "m_copy"}, Functions(text, false))
	assert.Equal(t, []string{"m_copy"}, Functions(text, true))
}
