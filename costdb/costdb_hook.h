/* costdb_hook.h - the one interface through which the simulator asks the
 * cost database for a measured or interpolated time (costdb/lookup.c). */
#ifndef PSIM_COSTDB_HOOK_H
#define PSIM_COSTDB_HOOK_H

#include <stdbool.h>

#include "costdb/cost.h"
#include "sim/ir/model.h"

struct psim_costdb;

/* True when db has a measured or interpolated time for the shard; *seconds
 * and *origin are set then. Must be O(1) for exact hits. */
bool psim_costdb_hook_lookup(const struct psim_costdb *db, const psim_op *op, const int64_t *shard,
                             psim_pass pass, psim_dtype dtype, double *seconds,
                             psim_cost_origin *origin);

/* The same with the model, which the kernel-shape key needs to tell batch
 * dims from M and N (which input carries each dim; costdb/costdb.h). Prefer
 * this one: without the model, matmul batch dims count as M and attention,
 * element-wise, embedding, conv and data-movement ops are never found. */
bool psim_costdb_hook_lookup_model(const struct psim_costdb *db, const psim_model *m,
                                   const psim_op *op, const int64_t *shard, psim_pass pass,
                                   psim_dtype dtype, double *seconds, psim_cost_origin *origin);

/* True when db holds (or interpolates) the optimizer update of n_params fp32
 * parameters; *seconds is set then. */
bool psim_costdb_hook_optimizer(const struct psim_costdb *db, double n_params, double *seconds);

#endif
