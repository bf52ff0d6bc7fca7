/* hook.c - the simulator's view of the cost database (costdb/costdb_hook.h):
 * builds the kernel-shape key of a shard and looks it up (costdb/lookup.c). */
#include "costdb/costdb_hook.h"

#include <string.h>

#include "costdb/costdb.h"

static bool finish(const psim_costdb *db, psim_cost_key *key, psim_dtype dtype, double *seconds,
                   psim_cost_origin *origin) {
  psim_cost_source src;
  key->dtype = dtype;
  if (!psim_costdb_lookup(db, key, NULL, seconds, &src))
    return false;
  *origin = src == PSIM_COST_MEASURED ? PSIM_ORIGIN_MEASURED : PSIM_ORIGIN_INTERPOLATED;
  return true;
}

bool psim_costdb_hook_lookup_model(const struct psim_costdb *db, const psim_model *m,
                                   const psim_op *op, const int64_t *shard, psim_pass pass,
                                   psim_dtype dtype, double *seconds, psim_cost_origin *origin) {
  psim_cost_key key;
  if (!db || db->n_entries == 0 || (op->flops[pass] <= 0 && op->bytes[pass] <= 0))
    return false; /* free in the model (a view): the roofline gives it no time */
  if (psim_costdb_key_from_op(m, op, shard, pass, &key) != PSIM_OK)
    return false;
  return finish(db, &key, dtype, seconds, origin);
}

/* Model-free key: only what op->dims tells (uses and weight membership). */
static bool key_without_model(const psim_op *op, const int64_t *shard, psim_cost_key *k) {
  memset(k, 0, sizeof *k);
  k->kind = op->kind;
  const char *sig = psim_costdb_signature(op->kind);
  if (op->kind != PSIM_OP_MATMUL && strcmp(sig, "ra") != 0 && op->kind != PSIM_OP_DROPOUT)
    return false;
  k->n = (int32_t)strlen(sig);
  for (int32_t i = 0; i < k->n; i++)
    k->shape[i] = 1;
  for (int32_t i = 0; i < op->n_dims; i++) {
    const psim_op_dim *d = &op->dims[i];
    int slot = 0;
    if (op->kind == PSIM_OP_MATMUL)
      slot = d->use == PSIM_USE_CONTRACTED ? 3 : d->in_weight ? 2 : 1;
    else if (k->n == 2)
      slot = d->use == PSIM_USE_NORMALIZED ? 1 : 0;
    k->shape[slot] *= shard[i];
  }
  return true;
}

bool psim_costdb_hook_lookup(const struct psim_costdb *db, const psim_op *op, const int64_t *shard,
                             psim_pass pass, psim_dtype dtype, double *seconds,
                             psim_cost_origin *origin) {
  psim_cost_key key;
  if (!db || db->n_entries == 0 || !key_without_model(op, shard, &key))
    return false;
  key.pass = pass;
  return finish(db, &key, dtype, seconds, origin);
}

bool psim_costdb_hook_optimizer(const struct psim_costdb *db, double n_params, double *seconds) {
  if (!db || db->n_entries == 0 || n_params < 1)
    return false;
  psim_cost_key key;
  psim_costdb_key_adam((int64_t)n_params, PSIM_DTYPE_FP32, &key);
  psim_cost_source src;
  return psim_costdb_lookup(db, &key, NULL, seconds, &src);
}
