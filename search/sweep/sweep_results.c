/* sweep_results.c - the results files of a sweep (results.jsonl, results.csv) and
 * the comparison with a baseline (sweep.h). */
#include "search/sweep/sweep.h"

#include <assert.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim/core/alloc.h"
#include "sim/core/json.h"

/* ---- results files ---- */

static psim_status add_row(psim_sweep_results *r, const psim_sweep_row *row) {
  PSIM_CHECK(PSIM_VEC_RESERVE(r->rows, r->cap_rows, (size_t)r->n_rows + 1));
  assert(r->n_rows >= 0 && (size_t)r->n_rows < r->cap_rows);
  r->rows[r->n_rows++] = *row;
  if (row->index >= 0 && row->index < r->n_cases)
    r->done[row->index] = true;
  return PSIM_OK;
}

/* Complete lines of the log whose case exists with the same key, once each. */
static psim_status read_log(psim_sweep_results *r, const psim_sweep *s) {
  if (access(r->jsonl_path, F_OK) != 0)
    return PSIM_OK;
  char *text = NULL;
  size_t len = 0;
  PSIM_CHECK(psim_file_read(r->jsonl_path, PSIM_JSON_MAX_BYTES, &text, &len));
  psim_status st = PSIM_OK;
  for (char *line = text, *nl; st == PSIM_OK && (nl = strchr(line, '\n')); line = nl + 1) {
    *nl = '\0'; /* a last line without '\n' was cut by a kill: dropped */
    psim_sweep_row row;
    if (psim_sweep_row_parse(line, &row) != PSIM_OK) {
      psim_error_clear();
      continue;
    }
    if (row.index < 0 || row.index >= s->n_cases || strcmp(row.key, s->cases[row.index].key) ||
        r->done[row.index])
      continue;
    st = add_row(r, &row);
    r->n_resumed++;
  }
  psim_free(text);
  return st;
}

static int cmp_row(const void *a, const void *b) {
  const psim_sweep_row *x = a, *y = b;
  return (x->index > y->index) - (x->index < y->index);
}

/* Both files from r->rows (sorted), written atomically. */
static psim_status rewrite(psim_sweep_results *r) {
  if (r->n_rows > 1)
    qsort(r->rows, (size_t)r->n_rows, sizeof *r->rows, cmp_row);
  size_t line = 4 * sizeof(psim_sweep_row), cap = line * ((size_t)r->n_rows + 1);
  char *j = psim_malloc(cap), *c = psim_malloc(cap);
  psim_status st = j && c ? PSIM_OK : psim_error(PSIM_ENOMEM, "sweep: out of memory");
  size_t nj = 0, nc = 0;
  if (st == PSIM_OK)
    nc = (size_t)snprintf(c, cap, "%s", psim_sweep_csv_header());
  for (int32_t i = 0; st == PSIM_OK && i < r->n_rows; i++) {
    st = psim_sweep_row_jsonl(&r->rows[i], j + nj, cap - nj);
    nj += strlen(j + nj);
    psim_sweep_row_csv(&r->rows[i], c + nc, cap - nc);
    nc += strlen(c + nc);
  }
  if (st == PSIM_OK)
    st = psim_file_write_atomic(r->jsonl_path, j, nj);
  if (st == PSIM_OK)
    st = psim_file_write_atomic(r->csv_path, c, nc);
  psim_free(j);
  psim_free(c);
  return st;
}

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = psim_malloc(n);
  if (p)
    snprintf(p, n, "%s/%s", dir, name);
  return p;
}

static psim_status open_append(const char *path, int *fd) {
  *fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
  if (*fd < 0)
    return psim_error(PSIM_EIO, "%s: cannot open for appending: %s", path, strerror(errno));
  return PSIM_OK;
}

/* A plan file name the sweep writes: "case" digits ".json" (sweep_case.c). */
static bool is_case_plan(const char *name) {
  if (strncmp(name, "case", 4) != 0)
    return false;
  const char *p = name + 4;
  while (isdigit((unsigned char)*p))
    p++;
  return p > name + 4 && strcmp(p, ".json") == 0;
}

/* A sweep run again into the same folder without --resume starts afresh
 * (issue 24): the case plans of the earlier sweep would stand beside the new
 * results and no row would name them (another sweep's plans/case0007.json
 * read as this one's). Only the names the sweep writes are removed. */
static psim_status remove_old_plans(const char *dir) {
  char *plans = join(dir, "plans");
  if (!plans)
    return psim_error(PSIM_ENOMEM, "sweep: out of memory");
  DIR *d = opendir(plans);
  psim_status s = PSIM_OK;
  for (struct dirent *e; d && s == PSIM_OK && (e = readdir(d));) {
    if (!is_case_plan(e->d_name))
      continue;
    if (unlinkat(dirfd(d), e->d_name, 0) != 0 && errno != ENOENT)
      s = psim_error(PSIM_EIO, "%s/%s: cannot remove the earlier sweep's plan: %s", plans,
                     e->d_name, strerror(errno));
  }
  if (d)
    closedir(d);
  psim_free(plans);
  return s;
}

psim_status psim_sweep_results_open(psim_sweep_results *r, const char *dir, const psim_sweep *s,
                                    bool resume) {
  memset(r, 0, sizeof *r);
  r->jsonl_fd = r->csv_fd = -1;
  r->n_cases = s->n_cases;
  r->dir = psim_strdup(dir);
  r->jsonl_path = join(dir, "results.jsonl");
  r->csv_path = join(dir, "results.csv");
  r->done = psim_calloc((size_t)s->n_cases + 1, sizeof *r->done);
  if (!r->dir || !r->jsonl_path || !r->csv_path || !r->done)
    return psim_error(PSIM_ENOMEM, "sweep: out of memory");
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return psim_error(PSIM_EIO, "%s: cannot create the results folder: %s", dir, strerror(errno));
  if (resume)
    PSIM_CHECK(read_log(r, s));
  else
    PSIM_CHECK(remove_old_plans(dir));
  PSIM_CHECK(rewrite(r));
  PSIM_CHECK(open_append(r->jsonl_path, &r->jsonl_fd));
  return open_append(r->csv_path, &r->csv_fd);
}

static psim_status write_all(int fd, const char *path, const char *text) {
  size_t len = strlen(text), done = 0;
  while (done < len) {
    ssize_t w = write(fd, text + done, len - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return psim_error(PSIM_EIO, "%s: write failed: %s", path, strerror(errno));
    done += (size_t)w;
  }
  if (fsync(fd) != 0)
    return psim_error(PSIM_EIO, "%s: fsync failed: %s", path, strerror(errno));
  return PSIM_OK;
}

psim_status psim_sweep_results_append(psim_sweep_results *r, const psim_sweep_row *row) {
  char line[4 * sizeof(psim_sweep_row)];
  PSIM_CHECK(psim_sweep_row_jsonl(row, line, sizeof line));
  PSIM_CHECK(write_all(r->jsonl_fd, r->jsonl_path, line)); /* the log first: it is the truth */
  psim_sweep_row_csv(row, line, sizeof line);
  PSIM_CHECK(write_all(r->csv_fd, r->csv_path, line));
  return add_row(r, row);
}

psim_status psim_sweep_results_finish(psim_sweep_results *r) {
  return rewrite(r);
}

void psim_sweep_results_close(psim_sweep_results *r) {
  if (r->jsonl_fd >= 0)
    close(r->jsonl_fd);
  if (r->csv_fd >= 0)
    close(r->csv_fd);
  psim_free(r->rows);
  psim_free(r->done);
  psim_free(r->dir);
  psim_free(r->jsonl_path);
  psim_free(r->csv_path);
  memset(r, 0, sizeof *r);
  r->jsonl_fd = r->csv_fd = -1;
}

/* ---- checking against a baseline ---- */

static const psim_sweep_row *find_row(const psim_sweep_row *rows, int32_t n, const char *key) {
  for (int32_t i = 0; i < n; i++)
    if (strcmp(rows[i].key, key) == 0)
      return &rows[i];
  return NULL;
}

static int32_t compare_row(const psim_sweep_row *b, const psim_sweep_row *now, double tol,
                           FILE *out) {
  if (strcmp(b->status, "ok") != 0)
    return 0;
  if (!now) {
    fprintf(out, "regression: %s: missing from the results\n", b->key);
    return 1;
  }
  if (strcmp(now->status, "ok") != 0) {
    fprintf(out, "regression: %s: failed: %s\n", b->key, now->error);
    return 1;
  }
  int32_t n = 0;
  if (b->fits && !now->fits)
    n++, fprintf(out, "regression: %s: the plan no longer fits in memory\n", b->key);
  if (now->iteration_time_s > b->iteration_time_s * (1 + tol))
    n++, fprintf(out, "regression: %s: iteration time %.6g s, baseline %.6g s (+%.2f%%)\n", b->key,
                 now->iteration_time_s, b->iteration_time_s,
                 100 * (now->iteration_time_s / b->iteration_time_s - 1));
  if (now->mfu < b->mfu * (1 - tol))
    n++, fprintf(out, "regression: %s: MFU %.4g, baseline %.4g\n", b->key, now->mfu, b->mfu);
  return n;
}

psim_status psim_sweep_check(const char *baseline, const psim_sweep_row *rows, int32_t n_rows,
                             double tolerance, FILE *out, int32_t *regressions) {
  struct stat st_;
  char *path = stat(baseline, &st_) == 0 && S_ISDIR(st_.st_mode) ? join(baseline, "results.jsonl")
                                                                 : psim_strdup(baseline);
  if (!path)
    return psim_error(PSIM_ENOMEM, "out of memory");
  char *text = NULL;
  size_t len = 0;
  psim_status st = psim_file_read(path, PSIM_JSON_MAX_BYTES, &text, &len);
  int32_t compared = 0;
  *regressions = 0;
  for (char *line = text, *nl; st == PSIM_OK && line && *line; line = nl ? nl + 1 : NULL) {
    nl = strchr(line, '\n');
    if (nl)
      *nl = '\0';
    psim_sweep_row b;
    if (!*line)
      continue;
    if (psim_sweep_row_parse(line, &b) != PSIM_OK) {
      st = psim_error(PSIM_EINPUT, "%s: line %d is not a results row", path, compared + 1);
      break;
    }
    compared++;
    *regressions += compare_row(&b, find_row(rows, n_rows, b.key), tolerance, out);
  }
  if (st == PSIM_OK)
    fprintf(out, "check: %d baseline cases compared with tolerance %.3g: %d regressions\n",
            compared, tolerance, *regressions);
  psim_free(text);
  psim_free(path);
  return st;
}
