// SPDX-License-Identifier: Apache-2.0

//go:build unix

package llm

import (
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps f's size bytes read-only (shared: the page cache itself),
// advising the kernel to read ahead.
func mapFile(f *os.File, size int64) ([]byte, error) {
	if size == 0 {
		return []byte{}, nil
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	_ = unix.Madvise(mem, unix.MADV_WILLNEED)
	return mem, nil
}

func unmapFile(mem []byte) error {
	if len(mem) == 0 {
		return nil
	}
	return unix.Munmap(mem)
}
