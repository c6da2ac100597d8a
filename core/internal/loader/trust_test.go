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

// otherUID owns the files of the ownership cases ("nobody" on most systems).
const otherUID = 65534

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user (os.Chown)")
	}
}

// mkdir makes dir with exactly mode (umask and sticky bit included).
func mkdir(t *testing.T, dir string, mode os.FileMode) string {
	t.Helper()
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.Chmod(dir, mode))
	return dir
}

// TestWholePathChecked: the loader checks every folder from / down, every
// symbolic link and the file, for owner and write permission; a sticky
// folder may be writable by others.
func TestWholePathChecked(t *testing.T) {
	for _, tc := range trustCases() {
		t.Run(tc.name, func(t *testing.T) {
			search, path := tc.setup(t)
			opts, _ := testOpts(t, search)
			rep, p, err := Choose(opts)
			c := find(t, rep, path)
			if tc.reason == "" {
				require.NoError(t, err)
				require.NotNil(t, p)
				assert.Equal(t, StateSelected, c.State, c.Reason)
				return
			}
			require.Error(t, err)
			require.Nil(t, p, "a refused plugin is never loaded")
			assert.Equal(t, StateFailed, c.State)
			// <name> in the expected reason stands for that folder of the
			// case; only the fixed part is compared.
			for _, part := range strings.Split(tc.reason, "<") {
				if i := strings.Index(part, ">"); i >= 0 {
					part = part[i+1:]
				}
				assert.Contains(t, c.Reason, part)
			}
			assert.Contains(t, c.Reason, "refused: ")
		})
	}
}

// trustCase is one layout of folders, links and a plugin file.
type trustCase struct {
	name string
	// setup returns what to search (a folder or a file) and the
	// candidate path expected in the report.
	setup  func(t *testing.T) (search, cand string)
	reason string // "" = loads and is selected
}

// trustCases are shared by the Go loader's test and the C helper's
// (csrc/gp_path.c), which must agree on every one.
func trustCases() []trustCase {
	return []trustCase{
		{"0755 folder inside a world-writable non-sticky parent", func(t *testing.T) (string, string) {
			parent := mkdir(t, filepath.Join(privDir(t), "open"), 0o777)
			dir := mkdir(t, filepath.Join(parent, "plugins"), 0o755)
			return dir, buildPlugin(t, dir, "mock")
		}, "is writable by group or others (mode drwxrwxrwx) and not sticky"},
		{"0755 folder two levels below a group-writable folder", func(t *testing.T) (string, string) {
			top := mkdir(t, filepath.Join(privDir(t), "top"), 0o775)
			mid := mkdir(t, filepath.Join(top, "mid"), 0o755)
			dir := mkdir(t, filepath.Join(mid, "plugins"), 0o755)
			return dir, buildPlugin(t, dir, "mock")
		}, "folder " + "<top>" + " is writable by group or others"},
		{"0755 folder inside a world-writable sticky parent", func(t *testing.T) (string, string) {
			parent := mkdir(t, filepath.Join(privDir(t), "sticky"), 0o777|os.ModeSticky)
			dir := mkdir(t, filepath.Join(parent, "plugins"), 0o755)
			return dir, buildPlugin(t, dir, "mock")
		}, ""},
		{"plugin file owned by another user", func(t *testing.T) (string, string) {
			requireRoot(t)
			dir := privDir(t)
			p := buildPlugin(t, dir, "mock")
			require.NoError(t, os.Chown(p, otherUID, otherUID))
			return dir, p
		}, "is owned by uid 65534, not by root or the user running this process"},
		{"plugin folder owned by another user", func(t *testing.T) (string, string) {
			requireRoot(t)
			dir := mkdir(t, filepath.Join(privDir(t), "theirs"), 0o755)
			p := buildPlugin(t, dir, "mock")
			require.NoError(t, os.Chown(dir, otherUID, otherUID))
			return dir, p
		}, "folder <dir> is owned by uid 65534"},
		{"symlink chain through a world-writable folder", func(t *testing.T) (string, string) {
			real := buildPlugin(t, privDir(t), "mock")
			open := mkdir(t, filepath.Join(privDir(t), "open"), 0o777)
			hop := filepath.Join(open, "hop.so")
			require.NoError(t, os.Symlink(real, hop))
			return linkedPlugin(t, hop)
		}, "is writable by group or others (mode drwxrwxrwx) and not sticky"},
		{"symlink to a folder under a world-writable folder", func(t *testing.T) (string, string) {
			open := mkdir(t, filepath.Join(privDir(t), "open"), 0o777)
			inner := mkdir(t, filepath.Join(open, "inner"), 0o755)
			buildPlugin(t, inner, "mock")
			dir := privDir(t)
			require.NoError(t, os.Symlink(inner, filepath.Join(dir, "lib")))
			p := filepath.Join(dir, "lib", "libgpurt_mock"+pluginExt())
			return p, p
		}, "is writable by group or others (mode drwxrwxrwx) and not sticky"},
		{"symlink owned by another user in a sticky folder", func(t *testing.T) (string, string) {
			requireRoot(t)
			real := buildPlugin(t, privDir(t), "mock")
			sticky := mkdir(t, filepath.Join(privDir(t), "sticky"), 0o777|os.ModeSticky)
			hop := filepath.Join(sticky, "hop.so")
			require.NoError(t, os.Symlink(real, hop))
			require.NoError(t, os.Lchown(hop, otherUID, otherUID))
			return linkedPlugin(t, hop)
		}, "symbolic link <sticky>/hop.so is owned by uid 65534"},
		{"relative symlink chain through private folders", func(t *testing.T) (string, string) {
			root := privDir(t)
			a := mkdir(t, filepath.Join(root, "a"), 0o755)
			b := mkdir(t, filepath.Join(root, "b"), 0o755)
			buildPlugin(t, a, "mock")
			require.NoError(t, os.Symlink(filepath.Join("..", "a", "libgpurt_mock"+pluginExt()), filepath.Join(b, "hop.so")))
			link := filepath.Join(b, "libgpurt_mock"+pluginExt())
			require.NoError(t, os.Symlink("hop.so", link))
			return b, link
		}, ""},
		{"symlink loop", func(t *testing.T) (string, string) {
			dir, link := linkedPlugin(t, "loop.so")
			require.NoError(t, os.Symlink("libgpurt_mock"+pluginExt(), filepath.Join(dir, "loop.so")))
			return dir, link
		}, "refused: more than 40 symbolic links resolving"},
	}
}

// linkedPlugin makes a private folder whose plugin file
// (libgpurt_mock.so) is a symbolic link to target, and returns the folder
// and the link.
func linkedPlugin(t *testing.T, target string) (dir, link string) {
	dir = privDir(t)
	link = filepath.Join(dir, "libgpurt_mock"+pluginExt())
	require.NoError(t, os.Symlink(target, link))
	return dir, link
}

// TestTrustedFileNames: the refused component is named exactly.
func TestTrustedFileNames(t *testing.T) {
	top := mkdir(t, filepath.Join(privDir(t), "top"), 0o777)
	dir := mkdir(t, filepath.Join(top, "d"), 0o755)
	p := buildPlugin(t, dir, "mock")
	_, _, r := trustedFile(p)
	require.NotNil(t, r)
	assert.Equal(t, "refused: folder "+top+" is writable by group or others (mode drwxrwxrwx) and not sticky", r.reason)

	t.Run("relative path", func(t *testing.T) {
		_, _, r := trustedFile("lib/libgpurt_mock.so")
		require.NotNil(t, r)
		assert.Contains(t, r.reason, "is not an absolute path")
	})
	t.Run("a file in the middle of the path", func(t *testing.T) {
		f := buildPlugin(t, privDir(t), "mock")
		_, _, r := trustedFile(filepath.Join(f, "x.so"))
		require.NotNil(t, r)
		assert.Contains(t, r.reason, "is not a folder")
	})
	t.Run("resolved path has no symlinks", func(t *testing.T) {
		real := buildPlugin(t, privDir(t), "mock")
		_, link := linkedPlugin(t, real)
		got, fi, r := trustedFile(link)
		require.Nil(t, r)
		want, err := filepath.EvalSymlinks(real)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		assert.True(t, fi.Mode().IsRegular())
	})
	t.Run("a file of the running user (not root) is trusted", func(t *testing.T) {
		requireRoot(t)
		d := mkdir(t, filepath.Join(privDir(t), "mine"), 0o755)
		f := buildPlugin(t, d, "mock")
		require.NoError(t, os.Chown(f, otherUID, otherUID))
		_, _, r := trustedFileAs(f, otherUID)
		assert.Nil(t, r, "owned by the effective uid")
		_, _, r = trustedFileAs(f, 0)
		require.NotNil(t, r)
		assert.Contains(t, r.reason, "owned by uid 65534")
	})
}

// resetLoaded forgets which files this process loaded, as a new process
// would.
func resetLoaded() {
	loaded.Lock()
	loaded.m = nil
	loaded.Unlock()
	pinned.Lock()
	for _, p := range pinned.m {
		retiredPins = append(retiredPins, p.f) // never closed: dlopen knows their names
	}
	pinned.m = map[[2]uint64]pinnedFile{}
	pinned.Unlock()
}

// retiredPins keeps the descriptors resetLoaded forgot open (and out of
// the garbage collector's reach).
var retiredPins []*os.File

// TestReplacedPlugin: a plugin file replaced on disk after this process
// loaded it is refused (dlopen would hand back the old code).
func TestReplacedPlugin(t *testing.T) {
	dir := privDir(t)
	path := buildPlugin(t, dir, "mock", "-DSCORE=1")
	opts, _ := testOpts(t, dir)
	rep, p, err := Choose(opts)
	require.NoError(t, err)
	require.NotNil(t, p)
	assert.Equal(t, int32(1), find(t, rep, path).Score)

	t.Run("unchanged: loads again", func(t *testing.T) {
		rep, p, err := Choose(opts)
		require.NoError(t, err)
		require.NotNil(t, p)
		assert.Equal(t, StateSelected, find(t, rep, path).State)
	})
	t.Run("replaced: refused", func(t *testing.T) {
		fresh := buildPlugin(t, privDir(t), "mock", "-DSCORE=7")
		require.NoError(t, os.Rename(fresh, path))
		rep, p, err := Choose(opts)
		require.Error(t, err)
		require.Nil(t, p)
		c := find(t, rep, path)
		assert.Equal(t, StateFailed, c.State)
		assert.Contains(t, c.Reason, "changed on disk since this process loaded it")
		assert.Contains(t, c.Reason, "restart")
		assert.Contains(t, c.Detail, "loaded: dev ")
	})
}

// buildPathCheck compiles testdata/pathcheck.c with csrc/gp_path.c (the
// helper the CUDA plugin uses for GPURT_CUBLASLT_PATH) into a private
// folder.
func buildPathCheck(t *testing.T) string {
	root := testutil.RepoRoot(t)
	out := filepath.Join(privDir(t), "pathcheck")
	testutil.Compile(t, "testdata/pathcheck.c", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-I"+filepath.Join(root, "csrc"),
		"-o", out, filepath.Join("testdata", "pathcheck.c"), filepath.Join(root, "csrc", "gp_path.c"), "-ldl")
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
