// SPDX-License-Identifier: Apache-2.0

//go:build (linux || darwin) && (amd64 || arm64)

package loader

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/metrale/gpurt/internal/testutil"
)

// buildPathCheck compiles testdata/pathcheck.c with csrc/gp_path.c (the
// helper the CUDA plugin uses for GPURT_CUBLASLT_PATH) into a private
// folder.
func buildPathCheck(t *testing.T) string {
	cc := testutil.CC(t)
	root := testutil.RepoRoot(t)
	out := filepath.Join(privDir(t), "pathcheck")
	args := []string{"-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-I" + filepath.Join(root, "csrc"),
		"-o", out, filepath.Join("testdata", "pathcheck.c"), filepath.Join(root, "csrc", "gp_path.c"), "-ldl"}
	b, err := exec.Command(cc, args...).CombinedOutput()
	require.NoError(t, err, "%s %v\n%s", cc, args, b)
	return out
}

// normalize drops what the two languages word differently: the "refused: "
// prefix and the way a mode is written.
var modeRE = regexp.MustCompile(` \(mode [^)]*\)`)

func normalize(s string) string {
	return modeRE.ReplaceAllString(strings.TrimPrefix(s, "refused: "), "")
}

// eachTrustCase runs check, as a subtest, on the plugin path of each
// layout of trustCases with the Go loader's verdict on it: the resolved
// path, or the refusal.
func eachTrustCase(t *testing.T, check func(t *testing.T, path, goReal string, r *refusal)) {
	for _, tc := range trustCases() {
		t.Run(tc.name, func(t *testing.T) {
			_, path := tc.setup(t)
			goReal, _, r := trustedFile(path)
			check(t, path, goReal, r)
		})
	}
}

// TestTrustedFileInC: the C helper agrees with the Go loader on every
// layout of TestWholePathChecked: the same verdict, the same resolved path,
// the same component named for the same cause.
func TestTrustedFileInC(t *testing.T) {
	bin := buildPathCheck(t)
	eachTrustCase(t, func(t *testing.T, path, goReal string, r *refusal) {
		out, err := exec.Command(bin, path).Output()
		require.NoError(t, err)
		verdict, text, ok := strings.Cut(strings.TrimSuffix(string(out), "\n"), "\t")
		require.True(t, ok, "%q", out)
		if r == nil {
			assert.Equal(t, "ok", verdict, text)
			assert.Equal(t, goReal, text)
			return
		}
		assert.Equal(t, "refused", verdict)
		assert.Equal(t, normalize(r.reason), normalize(text))
	})
	t.Run("relative path", func(t *testing.T) {
		out, err := exec.Command(bin, "libcublasLt.so.13").Output()
		require.NoError(t, err)
		assert.Equal(t, "refused\tlibcublasLt.so.13 is not an absolute path\n", string(out))
	})
	t.Run("group-writable file", func(t *testing.T) {
		p := buildPlugin(t, privDir(t), "mock")
		require.NoError(t, os.Chmod(p, 0o664))
		out, err := exec.Command(bin, p).Output()
		require.NoError(t, err)
		assert.Equal(t, "refused\tfile "+p+" is writable by group or others (mode 0664)\n", string(out))
	})
}

// TestTrustedOpenInC: gp_trusted_open (GPURT_CUBLASLT_PATH and
// GPURT_NCCL_PATH on CUDA: check, open once, dlopen the descriptor) gives
// the path checks' verdict on every layout, a descriptor naming the
// resolved file, and a dlopen through it that loads that file; a FIFO is
// refused at once.
func TestTrustedOpenInC(t *testing.T) {
	bin := buildPathCheck(t)
	eachTrustCase(t, func(t *testing.T, path, goReal string, r *refusal) {
		out, err := exec.Command(bin, "--open", path).Output()
		require.NoError(t, err)
		f := strings.Split(strings.TrimSuffix(string(out), "\n"), "\t")
		if r == nil {
			require.Len(t, f, 3, "%q", out)
			assert.Equal(t, "ok", f[0])
			assert.Regexp(t, `^(/proc/self/fd|/dev/fd)/[0-9]+$`, f[1])
			if runtime.GOOS == "linux" {
				assert.Equal(t, goReal, f[2], "the descriptor names the checked file")
			}
			return
		}
		require.Len(t, f, 2, "%q", out)
		assert.Equal(t, "refused", f[0])
		assert.Equal(t, normalize(r.reason), normalize(f[1]))
	})
	t.Run("dlopen through the descriptor", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skip("loading through /proc/self/fd is Linux's")
		}
		p := buildPlugin(t, privDir(t), "mock")
		out, err := exec.Command(bin, "--open", p, "gpurt_plugin_negotiate").Output()
		require.NoError(t, err)
		assert.Regexp(t, `^ok\t/proc/self/fd/[0-9]+\t`+regexp.QuoteMeta(p)+`\tsymbol found\n$`, string(out))
	})
	t.Run("FIFO", func(t *testing.T) {
		dir := privDir(t)
		p := filepath.Join(dir, "libcublasLt.so.13")
		require.NoError(t, unix.Mkfifo(p, 0o600))
		cmd := exec.Command(bin, "--open", p)
		done := make(chan struct{})
		var out []byte
		var err error
		go func() { out, err = cmd.Output(); close(done) }()
		select {
		case <-done:
			require.NoError(t, err)
			assert.Equal(t, "refused\t"+p+" is not a regular file\n", string(out))
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatal("gp_trusted_open blocked on a FIFO")
		}
	})
}

// TestSecureGetenvInC: a setuid process does not see the variable.
func TestSecureGetenvInC(t *testing.T) {
	bin := buildPathCheck(t)
	cmd := exec.Command(bin, "--env", "GPURT_CUBLASLT_PATH")
	cmd.Env = append(os.Environ(), "GPURT_CUBLASLT_PATH=/opt/evil/libcublasLt.so.13")
	out, err := cmd.Output()
	require.NoError(t, err)
	assert.Contains(t, string(out), "set\t/opt/evil/libcublasLt.so.13\n", "a plain process reads it")

	t.Run("setuid", func(t *testing.T) {
		requireRoot(t)
		dir := mkdir(t, filepath.Join(privDir(t), "suid"), 0o755)
		suid := filepath.Join(dir, "pathcheck")
		b, err := os.ReadFile(bin)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(suid, b, 0o755))
		require.NoError(t, os.Chown(suid, otherUID, otherUID))
		require.NoError(t, os.Chmod(suid, 0o755|os.ModeSetuid))
		cmd := exec.Command(suid, "--env", "GPURT_CUBLASLT_PATH")
		cmd.Env = append(os.Environ(), "GPURT_CUBLASLT_PATH=/opt/evil/libcublasLt.so.13")
		out, err := cmd.Output()
		require.NoError(t, err)
		if strings.HasPrefix(string(out), "euid 0\n") {
			t.Skip("the setuid bit had no effect here (a nosuid file system?)")
		}
		assert.Equal(t, "euid 65534\nunset\n", string(out))
	})
}
