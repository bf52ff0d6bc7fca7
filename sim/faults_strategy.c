/* faults_strategy.c - the strategy after a failure or a join: a device's
 * data-parallel slice dropped, or one more data-parallel worker (faults.h). */
#include <assert.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/faults.h"
#include "sim/faults_impl.h"

int32_t psim_faults_batch_index(const psim_model *m, const psim_op *op) {
  int32_t bd = m->role_dim[PSIM_ROLE_BATCH];
  for (int32_t i = 0; i < op->n_dims; i++)
    if (bd >= 0 && op->dims[i].dim == bd)
      return i;
  return -1;
}

/* Coordinate of shard `shard` along dim i (row-major over op->dims). */
int32_t psim_faults_shard_coord(const psim_op *op, const psim_op_config *cfg, int32_t shard,
                                int32_t i) {
  assert(i >= 0 && i < op->n_dims);
  int32_t rem = shard;
  for (int32_t j = op->n_dims - 1; j > i; j--)
    rem /= cfg->degree[j];
  return rem % cfg->degree[i];
}

static int32_t entry_of(const psim_op_config *cfg, int32_t dev) {
  for (int32_t e = 0; e < cfg->n_devices; e++)
    if (cfg->devices[e] == dev)
      return e;
  return -1;
}

/* Removes the slice of batch index j from op o's config (its list made its own first: the
 * copied strategy shares it with the original and with other ops, devlist.h). */
static psim_status drop_slice(const psim_op *op, psim_op_config *cfg, int32_t ib, int32_t j) {
  int32_t *d, n = 0;
  PSIM_CHECK(psim_op_config_writable(cfg, cfg->n_devices, &d));
  for (int32_t e = 0; e < cfg->n_devices; e++)
    if (psim_faults_shard_coord(op, cfg, e / cfg->replicas, ib) != j)
      d[n++] = d[e];
  cfg->n_devices = n;
  cfg->degree[ib]--;
  return PSIM_OK;
}

/* Stage device sets: keep only devices some op still uses. */
static psim_status trim_stages(const psim_cluster *c, psim_strategy *s) {
  uint8_t *used = psim_calloc((size_t)c->n_devices, 1);
  if (!used)
    return psim_error(PSIM_ENOMEM, "out of memory");
  for (int32_t o = 0; o < s->n_ops; o++)
    for (int32_t e = 0; e < s->ops[o].n_devices; e++)
      used[s->ops[o].devices[e]] = 1;
  int32_t nv = s->n_stages * (s->virtual_stages > 0 ? s->virtual_stages : 1);
  for (int32_t v = 0; v < nv; v++) {
    psim_stage *st = &s->stages[v];
    int32_t n = 0;
    for (int32_t k = 0; k < st->n_devices; k++)
      if (used[st->devices[k]])
        st->devices[n++] = st->devices[k];
    st->n_devices = n;
  }
  psim_free(used);
  return PSIM_OK;
}

static void drop_server(psim_strategy *s, int32_t dev) {
  int32_t n = 0;
  for (int32_t i = 0; i < s->ps.n_servers; i++)
    if (s->ps.servers[i] != dev)
      s->ps.servers[n++] = s->ps.servers[i];
  s->ps.n_servers = n;
  if (s->ps.replicas > n)
    s->ps.replicas = n > 0 ? n : 1;
}

static psim_status drop_ops(const psim_model *m, psim_strategy *s, int32_t dev) {
  for (int32_t o = 0; o < s->n_ops; o++) {
    psim_op_config *cfg = &s->ops[o];
    int32_t e = entry_of(cfg, dev);
    if (e < 0)
      continue;
    int32_t ib = psim_faults_batch_index(m, &m->ops[o]);
    if (ib < 0 || cfg->degree[ib] <= 1)
      return psim_error(PSIM_EINPUT,
                        "op %s on device %d is not split on the batch dim: no "
                        "data-parallel redundancy",
                        m->ops[o].name, (int)dev);
    PSIM_CHECK(drop_slice(&m->ops[o], cfg, ib,
                          psim_faults_shard_coord(&m->ops[o], cfg, e / cfg->replicas, ib)));
  }
  return PSIM_OK;
}

psim_status psim_faults_drop_device(const psim_model *m, const psim_cluster *c,
                                    const psim_strategy *s, int32_t dev, psim_strategy *out) {
  PSIM_CHECK(psim_strategy_copy(s, out));
  psim_status st = drop_ops(m, out, dev);
  if (st == PSIM_OK && out->sync == PSIM_SYNC_PS) {
    drop_server(out, dev);
    if (out->ps.n_servers == 0)
      st = psim_error(PSIM_EINPUT, "no parameter server left");
  }
  if (st == PSIM_OK)
    st = trim_stages(c, out);
  if (st == PSIM_OK && out->tmpl.dp > 1 && out->sync != PSIM_SYNC_PS)
    out->tmpl.dp--;
  if (st == PSIM_OK)
    st = psim_strategy_validate(out, m, c, "the strategy after the failure");
  if (st != PSIM_OK)
    psim_strategy_destroy(out);
  return st;
}

static psim_status add_to_op(const psim_model *m, psim_op_config *cfg, int32_t o, int32_t dev) {
  int32_t ib = psim_faults_batch_index(m, &m->ops[o]);
  for (int32_t i = 0; i < m->ops[o].n_dims; i++)
    if (i != ib && cfg->degree[i] != 1)
      return psim_error(PSIM_EINPUT, "join: op %s is split on more than the batch dim",
                        m->ops[o].name);
  if (ib < 0 || cfg->replicas != 1)
    return psim_error(PSIM_EINPUT, "join: op %s is not data-parallel", m->ops[o].name);
  int32_t *d; /* its own list (copy on write: the other ops and the original share it) */
  PSIM_CHECK(psim_op_config_writable(cfg, cfg->n_devices + 1, &d));
  d[cfg->n_devices++] = dev;
  cfg->degree[ib]++;
  return PSIM_OK;
}

static psim_status add_to_stage(psim_stage *st, int32_t dev) {
  for (int32_t k = 0; k < st->n_devices; k++)
    if (st->devices[k] == dev)
      return PSIM_OK;
  int32_t *d = psim_realloc(st->devices, sizeof *d * ((size_t)st->n_devices + 1));
  if (!d)
    return psim_error(PSIM_ENOMEM, "out of memory");
  st->devices = d;
  d[st->n_devices++] = dev;
  return PSIM_OK;
}

psim_status psim_faults_add_device(const psim_model *m, const psim_cluster *c,
                                   const psim_strategy *s, int32_t dev, psim_strategy *out) {
  PSIM_CHECK(psim_strategy_copy(s, out));
  psim_status st = PSIM_OK;
  for (int32_t o = 0; o < out->n_ops && st == PSIM_OK; o++) {
    if (entry_of(&out->ops[o], dev) >= 0)
      st = psim_error(PSIM_EINPUT, "join: device %d already works", (int)dev);
    else
      st = add_to_op(m, &out->ops[o], o, dev);
    if (st == PSIM_OK)
      st = add_to_stage(&out->stages[out->ops[o].stage], dev);
  }
  if (st == PSIM_OK && out->tmpl.dp > 0 && out->sync != PSIM_SYNC_PS)
    out->tmpl.dp++;
  if (st == PSIM_OK)
    st = psim_strategy_validate(out, m, c, "the strategy after the join");
  if (st != PSIM_OK)
    psim_strategy_destroy(out);
  return st;
}
