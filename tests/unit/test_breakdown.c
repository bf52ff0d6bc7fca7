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
  h->r.record_taken = true; /* the breakdown reads the order the engine took the tasks in */
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

/* ---- the engine's order against a sort by start time --------------------------------- */

static const psim_schedule_result *sort_sched; /* qsort's context */
static const psim_taskgraph *sort_graph;

/* (start, positive length, id): at one start a resource serves its zero-length tasks before the
 * positive-length one (which holds it past that start). The former sort by (start, id) put a
 * positive task of lower id first, and a zero-length task starting with it lost its true
 * predecessor on that resource (case 0 below: a wait 2 s off; breakdown.c asserts it now). */
static int by_start_then_id(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  double sx = sort_sched->start_s[x], sy = sort_sched->start_s[y];
  if (sx != sy)
    return sx < sy ? -1 : 1;
  int px = sort_graph->duration_s[x] > 0, py = sort_graph->duration_s[y] > 0;
  return px != py ? px - py : (x > y) - (x < y);
}

/* A random graph on 3 devices: 40-200 tasks on one or two resources (a stream, a device's
 * comm engine, the host), durations from {0, 0.5, 1, 2} s so that starts and ends tie, edges
 * to earlier tasks. */
static void random_graph(hand *h, unsigned *seed) {
  int32_t n = 40 + (int32_t)(rand_r(seed) % 161);
  const psim_task_kind kinds[] = {PSIM_TASK_COMPUTE, PSIM_TASK_TRANSFER, PSIM_TASK_COLLECTIVE,
                                  PSIM_TASK_HOST};
  const psim_task_pass passes[] = {PSIM_TP_FWD, PSIM_TP_BWD, PSIM_TP_COMM_TP, PSIM_TP_COMM_PP,
                                   PSIM_TP_COMM_DP};
  const double durations[] = {0, 0.5, 1, 2};
  for (int32_t i = 0; i < n; i++) {
    int32_t dev = (int32_t)(rand_r(seed) % 3), res[2], n_res = 1 + (int32_t)(rand_r(seed) % 2);
    res[0] = (int32_t)(rand_r(seed) % 3) == 0 ? psim_res_comm(dev) : psim_res_compute(dev);
    res[1] = psim_res_comm((dev + 1 + (int32_t)(rand_r(seed) % 2)) % 3);
    psim_task_info inf = {(uint8_t)kinds[rand_r(seed) % 4],
                          (uint8_t)passes[rand_r(seed) % 5],
                          (int16_t)(dev % 2),
                          -1,
                          -1,
                          dev,
                          -1};
    int32_t id;
    ck_assert_int_eq(psim_tg_add_task(&h->g, durations[rand_r(seed) % 4], res, n_res, &inf, &id),
                     PSIM_OK);
    for (int e = 0; i > 0 && e < 2; e++)
      if (rand_r(seed) % 3)
        ck_assert_int_eq(psim_tg_add_edge(&h->g, (int32_t)(rand_r(seed) % (unsigned)i), id),
                         PSIM_OK);
  }
}

/* The breakdown reads the order the engine took the tasks in (each resource serves them in
 * that order); before, it sorted every task by start. A sort by (start, positive length, id)
 * gives every resource the same sequence, so on 300 random schedules (every engine order),
 * every device, pipelined or not, the two give the same parts bit for bit; a schedule that did
 * not record its order (or recorded another graph's) is refused. */
START_TEST(engine_order_equals_start_order) {
  unsigned seed = 20261207;
  for (int c = 0; c < 300; c++) {
    hand h;
    hand_init(&h, 3, 1 + c % 2, PSIM_SYNC_ALLREDUCE);
    random_graph(&h, &seed);
    if (c % 3 == 0)
      h.g.n_streams = 6; /* stream order: the devices' compute streams and comm engines */
    ck_assert_int_eq(psim_tg_finalize(&h.g), PSIM_OK);
    h.r.record_taken = true;
    h.r.order = (psim_engine_order)(c % PSIM_ENGINE_ORDER_COUNT); /* every engine order */
    ck_assert_int_eq(psim_tg_simulate(&h.g, &h.r), PSIM_OK);
    int32_t *taken = h.r.taken, *sorted = malloc(sizeof *sorted * (size_t)h.g.n_tasks);
    ck_assert_ptr_nonnull(sorted);
    for (int32_t t = 0; t < h.g.n_tasks; t++)
      sorted[t] = t;
    sort_sched = &h.r;
    sort_graph = &h.g;
    qsort(sorted, (size_t)h.g.n_tasks, sizeof *sorted, by_start_then_id);
    for (int32_t d = 0; d < 3; d++) {
      psim_sim_result a, b;
      psim_sim_result_init(&a);
      psim_sim_result_init(&b);
      ck_assert_int_eq(psim_sim_breakdown(&h.g, &h.r, d, 3, h.r.makespan_s, &h.s, &a), PSIM_OK);
      h.r.taken = sorted;
      ck_assert_int_eq(psim_sim_breakdown(&h.g, &h.r, d, 3, h.r.makespan_s, &h.s, &b), PSIM_OK);
      h.r.taken = taken;
      ck_assert_msg(a.compute_s == b.compute_s && a.bubble_s == b.bubble_s,
                    "case %d device %d: compute %g / %g, bubble %g / %g", c, d, a.compute_s,
                    b.compute_s, a.bubble_s, b.bubble_s);
      for (int k = 0; k < PSIM_COMM_KIND_COUNT; k++)
        ck_assert_msg(a.exposed_comm_s[k] == b.exposed_comm_s[k], "case %d device %d comm %d", c, d,
                      k);
      for (int k = 0; k < PSIM_WAIT_KIND_COUNT; k++)
        ck_assert_msg(a.wait_s[k] == b.wait_s[k], "case %d device %d: wait %d %g / %g", c, d, k,
                      a.wait_s[k], b.wait_s[k]);
      psim_sim_result_destroy(&a);
      psim_sim_result_destroy(&b);
    }
    free(sorted);
    psim_sim_result refused;
    psim_sim_result_init(&refused);
    h.r.n_taken--; /* as if recorded for a graph of one task less */
    ck_assert_int_eq(psim_sim_breakdown(&h.g, &h.r, 0, 3, h.r.makespan_s, &h.s, &refused),
                     PSIM_EFAILED);
    psim_sim_result_destroy(&refused);
    hand_destroy(&h);
  }
}
END_TEST

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
  tcase_add_test(tc, engine_order_equals_start_order);
  tcase_add_test(tc, corpus_parts_sum_no_bubble_without_pipeline);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
