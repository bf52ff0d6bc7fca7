/* test_alpa.c - the Alpa optimizer (issue 6): the ILP rediscovers Megatron's
 * tensor-parallel pattern on one GPT layer over 8 GPUs of a node; layer
 * clustering equals brute force; --fix pins are kept, never beat the
 * unconstrained plan, and contradictions are errors naming the entries; the
 * plan on a small GPT is at least as fast as the best Megatron grid plan
 * minus 1%. Issue 23: a graph without layer indices (a chain of large
 * matmuls, two nodes on a slow network) is clustered into layers (Alpa,
 * section 5.2) and pipelined, faster than the best one-stage plan (every
 * one-stage mesh pinned by --fix, simulated); the clusters round-trip as the
 * strategy's pipeline.layer_starts; bad overrides are errors naming the field. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "models/generators.h"
#include "search/alpa/alpa.h"
#include "search/alpa/alpa_impl.h"
#include "sim/core/alloc.h"
#include "sim/engine/collective.h"
#include "sim/simulate.h"
#include "sim/strategy/constraints.h"
#include "topologies/presets.h"

#define TOPO PSIM_SOURCE_ROOT "/topologies/"

static void gpt(psim_model *m, int64_t layers, int64_t hidden, int64_t heads, int64_t seq,
                int64_t batch) {
  psim_gen_tf_opts g;
  psim_gen_gpt_opts_init(&g);
  g.layers = layers;
  g.hidden = hidden;
  g.heads = heads;
  g.seq = seq;
  g.batch = batch;
  g.vocab = 8192;
  cJSON *j = NULL;
  ck_assert(psim_gen_gpt(&g, &j) == PSIM_OK);
  psim_model_init(m);
  ck_assert_msg(psim_model_from_json("gpt", j, m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(j);
}

static void cluster(psim_cluster *c, const char *file) {
  psim_cluster_init(c);
  ck_assert_msg(psim_cluster_load(file, c) == PSIM_OK, "%s", psim_error_message());
}

static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Megatron-LM (Shoeybi et al. 2019, section 3): column-parallel first
 * linear layers (qkv: heads, fc1: ffn), row-parallel second ones (proj,
 * fc2: the same dims contracted), so one reduction per block in forward.
 * And its sequence parallelism (Korthikanti et al. 2022): the partial sums
 * of proj and fc2 are reduce-scattered along the sequence, the dropout,
 * residual and norm ops after them run on sequence shards, and the
 * all-gather comes before the next column-parallel layer: the same bytes on
 * the wire as the all-reduce, less memory and less elementwise work. */
START_TEST(ilp_rediscovers_megatron) {
  psim_model m;
  psim_cluster c;
  gpt(&m, 3, 4096, 32, 2048, 8);
  cluster(&c, TOPO "dgx-a100-x1.json");
  static psim_sh_mesh mesh;
  psim_sh_layer L;
  psim_ilp_solution sol;
  ck_assert_msg(psim_alpa_layer_ilp(&m, &c, 1, 1, 8, 1, 1, &mesh, &L, &sol) == PSIM_OK, "%s",
                psim_error_message());
  ck_assert(sol.optimal);
  int checked = 0, reductions = 0, seq_split = 0;
  for (int32_t i = 0; i < L.n_ops; i++) {
    const psim_op *op = &m.ops[L.ops[i]];
    psim_sh_strat s = psim_sh_op_strat(&L, &mesh, 1, sol.choice, i);
    int32_t d = psim_sh_model_dim(op, s, 1);
    bool after_row = ends_with(op->name, "out_dropout") || ends_with(op->name, ".residual1") ||
                     ends_with(op->name, ".ln2") || ends_with(op->name, ".ffn_dropout") ||
                     ends_with(op->name, ".residual2");
    if (after_row) {
      ck_assert_msg(d == m.role_dim[PSIM_ROLE_SEQUENCE], "%s is not on sequence shards", op->name);
      seq_split++;
    }
    if (s.dim[1] >= 0 && op->dims[s.dim[1]].use == PSIM_USE_CONTRACTED)
      reductions++;
    psim_role want = PSIM_ROLE_NONE;
    if (ends_with(op->name, ".qkv") || ends_with(op->name, ".proj"))
      want = PSIM_ROLE_HEADS;
    else if (ends_with(op->name, ".fc1") || ends_with(op->name, ".fc2"))
      want = PSIM_ROLE_FFN;
    else
      continue;
    ck_assert_msg(d >= 0 && m.dims[d].role == want, "%s splits %s", op->name,
                  d >= 0 ? m.dims[d].name : "nothing");
    bool row = ends_with(op->name, ".proj") || ends_with(op->name, ".fc2");
    ck_assert_int_eq(op->dims[s.dim[1]].use == PSIM_USE_CONTRACTED, row);
    ck_assert_msg(!row || s.rs == 1, "%s all-reduces its partial sums", op->name);
    checked++;
  }
  ck_assert_int_eq(checked, 4);
  ck_assert_int_eq(reductions, 2); /* one reduction per block (attention, MLP) */
  ck_assert_int_eq(seq_split, 5);
  psim_ilp_solution_destroy(&sol);
  psim_sh_layer_destroy(&L);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* Bytes crossing the boundary before op p (independent of cluster_layers.c). */
static double cut_at(const psim_model *m, int32_t p) {
  double b = 0;
  for (int32_t t = 0; t < m->n_tensors; t++) {
    int32_t a = m->tensors[t].producer;
    bool later = false;
    for (int32_t i = p; a >= 0 && a < p && i < m->n_ops; i++)
      for (int32_t k = 0; k < m->ops[i].n_in; k++)
        later = later || m->ops[i].in[k] == t;
    if (later)
      b += psim_tensor_bytes(m, &m->tensors[t]);
  }
  return b;
}

static double flops(const psim_model *m, int32_t a, int32_t b) {
  double f = 0;
  for (int32_t i = a; i < b; i++)
    f += m->ops[i].flops[PSIM_PASS_FWD] + m->ops[i].flops[PSIM_PASS_BWD];
  return f;
}

START_TEST(clustering_equals_brute_force) {
  psim_model m;
  gpt(&m, 2, 256, 4, 128, 4);
  int32_t n = m.n_ops, k = 3, *cl = psim_malloc((size_t)n * sizeof *cl);
  double delta = 2.0, cap = (1 + delta) * flops(&m, 0, n) / k;
  ck_assert_int_eq(psim_alpa_cluster_layers(&m, k, delta, cl), PSIM_OK);
  double got = 0;
  for (int32_t i = 1; i < n; i++) {
    ck_assert_int_ge(cl[i], cl[i - 1]);
    if (cl[i] != cl[i - 1])
      got += cut_at(&m, i);
  }
  double best = INFINITY; /* every pair of cut points */
  for (int32_t a = 1; a < n; a++)
    for (int32_t b = a + 1; b < n; b++)
      if (flops(&m, 0, a) <= cap && flops(&m, a, b) <= cap && flops(&m, b, n) <= cap)
        best = fmin(best, cut_at(&m, a) + cut_at(&m, b));
  ck_assert(isfinite(best));
  ck_assert_double_eq_tol(got, best, 1e-9 * best);
  psim_free(cl);
  psim_model_destroy(&m);
}
END_TEST

static int32_t plan_threads = 1; /* psim_search_options.threads of plan() */

static psim_status plan(const psim_model *m, psim_cluster *c, const char *fix,
                        psim_search_result *r) {
  psim_search_options o;
  psim_search_options_init(&o);
  o.threads = plan_threads;
  cJSON *j = fix ? cJSON_Parse(fix) : NULL;
  psim_constraints k;
  psim_constraints_init(&k);
  ck_assert_int_eq(psim_constraints_read(j, "fix.json", &k), PSIM_OK);
  o.fix = j ? &k : NULL;
  psim_search_result_init(r);
  psim_status s = psim_search_alpa(m, c, &o, r);
  psim_constraints_destroy(&k);
  cJSON_Delete(j);
  return s;
}

START_TEST(fix_is_kept_and_never_faster) {
  psim_model m;
  psim_cluster c;
  gpt(&m, 4, 1024, 16, 1024, 64);
  cluster(&c, TOPO "dgx-a100-x1.json");
  psim_search_result free_r, fixed_r;
  ck_assert_msg(plan(&m, &c, NULL, &free_r) == PSIM_OK, "%s", psim_error_message());
  const char *fix = "{\"format\": \"plansim.strategy/1\", "
                    "\"ops\": {\"layer.*.qkv\": {\"split\": {\"batch\": 4}}}}";
  ck_assert_msg(plan(&m, &c, fix, &fixed_r) == PSIM_OK, "%s", psim_error_message());
  int pinned = 0;
  for (int32_t i = 0; i < m.n_ops; i++) {
    if (!ends_with(m.ops[i].name, ".qkv"))
      continue;
    for (int32_t d = 0; d < m.ops[i].n_dims; d++)
      ck_assert_int_eq(fixed_r.best.ops[i].degree[d],
                       m.dims[m.ops[i].dims[d].dim].role == PSIM_ROLE_BATCH ? 4 : 1);
    pinned++;
  }
  ck_assert_int_eq(pinned, 4);
  ck_assert(fixed_r.best_sim.fits && free_r.best_sim.fits);
  ck_assert_double_ge(fixed_r.best_sim.iteration_time_s,
                      free_r.best_sim.iteration_time_s * (1 - 1e-9));
  psim_search_result_destroy(&free_r);
  psim_search_result_destroy(&fixed_r);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* Layers of stage i of a plan. */
static int32_t stage_layers(const psim_strategy *s, int32_t i) {
  return s->stages[i].last_layer - s->stages[i].first_layer + 1;
}

/* Issue 8: the stage DP sees per-device speeds. Two stages of 8 GPUs (the
 * mesh is pinned to 8 devices); with the second node's GPUs slowed 2x it
 * must get fewer layers than the first, and without slowdown no fewer. */
START_TEST(slow_stage_gets_fewer_layers) {
  psim_model m;
  gpt(&m, 12, 1024, 16, 512, 64);
  psim_cluster c;
  cluster(&c, TOPO "dgx-a100-x2.json");
  const char *fix = "{\"format\": \"plansim.strategy/1\", \"mesh\": {\"axes\": {\"dp\": 8}}}";
  psim_search_result even, slow;
  ck_assert_msg(plan(&m, &c, fix, &even) == PSIM_OK, "%s", psim_error_message());
  ck_assert_int_eq(even.best.n_stages, 2);
  ck_assert_int_ge(stage_layers(&even.best, 1), stage_layers(&even.best, 0) - 1);
  for (int32_t d = 8; d < 16; d++)
    c.devices[d].slowdown = 2.0;
  ck_assert_msg(plan(&m, &c, fix, &slow) == PSIM_OK, "%s", psim_error_message());
  ck_assert_int_eq(slow.best.n_stages, 2);
  ck_assert_int_lt(stage_layers(&slow.best, 1), stage_layers(&slow.best, 0));
  psim_search_result_destroy(&even);
  psim_search_result_destroy(&slow);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

START_TEST(fix_contradictions_are_errors) {
  psim_model m;
  psim_cluster c;
  gpt(&m, 2, 512, 8, 512, 16);
  cluster(&c, TOPO "dgx-a100-x1.json");
  psim_search_result r;
  /* degree 3 exists on no mesh of 1, 2, 4 or 8 devices */
  ck_assert_int_eq(plan(&m, &c,
                        "{\"format\": \"plansim.strategy/1\", \"ops\": "
                        "{\"layer.*.fc1\": {\"split\": {\"ffn\": 3}}}}",
                        &r),
                   PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "ops.layer.*.fc1"));
  psim_search_result_destroy(&r);
  /* gelu follows fc1's split: ffn on one and batch-only on the other conflict */
  ck_assert_int_eq(plan(&m, &c,
                        "{\"format\": \"plansim.strategy/1\", \"ops\": "
                        "{\"layer.*.fc1\": {\"split\": {\"ffn\": 8}}, "
                        "\"layer.*.gelu\": {\"split\": {\"batch\": 8}}}}",
                        &r),
                   PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "ops.layer.*.fc1"));
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "ops.layer.*.gelu"));
  psim_search_result_destroy(&r);
  ck_assert_int_eq(plan(&m, &c,
                        "{\"format\": \"plansim.strategy/1\", \"ops\": "
                        "{\"nope\": {\"split\": {\"batch\": 2}}}}",
                        &r),
                   PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "ops.nope"));
  psim_search_result_destroy(&r);
  /* a dim the op does not have (found while the ILPs are set up: under the
   * sanitizer build LeakSanitizer checks that path frees what it holds) */
  ck_assert_int_eq(plan(&m, &c,
                        "{\"format\": \"plansim.strategy/1\", \"ops\": "
                        "{\"layer.*.fc1\": {\"split\": {\"nosuchdim\": 2}}}}",
                        &r),
                   PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "has no dim 'nosuchdim'"));
  psim_search_result_destroy(&r);
  psim_error_clear();
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* A partial strategy has no fixed number of entries: 40 spellings of one
 * pin are kept, and a contradiction after 40 entries is blamed by its name. */
static char *many_entries(int n, const char *split, const char *last) {
  size_t size = 4096 + (size_t)n * 128;
  char *buf = malloc(size);
  ck_assert_ptr_nonnull(buf);
  size_t at = (size_t)snprintf(buf, size, "{\"format\": \"plansim.strategy/1\", \"ops\": {");
  for (int i = 0; i < n; i++) /* "layer.*.qkv", "*layer.*.qkv", "**layer.*.qkv", ... */
    at += (size_t)snprintf(buf + at, size - at, "%s\"%.*slayer.*.qkv\": {\"split\": {%s}}",
                           i ? ", " : "", i, "****************************************", split);
  snprintf(buf + at, size - at, "%s}}", last);
  return buf;
}

START_TEST(fix_has_no_entry_limit) {
  psim_model m;
  psim_cluster c;
  gpt(&m, 2, 512, 8, 512, 16);
  cluster(&c, TOPO "dgx-a100-x1.json");
  psim_search_result r;
  char *fix = many_entries(40, "\"batch\": 2", "");
  ck_assert_msg(plan(&m, &c, fix, &r) == PSIM_OK, "%s", psim_error_message());
  for (int32_t i = 0; i < m.n_ops; i++)
    for (int32_t d = 0; ends_with(m.ops[i].name, ".qkv") && d < m.ops[i].n_dims; d++)
      ck_assert_int_eq(r.best.ops[i].degree[d],
                       m.dims[m.ops[i].dims[d].dim].role == PSIM_ROLE_BATCH ? 2 : 1);
  psim_search_result_destroy(&r);
  free(fix);
  fix = many_entries(40, "", ", \"layer.*.fc1\": {\"split\": {\"ffn\": 3}}"); /* qkv replicated */
  ck_assert_int_eq(plan(&m, &c, fix, &r), PSIM_EINPUT);
  ck_assert_msg(strstr(psim_error_message(), "ops.layer.*.fc1"), "%s", psim_error_message());
  psim_search_result_destroy(&r);
  free(fix);
  psim_error_clear();
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* Quality on a small case the grid covers: alpa >= grid - 1% in throughput,
 * every figure from the full simulator; ILP statistics are reported. */
START_TEST(alpa_vs_grid) {
  psim_model m;
  psim_cluster c;
  gpt(&m, 8, 2048, 16, 2048, 64);
  cluster(&c, TOPO "dgx-a100-x2.json");
  psim_search_result a, g;
  ck_assert_msg(plan(&m, &c, NULL, &a) == PSIM_OK, "%s", psim_error_message());
  psim_search_options o;
  psim_search_options_init(&o);
  psim_search_result_init(&g);
  ck_assert_int_eq(psim_search_grid(&m, &c, &o, &g), PSIM_OK);
  ck_assert(a.best_sim.fits);
  ck_assert_double_le(a.best_sim.iteration_time_s, g.best_sim.iteration_time_s / 0.99);
  double ilps = cJSON_GetNumberValue(cJSON_GetObjectItem(a.stats, "ilp_count"));
  double hits = cJSON_GetNumberValue(cJSON_GetObjectItem(a.stats, "memo_hit_rate"));
  ck_assert_double_gt(ilps, 0);
  ck_assert_double_gt(hits, 0.5); /* 8 identical layers share their ILPs */
  /* ILPs solved on 3 worker threads: the same plan, bit for bit. */
  psim_search_result t;
  plan_threads = 3;
  ck_assert_msg(plan(&m, &c, NULL, &t) == PSIM_OK, "%s", psim_error_message());
  plan_threads = 1;
  ck_assert_str_eq(t.description, a.description);
  ck_assert(memcmp(&t.best_sim.iteration_time_s, &a.best_sim.iteration_time_s, sizeof(double)) ==
            0);
  ck_assert(psim_strategy_equal(&t.best, &a.best));
  psim_search_result_destroy(&t);
  psim_search_result_destroy(&a);
  psim_search_result_destroy(&g);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* The logical mesh's collective fits are the simulator's collective costs (psim_coll_time)
 * at the two fitted sizes, all-to-all included: over two DGX A100 (8 ranks per node) the
 * all-gather runs one channel ring per NIC, NCCL's (collective.c), and costs about a seventh
 * of the all-to-all, so the all-to-all can no longer borrow the all-gather's fit. */
START_TEST(mesh_fits_are_the_simulators_collectives) {
  psim_cluster c;
  cluster(&c, TOPO "dgx-a100-x2.json");
  static psim_sh_mesh mesh; /* 2 x 4096 device slots per axis: not on the stack */
  static const psim_coll_kind kinds[PSIM_SH_NCOLL] = {PSIM_COLL_ALL_REDUCE, PSIM_COLL_ALL_GATHER,
                                                      PSIM_COLL_ALL_TO_ALL};
  for (int axis = 0; axis < 2; axis++) {
    ck_assert_int_eq(psim_sh_mesh_init(&c, 0, axis ? 1 : 16, axis ? 16 : 1, &mesh), PSIM_OK);
    for (int k = 0; k < PSIM_SH_NCOLL; k++)
      for (double b = 1 << 20; b <= 64 << 20; b *= 64) {
        psim_coll_desc d;
        psim_coll_desc_init(&d);
        d.kind = kinds[k];
        d.devices = mesh.devices[axis];
        d.n = 16;
        d.bytes = b;
        double t;
        ck_assert_int_eq(psim_coll_time(&c, &d, &t), PSIM_OK);
        ck_assert_double_eq_tol(psim_sh_coll(&mesh, axis, k, b), t, 1e-9 * t);
      }
  }
  psim_cluster_destroy(&c);
}
END_TEST

/* ---- issue 23: layer clustering wired in (a graph without layer indices) ---- */

/* n matmuls of hidden x hidden weights, each followed by a reshape, no
 * "layer" keys: the loader puts every op in layer 0. */
static void chain(psim_model *m, int n, int64_t hidden, int64_t batch) {
  char buf[256];
  cJSON *j = cJSON_CreateObject(), *dims = cJSON_AddObjectToObject(j, "dims");
  cJSON_AddStringToObject(j, "format", "plansim.model/1");
  cJSON_AddStringToObject(j, "name", "chain");
  cJSON *b = cJSON_AddObjectToObject(dims, "batch"), *h = cJSON_AddObjectToObject(dims, "hidden"),
        *f = cJSON_AddObjectToObject(dims, "ffn");
  cJSON_AddNumberToObject(b, "size", (double)batch);
  cJSON_AddStringToObject(b, "role", "batch");
  cJSON_AddNumberToObject(h, "size", (double)hidden);
  cJSON_AddStringToObject(h, "role", "hidden");
  cJSON_AddNumberToObject(f, "size", (double)hidden);
  cJSON_AddStringToObject(f, "role", "ffn");
  cJSON *in = cJSON_AddObjectToObject(j, "inputs"), *w = cJSON_AddObjectToObject(j, "weights"),
        *t = cJSON_AddObjectToObject(j, "tensors"), *ops = cJSON_AddArrayToObject(j, "ops");
  cJSON_AddItemToObject(cJSON_AddObjectToObject(in, "x0"), "dims",
                        cJSON_Parse("[\"batch\", \"hidden\"]"));
  for (int i = 0; i < n; i++) {
    snprintf(buf, sizeof buf, "w%d", i);
    cJSON_AddItemToObject(cJSON_AddObjectToObject(w, buf), "dims",
                          cJSON_Parse("[\"hidden\", \"ffn\"]"));
    snprintf(buf, sizeof buf, "z%d", i);
    cJSON_AddItemToObject(cJSON_AddObjectToObject(t, buf), "dims",
                          cJSON_Parse("[\"batch\", \"ffn\"]"));
    snprintf(buf, sizeof buf, "x%d", i + 1);
    cJSON_AddItemToObject(cJSON_AddObjectToObject(t, buf), "dims",
                          cJSON_Parse("[\"batch\", \"hidden\"]"));
    snprintf(buf, sizeof buf,
             "{\"name\": \"fc%d\", \"kind\": \"matmul\", \"in\": [\"x%d\", \"w%d\"], "
             "\"out\": [\"z%d\"]}",
             i, i, i, i);
    cJSON_AddItemToArray(ops, cJSON_Parse(buf));
    snprintf(buf, sizeof buf,
             "{\"name\": \"view%d\", \"kind\": \"reshape\", \"in\": [\"z%d\"], "
             "\"out\": [\"x%d\"]}",
             i, i, i + 1);
    cJSON_AddItemToArray(ops, cJSON_Parse(buf));
  }
  psim_model_init(m);
  ck_assert_msg(psim_model_from_json("chain", j, m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(j);
  ck_assert_int_eq(m->n_layers, 1);
}

/* Two DGX A100 nodes joined by 1 Gb/s NICs. */
static void slow_pair(psim_cluster *c) {
  psim_preset_opts o;
  psim_preset_opts_init(&o);
  o.preset = "dgx-a100-80g";
  o.nodes = 2;
  o.nic_bw = 1e9 / 8;
  cJSON *j = NULL;
  ck_assert_msg(psim_preset_cluster(&o, &j) == PSIM_OK, "%s", psim_error_message());
  psim_cluster_init(c);
  ck_assert_msg(psim_cluster_from_json("pair", j, c) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(j);
}

/* The fastest plan of one stage over all 16 devices: every logical mesh. */
static double best_one_stage(const psim_model *m, psim_cluster *c) {
  static const int shapes[][2] = {{16, 1}, {8, 2}, {4, 4}, {2, 8}};
  double best = INFINITY;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    char fix[160];
    snprintf(fix, sizeof fix,
             "{\"format\": \"plansim.strategy/1\", \"mesh\": {\"axes\": {\"x\": %d, \"y\": %d}}}",
             shapes[i][0], shapes[i][1]);
    psim_search_result r;
    if (plan(m, c, fix, &r) == PSIM_OK) {
      ck_assert_int_eq(r.best.n_stages, 1);
      if (r.best_sim.fits)
        best = fmin(best, r.best_sim.iteration_time_s);
    }
    psim_error_clear();
    psim_search_result_destroy(&r);
  }
  return best;
}

static void round_trip(const psim_model *m, psim_cluster *c, const psim_search_result *r) {
  cJSON *j = NULL;
  ck_assert_int_eq(psim_strategy_to_json(&r->best, m, c, &j), PSIM_OK);
  const cJSON *starts =
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItem(j, "pipeline"), "layer_starts");
  ck_assert_int_eq(cJSON_GetArraySize(starts), r->best.n_op_layers);
  psim_strategy back;
  ck_assert_msg(psim_strategy_from_json("plan.json", j, m, c, &back) == PSIM_OK, "%s",
                psim_error_message());
  ck_assert(psim_strategy_equal(&back, &r->best));
  psim_sim_result sim;
  psim_sim_result_init(&sim);
  ck_assert_int_eq(psim_simulate(m, c, &back, NULL, &sim), PSIM_OK);
  ck_assert_double_eq_tol(sim.iteration_time_s, r->best_sim.iteration_time_s,
                          1e-12 * sim.iteration_time_s);
  psim_sim_result_destroy(&sim);
  psim_strategy_destroy(&back);
  cJSON_Delete(j);
}

START_TEST(clustered_graph_pipelines) {
  psim_model m;
  psim_cluster c;
  chain(&m, 8, 8192, 64);
  slow_pair(&c);
  psim_search_result r;
  ck_assert_msg(plan(&m, &c, NULL, &r) == PSIM_OK, "%s", psim_error_message());
  ck_assert(r.best_sim.fits);
  ck_assert_int_gt(r.best.n_stages, 1);
  ck_assert_ptr_nonnull(r.best.op_layer);
  double one = best_one_stage(&m, &c);
  ck_assert_msg(r.best_sim.iteration_time_s < one, "clustered %.6f s, one stage %.6f s",
                r.best_sim.iteration_time_s, one);
  round_trip(&m, &c, &r);
  psim_search_result_destroy(&r);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* A two-stage explicit strategy with the override, edited by `edit`. */
static psim_status load_with(const psim_model *m, psim_cluster *c, const char *starts,
                             const char *stages) {
  char buf[1024];
  snprintf(buf, sizeof buf,
           "{\"format\": \"plansim.strategy/1\", \"pipeline\": {\"layer_starts\": %s, "
           "\"stages\": %s}}",
           starts, stages);
  cJSON *j = cJSON_Parse(buf);
  ck_assert_ptr_nonnull(j);
  psim_strategy s;
  psim_status st = psim_strategy_from_json("s.json", j, m, c, &s);
  if (st == PSIM_OK) {
    ck_assert_int_eq(s.n_op_layers, 2);
    for (int32_t i = 0; i < m->n_ops; i++)
      ck_assert_int_eq(s.ops[i].stage, i >= 6 ? 1 : 0);
    psim_strategy_destroy(&s);
  }
  cJSON_Delete(j);
  return st;
}

START_TEST(layer_starts_read_and_refused) {
  psim_model m;
  psim_cluster c;
  chain(&m, 4, 256, 16);
  slow_pair(&c);
  const char *two = "[{\"layers\": [0, 0], \"devices\": [0]}, {\"layers\": [1, 1], "
                    "\"devices\": [8]}]";
  ck_assert_msg(load_with(&m, &c, "[\"fc0\", \"fc3\"]", two) == PSIM_OK, "%s",
                psim_error_message());
  ck_assert_int_eq(load_with(&m, &c, "[\"fc0\", \"nope\"]", two), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "pipeline.layer_starts[1]"));
  ck_assert_int_eq(load_with(&m, &c, "[\"fc1\", \"fc3\"]", two), PSIM_EINPUT);
  ck_assert_int_eq(load_with(&m, &c, "[\"fc3\", \"fc0\"]", two), PSIM_EINPUT);
  ck_assert_int_eq(load_with(&m, &c, "[\"fc0\", \"fc2\", \"fc3\"]", two), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "layer"));
  psim_error_clear();
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* ---- issue 21: the expert dim and the query sequence as ILP choices ---- */

/* Disallows every strategy of L that splits a dim of role r on some axis of
 * an op the predicate `only` accepts (NULL: every op); returns how many. */
static int forbid_role(psim_sh_layer *L, psim_role r, bool (*only)(const psim_op *)) {
  int n = 0;
  for (int32_t g = 0; g < L->n_groups; g++) {
    const psim_op *op = &L->m->ops[L->ops[L->root[g]]];
    if (only && !only(op))
      continue;
    for (int32_t k = 0; k < L->n_strats[g]; k++)
      for (int a = 0; a < 2; a++) {
        int32_t d = psim_sh_model_dim(op, L->strats[g][k], a);
        if (d >= 0 && L->m->dims[d].role == r && L->allowed[g][k]) {
          L->allowed[g][k] = 0;
          n++;
        }
      }
  }
  return n;
}

/* The layer ILP re-solved under L->allowed: its objective. */
static double resolve(const psim_sh_layer *L) {
  psim_ilp_problem prob;
  psim_sh_layer_problem(L, &prob);
  psim_ilp_solution sol;
  psim_ilp_solution_init(&sol);
  ck_assert_msg(psim_ilp_solve(&prob, NULL, &sol) == PSIM_OK, "%s", psim_error_message());
  ck_assert(sol.optimal);
  double v = sol.objective;
  psim_ilp_solution_destroy(&sol);
  return v;
}

/* The layer-1 ILP of m on one axis of the 8 GPUs of a DGX A100 (micro-batch
 * mb): every op `pick` accepts (want of them) splits a dim of role r, and the
 * ILP without those strategies on those ops is slower. */
static void ilp_picks_role(const psim_model *m, int64_t mb, bool (*pick)(const psim_op *),
                           psim_role r, int want) {
  psim_cluster c;
  cluster(&c, TOPO "dgx-a100-x1.json");
  static psim_sh_mesh mesh;
  psim_sh_layer L;
  psim_ilp_solution sol;
  ck_assert_msg(psim_alpa_layer_ilp(m, &c, 1, 1, 8, mb, 1, &mesh, &L, &sol) == PSIM_OK, "%s",
                psim_error_message());
  ck_assert(sol.optimal);
  int seen = 0;
  for (int32_t i = 0; i < L.n_ops; i++) {
    const psim_op *op = &m->ops[L.ops[i]];
    if (!pick(op))
      continue;
    int32_t d = psim_sh_model_dim(op, psim_sh_op_strat(&L, &mesh, mb, sol.choice, i), 1);
    ck_assert_msg(d >= 0 && m->dims[d].role == r, "%s splits %s", op->name,
                  d >= 0 ? m->dims[d].name : "nothing");
    seen++;
  }
  ck_assert_int_eq(seen, want);
  ck_assert_int_gt(forbid_role(&L, r, pick), 0);
  double without = resolve(&L);
  ck_assert_msg(without > sol.objective * (1 + 1e-6), "with %.9g s, without %.9g s", sol.objective,
                without);
  psim_ilp_solution_destroy(&sol);
  psim_sh_layer_destroy(&L);
  psim_cluster_destroy(&c);
}

static bool expert_gemm(const psim_op *op) {
  return ends_with(op->name, ".fc1") || ends_with(op->name, ".fc2");
}

/* A MoE layer (8 experts, GShard's dispatch and combine): the expert GEMMs
 * split the expert dim (expert parallelism: each GPU one expert's weights,
 * the dispatch's all-to-all moving the tokens). */
START_TEST(ilp_splits_the_expert_dim) {
  psim_gen_tf_opts g;
  psim_gen_moe_opts_init(&g);
  g.layers = 2;
  g.hidden = 1024;
  g.heads = 16;
  g.seq = 1024;
  g.batch = 16;
  g.experts = 8;
  cJSON *j = NULL;
  ck_assert(psim_gen_moe(&g, &j) == PSIM_OK);
  psim_model m;
  psim_model_init(&m);
  ck_assert_msg(psim_model_from_json("moe", j, &m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(j);
  ilp_picks_role(&m, 16, expert_gemm, PSIM_ROLE_EXPERT, 2);
  psim_model_destroy(&m);
}
END_TEST

static bool attention_core(const psim_op *op) {
  return ends_with(op->name, ".scores") || ends_with(op->name, ".softmax") ||
         ends_with(op->name, ".context") || ends_with(op->name, ".attn_dropout");
}

/* Long context: one sequence of 16k tokens, 4 heads (neither the batch nor
 * the heads divide 8 ways): the attention core splits the query sequence
 * (context parallelism with the K/V gathered, the resharding edges charging
 * the all-gather). */
START_TEST(ilp_splits_the_sequence_at_long_context) {
  psim_model m;
  gpt(&m, 2, 1024, 4, 16384, 1);
  ilp_picks_role(&m, 1, attention_core, PSIM_ROLE_SEQUENCE, 4);
  psim_model_destroy(&m);
}
END_TEST

/* ---- auto's Alpa step counts its budget in CPU seconds (search/budget.h) ---- */

static double process_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* The child: auto's quick Alpa search under budget_s (0: none); writes {CPU s, wall s,
 * candidates simulated}. */
static void budget_child(int fd, double budget_s) {
  psim_model m;
  psim_cluster c;
  gpt(&m, 8, 2048, 16, 2048, 64);
  cluster(&c, TOPO "dgx-a100-x2.json");
  psim_search_options o;
  psim_search_options_init(&o);
  o.quick = true;
  o.budget_s = budget_s;
  psim_search_result r;
  psim_search_result_init(&r);
  double cpu0 = process_cpu_s();
  psim_status st = psim_search_alpa(&m, &c, &o, &r);
  double out[3] = {process_cpu_s() - cpu0, r.wall_s, st == PSIM_OK ? (double)r.evaluations : -1};
  ssize_t w = write(fd, out, sizeof out);
  _exit(w == (ssize_t)sizeof out ? 0 : 1);
}

static void run_budget_child(double budget_s, double pause_s, double out[3]) {
  int fds[2];
  ck_assert(pipe(fds) == 0);
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    budget_child(fds[1], budget_s);
  }
  close(fds[1]);
  if (pause_s > 0) {
    sleep_s(0.1); /* the child starts its search */
    ck_assert(kill(pid, SIGSTOP) == 0);
    sleep_s(pause_s);
    ck_assert(kill(pid, SIGCONT) == 0);
  }
  ck_assert(read(fds[0], out, 3 * sizeof *out) == (ssize_t)(3 * sizeof *out));
  int status = 0;
  ck_assert(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(fds[0]);
}

START_TEST(alpa_budget_counts_cpu_time) {
  double free_run[3], paused[3];
  run_budget_child(0, 0, free_run); /* no budget: its CPU time and candidates */
  double budget_s = 2 * free_run[0] + 0.5, pause_s = budget_s + 1;
  run_budget_child(budget_s, pause_s, paused);
  fprintf(stderr,
          "alpa budget: %.0f candidates in %.3f s CPU; paused: %.0f, %.3f s CPU, %.2f s wall\n",
          free_run[2], free_run[0], paused[2], paused[0], paused[1]);
  ck_assert_msg(free_run[2] > 1, "one candidate only: make the case larger");
  ck_assert_msg(paused[1] > pause_s, "the pause (%.1f s) fell outside the search (%.2f s wall)",
                pause_s, paused[1]);
  /* stopped past its budget in wall seconds, it still ran every candidate */
  ck_assert_double_eq(paused[2], free_run[2]);
}
END_TEST

/* `--search alpa --budget T` (not quick): the stage DP runs whole, the candidate simulations
 * and final tries keep to the time budget; the first candidate is always simulated. A budget
 * spent before the first simulation leaves exactly that one, and a plan no faster than the
 * unbounded search's, which simulates more. */
START_TEST(alpa_time_budget_bounds_simulations) {
  psim_model m;
  psim_cluster c;
  gpt(&m, 8, 2048, 16, 2048, 64);
  cluster(&c, TOPO "dgx-a100-x2.json");
  psim_search_result r[2];
  for (int k = 0; k < 2; k++) {
    psim_search_options o;
    psim_search_options_init(&o);
    o.budget_s = k == 0 ? 0 : 1e-9; /* no budget; one spent at once */
    psim_search_result_init(&r[k]);
    ck_assert_msg(psim_search_alpa(&m, &c, &o, &r[k]) == PSIM_OK, "%s", psim_error_message());
    ck_assert(r[k].found);
  }
  ck_assert_msg(r[0].evaluations > 1, "one candidate only: make the case larger");
  ck_assert_int_eq(r[1].evaluations, 1);
  ck_assert(strstr(r[1].description, "candidates simulated") != NULL);
  ck_assert(r[1].best_sim.iteration_time_s >= r[0].best_sim.iteration_time_s);
  for (int k = 0; k < 2; k++)
    psim_search_result_destroy(&r[k]);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("alpa");
  TCase *t = tcase_create("alpa");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, ilp_rediscovers_megatron);
  tcase_add_test(t, clustering_equals_brute_force);
  tcase_add_test(t, fix_is_kept_and_never_faster);
  tcase_add_test(t, fix_contradictions_are_errors);
  tcase_add_test(t, fix_has_no_entry_limit);
  tcase_add_test(t, alpa_vs_grid);
  tcase_add_test(t, mesh_fits_are_the_simulators_collectives);
  tcase_add_test(t, slow_stage_gets_fewer_layers);
  tcase_add_test(t, clustered_graph_pipelines);
  tcase_add_test(t, layer_starts_read_and_refused);
  tcase_add_test(t, ilp_splits_the_expert_dim);
  tcase_add_test(t, ilp_splits_the_sequence_at_long_context);
  tcase_add_test(t, alpa_budget_counts_cpu_time);
  tcase_add_test(t, alpa_time_budget_bounds_simulations);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
