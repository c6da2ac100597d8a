// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// embeddedDigests is set by `make dist` with -ldflags
// "-X github.com/metrale/gpurt/core/internal/loader.embeddedDigests=cuda=HEX,mock=HEX":
// the SHA-256 of each plugin built with the binary. Empty in a
// development build, where nothing is verified.
var embeddedDigests string

// digests parses embeddedDigests (backend -> lowercase hex SHA-256).
func digests() map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Split(embeddedDigests, ",") {
		be, sum, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && be != "" && len(sum) == 64 {
			m[be] = strings.ToLower(sum)
		}
	}
	return m
}

// allowUnverified reports whether plugins that no recorded digest covers
// may load: the program said so (Options.AllowUnverified) or the user did
// (GPURT_ALLOW_UNVERIFIED=1, ignored under setuid/setgid).
func allowUnverified(opts Options) bool {
	if opts.AllowUnverified {
		return true
	}
	uid, euid, gid, egid := ids()
	if ignorePluginPathEnv(uid, euid, gid, egid) {
		return false
	}
	return strings.TrimSpace(os.Getenv("GPURT_ALLOW_UNVERIFIED")) == "1"
}

// fileSHA256 hashes a file.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return openSHA256(f)
}

// openSHA256 hashes an open file from its start with ReadAt (the offset
// of a descriptor shared with a probe child is never moved).
func openSHA256(f *os.File) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// verify checks c against the digests recorded in this build (before any
// dlopen), reading the file c pinned: what is hashed is what is loaded. A build without digests verifies nothing. With digests:
//   - a plugin beside the executable (its folder, lib/gpurt, ../lib/gpurt)
//     must be of a recorded backend and match its digest;
//   - a plugin from Options.Paths or GPURT_PLUGIN_PATH that matches a
//     recorded digest is verified; one that does not loads only when
//     unverified plugins are allowed (allowUnverified).
func verify(c *cand, opts Options, beside bool) {
	want := digests()
	if len(want) == 0 {
		return
	}
	if c.file == nil {
		c.fail("internal: plugin file not opened before its checksum", "")
		return
	}
	got, err := openSHA256(c.file) // the open file that is then probed and loaded (pin_unix.go)
	if err != nil {
		c.fail("cannot read the file to verify its checksum", err.Error())
		return
	}
	be := c.fromFS
	exp, known := want[be]
	switch {
	case known && got == exp:
		c.sealed = "sha256 verified"
		return
	case beside && known:
		c.fail(fmt.Sprintf("refused: checksum mismatch: the file's sha256 is %s, this build of gpurt recorded %s for %s (the file was changed after it was built, or comes from another build)", got, exp, be), "")
	case beside:
		c.fail(fmt.Sprintf("refused: this build of gpurt recorded no checksum for backend %q (a plugin beside the executable must come from the same build)", be), "sha256 "+got)
	case allowUnverified(opts):
		c.sealed = "sha256 not verified (unverified plugins allowed)"
	case known:
		c.fail(fmt.Sprintf("refused: checksum mismatch: the file's sha256 is %s, this build recorded %s for %s; set GPURT_ALLOW_UNVERIFIED=1 (or Config.AllowUnverifiedPlugins) to load plugins of other builds", got, exp, be), "")
	default:
		c.fail("refused: unverified plugin (this build records the checksums of its own plugins); set GPURT_ALLOW_UNVERIFIED=1 (or Config.AllowUnverifiedPlugins) to load it", "sha256 "+got)
	}
}

func appendDetail(d, s string) string {
	if d == "" {
		return s
	}
	return d + "; " + s
}

// exeDirs are the folders "beside the executable" (symlinks resolved).
func exeDirs(opts Options) map[string]bool {
	m := map[string]bool{}
	exe := opts.ExePath
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return m
		}
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	dir := filepath.Dir(exe)
	for _, d := range []string{dir, filepath.Join(dir, "lib", "gpurt"), filepath.Join(dir, "..", "lib", "gpurt")} {
		d = filepath.Clean(d)
		if real, err := filepath.EvalSymlinks(d); err == nil {
			d = real
		}
		m[d] = true
	}
	return m
}

// besideExe reports whether c was found in one of dirs.
func besideExe(c *cand, dirs map[string]bool) bool {
	d := c.dir
	if real, err := filepath.EvalSymlinks(d); err == nil {
		d = real
	}
	return dirs[d]
}
