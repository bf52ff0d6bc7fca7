/* test_schedules.c - torchtitan's pipeline schedules (sim/builder/schedules.c) against what
 * their orders imply on equal stages with free communication (tests/data/sim-fast4.json):
 * looped BFS with one chunk is GPipe; the zero-bubble schedules split each backward into an
 * input- and a weight-gradient kernel without changing its total, and fill the 1F1B bubble
 * with the weight gradients (Qi et al. 2024, arXiv 2401.10241: ZB-H1 is faster than 1F1B at
 * 1F1B's peak activation memory); ZBV places chunk j of rank i on stage i and 2p - 1 - i. */
#include <check.h>
#include <math.h>

#include "sim/simulate.h"

#define DATA PSIM_SOURCE_ROOT "/tests/data/"

typedef struct fixture {
  psim_model m;
  psim_cluster c;
} fixture;

static void load(fixture *f) {
  psim_model_init(&f->m);
  psim_cluster_init(&f->c);
  ck_assert_msg(psim_model_load(DATA "sim-chain.json", &f->m) == PSIM_OK, "%s",
                psim_error_message());
  ck_assert_msg(psim_cluster_load(DATA "sim-fast4.json", &f->c) == PSIM_OK, "%s",
                psim_error_message());
}

static void unload(fixture *f) {
  psim_cluster_destroy(&f->c);
  psim_model_destroy(&f->m);
}

/* pp stages, m = 8 micro-batches of 8 samples, v chunks per stage, unfolded, graph kept. */
static void run_pp(fixture *f, psim_schedule sched, int32_t pp, int32_t v, psim_strategy *s,
                   psim_sim_result *r) {
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = mo.dp = 1;
  mo.pp = pp;
  mo.micro_batch = 8;
  mo.virtual_stages = v;
  mo.schedule = sched;
  psim_strategy_init(s);
  ck_assert_msg(psim_strategy_megatron(&f->m, &f->c, &mo, s) == PSIM_OK, "%s",
                psim_error_message());
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.keep_graph = true;
  o.fold = false;
  ck_assert_msg(psim_simulate(&f->m, &f->c, s, &o, r) == PSIM_OK, "%s", psim_error_message());
}

static void run(fixture *f, psim_schedule sched, int32_t v, psim_strategy *s, psim_sim_result *r) {
  run_pp(f, sched, 4, v, s, r);
}

/* Frees two runs and the fixture. */
static void release(fixture *f, psim_strategy *sa, psim_strategy *sb, psim_sim_result *a,
                    psim_sim_result *b) {
  psim_sim_result_destroy(a);
  psim_sim_result_destroy(b);
  psim_strategy_destroy(sa);
  psim_strategy_destroy(sb);
  unload(f);
}

/* Compute seconds and kernels of a pass on device dev. */
static double pass_time(const psim_sim_result *r, int32_t dev, int pass, int32_t *n) {
  double t = 0;
  *n = 0;
  const psim_taskgraph *g = r->graph;
  for (int32_t i = 0; i < g->n_tasks; i++)
    if (g->info[i].device == dev && g->info[i].pass == pass &&
        g->info[i].kind == PSIM_TASK_COMPUTE) {
      t += g->duration_s[i];
      (*n)++;
    }
  return t;
}

START_TEST(looped_bfs_with_one_chunk_is_gpipe) {
  fixture f;
  load(&f);
  psim_strategy sa, sb;
  psim_sim_result a, b;
  run(&f, PSIM_SCHED_GPIPE, 1, &sa, &a);
  run(&f, PSIM_SCHED_LOOPED_BFS, 1, &sb, &b);
  ck_assert_double_eq_tol(a.iteration_time_s, b.iteration_time_s, 1e-9 * a.iteration_time_s);
  for (int i = 0; i < 4; i++) /* every micro-batch's activations held, as GPipe's */
    ck_assert_double_eq_tol(b.activation_peak[i], a.activation_peak[i],
                            1e-9 * a.activation_peak[i]);
  release(&f, &sa, &sb, &a, &b);
}
END_TEST

START_TEST(zero_bubble_splits_and_fills_the_bubble) {
  fixture f;
  load(&f);
  psim_strategy sa, sb;
  psim_sim_result a, b;
  run(&f, PSIM_SCHED_1F1B, 1, &sa, &a);
  run(&f, PSIM_SCHED_INTERLEAVED_ZB, 1, &sb, &b);
  for (int32_t d = 0; d < 4; d++) {
    int32_t na, nb, nf;
    double ta = pass_time(&a, d, PSIM_TP_BWD, &na), tb = pass_time(&b, d, PSIM_TP_BWD, &nb);
    ck_assert_double_eq_tol(ta, tb, 1e-9 * ta); /* the backward's total is kept */
    pass_time(&b, d, PSIM_TP_FWD, &nf);
    ck_assert_int_gt(nb, na); /* ... in more kernels: the weight gradients' */
    ck_assert_double_gt(b.activation_peak[d], 0);
    /* ZB-H1's memory: at most 1F1B's peak (stage 0's p micro-batches) on every stage */
    ck_assert_double_le(b.activation_peak[d], a.activation_peak[0] * (1 + 1e-9));
  }
  int32_t n;
  double busy = pass_time(&b, 1, PSIM_TP_FWD, &n) + pass_time(&b, 1, PSIM_TP_BWD, &n);
  ck_assert_double_lt(b.iteration_time_s, a.iteration_time_s);
  ck_assert_double_ge(b.iteration_time_s, busy);
  /* and more of the bubble is gone than the weight gradients of p - 1 micro-batches could
   * fill only if the order were wrong: ZB-H1's bubble (p - 1)(F + B - W) against 1F1B's
   * (p - 1)(F + B + W), so at least 1F1B's bubble less 2 (p - 1) W */
  double w = (pass_time(&a, 1, PSIM_TP_BWD, &n) / 8) / 2; /* W: half a matmul backward */
  ck_assert_double_le(b.iteration_time_s, a.iteration_time_s - 2 * 3 * w * 0.5);
  release(&f, &sa, &sb, &a, &b);
}
END_TEST

START_TEST(zbv_places_chunks_in_a_v) {
  fixture f;
  load(&f);
  psim_strategy sa, sb;
  psim_sim_result a, b;
  run_pp(&f, PSIM_SCHED_INTERLEAVED, 2, 2, &sa, &a); /* 4 chunks, a layer each */
  run_pp(&f, PSIM_SCHED_ZBV, 2, 2, &sb, &b);
  for (int32_t c = 0; c < 4; c++) {
    int32_t rank = c < 2 ? c : 3 - c;
    ck_assert_int_eq(sb.stages[c].devices[0], rank);
    ck_assert_int_eq(sa.stages[c].devices[0], c % 2);
  }
  ck_assert_double_lt(b.iteration_time_s, a.iteration_time_s);
  release(&f, &sa, &sb, &a, &b);
}
END_TEST

/* DualPipeV: the V of ZBV, every backward's total kept (full ones and split ones), and on
 * equal stages no slower than interleaved 1F1B (its pairs run one after the other). */
START_TEST(dualpipev_keeps_the_work_in_a_v) {
  fixture f;
  load(&f);
  psim_strategy sa, sb;
  psim_sim_result a, b;
  run_pp(&f, PSIM_SCHED_INTERLEAVED, 2, 2, &sa, &a);
  run_pp(&f, PSIM_SCHED_DUALPIPEV, 2, 2, &sb, &b);
  for (int32_t c = 0; c < 4; c++)
    ck_assert_int_eq(sb.stages[c].devices[0], c < 2 ? c : 3 - c);
  for (int32_t d = 0; d < 2; d++) {
    int32_t na, nb;
    double ta = pass_time(&a, d, PSIM_TP_BWD, &na), tb = pass_time(&b, d, PSIM_TP_BWD, &nb);
    ck_assert_int_gt(nb, na);
    /* rank d holds chunks d and 3 - d under the V, d and d + 2 in the loop: on a chain of
     * equal layers the same work */
    ck_assert_double_eq_tol(ta, tb, 1e-6 * ta);
  }
  ck_assert_double_le(b.iteration_time_s, a.iteration_time_s * (1 + 1e-9));
  release(&f, &sa, &sb, &a, &b);
}
END_TEST

START_TEST(schedule_rules) {
  ck_assert_ptr_null(psim_schedule_chunks_rule(PSIM_SCHED_ZBV, 2));
  ck_assert_ptr_nonnull(psim_schedule_chunks_rule(PSIM_SCHED_ZBV, 3));
  ck_assert_ptr_nonnull(psim_schedule_chunks_rule(PSIM_SCHED_1F1B, 2));
  ck_assert_ptr_nonnull(psim_schedule_chunks_rule(PSIM_SCHED_INTERLEAVED, 1));
  ck_assert_ptr_null(psim_schedule_chunks_rule(PSIM_SCHED_LOOPED_BFS, 1));
  /* torchtitan: rounds = max(1, m / pp) must divide m; 10 on 4 stages: 2 rounds of 5 */
  ck_assert_ptr_null(psim_schedule_micro_rule(PSIM_SCHED_INTERLEAVED_ZB, 10, 4));
  ck_assert_ptr_nonnull(psim_schedule_micro_rule(PSIM_SCHED_INTERLEAVED_ZB, 9, 4));
  ck_assert_ptr_nonnull(psim_schedule_micro_rule(PSIM_SCHED_INTERLEAVED, 10, 4));
  ck_assert_ptr_null(psim_schedule_micro_rule(PSIM_SCHED_DUALPIPEV, 8, 4)); /* m >= 2 pp */
  ck_assert_ptr_nonnull(psim_schedule_micro_rule(PSIM_SCHED_DUALPIPEV, 7, 4));
  for (int32_t c = 0; c < 8; c++) /* rank_chunk inverts chunk_rank */
    for (int s = PSIM_SCHED_INTERLEAVED; s <= PSIM_SCHED_DUALPIPEV; s++) {
      int32_t r = psim_schedule_chunk_rank((psim_schedule)s, 4, c);
      ck_assert_int_eq(psim_schedule_rank_chunk((psim_schedule)s, 4, r, c / 4), c);
    }
}
END_TEST

int main(void) {
  Suite *s = suite_create("schedules");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, looped_bfs_with_one_chunk_is_gpipe);
  tcase_add_test(tc, zero_bubble_splits_and_fills_the_bubble);
  tcase_add_test(tc, zbv_places_chunks_in_a_v);
  tcase_add_test(tc, dualpipev_keeps_the_work_in_a_v);
  tcase_add_test(tc, schedule_rules);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
