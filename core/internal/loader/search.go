// SPDX-License-Identifier: Apache-2.0

package loader

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// entry is one place to look: a folder or a plugin file.
type entry struct {
	path   string // absolute, cleaned
	origin string // where it came from, for the debug log
}

// originPaths is the origin of the entries of Options.Paths: a plugin file
// named there is explicit (see Options.Paths).
const originPaths = "Config.PluginPaths"

// ignorePluginPathEnv decides whether GPURT_PLUGIN_PATH must be ignored:
// when the process runs with other user or group ids than the one that
// started it (setuid/setgid), the environment is not to be trusted.
func ignorePluginPathEnv(uid, euid, gid, egid int) bool {
	return uid != euid || gid != egid
}

// searchEntries lists the places to look, in order.
func searchEntries(opts Options, log hclog.Logger) []entry {
	var out []entry
	for _, p := range opts.Paths {
		if strings.TrimSpace(p) == "" {
			continue
		}
		// An explicit path from the caller may be relative: the caller
		// chose it. It is made absolute once, here.
		abs, err := filepath.Abs(p)
		if err != nil {
			log.Warn("ignoring plugin path", "path", p, "error", err)
			continue
		}
		out = append(out, entry{abs, originPaths})
	}
	if env := os.Getenv("GPURT_PLUGIN_PATH"); env != "" {
		uid, euid, gid, egid := ids()
		if ignorePluginPathEnv(uid, euid, gid, egid) {
			log.Warn("ignoring GPURT_PLUGIN_PATH: the process runs setuid/setgid", "uid", uid, "euid", euid, "gid", gid, "egid", egid)
		} else {
			for _, p := range strings.Split(env, ":") {
				switch {
				case p == "":
					// an empty entry would mean the working directory
				case !filepath.IsAbs(p):
					log.Warn("ignoring relative GPURT_PLUGIN_PATH entry (the working directory is never searched)", "entry", p)
				default:
					out = append(out, entry{filepath.Clean(p), "GPURT_PLUGIN_PATH"})
				}
			}
		}
	}
	exe := opts.ExePath
	var err error
	if exe == "" {
		exe, err = os.Executable()
	}
	if err == nil {
		exe, err = filepath.Abs(exe)
	}
	if err == nil {
		var real string
		if real, err = filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
	}
	if err != nil {
		log.Warn("cannot find the executable's folder; not searching beside it", "error", err)
		return out
	}
	dir := filepath.Dir(exe)
	out = append(out,
		entry{dir, "executable folder"},
		entry{filepath.Join(dir, "lib", "gpurt"), "executable folder/lib/gpurt"},
		entry{filepath.Clean(filepath.Join(dir, "..", "lib", "gpurt")), "executable folder/../lib/gpurt"})
	return out
}

// pluginBackend returns the backend a file name names, and whether the
// name is a plugin name at all (libgpurt_<backend><ext>).
func pluginBackend(name string) (string, bool) {
	ext := pluginExt()
	if !strings.HasPrefix(name, "libgpurt_") || !strings.HasSuffix(name, ext) {
		return "", false
	}
	be := strings.TrimSuffix(strings.TrimPrefix(name, "libgpurt_"), ext)
	if be == "" {
		return "", false
	}
	return be, true
}

// discover walks the entries and lists the candidates, recording every
// folder looked at in rep.Searched.
func discover(entries []entry, rep *Report, log hclog.Logger) []*cand {
	var cands []*cand
	seenDir := map[string]bool{}
	seenFile := map[string]bool{}
	add := func(path, dir string) *cand {
		real, err := filepath.EvalSymlinks(path)
		if err == nil && seenFile[real] {
			log.Debug("already a candidate", "path", path, "real", real)
			return nil
		}
		if err == nil {
			seenFile[real] = true
		} else {
			real = path
		}
		be, _ := pluginBackend(filepath.Base(path))
		c := &cand{real: real, dir: dir, order: len(cands), fromFS: be}
		c.Path, c.Backend = path, be
		cands = append(cands, c)
		log.Debug("candidate", "path", path, "backend", orDash(be))
		return c
	}
	for _, e := range entries {
		fi, err := os.Stat(e.path)
		if err != nil {
			rep.Searched = append(rep.Searched, e.path)
			if _, ok := pluginBackend(filepath.Base(e.path)); ok && e.origin != "executable folder/lib/gpurt" {
				// an explicit plugin file that is not there
				c := &cand{real: e.path, dir: filepath.Dir(e.path), order: len(cands)}
				c.Path, c.Backend = e.path, ""
				c.fromFS, _ = pluginBackend(filepath.Base(e.path))
				c.Backend = c.fromFS
				c.explicit = e.origin == originPaths
				if errors.Is(err, fs.ErrNotExist) {
					c.fail("no such file", err.Error())
				} else {
					c.fail("cannot read file", err.Error())
				}
				cands = append(cands, c)
			}
			log.Debug("search: not there", "path", e.path, "origin", e.origin, "error", err)
			continue
		}
		if !fi.IsDir() {
			rep.Searched = append(rep.Searched, e.path)
			log.Debug("search: plugin file", "path", e.path, "origin", e.origin)
			if c := add(e.path, filepath.Dir(e.path)); c != nil {
				c.explicit = e.origin == originPaths
			}
			continue
		}
		real, err := filepath.EvalSymlinks(e.path)
		if err != nil {
			real = e.path
		}
		if seenDir[real] {
			log.Debug("search: folder already searched", "path", e.path, "real", real, "origin", e.origin)
			continue
		}
		seenDir[real] = true
		rep.Searched = append(rep.Searched, e.path)
		des, err := os.ReadDir(e.path)
		if err != nil {
			log.Warn("search: cannot list folder", "path", e.path, "error", err)
			continue
		}
		n := 0
		for _, de := range des {
			if _, ok := pluginBackend(de.Name()); ok {
				add(filepath.Join(e.path, de.Name()), e.path)
				n++
			}
		}
		log.Debug("search: folder", "path", e.path, "origin", e.origin, "plugins", n)
	}
	return cands
}

// writableByOthers reports whether group or others may write.
func writableByOthers(m fs.FileMode) bool { return m.Perm()&0o022 != 0 }

// checkFile runs every check that needs no loading: the whole path to the
// file, symbolic links resolved one by one (trustedFile), whether the file
// changed since this process loaded it, the format and architecture, and the
// dependencies (recorded for the reason if dlopen later fails).
func checkFile(c *cand, log hclog.Logger) {
	real, fi, r := trustedFile(c.Path)
	if r != nil {
		c.fail(r.reason, r.detail)
		return
	}
	c.real, c.ident = real, identityOf(fi)
	if r := checkUnchanged(c.real, c.ident); r != nil {
		c.fail(r.reason, r.detail)
		return
	}
	if r := pinFile(c); r != nil {
		c.fail(r.reason, r.detail)
		return
	}
	checkPinnedFormat(c, log)
}

// checkPinnedFormat checks the format of c's opened file.
func checkPinnedFormat(c *cand, log hclog.Logger) {
	res := checkFormatOf(c.file, c.real, c.ident.size, runtime.GOOS, runtime.GOARCH)
	if res.reason != "" {
		c.fail(res.reason, res.detail)
		return
	}
	c.deps, c.origin = res.deps, res.origin
	log.Debug("format ok", "path", c.Path, "needs", depsString(res.deps), "origin_rpath", res.origin)
}
