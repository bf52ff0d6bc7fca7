/* strategy_read.c - the structure of plansim.strategy/1 files, checked
 * before any model or cluster is known: the template forms and the explicit
 * form (mesh, layout, pipeline, gradient sync, options); docs/strategy.md. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/strategy/strategy_impl.h"

/* ---------------- named options ---------------- */

static psim_status enum_key(psim_jctx *c, const cJSON *obj, const char *key,
                            psim_status (*parse)(const char *, void *), void *out, bool *given) {
  const char *name = NULL;
  PSIM_CHECK(psim_json_string(c, obj, key, false, &name));
  if (given)
    *given = name != NULL;
  if (!name)
    return PSIM_OK;
  if (parse(name, out) != PSIM_OK) {
    char msg[400];
    snprintf(msg, sizeof msg, "%s", psim_error_message());
    size_t sv = psim_jctx_key(c, key);
    psim_status s = psim_jerr(c, "%s", msg);
    psim_jctx_pop(c, sv);
    return s;
  }
  return PSIM_OK;
}

static psim_status p_sched(const char *n, void *o) {
  return psim_schedule_parse(n, o);
}
static psim_status p_recomp(const char *n, void *o) {
  return psim_recompute_parse(n, o);
}
static psim_status p_rcm(const char *n, void *o) {
  return psim_recompute_method_parse(n, o);
}
static psim_status p_ar(const char *n, void *o) {
  return psim_allreduce_algo_parse(n, o);
}
static psim_status p_ps(const char *n, void *o) {
  return psim_ps_mode_parse(n, o);
}

psim_status psim_strategy_int32_key(psim_jctx *c, const cJSON *obj, const char *key, bool required,
                                    int64_t min, int64_t max, int32_t *out) {
  int64_t v = *out;
  PSIM_CHECK(psim_json_int(c, obj, key, required, min, max, &v));
  *out = (int32_t)v;
  return PSIM_OK;
}

/* "checkpoint": {"every": N, "write_bandwidth": Q, "read_bandwidth": Q}. */
static psim_status read_checkpoint(psim_jctx *c, const cJSON *root, psim_checkpoint *ck) {
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "checkpoint");
  if (!o)
    return PSIM_OK;
  static const char *const keys[] = {"every", "write_bandwidth", "read_bandwidth", NULL};
  size_t sv = psim_jctx_key(c, "checkpoint");
  int64_t every = 0;
  psim_status s = psim_json_check_keys(c, o, keys);
  if (s == PSIM_OK)
    s = psim_json_int(c, o, "every", false, 0, 1000000000, &every);
  if (s == PSIM_OK)
    s = psim_json_quantity(c, o, "write_bandwidth", false, PSIM_UNIT_BANDWIDTH, &ck->write_bw);
  if (s == PSIM_OK)
    s = psim_json_quantity(c, o, "read_bandwidth", false, PSIM_UNIT_BANDWIDTH, &ck->read_bw);
  ck->every = (int32_t)every;
  psim_jctx_pop(c, sv);
  return s;
}

/* "recompute_method" and "recompute_num_layers" (Megatron-Core's rules, transformer_config.py
 * __post_init__: a method and a layer count with full recomputation only; plansim defaults the
 * pair to uniform 1, what "full" meant before them, and block needs its count). */
static psim_status read_recompute(psim_jctx *c, const cJSON *root, psim_strategy_spec *sp) {
  PSIM_CHECK(enum_key(c, root, "recompute", p_recomp, &sp->recompute, NULL));
  bool method_given = false;
  PSIM_CHECK(enum_key(c, root, "recompute_method", p_rcm, &sp->recompute_method, &method_given));
  bool n_given = cJSON_GetObjectItemCaseSensitive(root, "recompute_num_layers") != NULL;
  sp->recompute_layers = 1;
  PSIM_CHECK(psim_strategy_int32_key(c, root, "recompute_num_layers", false, 0, MAX_DEGREE,
                                     &sp->recompute_layers));
  const char *key = n_given ? "recompute_num_layers" : "recompute_method";
  psim_status s = PSIM_OK;
  size_t sv = psim_jctx_key(c, key);
  if ((method_given || n_given) && sp->recompute != PSIM_RECOMPUTE_FULL)
    s = psim_jerr(c, "needs \"recompute\": \"full\" (recompute is '%s')",
                  psim_recompute_name(sp->recompute));
  else if (sp->recompute_method == PSIM_RCM_BLOCK && !n_given)
    s = psim_jerr(c, "method block needs recompute_num_layers (the layers of each model chunk "
                     "recomputed)");
  else if (sp->recompute_method == PSIM_RCM_UNIFORM && sp->recompute_layers < 1)
    s = psim_jerr(c, "method uniform groups at least 1 layer (got %d)", (int)sp->recompute_layers);
  psim_jctx_pop(c, sv);
  return s;
}

/* torchtitan's layer-level selective AC (recompute_every N: every N-th block whole); one
 * way of choosing the recomputed layers, so not with Megatron-Core's method / count. */
static psim_status read_recompute_every(psim_jctx *c, const cJSON *root, psim_strategy_spec *sp) {
  PSIM_CHECK(
      psim_strategy_int32_key(c, root, "recompute_every", false, 0, 1 << 30, &sp->recompute_every));
  if (sp->recompute_every <= 1)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, "recompute_every");
  psim_status s = PSIM_OK;
  if (sp->recompute != PSIM_RECOMPUTE_FULL)
    s = psim_jerr(c,
                  "recompute_every %d needs \"recompute\": \"full\" (it recomputes every %d-th "
                  "block whole)",
                  sp->recompute_every, sp->recompute_every);
  else if (sp->recompute_method != PSIM_RCM_UNIFORM || sp->recompute_layers != 1)
    s = psim_jerr(c, "recompute_every (torchtitan's every N-th block) and recompute_method / "
                     "recompute_num_layers (Megatron-Core's) both choose the recomputed layers: "
                     "give one");
  psim_jctx_pop(c, sv);
  return s;
}

/* Options every form accepts. */
static psim_status read_common(psim_jctx *c, const cJSON *root, psim_strategy_spec *sp) {
  PSIM_CHECK(read_checkpoint(c, root, &sp->checkpoint));
  PSIM_CHECK(read_recompute(c, root, sp));
  PSIM_CHECK(read_recompute_every(c, root, sp));
  PSIM_CHECK(psim_json_bool(c, root, "sequence_parallel", false, &sp->sequence_parallel));
  PSIM_CHECK(psim_json_bool(c, root, "overlap_grad_reduce", false, &sp->overlap_grad_reduce));
  PSIM_CHECK(psim_json_bool(c, root, "overlap_param_gather", false, &sp->overlap_param_gather));
  PSIM_CHECK(psim_strategy_int32_key(c, root, "zero", false, 0, 3, &sp->zero_stage));
  PSIM_CHECK(psim_strategy_int32_key(c, root, "dp_shard", false, 1, MAX_DEGREE, &sp->dp_shard));
  PSIM_CHECK(
      psim_strategy_int32_key(c, root, "dp_replicate", false, 1, MAX_DEGREE, &sp->dp_replicate));
  if (cJSON_GetObjectItemCaseSensitive(root, "async_tp")) {
    bool on = false;
    PSIM_CHECK(psim_json_bool(c, root, "async_tp", false, &on));
    sp->async_tp = on ? PSIM_ASYNC_TP_ON : PSIM_ASYNC_TP_OFF;
  }
  if (cJSON_GetObjectItemCaseSensitive(root, "fp8")) {
    bool on = false;
    PSIM_CHECK(psim_json_bool(c, root, "fp8", false, &on));
    sp->fp8 = on ? PSIM_FP8_ON : PSIM_FP8_OFF;
  }
  PSIM_CHECK(psim_json_quantity(c, root, "bucket_size", false, PSIM_UNIT_BYTES, &sp->bucket_bytes));
  sp->bucket_given = cJSON_GetObjectItemCaseSensitive(root, "bucket_size") != NULL;
  if (sp->bucket_bytes < 1) {
    size_t sv = psim_jctx_key(c, "bucket_size");
    psim_status s = psim_jerr(c, "a gradient bucket must hold at least 1 byte");
    psim_jctx_pop(c, sv);
    return s;
  }
  PSIM_CHECK(
      psim_json_quantity(c, root, "zero_prefetch", false, PSIM_UNIT_COUNT, &sp->zero_prefetch));
  if (sp->zero_prefetch < 0) {
    size_t sv = psim_jctx_key(c, "zero_prefetch");
    psim_status s =
        psim_jerr(c, "a prefetch of %g parameters; expected 0 or more", sp->zero_prefetch);
    psim_jctx_pop(c, sv);
    return s;
  }
  return enum_key(c, root, "allreduce", p_ar, &sp->allreduce, NULL);
}

/* ---------------- template form ---------------- */

static const char *const megatron_keys[] = {"format",
                                            "name",
                                            "description",
                                            "template",
                                            "tp",
                                            "pp",
                                            "dp",
                                            "ep",
                                            "etp",
                                            "cp",
                                            "micro_batch",
                                            "virtual_stages",
                                            "first_stage_layers",
                                            "last_stage_layers",
                                            "pipeline_layout",
                                            "schedule",
                                            "recompute",
                                            "recompute_every",
                                            "recompute_method",
                                            "recompute_num_layers",
                                            "sequence_parallel",
                                            "zero",
                                            "dp_shard",
                                            "async_tp",
                                            "fp8",
                                            "overlap_grad_reduce",
                                            "overlap_param_gather",
                                            "allreduce",
                                            "bucket_size",
                                            "zero_prefetch",
                                            "checkpoint",
                                            "stack",
                                            NULL};
static const char *const dp_keys[] = {"format",
                                      "name",
                                      "description",
                                      "template",
                                      "dp",
                                      "micro_batches",
                                      "recompute",
                                      "recompute_every",
                                      "zero",
                                      "overlap_grad_reduce",
                                      "allreduce",
                                      "bucket_size",
                                      "zero_prefetch",
                                      "checkpoint",
                                      "stack",
                                      "overlap_param_gather",
                                      "dp_shard",
                                      "fp8",
                                      "recompute_method",
                                      "recompute_num_layers",
                                      NULL};
static const char *const zero_keys[] = {"format",
                                        "name",
                                        "description",
                                        "template",
                                        "stage",
                                        "dp",
                                        "micro_batches",
                                        "recompute",
                                        "recompute_every",
                                        "recompute_method",
                                        "recompute_num_layers",
                                        "overlap_grad_reduce",
                                        "allreduce",
                                        "bucket_size",
                                        "zero_prefetch",
                                        "checkpoint",
                                        "stack",
                                        "overlap_param_gather",
                                        "dp_shard",
                                        "fp8",
                                        NULL};

/* Megatron-Core's uneven first/last stages: what holds without the model (core_v0.15.0
 * transformer_config.py: each a multiple of the virtual stages; a first or last stage
 * apart from the others needs pp > 1). The middle stages' split needs the model's layer
 * count: psim_megatron_chunk_layers at expansion. */
static psim_status read_uneven(psim_jctx *c, const cJSON *root, psim_megatron_opts *o) {
  static const char *const keys[] = {"first_stage_layers", "last_stage_layers"};
  int32_t *vals[] = {&o->first_stage_layers, &o->last_stage_layers};
  for (int i = 0; i < 2; i++) {
    PSIM_CHECK(psim_strategy_int32_key(c, root, keys[i], false, 1, MAX_DEGREE, vals[i]));
    if (*vals[i] == 0)
      continue;
    size_t sv = psim_jctx_key(c, keys[i]);
    if (o->pp < 2)
      return psim_jerr(c, "%d layers on the %s stage need pp > 1 (pp = %d)", (int)*vals[i],
                       i == 0 ? "first" : "last", (int)o->pp);
    if (*vals[i] % o->virtual_stages != 0)
      return psim_jerr(c,
                       "%d layers do not divide into the %d virtual stages of the stage "
                       "(Megatron-Core's rule)",
                       (int)*vals[i], (int)o->virtual_stages);
    psim_jctx_pop(c, sv);
  }
  return PSIM_OK;
}

/* Megatron-Core's --pipeline-model-parallel-layout: parsed and checked against pp
 * (psim_megatron_resolve_layout), setting virtual_stages; the layer counts need the
 * model (at expansion). */
static psim_status read_pipeline_layout(psim_jctx *c, const cJSON *root, psim_megatron_opts *o) {
  const char *text = NULL;
  PSIM_CHECK(psim_json_string(c, root, "pipeline_layout", false, &text));
  if (!text)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, "pipeline_layout");
  if (strlen(text) >= sizeof o->pipeline_layout || !text[0])
    return psim_jerr(c, "expected 1 to %d characters", (int)sizeof o->pipeline_layout - 1);
  snprintf(o->pipeline_layout, sizeof o->pipeline_layout, "%s", text);
  if (psim_megatron_resolve_layout(o) != PSIM_OK) {
    char msg[512]; /* the message without its "pipeline_layout: " (the path names it) */
    const char *e = psim_error_message(), *pre = "pipeline_layout: ";
    snprintf(msg, sizeof msg, "%s", strncmp(e, pre, strlen(pre)) == 0 ? e + strlen(pre) : e);
    return psim_jerr(c, "%s", msg);
  }
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status read_megatron(psim_jctx *c, const cJSON *root, psim_strategy_spec *sp) {
  psim_megatron_opts *o = &sp->mo;
  PSIM_CHECK(psim_json_check_keys(c, root, megatron_keys));
  o->dp = 0;
  PSIM_CHECK(psim_strategy_int32_key(c, root, "tp", false, 1, MAX_DEGREE, &o->tp));
  PSIM_CHECK(psim_strategy_int32_key(c, root, "pp", false, 1, MAX_DEGREE, &o->pp));
  PSIM_CHECK(psim_strategy_int32_key(c, root, "dp", false, 1, MAX_DEGREE, &o->dp));
  PSIM_CHECK(psim_strategy_int32_key(c, root, "ep", false, 1, MAX_DEGREE, &o->ep));
  PSIM_CHECK(psim_strategy_int32_key(c, root, "etp", false, 1, MAX_DEGREE, &o->etp));
  PSIM_CHECK(psim_strategy_int32_key(c, root, "cp", false, 1, MAX_DEGREE, &o->cp));
  PSIM_CHECK(
      psim_strategy_int32_key(c, root, "micro_batch", false, 1, MAX_DEGREE, &o->micro_batch));
  PSIM_CHECK(
      psim_strategy_int32_key(c, root, "virtual_stages", false, 1, 4096, &o->virtual_stages));
  PSIM_CHECK(read_uneven(c, root, o));
  PSIM_CHECK(enum_key(c, root, "schedule", p_sched, &o->schedule, &sp->schedule_given));
  PSIM_CHECK(read_pipeline_layout(c, root, o));
  PSIM_CHECK(read_common(c, root, sp));
  if (!sp->schedule_given)
    o->schedule = psim_schedule_default(o->virtual_stages);
  size_t sv = psim_jctx_key(c, "schedule");
  psim_status s = PSIM_OK;
  const char *why = psim_schedule_chunks_rule(o->schedule, o->virtual_stages);
  if (why)
    s = psim_jerr(c, "'%s' with virtual_stages = %d: it %s", psim_schedule_name(o->schedule),
                  (int)o->virtual_stages, why);
  psim_jctx_pop(c, sv);
  return s;
}

static psim_status read_template(psim_jctx *c, const cJSON *root, const char *name,
                                 psim_strategy_spec *sp) {
  sp->micro_batches = 1;
  if (strcmp(name, "megatron") == 0) {
    sp->form = FORM_MEGATRON;
    return read_megatron(c, root, sp);
  }
  bool zero = strcmp(name, "zero") == 0;
  if (!zero && strcmp(name, "data_parallel") != 0) {
    size_t sv = psim_jctx_key(c, "template");
    psim_status s = psim_jerr(c,
                              "unknown template '%.80s'; expected megatron, data_parallel "
                              "or zero",
                              name);
    psim_jctx_pop(c, sv);
    return s;
  }
  sp->form = zero ? FORM_ZERO : FORM_DATA_PARALLEL;
  PSIM_CHECK(psim_json_check_keys(c, root, zero ? zero_keys : dp_keys));
  if (zero)
    PSIM_CHECK(psim_strategy_int32_key(c, root, "stage", true, 0, 3, &sp->zero_stage));
  PSIM_CHECK(psim_strategy_int32_key(c, root, "dp", false, 1, MAX_DEGREE, &sp->dp_n));
  PSIM_CHECK(
      psim_strategy_int32_key(c, root, "micro_batches", false, 1, MAX_DEGREE, &sp->micro_batches));
  return read_common(c, root, sp);
}

/* ---------------- explicit form: structure ---------------- */

static const char *const explicit_keys[] = {"format",
                                            "name",
                                            "description",
                                            "mesh",
                                            "layout",
                                            "expert_layout",
                                            "ops",
                                            "pipeline",
                                            "gradient_sync",
                                            "zero",
                                            "dp_replicate",
                                            "async_tp",
                                            "fp8",
                                            "recompute",
                                            "recompute_every",
                                            "recompute_method",
                                            "recompute_num_layers",
                                            "sequence_parallel",
                                            "overlap_grad_reduce",
                                            "overlap_param_gather",
                                            "bucket_size",
                                            "zero_prefetch",
                                            "template_info",
                                            "checkpoint",
                                            "stack",
                                            NULL};

static int32_t axis_find(const psim_mesh *mesh, const char *name) {
  for (int32_t a = 0; a < mesh->n_axes; a++)
    if (strcmp(mesh->axis[a], name) == 0)
      return a;
  return -1;
}

static psim_status name_fits(psim_jctx *c, const char *name) {
  if (strlen(name) >= PSIM_MESH_NAME || name[0] == '\0')
    return psim_jerr(c, "name '%.80s' must have 1 to %d characters", name, PSIM_MESH_NAME - 1);
  return PSIM_OK;
}

static psim_status read_axes(psim_jctx *c, const cJSON *axes, psim_mesh *mesh) {
  PSIM_CHECK(psim_json_expect_object(c, axes));
  int64_t total = 1;
  for (const cJSON *it = axes->child; it; it = it->next) {
    size_t sv = psim_jctx_key(c, it->string);
    if (mesh->n_axes == PSIM_MESH_MAX_AXES)
      return psim_jerr(c, "more than %d mesh axes", PSIM_MESH_MAX_AXES);
    PSIM_CHECK(name_fits(c, it->string));
    if (axis_find(mesh, it->string) >= 0)
      return psim_jerr(c, "duplicate axis '%.80s'", it->string);
    int64_t n = 0;
    PSIM_CHECK(psim_json_value_int(c, it, 1, MAX_DEVICES, &n));
    total *= n;
    if (total > MAX_DEVICES)
      return psim_jerr(c, "the mesh has more than %d devices", MAX_DEVICES);
    snprintf(mesh->axis[mesh->n_axes], PSIM_MESH_NAME, "%s", it->string);
    mesh->size[mesh->n_axes++] = (int32_t)n;
    psim_jctx_pop(c, sv);
  }
  return PSIM_OK;
}

/* Appends the layout entry key -> axis (expert: to the expert layout). */
static psim_status layout_add(psim_jctx *c, psim_mesh *mesh, bool expert, const char *key,
                              const char *axis) {
  int32_t a = axis_find(mesh, axis);
  if (a < 0)
    return psim_jerr(c, "'%.80s' is not an axis of the mesh", axis);
  int32_t *n = expert ? &mesh->n_expert_layout : &mesh->n_layout;
  char(*keys)[PSIM_MESH_NAME] = expert ? mesh->expert_layout_key : mesh->layout_key;
  int32_t *axes = expert ? mesh->expert_layout_axis : mesh->layout_axis;
  for (int32_t k = 0; k < *n; k++)
    if (axes[k] == a && strcmp(keys[k], key) == 0)
      return psim_jerr(c, "duplicate layout entry '%.80s': '%.80s'", key, axis);
  if (*n == PSIM_MESH_MAX_LAYOUT)
    return psim_jerr(c, "more than %d layout entries", PSIM_MESH_MAX_LAYOUT);
  snprintf(keys[*n], PSIM_MESH_NAME, "%s", key);
  axes[(*n)++] = a;
  return PSIM_OK;
}

/* A layout {key: axis name or [axis names]} (expert: the expert layout). */
static psim_status read_layout(psim_jctx *c, const cJSON *obj, psim_mesh *mesh, bool expert) {
  PSIM_CHECK(psim_json_expect_object(c, obj));
  for (const cJSON *it = obj->child; it; it = it->next) {
    size_t sv = psim_jctx_key(c, it->string);
    PSIM_CHECK(name_fits(c, it->string));
    for (const cJSON *p = obj->child; p != it; p = p->next)
      if (strcmp(p->string, it->string) == 0)
        return psim_jerr(c, "duplicate layout key (give a key several axes as a list)");
    bool list = cJSON_IsArray(it) && cJSON_GetArraySize(it) > 0;
    if (!cJSON_IsString(it) && !list)
      return psim_jerr(c, "expected the name of a mesh axis or a non-empty list of them");
    int32_t i = 0;
    for (const cJSON *v = list ? it->child : it; v; v = list ? v->next : NULL, i++) {
      size_t s2 = list ? psim_jctx_index(c, i) : 0;
      if (!cJSON_IsString(v))
        return psim_jerr(c, "expected the name of a mesh axis (a string)");
      PSIM_CHECK(layout_add(c, mesh, expert, it->string, v->valuestring));
      if (list)
        psim_jctx_pop(c, s2);
    }
    psim_jctx_pop(c, sv);
  }
  return PSIM_OK;
}

/* mesh.fallback: {axis name: dim or role name}. */
static psim_status read_fallback(psim_jctx *c, const cJSON *obj, psim_mesh *mesh) {
  PSIM_CHECK(psim_json_expect_object(c, obj));
  for (const cJSON *it = obj->child; it; it = it->next) {
    size_t sv = psim_jctx_key(c, it->string);
    PSIM_CHECK(name_fits(c, it->string));
    if (!cJSON_IsString(it))
      return psim_jerr(c, "expected a dim or role name (a string)");
    PSIM_CHECK(name_fits(c, it->valuestring));
    int32_t a = axis_find(mesh, it->string);
    if (a < 0)
      return psim_jerr(c, "'%.80s' is not an axis of the mesh", it->string);
    snprintf(mesh->fallback[a], PSIM_MESH_NAME, "%s", it->valuestring);
    psim_jctx_pop(c, sv);
  }
  return PSIM_OK;
}

static psim_status read_mesh(psim_jctx *c, const cJSON *root, psim_strategy_spec *sp) {
  static const char *const keys[] = {"axes", "devices", "fallback", NULL};
  const cJSON *mesh = cJSON_GetObjectItemCaseSensitive(root, "mesh");
  const cJSON *layout = cJSON_GetObjectItemCaseSensitive(root, "layout");
  if (!mesh) {
    if (layout || cJSON_GetObjectItemCaseSensitive(root, "expert_layout"))
      return psim_jerr(c, "'%s' needs a 'mesh' with axes", layout ? "layout" : "expert_layout");
    return PSIM_OK;
  }
  size_t sv = psim_jctx_key(c, "mesh");
  PSIM_CHECK(psim_json_check_keys(c, mesh, keys));
  const cJSON *axes = cJSON_GetObjectItemCaseSensitive(mesh, "axes");
  const cJSON *fb = cJSON_GetObjectItemCaseSensitive(mesh, "fallback");
  size_t s2 = psim_jctx_key(c, "axes");
  if (axes)
    PSIM_CHECK(read_axes(c, axes, &sp->mesh));
  psim_jctx_pop(c, s2);
  PSIM_CHECK(psim_strategy_check_devices_key(c, mesh, "devices", &sp->mesh_devices));
  s2 = psim_jctx_key(c, "fallback");
  if (fb)
    PSIM_CHECK(read_fallback(c, fb, &sp->mesh));
  psim_jctx_pop(c, sv);
  sp->layout = layout;
  if (layout) {
    sv = psim_jctx_key(c, "layout");
    PSIM_CHECK(read_layout(c, layout, &sp->mesh, false));
    psim_jctx_pop(c, sv);
  }
  const cJSON *el = cJSON_GetObjectItemCaseSensitive(root, "expert_layout");
  if (el) {
    sv = psim_jctx_key(c, "expert_layout");
    PSIM_CHECK(read_layout(c, el, &sp->mesh, true));
    psim_jctx_pop(c, sv);
  }
  return PSIM_OK;
}

static psim_status read_stage(psim_jctx *c, const cJSON *st) {
  static const char *const keys[] = {"layers", "devices", NULL};
  PSIM_CHECK(psim_json_check_keys(c, st, keys));
  const cJSON *layers = cJSON_GetObjectItemCaseSensitive(st, "layers"), *d = NULL;
  size_t sv = psim_jctx_key(c, "layers");
  if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) != 2)
    return psim_jerr(c, "expected [first, last]: the stage's inclusive layer range");
  int64_t a = 0, b = 0;
  size_t s2 = psim_jctx_index(c, 0);
  PSIM_CHECK(psim_json_value_int(c, layers->child, 0, INT32_MAX, &a));
  psim_jctx_pop(c, s2);
  s2 = psim_jctx_index(c, 1);
  PSIM_CHECK(psim_json_value_int(c, layers->child->next, a, INT32_MAX, &b));
  psim_jctx_pop(c, sv);
  if (!cJSON_GetObjectItemCaseSensitive(st, "devices"))
    return psim_jerr(c, "missing required key 'devices'");
  return psim_strategy_check_devices_key(c, st, "devices", &d);
}

static psim_status read_stages(psim_jctx *c, const cJSON *stages, psim_strategy_spec *sp) {
  size_t sv = psim_jctx_key(c, "stages");
  PSIM_CHECK(psim_json_expect_array(c, stages));
  int n = cJSON_GetArraySize(stages);
  if (n < 1)
    return psim_jerr(c, "no stages");
  size_t i = 0;
  for (const cJSON *it = stages->child; it; it = it->next, i++) {
    size_t s2 = psim_jctx_index(c, i);
    PSIM_CHECK(read_stage(c, it));
    psim_jctx_pop(c, s2);
  }
  if (n % sp->virtual_stages != 0)
    return psim_jerr(c, "%d entries is not a multiple of virtual_stages = %d", n,
                     (int)sp->virtual_stages);
  psim_jctx_pop(c, sv);
  sp->stages = stages;
  return PSIM_OK;
}

/* pipeline.layer_starts: op names, each starting a layer of the override (strategy.h). */
static psim_status read_layer_starts(psim_jctx *c, const cJSON *v, psim_strategy_spec *sp) {
  if (!v)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, "layer_starts");
  PSIM_CHECK(psim_json_expect_array(c, v));
  if (!v->child)
    return psim_jerr(c, "no entries (each names the first op of a layer)");
  size_t i = 0;
  for (const cJSON *it = v->child; it; it = it->next, i++)
    if (!cJSON_IsString(it)) {
      psim_jctx_index(c, i);
      return psim_jerr(c, "expected an op name");
    }
  psim_jctx_pop(c, sv);
  sp->layer_starts = v;
  return PSIM_OK;
}

static psim_status read_pipeline(psim_jctx *c, const cJSON *root, psim_strategy_spec *sp) {
  static const char *const keys[] = {"stages",         "micro_batches", "schedule",
                                     "virtual_stages", "layer_starts",  NULL};
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "pipeline");
  sp->micro_batches = 1;
  sp->virtual_stages = 1;
  if (!p)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, "pipeline");
  PSIM_CHECK(psim_json_check_keys(c, p, keys));
  PSIM_CHECK(
      psim_strategy_int32_key(c, p, "micro_batches", false, 1, MAX_DEGREE, &sp->micro_batches));
  PSIM_CHECK(psim_strategy_int32_key(c, p, "virtual_stages", false, 1, 4096, &sp->virtual_stages));
  bool given = false;
  PSIM_CHECK(enum_key(c, p, "schedule", p_sched, &sp->schedule, &given));
  if (!given)
    sp->schedule = psim_schedule_default(sp->virtual_stages);
  const char *why = psim_schedule_chunks_rule(sp->schedule, sp->virtual_stages);
  if (why)
    return psim_jerr(c, "schedule '%s' with virtual_stages = %d: it %s",
                     psim_schedule_name(sp->schedule), (int)sp->virtual_stages, why);
  const cJSON *stages = cJSON_GetObjectItemCaseSensitive(p, "stages");
  if (stages)
    PSIM_CHECK(read_stages(c, stages, sp));
  else if (sp->virtual_stages > 1)
    return psim_jerr(c, "virtual_stages needs explicit 'stages'");
  PSIM_CHECK(read_layer_starts(c, cJSON_GetObjectItemCaseSensitive(p, "layer_starts"), sp));
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

psim_status psim_strategy_apply_layer_starts(psim_jctx *c, const psim_strategy_spec *sp,
                                             const psim_model *m, psim_strategy *s) {
  if (!sp->layer_starts)
    return PSIM_OK;
  s->op_layer = psim_malloc((size_t)(m->n_ops > 0 ? m->n_ops : 1) * sizeof *s->op_layer);
  if (!s->op_layer)
    return psim_error(PSIM_ENOMEM, "out of memory expanding a strategy");
  size_t sv = psim_jctx_key(c, "pipeline");
  psim_jctx_key(c, "layer_starts");
  int32_t l = -1, prev = -1;
  size_t i = 0;
  for (const cJSON *it = sp->layer_starts->child; it; it = it->next, i++) {
    size_t s2 = psim_jctx_index(c, i);
    int32_t o = psim_model_find_op(m, it->valuestring);
    if (o < 0)
      return psim_jerr(c, "the model has no op named '%s'", it->valuestring);
    if (o <= prev || (i == 0 && o != 0))
      return psim_jerr(c,
                       "op '%s' must come after the previous entry's op in model order, "
                       "and the first entry must name the model's first op '%s'",
                       it->valuestring, m->ops[0].name);
    for (int32_t k = prev < 0 ? 0 : prev; k < o; k++)
      s->op_layer[k] = l;
    prev = o;
    l++;
    psim_jctx_pop(c, s2);
  }
  for (int32_t k = prev; k < m->n_ops; k++)
    s->op_layer[k] = l;
  s->n_op_layers = l + 1;
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status read_ps(psim_jctx *c, const cJSON *ps, psim_strategy_spec *sp) {
  static const char *const keys[] = {"servers", "mode", "backup_k", "replicas", NULL};
  PSIM_CHECK(psim_json_check_keys(c, ps, keys));
  if (!cJSON_GetObjectItemCaseSensitive(ps, "servers"))
    return psim_jerr(c, "missing required key 'servers'");
  PSIM_CHECK(psim_strategy_check_devices_key(c, ps, "servers", &sp->ps_servers));
  PSIM_CHECK(enum_key(c, ps, "mode", p_ps, &sp->ps_mode, NULL));
  PSIM_CHECK(psim_strategy_int32_key(c, ps, "replicas", false, 1, 64, &sp->ps_replicas));
  PSIM_CHECK(psim_strategy_int32_key(c, ps, "backup_k", sp->ps_mode == PSIM_PS_BACKUP, 1,
                                     MAX_DEVICES, &sp->ps_backup_k));
  return PSIM_OK;
}

static psim_status read_sync(psim_jctx *c, const cJSON *root, psim_strategy_spec *sp) {
  static const char *const keys[] = {"allreduce", "parameter_server", NULL};
  const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "gradient_sync");
  if (!g)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, "gradient_sync");
  PSIM_CHECK(psim_json_check_keys(c, g, keys));
  const cJSON *ps = cJSON_GetObjectItemCaseSensitive(g, "parameter_server");
  if (ps && cJSON_GetObjectItemCaseSensitive(g, "allreduce"))
    return psim_jerr(c, "give either 'allreduce' or 'parameter_server', not both");
  PSIM_CHECK(enum_key(c, g, "allreduce", p_ar, &sp->allreduce, NULL));
  if (ps) {
    sp->sync = PSIM_SYNC_PS;
    size_t s2 = psim_jctx_key(c, "parameter_server");
    PSIM_CHECK(read_ps(c, ps, sp));
    psim_jctx_pop(c, s2);
  }
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status read_tmpl_info(psim_jctx *c, const cJSON *root, psim_strategy_spec *sp) {
  static const char *const keys[] = {"name",
                                     "tp",
                                     "pp",
                                     "dp",
                                     "micro_batch",
                                     "virtual_stages",
                                     "ep",
                                     "etp",
                                     "cp",
                                     "first_stage_layers",
                                     "last_stage_layers",
                                     "pipeline_layout",
                                     NULL};
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "template_info");
  if (!t)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, "template_info");
  PSIM_CHECK(psim_json_check_keys(c, t, keys));
  const char *name = "";
  PSIM_CHECK(psim_json_string(c, t, "name", true, &name));
  if (strlen(name) >= sizeof sp->tmpl.name)
    return psim_jerr(c, "name '%.80s' too long", name);
  snprintf(sp->tmpl.name, sizeof sp->tmpl.name, "%s", name);
  PSIM_CHECK(psim_strategy_int32_key(c, t, "tp", false, 0, MAX_DEGREE, &sp->tmpl.tp));
  PSIM_CHECK(psim_strategy_int32_key(c, t, "pp", false, 0, MAX_DEGREE, &sp->tmpl.pp));
  PSIM_CHECK(psim_strategy_int32_key(c, t, "dp", false, 0, MAX_DEGREE, &sp->tmpl.dp));
  PSIM_CHECK(
      psim_strategy_int32_key(c, t, "micro_batch", false, 0, MAX_DEGREE, &sp->tmpl.micro_batch));
  PSIM_CHECK(
      psim_strategy_int32_key(c, t, "virtual_stages", false, 0, 4096, &sp->tmpl.virtual_stages));
  sp->tmpl.ep = sp->tmpl.cp = 1; /* written only when not the default (strategy_write.c) */
  sp->tmpl.etp = sp->tmpl.tp;
  PSIM_CHECK(psim_strategy_int32_key(c, t, "ep", false, 1, MAX_DEGREE, &sp->tmpl.ep));
  PSIM_CHECK(psim_strategy_int32_key(c, t, "etp", false, 1, MAX_DEGREE, &sp->tmpl.etp));
  PSIM_CHECK(psim_strategy_int32_key(c, t, "cp", false, 1, MAX_DEGREE, &sp->tmpl.cp));
  PSIM_CHECK(psim_strategy_int32_key(c, t, "first_stage_layers", false, 1, MAX_DEGREE,
                                     &sp->tmpl.first_stage_layers));
  PSIM_CHECK(psim_strategy_int32_key(c, t, "last_stage_layers", false, 1, MAX_DEGREE,
                                     &sp->tmpl.last_stage_layers));
  const char *layout = NULL;
  PSIM_CHECK(psim_json_string(c, t, "pipeline_layout", false, &layout));
  if (layout && strlen(layout) >= sizeof sp->tmpl.pipeline_layout)
    return psim_jerr(c, "pipeline_layout '%.80s' too long", layout);
  snprintf(sp->tmpl.pipeline_layout, sizeof sp->tmpl.pipeline_layout, "%s", layout ? layout : "");
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status read_explicit(psim_jctx *c, const cJSON *root, psim_strategy_spec *sp) {
  sp->form = FORM_EXPLICIT;
  PSIM_CHECK(psim_json_check_keys(c, root, explicit_keys));
  PSIM_CHECK(read_mesh(c, root, sp));
  PSIM_CHECK(psim_strategy_read_overrides(c, root, sp));
  PSIM_CHECK(read_pipeline(c, root, sp));
  PSIM_CHECK(read_sync(c, root, sp));
  PSIM_CHECK(read_tmpl_info(c, root, sp));
  PSIM_CHECK(read_common(c, root, sp));
  if (sp->stages && sp->mesh_devices)
    return psim_jerr(c, "mesh.devices: not allowed with pipeline.stages (each stage names its "
                        "devices)");
  return PSIM_OK;
}

static void spec_init(psim_strategy_spec *sp) {
  memset(sp, 0, sizeof *sp);
  psim_megatron_opts_init(&sp->mo);
  sp->bucket_bytes = 25.0 * 1048576.0; /* PyTorch DDP bucket_cap_mb = 25 */
  sp->zero_prefetch = PSIM_ZERO_PREFETCH_DEFAULT;
  sp->ps_replicas = 1;
  sp->dp_replicate = 1;
  sp->micro_batches = 1;
  sp->virtual_stages = 1;
  sp->schedule = PSIM_SCHED_1F1B;
}

psim_status psim_strategy_read_spec(psim_jctx *c, const cJSON *root, psim_strategy_spec *sp) {
  spec_init(sp);
  PSIM_CHECK(psim_json_expect_object(c, root));
  const char *fmt = NULL, *tmpl = NULL, *name = NULL;
  PSIM_CHECK(psim_json_string(c, root, "format", true, &fmt));
  if (strcmp(fmt, FORMAT) != 0) {
    size_t sv = psim_jctx_key(c, "format");
    psim_status s = psim_jerr(c, "'%.80s'; expected \"" FORMAT "\"", fmt);
    psim_jctx_pop(c, sv);
    return s;
  }
  PSIM_CHECK(psim_json_string(c, root, "name", false, &name));
  PSIM_CHECK(psim_json_string(c, root, "description", false, &name));
  PSIM_CHECK(psim_json_string(c, root, "template", false, &tmpl));
  return tmpl ? read_template(c, root, tmpl, sp) : read_explicit(c, root, sp);
}

void psim_strategy_spec_destroy(psim_strategy_spec *sp) {
  psim_constraints_destroy(&sp->overrides);
}

psim_status psim_strategy_check_json(const char *file, const cJSON *root) {
  psim_jctx c;
  psim_jctx_init(&c, file);
  psim_strategy_spec sp;
  psim_status st = psim_strategy_read_spec(&c, root, &sp);
  psim_strategy_spec_destroy(&sp);
  return st;
}
