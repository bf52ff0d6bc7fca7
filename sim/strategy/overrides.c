/* overrides.c - per-op overrides of an explicit strategy (docs/strategy.md,
 * "ops"): read by the one constraints reader (constraints.h), checked for
 * structure, then applied exactly: split degrees, devices and replicas. */
#define _POSIX_C_SOURCE 200809L
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/strategy/strategy_impl.h"

static psim_status read_op_override(psim_jctx *c, const psim_constraint_op *e) {
  static const char *const keys[] = {"split", "devices", "replicas", NULL};
  PSIM_CHECK(psim_json_check_keys(c, e->json, keys));
  const cJSON *d = NULL;
  if (e->split.json) {
    size_t sv = psim_jctx_key(c, "split");
    PSIM_CHECK(psim_json_expect_object(c, e->split.json));
    for (int32_t k = 0; k < e->split.n; k++) {
      size_t s2 = psim_jctx_key(c, e->split.entry[k].key);
      int64_t deg = 0;
      PSIM_CHECK(psim_json_value_int(c, e->split.entry[k].json, 1, MAX_DEGREE, &deg));
      psim_jctx_pop(c, s2);
    }
    psim_jctx_pop(c, sv);
  }
  int32_t r = 1;
  PSIM_CHECK(psim_strategy_int32_key(c, e->json, "replicas", false, 1, MAX_DEVICES, &r));
  return psim_strategy_check_devices_key(c, e->json, "devices", &d);
}

psim_status psim_strategy_read_overrides(psim_jctx *c, const cJSON *root, psim_strategy_spec *sp) {
  psim_constraints *k = &sp->overrides;
  PSIM_CHECK(psim_constraints_read_ops(cJSON_GetObjectItemCaseSensitive(root, "ops"), k));
  if (!k->ops_json)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, "ops");
  PSIM_CHECK(psim_json_expect_object(c, k->ops_json));
  for (int32_t i = 0; i < k->n_ops; i++) {
    size_t s2 = psim_jctx_key(c, k->ops[i].pattern);
    for (int32_t j = 0; j < i; j++)
      if (strcmp(k->ops[j].pattern, k->ops[i].pattern) == 0)
        return psim_jerr(c, "duplicate op '%.80s'", k->ops[i].pattern);
    PSIM_CHECK(read_op_override(c, &k->ops[i]));
    psim_jctx_pop(c, s2);
  }
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status split_dim(psim_jctx *c, const psim_strategy *s, const psim_model *m,
                             const psim_op *op, const psim_constraint_entry *it, int32_t *degree) {
  int32_t d = -1; /* by dim name first, else by role name */
  for (int32_t j = 0; j < op->n_dims && d < 0; j++)
    if (strcmp(m->dims[op->dims[j].dim].name, it->key) == 0)
      d = j;
  for (int32_t j = 0; j < op->n_dims && d < 0; j++) {
    psim_role r = m->dims[op->dims[j].dim].role;
    if (r != PSIM_ROLE_NONE && strcmp(psim_role_name(r), it->key) == 0)
      d = j;
  }
  if (d < 0) {
    char list[400] = "";
    for (int32_t j = 0; j < op->n_dims; j++) {
      strncat(list, j ? ", " : "", sizeof list - strlen(list) - 1);
      strncat(list, m->dims[op->dims[j].dim].name, sizeof list - strlen(list) - 1);
    }
    return psim_jerr(c, "op '%s' has no dim '%.80s' (its dims: %s)", op->name, it->key, list);
  }
  int64_t ext = psim_strategy_dim_extent(s, m, op->dims[d].dim);
  int64_t deg = 0;
  PSIM_CHECK(psim_json_value_int(c, it->json, 1, MAX_DEGREE, &deg));
  if (deg > ext)
    return psim_jerr(c, "degree %lld is larger than the dim (%lld per micro-batch)", (long long)deg,
                     (long long)ext);
  degree[d] = (int32_t)deg;
  return PSIM_OK;
}

static psim_status override_split(psim_jctx *c, const psim_strategy *s, const psim_model *m,
                                  const psim_op *op, const psim_constraint_map *split,
                                  psim_op_config *cfg) {
  for (int32_t j = 0; j < PSIM_MAX_OP_DIMS; j++)
    cfg->degree[j] = 1;
  size_t sv = psim_jctx_key(c, "split");
  for (int32_t k = 0; k < split->n; k++) {
    size_t s2 = psim_jctx_key(c, split->entry[k].key);
    PSIM_CHECK(split_dim(c, s, m, op, &split->entry[k], cfg->degree));
    psim_jctx_pop(c, s2);
  }
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

/* devices (given, or the first prod * replicas of the op's stage) and replicas. */
static psim_status override_devices(psim_jctx *c, const psim_strategy *s,
                                    const psim_constraint_op *e, psim_cluster *cl, int64_t prod,
                                    psim_op_config *cfg) {
  const cJSON *devs = e->devices;
  assert(cfg->stage >= 0 && cfg->stage < s->n_stages * s->virtual_stages);
  const psim_stage *st = &s->stages[cfg->stage];
  int64_t r = 0;
  PSIM_CHECK(psim_json_int(c, e->json, "replicas", false, 1, MAX_DEVICES, &r));
  int64_t avail = st->n_devices;
  if (devs) {
    psim_op_config_destroy(cfg);
    size_t sv = psim_jctx_key(c, "devices");
    int32_t *read = NULL, n = 0;
    PSIM_CHECK(psim_strategy_read_devices(c, devs, cl, &read, &n));
    cfg->devices = psim_devlist_from(read, n);
    psim_free(read);
    if (!cfg->devices)
      return psim_error(PSIM_ENOMEM, "out of memory reading a device list");
    cfg->n_devices = n;
    psim_jctx_pop(c, sv);
    avail = cfg->n_devices;
  }
  if (r == 0)
    r = avail % prod == 0 ? avail / prod : 0;
  if (r == 0 || prod * r > avail || (devs && prod * r != avail))
    return psim_jerr(c,
                     "%lld devices do not fit %lld shards x %lld replicas (the devices must "
                     "number the product of the split degrees times replicas)",
                     (long long)avail, (long long)prod, (long long)(r ? r : 1));
  cfg->replicas = (int32_t)r;
  if (!devs) { /* the template's list may be shared by the op's peers: its own copy */
    int32_t *d;
    PSIM_CHECK(psim_op_config_writable(cfg, (int32_t)(prod * r), &d));
    cfg->n_devices = (int32_t)(prod * r);
    memcpy(d, st->devices, (size_t)cfg->n_devices * sizeof *d);
  }
  return PSIM_OK;
}

static psim_status apply_override(psim_jctx *c, psim_strategy *s, const psim_model *m,
                                  psim_cluster *cl, int32_t i, const psim_constraint_op *e) {
  assert(i >= 0 && i < s->n_ops);
  psim_op_config *cfg = &s->ops[i];
  if (e->split.json)
    PSIM_CHECK(override_split(c, s, m, &m->ops[i], &e->split, cfg));
  int64_t prod = 1;
  for (int32_t j = 0; j < m->ops[i].n_dims; j++) {
    prod *= cfg->degree[j];
    if (prod > MAX_DEVICES)
      return psim_jerr(c, "the split makes more than %d shards", MAX_DEVICES);
  }
  return override_devices(c, s, e, cl, prod, cfg);
}

/* An explicit strategy names an op exactly unless its key holds a '*'. */
static bool override_matches(const psim_constraint_op *e, const char *name) {
  return e->star ? psim_constraint_op_matches(e, name) : strcmp(e->pattern, name) == 0;
}

psim_status psim_strategy_apply_overrides(psim_jctx *c, const psim_strategy_spec *sp,
                                          psim_strategy *s, const psim_model *m, psim_cluster *cl) {
  const psim_constraints *k = &sp->overrides;
  if (!k->ops_json)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, "ops");
  for (int32_t e = 0; e < k->n_ops; e++) {
    size_t s2 = psim_jctx_key(c, k->ops[e].pattern);
    int32_t hits = 0;
    for (int32_t i = 0; i < m->n_ops; i++) {
      if (!override_matches(&k->ops[e], m->ops[i].name))
        continue;
      hits++;
      PSIM_CHECK(apply_override(c, s, m, cl, i, &k->ops[e]));
    }
    if (hits == 0)
      return psim_jerr(c, k->ops[e].star ? "the pattern matches no op of the model"
                                         : "unknown op (the model has no op of this name)");
    psim_jctx_pop(c, s2);
  }
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}
