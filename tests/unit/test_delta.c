/* test_delta.c - delta simulation equals full simulation, bit for bit, over
 * random walks of one-op changes (10,000 proposals over five models), and the
 * debug check catches a wrong figure. */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "models/generators.h"
#include "search/mcmc/space.h"
#include "sim/builder/build_impl.h"
#include "sim/core/alloc.h"
#include "sim/delta.h"
#include "topologies/presets.h"

#define DATA   PSIM_SOURCE_ROOT "/tests/data/"
#define MODELS PSIM_SOURCE_ROOT "/models/"
/* 5 models x 2,000 steps: the 10,000 proposals of issue 5. The sanitizer
 * build (a memory check, about 7x slower; scripts/test runs both) takes a
 * quarter of them. */
#if defined(__SANITIZE_ADDRESS__)
enum { STEPS_PER_MODEL = 500 };
#else
enum { STEPS_PER_MODEL = 2000 };
#endif

static void cluster(psim_cluster *c, int nodes) {
  psim_preset_opts po;
  psim_preset_opts_init(&po);
  po.preset = "p100-nvlink";
  po.nodes = nodes;
  cJSON *cj;
  ck_assert(psim_preset_cluster(&po, &cj) == PSIM_OK);
  psim_cluster_init(c);
  ck_assert_msg(psim_cluster_from_json("p100", cj, c) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(cj);
}

static void load_model(int which, psim_model *m) {
  psim_model_init(m);
  if (which < 3) {
    const char *files[] = {DATA "tiny-gpt.json", MODELS "mlp.json", DATA "sim-chain.json"};
    ck_assert_msg(psim_model_load(files[which], m) == PSIM_OK, "%s", psim_error_message());
    return;
  }
  psim_gen_net_opts o;
  cJSON *j = NULL;
  if (which == 3) {
    psim_gen_net_opts_init(&o, "alexnet");
    o.batch = 16;
    ck_assert(psim_gen_alexnet(&o, &j) == PSIM_OK);
  } else {
    psim_gen_net_opts_init(&o, "dlrm");
    o.batch = 64;
    o.tables = 3;
    o.rows = 1000;
    ck_assert(psim_gen_dlrm(&o, &j) == PSIM_OK);
  }
  ck_assert_msg(psim_model_from_json("gen", j, m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(j);
}

/* A Megatron-LM strategy (tp x pp x dp, micro-batch, v virtual stages, full
 * recomputation and overlapped gradient sync when `heavy`) into s. */
static void megatron(const psim_model *m, psim_cluster *c, int tp, int pp, int dp, int micro, int v,
                     bool heavy, psim_strategy *s) {
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = tp;
  mo.pp = pp;
  mo.dp = dp;
  mo.micro_batch = micro;
  mo.virtual_stages = v;
  mo.recompute = heavy ? PSIM_RECOMPUTE_FULL : PSIM_RECOMPUTE_NONE;
  mo.overlap_grad_reduce = heavy;
  ck_assert_msg(psim_strategy_megatron(m, c, &mo, s) == PSIM_OK, "%s", psim_error_message());
}

/* Start: data parallel, or for sim-chain a two-stage pipeline (2 x 2). */
static void start(int which, const psim_model *m, psim_cluster *c, psim_strategy *s) {
  psim_strategy_init(s);
  if (which == 2) {
    megatron(m, c, 1, 2, 2, 4, 1, false, s);
    return;
  }
  int n = c->n_devices;
  while (psim_strategy_data_parallel(m, c, n, 1, s) != PSIM_OK)
    n--;
}

static void same_bits(double a, double b, int which, int step) {
  ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "model %d step %d: delta %.17g, full %.17g", which,
                step, a, b);
}

/* One evaluation: the delta simulation and the full one agree bit for bit. */
static void eval_both(psim_delta *d, const psim_model *m, psim_cluster *c, const psim_strategy *s,
                      int32_t changed_op, int which, int step) {
  double t;
  bool fits;
  ck_assert_msg(psim_delta_eval(d, s, changed_op, &t, &fits) == PSIM_OK, "%s",
                psim_error_message());
  psim_sim_result full;
  ck_assert_msg(psim_simulate(m, c, s, NULL, &full) == PSIM_OK, "%s", psim_error_message());
  same_bits(t, full.iteration_time_s, which, step);
  ck_assert_int_eq(fits, full.fits);
  psim_sim_result_destroy(&full);
}

/* A walk of `steps` one-op proposals from s (a third of them rejected:
 * back to the old config), each evaluated by delta and full simulation. */
static void delta_walk(const psim_model *m, psim_cluster *c, psim_strategy *s, int which, int steps,
                       uint64_t rng) {
  psim_space sp;
  ck_assert(psim_space_init(&sp, m, s, NULL) == PSIM_OK);
  psim_delta *d;
  ck_assert(psim_delta_create(m, c, NULL, &d) == PSIM_OK);
  psim_op_config undo = {0};
  for (int step = 0; step < steps; step++) {
    int32_t o = (int32_t)psim_space_rand_below(&rng, (uint64_t)m->n_ops);
    ck_assert(psim_space_config_copy(&s->ops[o], &undo) == PSIM_OK);
    ck_assert(psim_space_sample(&sp, o, &rng, &s->ops[o]) == PSIM_OK);
    eval_both(d, m, c, s, o, which, step);
    if (psim_space_rand_below(&rng, 3) == 0) /* a rejected proposal: back to the old config */
      ck_assert(psim_space_config_copy(&undo, &s->ops[o]) == PSIM_OK);
  }
  const psim_delta_stats *st = psim_delta_get_stats(d);
  ck_assert_int_eq(st->evaluations, steps);
  ck_assert_int_eq(st->simulated + st->memo_hits, steps);
  psim_op_config_destroy(&undo);
  psim_delta_free(d);
  psim_space_destroy(&sp);
}

START_TEST(delta_equals_full) {
  int which = _i;
  psim_model m;
  psim_cluster c;
  load_model(which, &m);
  cluster(&c, 1);
  psim_strategy s;
  start(which, &m, &c, &s);
  delta_walk(&m, &c, &s, which, STEPS_PER_MODEL, 1234 + (uint64_t)which);
  psim_strategy_destroy(&s);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* Start 5: tiny-gpt, tp 2 x pp 2 interleaved (2 chunks per stage), several
 * micro-batches, full recomputation, overlapped gradient sync (the memo,
 * recompute edges, pipeline sends and buckets of the builder). */
static void start_pipeline(const psim_model *m, psim_cluster *c, psim_strategy *s) {
  psim_strategy_init(s);
  megatron(m, c, 2, 2, 1, 2, 2, true, s);
  ck_assert_int_gt(s->n_micro, 1);
  ck_assert_int_eq(s->virtual_stages, 2);
}

#define SAME_ARRAY(a, b, n, what)                                                                  \
  ck_assert_msg(memcmp((a), (b), sizeof *(a) * (size_t)(n)) == 0, "model %d step %d: %s differ",   \
                which, step, what)

/* The incremental graph is the full build's graph, array for array. */
static void same_graph(const psim_build *full, const psim_build *inc, int which, int step) {
  const psim_taskgraph *a = &full->g, *b = &inc->g;
  ck_assert_int_eq(a->n_tasks, b->n_tasks);
  ck_assert_uint_eq(a->n_edges, b->n_edges);
  ck_assert_uint_eq(a->n_res, b->n_res);
  SAME_ARRAY(a->duration_s, b->duration_s, a->n_tasks, "durations");
  for (int32_t t = 0; t < a->n_tasks; t++) /* field by field: the struct has padding */
    ck_assert_msg(a->info[t].kind == b->info[t].kind && a->info[t].pass == b->info[t].pass &&
                      a->info[t].op == b->info[t].op && a->info[t].micro == b->info[t].micro &&
                      a->info[t].device == b->info[t].device &&
                      a->info[t].shard == b->info[t].shard && a->info[t].stage == b->info[t].stage,
                  "model %d step %d: task %d info differs", which, step, t);
  SAME_ARRAY(a->res_first, b->res_first, a->n_tasks + 1, "resource offsets");
  SAME_ARRAY(a->res, b->res, a->n_res, "resources");
  SAME_ARRAY(a->edge_from, b->edge_from, a->n_edges, "edge sources");
  SAME_ARRAY(a->edge_to, b->edge_to, a->n_edges, "edge targets");
  const psim_task_issue none = {0, -1, 0}; /* no issue array: no task has a latency */
  for (int32_t t = 0; t < a->n_tasks; t++) {
    const psim_task_issue *ia = a->issue ? &a->issue[t] : &none;
    const psim_task_issue *ib = b->issue ? &b->issue[t] : &none;
    ck_assert_msg(ia->issue_s == ib->issue_s && ia->res == ib->res && ia->sync == ib->sync,
                  "model %d step %d: task %d issue differs", which, step, t);
  }
  SAME_ARRAY(full->static_mem, inc->static_mem, 3 * full->c->n_devices, "static memory");
  ck_assert_msg(memcmp(full->compute_by_origin, inc->compute_by_origin,
                       sizeof full->compute_by_origin) == 0 &&
                    memcmp(&full->hardware_flops, &inc->hardware_flops, sizeof(double)) == 0,
                "model %d step %d: compute totals differ", which, step);
  ck_assert_uint_eq(full->n_mem, inc->n_mem);
  for (size_t i = 0; i < full->n_mem; i++)
    ck_assert(full->mem[i].task == inc->mem[i].task && full->mem[i].device == inc->mem[i].device &&
              full->mem[i].bytes == inc->mem[i].bytes);
}

/* The full build with links held by the same tasks merged (sim/builder/links_merge.c) has the
 * tasks and edges of the unmerged one, and the same start and end for every task. */
static void same_schedule_merged(const psim_build *full, const psim_model *m, psim_cluster *c,
                                 const psim_strategy *s, const psim_sim_options *so, int which,
                                 int step) {
  psim_build *mb;
  ck_assert(psim_build_graph(&mb, m, c, s, so) == PSIM_OK);
  const psim_taskgraph *a = &full->g, *b = &mb->g;
  ck_assert_int_eq(a->n_tasks, b->n_tasks);
  ck_assert_uint_eq(a->n_edges, b->n_edges);
  ck_assert_uint_le(b->n_res, a->n_res);
  psim_schedule_result ra, rb;
  psim_schedule_result_init(&ra);
  psim_schedule_result_init(&rb);
  ck_assert(psim_tg_simulate(a, &ra) == PSIM_OK && psim_tg_simulate(b, &rb) == PSIM_OK);
  ck_assert(ra.makespan_s == rb.makespan_s);
  SAME_ARRAY(ra.start_s, rb.start_s, a->n_tasks, "merged starts");
  SAME_ARRAY(ra.end_s, rb.end_s, a->n_tasks, "merged ends");
  psim_schedule_result_destroy(&ra);
  psim_schedule_result_destroy(&rb);
  psim_build_free(mb);
}

/* A walk of `steps` one-op changes from s: every step builds the graph in
 * full and incrementally from the last one (the changed flags come from
 * comparing configurations, as delta.c does) and compares them; returns the
 * segments copied minus those built. */
static int64_t graph_walk(const psim_model *m, psim_cluster *c, psim_strategy *s, int which,
                          int steps, uint64_t rng) {
  psim_strategy seen;
  ck_assert(psim_strategy_copy(s, &seen) == PSIM_OK);
  psim_space sp;
  ck_assert(psim_space_init(&sp, m, s, NULL) == PSIM_OK);
  psim_sim_options so;
  psim_sim_options_init(&so);
  uint8_t *changed = psim_malloc((size_t)m->n_ops);
  memset(changed, 1, (size_t)m->n_ops);
  psim_build *prev;
  ck_assert_int_eq(psim_build_graph_reusing(&prev, m, c, s, &so, NULL, NULL, NULL), PSIM_EINPUT);
  ck_assert_ptr_null(prev);
  psim_error_clear();
  psim_taskgraph spare; /* recycled as delta.c does */
  psim_tg_init(&spare, 0);
  ck_assert_msg(psim_build_graph_reusing(&prev, m, c, s, &so, NULL, changed, NULL) == PSIM_OK, "%s",
                psim_error_message());
  psim_op_config undo = {0};
  int64_t copied = 0, built = 0;
  for (int step = 0; step < steps; step++) {
    int32_t o = (int32_t)psim_space_rand_below(&rng, (uint64_t)m->n_ops);
    ck_assert(psim_space_config_copy(&s->ops[o], &undo) == PSIM_OK);
    ck_assert(psim_space_sample(&sp, o, &rng, &s->ops[o]) == PSIM_OK);
    for (int32_t k = 0; k < m->n_ops; k++) {
      const psim_op_config *a = &s->ops[k], *b = &seen.ops[k];
      changed[k] = a->n_devices != b->n_devices || a->replicas != b->replicas ||
                   a->stage != b->stage || memcmp(a->degree, b->degree, sizeof a->degree) != 0 ||
                   memcmp(a->devices, b->devices, sizeof(int32_t) * (size_t)a->n_devices) != 0;
    }
    psim_build *full, *inc;
    so.merge_links = false; /* incremental builds never merge; the merged graph is checked below */
    psim_status sf = psim_build_graph(&full, m, c, s, &so);
    so.merge_links = true;
    psim_status si = psim_build_graph_reusing(&inc, m, c, s, &so, prev, changed, &spare);
    ck_assert_int_eq(sf, si);
    if (sf == PSIM_OK) {
      same_graph(full, inc, which, step);
      same_schedule_merged(full, m, c, s, &so, which, step);
      copied += inc->inc.segments_copied;
      built += inc->inc.segments_built;
      psim_tg_destroy(&spare);
      spare = prev->g;
      psim_tg_init(&prev->g, 0);
      psim_build_free(prev);
      prev = inc;
      for (int32_t k = 0; k < m->n_ops; k++)
        if (changed[k])
          ck_assert(psim_space_config_copy(&s->ops[k], &seen.ops[k]) == PSIM_OK);
    } else {
      psim_build_free(inc);
    }
    psim_build_free(full);
    psim_error_clear();
    if (psim_space_rand_below(&rng, 3) == 0)
      ck_assert(psim_space_config_copy(&undo, &s->ops[o]) == PSIM_OK);
  }
  psim_build_free(prev);
  psim_tg_destroy(&spare);
  psim_free(changed);
  psim_op_config_destroy(&undo);
  psim_space_destroy(&sp);
  psim_strategy_destroy(&seen);
  return copied - built;
}

START_TEST(incremental_graph_equals_full) {
  int which = _i;
  psim_model m;
  psim_cluster c;
  load_model(which == 5 ? 0 : which, &m);
  cluster(&c, which == 5 ? 1 : 2);
  psim_strategy s;
  if (which == 5)
    start_pipeline(&m, &c, &s);
  else
    start(which, &m, &c, &s);
  /* the point of it: most segments were copied */
  int64_t margin = graph_walk(&m, &c, &s, which, 300, 99 + (uint64_t)which);
  ck_assert_msg(margin > 0, "model %d: more segments built than copied", which);
  psim_strategy_destroy(&s);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* ZeRO-3 (#18): tiny-gpt, tp 2 x dp 2 with the parameters sharded over dp,
 * full recomputation (_i = 0, 2) or none (_i = 1, 3), the default prefetch
 * (_i < 2) or one unit ahead (prefetch 0). Under full recomputation a layer's
 * units run their recompute in op order before the backward: the gathers
 * once waited, in reverse op order, for kernels that waited for them (a
 * cycle: the full build failed, the delta build, which checks no cycle,
 * left tasks unrun). */
static void start_zero3(psim_model *m, psim_cluster *c, psim_strategy *s, int variant) {
  load_model(0, m);
  cluster(c, 1);
  psim_strategy_init(s);
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = 2;
  mo.dp = 2;
  mo.micro_batch = 1;
  mo.zero_stage = 3;
  mo.recompute = variant % 2 == 0 ? PSIM_RECOMPUTE_FULL : PSIM_RECOMPUTE_NONE;
  ck_assert_msg(psim_strategy_megatron(m, c, &mo, s) == PSIM_OK, "%s", psim_error_message());
  ck_assert_int_eq(s->zero_stage, 3);
  if (variant >= 2)
    s->zero_prefetch = 0;
}

/* A random walk: delta == full simulation, and the incremental graph is the
 * full build's. */
START_TEST(zero3_delta_equals_full) {
  psim_model m;
  psim_cluster c;
  psim_strategy s;
  start_zero3(&m, &c, &s, _i);
  delta_walk(&m, &c, &s, 10 + _i, 400, 77 + (uint64_t)_i);
  graph_walk(&m, &c, &s, 10 + _i, 200, 55 + (uint64_t)_i);
  psim_strategy_destroy(&s);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* The prefetch is part of a ZeRO-3 strategy's fingerprint: the same ops
 * with another prefetch are not answered from the memo (#18). */
START_TEST(zero3_prefetch_in_fingerprint) {
  psim_model m;
  psim_cluster c;
  psim_strategy s;
  start_zero3(&m, &c, &s, 1);
  psim_delta *d;
  ck_assert(psim_delta_create(&m, &c, NULL, &d) == PSIM_OK);
  uint64_t h[2][2];
  for (int k = 0; k < 2; k++) {
    s.zero_prefetch = k == 0 ? 1e9 : 0; /* everything ahead, or one unit */
    psim_delta_fingerprint(&s, h[k]);
    eval_both(d, &m, &c, &s, -1, 20, k);
  }
  ck_assert(h[0][0] != h[1][0] && h[0][1] != h[1][1]);
  ck_assert_int_eq(psim_delta_get_stats(d)->memo_hits, 0);
  psim_delta_free(d);
  psim_strategy_destroy(&s);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* mlp on one node of four P100s, data parallel. */
static void mlp_one_node(psim_model *m, psim_cluster *c, psim_strategy *s) {
  load_model(1, m);
  cluster(c, 1);
  start(1, m, c, s);
}

/* Parameter servers with backup workers (issue 8): the full simulation
 * rebuilds the graph with the k earliest pushes and ends the iteration at the
 * last pull; the delta simulation runs the same pipeline (#17 item 3: it
 * once left both out and differed). mlp on 4 devices, servers 0 and 2, the
 * 3 earliest pushes of 4 count; a random walk of one-op changes. */
START_TEST(delta_equals_full_ps_backup) {
  psim_model m;
  psim_cluster c;
  psim_strategy s;
  mlp_one_node(&m, &c, &s);
  ck_assert_int_ge(c.n_devices, 4);
  s.sync = PSIM_SYNC_PS;
  s.ps.n_servers = 2;
  s.ps.servers = psim_malloc(sizeof(int32_t) * 2);
  s.ps.servers[0] = 0;
  s.ps.servers[1] = 2;
  s.ps.mode = PSIM_PS_BACKUP;
  s.ps.backup_k = 3;
  s.ps.replicas = 1;
  psim_space sp;
  ck_assert(psim_space_init(&sp, &m, &s, NULL) == PSIM_OK);
  psim_delta *d;
  ck_assert(psim_delta_create(&m, &c, NULL, &d) == PSIM_OK);
  uint64_t rng = 4321;
  for (int step = 0; step < 60; step++) {
    eval_both(d, &m, &c, &s, -1, 1, step);
    int32_t o = (int32_t)psim_space_rand_below(&rng, (uint64_t)m.n_ops);
    ck_assert(psim_space_sample(&sp, o, &rng, &s.ops[o]) == PSIM_OK);
  }
  psim_delta_free(d);
  psim_space_destroy(&sp);
  psim_strategy_destroy(&s);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* verify_every = 1 runs the full simulation each time and passes. */
START_TEST(verify_option_checks) {
  psim_model m;
  psim_cluster c;
  psim_strategy s;
  mlp_one_node(&m, &c, &s);
  psim_delta_options o;
  psim_delta_options_init(&o);
  o.verify_every = 1;
  psim_delta *d;
  ck_assert(psim_delta_create(&m, &c, &o, &d) == PSIM_OK);
  double t;
  bool fits;
  for (int i = 0; i < 3; i++)
    ck_assert(psim_delta_eval(d, &s, -1, &t, &fits) == PSIM_OK);
  ck_assert_int_eq(psim_delta_get_stats(d)->verified, 3);
  ck_assert_int_eq(psim_delta_get_stats(d)->memo_hits, 2);
  /* A wrong answer is caught: the devices shrink behind the memo's back, so
   * the remembered "fits" is stale and the verifying full simulation differs. */
  for (int32_t i = 0; i < c.n_types; i++)
    c.types[i].mem_bytes = 1e6;
  ck_assert_int_eq(psim_delta_eval(d, &s, -1, &t, &fits), PSIM_EFAILED);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "differs from the full simulation"));
  psim_error_clear();
  /* different strategies have different fingerprints */
  uint64_t a[2], b[2];
  psim_delta_fingerprint(&s, a);
  s.ops[0].degree[0] = s.ops[0].degree[0] == 1 ? 2 : 1;
  psim_delta_fingerprint(&s, b);
  ck_assert(a[0] != b[0] && a[1] != b[1]);
  psim_delta_free(d);
  psim_strategy_destroy(&s);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("delta");
  TCase *tc = tcase_create("delta");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, delta_equals_full, 0, 5);
  tcase_add_loop_test(tc, incremental_graph_equals_full, 0, 6);
  tcase_add_test(tc, verify_option_checks);
  tcase_add_test(tc, delta_equals_full_ps_backup);
  tcase_add_loop_test(tc, zero3_delta_equals_full, 0, 4);
  tcase_add_test(tc, zero3_prefetch_in_fingerprint);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
