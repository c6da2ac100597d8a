// SPDX-License-Identifier: Apache-2.0

//go:build linux || darwin

package loader

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// reserveStdout keeps the process's stdout for the caller and points file
// descriptor 1 at stderr, so that whatever a plugin prints cannot corrupt
// the report.
func reserveStdout() (*os.File, error) {
	fd, err := unix.Dup(1)
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(fd)
	if err := unix.Dup2(2, 1); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "report"), nil
}

// fileIdentity is what changes when a file is replaced or rewritten.
func fileIdentity(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d:%d:%d.%d:%d.%d", st.Dev, st.Ino, st.Size,
		st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec), nil
}

// openIdentity is fileIdentity of an open file.
func openIdentity(f *os.File) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d:%d:%d.%d:%d.%d", st.Dev, st.Ino, st.Size,
		st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec), nil
}

// childExecutable is what the isolated probe runs: on Linux the running
// image itself (/proc/self/exe names it even after its file was replaced
// or removed), so that a binary renamed over this one's path meanwhile is
// never run; elsewhere the executable's path (macOS has no equivalent).
func childExecutable() (string, error) {
	if runtime.GOOS == "linux" {
		if _, err := os.Stat("/proc/self/exe"); err == nil {
			return "/proc/self/exe", nil
		}
	}
	return os.Executable()
}
