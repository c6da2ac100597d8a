// SPDX-License-Identifier: Apache-2.0

package abi

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

// builtinLines is BuiltinKernels as "name dtype kind kind ...", sorted.
func builtinLines() []string {
	var out []string
	for _, k := range BuiltinKernels {
		s := fmt.Sprintf("%s %d", k.Name, k.DType)
		for _, p := range k.Params {
			s += fmt.Sprintf(" %d", p)
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// TestBuiltinsMatchCsrc compiles csrc with a main that prints the C
// signature table (gp_builtin_kernels), which the plugins check launches
// against, and compares it with BuiltinKernels: a kernel added on one
// side only fails here.
func TestBuiltinsMatchCsrc(t *testing.T) {
	here, err := filepath.Abs(headerDir)
	require.NoError(t, err)
	csrc := filepath.Join(here, "..", "csrc")
	srcs, err := filepath.Glob(filepath.Join(csrc, "*.c"))
	require.NoError(t, err)
	require.NotEmpty(t, srcs)
	args := append([]string{"-std=c11", "-I", here, "-I", csrc}, srcs...)
	args = append(args, "-lm", "-lpthread")
	out := testutil.CProgram(t, "csrc with a main printing gp_builtin_kernels (csrc must link with only gp_plugin_prefix from a plugin)", `#include <stdio.h>
#include "gp_common.h"
const char gp_plugin_prefix[] = "abi_test";
int main(void) {
  for (size_t i = 0; i < gp_builtin_kernel_count; i++) {
    const gp_builtin_kernel *k = &gp_builtin_kernels[i];
    printf("%s %d", k->name, (int)k->dtype);
    for (uint32_t j = 0; j < k->num_params; j++) printf(" %d", (int)k->kinds[j]);
    printf("\n");
  }
  return 0;
}
`, args...)
	var got []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		got = append(got, sc.Text())
	}
	sort.Strings(got)
	assert.Equal(t, builtinLines(), got, "abi.BuiltinKernels (want) and csrc's gp_builtin_kernels (got) differ: name, dtype, parameter kinds")
}

// TestBuiltinsMatchHeader reads the list in gpurt.h's "Built-in kernels"
// comment and compares it with BuiltinKernels.
func TestBuiltinsMatchHeader(t *testing.T) {
	hdr, err := os.ReadFile(headerPath)
	require.NoError(t, err)
	text := string(hdr)
	i := strings.Index(text, "/* Built-in kernels")
	require.GreaterOrEqual(t, i, 0, "gpurt.h has no \"Built-in kernels\" section")
	j := strings.Index(text[i:], "*/\n\n")
	require.Positive(t, j)
	block := text[i : i+j]
	kinds := map[string]int32{"BUFFER": ArgBuffer, "U64": ArgU64, "F32": ArgF32}
	re := regexp.MustCompile(`(?m)^ \*   (\w+?)(_T)? *\(([^)]*)\)`)
	var got []string
	for _, m := range re.FindAllStringSubmatch(block, -1) {
		var params []int32
		for _, p := range strings.Split(m[3], ",") {
			kind := strings.Fields(strings.TrimSpace(p))[0]
			if kind == "T" {
				params = append(params, ArgAny)
				continue
			}
			k, ok := kinds[kind]
			require.True(t, ok, "gpurt.h: unknown parameter kind %q in %s", kind, m[0])
			params = append(params, k)
		}
		if m[2] == "" {
			got = append(got, fmt.Sprintf("%s %v", m[1], params))
			continue
		}
		for _, ty := range BuiltinTypes {
			ps := append([]int32(nil), params...)
			for x := range ps {
				if ps[x] == ArgAny {
					ps[x] = ty.Value
				}
			}
			got = append(got, fmt.Sprintf("%s_%s %v", m[1], ty.Suffix, ps))
		}
	}
	var want []string
	for _, k := range BuiltinKernels {
		want = append(want, fmt.Sprintf("%s %v", k.Name, k.Params))
	}
	sort.Strings(got)
	sort.Strings(want)
	assert.Equal(t, want, got, "abi.BuiltinKernels (want) and gpurt.h's Built-in kernels list (got) differ")
}

// TestBuiltinsOneName: no name twice, and each name is its op plus the
// type suffix.
func TestBuiltinsOneName(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range BuiltinKernels {
		assert.False(t, seen[k.Name], "%s twice", k.Name)
		seen[k.Name] = true
		assert.True(t, strings.HasPrefix(k.Name, k.Op), k.Name)
		assert.LessOrEqual(t, len(k.Params), 8, "%s: csrc's table holds 8 parameters (GP_BK_MAX_PARAMS)", k.Name)
	}
}
