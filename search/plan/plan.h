/* plan.h - plans (plansim.plan/1): the explicit strategy, the full-simulation
 * figures of it, the searcher's statistics and the baselines beside it. */
#ifndef PSIM_PLAN_H
#define PSIM_PLAN_H

#include "search/grid.h"

struct cJSON;
#include "sim/simulate.h"

typedef struct psim_plan_info {
  const char *searcher; /* "grid", ... */
  uint64_t seed;
  const char *budget; /* as given, or NULL */
  int64_t evaluations;
  double wall_s;
  const psim_search_point *curve;
  int32_t n_curve;
  const psim_sim_result *data_parallel; /* baseline, or NULL when it does not run */
  const psim_sim_result *grid;          /* best Megatron grid plan, or NULL */
  const struct cJSON *stats;            /* searcher-specific statistics, or NULL */
  const char *description;              /* one line describing the plan */
  const char *grid_description;         /* the grid baseline's configuration, or NULL */
  const char *plan_from; /* where the strategy came from (search/policy/policy.h): the searcher,
                            "mcmc" (auto's refinement), "data_parallel" or "megatron_grid"
                            (a baseline faster than the search's plan); NULL = the searcher */
} psim_plan_info;

/* Builds the plan document. The caller owns *out. */
psim_status psim_plan_to_json(const psim_model *m, const psim_cluster *c, const psim_strategy *s,
                              const psim_sim_result *r, const psim_plan_info *info,
                              struct cJSON **out);

/* Removes the wall-clock figures (search and simulation seconds, proposals
 * per second; the keys of psim_plan_timing_keys) from a plan document, at any
 * depth, so that a reproducible search writes a byte-identical file. */
void psim_plan_strip_timings(struct cJSON *root);

/* Checks a plan document's top level: a strategy object, no member a plan
 * does not have, and those present of the right type (the prediction's
 * iteration time a non-negative number and its fits a boolean, the search's
 * searcher and plan_from strings, baselines an object of data_parallel and
 * megatron_grid figures, each with iteration_time_s and fits). Hand-written plans of format,
 * strategy and the file keys alone pass (docs/plan.md). PSIM_EINPUT naming
 * FILE and the JSON path otherwise. */
psim_status psim_plan_check(const struct cJSON *root, const char *file);

/* When root is a plan, returns its "strategy" member; else root itself. */
const struct cJSON *psim_plan_strategy_json(const struct cJSON *root);

/* Refuses (PSIM_EINPUT, both names) a plan whose recorded "model" is not m's name: a
 * plan made for another model (issue 24). Not a plan, or no name recorded: PSIM_OK. */
psim_status psim_plan_check_model(const char *file, const struct cJSON *root, const psim_model *m);

/* Loads a strategy file, or a plan file standing in for its strategy, and expands it
 * against the model and the cluster (what `simulate` and the public API read). */
psim_status psim_plan_load_strategy(const char *file, const psim_model *m, psim_cluster *c,
                                    psim_strategy *out);

#endif
