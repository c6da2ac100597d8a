// SPDX-License-Identifier: Apache-2.0

package tests

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

// TestGoroutinePackagesRunUnderRace keeps make test's race pass honest
// while it runs only some packages: every package with tests that starts
// goroutines (a go statement, t.Parallel or b.RunParallel in its tests, or
// a go statement in its own code) must be matched by the Makefile's
// RACE_PKGS, or, in a module of its own, that module must be in
// RACE_MODULES. The rest runs once, in the plain pass: a single goroutine
// cannot race, and the race pass costs a second, instrumented build.
func TestGoroutinePackagesRunUnderRace(t *testing.T) {
	root := testutil.RepoRoot(t)
	pkgs := makeList(t, root, "RACE_PKGS")
	mods := makeList(t, root, "RACE_MODULES")
	require.NotEmpty(t, pkgs, "Makefile: RACE_PKGS is empty")

	busy := goroutinePackages(t, root)
	found := 0
	for dir, why := range busy {
		found++
		mod := moduleOf(root, dir)
		if mod != "." {
			assert.True(t, slices.Contains(mods, mod),
				"%s (module %s) starts goroutines (%s) but its module is not in the Makefile's RACE_MODULES %v", dir, mod, why, mods)
			continue
		}
		assert.True(t, matchesAny("./"+dir, pkgs),
			"./%s starts goroutines (%s) but no pattern of the Makefile's RACE_PKGS %v matches it: add it there (make test's race pass)", dir, why, pkgs)
	}
	assert.Positive(t, found, "no package with goroutines found: the scan is broken")
	// And the other way: a pattern matching no such package is dead weight
	// in the race pass (an instrumented build and run for nothing).
	for _, p := range pkgs {
		hit := false
		for dir := range busy {
			if moduleOf(root, dir) == "." && matchesAny("./"+dir, []string{p}) {
				hit = true
			}
		}
		assert.True(t, hit, "RACE_PKGS pattern %s matches no package whose tests or code start goroutines", p)
	}
}

// makeList reads `NAME := a b c` from the Makefile.
func makeList(t *testing.T, root, name string) []string {
	f, err := os.Open(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" := "); ok {
			return strings.Fields(v)
		}
	}
	require.NoError(t, sc.Err())
	t.Fatalf("Makefile: no line %q", name+" := ...")
	return nil
}

// matchesAny: go's package patterns as make test writes them (./a/b or
// ./a/...).
func matchesAny(pkg string, patterns []string) bool {
	for _, p := range patterns {
		if base, ok := strings.CutSuffix(p, "/..."); ok {
			if pkg == base || strings.HasPrefix(pkg, base+"/") {
				return true
			}
		} else if pkg == p {
			return true
		}
	}
	return false
}

// moduleOf is the folder (relative to root, "." for the root module) of
// the nearest go.mod at or above dir.
func moduleOf(root, dir string) string {
	for d := dir; d != "." && d != "/" && d != ""; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(root, d, "go.mod")); err == nil {
			return filepath.ToSlash(d)
		}
	}
	return "."
}

// goroutinePackages maps each package folder (relative, slash-separated)
// that has tests and starts goroutines to the first place that does.
func goroutinePackages(t *testing.T, root string) map[string]string {
	type pkg struct {
		tests bool
		why   string
	}
	all := map[string]*pkg{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "build" || name == "dist") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		rel = filepath.ToSlash(rel)
		k := all[rel]
		if k == nil {
			k = &pkg{}
			all[rel] = k
		}
		test := strings.HasSuffix(name, "_test.go")
		k.tests = k.tests || test
		if k.why != "" {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if k.why != "" {
				return false
			}
			switch n := n.(type) {
			case *ast.GoStmt:
				k.why = "a go statement in " + name
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && test && (sel.Sel.Name == "Parallel" || sel.Sel.Name == "RunParallel") {
					k.why = sel.Sel.Name + " in " + name
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	out := map[string]string{}
	for d, k := range all {
		if k.tests && k.why != "" {
			out[d] = k.why
		}
	}
	return out
}
