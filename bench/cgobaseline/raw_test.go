// SPDX-License-Identifier: Apache-2.0

package cgobaseline_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/bench/cgobaseline"
	"github.com/metrale/gpurt/internal/testutil"
)

// cudaInclude is a folder with cuda.h and cublasLt.h: GPURT_CUDA_INCLUDE,
// the PyPI packages scripts/build_cuda.sh installs into .cuda-venv, or the
// toolkit's; "" when there is none.
func cudaInclude(t *testing.T) string {
	var dirs []string
	if d := os.Getenv("GPURT_CUDA_INCLUDE"); d != "" {
		dirs = append(dirs, d)
	}
	venv, _ := filepath.Glob(filepath.Join(testutil.RepoRoot(t), ".cuda-venv", "lib", "python3*", "site-packages", "nvidia", "cu13", "include"))
	dirs = append(dirs, venv...)
	dirs = append(dirs, "/usr/local/cuda/include")
	for _, d := range dirs {
		_, e1 := os.Stat(filepath.Join(d, "cuda.h"))
		_, e2 := os.Stat(filepath.Join(d, "cublasLt.h"))
		if e1 == nil && e2 == nil {
			return d
		}
	}
	return ""
}

// TestRawDeclarationsMatchTheHeaders compiles testdata/raw_check.c, which
// checks raw.h's own CUDA and cuBLASLt declarations (built without CUDA
// headers) against the real ones, and runs it.
func TestRawDeclarationsMatchTheHeaders(t *testing.T) {
	testutil.CC(t) // skips without a C compiler
	inc := cudaInclude(t)
	if inc == "" {
		t.Skip("no cuda.h and cublasLt.h (run scripts/build_cuda.sh --ci, or set GPURT_CUDA_INCLUDE)")
	}
	src := filepath.Join("testdata", "raw_check.c")
	csrc := filepath.Join("..", "..", "csrc") // gp_cublaslt.h, as raw.go's -I
	bin := filepath.Join(t.TempDir(), "raw_check")
	for _, c := range []struct {
		name string
		args []string
	}{
		{"declarations", []string{"-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-fsyntax-only", "-I" + inc, "-I" + csrc, src}},
		{"symbols", []string{"-std=c11", "-Wall", "-Werror", "-DGBR_CHECK_RUN", "-I" + inc, "-I" + csrc, src, "-o", bin}},
	} {
		t.Run(c.name, func(t *testing.T) {
			testutil.Compile(t, src+" ("+c.name+")", c.args...)
		})
	}
	assert.Contains(t, string(testutil.Run(t, "running the check", bin)), "raw.h matches")
}

// TestRawOnThisMachine: on a machine without the driver OpenRaw fails with
// the step; with one, the launch path runs.
func TestRawOnThisMachine(t *testing.T) {
	r, err := cgobaseline.OpenRaw()
	if err != nil {
		assert.ErrorContains(t, err, "cgobaseline: ")
		t.Skipf("no CUDA driver or device: %v", err)
	}
	defer r.Close()
	require.NoError(t, r.PrepareLaunch())
	require.NoError(t, r.LaunchLoop(10))
	require.NoError(t, r.Synchronize())
	const m, n, k = 64, 8, 64
	err = r.PrepareGemm(m, n, k, make([]byte, 2*k*m), make([]byte, 2*k*n))
	if err != nil {
		t.Skipf("no cuBLASLt: %v", err)
	}
	require.NoError(t, r.GemmLoop(5))
	require.NoError(t, r.Synchronize())
}
