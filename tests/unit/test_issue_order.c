/* test_issue_order.c - the builder's issue positions (sim/builder/schedules.c) and the engine's
 * issue order (PSIM_ENGINE_ISSUE; docs/simulator.md, "A fixed order per resource"): positions
 * follow every edge between positioned kernels (the order is a linear extension of the graph
 * without inheritance having to repair it), a 1F1B stage's kernels sorted by position are its
 * schedule's step list (warm-up forwards, then one forward and one backward in turn, then the
 * backwards: Megatron-LM's forward_backward_pipelining_without_interleaving), each stage's
 * first forward sits at its ideal start (stage i: i forward units), and with free
 * communication issue order gives ready order's iteration time (tests/data/sim-fast4.json). */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "sim/simulate.h"

#define DATA PSIM_SOURCE_ROOT "/tests/data/"
#define UNIT 1024 /* schedules.c's ISSUE_UNIT: positions per forward unit */

typedef struct fixture {
  psim_model m;
  psim_cluster c;
  psim_strategy s;
  psim_sim_result r;
} fixture;

/* pp stages (pp * v at most sim-chain's 4 layers), m = 8 micro-batches, v chunks per stage,
 * sim-chain on sim-fast4, unfolded, graph kept, in engine order e. */
static void run_pp(fixture *f, psim_schedule sched, int32_t pp, int32_t v, psim_engine_order e) {
  psim_model_init(&f->m);
  psim_cluster_init(&f->c);
  ck_assert_msg(psim_model_load(DATA "sim-chain.json", &f->m) == PSIM_OK, "%s",
                psim_error_message());
  ck_assert_msg(psim_cluster_load(DATA "sim-fast4.json", &f->c) == PSIM_OK, "%s",
                psim_error_message());
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = mo.dp = 1;
  mo.pp = pp;
  mo.micro_batch = 8;
  mo.virtual_stages = v;
  mo.schedule = sched;
  psim_strategy_init(&f->s);
  ck_assert_msg(psim_strategy_megatron(&f->m, &f->c, &mo, &f->s) == PSIM_OK, "%s",
                psim_error_message());
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.keep_graph = true;
  o.fold = false;
  o.engine = e;
  ck_assert_msg(psim_simulate(&f->m, &f->c, &f->s, &o, &f->r) == PSIM_OK, "%s",
                psim_error_message());
}

static void run(fixture *f, psim_schedule sched, int32_t v, psim_engine_order e) {
  run_pp(f, sched, 4, v, e);
}

static void done(fixture *f) {
  psim_sim_result_destroy(&f->r);
  psim_strategy_destroy(&f->s);
  psim_cluster_destroy(&f->c);
  psim_model_destroy(&f->m);
}

/* Every compute kernel of a micro-batch has a position; every edge between two positioned
 * tasks goes up (or stays) in position. Returns the number of positioned tasks. */
static int32_t check_linear_extension(const psim_taskgraph *g) {
  ck_assert_ptr_nonnull(g->position);
  int32_t n = 0;
  for (int32_t t = 0; t < g->n_tasks; t++) {
    if (g->info[t].kind == PSIM_TASK_COMPUTE && g->info[t].micro >= 0)
      ck_assert_int_ge(g->position[t], 0);
    n += g->position[t] >= 0;
  }
  for (size_t e = 0; e < g->n_edges; e++) {
    int32_t u = g->edge_from[e], v = g->edge_to[e];
    if (g->position[u] >= 0 && g->position[v] >= 0)
      ck_assert_msg(g->position[u] <= g->position[v], "edge %d (%d) -> %d (%d)", u, g->position[u],
                    v, g->position[v]);
  }
  return n;
}

START_TEST(positions_are_a_linear_extension) {
  const psim_schedule sched[] = {PSIM_SCHED_1F1B, PSIM_SCHED_GPIPE, PSIM_SCHED_INTERLEAVED,
                                 PSIM_SCHED_LOOPED_BFS, PSIM_SCHED_INTERLEAVED_ZB};
  const int32_t v[] = {1, 1, 2, 2, 2};
  for (int k = 0; k < 5; k++) {
    fixture f;
    run_pp(&f, sched[k], 4 / v[k], v[k], PSIM_ENGINE_ISSUE);
    ck_assert_int_gt(check_linear_extension(f.r.graph), 0);
    ck_assert(f.r.iteration_time_s > 0 && isfinite(f.r.iteration_time_s));
    done(&f);
  }
}
END_TEST

typedef struct kpos {
  int32_t pos, micro, bwd;
} kpos;

static int by_pos(const void *a, const void *b) {
  const kpos *x = a, *y = b;
  return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Stage d's kernels sorted by position, consecutive ones of one (micro-batch, pass) merged into
 * one step: steps[k] = micro-batch, + 1000 for a backward. Returns the step count; *first the
 * least position. */
static int32_t stage_steps(const psim_taskgraph *g, int32_t d, int32_t *steps, int32_t *first) {
  kpos *k = malloc(sizeof *k * (size_t)g->n_tasks);
  int32_t n = 0, ns = 0;
  for (int32_t t = 0; t < g->n_tasks; t++)
    if (g->info[t].kind == PSIM_TASK_COMPUTE && g->info[t].device == d && g->info[t].micro >= 0)
      k[n++] = (kpos){g->position[t], g->info[t].micro, g->info[t].pass != PSIM_TP_FWD};
  qsort(k, (size_t)n, sizeof *k, by_pos);
  for (int32_t i = 0; i < n; i++) {
    int32_t step = k[i].micro + 1000 * k[i].bwd;
    if (ns == 0 || steps[ns - 1] != step)
      steps[ns++] = step;
  }
  *first = n ? k[0].pos : -1;
  free(k);
  return ns;
}

START_TEST(one_f_one_b_issue_order_is_the_step_list) {
  fixture f;
  run(&f, PSIM_SCHED_1F1B, 1, PSIM_ENGINE_ISSUE);
  const int32_t p = 4, m = 8;
  int32_t steps[64], want[64];
  for (int32_t d = 0; d < p; d++) {
    int32_t nw = 0, warm = p - d - 1, first = -1;
    for (int32_t k = 0; k < warm; k++)
      want[nw++] = k;
    for (int32_t j = 0; j < m - warm; j++) {
      want[nw++] = warm + j;
      want[nw++] = 1000 + j;
    }
    for (int32_t j = m - warm; j < m; j++)
      want[nw++] = 1000 + j;
    int32_t ns = stage_steps(f.r.graph, d, steps, &first);
    ck_assert_int_eq(ns, 2 * m);
    for (int32_t k = 0; k < ns; k++)
      ck_assert_msg(steps[k] == want[k], "stage %d step %d: %d, want %d", d, k, steps[k], want[k]);
    ck_assert_int_eq(first, d * UNIT); /* stage d's first forward after d forwards upstream */
  }
  done(&f);
}
END_TEST

/* Free communication, one kernel stream per stage: nothing is shared, so every order that
 * keeps each stream's order gives the same schedule. */
START_TEST(issue_order_equals_ready_without_shared_resources) {
  fixture a, b;
  run(&a, PSIM_SCHED_1F1B, 1, PSIM_ENGINE_READY);
  run(&b, PSIM_SCHED_1F1B, 1, PSIM_ENGINE_ISSUE);
  ck_assert_ptr_null(a.r.graph->position); /* ready order pays nothing for positions */
  ck_assert_double_eq_tol(a.r.iteration_time_s, b.r.iteration_time_s, 1e-12 * a.r.iteration_time_s);
  done(&a);
  done(&b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("issue_order");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, positions_are_a_linear_extension);
  tcase_add_test(tc, one_f_one_b_issue_order_is_the_step_list);
  tcase_add_test(tc, issue_order_equals_ready_without_shared_resources);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
