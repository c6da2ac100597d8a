// SPDX-License-Identifier: Apache-2.0

package mock_test

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil/backendsrc"
)

// The file layering of every plugin: a file uses a function of another
// file of its plugin (a call, or its name in a table) only downwards, so
// that no circle of files exists inside a plugin (issue 21: *_plugin.c was
// both the table at the top and the runtime helpers at the bottom). The
// plugins' READMEs draw the layers; this test is what holds them.

// fileGraph maps each source file of dir to the other files whose
// (non-static) functions it uses.
func fileGraph(t *testing.T, dir string) map[string][]string {
	t.Helper()
	var files []string
	for _, pat := range []string{"*.c", "*.m"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		require.NoError(t, err)
		files = append(files, m...)
	}
	texts := map[string]string{}
	owner := map[string]string{} // function -> file that defines it
	for _, f := range files {
		text := backendsrc.Source(t, f) // comments and strings blanked: they say names without using them
		base := filepath.Base(f)
		texts[base] = text
		for _, name := range backendsrc.Functions(text, true) {
			owner[name] = base
		}
	}
	g := map[string][]string{}
	for base, text := range texts {
		seen := map[string]bool{}
		for _, tok := range backendsrc.Names(text) {
			if o, ok := owner[tok]; ok && o != base && !seen[o] {
				seen[o] = true
				g[base] = append(g[base], o)
			}
		}
		sort.Strings(g[base])
		if _, ok := g[base]; !ok {
			g[base] = nil
		}
	}
	return g
}

// circles returns the strongly connected components of more than one file
// (Tarjan), each sorted, as "a -> b -> a" paths for the message.
func circles(g map[string][]string) []string {
	index, low := map[string]int{}, map[string]int{}
	on := map[string]bool{}
	var stack []string
	var out []string
	n := 0
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = n, n
		n++
		stack = append(stack, v)
		on[v] = true
		for _, w := range g[v] {
			if _, ok := index[w]; !ok {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if on[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var comp []string
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				on[w] = false
				comp = append(comp, w)
				if w == v {
					break
				}
			}
			if len(comp) > 1 {
				sort.Strings(comp)
				out = append(out, strings.Join(comp, ", "))
			}
		}
	}
	keys := make([]string, 0, len(g))
	for k := range g {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := index[k]; !ok {
			visit(k)
		}
	}
	return out
}

func TestNoFileCircleInAnyPlugin(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("..", "*", "src"))
	require.NoError(t, err)
	require.NotEmpty(t, dirs)
	for _, dir := range dirs {
		name := filepath.Base(filepath.Dir(dir))
		t.Run(name, func(t *testing.T) {
			g := fileGraph(t, dir)
			require.NotEmpty(t, g, "no C or Objective-C files in %s", dir)
			var uses []string
			for f, to := range g {
				for _, o := range to {
					uses = append(uses, fmt.Sprintf("%s -> %s", f, o))
				}
			}
			sort.Strings(uses)
			require.Empty(t, circles(g), "plugins/%s/src has circles of files (each a set of files that use each "+
				"other's functions); its uses:\n%s", name, strings.Join(uses, "\n"))
		})
	}
}

// The checker itself finds a circle of three files and none in a chain.
func TestCirclesFindsACircle(t *testing.T) {
	tests := []struct {
		name string
		g    map[string][]string
		want []string
	}{
		{"chain", map[string][]string{"a": {"b"}, "b": {"c"}, "c": nil}, nil},
		{"three", map[string][]string{"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, []string{"a, b, c"}},
		{"two and a tail", map[string][]string{"a": {"b"}, "b": {"a", "c"}, "c": nil}, []string{"a, b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, circles(tc.g))
		})
	}
}

// The mock is a backend of csrc's engine (csrc/gp_backend.h, issue 21):
// the engine implements every gpurt_api slot (handles, the caller's
// structs, checks, errors) and the mock implements gp_backend entries and
// its math only. So no file of plugins/mock/src names a gpurt_* handle
// type, the api table, a struct_size, or the engine's struct and handle
// helpers; only mock_plugin.c includes gp_engine.h (for the entry).
func TestMockIsOnlyABackend(t *testing.T) {
	backendsrc.CheckOnlyABackend(t, "src", "mock_plugin.c", "*.c", "*.h")
}
