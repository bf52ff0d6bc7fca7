/* file_read.c - the one reader of input files: regular files only, a size limit. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim/core/alloc.h"
#include "sim/core/json.h"

/* Only regular files are read (issue 24): a directory opens fine with fopen
 * and only fails at the first read; a FIFO named as a model (or as a plan's
 * recorded model_file) blocked the open and the read forever; a device
 * (/dev/zero, /dev/tty) is no input file either. The file is opened with
 * O_NONBLOCK so that opening a FIFO returns at once, then checked with fstat.
 * Standard input named explicitly (/dev/stdin, /dev/fd/N, /proc/self/fd/N:
 * `check /dev/stdin <m.json`, `<(...)`) is the user's deliberate choice and
 * stays readable whatever it is. */
static bool names_a_descriptor(const char *path) {
  return !strcmp(path, "/dev/stdin") || !strncmp(path, "/dev/fd/", 8) ||
         !strncmp(path, "/proc/self/fd/", 14);
}

static psim_status refuse_non_regular(const char *path, const struct stat *st,
                                      const char *expected) {
  if (S_ISREG(st->st_mode) || (names_a_descriptor(path) && !S_ISDIR(st->st_mode)))
    return PSIM_OK;
  const char *what = S_ISDIR(st->st_mode)    ? "a directory"
                     : S_ISFIFO(st->st_mode) ? "a FIFO"
                     : S_ISCHR(st->st_mode)  ? "a character device"
                     : S_ISBLK(st->st_mode)  ? "a block device"
                     : S_ISSOCK(st->st_mode) ? "a socket"
                                             : "not a regular file";
  return psim_error(PSIM_EINPUT, "%s: is %s; expected %s (a regular file)", path, what, expected);
}

static psim_status open_regular(const char *path, const char *expected, FILE **out) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return psim_error(PSIM_EINPUT, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  psim_status s = PSIM_OK;
  if (fstat(fd, &st) != 0)
    s = psim_error(PSIM_EIO, "%s: cannot stat: %s", path, strerror(errno));
  if (s == PSIM_OK)
    s = refuse_non_regular(path, &st, expected);
  int fl = s == PSIM_OK ? fcntl(fd, F_GETFL) : -1;
  if (s == PSIM_OK && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0))
    s = psim_error(PSIM_EIO, "%s: cannot read: %s", path, strerror(errno));
  FILE *f = s == PSIM_OK ? fdopen(fd, "rb") : NULL;
  if (s == PSIM_OK && !f)
    s = psim_error(PSIM_EIO, "%s: cannot read: %s", path, strerror(errno));
  if (s != PSIM_OK) {
    close(fd);
    return s;
  }
  *out = f;
  return PSIM_OK;
}

static psim_status read_all(FILE *f, const char *path, size_t max_bytes, char **out, size_t *len) {
  size_t cap = 0, n = 0;
  char *buf = NULL;
  psim_status s = PSIM_OK;
  for (;;) {
    s = psim_grow((void **)&buf, &cap, n + 65537, 1);
    if (s != PSIM_OK)
      break;
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (n > max_bytes) {
      s = psim_error(PSIM_EINPUT, "%s: larger than the limit of %zu bytes", path, max_bytes);
      break;
    }
    if (got == 0)
      break;
  }
  if (s == PSIM_OK && ferror(f))
    s = psim_error(PSIM_EIO, "%s: read error: %s", path, strerror(errno));
  if (s != PSIM_OK) {
    psim_free(buf);
    return s;
  }
  buf[n] = '\0';
  *out = buf;
  *len = n;
  return PSIM_OK;
}

psim_status psim_file_read_expecting(const char *path, size_t max_bytes, const char *expected,
                                     char **out, size_t *len) {
  if (!*path)
    return psim_error(PSIM_EINPUT, "empty file name; expected %s", expected);
  FILE *f = NULL;
  PSIM_CHECK(open_regular(path, expected, &f));
  psim_status s = read_all(f, path, max_bytes, out, len);
  fclose(f);
  return s;
}

psim_status psim_file_read(const char *path, size_t max_bytes, char **out, size_t *len) {
  return psim_file_read_expecting(path, max_bytes, "a file", out, len);
}
