/* modern.c - the simulator against the modern public measurements in
 * ../shared/calibration/modern (issue 20), row by row
 * (docs/accuracy-modern.md keeps the output).
 *
 *   psim-calibrate-modern [--calibration DIR] [--only SOURCE]
 *
 * Every row of every source is printed: predicted vs measured tokens/s per GPU
 * and the error (positive = predicted too fast), or "unsupported: <what is
 * missing>". Then the mean absolute error per source and per GPU generation,
 * and the ranking figures per group of rows sharing source (stack), model, GPU
 * and GPU count: Spearman's rank correlation and the pick regret. No row is
 * corrected or fitted: the generic simulator as it stands. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modern.h"

static const char *rc_name(psim_recompute r) {
  return r == PSIM_RECOMPUTE_FULL ? "full" : r == PSIM_RECOMPUTE_SELECTIVE ? "sel" : "-";
}

static double err_of(const modern_row *r) {
  return r->predicted / r->measured - 1;
}

static bool counted(const modern_row *r) {
  return r->predicted > 0 && !r->duplicate;
}

static void print_row(const modern_row *r) {
  printf("| %d | %s | %s | %d | %d/%d/%d/%d/%d | %d | %d | %s | %s | %lld | %lld | %s | %.6g |",
         r->line, r->model, r->gpu, (int)r->gpus, (int)r->tp, (int)r->pp, (int)r->cp, (int)r->vp,
         (int)r->dp, (int)r->micro_batch, (int)r->zero, rc_name(r->recompute),
         r->fp8 ? "fp8" : "bf16", (long long)r->seq, (long long)r->batch, r->note, r->measured);
  if (r->unsupported[0])
    printf(" - | unsupported: %s | |\n", r->unsupported);
  else
    printf(" %.6g | %+.1f%%%s%s | %s |\n", r->predicted, 100 * err_of(r),
           r->fits ? "" : " (over memory)", r->duplicate ? " (duplicate, not counted)" : "",
           r->breakdown);
}

typedef struct summary {
  int rows, simulated, unsupported;
  double sum_abs, sum, worst;
  int worst_line;
  const char *worst_source;
} summary;

static void add(summary *s, const modern_row *r) {
  s->rows++;
  if (r->unsupported[0]) {
    s->unsupported++;
    return;
  }
  if (!counted(r))
    return;
  double e = err_of(r);
  s->simulated++;
  s->sum_abs += fabs(e);
  s->sum += e;
  if (fabs(e) >= fabs(s->worst)) {
    s->worst = e;
    s->worst_line = r->line;
    s->worst_source = r->source;
  }
}

static void print_summary(const char *what, const summary *s) {
  if (s->simulated == 0) {
    printf("| %s | %d | 0 | %d | - | - | - |\n", what, s->rows, s->unsupported);
    return;
  }
  printf("| %s | %d | %d | %d | %.1f%% | %+.1f%% | %+.1f%% (%s row %d) |\n", what, s->rows,
         s->simulated, s->unsupported, 100 * s->sum_abs / s->simulated, 100 * s->sum / s->simulated,
         100 * s->worst, s->worst_source, s->worst_line);
}

static const char *const source_names[] = {"llm-foundry", "torchtitan", "megatron-bridge",
                                           "mlperf-gpt3", NULL};

static void print_source(const modern_rows *rows, const char *src) {
  printf("\n## %s\n\nerror = predicted / measured - 1 (tokens/s per GPU; positive = predicted "
         "too fast); parallel = tp/pp/cp/vp/dp; mb = micro-batch; zero = ZeRO stage; "
         "simulated = share of the simulated iteration in compute (c), exposed tensor-parallel "
         "(t), pipeline (p) and data-parallel (d) communication, pipeline bubble (b) and host "
         "waits (h), in %%.\n\n",
         src);
  printf("| row | model | gpu | gpus | parallel | mb | zero | recompute | linears | seq | batch | "
         "note | measured | predicted | error | simulated |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < rows->n; i++)
    if (strcmp(rows->v[i].source, src) == 0)
      print_row(&rows->v[i]);
}

static void print_summaries(const modern_rows *rows) {
  printf("\n## Summary\n\nmean |error| and mean signed error over the simulated rows "
         "(duplicates left out); worst = the row with the largest |error|.\n\n"
         "| source / generation | rows | simulated | unsupported | mean abs | mean signed | "
         "worst |\n|---|---|---|---|---|---|---|\n");
  for (const char *const *s = source_names; *s; s++) {
    summary sm = {0};
    for (int i = 0; i < rows->n; i++)
      if (strcmp(rows->v[i].source, *s) == 0)
        add(&sm, &rows->v[i]);
    print_summary(*s, &sm);
  }
  static const char *const gens[] = {"Ampere", "Hopper", "Blackwell", "other", NULL};
  for (const char *const *g = gens; *g; g++) {
    summary sm = {0};
    for (int i = 0; i < rows->n; i++)
      if (strcmp(modern_generation(rows->v[i].gpu), *g) == 0)
        add(&sm, &rows->v[i]);
    if (sm.rows)
      print_summary(*g, &sm);
  }
}

static bool same_group(const modern_row *a, const modern_row *b) {
  return strcmp(a->source, b->source) == 0 && strcmp(a->model, b->model) == 0 &&
         strcmp(a->gpu, b->gpu) == 0 && a->gpus == b->gpus;
}

/* One group (the rows like rows->v[first] not yet done): prints its line and
 * returns its size; *rho and *regret get its figures. */
static int group(const modern_rows *rows, int first, bool *done, double *rho, double *regret) {
  int n = 0;
  double *p = malloc(2 * (size_t)rows->n * sizeof *p);
  if (!p)
    exit(2);
  double *m = p + rows->n;
  for (int i = first; i < rows->n; i++)
    if (!done[i] && same_group(&rows->v[first], &rows->v[i])) {
      done[i] = true;
      if (counted(&rows->v[i])) {
        p[n] = rows->v[i].predicted;
        m[n++] = rows->v[i].measured;
      }
    }
  *rho = modern_spearman(p, m, n);
  *regret = modern_regret(p, m, n);
  free(p);
  if (n >= 2)
    printf("| %s | %s | %s | %d | %d | %.3f | %.1f%% |\n", rows->v[first].source,
           rows->v[first].model, rows->v[first].gpu, (int)rows->v[first].gpus, n, *rho,
           100 * *regret);
  return n;
}

static void print_ranking(const modern_rows *rows) {
  printf("\n## Ranking\n\nGroups of at least two simulated rows sharing source (one stack each), "
         "model, GPU and GPU count. Spearman = rank correlation of predicted and measured "
         "throughput (average ranks for ties; nan when one side is constant); regret = "
         "measured best / measured throughput of the simulator's first choice - 1 (the mean "
         "over first choices tied in prediction).\n\n"
         "| source | model | gpu | gpus | rows | Spearman | regret "
         "|\n|---|---|---|---|---|---|---|\n");
  bool *done = calloc((size_t)rows->n + 1, sizeof *done);
  if (!done)
    exit(2);
  int groups4 = 0, met = 0;
  for (int i = 0; i < rows->n; i++) {
    if (done[i])
      continue;
    double rho, regret;
    int n = group(rows, i, done, &rho, &regret);
    if (n >= 4) {
      groups4++;
      met += rho >= 0.9 && regret <= 0.05;
    }
  }
  free(done);
  printf("\nGroups of at least 4 rows: %d; meeting Spearman >= 0.9 and regret <= 5%%: %d.\n",
         groups4, met);
}

int main(int argc, char **argv) {
  const char *dir = PSIM_SOURCE_ROOT "/../shared/calibration/modern", *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--calibration") == 0 && i + 1 < argc)
      dir = argv[++i];
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
      only = argv[++i];
    else {
      fprintf(stderr, "usage: psim-calibrate-modern [--calibration DIR] [--only SOURCE]\n");
      return 2;
    }
  }
  modern_rows rows = {0};
  if (modern_read_all(dir, &rows) == 4) {
    fprintf(stderr, "psim-calibrate-modern: no modern calibration data under %s\n", dir);
    return 77;
  }
  for (int i = 0; i < rows.n; i++)
    if (!only || strcmp(rows.v[i].source, only) == 0)
      modern_simulate(&rows.v[i]);
    else
      snprintf(rows.v[i].unsupported, sizeof rows.v[i].unsupported, "not run (--only)");
  printf("# plansim against the modern public measurements (%d rows)\n", rows.n);
  for (const char *const *s = source_names; *s; s++)
    if (!only || strcmp(*s, only) == 0)
      print_source(&rows, *s);
  print_summaries(&rows);
  print_ranking(&rows);
  modern_rows_destroy(&rows);
  return 0;
}
