/* test_ilp.c - the GLPK sharding ILP (search/alpa/ilp.h) against brute-force
 * enumeration of the same objective on random small problems (issue 6:
 * >= 20 graphs of up to 10 ops with 2-3 strategies each), and its
 * infeasible, fixed-variable and warm-start paths. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "search/alpa/ilp.h"
#include "sim/core/alloc.h"

#define MAXG 10

typedef struct rnd_problem {
  psim_ilp_problem p;
  int32_t n_choices[MAXG];
  double cost_store[MAXG][3], mem_store[MAXG][3];
  const double *cost[MAXG], *mem[MAXG];
  uint8_t allowed_store[MAXG][3];
  const uint8_t *allowed[MAXG];
  psim_ilp_edge edges[MAXG * 2];
  double edge_cost[MAXG * 2][9];
} rnd_problem;

static uint64_t rng = 88172645463325252ull;
static double urand(void) { /* xorshift64 */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

/* A random graph: a chain (the op order) plus random extra edges, random
 * costs; with_mem adds a memory row that binds; with_fix excludes choices. */
static void make(rnd_problem *r, int32_t n, bool with_mem, bool with_fix) {
  memset(r, 0, sizeof *r);
  double mem_min = 0, mem_max = 0;
  for (int32_t g = 0; g < n; g++) {
    r->n_choices[g] = 2 + (urand() < 0.5);
    double lo = INFINITY, hi = 0;
    for (int32_t i = 0; i < r->n_choices[g]; i++) {
      r->cost_store[g][i] = urand();
      r->mem_store[g][i] = urand();
      lo = fmin(lo, r->mem_store[g][i]);
      hi = fmax(hi, r->mem_store[g][i]);
      r->allowed_store[g][i] = 1;
    }
    if (with_fix && urand() < 0.3)
      r->allowed_store[g][(int32_t)(urand() * r->n_choices[g])] = 0;
    mem_min += lo;
    mem_max += hi;
    r->cost[g] = r->cost_store[g];
    r->mem[g] = r->mem_store[g];
    r->allowed[g] = r->allowed_store[g];
  }
  int32_t e = 0;
  for (int32_t g = 1; g < n; g++) {
    int32_t a = urand() < 0.7 ? g - 1 : (int32_t)(urand() * g);
    r->edges[e] = (psim_ilp_edge){a, g, r->edge_cost[e]};
    for (int32_t k = 0; k < 9; k++)
      r->edge_cost[e][k] = urand() < 0.4 ? 0 : urand();
    e++;
  }
  r->p.n_groups = n;
  r->p.n_choices = r->n_choices;
  r->p.cost = r->cost;
  r->p.mem = with_mem ? r->mem : NULL;
  r->p.mem_limit = mem_min + 0.4 * (mem_max - mem_min);
  r->p.n_edges = e;
  r->p.edges = r->edges;
  r->p.allowed = with_fix ? r->allowed : NULL;
}

/* Edge costs that depend only on a layout per choice (2 layouts for 3
 * choices), as resharding costs do: ilp.c then merges choices of equal
 * layout into one class per edge end, and must still find the optimum. */
static void share_layouts(rnd_problem *r) {
  int32_t layout[MAXG][3];
  for (int32_t g = 0; g < r->p.n_groups; g++)
    for (int32_t i = 0; i < r->n_choices[g]; i++)
      layout[g][i] = i == 0 ? 0 : i == 1 ? 1 : (int32_t)(urand() * 2);
  for (int32_t e = 0; e < r->p.n_edges; e++) {
    double table[2][2] = {{urand(), urand()}, {urand(), urand()}};
    int32_t a = r->edges[e].a, b = r->edges[e].b;
    for (int32_t i = 0; i < r->n_choices[a]; i++)
      for (int32_t j = 0; j < r->n_choices[b]; j++)
        r->edge_cost[e][i * r->n_choices[b] + j] = table[layout[a][i]][layout[b][j]];
  }
}

/* k: problem number; shared: edge costs by layout (share_layouts). */
static int solve_both(int k, bool shared) {
  rnd_problem r;
  make(&r, 2 + k % 9, k % 3 == 1, k % 4 == 2);
  if (shared)
    share_layouts(&r);
  psim_ilp_solution a, b;
  psim_ilp_solution_init(&a);
  psim_ilp_solution_init(&b);
  psim_status sb = psim_ilp_brute_force(&r.p, &b);
  psim_status sa = psim_ilp_solve(&r.p, NULL, &a);
  ck_assert_int_eq(sa == PSIM_OK, sb == PSIM_OK);
  if (sa == PSIM_OK) {
    ck_assert_msg(a.optimal, "problem %d not solved to optimality", k);
    ck_assert_double_eq_tol(a.objective, b.objective, 1e-9);
    ck_assert_double_eq_tol(psim_ilp_objective(&r.p, a.choice), b.objective, 1e-9);
  } else {
    ck_assert_int_eq(sa, PSIM_EFAILED);
  }
  psim_ilp_solution_destroy(&a);
  psim_ilp_solution_destroy(&b);
  return sa == PSIM_OK;
}

START_TEST(ilp_with_shared_layouts_equals_brute_force) {
  int solved = 0;
  for (int k = 0; k < 40; k++)
    solved += solve_both(k, true);
  ck_assert_int_ge(solved, 20);
}
END_TEST

START_TEST(ilp_equals_brute_force) {
  int solved = 0;
  for (int k = 0; k < 40; k++)
    solved += solve_both(k, false);
  ck_assert_int_ge(solved, 20);
}
END_TEST

START_TEST(infeasible_is_clear_error) {
  rnd_problem r;
  make(&r, 5, true, false);
  r.p.mem_limit = -1; /* nothing fits */
  psim_ilp_solution a;
  psim_ilp_solution_init(&a);
  ck_assert_int_eq(psim_ilp_solve(&r.p, NULL, &a), PSIM_EFAILED);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "infeasible"));
  psim_ilp_solution_destroy(&a);
  psim_error_clear();
}
END_TEST

START_TEST(fixed_choice_and_warm_start) {
  rnd_problem r;
  make(&r, 8, false, false);
  for (int32_t i = 0; i < r.n_choices[3]; i++) /* fix group 3 to choice 1 */
    r.allowed_store[3][i] = i == 1;
  r.p.allowed = r.allowed;
  int32_t warm[MAXG];
  for (int32_t g = 0; g < 8; g++)
    warm[g] = g == 3 ? 1 : 0;
  r.p.warm = warm;
  psim_ilp_solution a, b;
  psim_ilp_solution_init(&a);
  psim_ilp_solution_init(&b);
  ck_assert_int_eq(psim_ilp_solve(&r.p, NULL, &a), PSIM_OK);
  ck_assert_int_eq(psim_ilp_brute_force(&r.p, &b), PSIM_OK);
  ck_assert_int_eq(a.choice[3], 1);
  ck_assert_double_eq_tol(a.objective, b.objective, 1e-9);
  ck_assert_double_le(a.objective, psim_ilp_objective(&r.p, warm) + 1e-12);
  psim_ilp_solution_destroy(&a);
  psim_ilp_solution_destroy(&b);
}
END_TEST

START_TEST(no_leaks) {
  long before = psim_alloc_count();
  (void)before;
  rnd_problem r;
  make(&r, 6, true, true);
  for (long n = 1; n < 12; n++) { /* allocation failures return ENOMEM cleanly */
    psim_ilp_solution a;
    psim_ilp_solution_init(&a);
    psim_alloc_fail_at(n);
    psim_status s = psim_ilp_solve(&r.p, NULL, &a);
    psim_alloc_fail_at(0);
    ck_assert(s == PSIM_OK || s == PSIM_ENOMEM || s == PSIM_EFAILED);
    psim_ilp_solution_destroy(&a);
    psim_error_clear();
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("ilp");
  TCase *t = tcase_create("ilp");
  tcase_add_test(t, ilp_equals_brute_force);
  tcase_add_test(t, ilp_with_shared_layouts_equals_brute_force);
  tcase_add_test(t, infeasible_is_clear_error);
  tcase_add_test(t, fixed_choice_and_warm_start);
  tcase_add_test(t, no_leaks);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
