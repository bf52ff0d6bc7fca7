/* strategy_load.c - plansim.strategy/1 files expanded against a model and
 * cluster: the template forms through templates.c, the explicit form
 * (stages, micro-batches, mesh, per-op overrides, parameter servers), and
 * the load entry points (docs/strategy.md). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/strategy/strategy_impl.h"

/* ---------------- expansion: templates ---------------- */

static void apply_common(const psim_strategy_spec *sp, psim_strategy *s) {
  s->recompute = sp->recompute;
  s->recompute_every = sp->recompute_every;
  s->recompute_method = sp->recompute_method;
  s->recompute_layers = sp->recompute_layers;
  s->sequence_parallel = s->sequence_parallel || sp->sequence_parallel;
  s->overlap_grad_reduce = sp->overlap_grad_reduce;
  s->overlap_param_gather = sp->overlap_param_gather;
  s->bucket_bytes = sp->bucket_bytes;
  s->bucket_given = sp->bucket_given;
  s->zero_prefetch = sp->zero_prefetch;
  s->allreduce = sp->allreduce;
  s->zero_stage = sp->zero_stage;
  if (sp->dp_replicate > 1) /* the explicit form's; a template's dp_shard set it otherwise */
    s->dp_replicate = sp->dp_replicate;
  if (sp->async_tp != PSIM_ASYNC_TP_STACK)
    s->async_tp = sp->async_tp;
  if (sp->fp8 != PSIM_FP8_MODEL)
    s->fp8 = sp->fp8;
  s->checkpoint = sp->checkpoint;
}

/* data_parallel / zero: dp_shard (HSDP) dividing the dp ranks, ZeRO >= 1. */
static psim_status dp_shard_apply(const psim_strategy_spec *sp, psim_strategy *s) {
  int32_t n = s->tmpl.dp, k = sp->dp_shard;
  if (k == 0 || k == n)
    return PSIM_OK;
  if (n % k != 0)
    return psim_error(PSIM_EINPUT, "dp_shard: %d does not divide dp = %d", (int)k, (int)n);
  if (s->zero_stage < 1)
    return psim_error(PSIM_EINPUT,
                      "dp_shard: %d < dp = %d shards nothing at ZeRO 0 (HSDP needs zero >= 1)",
                      (int)k, (int)n);
  s->dp_replicate = n / k;
  return PSIM_OK;
}

static psim_status expand_template(const psim_strategy_spec *sp, const psim_model *m,
                                   psim_cluster *cl, psim_strategy *s) {
  if (sp->form == FORM_MEGATRON) {
    psim_megatron_opts o = sp->mo;
    o.recompute = sp->recompute;
    o.recompute_method = sp->recompute_method;
    o.recompute_layers = sp->recompute_layers;
    o.recompute_every = sp->recompute_every;
    o.sequence_parallel = sp->sequence_parallel;
    o.zero_stage = sp->zero_stage;
    o.dp_shard = sp->dp_shard;
    o.overlap_grad_reduce = sp->overlap_grad_reduce;
    o.overlap_param_gather = sp->overlap_param_gather;
    int64_t model = (int64_t)o.tp * o.pp * (o.cp > 0 ? o.cp : 1);
    if (o.dp == 0)
      o.dp = cl->n_devices / model > 0 ? (int32_t)(cl->n_devices / model) : 1;
    PSIM_CHECK(psim_strategy_megatron(m, cl, &o, s));
  } else {
    PSIM_CHECK(psim_strategy_data_parallel(m, cl, sp->dp_n, sp->micro_batches, s));
    if (sp->form == FORM_ZERO)
      snprintf(s->tmpl.name, sizeof s->tmpl.name, "zero");
  }
  apply_common(sp, s);
  return sp->form == FORM_MEGATRON ? PSIM_OK : dp_shard_apply(sp, s);
}

/* ---------------- expansion: explicit form ---------------- */

static psim_status check_keys_of(psim_jctx *c, const char *what, const char (*keys)[PSIM_MESH_NAME],
                                 int32_t n, const psim_model *m) {
  for (int32_t k = 0; k < n; k++) {
    const char *key = keys[k];
    psim_role r;
    bool is_dim = false;
    for (int32_t d = 0; d < m->n_dims && !is_dim; d++)
      is_dim = strcmp(m->dims[d].name, key) == 0;
    if (is_dim || psim_role_parse(key, &r) == PSIM_OK)
      continue;
    size_t sv = psim_jctx_key(c, what);
    psim_jctx_key(c, key);
    psim_status s = psim_jerr(c, "the model has no dim named '%s' and it is not a role name", key);
    psim_jctx_pop(c, sv);
    return s;
  }
  psim_error_clear();
  return PSIM_OK;
}

static psim_status check_layout_keys(psim_jctx *c, const psim_strategy_spec *sp,
                                     const psim_model *m) {
  PSIM_CHECK(check_keys_of(c, "layout", sp->mesh.layout_key, sp->mesh.n_layout, m));
  return check_keys_of(c, "expert_layout", sp->mesh.expert_layout_key, sp->mesh.n_expert_layout, m);
}

/* One stage covering every layer, on mesh.devices (default 0..n-1). */
static psim_status single_stage(psim_jctx *c, const psim_strategy_spec *sp, const psim_model *m,
                                psim_cluster *cl, psim_strategy *s) {
  s->stages = psim_calloc(1, sizeof *s->stages);
  if (!s->stages)
    return psim_error(PSIM_ENOMEM, "out of memory expanding a strategy");
  s->stages[0].last_layer = psim_strategy_n_layers(s, m) - 1;
  if (sp->mesh_devices) {
    size_t sv = psim_jctx_key(c, "mesh");
    psim_jctx_key(c, "devices");
    PSIM_CHECK(psim_strategy_read_devices(c, sp->mesh_devices, cl, &s->stages[0].devices,
                                          &s->stages[0].n_devices));
    psim_jctx_pop(c, sv);
    return PSIM_OK;
  }
  int32_t n = sp->mesh.n_axes > 0 ? psim_mesh_size(&sp->mesh) : cl->n_devices;
  if (n > cl->n_devices)
    return psim_jerr(c, "the mesh has %d devices but the cluster has %d", (int)n,
                     (int)cl->n_devices);
  s->stages[0].devices = psim_malloc((size_t)n * sizeof(int32_t));
  if (!s->stages[0].devices)
    return psim_error(PSIM_ENOMEM, "out of memory expanding a strategy");
  s->stages[0].n_devices = n;
  for (int32_t i = 0; i < n; i++)
    s->stages[0].devices[i] = i;
  return PSIM_OK;
}

static psim_status stage_layers(psim_jctx *c, const cJSON *st, int32_t n_layers, int32_t idx,
                                int32_t *owner, psim_stage *out) {
  const cJSON *layers = cJSON_GetObjectItemCaseSensitive(st, "layers");
  out->first_layer = (int32_t)layers->child->valuedouble;
  out->last_layer = (int32_t)layers->child->next->valuedouble;
  size_t sv = psim_jctx_key(c, "layers");
  if (out->last_layer >= n_layers)
    return psim_jerr(c, "layer %d out of range; the model has layers 0..%d", (int)out->last_layer,
                     (int)n_layers - 1);
  for (int32_t l = out->first_layer; l <= out->last_layer; l++) {
    if (owner[l] >= 0)
      return psim_jerr(c, "layer %d is assigned to two stages (%d and %d)", (int)l, (int)owner[l],
                       (int)idx);
    owner[l] = idx;
  }
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status read_all_stages(psim_jctx *c, const psim_strategy_spec *sp, const psim_model *m,
                                   psim_cluster *cl, psim_strategy *s, int32_t *owner) {
  int32_t n = cJSON_GetArraySize(sp->stages);
  s->stages = psim_calloc((size_t)n, sizeof *s->stages);
  if (!s->stages)
    return psim_error(PSIM_ENOMEM, "out of memory expanding a strategy");
  s->virtual_stages = sp->virtual_stages;
  s->n_stages = n / sp->virtual_stages;
  size_t sv = psim_jctx_key(c, "pipeline");
  psim_jctx_key(c, "stages");
  int32_t i = 0;
  for (const cJSON *it = sp->stages->child; it; it = it->next, i++) {
    size_t s2 = psim_jctx_index(c, (size_t)i);
    PSIM_CHECK(stage_layers(c, it, psim_strategy_n_layers(s, m), i, owner, &s->stages[i]));
    psim_jctx_key(c, "devices");
    PSIM_CHECK(psim_strategy_read_devices(c, cJSON_GetObjectItemCaseSensitive(it, "devices"), cl,
                                          &s->stages[i].devices, &s->stages[i].n_devices));
    psim_jctx_pop(c, s2);
  }
  for (int32_t l = 0; l < psim_strategy_n_layers(s, m); l++)
    if (owner[l] < 0)
      return psim_jerr(c, "layer %d is in no stage", (int)l);
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status explicit_stages(psim_jctx *c, const psim_strategy_spec *sp, const psim_model *m,
                                   psim_cluster *cl, psim_strategy *s) {
  if (!sp->stages)
    return single_stage(c, sp, m, cl, s);
  int32_t n_layers = psim_strategy_n_layers(s, m);
  int32_t *owner = psim_malloc((size_t)(n_layers > 0 ? n_layers : 1) * sizeof *owner);
  if (!owner)
    return psim_error(PSIM_ENOMEM, "out of memory expanding a strategy");
  for (int32_t l = 0; l < n_layers; l++)
    owner[l] = -1;
  psim_status st = read_all_stages(c, sp, m, cl, s, owner);
  psim_free(owner);
  return st;
}

static psim_status check_mesh_fits(psim_jctx *c, const psim_strategy *s) {
  if (s->mesh.n_axes == 0)
    return PSIM_OK;
  int32_t want = psim_mesh_size(&s->mesh);
  for (int32_t i = 0; i < s->n_stages * s->virtual_stages; i++)
    if (s->stages[i].n_devices != want)
      return psim_jerr(c,
                       "stage %d has %d devices but the mesh has %d (every stage is laid "
                       "out on the mesh)",
                       (int)i, (int)s->stages[i].n_devices, (int)want);
  return PSIM_OK;
}

static psim_status explicit_micro(psim_jctx *c, const psim_strategy_spec *sp, const psim_model *m,
                                  psim_strategy *s) {
  s->n_micro = sp->micro_batches;
  s->schedule = sp->schedule;
  int32_t b = m->role_dim[PSIM_ROLE_BATCH];
  size_t sv = psim_jctx_key(c, "pipeline");
  psim_jctx_key(c, "micro_batches");
  if (b < 0 && s->n_micro > 1)
    return psim_jerr(c, "the model has no batch-role dim to cut into micro-batches");
  int64_t batch = b >= 0 ? m->dims[b].size : 1;
  if (batch % s->n_micro != 0)
    return psim_jerr(c, "%d does not divide the global batch of %lld samples", (int)s->n_micro,
                     (long long)batch);
  const char *why = psim_schedule_micro_rule(s->schedule, s->n_micro, s->n_stages);
  if (why)
    return psim_jerr(c, "%d micro-batches on %d stages: %s", (int)s->n_micro, (int)s->n_stages,
                     why);
  s->micro_batch = batch / s->n_micro;
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status explicit_ps(psim_jctx *c, const psim_strategy_spec *sp, psim_cluster *cl,
                               psim_strategy *s) {
  s->sync = sp->sync;
  if (sp->sync != PSIM_SYNC_PS)
    return PSIM_OK;
  s->ps.mode = sp->ps_mode;
  s->ps.backup_k = sp->ps_backup_k;
  s->ps.replicas = sp->ps_replicas;
  size_t sv = psim_jctx_key(c, "gradient_sync");
  psim_jctx_key(c, "parameter_server");
  psim_jctx_key(c, "servers");
  PSIM_CHECK(psim_strategy_read_devices(c, sp->ps_servers, cl, &s->ps.servers, &s->ps.n_servers));
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status expand_explicit(psim_jctx *c, const psim_strategy_spec *sp, const psim_model *m,
                                   psim_cluster *cl, psim_strategy *s) {
  PSIM_CHECK(check_layout_keys(c, sp, m));
  s->mesh = sp->mesh;
  s->tmpl = sp->tmpl;
  apply_common(sp, s);
  if (s->dp_replicate > 1 && s->zero_stage < 1) {
    psim_jctx_key(c, "dp_replicate");
    return psim_jerr(c, "%d replicas shard nothing at ZeRO 0 (HSDP needs zero >= 1)",
                     (int)s->dp_replicate);
  }
  PSIM_CHECK(psim_strategy_apply_layer_starts(c, sp, m, s));
  PSIM_CHECK(explicit_stages(c, sp, m, cl, s));
  PSIM_CHECK(check_mesh_fits(c, s));
  PSIM_CHECK(explicit_micro(c, sp, m, s));
  PSIM_CHECK(psim_strategy_apply_mesh(s, m));
  PSIM_CHECK(psim_strategy_apply_overrides(c, sp, s, m, cl));
  return explicit_ps(c, sp, cl, s);
}

psim_status psim_strategy_from_json(const char *file, const cJSON *root, const psim_model *m,
                                    psim_cluster *cl, psim_strategy *s) {
  psim_jctx c;
  psim_jctx_init(&c, file);
  psim_strategy_spec sp;
  psim_strategy_init(s);
  psim_status st = psim_strategy_read_spec(&c, root, &sp);
  if (st == PSIM_OK) /* "stack" (docs/stacks.md): over the cluster file's */
    st = psim_stack_from_key(&c, root, &cl->stack);
  if (st != PSIM_OK) {
    psim_strategy_spec_destroy(&sp);
    return st;
  }
  if (sp.form == FORM_EXPLICIT) {
    st = expand_explicit(&c, &sp, m, cl, s);
    if (st == PSIM_OK)
      st = psim_strategy_validate(s, m, cl, file);
  } else {
    st = expand_template(&sp, m, cl, s);
    if (st != PSIM_OK && st != PSIM_ENOMEM)
      psim_error_prefix("%s: ", file);
  }
  psim_strategy_spec_destroy(&sp);
  if (st != PSIM_OK)
    psim_strategy_destroy(s);
  return st;
}

psim_status psim_strategy_load(const char *file, const psim_model *m, psim_cluster *c,
                               psim_strategy *s) {
  cJSON *root = NULL;
  psim_strategy_init(s);
  PSIM_CHECK(psim_json_load_file(file, &root));
  psim_status st = psim_strategy_from_json(file, root, m, c, s);
  cJSON_Delete(root);
  return st;
}
