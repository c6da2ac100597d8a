// SPDX-License-Identifier: Apache-2.0

//go:build unix

package llm

import (
	"os"

	"golang.org/x/sys/unix"
)

// openNonblock opens p read-only with O_NONBLOCK (an open of a FIFO
// returns at once instead of waiting for a writer), following links.
func openNonblock(p string) (*os.File, error) {
	return os.OpenFile(p, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
}

// blocking clears O_NONBLOCK on a regular file's descriptor (reads of a
// regular file never wait, but the flag should not outlive the check).
func blocking(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetNonblock(int(fd), false) }); err != nil {
		return err
	}
	return serr
}
