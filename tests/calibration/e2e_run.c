/* e2e_run.c - the end-to-end check of the CPU cost model (e2e_run.h). */
#include "e2e_run.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "costdb/costdb.h"
#include "costdb/profile/profile.h"
#include "models/generators.h"
#include "sim/core/alloc.h"
#include "sim/simulate.h"
#include "sim/strategy/strategy.h"

void psim_e2e_opts_init(psim_e2e_opts *o) {
  o->budget_s = 0.1;
  o->runs = 7;
  o->detail = NULL;
}

/* The profiler's clock (thread CPU time), so both sides exclude the time
 * other processes held the core. */
static double now_s(void) {
  return psim_profile_cpu_clock_s();
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* ---- models and cluster ------------------------------------------------- */

psim_status psim_e2e_load_mlp(const char *root, psim_model *m) {
  char path[4096];
  snprintf(path, sizeof path, "%s/models/mlp.json", root);
  return psim_model_load(path, m);
}

psim_status psim_e2e_gpt_layer(psim_model *m) {
  psim_gen_tf_opts o;
  psim_gen_gpt_opts_init(&o);
  o.name = "gpt-1-layer";
  o.layers = 1;
  o.hidden = 512;
  o.heads = 8;
  o.seq = 128;
  o.vocab = 2048;
  o.batch = 8;
  o.dtype = "fp32"; /* the Debian OpenBLAS has no bf16 GEMM */
  cJSON *doc = NULL;
  PSIM_CHECK(psim_gen_gpt(&o, &doc));
  psim_status s = psim_model_from_json("gpt-1-layer", doc, m);
  cJSON_Delete(doc);
  return s;
}

psim_status psim_e2e_cpu_cluster(psim_cluster *c) {
  static const char doc[] =
      "{\"format\": \"plansim.cluster/1\", \"name\": \"cpu-1\", \"nodes\": 1,"
      " \"devices_per_node\": 1, \"device_type\": \"cpu\","
      " \"intra_node\": {\"kind\": \"shared_memory\", \"bandwidth\": \"10 GB/s\"}}";
  cJSON *root = cJSON_Parse(doc);
  if (!root)
    return psim_error(PSIM_ENOMEM, "out of memory parsing the cpu-1 cluster");
  psim_status s = psim_cluster_from_json("cpu-1", root, c);
  cJSON_Delete(root);
  return s;
}

/* ---- the simulated sequence --------------------------------------------- */

typedef struct seq_task {
  double start_s, dur_s;
  psim_cost_key key;
} seq_task;

typedef struct e2e_state {
  const psim_model *m;
  psim_cluster *c;
  const psim_e2e_opts *o;
  psim_costdb db;
  psim_strategy s;
  psim_sim_result sim;
  seq_task *tasks; /* compute tasks of the forward+backward chain, in start order */
  int32_t n_tasks;
  psim_profile_kernel **kernels;
  psim_profile_kernel **adam;
} e2e_state;

static int cmp_task(const void *a, const void *b) {
  const seq_task *x = a, *y = b;
  return (x->start_s > y->start_s) - (x->start_s < y->start_s);
}

static psim_status profile(e2e_state *st) {
  psim_key_set keys;
  psim_costdb_init(&keys);
  psim_status s = psim_profile_keys_model(st->m, st->c, PSIM_DTYPE_FP32, &keys);
  psim_profile_opts po;
  psim_profile_opts_init(&po);
  po.budget_s = st->o->budget_s;
  po.max_flops = 1e12; /* measure every shape as is: no slices, all entries exact */
  psim_profile_stats stats;
  if (s == PSIM_OK)
    s = psim_profile_cpu_fingerprint(&st->db.fp);
  if (s == PSIM_OK)
    s = psim_profile_run(&st->db, &keys, psim_profile_cpu_measure, &po, &stats);
  psim_costdb_destroy(&keys);
  return s;
}

static psim_status simulate(e2e_state *st, psim_e2e_result *r) {
  PSIM_CHECK(psim_strategy_data_parallel(st->m, st->c, 1, 1, &st->s));
  psim_sim_options so;
  psim_sim_options_init(&so);
  so.costdb = &st->db;
  so.keep_graph = true;
  PSIM_CHECK(psim_simulate(st->m, st->c, &st->s, &so, &st->sim));
  r->sim_iter_s = st->sim.iteration_time_s;
  r->share_measured = st->sim.share_measured;
  return PSIM_OK;
}

/* The cost-database key of a forward or backward compute task. */
static psim_status task_key(const e2e_state *st, const psim_task_info *ti, psim_cost_key *key) {
  const psim_op *op = &st->m->ops[ti->op];
  int64_t ext[PSIM_MAX_OP_DIMS];
  for (int32_t i = 0; i < op->n_dims; i++)
    ext[i] = psim_strategy_dim_extent(&st->s, st->m, op->dims[i].dim);
  psim_pass pass = ti->pass == PSIM_TP_BWD ? PSIM_PASS_BWD : PSIM_PASS_FWD;
  return psim_costdb_key_from_op(st->m, op, ext, pass, key);
}

/* Collects the compute tasks in the simulator's order; sums their times. */
static psim_status collect_tasks(e2e_state *st, psim_e2e_result *r) {
  const psim_taskgraph *g = st->sim.graph;
  st->tasks = psim_calloc((size_t)g->n_tasks + 1, sizeof *st->tasks);
  if (!st->tasks)
    return psim_error(PSIM_ENOMEM, "out of memory");
  for (int32_t t = 0; t < g->n_tasks; t++) {
    const psim_task_info *ti = &g->info[t];
    if (ti->kind != PSIM_TASK_COMPUTE)
      continue;
    if (ti->pass == PSIM_TP_UPDATE) {
      r->sim_update_s += g->duration_s[t];
      continue;
    }
    if (ti->pass != PSIM_TP_FWD && ti->pass != PSIM_TP_BWD)
      return psim_error(PSIM_EFAILED, "unexpected task pass %d", ti->pass);
    r->sim_fb_s += g->duration_s[t];
    if (g->duration_s[t] <= 0) {
      r->n_views++; /* a view (reshape, split): no kernel */
      continue;
    }
    seq_task *q = &st->tasks[st->n_tasks++];
    q->start_s = st->sim.schedule->start_s[t];
    q->dur_s = g->duration_s[t];
    PSIM_CHECK(task_key(st, ti, &q->key));
    const psim_cost_entry *e = psim_costdb_find(&st->db, &q->key);
    r->sim_fb_min_s += e ? e->min_s : q->dur_s;
  }
  qsort(st->tasks, (size_t)st->n_tasks, sizeof *st->tasks, cmp_task);
  r->n_kernels = st->n_tasks;
  return PSIM_OK;
}

/* ---- the real run ----------------------------------------------------------- */

static psim_status make_kernels(e2e_state *st, psim_e2e_result *r) {
  st->kernels = psim_calloc((size_t)st->n_tasks + 1, sizeof *st->kernels);
  st->adam = psim_calloc((size_t)st->m->n_tensors + 1, sizeof *st->adam);
  if (!st->kernels || !st->adam)
    return psim_error(PSIM_ENOMEM, "out of memory");
  for (int32_t i = 0; i < st->n_tasks; i++)
    PSIM_CHECK(psim_profile_cpu_kernel_create(&st->tasks[i].key, &st->kernels[i]));
  for (int32_t t = 0; t < st->m->n_tensors; t++) {
    const psim_tensor *w = &st->m->tensors[t];
    if (w->kind != PSIM_TENSOR_WEIGHT)
      continue;
    int64_t n = 1;
    for (int32_t d = 0; d < w->rank; d++)
      n *= st->m->dims[w->dims[d]].size;
    psim_cost_key k;
    psim_costdb_key_adam(n, PSIM_DTYPE_FP32, &k);
    PSIM_CHECK(psim_profile_cpu_kernel_create(&k, &st->adam[r->n_weights++]));
  }
  return PSIM_OK;
}

/* Times `runs` runs of a kernel sequence after one warm-up run. */
static void time_sequence(psim_profile_kernel **ks, int32_t n, int32_t runs, double *samples) {
  for (int32_t rep = -1; rep < runs; rep++) {
    double t0 = now_s();
    for (int32_t i = 0; i < n; i++)
      psim_profile_cpu_kernel_run(ks[i]);
    if (rep >= 0)
      samples[rep] = now_s() - t0;
  }
}

/* Per kernel: the simulated time against its median inside the sequence. */
static psim_status detail(const e2e_state *st, int32_t runs) {
  int32_t n = st->n_tasks;
  double *t = psim_calloc((size_t)(n * runs) + 1, sizeof *t);
  if (!t)
    return psim_error(PSIM_ENOMEM, "out of memory");
  for (int32_t rep = -1; rep < runs; rep++)
    for (int32_t i = 0; i < n; i++) {
      double t0 = now_s();
      psim_profile_cpu_kernel_run(st->kernels[i]);
      if (rep >= 0)
        t[i * runs + rep] = now_s() - t0;
    }
  for (int32_t i = 0; i < n; i++) {
    char buf[160];
    qsort(t + i * runs, (size_t)runs, sizeof *t, cmp_double);
    double real = t[i * runs + runs / 2];
    fprintf(st->o->detail, "  %-48s sim %9.3f ms  in sequence %9.3f ms  %+6.1f%%\n",
            psim_cost_key_format(&st->tasks[i].key, buf, sizeof buf), 1e3 * st->tasks[i].dur_s,
            1e3 * real, 100 * (st->tasks[i].dur_s / real - 1));
  }
  psim_free(t);
  return PSIM_OK;
}

static psim_status run_real(e2e_state *st, psim_e2e_result *r) {
  int32_t runs = st->o->runs > 0 ? st->o->runs : 1;
  double *samples = psim_calloc((size_t)runs, sizeof *samples);
  if (!samples)
    return psim_error(PSIM_ENOMEM, "out of memory");
  openblas_set_num_threads(1); /* one core = one simulated device, as profiled */
  time_sequence(st->kernels, st->n_tasks, runs, samples);
  qsort(samples, (size_t)runs, sizeof *samples, cmp_double);
  r->real_fb_s = samples[runs / 2];
  r->real_fb_min_s = samples[0];
  time_sequence(st->adam, r->n_weights, runs, samples);
  qsort(samples, (size_t)runs, sizeof *samples, cmp_double);
  r->real_update_s = samples[runs / 2];
  psim_free(samples);
  return st->o->detail ? detail(st, runs) : PSIM_OK;
}

static void state_destroy(e2e_state *st) {
  for (int32_t i = 0; st->kernels && i < st->n_tasks; i++)
    psim_profile_cpu_kernel_destroy(st->kernels[i]);
  for (int32_t i = 0; st->adam && i < st->m->n_tensors; i++)
    psim_profile_cpu_kernel_destroy(st->adam[i]);
  psim_free(st->kernels);
  psim_free(st->adam);
  psim_free(st->tasks);
  psim_sim_result_destroy(&st->sim);
  psim_strategy_destroy(&st->s);
  psim_costdb_destroy(&st->db);
}

psim_status psim_e2e_run(const psim_model *m, psim_cluster *c, const psim_e2e_opts *o,
                         psim_e2e_result *r) {
  if (c->n_devices != 1)
    return psim_error(PSIM_EINPUT, "the end-to-end check needs a one-device cluster");
  e2e_state st;
  memset(&st, 0, sizeof st);
  memset(r, 0, sizeof *r);
  st.m = m, st.c = c, st.o = o;
  psim_costdb_init(&st.db);
  psim_strategy_init(&st.s);
  psim_sim_result_init(&st.sim);
  psim_status s = profile(&st);
  if (s == PSIM_OK)
    s = simulate(&st, r);
  if (s == PSIM_OK)
    s = collect_tasks(&st, r);
  if (s == PSIM_OK)
    s = make_kernels(&st, r);
  if (s == PSIM_OK)
    s = run_real(&st, r);
  if (s == PSIM_OK) {
    r->err_fb = r->sim_fb_s / r->real_fb_s - 1;
    r->err_fb_min = r->sim_fb_min_s / r->real_fb_min_s - 1;
    r->err_with_update = (r->sim_fb_s + r->sim_update_s) / (r->real_fb_s + r->real_update_s) - 1;
  }
  state_destroy(&st);
  return s;
}
