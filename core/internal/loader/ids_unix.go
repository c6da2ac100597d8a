// SPDX-License-Identifier: Apache-2.0

//go:build unix

package loader

import "syscall"

// ids returns the real and effective user and group ids.
func ids() (uid, euid, gid, egid int) {
	return syscall.Getuid(), syscall.Geteuid(), syscall.Getgid(), syscall.Getegid()
}
