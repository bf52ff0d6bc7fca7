/* test_allocfail.c - allocation-failure injection (SQLite's method): for
 * N = 1, 2, ... the N-th allocation through psim_malloc (cJSON's included)
 * fails, and the whole operation must return PSIM_ENOMEM cleanly, or succeed
 * with the same answer when the failure was recoverable. No crash; no leak
 * (LeakSanitizer in scripts/test's sanitizer pass, valgrind in valgrind.sh).
 *
 * Operations: a whole `simulate` (load model, cluster and strategy from
 * files, simulate, write a trace and the JSON result) and a short `plan`
 * (the Megatron grid limited to a few evaluations, the plan document and its
 * atomic write). igraph's own allocations (cluster graph, routes) do not go
 * through psim_malloc and are not failed. */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "search/plan/plan.h"
#include "search/policy/searchers.h"
#include "search/search.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/simulate.h"
#include "sim/trace_sim.h"

#define ROOT    PSIM_SOURCE_ROOT "/"
#define MODEL   ROOT "tests/data/tiny-gpt.json"
#define CLUSTER ROOT "topologies/dgx-a100-x1.json"

static const char strategy_text[] =
    "{\"format\": \"plansim.strategy/1\", \"template\": \"megatron\", \"tp\": 2, \"pp\": 2,"
    " \"dp\": 2, \"micro_batch\": 1, \"recompute\": \"selective\", \"sequence_parallel\": true}";

static char tmp_dir[64];

/* One whole operation; *time_s gets the iteration time it predicted. */
typedef psim_status (*operation_fn)(double *time_s);

static psim_status load_strategy(const psim_model *m, psim_cluster *c, psim_strategy *s) {
  cJSON *root = NULL;
  PSIM_CHECK(psim_json_parse("strategy.json", strategy_text, sizeof strategy_text - 1, &root));
  psim_status st = psim_strategy_from_json("strategy.json", root, m, c, s);
  cJSON_Delete(root);
  return st;
}

static psim_status write_result(const psim_sim_result *r) {
  cJSON *root = cJSON_CreateObject();
  if (!root)
    return psim_error(PSIM_ENOMEM, "out of memory");
  char path[128];
  snprintf(path, sizeof path, "%s/result.json", tmp_dir);
  psim_status s = psim_sim_result_to_json(r, root);
  if (s == PSIM_OK)
    s = psim_json_write_file(path, root);
  cJSON_Delete(root);
  return s;
}

/* plansim simulate MODEL CLUSTER STRATEGY --trace T --json, as a library call. */
static psim_status whole_simulate(double *time_s) {
  psim_model m;
  psim_cluster c;
  psim_strategy s;
  psim_sim_result r;
  psim_model_init(&m);
  psim_cluster_init(&c);
  psim_strategy_init(&s);
  psim_sim_result_init(&r);
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.keep_graph = true;
  char trace[128];
  snprintf(trace, sizeof trace, "%s/trace.json", tmp_dir);
  psim_status st = psim_model_load(MODEL, &m);
  if (st == PSIM_OK)
    st = psim_cluster_load(CLUSTER, &c);
  if (st == PSIM_OK)
    st = load_strategy(&m, &c, &s);
  if (st == PSIM_OK)
    st = psim_simulate(&m, &c, &s, &o, &r);
  if (st == PSIM_OK)
    st = psim_trace_write_sim(trace, &m, &c, &r);
  if (st == PSIM_OK)
    st = write_result(&r);
  *time_s = r.iteration_time_s;
  psim_sim_result_destroy(&r);
  psim_strategy_destroy(&s);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
  return st;
}

static psim_status write_plan(const psim_model *m, const psim_cluster *c,
                              const psim_search_result *r) {
  psim_plan_info info = {"grid", 1,    "6",      r->evaluations, r->wall_s, r->curve, r->n_curve,
                         NULL,   NULL, r->stats, r->description, NULL,      NULL};
  cJSON *doc = NULL;
  char path[128];
  snprintf(path, sizeof path, "%s/plan.json", tmp_dir);
  psim_status st = psim_plan_to_json(m, c, &r->best, &r->best_sim, &info, &doc);
  if (st == PSIM_OK)
    st = psim_json_write_file(path, doc);
  cJSON_Delete(doc);
  return st;
}

/* plansim plan MODEL CLUSTER --search grid --budget 6 -o PLAN, as library calls. */
static psim_status short_plan(double *time_s) {
  psim_model m;
  psim_cluster c;
  psim_model_init(&m);
  psim_cluster_init(&c);
  psim_search_options so;
  psim_search_options_init(&so);
  so.budget_evals = 6;
  psim_search_result r;
  psim_search_result_init(&r);
  psim_status st = psim_model_load(MODEL, &m);
  if (st == PSIM_OK)
    st = psim_cluster_load(CLUSTER, &c);
  if (st == PSIM_OK)
    st = psim_searcher_find("grid")->run(&m, &c, &so, &r);
  if (st == PSIM_OK)
    st = write_plan(&m, &c, &r);
  *time_s = r.best_sim.iteration_time_s;
  psim_search_result_destroy(&r);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
  return st;
}

/* Allocation calls (psim_malloc, calloc, realloc, cJSON's) one run of op makes. */
static long count_calls(operation_fn op, double *want) {
  const long far = 1L << 40;
  psim_alloc_fail_at(far);
  ck_assert_msg(op(want) == PSIM_OK, "without injection: %s", psim_error_message());
  long calls = far - psim_alloc_fail_pending();
  psim_alloc_fail_at(0);
  return calls;
}

/* Which N to fail: every N up to `points` (env PSIM_ALLOCFAIL_POINTS, default
 * 1500; 0 = every allocation), else the first two thirds of the points
 * one by one and the rest spread evenly over the remaining allocations. */
static long next_n(long n, long calls) {
  const char *env = getenv("PSIM_ALLOCFAIL_POINTS");
  long points = env ? atol(env) : 1500;
  long dense = points * 2 / 3;
  if (points <= 0 || calls <= points || n < dense)
    return n + 1;
  long stride = (calls - dense) / (points - dense);
  return n + (stride > 1 ? stride : 1);
}

/* Fails allocation N (see next_n) until the operation completes without
 * reaching its N-th allocation. */
static void inject_all(operation_fn op, const char *name) {
  double want = 0, got = 0;
  long calls = count_calls(op, &want);
  ck_assert(want > 0);
  long n = 1, enomem = 0, recovered = 0, tried = 0;
  for (;; n = next_n(n, calls), tried++) {
    psim_alloc_fail_at(n);
    psim_error_clear();
    psim_status st = op(&got);
    bool reached = psim_alloc_fail_pending() == 0;
    psim_alloc_fail_at(0);
    if (st == PSIM_OK) {
      /* Either allocation n never happened (done), or its failure was
       * recovered from: then the answer must be the same. */
      ck_assert_msg(got == want,
                    "%s: allocation %ld failed, status ok, but %.17g s instead of "
                    "%.17g s",
                    name, n, got, want);
      if (!reached)
        break; /* past the last allocation */
      recovered++;
      continue;
    }
    ck_assert_msg(st == PSIM_ENOMEM,
                  "%s: allocation %ld failed: status '%s' (%s), expected "
                  "out of memory",
                  name, n, psim_status_name(st), psim_error_message());
    enomem++;
  }
  fprintf(stderr,
          "allocfail: %s: %ld allocation calls, %ld of them failed one at a time: %ld "
          "out of memory, %ld recovered with the same answer\n",
          name, calls, tried, enomem, recovered);
  ck_assert_msg(enomem * 2 > tried,
                "%s: only %ld of %ld failures reached an out-of-memory "
                "status",
                name, enomem, tried);
}

START_TEST(every_allocation_of_simulate) {
  inject_all(whole_simulate, "simulate");
}
END_TEST

START_TEST(every_allocation_of_plan) {
  inject_all(short_plan, "plan");
}
END_TEST

/* The injection itself: the N-th allocation fails, the others do not. */
START_TEST(injection_fails_exactly_the_nth) {
  psim_alloc_fail_at(3);
  void *a = psim_malloc(8), *b = psim_calloc(2, 8), *c = psim_malloc(8), *d = psim_malloc(8);
  psim_alloc_fail_at(0);
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_nonnull(b);
  ck_assert_ptr_null(c);
  ck_assert_ptr_nonnull(d);
  psim_free(a);
  psim_free(b);
  psim_free(d);
}
END_TEST

static void make_tmp(void) {
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/psim-allocfail.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
}

static void remove_tmp(void) {
  const char *files[] = {"trace.json", "result.json", "plan.json"};
  char path[128];
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", tmp_dir, files[i]);
    unlink(path);
  }
  rmdir(tmp_dir);
}

int main(void) {
  psim_json_init_hooks();
  Suite *s = suite_create("allocfail");
  TCase *tc = tcase_create("allocfail");
  tcase_add_checked_fixture(tc, make_tmp, remove_tmp);
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, injection_fails_exactly_the_nth);
  tcase_add_test(tc, every_allocation_of_simulate);
  tcase_add_test(tc, every_allocation_of_plan);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
