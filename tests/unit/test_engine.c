/* test_engine.c - task graph and list-scheduling engine. */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/engine/taskgraph.h"

static int32_t add(psim_taskgraph *g, double d, const int32_t *res, int32_t n) {
  int32_t id = -1;
  ck_assert_int_eq(psim_tg_add_task(g, d, res, n, NULL, &id), PSIM_OK);
  return id;
}

static void edge(psim_taskgraph *g, int32_t a, int32_t b) {
  ck_assert_int_eq(psim_tg_add_edge(g, a, b), PSIM_OK);
}

static double simulate(psim_taskgraph *g, psim_schedule_result *r) {
  ck_assert_int_eq(psim_tg_finalize(g), PSIM_OK);
  ck_assert_int_eq(psim_tg_simulate(g, r), PSIM_OK);
  return r->makespan_s;
}

START_TEST(chain_sums_durations) {
  psim_taskgraph g;
  psim_tg_init(&g, 2);
  int32_t r0 = 0, r1 = 1, prev = -1;
  double sum = 0;
  for (int i = 0; i < 10; i++) {
    double d = 0.5 + i;
    int32_t t = add(&g, d, i % 2 ? &r1 : &r0, 1);
    sum += d;
    if (prev >= 0)
      edge(&g, prev, t);
    prev = t;
  }
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  ck_assert_double_eq_tol(simulate(&g, &r), sum, 1e-12);
  ck_assert_double_eq_tol(r.start_s[9], sum - 9.5, 1e-12);
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
}
END_TEST

START_TEST(shared_resource_serialises_distinct_overlap) {
  psim_taskgraph g;
  psim_tg_init(&g, 2);
  int32_t r0 = 0, r1 = 1;
  add(&g, 2.0, &r0, 1);
  add(&g, 3.0, &r0, 1);
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  ck_assert_double_eq(simulate(&g, &r), 5.0);
  ck_assert_double_eq(r.start_s[1], 2.0); /* tie at t=0 broken by id */
  psim_tg_clear(&g, 2);
  add(&g, 2.0, &r0, 1);
  add(&g, 3.0, &r1, 1);
  ck_assert_double_eq(simulate(&g, &r), 3.0);
  ck_assert_double_eq(r.start_s[1], 0.0);
  /* A task on both resources waits for both, and holds both. */
  int32_t both[2] = {0, 1};
  add(&g, 1.0, both, 2);
  add(&g, 1.0, &r1, 1);
  ck_assert_double_eq(simulate(&g, &r), 5.0);
  ck_assert_double_eq(r.start_s[2], 3.0);
  ck_assert_double_eq(r.start_s[3], 4.0);
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
}
END_TEST

START_TEST(ties_follow_ready_time_then_id) {
  /* Task 2 becomes ready at 1 (after task 0), task 1 is ready at 0 but its
   * resource is shared: FIFO by ready time means 1 runs first. */
  psim_taskgraph g;
  psim_tg_init(&g, 2);
  int32_t r0 = 0, r1 = 1;
  add(&g, 1.0, &r1, 1);  /* 0 */
  add(&g, 4.0, &r0, 1);  /* 1: ready 0 */
  add(&g, 1.0, &r0, 1);  /* 2: ready 1 */
  add(&g, 0.0, NULL, 0); /* 3: barrier */
  edge(&g, 0, 2);
  edge(&g, 1, 3);
  edge(&g, 2, 3);
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  ck_assert_double_eq(simulate(&g, &r), 5.0);
  ck_assert_double_eq(r.start_s[2], 4.0);
  ck_assert_double_eq(r.end_s[3], 5.0);
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
}
END_TEST

/* Naive reference: repeatedly scan all tasks for the ready one with the
 * smallest (ready time, id), computing ready times from the edge list. */
static void reference(const psim_taskgraph *g, double *start, double *end) {
  int32_t n = g->n_tasks;
  char *done = calloc((size_t)n, 1);
  double *res_free = calloc((size_t)g->n_resources + 1, sizeof *res_free);
  for (int32_t step = 0; step < n; step++) {
    int32_t best = -1;
    double best_t = 0;
    for (int32_t v = 0; v < n; v++) {
      if (done[v])
        continue;
      int ok = 1;
      double t = 0;
      for (size_t e = 0; e < g->n_edges && ok; e++)
        if (g->edge_to[e] == v) {
          ok = done[g->edge_from[e]];
          if (ok && end[g->edge_from[e]] > t)
            t = end[g->edge_from[e]];
        }
      if (ok && (best < 0 || t < best_t)) {
        best = v;
        best_t = t;
      }
    }
    double s = best_t;
    for (int32_t k = g->res_first[best]; k < g->res_first[best + 1]; k++)
      s = fmax(s, res_free[g->res[k]]);
    start[best] = s;
    end[best] = s + g->duration_s[best];
    for (int32_t k = g->res_first[best]; k < g->res_first[best + 1]; k++)
      res_free[g->res[k]] = end[best];
    done[best] = 1;
  }
  free(done);
  free(res_free);
}

/* Random DAG over a random topological order, with small integer durations
 * (many ties, some zero) and 0-3 of 5 resources per task. */
static void random_dag(psim_taskgraph *g, unsigned *seed) {
  int32_t n = 2 + rand_r(seed) % 60;
  int32_t *order = malloc((size_t)n * sizeof *order);
  for (int32_t i = 0; i < n; i++)
    order[i] = i;
  for (int32_t i = n - 1; i > 0; i--) {
    int32_t j = rand_r(seed) % (i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (int32_t i = 0; i < n; i++) {
    int32_t res[3], nr = rand_r(seed) % 4, used = 0;
    for (int32_t k = 0; k < nr; k++) {
      int32_t x = rand_r(seed) % 5, dup = 0;
      for (int32_t q = 0; q < used; q++)
        dup |= res[q] == x;
      if (!dup)
        res[used++] = x;
    }
    add(g, (double)(rand_r(seed) % 4), res, used);
  }
  for (int32_t i = 0; i < n; i++)
    for (int32_t j = i + 1; j < n; j++)
      if (rand_r(seed) % 8 == 0)
        edge(g, order[i], order[j]);
  free(order);
}

START_TEST(matches_reference_on_random_dags) {
  unsigned seed = 12345;
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  for (int trial = 0; trial < 200; trial++) {
    psim_taskgraph g;
    psim_tg_init(&g, 5);
    random_dag(&g, &seed);
    simulate(&g, &r);
    double *s = malloc((size_t)g.n_tasks * sizeof *s), *e = malloc((size_t)g.n_tasks * sizeof *e);
    reference(&g, s, e);
    double mk = 0;
    for (int32_t i = 0; i < g.n_tasks; i++) {
      ck_assert_double_eq(r.start_s[i], s[i]);
      ck_assert_double_eq(r.end_s[i], e[i]);
      mk = fmax(mk, e[i]);
    }
    ck_assert_double_eq(r.makespan_s, mk);
    /* Deterministic: a second run gives bit-identical times. */
    double m1 = r.makespan_s;
    ck_assert_int_eq(psim_tg_simulate(&g, &r), PSIM_OK);
    ck_assert_double_eq(r.makespan_s, m1);
    free(s);
    free(e);
    psim_tg_destroy(&g);
  }
  psim_schedule_result_destroy(&r);
}
END_TEST

START_TEST(cycle_is_rejected_naming_a_task_on_it) {
  psim_taskgraph g;
  psim_tg_init(&g, 1);
  for (int i = 0; i < 5; i++)
    add(&g, 1.0, NULL, 0);
  edge(&g, 0, 1);
  edge(&g, 1, 2);
  edge(&g, 2, 3);
  edge(&g, 3, 1);
  edge(&g, 3, 4);
  ck_assert_int_eq(psim_tg_finalize(&g), PSIM_EFAILED);
  const char *m = psim_error_message();
  ck_assert_ptr_nonnull(strstr(m, "cycle"));
  ck_assert(strstr(m, "task 1 ") || strstr(m, "task 2 ") || strstr(m, "task 3 "));
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  ck_assert_int_eq(psim_tg_simulate(&g, &r), PSIM_EFAILED);
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
}
END_TEST

START_TEST(bad_arguments_are_rejected) {
  psim_taskgraph g;
  psim_tg_init(&g, 2);
  int32_t bad = 2, id;
  ck_assert_int_eq(psim_tg_add_task(&g, 1.0, &bad, 1, NULL, &id), PSIM_EINPUT);
  ck_assert_int_eq(psim_tg_add_task(&g, -1.0, NULL, 0, NULL, &id), PSIM_EINPUT);
  ck_assert_int_eq(psim_tg_add_task(&g, NAN, NULL, 0, NULL, &id), PSIM_EINPUT);
  ck_assert_int_eq(psim_tg_add_task(&g, INFINITY, NULL, 0, NULL, &id), PSIM_EINPUT);
  ck_assert_int_eq(g.n_tasks, 0);
  add(&g, 1.0, NULL, 0);
  ck_assert_int_eq(psim_tg_add_edge(&g, 0, 1), PSIM_EINPUT);
  ck_assert_int_eq(psim_tg_add_edge(&g, -1, 0), PSIM_EINPUT);
  ck_assert_int_eq(psim_tg_add_edge(&g, 0, 0), PSIM_OK); /* self loop = cycle */
  ck_assert_int_eq(psim_tg_finalize(&g), PSIM_EFAILED);
  psim_tg_destroy(&g);
}
END_TEST

/* psim_tg_add_kernel builds what add_task + set_issue + add_edge build, and
 * refuses what they refuse, adding nothing. */
START_TEST(add_kernel_equals_its_three_calls) {
  psim_taskgraph a, b;
  psim_tg_init(&a, 3);
  psim_tg_init(&b, 3);
  psim_task_info info = {PSIM_TASK_COMPUTE, PSIM_TP_BWD, 1, 7, 2, 0, 3};
  psim_task_issue is = {0.25, 2, 1};
  int32_t ka = -1, kb = -1, res = 0;
  for (int i = 0; i < 40; i++) { /* enough to grow every array */
    bool issued = i % 3 != 0;
    int32_t after = i % 5 == 0 ? -1 : ka;
    ck_assert_int_eq(psim_tg_add_kernel(&a, 0.5 + i, res, &info, issued ? &is : NULL, after, &ka),
                     PSIM_OK);
    int32_t prev = kb;
    kb = add(&b, 0.5 + i, &res, 1);
    if (issued)
      ck_assert_int_eq(psim_tg_set_issue(&b, kb, is.res, is.issue_s, is.sync), PSIM_OK);
    if (i % 5 != 0)
      edge(&b, prev, kb);
    b.info[kb] = info;
    ck_assert_int_eq(ka, kb);
  }
  ck_assert_int_eq(a.n_tasks, b.n_tasks);
  ck_assert_uint_eq(a.n_edges, b.n_edges);
  ck_assert_uint_eq(a.n_res, b.n_res);
  ck_assert_mem_eq(a.duration_s, b.duration_s, sizeof(double) * (size_t)a.n_tasks);
  ck_assert_mem_eq(a.info, b.info, sizeof(psim_task_info) * (size_t)a.n_tasks);
  ck_assert_mem_eq(a.res_first, b.res_first, sizeof(int32_t) * (size_t)(a.n_tasks + 1));
  ck_assert_mem_eq(a.res, b.res, sizeof(int32_t) * a.n_res);
  ck_assert_mem_eq(a.edge_from, b.edge_from, sizeof(int32_t) * a.n_edges);
  ck_assert_mem_eq(a.edge_to, b.edge_to, sizeof(int32_t) * a.n_edges);
  ck_assert_mem_eq(a.issue, b.issue, sizeof(psim_task_issue) * (size_t)a.n_tasks);
  int32_t n = a.n_tasks, id;
  psim_task_issue bad_res = {0.1, 3, 0}, bad_s = {NAN, 1, 0};
  ck_assert_int_eq(psim_tg_add_kernel(&a, 1.0, 3, &info, NULL, -1, &id), PSIM_EINPUT);
  ck_assert_int_eq(psim_tg_add_kernel(&a, -1.0, 0, &info, NULL, -1, &id), PSIM_EINPUT);
  ck_assert_int_eq(psim_tg_add_kernel(&a, 1.0, 0, &info, &bad_res, -1, &id), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "on resource 3"));
  ck_assert_int_eq(psim_tg_add_kernel(&a, 1.0, 0, &info, &bad_s, -1, &id), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "bad issue latency nan s"));
  ck_assert_int_eq(psim_tg_add_kernel(&a, 1.0, 0, &info, NULL, n, &id), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "after task 40, outside [0, 40)"));
  ck_assert_int_eq(a.n_tasks, n);
  psim_tg_destroy(&a);
  psim_tg_destroy(&b);
}
END_TEST

/* Copying a block of tasks and its edges into another graph, and undoing
 * the copy when an edge has no counterpart (the incremental builder's use). */
/* What the host waits for before it issues a kernel (psim_task_issue.sync): kernel K0 of 1 s
 * on stream 0, a transfer T of 3 s on a link, then kernel K1 on stream 0 after both, issued
 * by the host (0.5 s). Closed forms: no sync, the host issued K1 at 0.5 s: K1 starts when T
 * ends (3 s); PSIM_ISSUE_DRAIN, the host waits for the stream (1 s): still 3 s;
 * PSIM_ISSUE_INPUTS, the host waits for T too: 3 + 0.5 s. */
START_TEST(issue_sync_waits_for_stream_or_inputs) {
  const int32_t syncs[3] = {0, PSIM_ISSUE_DRAIN, PSIM_ISSUE_INPUTS};
  const double want[3] = {3.0, 3.0, 3.5};
  for (int i = 0; i < 3; i++) {
    psim_taskgraph g;
    psim_tg_init(&g, 3);
    int32_t stream = 0, link = 1, k0 = -1, k1 = -1;
    ck_assert_int_eq(psim_tg_add_kernel(&g, 1.0, stream, NULL, NULL, -1, &k0), PSIM_OK);
    int32_t t = add(&g, 3.0, &link, 1);
    psim_task_issue is = {0.5, 2, syncs[i]};
    ck_assert_int_eq(psim_tg_add_kernel(&g, 1.0, stream, NULL, &is, k0, &k1), PSIM_OK);
    edge(&g, t, k1);
    psim_schedule_result r;
    psim_schedule_result_init(&r);
    ck_assert_double_eq(simulate(&g, &r), want[i] + 1.0);
    ck_assert_double_eq(r.start_s[k1], want[i]);
    psim_schedule_result_destroy(&r);
    psim_tg_destroy(&g);
  }
}
END_TEST

START_TEST(append_copies_and_truncate_undoes) {
  psim_taskgraph src, dst;
  psim_tg_init(&src, 2);
  psim_tg_init(&dst, 2);
  int32_t r0 = 0, r01[2] = {0, 1};
  int32_t s0 = add(&src, 1.0, &r0, 1), s1 = add(&src, 2.0, r01, 2), s2 = add(&src, 3.0, &r0, 1);
  edge(&src, s0, s1);
  edge(&src, s1, s2);
  int32_t d0 = add(&dst, 5.0, &r0, 1); /* dst already holds a task */
  int32_t rename[3] = {d0, -1, -1};    /* s0 -> d0; s1, s2 copied below */
  ck_assert_int_eq(psim_tg_append_tasks(&dst, &src, 1, 3), PSIM_OK);
  ck_assert_int_eq(dst.n_tasks, 3);
  ck_assert_uint_eq(dst.n_res, 4);
  ck_assert_double_eq(dst.duration_s[1], 2.0);
  ck_assert_int_eq(dst.res_first[2] - dst.res_first[1], 2);
  rename[1] = 1;
  rename[2] = 2;
  bool mapped = false;
  ck_assert_int_eq(psim_tg_append_edges(&dst, &src, 0, 2, rename, &mapped), PSIM_OK);
  ck_assert(mapped);
  ck_assert_uint_eq(dst.n_edges, 2);
  ck_assert(dst.edge_from[0] == d0 && dst.edge_to[0] == 1 && dst.edge_from[1] == 1 &&
            dst.edge_to[1] == 2);
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  ck_assert_double_eq(simulate(&dst, &r), 10.0); /* 5 + 2 + 3 in a chain */
  /* an edge to a task without counterpart: nothing appended, then the tasks undone */
  ck_assert_int_eq(psim_tg_append_tasks(&dst, &src, 1, 3), PSIM_OK);
  rename[0] = -1;
  ck_assert_int_eq(psim_tg_append_edges(&dst, &src, 0, 2, rename, &mapped), PSIM_OK);
  ck_assert(!mapped);
  ck_assert_uint_eq(dst.n_edges, 2);
  ck_assert_int_eq(psim_tg_truncate(&dst, 3), PSIM_OK);
  ck_assert_int_eq(dst.n_tasks, 3);
  ck_assert_uint_eq(dst.n_res, 4);
  ck_assert_int_eq(psim_tg_truncate(&dst, 4), PSIM_EINPUT);
  rename[0] = 7; /* a renamed end outside the graph is an error */
  ck_assert_int_eq(psim_tg_append_edges(&dst, &src, 0, 1, rename, &mapped), PSIM_EINPUT);
  ck_assert_uint_eq(dst.n_edges, 2);
  ck_assert_double_eq(simulate(&dst, &r), 10.0);
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&src);
  psim_tg_destroy(&dst);
}
END_TEST

START_TEST(empty_graph_and_reuse) {
  psim_taskgraph g;
  psim_tg_init(&g, 0);
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  ck_assert_double_eq(simulate(&g, &r), 0.0);
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
}
END_TEST

START_TEST(interrupt_stops_simulation) {
  psim_taskgraph g;
  psim_tg_init(&g, 1);
  int32_t r0 = 0;
  for (int i = 0; i < 200000; i++)
    add(&g, 1e-6, &r0, 1);
  ck_assert_int_eq(psim_tg_finalize(&g), PSIM_OK);
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  psim_set_interrupt(1);
  ck_assert_int_eq(psim_tg_simulate(&g, &r), PSIM_EINTERRUPTED);
  psim_set_interrupt(0);
  ck_assert_int_eq(psim_tg_simulate(&g, &r), PSIM_OK);
  ck_assert_double_eq_tol(r.makespan_s, 0.2, 1e-9);
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
}
END_TEST

/* Builds and simulates a small graph; returns the first failing status. */
static psim_status build_and_run(void) {
  psim_taskgraph g;
  psim_schedule_result r;
  psim_tg_init(&g, 3);
  psim_schedule_result_init(&r);
  psim_status s = PSIM_OK;
  int32_t res[2] = {0, 2};
  for (int i = 0; i < 100 && s == PSIM_OK; i++)
    s = psim_tg_add_task(&g, 1.0, res, 1 + i % 2, NULL, NULL);
  for (int i = 1; i < 100 && s == PSIM_OK; i++)
    s = psim_tg_add_edge(&g, i / 2, i);
  if (s == PSIM_OK)
    s = psim_tg_finalize(&g);
  if (s == PSIM_OK)
    s = psim_tg_simulate(&g, &r);
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
  return s;
}

START_TEST(allocation_failures_are_clean) {
  int failures = 0;
  for (long n = 1; n < 60; n++) {
    psim_alloc_fail_at(n);
    psim_status s = build_and_run();
    psim_alloc_fail_at(0);
    ck_assert(s == PSIM_OK || s == PSIM_ENOMEM);
    failures += s == PSIM_ENOMEM;
  }
  ck_assert_int_gt(failures, 5);
}
END_TEST

int main(void) {
  Suite *s = suite_create("engine");
  TCase *tc = tcase_create("engine");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, chain_sums_durations);
  tcase_add_test(tc, shared_resource_serialises_distinct_overlap);
  tcase_add_test(tc, ties_follow_ready_time_then_id);
  tcase_add_test(tc, matches_reference_on_random_dags);
  tcase_add_test(tc, cycle_is_rejected_naming_a_task_on_it);
  tcase_add_test(tc, bad_arguments_are_rejected);
  tcase_add_test(tc, add_kernel_equals_its_three_calls);
  tcase_add_test(tc, issue_sync_waits_for_stream_or_inputs);
  tcase_add_test(tc, append_copies_and_truncate_undoes);
  tcase_add_test(tc, empty_graph_and_reuse);
  tcase_add_test(tc, interrupt_stops_simulation);
  tcase_add_test(tc, allocation_failures_are_clean);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
