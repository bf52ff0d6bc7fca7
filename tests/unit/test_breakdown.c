/* test_breakdown.c - the time breakdown (issue #18, defect 5; docs/simulator.md "Time
 * breakdown"): on hand-built schedules each idle interval goes to what the next kernel waited
 * on (closed forms); on every simulate case of the prediction corpus the parts sum to the
 * iteration time, and without pipeline parallelism there is no pipeline bubble (a
 * parameter-server run used to report its waits as bubble). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/simulate.h"
#include "sim/simulate_impl.h"

#define ROOT PSIM_SOURCE_ROOT "/"

/* ---- hand-built schedules ------------------------------------------------------------- */

typedef struct hand {
  psim_taskgraph g;
  psim_schedule_result r;
  psim_strategy s;
  psim_sim_result out;
} hand;

static void hand_init(hand *h, int32_t n_devices, int32_t n_stages, psim_grad_sync sync) {
  psim_tg_init(&h->g, 3 * n_devices); /* compute, comm, host per device */
  psim_schedule_result_init(&h->r);
  psim_strategy_init(&h->s);
  h->s.n_stages = n_stages;
  h->s.sync = sync;
  psim_sim_result_init(&h->out);
}

static int32_t task(hand *h, double d, int32_t res, psim_task_kind kind, psim_task_pass pass,
                    int32_t device, int32_t stage, int32_t after) {
  psim_task_info inf = {(uint8_t)kind, (uint8_t)pass, (int16_t)stage, -1, -1, device, -1};
  int32_t id;
  ck_assert_int_eq(psim_tg_add_task(&h->g, d, &res, 1, &inf, &id), PSIM_OK);
  if (after >= 0)
    ck_assert_int_eq(psim_tg_add_edge(&h->g, after, id), PSIM_OK);
  return id;
}

/* Simulates and breaks device d's time down; the parts must sum to the makespan. */
static void hand_run(hand *h, int32_t d, int32_t n_devices) {
  ck_assert_int_eq(psim_tg_finalize(&h->g), PSIM_OK);
  ck_assert_int_eq(psim_tg_simulate(&h->g, &h->r), PSIM_OK);
  ck_assert_int_eq(psim_sim_breakdown(&h->g, &h->r, d, n_devices, h->r.makespan_s, &h->s, &h->out),
                   PSIM_OK);
  const psim_sim_result *o = &h->out;
  double sum = o->compute_s + o->bubble_s;
  for (int k = 0; k < PSIM_COMM_KIND_COUNT; k++)
    sum += o->exposed_comm_s[k];
  for (int k = 0; k < PSIM_WAIT_KIND_COUNT; k++)
    sum += o->wait_s[k];
  ck_assert_double_eq_tol(sum, h->r.makespan_s, 1e-12);
}

static void hand_destroy(hand *h) {
  psim_sim_result_destroy(&h->out);
  psim_strategy_destroy(&h->s);
  psim_schedule_result_destroy(&h->r);
  psim_tg_destroy(&h->g);
}

/* d computes 1 s, all-reduces 2 s (data parallel), computes 1 s: 2 s of exposed DP comm; a
 * second collective queued behind a tensor-parallel one on the comm stream waits for it: its
 * wait is the TP collective's, not the host's. */
START_TEST(exposed_collectives_by_kind) {
  hand h;
  hand_init(&h, 1, 1, PSIM_SYNC_ALLREDUCE);
  int32_t c0 = psim_res_compute(0), m0 = psim_res_comm(0);
  int32_t a = task(&h, 1, c0, PSIM_TASK_COMPUTE, PSIM_TP_BWD, 0, 0, -1);
  int32_t tp = task(&h, 3, m0, PSIM_TASK_COLLECTIVE, PSIM_TP_COMM_TP, 0, 0, -1); /* [0, 3) */
  int32_t dp = task(&h, 2, m0, PSIM_TASK_COLLECTIVE, PSIM_TP_COMM_DP, 0, 0, a);  /* [3, 5) */
  task(&h, 1, c0, PSIM_TASK_COMPUTE, PSIM_TP_UPDATE, 0, 0, dp);                  /* [5, 6) */
  (void)tp;
  hand_run(&h, 0, 1);
  ck_assert_double_eq_tol(h.out.compute_s, 2, 1e-12);
  ck_assert_double_eq_tol(h.out.exposed_comm_s[0], 2, 1e-12); /* [1, 3): the queue */
  ck_assert_double_eq_tol(h.out.exposed_comm_s[2], 2, 1e-12);
  ck_assert_double_eq(h.out.bubble_s, 0);
  hand_destroy(&h);
}
END_TEST

/* Two stages: device 1 waits for device 0's forward (1 s, bubble) and the activation's transfer
 * (0.5 s, pipeline comm); device 0 then waits for device 1's backward the same way. */
START_TEST(pipeline_bubble_is_other_stages_compute) {
  hand h;
  hand_init(&h, 2, 2, PSIM_SYNC_ALLREDUCE);
  int32_t f0 = task(&h, 1, psim_res_compute(0), PSIM_TASK_COMPUTE, PSIM_TP_FWD, 0, 0, -1);
  int32_t t0 = task(&h, 0.5, psim_res_comm(0), PSIM_TASK_TRANSFER, PSIM_TP_COMM_PP, 0, 0, f0);
  int32_t f1 = task(&h, 2, psim_res_compute(1), PSIM_TASK_COMPUTE, PSIM_TP_FWD, 1, 1, t0);
  int32_t b1 = task(&h, 3, psim_res_compute(1), PSIM_TASK_COMPUTE, PSIM_TP_BWD, 1, 1, f1);
  int32_t t1 = task(&h, 0.25, psim_res_comm(1), PSIM_TASK_TRANSFER, PSIM_TP_COMM_PP, 1, 1, b1);
  task(&h, 2, psim_res_compute(0), PSIM_TASK_COMPUTE, PSIM_TP_BWD, 0, 0, t1);
  hand_run(&h, 1, 2); /* [0, 1) stage 0, [1, 1.5) transfer, then computes 5 s, ends at 6.5 */
  ck_assert_double_eq_tol(h.out.bubble_s, 1 + 2, 1e-12); /* and the tail: stage 0's backward */
  ck_assert_double_eq_tol(h.out.exposed_comm_s[1], 0.5 + 0.25, 1e-12);
  ck_assert_double_eq_tol(h.out.compute_s, 5, 1e-12);
  psim_sim_result_init(&h.out);
  ck_assert_int_eq(psim_sim_breakdown(&h.g, &h.r, 0, 2, h.r.makespan_s, &h.s, &h.out), PSIM_OK);
  ck_assert_double_eq_tol(h.out.bubble_s, 5, 1e-12); /* device 1's forward and backward */
  ck_assert_double_eq_tol(h.out.exposed_comm_s[1], 0.75, 1e-12);
  h.s.n_stages = 1; /* the same graph read as one stage: the other device is a straggler */
  psim_sim_result_init(&h.out);
  ck_assert_int_eq(psim_sim_breakdown(&h.g, &h.r, 0, 2, h.r.makespan_s, &h.s, &h.out), PSIM_OK);
  ck_assert_double_eq(h.out.bubble_s, 0);
  ck_assert_double_eq_tol(h.out.wait_s[PSIM_WAIT_STRAGGLER], 5, 1e-12);
  hand_destroy(&h);
}
END_TEST

/* A kernel issued late by its host (0.75 s of issue latency behind a 0.25 s kernel): host wait. */
START_TEST(late_issue_is_host) {
  hand h;
  hand_init(&h, 1, 1, PSIM_SYNC_ALLREDUCE);
  int32_t host = 2; /* a resource of its own */
  int32_t a = task(&h, 0.25, psim_res_compute(0), PSIM_TASK_COMPUTE, PSIM_TP_FWD, 0, 0, -1);
  int32_t b = task(&h, 1, psim_res_compute(0), PSIM_TASK_COMPUTE, PSIM_TP_FWD, 0, 0, a);
  ck_assert_int_eq(psim_tg_set_issue(&h.g, a, host, 0, false), PSIM_OK);
  ck_assert_int_eq(psim_tg_set_issue(&h.g, b, host, 1, false), PSIM_OK);
  hand_run(&h, 0, 1); /* b issued at 1, starts at 1 */
  ck_assert_double_eq_tol(h.out.compute_s, 1.25, 1e-12);
  ck_assert_double_eq_tol(h.out.wait_s[PSIM_WAIT_HOST], 0.75, 1e-12);
  hand_destroy(&h);
}
END_TEST

/* Parameter servers: the worker's pull waits for the server's update after every push; all of
 * it is parameter-server time, none of it bubble. */
START_TEST(parameter_server_waits) {
  hand h;
  hand_init(&h, 2, 1, PSIM_SYNC_PS);
  int32_t w = task(&h, 1, psim_res_compute(0), PSIM_TASK_COMPUTE, PSIM_TP_BWD, 0, 0, -1);
  int32_t push = task(&h, 0.5, psim_res_comm(0), PSIM_TASK_TRANSFER, PSIM_TP_COMM_DP, 0, -1, w);
  psim_task_info upd = {PSIM_TASK_COMPUTE, PSIM_TP_UPDATE, -1, -1, -1, 1, 0}; /* shard 0 */
  int32_t u, res = psim_res_compute(1);
  ck_assert_int_eq(psim_tg_add_task(&h.g, 2, &res, 1, &upd, &u), PSIM_OK);
  ck_assert_int_eq(psim_tg_add_edge(&h.g, push, u), PSIM_OK);
  int32_t pull = task(&h, 0.5, psim_res_comm(1), PSIM_TASK_TRANSFER, PSIM_TP_COMM_DP, 1, -1, u);
  task(&h, 1, psim_res_compute(0), PSIM_TASK_COMPUTE, PSIM_TP_FWD, 0, 0, pull);
  hand_run(&h, 0, 2);
  ck_assert_double_eq_tol(h.out.wait_s[PSIM_WAIT_PARAMETER_SERVER], 3, 1e-12);
  ck_assert_double_eq(h.out.bubble_s, 0);
  ck_assert_double_eq(h.out.exposed_comm_s[2], 0);
  hand_destroy(&h);
}
END_TEST

/* ---- the corpus ----------------------------------------------------------------------- */

/* Reads "NAME simulate MODEL CLUSTER STRATEGY ..." lines of tests/corpus/cases. */
static bool next_case(FILE *f, char *name, char files[3][256], bool *expanded) {
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    char cmd[64];
    if (line[0] == '#' ||
        sscanf(line, "%127s %63s %255s %255s %255s", name, cmd, files[0], files[1], files[2]) !=
            5 ||
        strcmp(cmd, "simulate") != 0)
      continue;
#ifdef __SANITIZE_ADDRESS__
    if (strstr(line, "#asan-skip")) /* as tests/corpus/run --sanitized */
      continue;
#endif
    *expanded = strstr(line, "--fidelity expanded") != NULL;
    return true;
  }
  return false;
}

static void check_case(const char *name, char files[3][256], bool expanded) {
  char path[3][1024];
  for (int i = 0; i < 3; i++)
    snprintf(path[i], sizeof path[i], ROOT "%s", files[i]);
  psim_model m;
  psim_cluster c;
  psim_strategy s;
  psim_model_init(&m);
  psim_cluster_init(&c);
  psim_strategy_init(&s);
  ck_assert_msg(psim_model_load(path[0], &m) == PSIM_OK, "%s", psim_error_message());
  ck_assert_msg(psim_cluster_load(path[1], &c) == PSIM_OK, "%s", psim_error_message());
  ck_assert_msg(psim_strategy_load(path[2], &m, &c, &s) == PSIM_OK, "%s", psim_error_message());
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.fidelity = expanded ? PSIM_FIDELITY_EXPANDED : PSIM_FIDELITY_AGGREGATE;
  psim_sim_result r;
  ck_assert_msg(psim_simulate(&m, &c, &s, &o, &r) == PSIM_OK, "%s", psim_error_message());
  double sum = r.compute_s + r.bubble_s;
  for (int k = 0; k < PSIM_COMM_KIND_COUNT; k++)
    sum += r.exposed_comm_s[k];
  for (int k = 0; k < PSIM_WAIT_KIND_COUNT; k++)
    sum += r.wait_s[k];
  ck_assert_msg(fabs(sum - r.iteration_time_s) <= 1e-9 * r.iteration_time_s,
                "%s: parts sum to %.12g s, iteration %.12g s", name, sum, r.iteration_time_s);
  if (s.n_stages <= 1)
    ck_assert_msg(r.bubble_s == 0, "%s: pp 1 but a bubble of %g s", name, r.bubble_s);
  if (s.sync == PSIM_SYNC_PS)
    ck_assert_msg(r.wait_s[PSIM_WAIT_PARAMETER_SERVER] > 0, "%s: no parameter-server wait", name);
  psim_sim_result_destroy(&r);
  psim_strategy_destroy(&s);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}

START_TEST(corpus_parts_sum_no_bubble_without_pipeline) {
  FILE *f = fopen(ROOT "tests/corpus/cases", "r");
  ck_assert_ptr_nonnull(f);
  char name[128], files[3][256];
  bool expanded;
  int n = 0;
  while (next_case(f, name, files, &expanded)) {
    check_case(name, files, expanded);
    n++;
  }
  fclose(f);
  ck_assert_int_ge(n, 30);
}
END_TEST

int main(void) {
  Suite *s = suite_create("breakdown");
  TCase *tc = tcase_create("breakdown");
  tcase_set_timeout(tc, 280);
  tcase_add_test(tc, exposed_collectives_by_kind);
  tcase_add_test(tc, pipeline_bubble_is_other_stages_compute);
  tcase_add_test(tc, late_issue_is_host);
  tcase_add_test(tc, parameter_server_waits);
  tcase_add_test(tc, corpus_parts_sum_no_bubble_without_pipeline);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
