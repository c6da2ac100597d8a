// SPDX-License-Identifier: Apache-2.0

package tests

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/metrale/gpurt/internal/testutil"
)

// TestNoTrackedSymlinks fails on a symbolic link in the repository's
// index: a link to a local folder (a tool cache such as .cuda-venv) is
// dangling in every other clone, and build scripts then fail on it. A
// .gitignore pattern with a trailing slash matches folders only, so a
// link of the same name is not ignored.
func TestNoTrackedSymlinks(t *testing.T) {
	root := testutil.RepoRoot(t)
	cmd := exec.Command("git", "ls-files", "-s")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("not a git checkout here (git ls-files: %v)", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	n := 0
	for sc.Scan() {
		n++
		// "<mode> <object> <stage>\t<path>"
		meta, path, _ := strings.Cut(sc.Text(), "\t")
		if strings.HasPrefix(meta, "120000 ") {
			t.Errorf("%s is a tracked symbolic link: git rm --cached it (and ignore it without a trailing slash)", path)
		}
	}
	if n == 0 {
		t.Skip("git ls-files listed nothing (an exported tree, not a checkout)")
	}
}
