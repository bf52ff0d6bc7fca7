/* strategy_write.c - a strategy written back as the explicit form of
 * plansim.strategy/1 (docs/strategy.md). */
#include <assert.h>
#include <string.h>

#include "sim/core/json.h"
#include "sim/strategy/strategy_impl.h"

/* ---------------- writing the explicit form ---------------- */

static psim_status enomem(void) {
  return psim_error(PSIM_ENOMEM, "out of memory writing a strategy");
}

static psim_status add_item(cJSON *parent, const char *key, cJSON *item) {
  if (!item)
    return enomem();
  /* attaching fails when the key's copy cannot be allocated: the item is then ours */
  bool added = key ? cJSON_AddItemToObject(parent, key, item) : cJSON_AddItemToArray(parent, item);
  if (!added) {
    cJSON_Delete(item);
    return enomem();
  }
  return PSIM_OK;
}

/* A device list: {"first","count","stride"} when it is an arithmetic
 * progression of 3 or more entries, else an array of indices. */
static psim_status devices_json(const int32_t *d, int32_t n, cJSON *parent, const char *key) {
  assert(n == 0 || d);
  bool arith = n >= 3;
  int32_t stride = n >= 2 ? d[1] - d[0] : 1;
  for (int32_t i = 1; arith && i < n; i++)
    arith = d[i] - d[i - 1] == stride;
  if (arith && stride >= 1) {
    cJSON *o = cJSON_CreateObject();
    PSIM_CHECK(add_item(parent, key, o));
    PSIM_CHECK(psim_json_add_number(o, "first", d[0]));
    PSIM_CHECK(psim_json_add_number(o, "count", n));
    return stride == 1 ? PSIM_OK : psim_json_add_number(o, "stride", stride);
  }
  cJSON *a = cJSON_CreateArray();
  PSIM_CHECK(add_item(parent, key, a));
  for (int32_t i = 0; i < n; i++)
    PSIM_CHECK(add_item(a, NULL, cJSON_CreateNumber(d[i])));
  return PSIM_OK;
}

/* A layout object: key -> axis name, or -> [axis names] for a key with several
 * entries (in entry order). */
static psim_status layout_json(const psim_mesh *mesh, cJSON *root, const char *name,
                               const char (*keys)[PSIM_MESH_NAME], const int32_t *axes, int32_t n) {
  if (n == 0)
    return PSIM_OK;
  cJSON *layout = NULL;
  PSIM_CHECK(psim_json_add_object(root, name, &layout));
  for (int32_t k = 0; k < n; k++) {
    if (cJSON_GetObjectItemCaseSensitive(layout, keys[k]))
      continue; /* written with its first entry */
    int32_t count = 0;
    for (int32_t j = k; j < n; j++)
      count += strcmp(keys[j], keys[k]) == 0;
    if (count == 1) {
      PSIM_CHECK(psim_json_add_string(layout, keys[k], mesh->axis[axes[k]]));
      continue;
    }
    cJSON *list = cJSON_CreateArray();
    PSIM_CHECK(add_item(layout, keys[k], list));
    for (int32_t j = k; j < n; j++)
      if (strcmp(keys[j], keys[k]) == 0)
        PSIM_CHECK(add_item(list, NULL, cJSON_CreateString(mesh->axis[axes[j]])));
  }
  return PSIM_OK;
}

static psim_status mesh_json(const psim_strategy *s, cJSON *root) {
  cJSON *mesh = NULL, *axes = NULL, *fb = NULL;
  PSIM_CHECK(psim_json_add_object(root, "mesh", &mesh));
  if (s->mesh.n_axes > 0) {
    PSIM_CHECK(psim_json_add_object(mesh, "axes", &axes));
    for (int32_t a = 0; a < s->mesh.n_axes; a++)
      PSIM_CHECK(psim_json_add_number(axes, s->mesh.axis[a], s->mesh.size[a]));
  }
  if (s->n_stages * s->virtual_stages == 1)
    PSIM_CHECK(devices_json(s->stages[0].devices, s->stages[0].n_devices, mesh, "devices"));
  for (int32_t a = 0; a < s->mesh.n_axes; a++) {
    if (s->mesh.fallback[a][0] == '\0')
      continue;
    if (!fb)
      PSIM_CHECK(psim_json_add_object(mesh, "fallback", &fb));
    PSIM_CHECK(psim_json_add_string(fb, s->mesh.axis[a], s->mesh.fallback[a]));
  }
  PSIM_CHECK(layout_json(&s->mesh, root, "layout", s->mesh.layout_key, s->mesh.layout_axis,
                         s->mesh.n_layout));
  return layout_json(&s->mesh, root, "expert_layout", s->mesh.expert_layout_key,
                     s->mesh.expert_layout_axis, s->mesh.n_expert_layout);
}

/* The layer override as the names of the ops that start a layer (strategy.h). */
static psim_status layer_starts_json(const psim_strategy *s, const psim_model *m, cJSON *p) {
  if (!s->op_layer)
    return PSIM_OK;
  cJSON *a = NULL;
  PSIM_CHECK(psim_json_add_array(p, "layer_starts", &a));
  for (int32_t i = 0; i < s->n_ops; i++)
    if (i == 0 || s->op_layer[i] != s->op_layer[i - 1])
      PSIM_CHECK(add_item(a, NULL, cJSON_CreateString(m->ops[i].name)));
  return PSIM_OK;
}

static psim_status pipeline_json(const psim_strategy *s, const psim_model *m, cJSON *root) {
  cJSON *p = NULL, *stages = NULL;
  PSIM_CHECK(psim_json_add_object(root, "pipeline", &p));
  PSIM_CHECK(psim_json_add_number(p, "micro_batches", s->n_micro));
  PSIM_CHECK(psim_json_add_string(p, "schedule", psim_schedule_name(s->schedule)));
  PSIM_CHECK(psim_json_add_number(p, "virtual_stages", s->virtual_stages));
  PSIM_CHECK(layer_starts_json(s, m, p));
  int32_t n = s->n_stages * s->virtual_stages;
  if (n == 1)
    return PSIM_OK;
  PSIM_CHECK(psim_json_add_array(p, "stages", &stages));
  for (int32_t i = 0; i < n; i++) {
    cJSON *st = cJSON_CreateObject(), *layers = NULL;
    PSIM_CHECK(add_item(stages, NULL, st));
    PSIM_CHECK(psim_json_add_array(st, "layers", &layers));
    PSIM_CHECK(add_item(layers, NULL, cJSON_CreateNumber(s->stages[i].first_layer)));
    PSIM_CHECK(add_item(layers, NULL, cJSON_CreateNumber(s->stages[i].last_layer)));
    PSIM_CHECK(devices_json(s->stages[i].devices, s->stages[i].n_devices, st, "devices"));
  }
  return PSIM_OK;
}

static psim_status op_json(const psim_model *m, int32_t i, const psim_op_config *cfg, cJSON *ops) {
  cJSON *o = NULL, *split = NULL;
  PSIM_CHECK(psim_json_add_object(ops, m->ops[i].name, &o));
  PSIM_CHECK(psim_json_add_object(o, "split", &split));
  for (int32_t j = 0; j < m->ops[i].n_dims; j++)
    if (cfg->degree[j] > 1)
      PSIM_CHECK(psim_json_add_number(split, m->dims[m->ops[i].dims[j].dim].name, cfg->degree[j]));
  PSIM_CHECK(psim_json_add_number(o, "replicas", cfg->replicas));
  return devices_json(cfg->devices, cfg->n_devices, o, "devices");
}

static bool config_same(const psim_op_config *a, const psim_op_config *b, int32_t n_dims) {
  if (a->replicas != b->replicas || a->n_devices != b->n_devices)
    return false;
  for (int32_t j = 0; j < n_dims; j++)
    if (a->degree[j] != b->degree[j])
      return false;
  return memcmp(a->devices, b->devices, (size_t)a->n_devices * sizeof *a->devices) == 0;
}

/* Ops whose config differs from what mesh+layout give them. */
static psim_status ops_json(const psim_strategy *s, const psim_model *m, cJSON *root) {
  cJSON *ops = NULL;
  for (int32_t i = 0; i < s->n_ops; i++) {
    if (s->ops[i].stage < 0 || s->ops[i].stage >= s->n_stages * s->virtual_stages)
      return psim_error(PSIM_EINPUT, "op '%s' has no valid pipeline stage (%d)", m->ops[i].name,
                        (int)s->ops[i].stage);
    const psim_stage *st = &s->stages[s->ops[i].stage];
    psim_op_config def;
    psim_status rc = psim_mesh_op_config(&s->mesh, m, i, st->devices, st->n_devices, &def);
    if (rc == PSIM_ENOMEM)
      return rc;
    bool same = rc == PSIM_OK && config_same(&def, &s->ops[i], m->ops[i].n_dims);
    psim_op_config_destroy(&def);
    if (same)
      continue;
    if (!ops)
      PSIM_CHECK(psim_json_add_object(root, "ops", &ops));
    PSIM_CHECK(op_json(m, i, &s->ops[i], ops));
  }
  psim_error_clear();
  return PSIM_OK;
}

static psim_status sync_json(const psim_strategy *s, cJSON *root) {
  cJSON *g = NULL, *ps = NULL;
  PSIM_CHECK(psim_json_add_object(root, "gradient_sync", &g));
  if (s->sync != PSIM_SYNC_PS)
    return psim_json_add_string(g, "allreduce", psim_allreduce_algo_name(s->allreduce));
  PSIM_CHECK(psim_json_add_object(g, "parameter_server", &ps));
  PSIM_CHECK(devices_json(s->ps.servers, s->ps.n_servers, ps, "servers"));
  PSIM_CHECK(psim_json_add_string(ps, "mode", psim_ps_mode_name(s->ps.mode)));
  if (s->ps.mode == PSIM_PS_BACKUP)
    PSIM_CHECK(psim_json_add_number(ps, "backup_k", s->ps.backup_k));
  return psim_json_add_number(ps, "replicas", s->ps.replicas);
}

static psim_status tmpl_json(const psim_strategy *s, cJSON *root) {
  if (s->tmpl.name[0] == '\0')
    return PSIM_OK;
  cJSON *t = NULL;
  PSIM_CHECK(psim_json_add_object(root, "template_info", &t));
  PSIM_CHECK(psim_json_add_string(t, "name", s->tmpl.name));
  PSIM_CHECK(psim_json_add_number(t, "tp", s->tmpl.tp));
  PSIM_CHECK(psim_json_add_number(t, "pp", s->tmpl.pp));
  PSIM_CHECK(psim_json_add_number(t, "dp", s->tmpl.dp));
  PSIM_CHECK(psim_json_add_number(t, "micro_batch", s->tmpl.micro_batch));
  PSIM_CHECK(psim_json_add_number(t, "virtual_stages", s->tmpl.virtual_stages));
  /* Megatron-Core's ep, etp, cp: only when not their defaults (1, tp, 1) */
  if (s->tmpl.ep > 1)
    PSIM_CHECK(psim_json_add_number(t, "ep", s->tmpl.ep));
  if (s->tmpl.etp > 0 && s->tmpl.etp != s->tmpl.tp)
    PSIM_CHECK(psim_json_add_number(t, "etp", s->tmpl.etp));
  if (s->tmpl.cp > 1)
    PSIM_CHECK(psim_json_add_number(t, "cp", s->tmpl.cp));
  /* uneven first/last pipeline stages: only when set (0 = even) */
  if (s->tmpl.first_stage_layers > 0)
    PSIM_CHECK(psim_json_add_number(t, "first_stage_layers", s->tmpl.first_stage_layers));
  if (s->tmpl.last_stage_layers > 0)
    PSIM_CHECK(psim_json_add_number(t, "last_stage_layers", s->tmpl.last_stage_layers));
  if (s->tmpl.pipeline_layout[0])
    PSIM_CHECK(psim_json_add_string(t, "pipeline_layout", s->tmpl.pipeline_layout));
  return PSIM_OK;
}

static psim_status options_json(const psim_strategy *s, cJSON *root) {
  PSIM_CHECK(psim_json_add_number(root, "zero", s->zero_stage));
  if (s->dp_replicate > 1) /* HSDP; written only when set: older files stay byte-identical */
    PSIM_CHECK(psim_json_add_number(root, "dp_replicate", s->dp_replicate));
  if (s->async_tp != PSIM_ASYNC_TP_STACK) /* a run's own over the stack's: only when given */
    PSIM_CHECK(psim_json_add_bool(root, "async_tp", s->async_tp == PSIM_ASYNC_TP_ON));
  if (s->fp8 != PSIM_FP8_MODEL) /* the run's own precision: only when given */
    PSIM_CHECK(psim_json_add_bool(root, "fp8", s->fp8 == PSIM_FP8_ON));
  PSIM_CHECK(psim_json_add_string(root, "recompute", psim_recompute_name(s->recompute)));
  if (s->recompute_every > 1) /* written only when set: older files stay byte-identical */
    PSIM_CHECK(psim_json_add_number(root, "recompute_every", s->recompute_every));
  if (psim_strategy_partial_recompute(s)) { /* only then: older files stay byte-identical */
    PSIM_CHECK(psim_json_add_string(root, "recompute_method",
                                    psim_recompute_method_name(s->recompute_method)));
    PSIM_CHECK(psim_json_add_number(root, "recompute_num_layers", s->recompute_layers));
  }
  PSIM_CHECK(psim_json_add_bool(root, "sequence_parallel", s->sequence_parallel));
  PSIM_CHECK(psim_json_add_bool(root, "overlap_grad_reduce", s->overlap_grad_reduce));
  if (s->overlap_param_gather) /* written only when on: older files stay byte-identical */
    PSIM_CHECK(psim_json_add_bool(root, "overlap_param_gather", true));
  if (s->checkpoint.every > 0 || s->checkpoint.write_bw > 0 || s->checkpoint.read_bw > 0) {
    cJSON *ck;
    PSIM_CHECK(psim_json_add_object(root, "checkpoint", &ck));
    if (s->checkpoint.every > 0)
      PSIM_CHECK(psim_json_add_number(ck, "every", s->checkpoint.every));
    if (s->checkpoint.write_bw > 0)
      PSIM_CHECK(psim_json_add_number(ck, "write_bandwidth", s->checkpoint.write_bw));
    if (s->checkpoint.read_bw > 0)
      PSIM_CHECK(psim_json_add_number(ck, "read_bandwidth", s->checkpoint.read_bw));
  }
  if (s->zero_prefetch !=
      PSIM_ZERO_PREFETCH_DEFAULT) /* written when set (plans stay as they were) */
    PSIM_CHECK(psim_json_add_number(root, "zero_prefetch", s->zero_prefetch));
  return psim_json_add_number(root, "bucket_size", s->bucket_bytes);
}

static psim_status to_json(const psim_strategy *s, const psim_model *m, cJSON *root) {
  PSIM_CHECK(psim_json_add_string(root, "format", FORMAT));
  PSIM_CHECK(tmpl_json(s, root));
  PSIM_CHECK(mesh_json(s, root));
  PSIM_CHECK(pipeline_json(s, m, root));
  PSIM_CHECK(ops_json(s, m, root));
  PSIM_CHECK(sync_json(s, root));
  return options_json(s, root);
}

psim_status psim_strategy_to_json(const psim_strategy *s, const psim_model *m,
                                  const psim_cluster *c, cJSON **out) {
  psim_json_init_hooks();
  *out = NULL;
  if (!s->stages || s->n_ops != m->n_ops)
    return psim_error(PSIM_EINPUT, "the strategy does not belong to model '%s'", m->name);
  cJSON *root = cJSON_CreateObject();
  if (!root)
    return enomem();
  psim_status st = to_json(s, m, root);
  /* no bucket_size given and the cluster's stack sizes the buckets: none written, so that
   * reading the file back applies the rule again */
  if (st == PSIM_OK && !s->bucket_given && c && psim_stack_bucket_params(&c->stack, 1) > 0)
    cJSON_DeleteItemFromObject(root, "bucket_size");
  if (st != PSIM_OK) {
    cJSON_Delete(root);
    return st;
  }
  *out = root;
  return PSIM_OK;
}
