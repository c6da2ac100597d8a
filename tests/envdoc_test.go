// SPDX-License-Identifier: Apache-2.0

package tests

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

// TestEveryEnvironmentVariableIsDocumented fails when a source file of the
// core, a plugin or a command names a GPURT_ variable that README.md's
// "Environment variables" table has no row for: a new switch read with
// getenv is a mirror easily forgotten. A name counts when it stands as a
// string literal ("GPURT_X") in a tracked non-test source file and is not
// an identifier of abi/gpurt.h (error codes, limits, flags), a prefix
// (ending in _) or a test hook (GPURT_TEST_*).
func TestEveryEnvironmentVariableIsDocumented(t *testing.T) {
	root := testutil.RepoRoot(t)
	cmd := exec.Command("git", "ls-files", "*.c", "*.h", "*.cu", "*.cuh", "*.m", "*.go")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("not a git checkout here (git ls-files: %v)", err)
	}
	header, err := os.ReadFile(filepath.Join(root, "abi", "gpurt.h"))
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	inHeader := map[string]bool{}
	for _, m := range regexp.MustCompile(`\bGPURT_[A-Z0-9_]+\b`).FindAllString(string(header), -1) {
		inHeader[m] = true
	}
	lit := regexp.MustCompile(`"(GPURT_[A-Z][A-Z0-9_]*)"`)
	where := map[string]string{}
	files := strings.Fields(string(out))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || strings.HasPrefix(f, "bench/results/") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, f))
		require.NoError(t, err)
		for _, m := range lit.FindAllStringSubmatch(string(src), -1) {
			name := m[1]
			if inHeader[name] || strings.HasSuffix(name, "_") || strings.HasPrefix(name, "GPURT_TEST_") {
				continue
			}
			if _, seen := where[name]; !seen {
				where[name] = f
			}
		}
	}
	require.NotEmpty(t, where, "no GPURT_ variable found in %d files: the scan is broken", len(files))
	require.Contains(t, where, "GPURT_PLUGIN_PATH", "the scan misses a variable it must find")
	var missing []string
	for name, f := range where {
		if !strings.Contains(string(readme), "| `"+name+"` |") {
			missing = append(missing, name+" (read in "+f+")")
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "README.md's \"Environment variables\" table has no row for these")
}
