// SPDX-License-Identifier: Apache-2.0

package mock_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metrale/gpurt/internal/testutil"
)

// exportedSymbols lists the defined dynamic symbols of a shared library with
// the platform's nm.
func exportedSymbols(t *testing.T, lib string) []string {
	t.Helper()
	args := []string{"-D", "--defined-only", lib}
	if runtime.GOOS == "darwin" {
		args = []string{"-gU", lib}
	}
	nm, err := exec.LookPath("nm")
	if err != nil {
		t.Skipf("no nm on this host: %v", err)
	}
	out := testutil.Run(t, "listing the exported symbols", nm, args...)
	var syms []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		name := f[len(f)-1]
		if runtime.GOOS == "darwin" { // Mach-O symbols carry a leading underscore
			name = strings.TrimPrefix(name, "_")
		}
		syms = append(syms, name)
	}
	return syms
}

func TestOnlyEntryExported(t *testing.T) {
	lib := testutil.MockPluginPath(t)
	require.FileExists(t, lib)
	require.Equal(t, []string{"gpurt_plugin_negotiate"}, exportedSymbols(t, lib))
}

// sanitizers lists the builds the selftest runs against: the plugin as
// shipped, and (where the compiler supports it) plugin and selftest both
// built with AddressSanitizer+UBSan and with ThreadSanitizer.
var sanitizers = []struct {
	name  string
	flags string
}{
	{"plain", ""},
	{"asan+ubsan", "-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"},
	{"tsan", "-fsanitize=thread"},
}

// supports reports whether cc can build and run a program with flags.
func supports(t *testing.T, cc, flags string) bool {
	dir := t.TempDir()
	src := filepath.Join(dir, "probe.c")
	require.NoError(t, os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o600))
	bin := filepath.Join(dir, "probe")
	args := append(strings.Fields(flags), "-o", bin, src)
	if err := exec.Command(cc, args...).Run(); err != nil {
		return false
	}
	return exec.Command(bin).Run() == nil
}

// sanitizedMock returns the sanitizer build of the mock that
// `scripts/abi_suite.sh --mock` left in build/sanitize/NAME/ when it is
// there, was built by cc (symlinks resolved) with flags (its stamp says),
// and is newer than every file it is built from; otherwise "" and why not.
func sanitizedMock(root, cc, name, flags string) (lib, why string) {
	dir := filepath.Join(root, "build", "sanitize", name)
	lib = filepath.Join(dir, "libgpurt_mock"+testutil.PluginExt())
	st, err := os.Stat(lib)
	if err != nil {
		return "", "none prebuilt"
	}
	stamp, err := os.ReadFile(filepath.Join(dir, "stamp"))
	if err != nil {
		return "", "no stamp beside " + lib
	}
	real, err := filepath.EvalSymlinks(cc)
	if err != nil {
		return "", err.Error()
	}
	if want := real + "\n" + flags + "\n"; string(stamp) != want {
		return "", "built by another compiler or with other flags"
	}
	var inputs []string
	for _, pat := range []string{"csrc/*.c", "csrc/*.h", "plugins/mock/src/*", "abi/*.h", "scripts/build_mock.sh"} {
		m, err := filepath.Glob(filepath.Join(root, pat))
		if err != nil {
			return "", err.Error()
		}
		inputs = append(inputs, m...)
	}
	for _, in := range inputs {
		fi, err := os.Stat(in)
		if err != nil {
			return "", err.Error()
		}
		if !fi.ModTime().Before(st.ModTime()) {
			return "", filepath.Base(in) + " is newer than " + lib
		}
	}
	return lib, ""
}

// TestSelftest compiles plugins/mock/test/mock_selftest.c with `go env CC`
// and runs it against the built plugin; it prints "N passed, M failed".
// The sanitizer builds of the plugin come from build/sanitize/ when
// `scripts/abi_suite.sh --mock` (make test's abi-suite step) left them
// there up to date; otherwise the test builds them.
func TestSelftest(t *testing.T) {
	cc := testutil.CC(t)
	root := testutil.RepoRoot(t)
	for _, sz := range sanitizers {
		t.Run(sz.name, func(t *testing.T) {
			lib := testutil.MockPluginPath(t)
			if sz.flags != "" {
				if !supports(t, cc, sz.flags) {
					t.Skipf("%s does not support %s here", cc, sz.flags)
				}
				if prebuilt, why := sanitizedMock(root, cc, sz.name, sz.flags); prebuilt != "" {
					t.Logf("the %s plugin scripts/abi_suite.sh --mock built: %s", sz.name, prebuilt)
					lib = prebuilt
				} else {
					t.Logf("building the %s plugin (%s)", sz.name, why)
					dir := t.TempDir()
					cmd := exec.Command("bash", filepath.Join(root, "scripts", "build_mock.sh"), dir)
					cmd.Env = append(os.Environ(), "CC="+cc, "GPURT_MOCK_CFLAGS="+sz.flags)
					out, err := cmd.CombinedOutput()
					require.NoError(t, err, "building the %s plugin: %s", sz.name, out)
					lib = filepath.Join(dir, "libgpurt_mock"+testutil.PluginExt())
				}
			}
			bin := filepath.Join(t.TempDir(), "mock_selftest")
			src := filepath.Join(root, "plugins", "mock", "test", "mock_selftest.c")
			args := []string{"-std=c11", "-D_GNU_SOURCE", "-O1", "-g", "-Wall", "-Wextra", "-Werror"}
			args = append(args, strings.Fields(sz.flags)...)
			args = append(args, "-I"+filepath.Join(root, "abi"), "-o", bin, src, "-lpthread", "-lm")
			if runtime.GOOS == "linux" {
				args = append(args, "-ldl")
			}
			out, err := exec.Command(cc, args...).CombinedOutput()
			require.NoError(t, err, "compiling the selftest: %s", out)
			cmd := exec.Command(bin, lib)
			cmd.Env = append(os.Environ(), "GPURT_MOCK_DELAY_US=20")
			out, err = cmd.CombinedOutput()
			t.Logf("%s", out)
			require.NoError(t, err, "mock_selftest (%s) failed", sz.name)
			require.Contains(t, string(out), " 0 failed")
		})
	}
}
