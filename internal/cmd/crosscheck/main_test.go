// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// module writes a throwaway module: package a (all targets, importing
// fmt and os), with extra files as given.
func module(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	all := map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.22\n",
		"a/a.go": "package a\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc Hello() { fmt.Fprintln(os.Stdout, \"hello\", osName()) }\n",
	}
	for k, v := range files {
		all[k] = v
	}
	for name, text := range all {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	}
	return dir
}

// A type error in a darwin-only file (in a function body: an unused
// variable) is found for darwin and not for linux, with its file and line;
// a clean tree passes on both.
func TestTargetsFiles(t *testing.T) {
	good := map[string]string{
		"a/os_linux.go":  "package a\n\nfunc osName() string { return \"linux\" }\n",
		"a/os_darwin.go": "package a\n\nfunc osName() string { return \"darwin\" }\n",
	}
	dir := module(t, good)
	for _, target := range []string{"linux/amd64", "darwin/arm64"} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 0, run([]string{"-C", dir, target, "--", "./..."}, &stdout, &stderr), stderr.String())
		assert.Contains(t, stdout.String(), "crosscheck: "+target+": 1 packages of this module type-check")
	}

	bad := map[string]string{
		"a/os_linux.go":  good["a/os_linux.go"],
		"a/os_darwin.go": "package a\n\nfunc osName() string {\n\tn := 1\n\treturn \"darwin\"\n}\n",
	}
	dir = module(t, bad)
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 0, run([]string{"-C", dir, "linux/arm64", "--", "./..."}, &stdout, &stderr), stderr.String())
	stdout.Reset()
	assert.Equal(t, 1, run([]string{"-C", dir, "linux/arm64", "darwin/amd64", "--", "./..."}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "os_darwin.go:4:2: declared and not used: n")
	assert.Contains(t, stderr.String(), "crosscheck: darwin/amd64: 1 type errors")

	// A file missing for one target: osName undefined on windows.
	stderr.Reset()
	dir = module(t, good)
	assert.Equal(t, 1, run([]string{"-C", dir, "windows/amd64", "--", "./..."}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "undefined: osName")
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"linux/amd64"}, {"--", "./..."}, {"linux", "--", "./..."}} {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, 2, run(args, &stdout, &stderr), "%q", args)
		assert.Contains(t, stderr.String(), "crosscheck: ")
	}
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 0, run([]string{"-h"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "usage: crosscheck")
	stderr.Reset()
	assert.Equal(t, 1, run([]string{"-C", t.TempDir(), "linux/amd64", "--", "./..."}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "does not contain main module") // no go.mod there
}
