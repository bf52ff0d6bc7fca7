/* files.c - refusing an output that is one of a command's inputs, or two
 * outputs that are one file (issue 24: "plan m.json c.json -o m.json" replaced
 * the model; "-o X --trace X" kept only the later write). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "sim/core/alloc.h"

/* Who a path names: an existing file by device and inode (so "./m.json",
 * a hard link or a symlink to it are the same), a file not created yet by
 * its folder's real path and its name ("x.json" and "./x.json" are one). */
typedef struct file_id {
  bool exists, special; /* special: not a regular file (/dev/null, a FIFO) */
  dev_t dev;
  ino_t ino;
  char *name; /* exists == false: "REALFOLDER/NAME" (owned), or NULL */
} file_id;

static char *future_name(const char *path) {
  const char *slash = strrchr(path, '/');
  size_t dir_len = slash ? (size_t)(slash - path) : 0;
  char *dir = psim_malloc(dir_len + 2);
  if (!dir)
    return NULL;
  if (!slash)
    strcpy(dir, ".");
  else if (dir_len == 0)
    strcpy(dir, "/");
  else
    snprintf(dir, dir_len + 1, "%.*s", (int)dir_len, path); /* the folder part */
  char *real = realpath(dir, NULL);
  psim_free(dir);
  const char *base = slash ? slash + 1 : path;
  size_t n = (real ? strlen(real) : 0) + strlen(base) + 2;
  char *name = psim_malloc(n);
  if (name)
    snprintf(name, n, "%s/%s", real ? real : "?", base);
  free(real); /* realpath allocates with malloc */
  return name;
}

static psim_status identify(const char *path, file_id *id) {
  struct stat st;
  memset(id, 0, sizeof *id);
  if (stat(path, &st) == 0) {
    id->exists = true;
    id->special = !S_ISREG(st.st_mode);
    id->dev = st.st_dev;
    id->ino = st.st_ino;
    return PSIM_OK;
  }
  id->name = future_name(path);
  return id->name ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory");
}

static bool same_file(const file_id *a, const file_id *b) {
  if (a->exists != b->exists || a->special || b->special)
    return false;
  if (a->exists)
    return a->dev == b->dev && a->ino == b->ino;
  return strcmp(a->name, b->name) == 0;
}

static bool named(const char *path) {
  return path && *path && strcmp(path, "-") != 0;
}

/* Output out against every file before it in the list (inputs first). */
static psim_status check_one(const char *const *paths, const file_id *ids, int k, int n_in) {
  for (int j = 0; j < k; j++) {
    if (!named(paths[j]) || !same_file(&ids[j], &ids[k]))
      continue;
    if (j < n_in)
      return psim_error(PSIM_EINPUT,
                        "output %s is the input %s: writing it would destroy the input; "
                        "choose another output file",
                        paths[k], paths[j]);
    return psim_error(PSIM_EINPUT, "outputs %s and %s are one file; give each its own file",
                      paths[j], paths[k]);
  }
  return PSIM_OK;
}

psim_status psim_cli_check_distinct(const char *const *inputs, int n_in, const char *const *outputs,
                                    int n_out) {
  int n = n_in + n_out;
  const char **paths = psim_calloc((size_t)n, sizeof *paths);
  file_id *ids = psim_calloc((size_t)n, sizeof *ids);
  psim_status s = paths && ids ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory");
  for (int k = 0; s == PSIM_OK && k < n; k++) {
    paths[k] = k < n_in ? inputs[k] : outputs[k - n_in];
    if (named(paths[k]))
      s = identify(paths[k], &ids[k]);
  }
  for (int k = n_in; s == PSIM_OK && k < n; k++)
    if (named(paths[k]))
      s = check_one(paths, ids, k, n_in);
  for (int k = 0; ids && k < n; k++)
    psim_free(ids[k].name);
  psim_free(ids);
  psim_free(paths);
  return s;
}
