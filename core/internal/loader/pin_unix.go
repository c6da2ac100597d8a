// SPDX-License-Identifier: Apache-2.0

//go:build unix

package loader

// Verify what is loaded. The file a candidate names is opened once
// (pin), right after the path checks; everything after reads that open
// file: the format check, the checksum, the isolated probe (the child
// inherits the descriptor as fd 3) and dlopen, which on Linux goes through
// /proc/self/fd/N. A file renamed into place between the checks and the
// load is therefore never loaded; the file's identity (device, inode,
// size, modification time) is compared once more after loading, so a file
// rewritten in place (by its owner: trust_unix.go refuses files others may
// write) is refused as well.
//
// glibc remembers every name a library was opened by, and returns the
// library already mapped for a later dlopen of the same name: a
// descriptor whose /proc/self/fd name reached a successful dlopen is never
// closed (a reused number would name the old library), and a later load
// of the same file reuses that name (pinned).
//
// Two cases load by path, with the identity compared before and after:
// macOS (no /proc; dyld has no load-from-descriptor) and a plugin whose
// RUNPATH names $ORIGIN (through /proc/self/fd, $ORIGIN would be
// /proc/self/fd). On Linux the file mapped is then also checked against
// /proc/self/maps, so a file swapped in is refused before any of its
// functions is called (its ELF initialisers have run by then: a plugin
// should not use $ORIGIN).

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// pinFile opens c.real once, without following a final symbolic link and
// without blocking (a FIFO swapped in must not hang the loader), and
// checks that what it opened is the regular file the path checks passed.
func pinFile(c *cand) *refusal {
	f, err := os.OpenFile(c.real, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	fi, r := statOpened(f, err)
	if r != nil {
		return r
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return &refusal{reason: fmt.Sprintf("refused: %s was replaced while it was checked: it is no longer a regular file (mode %s)", c.real, fi.Mode())}
	}
	if now := identityOf(fi); now != c.ident {
		_ = f.Close()
		return &refusal{
			reason: fmt.Sprintf("refused: %s was replaced while it was checked", c.real),
			detail: fmt.Sprintf("checked: %s; opened: %s", c.ident, now),
		}
	}
	c.file = f
	return nil
}

// releaseFile closes c's file unless a dlopen went through its name.
func releaseFile(c *cand) {
	if c.file != nil && !c.keepFile {
		_ = c.file.Close()
	}
	c.file = nil
}

// pinned holds the descriptor each loaded file was dlopened through,
// by device and inode, for the life of the process.
var pinned = struct {
	sync.Mutex
	m map[[2]uint64]pinnedFile
}{m: map[[2]uint64]pinnedFile{}}

type pinnedFile struct {
	f  *os.File
	id fileID
}

// testHookBeforePathLoad, when set (tests only), runs just before a load
// by path (macOS, $ORIGIN): a test swaps the file there.
var testHookBeforePathLoad func(path string)

// fdLoad says whether c is loaded through its descriptor.
func fdLoad(c *cand) bool { return runtime.GOOS == "linux" && !c.origin }

// dlopenVerified loads c's pinned file: through its descriptor where it
// can, else by path with the identity checked before and after. It
// returns the handle, or a refusal (dlerr set when dlopen itself failed).
func dlopenVerified(c *cand, open func(string) (uintptr, error)) (h uintptr, r *refusal, dlerr error) {
	if c.file == nil {
		return 0, &refusal{reason: "internal: plugin file not opened before loading"}, nil
	}
	if !fdLoad(c) {
		if r := c.sameOnDisk("before loading"); r != nil {
			return 0, r, nil
		}
		if testHookBeforePathLoad != nil {
			testHookBeforePathLoad(c.real)
		}
		if h, err := open(c.real); err != nil {
			return 0, nil, err
		} else if r := c.afterLoad(h); r != nil {
			return 0, r, nil
		} else {
			return h, nil, nil
		}
	}
	pinned.Lock()
	defer pinned.Unlock()
	key := [2]uint64{c.ident.dev, c.ident.ino}
	name := fmt.Sprintf("/proc/self/fd/%d", c.file.Fd())
	old, seen := pinned.m[key]
	if seen {
		if old.id != c.ident {
			return 0, &refusal{
				reason: fmt.Sprintf("refused: %s changed on disk since this process loaded it; the process would keep running the old code (restart it to load the new file)", c.real),
				detail: fmt.Sprintf("loaded: %s; now: %s", old.id, c.ident),
			}, nil
		}
		name = fmt.Sprintf("/proc/self/fd/%d", old.f.Fd())
	}
	h, err := open(name)
	if err != nil {
		return 0, nil, err
	}
	if !seen {
		pinned.m[key] = pinnedFile{c.file, c.ident}
		c.keepFile = true
	}
	if r := c.afterLoad(h); r != nil {
		return 0, r, nil
	}
	return h, nil, nil
}

// afterLoad: the open file and the path still have the identity checked
// (nothing rewrote the file in place, nothing renamed another over it);
// loaded by path on Linux, the library mapped is that file.
func (c *cand) afterLoad(h uintptr) *refusal {
	fi, err := c.file.Stat()
	if err != nil {
		return &refusal{"cannot read the loaded file", err.Error()}
	}
	if now := identityOf(fi); now != c.ident {
		return &refusal{
			reason: fmt.Sprintf("refused: %s was modified while it was loaded; none of its functions were called", c.real),
			detail: fmt.Sprintf("checked: %s; after loading: %s", c.ident, now),
		}
	}
	if r := c.sameOnDisk("while it was loaded"); r != nil {
		return r
	}
	if runtime.GOOS == "linux" && !fdLoad(c) {
		return c.mappedIsPinned(h)
	}
	return nil
}

// sameOnDisk: c.real still names the file checked.
func (c *cand) sameOnDisk(when string) *refusal {
	fi, err := os.Lstat(c.real)
	if err != nil {
		return &refusal{fmt.Sprintf("refused: %s disappeared %s", c.real, when), err.Error()}
	}
	if now := identityOf(fi); now != c.ident {
		return &refusal{
			reason: fmt.Sprintf("refused: %s was replaced on disk %s; none of its functions were called", c.real, when),
			detail: fmt.Sprintf("checked: %s; now: %s", c.ident, now),
		}
	}
	return nil
}

// mappedIsPinned finds the mapping that holds the library's entry symbol
// in /proc/self/maps and compares its device and inode with the pinned
// file's.
func (c *cand) mappedIsPinned(h uintptr) *refusal {
	addr, err := entryAddress(h)
	if err != nil {
		return &refusal{"cannot find the loaded library's entry", err.Error()}
	}
	dev, ino, err := mappingOf(addr)
	if err != nil {
		return &refusal{"cannot find the loaded library's mapping", err.Error()}
	}
	if ino != c.ident.ino || dev != c.ident.dev {
		return &refusal{
			reason: fmt.Sprintf("refused: the library loaded from %s is not the file checked (replaced while loading); none of its functions were called", c.real),
			detail: fmt.Sprintf("checked: %s; mapped: dev %d, inode %d", c.ident, dev, ino),
		}
	}
	return nil
}

// mappingOf reads /proc/self/maps for the mapping holding addr.
func mappingOf(addr uintptr) (dev, ino uint64, err error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	r := bufio.NewReader(io.LimitReader(f, 64<<20))
	for {
		line, err := r.ReadString('\n')
		// start-end perms offset major:minor inode path
		fs := strings.Fields(line)
		if len(fs) >= 5 {
			lo, hi, _ := strings.Cut(fs[0], "-")
			a, e1 := strconv.ParseUint(lo, 16, 64)
			b, e2 := strconv.ParseUint(hi, 16, 64)
			if e1 == nil && e2 == nil && uint64(addr) >= a && uint64(addr) < b {
				maj, mnr, _ := strings.Cut(fs[3], ":")
				ma, e3 := strconv.ParseUint(maj, 16, 32)
				mi, e4 := strconv.ParseUint(mnr, 16, 32)
				in, e5 := strconv.ParseUint(fs[4], 10, 64)
				if e3 != nil || e4 != nil || e5 != nil {
					return 0, 0, fmt.Errorf("unreadable line %q", strings.TrimSpace(line))
				}
				return unix.Mkdev(uint32(ma), uint32(mi)), in, nil
			}
		}
		if err != nil {
			return 0, 0, fmt.Errorf("no mapping holds address %#x", addr)
		}
	}
}
