// SPDX-License-Identifier: Apache-2.0

//go:build unix

package loader

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// readCacheEntry reads key's entry in dir under the rules of cache.go,
// and says when it was last written or used; why says what made it a
// miss ("" on success).
func readCacheEntry(dir, key string, euid uint32) (b []byte, mod time.Time, why string) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, time.Time{}, "no cache folder yet"
	}
	real, r := trustedFolderAs(dir, euid)
	if r != nil {
		return nil, time.Time{}, "folder not trusted: " + r.reason + detailSuffix(r.detail)
	}
	f, err := os.OpenFile(filepath.Join(real, cacheEntryName(key)), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, time.Time{}, "no entry"
	case errors.Is(err, syscall.ELOOP):
		return nil, time.Time{}, "the entry is a symbolic link"
	case err != nil:
		return nil, time.Time{}, "cannot open the entry: " + err.Error()
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, time.Time{}, "cannot read the entry: " + err.Error()
	}
	if why := entryRefusal(fi, euid); why != "" {
		return nil, time.Time{}, why
	}
	if fi.Size() > maxCacheEntry {
		return nil, time.Time{}, fmt.Sprintf("the entry is %d bytes, more than %d", fi.Size(), maxCacheEntry)
	}
	b, err = io.ReadAll(io.LimitReader(f, maxCacheEntry+1))
	if err != nil {
		return nil, time.Time{}, "cannot read the entry: " + err.Error()
	}
	if len(b) > maxCacheEntry {
		return nil, time.Time{}, fmt.Sprintf("the entry grew past %d bytes while read", maxCacheEntry)
	}
	return b, fi.ModTime(), ""
}

// entryRefusal applies the file rules to an entry: a regular file of the
// user (or root) that group and others cannot write.
func entryRefusal(fi fs.FileInfo, euid uint32) string {
	if !fi.Mode().IsRegular() {
		return fmt.Sprintf("the entry is not a regular file (mode %s)", fi.Mode())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && st.Uid != euid {
		return fmt.Sprintf("the entry is owned by uid %d, not by root or the user running this process (uid %d)", st.Uid, euid)
	}
	if writableByOthers(fi.Mode()) {
		return fmt.Sprintf("the entry is writable by group or others (mode %s)", fi.Mode())
	}
	return ""
}

func detailSuffix(d string) string {
	if d == "" {
		return ""
	}
	return " (" + d + ")"
}

// touchCacheEntry marks an entry used now (pruning keeps the most
// recently used); best effort.
func touchCacheEntry(dir, key string) {
	now := time.Now()
	_ = os.Chtimes(filepath.Join(dir, cacheEntryName(key)), now, now)
}

// writeCacheEntry writes key's entry (a private temporary file renamed
// into place) into a trusted folder, creating it (0700) if needed, then
// prunes the folder. Best effort: failures are debug lines.
func writeCacheEntry(dir, key string, b []byte, log hclog.Logger) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Debug("probe cache: cannot create folder", "dir", dir, "error", err)
		return
	}
	real, r := trustedFolderAs(dir, uint32(os.Geteuid()))
	if r != nil {
		log.Debug("probe cache: not writing: folder not trusted", "dir", dir, "why", r.reason+detailSuffix(r.detail))
		return
	}
	f, err := os.CreateTemp(real, ".tmp-*")
	if err != nil {
		log.Debug("probe cache: cannot write", "dir", real, "error", err)
		return
	}
	_, werr := f.Write(b)
	cerr := f.Close()
	if werr != nil || cerr != nil || os.Rename(f.Name(), filepath.Join(real, cacheEntryName(key))) != nil {
		_ = os.Remove(f.Name())
		log.Debug("probe cache: cannot write", "dir", real, "write_error", werr, "close_error", cerr)
		return
	}
	pruneCache(real, time.Now(), log)
}

// maxPruneScan bounds the folder entries one prune looks at.
const maxPruneScan = 4096

// pruneCache removes, from a trusted folder, entries older than
// cacheMaxAge, all but the cacheMaxEntries most recent, and temporary
// files older than cacheTmpAge. It touches only regular files of this
// user named as entries or temporary files.
func pruneCache(dir string, now time.Time, log hclog.Logger) {
	d, err := os.Open(dir)
	if err != nil {
		log.Debug("probe cache: cannot list folder", "dir", dir, "error", err)
		return
	}
	des, _ := d.ReadDir(maxPruneScan)
	_ = d.Close()
	euid := uint32(os.Geteuid())
	type ent struct {
		name string
		mod  time.Time
	}
	var keep []ent
	removed := 0
	remove := func(name string) {
		if os.Remove(filepath.Join(dir, name)) == nil {
			removed++
		}
	}
	for _, de := range des {
		name := de.Name()
		tmp := strings.HasPrefix(name, ".tmp-")
		if !tmp && !isCacheEntryName(name) {
			continue
		}
		fi, err := de.Info() // lstat: a symbolic link is not a regular file
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != euid {
			continue
		}
		age := now.Sub(fi.ModTime())
		switch {
		case tmp && age > cacheTmpAge:
			remove(name)
		case tmp:
		case age > cacheMaxAge:
			remove(name)
		default:
			keep = append(keep, ent{name, fi.ModTime()})
		}
	}
	if len(keep) > cacheMaxEntries {
		sort.Slice(keep, func(i, j int) bool { return keep[i].mod.After(keep[j].mod) })
		for _, e := range keep[cacheMaxEntries:] {
			remove(e.name)
		}
	}
	if removed > 0 {
		log.Debug("probe cache: pruned", "dir", dir, "removed", removed)
	}
}
