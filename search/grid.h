/* grid.h - the Megatron grid baseline: every tp x pp x dp x micro-batch x
 * recompute combination that fits, simulated, the fastest kept. */
#ifndef PSIM_GRID_H
#define PSIM_GRID_H

#include <stdio.h>

#include "sim/simulate.h"
#include "sim/strategy/strategy.h"

typedef struct psim_grid_options {
  int32_t max_tp;           /* default: devices per node (NVLink domain) */
  int32_t micro_batches[8]; /* micro-batch sizes tried; default 1, 2, 4, 8 */
  int32_t n_micro_batches;
  bool try_recompute;      /* none, selective and full; default true */
  int64_t max_evaluations; /* default 10,000 */
  double budget_s;         /* wall-time budget, s; 0 = none (default). The grid stops before a
                              configuration that the mean cost of those simulated so far says
                              would end past it (issue 18: a baseline affordable at scale) */
  const psim_sim_options *sim;
  FILE *progress; /* progress lines (a terminal) or NULL */
} psim_grid_options;

void psim_grid_options_init(psim_grid_options *o);

/* One evaluated point of the search, for the best-so-far curve. */
typedef struct psim_search_point {
  int64_t evaluation;
  double wall_s;
  double best_time_s;
} psim_search_point;

typedef struct psim_grid_result {
  psim_megatron_opts best; /* fastest configuration that fits */
  psim_sim_result best_sim;
  bool found;
  int64_t evaluations, feasible;
  int64_t total;        /* configurations in the grid (tp x pp pairs x micro-batches x modes) */
  int64_t visited;      /* configurations reached: simulated, refused by the template, pruned */
  int64_t pruned;       /* skipped: their pair's weights, gradients and optimizer state alone
                           exceed a device's memory */
  bool stopped_by_time; /* budget_s ran out before the grid was done */
  double wall_s;
  psim_search_point *curve; /* best so far after each improvement */
  int32_t n_curve;
} psim_grid_result;

void psim_grid_result_init(psim_grid_result *r);
void psim_grid_result_destroy(psim_grid_result *r);

/* Searches the grid. Static memory (weights, gradients, optimizer state) does
 * not depend on the micro-batch or the recompute mode, so once one
 * configuration of a (tp, pp) pair is over memory on static memory alone, the
 * pair's other configurations are skipped unsimulated (pruned). Needs the model's batch, heads and
 * ffn roles (ops of a Megatron-style transformer); PSIM_EINPUT otherwise. Strategies that do not
 * expand (tp not dividing the heads, ...) are skipped, not errors. */
psim_status psim_grid_search(const psim_model *m, psim_cluster *c, const psim_grid_options *o,
                             psim_grid_result *r);

#endif
