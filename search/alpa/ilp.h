/* ilp.h - the intra-operator sharding integer program of the Alpa optimizer
 * (Zheng et al., OSDI'22, section 4.2), solved with GLPK. Every GLPK call of
 * plansim lives in ilp.c, fenced the igraph way: an error hook turns GLPK's
 * fatal errors into PSIM_EFAILED and a terminal hook captures its output.
 *
 * Problem. Groups g = 0..n-1 (ops after merging trivial ops), each choosing
 * one of n_choices[g] strategies; cost[g][i] is the time of choice i; edges
 * (a, b) add cost[i * n_b + j] when a picks i and b picks j. Formulation:
 *   min  sum_g sum_i c_gi x_gi + sum_e sum_ij r_eij y_eij
 *   s.t. sum_i x_gi = 1                       (one-hot)
 *        sum_j y_eij = x_ai, sum_i y_eij = x_bj (edge variables linearise
 *                                                the quadratic term)
 *   (in ilp.c, choices with identical rows/columns of an edge's cost matrix
 *   share one class and y runs over pairs of classes: same optimum, ~5x fewer
 *   columns on 2-D meshes)
 *        sum_g sum_i m_gi x_gi <= mem_limit   (memory row, when given)
 *        x binary, 0 <= y <= 1 (integral at any integral x).
 * Choices not allowed (fixed variables of --fix) get the upper bound 0. */
#ifndef PSIM_ILP_H
#define PSIM_ILP_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/core/status.h"

typedef struct psim_ilp_edge {
  int32_t a, b;       /* group indices, a != b */
  const double *cost; /* n_choices[a] * n_choices[b], row-major (i of a slowest), s */
} psim_ilp_edge;

typedef struct psim_ilp_problem {
  int32_t n_groups;
  const int32_t *n_choices;  /* per group, >= 1 */
  const double *const *cost; /* per group: n_choices[g] costs, s (>= 0) */
  const double *const *mem;  /* per group: bytes per choice, or NULL = no memory row */
  double mem_limit;          /* bytes; used when mem != NULL */
  int32_t n_edges;
  const psim_ilp_edge *edges;
  const uint8_t *const *allowed; /* per group: 0 = choice excluded; NULL = all allowed */
  const int32_t *warm;           /* per group a feasible start (data parallel), or NULL */
} psim_ilp_problem;

typedef struct psim_ilp_options {
  double time_limit_s; /* per solve, CPU s of the solving thread; default 10 s */
  bool presolve;       /* glp_intopt's presolver; default true */
} psim_ilp_options;

void psim_ilp_options_init(psim_ilp_options *o);

typedef struct psim_ilp_solution {
  int32_t *choice;  /* n_groups entries (owned) */
  double objective; /* s */
  double gap;       /* relative MIP gap at exit; 0 when proven optimal */
  bool optimal;     /* false: time limit hit, incumbent returned */
  double solve_s;   /* CPU time of the solve (its thread's), s */
} psim_ilp_solution;

void psim_ilp_solution_init(psim_ilp_solution *s);
void psim_ilp_solution_destroy(psim_ilp_solution *s);

/* Solves the problem. PSIM_EFAILED with a clear message when it is
 * infeasible (no choice fits the memory row or the allowed sets) or when
 * GLPK fails; PSIM_EINTERRUPTED when interrupted. A time-out with an
 * incumbent returns PSIM_OK with optimal = false and the gap.
 * Worst case exponential (branch and bound); the problems here are small. */
psim_status psim_ilp_solve(const psim_ilp_problem *p, const psim_ilp_options *o,
                           psim_ilp_solution *s);

/* Frees the calling thread's GLPK environment: worker threads that solved
 * ILPs call it before they end (GLPK keeps one environment per thread). */
void psim_ilp_thread_exit(void);

/* The same objective by enumeration of every assignment (tests; refuses
 * more than 10^7 assignments with PSIM_ELIMIT). Infeasible: PSIM_EFAILED. */
psim_status psim_ilp_brute_force(const psim_ilp_problem *p, psim_ilp_solution *s);

/* Objective of an assignment (INFINITY when it breaks a constraint). */
double psim_ilp_objective(const psim_ilp_problem *p, const int32_t *choice);

#endif
