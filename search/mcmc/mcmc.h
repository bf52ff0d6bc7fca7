/* mcmc.h - FlexFlow's MCMC search over the SOAP space, and exhaustive search.
 *
 * MCMC (Metropolis-Hastings over whole strategies): a proposal gives one op a
 * random configuration from its space, or copies a neighbour's configuration
 * along a tensor edge (propagation); the proposal is costed by delta
 * simulation (delta.h) and accepted with probability
 * min(1, exp(-beta * (new - cur) / cur)); strategies over memory are
 * rejected; a chain that has not improved its best for restart_after
 * evaluations restarts from its best. Chains (threads) run with seeds
 * seed, seed + 1, ...; with an evaluation budget each chain gets a fixed share
 * and the best is merged by (time, chain), so the result does not depend on
 * thread timing: same seed + evaluation budget -> the same plan.
 *
 * Start: --init when given, else the faster of data parallel over every
 * device and (for models with heads and ffn roles) the best Megatron grid
 * strategy. Stage structure and micro-batches of the start are kept.
 *
 * --fix (mcmc_start.c): a partial strategy of constraints the search never
 * changes:
 *   {"ops": {"NAME-or-GLOB": {"split": {DIM: degree}, "devices": [..]}},
 *    "split": {DIM-or-ROLE: degree}, "layout": {DIM-or-ROLE: AXIS},
 *    "mesh": {"axes": {AXIS: size}}, "recompute": MODE}
 * An op given split and devices is fixed whole (replicas from the device
 * count); split alone fixes those dims' degrees; devices alone fix the
 * placement (the split is searched). The top-level split and a layout fix a
 * dim's degree in every op that has it. Any other key is refused with its
 * JSON path (docs/search.md). */
#ifndef PSIM_MCMC_H
#define PSIM_MCMC_H

#include "search/mcmc/space.h"
#include "search/search.h"

typedef struct psim_mcmc_options {
  double beta;           /* Metropolis inverse temperature; default 50 (a 2% worse
                            strategy is accepted with probability e^-1) */
  double propagate_p;    /* share of proposals that propagate a neighbour's config; default 0.3 */
  int64_t restart_after; /* evaluations without a new chain best before a restart;
                            0 = auto: max(500, chain budget / 10) (default) */
  int64_t verify_every;  /* debug: full simulation every N evaluations (delta.h); default 0 */
  int64_t exhaustive_limit; /* largest space exhaustive search enumerates; default 2,000,000 */
  psim_space_options space;
} psim_mcmc_options;

void psim_mcmc_options_init(psim_mcmc_options *o);

/* MCMC with explicit options (tests and benchmarks). */
psim_status psim_mcmc_run(const psim_model *m, psim_cluster *c, const psim_search_options *o,
                          const psim_mcmc_options *mo, psim_search_result *r);
/* Exhaustive search with explicit options: every strategy of the space
 * around the start strategy; PSIM_ELIMIT (message with the space's size) when
 * it holds more than mo->exhaustive_limit (or o->budget_evals when set). */
psim_status psim_exhaustive_run(const psim_model *m, psim_cluster *c, const psim_search_options *o,
                                const psim_mcmc_options *mo, psim_search_result *r);

/* The searcher-table entries (defaults). */
psim_status psim_search_mcmc(const psim_model *m, psim_cluster *c, const psim_search_options *o,
                             psim_search_result *r);
psim_status psim_search_exhaustive(const psim_model *m, psim_cluster *c,
                                   const psim_search_options *o, psim_search_result *r);

/* Shared by mcmc.c and exhaustive.c: the start strategy (init, data parallel
 * or grid) with --fix applied, and the space around it with fixed ops marked. */
psim_status psim_mcmc_start(const psim_model *m, psim_cluster *c, const psim_search_options *o,
                            const psim_mcmc_options *mo, psim_strategy *start, psim_space *sp);
/* One line describing strategy s against data parallelism. */
void psim_mcmc_describe(const psim_model *m, const psim_strategy *s, const char *searcher,
                        char *buf, size_t n);

#endif
