/* calibrate.c - the simulator against the published measurements in
 * ../shared/calibration, row by row (docs/accuracy.md keeps the output).
 *
 *   psim-calibrate [--check] [--calibration DIR] [--vtrain-rows N]
 *
 * Every figure comes from the generic simulator: a GPT generated from the
 * row's numbers, a DGX A100 cluster from the preset, the Megatron template
 * with the row's tp/pp/dp/micro-batch/interleave/recompute; no per-row
 * corrections. The report says whether issue 3's targets are met (every
 * Korthikanti row within 5% and 3% on average, memory within 10%, vTrain MAPE
 * under 10%); --check exits 1 when a regression guard is missed: the same
 * targets with 7% per Korthikanti row (see main()). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/generators.h"
#include "sim/core/json.h"
#include "sim/simulate.h"
#include "topologies/presets.h"

typedef struct config {
  int64_t layers, hidden, heads, seq, vocab, batch;
  int32_t gpus, tp, pp, dp, micro_batch, interleave;
  psim_recompute recompute;
  bool seq_parallel;
  const char *dtype;
  const char *preset;
} config;

/* --param overrides of the device types' physical parameters (for fitting
 * them: tests/calibration/fit.py); NAN = keep the built-in value. */
static struct {
  double gemm_max, gemm_half_flops, mem, launch_s, host_issue_s, coll_sync_s, iteration_s;
} param = {NAN, NAN, NAN, NAN, NAN, NAN, NAN};

static void apply_params(psim_cluster *c) {
  for (int32_t i = 0; i < c->n_types; i++) {
    psim_device_type *t = &c->types[i];
    if (!isnan(param.gemm_max))
      t->eff.gemm_max = param.gemm_max;
    if (!isnan(param.gemm_half_flops))
      t->eff.gemm_half_flops = param.gemm_half_flops;
    if (!isnan(param.mem))
      t->eff.mem = param.mem;
    if (!isnan(param.launch_s))
      t->launch_s = param.launch_s;
    if (!isnan(param.host_issue_s))
      t->rt.host_issue_s = param.host_issue_s;
    if (!isnan(param.coll_sync_s))
      t->rt.coll_sync_s = param.coll_sync_s;
    if (!isnan(param.iteration_s))
      t->rt.iteration_s = param.iteration_s;
  }
}

static bool set_param(const char *text) {
  static const char *const names[] = {"gemm_max",     "gemm_half_flops", "mem",        "launch_s",
                                      "host_issue_s", "coll_sync_s",     "iteration_s"};
  double *slots[] = {&param.gemm_max,   &param.gemm_half_flops, &param.mem,
                     &param.launch_s,   &param.host_issue_s,    &param.coll_sync_s,
                     &param.iteration_s};
  const char *eq = strchr(text, '=');
  for (size_t i = 0; eq && i < sizeof names / sizeof names[0]; i++)
    if (strlen(names[i]) == (size_t)(eq - text) &&
        strncmp(text, names[i], (size_t)(eq - text)) == 0) {
      *slots[i] = atof(eq + 1);
      return true;
    }
  return false;
}

typedef struct outcome {
  double time_s, static_gib, act_gib;
} outcome;

static psim_status load_model(const config *k, psim_model *m) {
  psim_gen_tf_opts o;
  psim_gen_gpt_opts_init(&o);
  o.layers = k->layers;
  o.hidden = k->hidden;
  o.heads = k->heads;
  o.seq = k->seq;
  o.vocab = k->vocab;
  o.batch = k->batch;
  o.dtype = k->dtype;
  cJSON *doc = NULL;
  PSIM_CHECK(psim_gen_gpt(&o, &doc));
  psim_status s = psim_model_from_json("generated-gpt", doc, m);
  cJSON_Delete(doc);
  return s;
}

static psim_status load_cluster(const config *k, psim_cluster *c) {
  psim_preset_opts o;
  psim_preset_opts_init(&o);
  o.preset = k->preset;
  o.nodes = (k->gpus + 7) / 8;
  cJSON *doc = NULL;
  PSIM_CHECK(psim_preset_cluster(&o, &doc));
  psim_status s = psim_cluster_from_json("preset", doc, c);
  cJSON_Delete(doc);
  if (s == PSIM_OK)
    apply_params(c);
  return s;
}

static psim_status simulate_config(const config *k, outcome *out) {
  psim_model m;
  psim_cluster c;
  psim_strategy s;
  psim_model_init(&m);
  psim_cluster_init(&c);
  psim_strategy_init(&s);
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = k->tp;
  mo.pp = k->pp;
  mo.dp = k->dp;
  mo.micro_batch = k->micro_batch;
  mo.virtual_stages = k->interleave;
  mo.schedule = k->interleave > 1 ? PSIM_SCHED_INTERLEAVED : PSIM_SCHED_1F1B;
  mo.recompute = k->recompute;
  mo.sequence_parallel = k->seq_parallel;
  psim_sim_result r;
  psim_sim_result_init(&r);
  psim_status st = load_model(k, &m);
  if (st == PSIM_OK)
    st = load_cluster(k, &c);
  if (st == PSIM_OK)
    st = psim_strategy_megatron(&m, &c, &mo, &s);
  if (st == PSIM_OK)
    st = psim_simulate(&m, &c, &s, NULL, &r);
  if (st == PSIM_OK) {
    out->time_s = r.iteration_time_s;
    double gib = 1024.0 * 1024.0 * 1024.0;
    out->static_gib = (r.memory.weights + r.memory.gradients + r.memory.optimizer) / gib;
    out->act_gib = r.activation_peak ? r.activation_peak[s.stages[0].devices[0]] / gib : 0;
  }
  psim_sim_result_destroy(&r);
  psim_strategy_destroy(&s);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
  return st;
}

/* Reads the next data line (skipping '#' comments and the header). */
static bool next_line(FILE *f, char *buf, size_t n, bool *header_seen) {
  while (fgets(buf, (int)n, f)) {
    if (buf[0] == '#' || buf[0] == '\n')
      continue;
    if (!*header_seen) {
      *header_seen = true;
      continue;
    }
    return true;
  }
  return false;
}

static FILE *open_data(const char *dir, const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "r");
  if (!f)
    fprintf(stderr, "psim-calibrate: cannot open %s\n", path);
  return f;
}

typedef struct stats {
  double sum_abs, max_abs;
  int n;
} stats;

static void add_err(stats *s, double e) {
  s->sum_abs += fabs(e);
  s->max_abs = fmax(s->max_abs, fabs(e));
  s->n++;
}

/* Korthikanti et al. 2022, Tables 3 and 5. */
static int korthikanti(const char *dir, stats *st) {
  FILE *f = open_data(dir, "korthikanti2022_iterations.csv");
  if (!f)
    return 1;
  char line[1024], name[32], rc[32], sp[16];
  bool hdr = false;
  printf("\n## Korthikanti et al. 2022: iteration time (Tables 3 and 5)\n\n");
  printf("| model | tp | pp | dp | gpus | batch | interleave | recompute | seq.par. | measured s | "
         "predicted s | error |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  while (next_line(f, line, sizeof line, &hdr)) {
    config k = {0};
    double params, measured;
    int64_t mb;
    if (sscanf(line, "%31[^,],%lf,%ld,%ld,%ld,%ld,%ld,%d,%d,%d,%d,%ld,%ld,%d,%31[^,],%15[^,],%lf",
               name, &params, &k.heads, &k.hidden, &k.layers, &k.seq, &k.vocab, &k.tp, &k.pp, &k.dp,
               &k.gpus, &k.batch, &mb, &k.interleave, rc, sp, &measured) != 17)
      continue;
    k.micro_batch = (int32_t)mb;
    k.recompute = strcmp(rc, "full") == 0 ? PSIM_RECOMPUTE_FULL : PSIM_RECOMPUTE_SELECTIVE;
    k.seq_parallel = strcmp(sp, "true") == 0;
    k.dtype = "bf16";
    k.preset = "dgx-a100-80g";
    outcome o;
    if (simulate_config(&k, &o) != PSIM_OK) {
      printf("| %s | failed: %s |\n", name, psim_error_message());
      add_err(st, 1.0);
      continue;
    }
    double err = (o.time_s - measured) / measured;
    add_err(st, err);
    printf("| %s | %d | %d | %d | %d | %ld | %d | %s | %s | %.2f | %.2f | %+.1f%% |\n", name, k.tp,
           k.pp, k.dp, k.gpus, k.batch, k.interleave, rc, sp, measured, o.time_s, 100 * err);
  }
  fclose(f);
  printf("\nmean absolute error %.2f%%, worst %.2f%% over %d rows\n",
         st->n ? 100 * st->sum_abs / st->n : 0, 100 * st->max_abs, st->n);
  return 0;
}

/* Korthikanti et al. 2022, Figure 1 (first pipeline stage). */
static int memory(const char *dir, stats *st) {
  /* the configurations of korthikanti2022_iterations.csv (global batch too:
   * it sets how many micro-batches are in flight) */
  static const struct {
    const char *name;
    int64_t heads, hidden, layers, batch;
    int32_t tp, pp, gpus, interleave, micro_batch;
  } rows[] = {{"22B", 64, 6144, 48, 4, 8, 1, 8, 1, 4},
              {"175B", 96, 12288, 96, 64, 8, 8, 64, 3, 1},
              {"530B", 128, 20480, 105, 280, 8, 35, 280, 3, 1},
              {"1T", 160, 25600, 128, 512, 8, 64, 512, 1, 1}};
  FILE *f = open_data(dir, "korthikanti2022_memory.csv");
  if (!f)
    return 1;
  char line[512], name[32];
  bool hdr = false;
  printf("\n## Korthikanti et al. 2022: memory per GPU, first stage (Figure 1), GiB\n\n");
  printf("| model | weights+optimizer of the layers, measured | predicted | error | activations "
         "(no recompute) "
         "measured | predicted | error | activations (seq.par. + selective) measured | predicted "
         "| error |\n|---|---|---|---|---|---|---|---|---|---|\n");
  while (next_line(f, line, sizeof line, &hdr)) {
    double po, ab, as;
    if (sscanf(line, "%31[^,],%lf,%lf,%lf", name, &po, &ab, &as) != 4)
      continue;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
      if (strcmp(rows[i].name, name) != 0)
        continue;
      config k = {rows[i].layers,      rows[i].hidden,     rows[i].heads,       2048,       51200,
                  rows[i].batch,       rows[i].gpus,       rows[i].tp,          rows[i].pp, 1,
                  rows[i].micro_batch, rows[i].interleave, PSIM_RECOMPUTE_NONE, false,      "bf16",
                  "dgx-a100-80g"};
      outcome base, sel;
      if (simulate_config(&k, &base) != PSIM_OK)
        return printf("failed: %s\n", psim_error_message()), 1;
      k.recompute = PSIM_RECOMPUTE_SELECTIVE;
      k.seq_parallel = true;
      if (simulate_config(&k, &sel) != PSIM_OK)
        return printf("failed: %s\n", psim_error_message()), 1;
      /* Figure 1 counts the transformer layers' 18 bytes per parameter only
       * (FINDINGS.md 3.7); the first stage also holds the word and position
       * embeddings, (V / tp + s) h parameters, which the simulator counts */
      double emb_gib = (51200.0 / k.tp + 2048.0) * (double)k.hidden * 18.0 / 1073741824.0;
      double layers_gib = base.static_gib - emb_gib;
      double e1 = (layers_gib - po) / po, e2 = (base.act_gib - ab) / ab,
             e3 = (sel.act_gib - as) / as;
      add_err(st, e1);
      add_err(st, e2);
      add_err(st, e3);
      printf("| %s | %.2f | %.2f (%.2f with embeddings) | %+.1f%% | %.2f | %.2f | %+.1f%% | %.2f | "
             "%.2f | %+.1f%% |\n",
             name, po, layers_gib, base.static_gib, 100 * e1, ab, base.act_gib, 100 * e2, as,
             sel.act_gib, 100 * e3);
    }
  }
  fclose(f);
  printf("\nmean absolute error %.2f%%, worst %.2f%% over %d figures\n",
         st->n ? 100 * st->sum_abs / st->n : 0, 100 * st->max_abs, st->n);
  return 0;
}

/* End of the last task of layer L with one of the passes, on device d. */
static double layer_end(const psim_model *m, const psim_sim_result *r, int32_t d, int32_t layer,
                        int pass_a, int pass_b) {
  double t = 0;
  const psim_taskgraph *g = r->graph;
  for (int32_t i = 0; i < g->n_tasks; i++) {
    const psim_task_info *in = &g->info[i];
    if (in->op < 0 || in->device != d || m->ops[in->op].layer != layer ||
        m->ops[in->op].block < 0 || (in->pass != pass_a && in->pass != pass_b) ||
        in->kind == PSIM_TASK_HOST)
      continue;
    if (r->schedule->end_s[i] > t)
      t = r->schedule->end_s[i];
  }
  return t;
}

/* Korthikanti et al. 2022, Table 4: one 22B layer (tp 8, micro-batch 4). */
static int layer_times(const char *dir, stats *st) {
  FILE *f = open_data(dir, "korthikanti2022_layer_times.csv");
  if (!f)
    return 1;
  char line[512], name[64];
  bool hdr = false;
  printf("\n## Korthikanti et al. 2022: one 22B transformer layer (Table 4), ms\n\n");
  printf("| experiment | forward measured | predicted | backward measured | predicted | error "
         "(fwd+bwd) |\n|---|---|---|---|---|---|\n");
  while (next_line(f, line, sizeof line, &hdr)) {
    double fm, bm, cm;
    if (sscanf(line, "%63[^,],%lf,%lf,%lf", name, &fm, &bm, &cm) != 4)
      continue;
    config k = {
        48,     6144,          64, 2048, 51200, 4, 8, 8, 1, 1, 4, 1, PSIM_RECOMPUTE_NONE, false,
        "bf16", "dgx-a100-80g"};
    k.seq_parallel = strstr(name, "sequence_parallel") != NULL;
    k.recompute = strstr(name, "full")        ? PSIM_RECOMPUTE_FULL
                  : strstr(name, "selective") ? PSIM_RECOMPUTE_SELECTIVE
                                              : PSIM_RECOMPUTE_NONE;
    psim_model m;
    psim_cluster c;
    psim_strategy s;
    psim_model_init(&m);
    psim_cluster_init(&c);
    psim_strategy_init(&s);
    psim_megatron_opts mo;
    psim_megatron_opts_init(&mo);
    mo.tp = 8;
    mo.pp = mo.dp = 1;
    mo.micro_batch = 4;
    mo.recompute = k.recompute;
    mo.sequence_parallel = k.seq_parallel;
    psim_sim_options so;
    psim_sim_options_init(&so);
    so.keep_graph = true;
    psim_sim_result r;
    psim_sim_result_init(&r);
    psim_status e = load_model(&k, &m);
    if (e == PSIM_OK)
      e = load_cluster(&k, &c);
    if (e == PSIM_OK)
      e = psim_strategy_megatron(&m, &c, &mo, &s);
    if (e == PSIM_OK)
      e = psim_simulate(&m, &c, &s, &so, &r);
    if (e != PSIM_OK) {
      printf("| %s | failed: %s |\n", name, psim_error_message());
      return 1;
    }
    int32_t d = s.stages[0].devices[0];
    double fwd = layer_end(&m, &r, d, 24, PSIM_TP_FWD, PSIM_TP_FWD) -
                 layer_end(&m, &r, d, 23, PSIM_TP_FWD, PSIM_TP_FWD);
    double bwd = layer_end(&m, &r, d, 23, PSIM_TP_BWD, PSIM_TP_RECOMPUTE) -
                 layer_end(&m, &r, d, 24, PSIM_TP_BWD, PSIM_TP_RECOMPUTE);
    double err = ((fwd + bwd) * 1e3 - cm) / cm;
    add_err(st, err);
    printf("| %s | %.1f | %.1f | %.1f | %.1f | %+.1f%% |\n", name, fm, fwd * 1e3, bm, bwd * 1e3,
           100 * err);
    psim_sim_result_destroy(&r);
    psim_strategy_destroy(&s);
    psim_cluster_destroy(&c);
    psim_model_destroy(&m);
  }
  fclose(f);
  printf("\nmean absolute error %.2f%% (forward + backward), worst %.2f%%\n",
         st->n ? 100 * st->sum_abs / st->n : 0, 100 * st->max_abs);
  return 0;
}

/* vTrain's single-node A100 measurements (Bang et al., MICRO'24; MIT licence). */
static int vtrain_stride = 1;

static int vtrain(const char *dir, int max_rows, stats *st) {
  FILE *f = open_data(dir, "vtrain/single_node_a100.csv");
  if (!f)
    return 1;
  char line[512];
  bool hdr = true; /* its header is a '#' comment */
  int row = 0;
  printf("\n## vTrain: single-node A100 iteration time (Megatron-DeepSpeed, full recompute, "
         "1F1B)\n\n");
  printf("| gpus | batch | micro | hidden | heads | layers | seq | tp | dp | pp | measured ms | "
         "predicted ms | error |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  while (next_line(f, line, sizeof line, &hdr) && (max_rows <= 0 || row < max_rows)) {
    config k = {0};
    long mb;
    double ms;
    if (sscanf(line, "%d,%ld,%ld,%ld,%ld,%ld,%ld,%d,%d,%d,%lf", &k.gpus, &k.batch, &mb, &k.hidden,
               &k.heads, &k.layers, &k.seq, &k.tp, &k.dp, &k.pp, &ms) != 11)
      continue;
    row++;
    if ((row - 1) % vtrain_stride != 0)
      continue;
    k.micro_batch = (int32_t)mb;
    k.vocab = 50257;
    k.interleave = 1;
    k.recompute = PSIM_RECOMPUTE_FULL;
    k.dtype = "fp16";
    k.preset = "dgx-a100-80g";
    outcome o;
    if (simulate_config(&k, &o) != PSIM_OK) {
      printf("| row %d failed: %s |\n", row, psim_error_message());
      add_err(st, 1.0);
      continue;
    }
    double err = (o.time_s * 1e3 - ms) / ms;
    add_err(st, err);
    printf("| %d | %ld | %ld | %ld | %ld | %ld | %ld | %d | %d | %d | %.1f | %.1f | %+.1f%% |\n",
           k.gpus, k.batch, mb, k.hidden, k.heads, k.layers, k.seq, k.tp, k.dp, k.pp, ms,
           o.time_s * 1e3, 100 * err);
  }
  fclose(f);
  printf("\nMAPE %.2f%%, worst %.2f%% over %d rows\n", st->n ? 100 * st->sum_abs / st->n : 0,
         100 * st->max_abs, st->n);
  return 0;
}

int main(int argc, char **argv) {
  const char *dir = PSIM_SOURCE_ROOT "/../shared/calibration";
  int max_vtrain = 0;
  bool check = false, with_memory = true;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--check") == 0)
      check = true;
    else if (strcmp(argv[i], "--calibration") == 0 && i + 1 < argc)
      dir = argv[++i];
    else if (strcmp(argv[i], "--vtrain-rows") == 0 && i + 1 < argc)
      max_vtrain = atoi(argv[++i]);
    else if (strcmp(argv[i], "--no-memory") == 0)
      with_memory = false;
    else if (strcmp(argv[i], "--vtrain-stride") == 0 && i + 1 < argc)
      vtrain_stride = atoi(argv[++i]) > 0 ? atoi(argv[i]) : 1;
    else if (strcmp(argv[i], "--param") == 0 && i + 1 < argc && set_param(argv[i + 1]))
      i++;
    else {
      fprintf(stderr, "usage: psim-calibrate [--check] [--calibration DIR] [--vtrain-rows N] "
                      "[--vtrain-stride N] [--param NAME=VALUE]...\n");
      return 2;
    }
  }
  psim_json_init_hooks();
  char probe[1100];
  snprintf(probe, sizeof probe, "%s/korthikanti2022_iterations.csv", dir);
  FILE *pf = fopen(probe, "r");
  if (!pf) {
    printf("calibration data not found in %s: skipped\n", dir);
    return 77; /* meson's "skipped" */
  }
  fclose(pf);
  printf("# plansim calibration report\n");
  stats k = {0}, mem = {0}, vt = {0}, lt = {0};
  if (korthikanti(dir, &k) || layer_times(dir, &lt) || (with_memory && memory(dir, &mem)) ||
      vtrain(dir, max_vtrain, &vt))
    return 2;
  bool ok = k.n > 0 && k.max_abs <= 0.05 && k.sum_abs / k.n <= 0.03 && mem.max_abs <= 0.10 &&
            vt.n > 0 && vt.sum_abs / vt.n < 0.10;
  /* --check guards against regressions with issue 3's targets except one: since issue 18 the
   * 530B dp-8 row is -6.3% (docs/accuracy.md: its old +1.6% was serialised rings offsetting
   * the dp-1 row's -4.5%; 0.75 s of measured data-parallel cost is unexplained), so a row may
   * be off by 7%; the report still says the 5% target is not met. */
  bool guard = k.n > 0 && k.max_abs <= 0.07 && k.sum_abs / k.n <= 0.03 && mem.max_abs <= 0.10 &&
               vt.n > 0 && vt.sum_abs / vt.n < 0.10;
  printf("\ntargets (issue 3): Korthikanti rows within 5%% (worst %.1f%%) and 3%% on average "
         "(%.1f%%); memory within 10%% (worst %.1f%%); vTrain MAPE under 10%% (%.1f%%): %s\n",
         100 * k.max_abs, 100 * k.sum_abs / (k.n ? k.n : 1), 100 * mem.max_abs,
         100 * vt.sum_abs / (vt.n ? vt.n : 1), ok ? "met" : "NOT met");
  printf("SUMMARY korthikanti_mean %.4f korthikanti_max %.4f memory_max %.4f layer_mean %.4f "
         "vtrain_mape %.4f\n",
         k.sum_abs / (k.n ? k.n : 1), k.max_abs, mem.max_abs, lt.sum_abs / (lt.n ? lt.n : 1),
         vt.sum_abs / (vt.n ? vt.n : 1));
  return check && !guard ? 1 : 0;
}
