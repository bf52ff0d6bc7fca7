/* search.h - the searchers behind `plansim plan --search NAME`, one entry
 * point each, registered in one table (search.c).
 *
 * Every searcher takes the same options and fills the same result: the best
 * strategy found (explicit form), its full-simulation figures (the number a
 * plan reports), the evaluation count, wall time, best-so-far curve, and
 * searcher-specific statistics as a JSON object (ILP count, acceptance rate,
 * ...) that the plan embeds under search.stats. */
#ifndef PSIM_SEARCH_H
#define PSIM_SEARCH_H

#include <stdint.h>
#include <stdio.h>

#include "search/grid.h"
#include "sim/simulate.h"
#include "sim/strategy/strategy.h"

struct cJSON;

typedef struct psim_search_options {
  const psim_sim_options
      *sim;               /* simulator options (cost database, fidelity); default NULL = defaults */
  uint64_t seed;          /* default 1 */
  double budget_s;        /* time budget, s of CPU per search thread (search/budget.h); 0 = none
                             (default 60 for mcmc) */
  int64_t budget_evals;   /* evaluation budget; 0 = none */
  bool budget_from_start; /* the search policy's time budget counts from the budget clock's zero,
                             the process's start (the CLI's plan: loading the inputs counts, so
                             the whole process keeps to --budget); default false: from the
                             policy's start */
  int32_t threads;        /* search chains / worker threads; default 1 */
  const psim_strategy *init; /* start from this strategy (mcmc); NULL = searcher's choice */
  /* partial strategy of fixed choices (--fix), read once by the one reader
   * (sim/strategy/constraints.h; its file names it in messages); NULL = none */
  const struct psim_constraints *fix;
  FILE *progress;       /* progress lines (a terminal) or NULL */
  int64_t verify_every; /* debug (mcmc, exhaustive): also run the full simulation every
                           N evaluations, fail on any difference; 0 = never (default) */
  bool quick;           /* skip a searcher's costly extensions (alpa: stages of different sizes and
                           interleaved variants, issue 23); the default plan's policy sets it, its Megatron
                           grid baseline searching interleaving, to keep its wall budget (issue 18 D7);
                           default false */
  bool fp8;             /* grid (and the default plan's grid baseline): also FP8 linear layers
                           (plan --fp8; psim_grid_options.try_fp8); alpa: its plan also tried
                           with FP8 linears (alpa_plan.c try_variant); default false */
  bool keep_overlap;    /* alpa: return the chosen candidate as the DP built it, without trying it
                           with the gradient all-reduce overlapped (tests of the stage DP itself);
                           default false */
} psim_search_options;

void psim_search_options_init(psim_search_options *o);

/* Largest budgets: 1e12 evaluations (days of MCMC at a million proposals per
 * second), or 30 days of search. */
#define PSIM_SEARCH_BUDGET_MAX_EVALS 1e12
#define PSIM_SEARCH_BUDGET_MAX_S     (30 * 86400.0)

/* Parses a budget as `plan --budget` and sweep files give it: a whole number
 * of evaluations in [1, 1e12] ("20000") or a time with a unit s, m, min or h
 * in (0 s, 30 days] ("60s", "1.5h"). Returns NULL with *evals or *seconds set,
 * else why text is not a budget (decimal numbers only: strtod alone would
 * take "nan", "inf" and "0x10", and casting 1e99 to int64_t is undefined). */
const char *psim_search_budget_problem(const char *text, double *seconds, int64_t *evals);

typedef struct psim_search_result {
  psim_strategy best;       /* explicit form */
  psim_sim_result best_sim; /* full simulation of best */
  bool found;
  int64_t evaluations;
  double wall_s;
  psim_search_point *curve; /* best so far after each improvement */
  int32_t n_curve;
  size_t cap_curve;
  struct cJSON *stats;    /* searcher-specific statistics (owned), or NULL */
  char description[1024]; /* one line for people: "Megatron tp 8, pp 2, ..." (notes appended) */
} psim_search_result;

void psim_search_result_init(psim_search_result *r);
void psim_search_result_destroy(psim_search_result *r);
/* Appends a point to the best-so-far curve. */
psim_status psim_search_record(psim_search_result *r, int64_t evaluation, double wall_s,
                               double best_time_s);

/* Interruption (issue 9): searchers poll psim_interrupted() (taskgraph.h); once
 * it is set they stop and return their best strategy so far in best/best_sim
 * with found = true, as PSIM_OK or PSIM_EINTERRUPTED; plan writes it. */
typedef psim_status (*psim_searcher_fn)(const psim_model *m, psim_cluster *c,
                                        const psim_search_options *o, psim_search_result *r);

typedef struct psim_searcher {
  const char *name;     /* --search NAME */
  psim_searcher_fn run; /* NULL while not built */
  const char *summary;
} psim_searcher;

/* The Megatron grid as a searcher (grid.c). */
psim_status psim_search_grid(const psim_model *m, psim_cluster *c, const psim_search_options *o,
                             psim_search_result *r);

#endif
