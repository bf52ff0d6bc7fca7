/* policy.h - search policy: what `--search auto` means and the baselines a plan
 * is compared with. `plansim plan` and sweeps both call psim_policy_plan, so a
 * searcher name means the same search in both. */
#ifndef PSIM_POLICY_H
#define PSIM_POLICY_H

#include <stdbool.h>

#include "search/search.h"
#include "sim/engine/simulation.h"

/* Evaluations of the MCMC refinement `auto` runs after the Alpa optimizer when
 * no budget is given: enough for local moves around the Alpa plan, short
 * enough for an interactive first plan. */
#define PSIM_POLICY_AUTO_REFINE_EVALS 100

/* The searcher NAME runs: "auto" is Alpa (then MCMC refinement) when Alpa is
 * built, the Megatron grid when it is not; any other name is itself. */
const char *psim_policy_searcher(const char *name);
/* True when NAME ("auto" included) names a searcher that is built. */
bool psim_policy_available(const char *name);

typedef struct psim_policy_result {
  const char *searcher;      /* the searcher that ran (auto resolved); static */
  psim_search_result result; /* the plan found */
  psim_search_result grid;   /* the Megatron grid baseline, when have_grid */
  psim_sim_result dp;        /* the data-parallel baseline, when have_dp */
  bool have_grid, have_dp;
  bool stopped; /* interrupted after a strategy was found: result holds it, no baselines */
} psim_policy_result;

void psim_policy_result_init(psim_policy_result *r);
void psim_policy_result_destroy(psim_policy_result *r);

/* Runs searcher NAME ("auto" resolved and refined as above) with options o;
 * then, when baselines and the search was not interrupted, the data-parallel
 * strategy over every device and (unless the searcher is the grid) the best
 * Megatron grid plan, simulated with o->sim. An interrupted search that found
 * a strategy is PSIM_OK with stopped set. PSIM_EUNIMPLEMENTED when the
 * searcher is not built. */
psim_status psim_policy_plan(const psim_model *m, psim_cluster *c, const char *name,
                             const psim_search_options *o, bool baselines, psim_policy_result *r);

#endif
