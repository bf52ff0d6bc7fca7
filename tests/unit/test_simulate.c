/* test_simulate.c - the simulator against closed forms: a single device is
 * the sum of its tasks; GPipe's bubble is (p-1)/(m+p-1) of equal stages;
 * 1F1B keeps p - i micro-batches of activations on stage i. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "sim/simulate.h"

#define DATA PSIM_SOURCE_ROOT "/tests/data/"

typedef struct fixture {
  psim_model m;
  psim_cluster c;
} fixture;

static void load(fixture *f, const char *model, const char *cluster) {
  psim_model_init(&f->m);
  psim_cluster_init(&f->c);
  ck_assert_msg(psim_model_load(model, &f->m) == PSIM_OK, "%s", psim_error_message());
  ck_assert_msg(psim_cluster_load(cluster, &f->c) == PSIM_OK, "%s", psim_error_message());
}

static void unload(fixture *f) {
  psim_cluster_destroy(&f->c);
  psim_model_destroy(&f->m);
}

static void run(fixture *f, const psim_megatron_opts *mo, bool fold, psim_sim_result *r) {
  psim_strategy s;
  psim_strategy_init(&s);
  ck_assert_msg(psim_strategy_megatron(&f->m, &f->c, mo, &s) == PSIM_OK, "%s",
                psim_error_message());
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.keep_graph = true;
  o.fold = fold;
  ck_assert_msg(psim_simulate(&f->m, &f->c, &s, &o, r) == PSIM_OK, "%s", psim_error_message());
  psim_strategy_destroy(&s);
}

/* Sum of the durations of tasks of a pass on a device (micro-batch mu, or all when -1). */
static double pass_time(const psim_sim_result *r, int32_t dev, int pass, int32_t mu) {
  double t = 0;
  const psim_taskgraph *g = r->graph;
  for (int32_t i = 0; i < g->n_tasks; i++)
    if (g->info[i].device == dev && g->info[i].pass == pass &&
        g->info[i].kind == PSIM_TASK_COMPUTE && (mu < 0 || g->info[i].micro == mu))
      t += g->duration_s[i];
  return t;
}

START_TEST(single_device_is_sum_of_tasks) {
  fixture f;
  load(&f, DATA "sim-chain.json", DATA "sim-fast4.json");
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = mo.pp = mo.dp = 1;
  mo.micro_batch = 16;
  psim_sim_result r;
  run(&f, &mo, true, &r);
  double sum = 0;
  for (int32_t i = 0; i < r.graph->n_tasks; i++)
    sum += r.graph->duration_s[i];
  ck_assert_double_gt(sum, 0);
  ck_assert_double_eq_tol(r.iteration_time_s, sum, 1e-12 * sum);
  psim_sim_result_destroy(&r);
  unload(&f);
}
END_TEST

static void pipeline(fixture *f, psim_schedule sched, psim_sim_result *r) {
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = 1;
  mo.pp = 4;
  mo.dp = 1;
  mo.micro_batch = 8; /* batch 64 -> m = 8 micro-batches */
  mo.schedule = sched;
  run(f, &mo, true, r);
}

START_TEST(gpipe_bubble_fraction) {
  fixture f;
  load(&f, DATA "sim-chain.json", DATA "sim-fast4.json");
  psim_sim_result r;
  pipeline(&f, PSIM_SCHED_GPIPE, &r);
  double p = 4, m = 8;
  /* stage 0's first matmul has no input gradient to compute (its input is
   * data), so its backward is shorter: the critical path is
   * (m + p - 1) tf + (m + p - 2) tb + tb0 */
  double tf = pass_time(&r, 1, PSIM_TP_FWD, 0), tb = pass_time(&r, 1, PSIM_TP_BWD, 0);
  double tb0 = pass_time(&r, 0, PSIM_TP_BWD, 0);
  double t_opt = pass_time(&r, 0, PSIM_TP_UPDATE, -1);
  ck_assert_double_lt(tb0, tb);
  double expect = (m + p - 1) * tf + (m + p - 2) * tb + tb0;
  ck_assert_double_eq_tol(r.iteration_time_s - t_opt, expect, 1e-9 * expect);
  /* the bubble of a middle stage: (p - 1) / (m + p - 1) up to tb0 != tb */
  double busy = m * (tf + tb);
  double bubble = 1 - busy / (r.iteration_time_s - t_opt);
  ck_assert_double_eq_tol(bubble, (p - 1) / (m + p - 1), 0.01 * (p - 1) / (m + p - 1));
  ck_assert_double_gt(r.bubble_s, 0);
  psim_sim_result_destroy(&r);
  unload(&f);
}
END_TEST

START_TEST(one_f_one_b_in_flight_activations) {
  fixture f;
  load(&f, DATA "sim-chain.json", DATA "sim-fast4.json");
  psim_sim_result r;
  pipeline(&f, PSIM_SCHED_1F1B, &r);
  double last = r.activation_peak[3];
  ck_assert_double_gt(last, 0);
  for (int i = 0; i < 4; i++)
    ck_assert_double_eq_tol(r.activation_peak[i] / last, 4.0 - i, 1e-9);
  psim_sim_result_destroy(&r);
  pipeline(&f, PSIM_SCHED_GPIPE, &r);
  for (int i = 0; i < 4; i++) /* GPipe keeps every micro-batch */
    ck_assert_double_eq_tol(r.activation_peak[i] / last, 8.0, 1e-9);
  psim_sim_result_destroy(&r);
  unload(&f);
}
END_TEST

START_TEST(one_f_one_b_same_time_as_gpipe_when_free_comm) {
  /* with equal stages and free communication both schedules take
   * (m + p - 1)(tf + tb); 1F1B only saves memory */
  fixture f;
  load(&f, DATA "sim-chain.json", DATA "sim-fast4.json");
  psim_sim_result a, b;
  pipeline(&f, PSIM_SCHED_GPIPE, &a);
  pipeline(&f, PSIM_SCHED_1F1B, &b);
  ck_assert_double_eq_tol(a.iteration_time_s, b.iteration_time_s, 1e-9 * a.iteration_time_s);
  psim_sim_result_destroy(&a);
  psim_sim_result_destroy(&b);
  unload(&f);
}
END_TEST

/* Folding simulates one device per stage; on clusters small enough to run
 * both, it must agree with simulating every device. */
static void fold_case(const char *cluster, int32_t tp, int32_t pp, int32_t dp, bool sp) {
  fixture f;
  load(&f, DATA "tiny-gpt.json", cluster);
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = tp;
  mo.pp = pp;
  mo.dp = dp;
  mo.micro_batch = 1;
  mo.sequence_parallel = sp;
  psim_sim_result a, b;
  run(&f, &mo, true, &a);
  run(&f, &mo, false, &b);
  ck_assert(a.folded);
  ck_assert(!b.folded);
  ck_assert_int_lt(a.simulated_devices, b.simulated_devices);
  ck_assert_msg(fabs(a.iteration_time_s - b.iteration_time_s) <= 0.01 * b.iteration_time_s,
                "folded %.9f s, unfolded %.9f s (tp %d pp %d dp %d)", a.iteration_time_s,
                b.iteration_time_s, tp, pp, dp);
  ck_assert_double_eq_tol(a.peak_memory_bytes, b.peak_memory_bytes, 1e-6 * b.peak_memory_bytes);
  psim_sim_result_destroy(&a);
  psim_sim_result_destroy(&b);
  unload(&f);
}

START_TEST(folded_equals_unfolded) {
  fold_case(DATA "coll-nvswitch8.json", 2, 2, 2, false);
  fold_case(DATA "coll-nvswitch8.json", 4, 1, 2, true);
  fold_case(DATA "coll-nvswitch8.json", 1, 4, 2, false);
  fold_case(DATA "coll-2node.json", 2, 2, 2, false);
  fold_case(DATA "coll-2node.json", 4, 1, 2, false);
}
END_TEST

int main(void) {
  Suite *s = suite_create("simulate");
  TCase *tc = tcase_create("closed_forms");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, single_device_is_sum_of_tasks);
  tcase_add_test(tc, gpipe_bubble_fraction);
  tcase_add_test(tc, one_f_one_b_in_flight_activations);
  tcase_add_test(tc, one_f_one_b_same_time_as_gpipe_when_free_comm);
  tcase_add_test(tc, folded_equals_unfolded);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
