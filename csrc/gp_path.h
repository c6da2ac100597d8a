/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_path.h — the loader's trust rule for files a plugin opens by a path
 * it was given (GPURT_CUBLASLT_PATH, GPURT_NCCL_PATH), opened once and
 * loaded through the descriptor, and an environment read that a
 * setuid/setgid process ignores. core/internal/loader/trust_unix.go applies
 * the same rule to plugin files in Go; README's loader section states it.
 */
#ifndef GPURT_CSRC_PATH_H_
#define GPURT_CSRC_PATH_H_

#include <stddef.h>

/* Checks that `path` may be loaded. The path must be absolute; it is
 * resolved one component at a time, following symbolic links (at most 40),
 * and every component passed through is checked:
 *   - every folder from / down, every symbolic link and the file are owned
 *     by root or by the process's effective user;
 *   - no folder is writable by group or others unless its sticky bit is set;
 *   - the file is a regular file that group and others cannot write.
 * Returns 0 and writes the resolved path (no symbolic links) into
 * resolved[rcap]; otherwise returns -1 and writes a one-line reason into
 * why[wcap]. Both are always NUL-terminated when their capacity is not 0. */
int gp_trusted_file(const char *path, char *resolved, size_t rcap, char *why, size_t wcap);

/* gp_trusted_file, then opens the resolved file once (O_RDONLY |
 * O_CLOEXEC | O_NOFOLLOW, without blocking) and checks the open
 * descriptor: the regular file the path checks passed (same device, inode
 * and size), its owner and mode passing the file rule. On success *fd is
 * the descriptor and fdpath[fcap] its name to dlopen ("/proc/self/fd/N"
 * on Linux), so the file loaded is the file checked, not whatever the
 * path names by then. After a successful dlopen of fdpath the caller must
 * never close *fd (glibc remembers the name: a reused number would give
 * back this library); after a failed one it closes it. Returns 0, or -1
 * with *fd -1 and the reason in why[wcap]. */
int gp_trusted_open(const char *path, int *fd, char *fdpath, size_t fcap, char *why, size_t wcap);

/* getenv(name), except NULL when the process runs setuid or setgid
 * (AT_SECURE on Linux, issetugid on macOS): such a process must not take
 * paths from its caller's environment. */
const char *gp_secure_getenv(const char *name);

#endif /* GPURT_CSRC_PATH_H_ */
