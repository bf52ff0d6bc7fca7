/* modern.c - the simulator against the modern public measurements in
 * ../shared/calibration/modern (issue 20), row by row
 * (docs/accuracy-modern.md keeps the output).
 *
 *   psim-calibrate-modern [--calibration DIR] [--only SOURCE] [--no-base] [--check]
 *                         [--gemm X] [--attn X] [--launch S] [--tsv FILE]
 *
 * Every row of every source is printed: predicted vs measured tokens/s per GPU
 * and the error (positive = predicted too fast), or "unsupported: <what is
 * missing>". Then the mean absolute error per source and per GPU generation,
 * and the ranking figures per group of rows sharing source (stack), model, GPU
 * and GPU count: Spearman's rank correlation and the pick regret. Each row runs
 * on its source's stack profile (docs/stacks.md) and, for the before/after
 * columns, on megatron-lm-2021 (--no-base skips that). The profiles' fitted
 * scales (one set per stack and device type) were fitted on the rows that are
 * not held out (every fourth row of each source is: fit_modern.py); the summary
 * reports both. --gemm/--attn/--launch replace the fitted scales for every row
 * and --tsv writes one line per row (for fit_modern.py). No row is corrected. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modern.h"

static const char *rc_name(psim_recompute r, int32_t every) {
  return r == PSIM_RECOMPUTE_FULL && every > 1 ? "full/2"
         : r == PSIM_RECOMPUTE_FULL            ? "full"
         : r == PSIM_RECOMPUTE_SELECTIVE       ? "sel"
         : r == PSIM_RECOMPUTE_OP              ? "op"
                                               : "-";
}

static double err_of(const modern_row *r) {
  return r->predicted / r->measured - 1;
}

static bool counted(const modern_row *r) {
  return r->predicted > 0 && !r->duplicate;
}

/* The error on megatron-lm-2021 (before the stacks), "-" when not run. */
static const char *base_error(const modern_row *r) {
  static char buf[32];
  if (!(r->predicted_base > 0))
    return "-";
  snprintf(buf, sizeof buf, "%+.1f%%", 100 * (r->predicted_base / r->measured - 1));
  return buf;
}

static void print_row(const modern_row *r) {
  printf("| %d%s | %s | %s | %d | %d/%d/%d/%d/%d | %d | %d | %s | %s | %lld | %lld | %s | %.6g |",
         r->line, r->heldout ? "*" : "", r->model, r->gpu, (int)r->gpus, (int)r->tp, (int)r->pp,
         (int)r->cp, (int)r->vp, (int)r->dp, (int)r->micro_batch, (int)r->zero,
         rc_name(r->recompute, r->recompute_every), r->fp8 ? "fp8" : "bf16", (long long)r->seq,
         (long long)r->batch, r->note, r->measured);
  if (r->unsupported[0])
    printf(" - | unsupported: %s | |\n", r->unsupported);
  else
    printf(" %.6g | %+.1f%%%s%s | %s | %s |\n", r->predicted, 100 * err_of(r),
           r->fits ? "" : " (over memory)", r->duplicate ? " (duplicate, not counted)" : "",
           r->breakdown, base_error(r));
}

typedef struct summary {
  int rows, simulated, unsupported, n_base, n_held;
  double sum_abs, sum, worst, base_abs, base_sum, held_abs;
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
  if (r->heldout) {
    s->n_held++;
    s->held_abs += fabs(e);
  }
  if (r->predicted_base > 0) {
    double b = r->predicted_base / r->measured - 1;
    s->n_base++;
    s->base_abs += fabs(b);
    s->base_sum += b;
  }
  if (fabs(e) >= fabs(s->worst)) {
    s->worst = e;
    s->worst_line = r->line;
    s->worst_source = r->source;
  }
}

static void print_summary(const char *what, const summary *s) {
  if (s->simulated == 0) {
    printf("| %s | %d | 0 | %d | - | - | - | - | - | - | - |\n", what, s->rows, s->unsupported);
    return;
  }
  int n_fit = s->simulated - s->n_held;
  printf("| %s | %d | %d | %d | ", what, s->rows, s->simulated, s->unsupported);
  if (s->n_base)
    printf("%.1f%% | %+.1f%% | ", 100 * s->base_abs / s->n_base, 100 * s->base_sum / s->n_base);
  else
    printf("- | - | ");
  printf("%.1f%% | %+.1f%% | ", 100 * s->sum_abs / s->simulated, 100 * s->sum / s->simulated);
  if (n_fit > 0)
    printf("%.1f%% (%d) | ", 100 * (s->sum_abs - s->held_abs) / n_fit, n_fit);
  else
    printf("- | ");
  if (s->n_held > 0)
    printf("%.1f%% (%d) | ", 100 * s->held_abs / s->n_held, s->n_held);
  else
    printf("- | ");
  printf("%+.1f%% (%s row %d) |\n", 100 * s->worst, s->worst_source, s->worst_line);
}

static const char *const source_names[] = {"llm-foundry",         "torchtitan",  "megatron-bridge",
                                           "megatron-bridge-moe", "mlperf-gpt3", NULL};

static void print_source(const modern_rows *rows, const char *src) {
  printf("\n## %s\n\nerror = predicted / measured - 1 (tokens/s per GPU; positive = predicted "
         "too fast); parallel = tp/pp/cp/vp/dp; mb = micro-batch; zero = ZeRO stage; "
         "simulated = share of the simulated iteration in compute (c), exposed tensor-parallel "
         "(t), pipeline (p) and data-parallel (d) communication, pipeline bubble (b) and host "
         "waits (h), in %%; before = the error on megatron-lm-2021 (the stack before issue "
         "20's profiles); * = held out of the stack fit.\n\n",
         src);
  printf("| row | model | gpu | gpus | parallel | mb | zero | recompute | linears | seq | batch | "
         "note | measured | predicted | error | simulated | before |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < rows->n; i++)
    if (strcmp(rows->v[i].source, src) == 0)
      print_row(&rows->v[i]);
}

static void print_summaries(const modern_rows *rows) {
  printf("\n## Summary\n\nmean |error| and mean signed error over the simulated rows "
         "(duplicates left out), before (megatron-lm-2021) and after (each source's stack "
         "profile); fitted = the rows the profiles' scales were fitted on, held out = every "
         "fourth row of each source (rows); worst = the row with the largest |error| after.\n\n"
         "| source / generation | rows | simulated | unsupported | before abs | before signed | "
         "mean abs | mean signed | fitted abs | held-out abs | worst |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|\n");
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
      if (strcmp(modern_generation(rows->v[i].gpu), *g) == 0 && rows->v[i].moe.experts == 0)
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

/* One line per row for fit_modern.py: source, line, stack, device type,
 * held out, measured, predicted (0 when not simulated). */
static void write_tsv(const char *file, const modern_rows *rows) {
  FILE *f = fopen(file, "w");
  if (!f) {
    perror(file);
    exit(2);
  }
  for (int i = 0; i < rows->n; i++) {
    const modern_row *r = &rows->v[i];
    fprintf(f, "%s\t%d\t%s\t%s\t%d\t%.9g\t%.9g\t%d\n", r->source, r->line, r->stack,
            r->type[0] ? r->type : "-", r->heldout, r->measured,
            counted(r) && !r->unsupported[0] ? r->predicted : 0.0, r->duplicate);
  }
  fclose(f);
}

/* --check: each guarded source's mean |error| on its stack stays under its bound
 * (docs/accuracy-modern.md): the 8% where it is met, today's figure
 * with a margin where it is not yet. torchtitan: its H100/H200 rows under the
 * issue's 8% (7.2% in session 12, after torchtitan's op-level selective AC,
 * PSIM_RECOMPUTE_OP, and the tensorwise TP cast once per module), all its rows
 * under 8.5% (8.1%, with its layer-level AC as recompute_every): its eight A100
 * FSDP rows sit at +11% signed since ring collectives began to use one channel ring
 * per NIC as NCCL does (session 10; those rows' cluster network is not published,
 * the dgx-a100 preset has 8 HDR NICs). mlperf-gpt3 8% (4.8% in session 11). A guard
 * with a generation counts only that generation's rows. Returns the number over. */
static int check_targets(const modern_rows *rows) {
  static const struct {
    const char *source, *generation;
    double bound;
  } guard[] = {{"llm-foundry", NULL, 0.08},
               {"megatron-bridge", NULL, 0.08},
               {"torchtitan", NULL, 0.085},
               {"torchtitan", "Hopper", 0.08},
               {"mlperf-gpt3", NULL, 0.08}};
  int over = 0;
  for (size_t g = 0; g < sizeof guard / sizeof guard[0]; g++) {
    summary sm = {0};
    for (int i = 0; i < rows->n; i++)
      if (strcmp(rows->v[i].source, guard[g].source) == 0 &&
          (!guard[g].generation ||
           strcmp(modern_generation(rows->v[i].gpu), guard[g].generation) == 0))
        add(&sm, &rows->v[i]);
    double mean = sm.simulated ? sm.sum_abs / sm.simulated : 1.0;
    bool ok = sm.simulated > 0 && mean <= guard[g].bound;
    printf("check: %s%s%s mean |error| %.1f%% (bound %g%%): %s\n", guard[g].source,
           guard[g].generation ? " " : "", guard[g].generation ? guard[g].generation : "",
           100 * mean, 100 * guard[g].bound, ok ? "ok" : "OVER");
    over += !ok;
  }
  return over;
}

typedef struct modern_args {
  const char *dir, *only, *tsv;
  bool no_base, check;
  modern_stack_opts so;
} modern_args;

static bool parse(int argc, char **argv, modern_args *a) {
  a->dir = PSIM_SOURCE_ROOT "/../shared/calibration/modern";
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--no-base") == 0 || strcmp(argv[i], "--check") == 0) {
      *(argv[i][2] == 'n' ? &a->no_base : &a->check) = true;
      continue;
    }
    if (!v)
      return false;
    if (strcmp(argv[i], "--calibration") == 0)
      a->dir = v;
    else if (strcmp(argv[i], "--only") == 0)
      a->only = v;
    else if (strcmp(argv[i], "--tsv") == 0)
      a->tsv = v;
    else if (strcmp(argv[i], "--gemm") == 0)
      a->so.gemm_scale = atof(v);
    else if (strcmp(argv[i], "--attn") == 0)
      a->so.attn_scale = atof(v);
    else if (strcmp(argv[i], "--launch") == 0)
      a->so.launch_s = atof(v);
    else
      return false;
    i++;
  }
  return true;
}

/* Simulates every selected row on megatron-lm-2021 (unless no_base), then on
 * its stack. */
static void run_rows(modern_rows *rows, const modern_args *a) {
  modern_stack_opts base = {.base = true};
  for (int i = 0; i < rows->n; i++) {
    modern_row *r = &rows->v[i];
    if (a->only && strncmp(r->source, a->only, strlen(a->only)) != 0) { /* prefix: -moe */
      snprintf(r->unsupported, sizeof r->unsupported, "not run (--only)");
      continue;
    }
    if (!a->no_base) {
      char why[sizeof r->unsupported];
      memcpy(why, r->unsupported, sizeof why); /* the reader's, if any */
      modern_simulate(r, &base);
      r->predicted_base = r->predicted;
      r->predicted = 0;
      memcpy(r->unsupported, why, sizeof why);
    }
    modern_simulate(r, &a->so);
  }
}

int main(int argc, char **argv) {
  modern_args a = {0};
  if (!parse(argc, argv, &a)) {
    fprintf(stderr, "usage: psim-calibrate-modern [--calibration DIR] [--only SOURCE] "
                    "[--no-base] [--check] [--gemm X] [--attn X] [--launch S] [--tsv FILE]\n");
    return 2;
  }
  const char *only = a.only;
  modern_rows rows = {0};
  if (modern_read_all(a.dir, &rows) == 4) {
    fprintf(stderr, "psim-calibrate-modern: no modern calibration data under %s\n", a.dir);
    return 77;
  }
  run_rows(&rows, &a);
  if (a.tsv)
    write_tsv(a.tsv, &rows);
  printf("# plansim against the modern public measurements (%d rows)\n", rows.n);
  for (const char *const *s = source_names; *s; s++)
    if (!only || strncmp(*s, only, strlen(only)) == 0)
      print_source(&rows, *s);
  print_summaries(&rows);
  print_ranking(&rows);
  int over = a.check ? check_targets(&rows) : 0;
  modern_rows_destroy(&rows);
  return over ? 1 : 0;
}
