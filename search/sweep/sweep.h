/* sweep.h - batch sweeps (plansim.sweep/1, docs/sweep.md): the cartesian
 * product of models x clusters x searchers x seeds x budgets, one row of
 * results per case.
 *
 * The library loads a sweep, runs one case (search, plan file, row) and keeps
 * the results files: DIR/results.jsonl (the log: one JSON object per line,
 * appended and fsync'd as each case finishes) and DIR/results.csv (the same
 * rows). Resuming reads the log, drops a truncated last line, and skips the
 * cases it holds; finishing rewrites both files sorted by case index, so an
 * interrupted and resumed, a parallel or an MPI sweep ends with exactly the
 * files of an uninterrupted sequential one (except search_wall_s). Scheduling
 * cases over processes or ranks is the caller's (cli/cmd_sweep.c). */
#ifndef PSIM_SWEEP_H
#define PSIM_SWEEP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "models/registry.h"
#include "sim/core/status.h"

struct cJSON;

typedef struct psim_sweep_model {
  char *label;                /* name in case keys */
  char *file;                 /* model file (resolved), or NULL for a generator */
  char *family;               /* generator family ("gpt", ...) or NULL */
  const psim_gen_family *def; /* the family in models/registry.h, or NULL */
  struct cJSON *gen;          /* generator options (owned copy) or NULL */
  psim_gen_opts opts;         /* the options read from gen (strings point into gen) */
} psim_sweep_model;

typedef struct psim_sweep_cluster {
  char *label;
  char *file;   /* cluster file (resolved), or NULL for a preset */
  char *preset; /* preset name or NULL */
  int32_t nodes;
} psim_sweep_cluster;

/* At most this many cases in a sweep (the product of its lists). */
#ifndef PSIM_SWEEP_MAX_CASES /* the fuzz build lowers it (tests/fuzz/meson.build) */
#define PSIM_SWEEP_MAX_CASES 1000000
#endif
/* Keys are cut to PSIM_SWEEP_KEY_MAX - 1 bytes (a row's key holds as many). */
#define PSIM_SWEEP_KEY_MAX 512

typedef struct psim_sweep_case {
  int32_t model, cluster, searcher, seed, budget; /* indices into the sweep's lists */
  char *key; /* "model=M cluster=C search=S seed=N budget=B" (owned) */
} psim_sweep_case;

typedef struct psim_sweep {
  char *file, *name;
  psim_sweep_model *models;
  int32_t n_models;
  psim_sweep_cluster *clusters;
  int32_t n_clusters;
  char **searchers;
  int32_t n_searchers;
  uint64_t *seeds;
  int32_t n_seeds;
  char **budgets; /* "" = the searcher's default */
  int32_t n_budgets;
  psim_sweep_case *cases; /* product, models slowest, budgets fastest */
  int32_t n_cases;
} psim_sweep;

void psim_sweep_init(psim_sweep *s);
void psim_sweep_destroy(psim_sweep *s);
/* Loads and validates a sweep file (errors name the file and JSON path).
 * Relative model and cluster files are resolved against the sweep file's
 * folder. O(cases). */
psim_status psim_sweep_load(const char *file, psim_sweep *s);

/* The size check of psim_sweep_load alone, on a parsed document (for `plansim
 * check`, which does not resolve the files a sweep names): PSIM_EINPUT naming
 * file when its lists multiply past PSIM_SWEEP_MAX_CASES. O(lists). */
psim_status psim_sweep_check_size(const char *file, const struct cJSON *root);

/* One row of results. Numbers are printed with 9 significant digits. */
#define PSIM_SWEEP_TEXT 512
typedef struct psim_sweep_row {
  int32_t index;
  char key[PSIM_SWEEP_KEY_MAX];
  char model[128], cluster[128], searcher[32], budget[32];
  uint64_t seed;
  int32_t devices;
  char status[16]; /* "ok" or "failed" */
  char error[PSIM_SWEEP_TEXT];
  double iteration_time_s, samples_per_s, tokens_per_s, mfu, peak_memory_bytes;
  bool fits;
  int64_t evaluations;
  char plan[PSIM_SWEEP_TEXT]; /* plan file, relative to the results folder; "" when none */
  double search_wall_s;       /* the only column that differs between identical runs */
} psim_sweep_row;

/* A row with the case's identity filled in and status "failed". */
void psim_sweep_row_for_case(const psim_sweep *s, int32_t i, psim_sweep_row *row);
/* Runs case i: loads or generates its model and cluster (generated files go
 * to dir/models and dir/clusters), searches, writes dir/plans/caseNNNN.json
 * and fills row. A failing case is a row with status "failed" and the error,
 * and PSIM_OK; only an interrupt returns PSIM_EINTERRUPTED. */
psim_status psim_sweep_run_case(const psim_sweep *s, int32_t i, const char *dir,
                                psim_sweep_row *row);

/* The row as one JSON line (with '\n') / one CSV line; NUL-terminated in buf. */
psim_status psim_sweep_row_jsonl(const psim_sweep_row *row, char *buf, size_t size);
void psim_sweep_row_csv(const psim_sweep_row *row, char *buf, size_t size);
/* Parses a JSON line into a row; PSIM_EINPUT when it is not a complete row. */
psim_status psim_sweep_row_parse(const char *line, psim_sweep_row *row);
/* The CSV header line (with '\n'). */
const char *psim_sweep_csv_header(void);

typedef struct psim_sweep_results {
  char *dir, *jsonl_path, *csv_path;
  int jsonl_fd, csv_fd;
  psim_sweep_row *rows; /* rows so far (resumed + new) */
  int32_t n_rows;
  size_t cap_rows;
  bool *done; /* per case */
  int32_t n_cases, n_resumed;
} psim_sweep_results;

/* Opens dir (created when missing) for sweep s. With resume, keeps the rows
 * of dir/results.jsonl whose case still exists with the same key (a
 * truncated or damaged line is dropped); without, starts empty. O(rows). */
psim_status psim_sweep_results_open(psim_sweep_results *r, const char *dir, const psim_sweep *s,
                                    bool resume);
/* Appends a row to both files and fsyncs them. O(1). */
psim_status psim_sweep_results_append(psim_sweep_results *r, const psim_sweep_row *row);
/* Rewrites both files sorted by case index (atomically). O(rows log rows). */
psim_status psim_sweep_results_finish(psim_sweep_results *r);
void psim_sweep_results_close(psim_sweep_results *r);

/* Compares rows with a baseline results file (results.jsonl, or a results
 * folder): a case of the baseline that is missing, failed, does not fit any
 * more, is slower by more than tolerance (relative) or has an MFU lower by
 * more than tolerance is a regression, printed to out. *regressions counts
 * them. PSIM_EINPUT when the baseline does not load. O(rows^2) worst case. */
psim_status psim_sweep_check(const char *baseline, const psim_sweep_row *rows, int32_t n_rows,
                             double tolerance, FILE *out, int32_t *regressions);

#endif
