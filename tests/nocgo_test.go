// SPDX-License-Identifier: Apache-2.0

package tests

import (
	"bufio"
	"bytes"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

const module = "github.com/metrale/gpurt"

// TestNoCgo checks that no package under core/, abi/ or cmd/, nor anything
// of this module they depend on, imports "C" in a default build, on every
// target the binary ships for. go list is run with cgo enabled, so that
// files that would only build with cgo count too.
func TestNoCgo(t *testing.T) {
	root := testutil.RepoRoot(t)
	for _, target := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"} {
		t.Run(target, func(t *testing.T) {
			goos, goarch, _ := strings.Cut(target, "/")
			out := testutil.Go(t, root, []string{"GOOS=" + goos, "GOARCH=" + goarch, "CGO_ENABLED=1", "GOFLAGS=-mod=mod"},
				"list", "-deps", "-f", "{{.ImportPath}} {{join .CgoFiles \",\"}}", "./core/...", "./internal/abi/...", "./cmd/...")
			n := 0
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				path, files, _ := strings.Cut(sc.Text(), " ")
				if path != module && !strings.HasPrefix(path, module+"/") {
					continue
				}
				n++
				assert.Empty(t, files, "%s imports \"C\" (%s) for %s", path, files, target)
			}
			assert.Positive(t, n, "go list found none of this module's packages")
		})
	}
}

// TestNoCgoSource parses every non-test Go file under core/, abi/ and cmd/
// with go/parser (whatever its build tags) and reports an import of "C".
// A cgo benchmark baseline may live only in a folder named cgobaseline.
func TestNoCgoSource(t *testing.T) {
	root := testutil.RepoRoot(t)
	for _, top := range []string{"core", "abi", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			if strings.Contains(filepath.ToSlash(p), "/testdata/") || strings.Contains(filepath.ToSlash(p), "/cgobaseline/") {
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				if imp.Path.Value == `"C"` {
					rel, _ := filepath.Rel(root, p)
					t.Errorf("%s imports \"C\"", rel)
				}
			}
			return nil
		})
		require.NoError(t, err)
	}
}
