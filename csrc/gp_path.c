/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_path.c — see gp_path.h. Only POSIX calls (lstat, readlink, geteuid,
 * open, fstat, fcntl), plus getauxval on Linux and issetugid on macOS.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif

#include "gp_path.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#if defined(__linux__)
#include <sys/auxv.h>
#endif

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

#define GP_MAX_SYMLINKS 40

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int refuse(char *why, size_t cap, const char *fmt, ...) {
  if (why != NULL && cap > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* The owner and write rules for one component; 0 when it passes. */
static int check_component(const char *p, const struct stat *st, uid_t euid, char *why,
                           size_t cap) {
  const char *kind = S_ISLNK(st->st_mode) ? "symbolic link" : S_ISDIR(st->st_mode) ? "folder" : "file";
  if (st->st_uid != 0 && st->st_uid != euid)
    return refuse(why, cap, "%s %s is owned by uid %u, not by root or the user running this process (uid %u)",
                  kind, p, (unsigned)st->st_uid, (unsigned)euid);
  if (S_ISDIR(st->st_mode)) {
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st->st_mode & S_ISVTX) == 0)
      return refuse(why, cap, "folder %s is writable by group or others (mode %04o) and not sticky", p,
                    (unsigned)(st->st_mode & 07777));
  } else if (!S_ISLNK(st->st_mode)) {
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) != 0)
      return refuse(why, cap, "file %s is writable by group or others (mode %04o)", p,
                    (unsigned)(st->st_mode & 07777));
  }
  return 0;
}

/* gp_trusted_file, also giving the lstat of the resolved file (*fst). */
static int trusted_file_st(const char *path, char *resolved, size_t rcap, char *why, size_t wcap,
                           struct stat *fst) {
  char cur[PATH_MAX], rest[PATH_MAX], target[PATH_MAX], next[PATH_MAX];
  struct stat st;
  uid_t euid = geteuid();
  if (resolved != NULL && rcap > 0) resolved[0] = 0;
  if (why != NULL && wcap > 0) why[0] = 0;
  if (path == NULL || path[0] != '/')
    return refuse(why, wcap, "%s is not an absolute path", path ? path : "(null)");
  if (strlen(path) >= sizeof rest) return refuse(why, wcap, "path too long (%zu bytes)", strlen(path));
  if (lstat("/", &st) != 0) return refuse(why, wcap, "cannot read folder /: %s", strerror(errno));
  if (check_component("/", &st, euid, why, wcap) != 0) return -1;
  strcpy(cur, "/");
  strcpy(rest, path);
  size_t pos = 0;
  int links = 0;
  for (;;) {
    while (rest[pos] == '/') pos++;
    if (rest[pos] == 0) break;
    size_t len = strcspn(rest + pos, "/");
    char name[NAME_MAX + 1];
    if (len > NAME_MAX) return refuse(why, wcap, "a name in %s is longer than %d bytes", path, NAME_MAX);
    memcpy(name, rest + pos, len);
    name[len] = 0;
    pos += len;
    if (strcmp(name, ".") == 0) continue;
    if (strcmp(name, "..") == 0) {
      /* cur has no symbolic links: its parent is a prefix already checked */
      char *slash = strrchr(cur, '/');
      if (slash == cur) cur[1] = 0;
      else if (slash != NULL) *slash = 0;
      continue;
    }
    int n = snprintf(next, sizeof next, "%s%s%s", cur, strcmp(cur, "/") == 0 ? "" : "/", name);
    if (n < 0 || (size_t)n >= sizeof next) return refuse(why, wcap, "path too long resolving %s", path);
    if (lstat(next, &st) != 0) return refuse(why, wcap, "cannot read %s: %s", next, strerror(errno));
    if (check_component(next, &st, euid, why, wcap) != 0) return -1;
    const char *left = rest + pos;
    while (*left == '/') left++;
    if (S_ISLNK(st.st_mode)) {
      if (++links > GP_MAX_SYMLINKS)
        return refuse(why, wcap, "more than %d symbolic links resolving %s", GP_MAX_SYMLINKS, path);
      ssize_t tn = readlink(next, target, sizeof target - 1);
      if (tn < 0) return refuse(why, wcap, "cannot read symbolic link %s: %s", next, strerror(errno));
      if ((size_t)tn >= sizeof target - 1) return refuse(why, wcap, "symbolic link %s is too long", next);
      target[tn] = 0;
      if (target[0] == '/') strcpy(cur, "/");
      char joined[PATH_MAX];
      n = snprintf(joined, sizeof joined, "%s%s%s", target, *left ? "/" : "", left);
      if (n < 0 || (size_t)n >= sizeof joined) return refuse(why, wcap, "path too long resolving %s", path);
      memcpy(rest, joined, (size_t)n + 1);
      pos = 0;
      continue;
    }
    if (!S_ISDIR(st.st_mode) && *left != 0)
      return refuse(why, wcap, "cannot read %s: %s is not a folder", path, next);
    memcpy(cur, next, (size_t)n + 1);
  }
  if (lstat(cur, &st) != 0) return refuse(why, wcap, "cannot read %s: %s", cur, strerror(errno));
  if (!S_ISREG(st.st_mode)) return refuse(why, wcap, "%s is not a regular file", cur);
  if (resolved != NULL && rcap > 0) {
    if (strlen(cur) >= rcap) return refuse(why, wcap, "resolved path of %s is too long", path);
    strcpy(resolved, cur);
  }
  *fst = st;
  return 0;
}

int gp_trusted_file(const char *path, char *resolved, size_t rcap, char *why, size_t wcap) {
  struct stat st;
  return trusted_file_st(path, resolved, rcap, why, wcap, &st);
}

int gp_trusted_open(const char *path, int *fd, char *fdpath, size_t fcap, char *why, size_t wcap) {
  char real[PATH_MAX];
  struct stat checked, opened;
  *fd = -1;
  if (fdpath != NULL && fcap > 0) fdpath[0] = 0;
  if (trusted_file_st(path, real, sizeof real, why, wcap, &checked) != 0) return -1;
  /* real has no symbolic links left: O_NOFOLLOW refuses one swapped in;
   * O_NONBLOCK keeps a FIFO swapped in from hanging the open. */
  int f = open(real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (f < 0) return refuse(why, wcap, "cannot open %s: %s", real, strerror(errno));
  if (fstat(f, &opened) != 0) {
    int err = errno;
    close(f);
    return refuse(why, wcap, "cannot read %s: %s", real, strerror(err));
  }
  uid_t euid = geteuid();
  if (!S_ISREG(opened.st_mode) || opened.st_dev != checked.st_dev || opened.st_ino != checked.st_ino ||
      opened.st_size != checked.st_size) {
    close(f);
    return refuse(why, wcap, "%s was replaced while it was checked", real);
  }
  if (check_component(real, &opened, euid, why, wcap) != 0) {
    close(f);
    return -1;
  }
  int fl = fcntl(f, F_GETFL);
  if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    int err = errno;
    close(f);
    return refuse(why, wcap, "cannot clear O_NONBLOCK on %s: %s", real, strerror(err));
  }
#if defined(__linux__)
  int n = snprintf(fdpath, fcap, "/proc/self/fd/%d", f);
#else
  int n = snprintf(fdpath, fcap, "/dev/fd/%d", f);
#endif
  if (n < 0 || (size_t)n >= fcap) {
    close(f);
    return refuse(why, wcap, "descriptor path of %s does not fit %zu bytes", real, fcap);
  }
  *fd = f;
  return 0;
}

const char *gp_secure_getenv(const char *name) {
#if defined(__linux__)
  if (getauxval(AT_SECURE) != 0) return NULL;
#elif defined(__APPLE__)
  if (issetugid()) return NULL;
#else
  if (getuid() != geteuid() || getgid() != getegid()) return NULL;
#endif
  return getenv(name);
}
