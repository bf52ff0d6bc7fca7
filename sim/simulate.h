/* simulate.h - one training iteration of (model, cluster, strategy): build the
 * task graph, simulate it, and derive the figures a plan reports.
 *
 * Folding (DESIGN.md 4, "Symmetry"): when every op of a pipeline stage is
 * spread evenly over all of the stage's devices, those devices do identical
 * work, so only one representative device per stage is simulated. Its
 * collectives are still costed over the real topology with every concurrent
 * group sharing links, and transfers from its (unsimulated) peers are kept as
 * tasks on its own links. psim_sim_options.fold = false simulates every
 * device; tests check that both agree on small clusters. */
#ifndef PSIM_SIMULATE_H
#define PSIM_SIMULATE_H

#include "sim/builder/memory.h" /* the memory model's rules, for searchers that estimate memory */
#include "sim/engine/simulation.h"

psim_status psim_simulate(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                          const psim_sim_options *o, psim_sim_result *r);

const char *psim_comm_kind_name(int kind);
/* "parameter_server", "host", "straggler" (psim_wait_kind). */
const char *psim_wait_kind_name(int kind);

/* Adds the result's figures to a JSON object (the keys of simulate --json). */
struct cJSON;
psim_status psim_sim_result_to_json(const psim_sim_result *r, struct cJSON *root);

#endif
