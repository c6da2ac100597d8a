// SPDX-License-Identifier: Apache-2.0

//go:build unix

package loader

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxSymlinks bounds the symbolic links followed while resolving one path
// (the kernel's own limit on Linux is 40).
const maxSymlinks = 40

// refusal is why a path is not trusted: a one-line reason and, where there
// is one, the system's error text.
type refusal struct{ reason, detail string }

// trustedFile resolves path one component at a time, following symbolic
// links itself, and checks every component it passes through, as the
// Vulkan loader and sudo do:
//
//   - every folder from / down (including the folders a symbolic link leads
//     through), every symbolic link and the file itself must be owned by
//     root or by the user the process runs as (its effective uid);
//   - no folder may be writable by group or others unless its sticky bit is
//     set (as /tmp: others may add entries but not replace ours);
//   - the file must be a regular file that group and others cannot write.
//
// A symbolic link's own mode bits mean nothing; who may replace it is
// decided by its folder, which is checked. It returns the resolved path
// (no symbolic links; what is dlopened) and the file's FileInfo, or why it
// refuses.
func trustedFile(path string) (string, fs.FileInfo, *refusal) {
	return trustedFileAs(path, uint32(os.Geteuid()))
}

func trustedFileAs(path string, euid uint32) (string, fs.FileInfo, *refusal) {
	cur, fi, r := resolveTrusted(path, euid)
	if r != nil {
		return "", nil, r
	}
	if !fi.Mode().IsRegular() {
		return "", nil, &refusal{reason: fmt.Sprintf("not a regular file (mode %s)", fi.Mode())}
	}
	return cur, fi, nil
}

// trustedFolderAs applies trustedFile's rules to a folder (the probe
// cache's), and more strictly to the folder itself: group and others may
// not write to it, sticky or not. It returns the resolved path.
func trustedFolderAs(path string, euid uint32) (string, *refusal) {
	cur, fi, r := resolveTrusted(path, euid)
	if r != nil {
		return "", r
	}
	if !fi.IsDir() {
		return "", &refusal{reason: fmt.Sprintf("refused: %s is not a folder (mode %s)", path, fi.Mode())}
	}
	if writableByOthers(fi.Mode()) {
		return "", &refusal{reason: fmt.Sprintf("refused: folder %s is writable by group or others (mode %s)", cur, fi.Mode())}
	}
	return cur, nil
}

// resolveTrusted resolves path as trustedFile says and checks every
// component; the last may be of any type.
func resolveTrusted(path string, euid uint32) (string, fs.FileInfo, *refusal) {
	if !filepath.IsAbs(path) {
		return "", nil, &refusal{reason: fmt.Sprintf("refused: %s is not an absolute path", path)}
	}
	fi, err := os.Lstat("/")
	if err != nil {
		return "", nil, &refusal{"cannot read folder /", err.Error()}
	}
	if r := checkComponent("/", fi, euid); r != nil {
		return "", nil, r
	}
	todo := splitPath(path)
	cur := "/"
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case ".":
			continue
		case "..":
			// cur has no symbolic links in it, so its parent is a prefix
			// already checked.
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		fi, err = os.Lstat(next)
		if err != nil {
			if cur == "/" || len(todo) > 0 {
				return "", nil, &refusal{"cannot read " + next, err.Error()}
			}
			return "", nil, &refusal{"cannot read file", err.Error()}
		}
		if r := checkComponent(next, fi, euid); r != nil {
			return "", nil, r
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			links++
			if links > maxSymlinks {
				return "", nil, &refusal{reason: fmt.Sprintf("refused: more than %d symbolic links resolving %s", maxSymlinks, path)}
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", nil, &refusal{"cannot read symbolic link " + next, err.Error()}
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			todo = append(splitPath(target), todo...)
		case fi.IsDir():
			cur = next
		default:
			if len(todo) > 0 {
				return "", nil, &refusal{reason: fmt.Sprintf("cannot read %s: %s is not a folder", path, next)}
			}
			cur = next
		}
	}
	return cur, fi, nil
}

// checkComponent applies the owner and write rules to one component.
func checkComponent(path string, fi fs.FileInfo, euid uint32) *refusal {
	kind := "file"
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		kind = "symbolic link"
	case fi.IsDir():
		kind = "folder"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && st.Uid != euid {
		return &refusal{reason: fmt.Sprintf("refused: %s %s is owned by uid %d, not by root or the user running this process (uid %d)",
			kind, path, st.Uid, euid)}
	}
	switch kind {
	case "folder":
		if writableByOthers(fi.Mode()) && fi.Mode()&fs.ModeSticky == 0 {
			return &refusal{reason: fmt.Sprintf("refused: folder %s is writable by group or others (mode %s) and not sticky", path, fi.Mode())}
		}
	case "file":
		if writableByOthers(fi.Mode()) {
			return &refusal{reason: fmt.Sprintf("refused: file %s is writable by group or others (mode %s)", path, fi.Mode())}
		}
	}
	return nil
}

func splitPath(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// fileID is what says a file on disk is still the one loaded.
type fileID struct {
	dev, ino uint64
	size     int64
	mtime    int64 // nanoseconds
}

func identityOf(fi fs.FileInfo) fileID {
	id := fileID{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), uint64(st.Ino)
	}
	return id
}

func (id fileID) String() string {
	return fmt.Sprintf("dev %d, inode %d, %d bytes, modified %d ns", id.dev, id.ino, id.size, id.mtime)
}
