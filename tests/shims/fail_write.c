/* A write-failure shim for the tests (LD_PRELOAD): write(2)-family calls on files whose path
 * matches a pattern fail with ENOSPC ("No space left on device") once a byte budget is spent, as on
 * a full disk. HDF5's default (sec2) driver writes with pwrite/write, and vitddp's own writers with
 * write; both go through these symbols.
 *
 * Environment:
 *   VITDDP_FAIL_WRITE_PATTERN  fnmatch(3) glob matched against the file's path (/proc/self/fd/N),
 *                              e.g. "*.ckpt.h5.tmp"; unset or empty: the shim does nothing
 *   VITDDP_FAIL_WRITE_AFTER    bytes that matching files may take in all before writes fail (default 0)
 * Intercepted: write, pwrite, pwrite64, writev, pwritev, fsync, fdatasync (fsync of a matching
 * file fails once a write has failed); ftruncate is left alone. A failing call writes nothing and returns -1.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static long long spent = 0; /* bytes taken by matching files so far */
static int failed = 0;      /* a matching write has failed */

/* 1 when fd's path matches the pattern. */
static int matches(int fd) {
  const char* pattern = getenv("VITDDP_FAIL_WRITE_PATTERN");
  if (!pattern || !*pattern) return 0;
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  return fnmatch(pattern, path, 0) == 0;
}

static long long budget(void) {
  const char* s = getenv("VITDDP_FAIL_WRITE_AFTER");
  return s ? atoll(s) : 0;
}

/* 0 when `count` more bytes fit the budget (and are counted), else -1 with errno = ENOSPC. */
static int take(int fd, size_t count) {
  if (!matches(fd)) return 0;
  if (spent + (long long)count > budget()) {
    failed = 1;
    errno = ENOSPC;
    return -1;
  }
  spent += (long long)count;
  return 0;
}

/* fsync of a matching file after a failed write: the data cannot reach the disk either. */
static int sync_fails(int fd) { return failed && matches(fd); }

/* The next definition of `name` (libc's), looked up once; `type` is a function pointer typedef. */
#define REAL(name, type) \
  static type real = NULL; \
  if (!real) real = (type)dlsym(RTLD_NEXT, name)

typedef ssize_t (*write_fn)(int, const void*, size_t);
typedef ssize_t (*pwrite_fn)(int, const void*, size_t, off_t);
typedef ssize_t (*writev_fn)(int, const struct iovec*, int);
typedef ssize_t (*pwritev_fn)(int, const struct iovec*, int, off_t);
typedef int (*sync_fn)(int);

ssize_t write(int fd, const void* buf, size_t count) {
  REAL("write", write_fn);
  if (take(fd, count) != 0) return -1;
  return real(fd, buf, count);
}

ssize_t pwrite(int fd, const void* buf, size_t count, off_t off) {
  REAL("pwrite", pwrite_fn);
  if (take(fd, count) != 0) return -1;
  return real(fd, buf, count, off);
}

ssize_t pwrite64(int fd, const void* buf, size_t count, off_t off) {
  REAL("pwrite64", pwrite_fn);
  if (take(fd, count) != 0) return -1;
  return real(fd, buf, count, off);
}

static size_t iov_bytes(const struct iovec* iov, int n) {
  size_t total = 0;
  for (int i = 0; i < n; ++i) total += iov[i].iov_len;
  return total;
}

ssize_t writev(int fd, const struct iovec* iov, int n) {
  REAL("writev", writev_fn);
  if (take(fd, iov_bytes(iov, n)) != 0) return -1;
  return real(fd, iov, n);
}

ssize_t pwritev(int fd, const struct iovec* iov, int n, off_t off) {
  REAL("pwritev", pwritev_fn);
  if (take(fd, iov_bytes(iov, n)) != 0) return -1;
  return real(fd, iov, n, off);
}

int fsync(int fd) {
  REAL("fsync", sync_fn);
  if (sync_fails(fd)) {
    errno = ENOSPC;
    return -1;
  }
  return real(fd);
}

int fdatasync(int fd) {
  REAL("fdatasync", sync_fn);
  if (sync_fails(fd)) {
    errno = ENOSPC;
    return -1;
  }
  return real(fd);
}
