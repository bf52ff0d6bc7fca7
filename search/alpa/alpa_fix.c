/* alpa_fix.c - partial strategies (--fix) for the Alpa optimizer: Alpa's
 * reading of the constraints (sim/strategy/constraints.h) and the
 * constraints they put on sharding strategies and DP choices
 * (docs/strategy.md, "Partial strategies"). */
#include "search/alpa/alpa_fix.h"

#include <assert.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "sim/core/alloc.h"

/* The constraints of a search without --fix. */
static const psim_constraints no_constraints;

void psim_alpa_fix_init(psim_alpa_fix *f) {
  memset(f, 0, sizeof *f);
  f->k = &no_constraints;
}

void psim_alpa_fix_destroy(psim_alpa_fix *f) {
  psim_free(f->stage_last);
  psim_free(f->layout_axis);
  memset(f, 0, sizeof *f);
}

static const char *fname(const psim_alpa_fix *f) {
  return f->file ? f->file : "--fix";
}

static psim_status check_split(const psim_alpa_fix *f, const psim_constraint_op *op) {
  if (!cJSON_IsObject(op->split.json))
    return psim_error(PSIM_EINPUT, "%s: ops.%s.split: expected an object of dim -> degree",
                      fname(f), op->pattern);
  for (int32_t d = 0; d < op->split.n; d++) {
    const psim_constraint_entry *e = &op->split.entry[d];
    if (!e->is_number || e->number < 1)
      return psim_error(PSIM_EINPUT, "%s: ops.%s.split.%s: expected a degree >= 1", fname(f),
                        op->pattern, e->key);
  }
  return PSIM_OK;
}

/* Alpa fixes an op's split only: devices and any other key are refused. */
static psim_status check_op(const psim_alpa_fix *f, const psim_constraint_op *op) {
  const cJSON *k;
  cJSON_ArrayForEach(k, op->json) {
    if (strcmp(k->string, "devices") == 0)
      return psim_error(PSIM_EINPUT,
                        "%s: ops.%s.devices: placements are constraints of --search mcmc and "
                        "exhaustive; --search alpa or auto fixes an op's 'split' only",
                        fname(f), op->pattern);
    if (strcmp(k->string, "split") != 0)
      return psim_error(PSIM_EINPUT, "%s: ops.%s.%s: a partial strategy fixes an op's 'split' only",
                        fname(f), op->pattern, k->string);
  }
  if (!op->split.json)
    return psim_error(PSIM_EINPUT, "%s: ops.%s: expected {\"split\": {...}}", fname(f),
                      op->pattern);
  return check_split(f, op);
}

static psim_status check_ops(const psim_alpa_fix *f) {
  for (int32_t e = 0; e < f->k->n_ops; e++)
    PSIM_CHECK(check_op(f, &f->k->ops[e]));
  return PSIM_OK;
}

static psim_status parse_stages(psim_alpa_fix *f, const cJSON *stages, const psim_model *m) {
  int32_t n = cJSON_GetArraySize(stages);
  psim_free(f->stage_last);
  f->stage_last = psim_malloc((size_t)(n > 0 ? n : 1) * sizeof *f->stage_last);
  if (!f->stage_last)
    return psim_error(PSIM_ENOMEM, "out of memory (--fix)");
  int32_t next = 0;
  for (int32_t i = 0; i < n; i++) {
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(stages, i), "layers");
    if (cJSON_GetArraySize(l) != 2 || cJSON_GetArrayItem(l, 0)->valueint != next ||
        cJSON_GetArrayItem(l, 1)->valueint < next)
      return psim_error(PSIM_EINPUT,
                        "%s: pipeline.stages[%d].layers: expected [%d, last] (stages cover the "
                        "layers in order)",
                        fname(f), (int)i, (int)next);
    next = cJSON_GetArrayItem(l, 1)->valueint + 1;
    f->stage_last[i] = next - 1;
  }
  if (next != m->n_layers)
    return psim_error(PSIM_EINPUT,
                      "%s: pipeline.stages: the stages end at layer %d but the "
                      "model has %d layers",
                      fname(f), (int)next - 1, (int)m->n_layers);
  f->n_stages = n;
  return PSIM_OK;
}

static psim_status parse_pipeline(psim_alpa_fix *f, const cJSON *p, const psim_model *m) {
  const cJSON *k;
  cJSON_ArrayForEach(k, p) {
    if (strcmp(k->string, "micro_batches") == 0 && cJSON_IsNumber(k) && k->valuedouble >= 1)
      f->n_micro = (int32_t)k->valuedouble;
    else if (strcmp(k->string, "stages") == 0 && cJSON_IsArray(k))
      PSIM_CHECK(parse_stages(f, k, m));
    else if (!(strcmp(k->string, "schedule") == 0 && cJSON_IsString(k) &&
               strcmp(k->valuestring, "1f1b") == 0))
      return psim_error(PSIM_EINPUT,
                        "%s: pipeline.%s: a partial strategy fixes micro_batches, stages "
                        "(layer ranges) and schedule \"1f1b\" only",
                        fname(f), k->string);
  }
  return PSIM_OK;
}

static psim_status parse_mesh(psim_alpa_fix *f) {
  const psim_constraint_map *axes = &f->k->mesh_axes;
  if (!cJSON_IsObject(axes->json) || axes->n < 1 || axes->n > 2)
    return psim_error(PSIM_EINPUT, "%s: mesh.axes: expected one or two axes", fname(f));
  f->mesh[0] = f->mesh[1] = 1;
  f->axis_name[0] = f->axis_name[1] = "";
  for (int32_t i = 0; i < axes->n; i++) {
    f->axis_name[i] = axes->entry[i].key;
    f->mesh[i] = axes->entry[i].is_number ? (int32_t)axes->entry[i].number : 0;
  }
  if (f->mesh[0] < 1 || f->mesh[1] < 1)
    return psim_error(PSIM_EINPUT, "%s: mesh.axes: sizes must be integers >= 1", fname(f));
  f->has_mesh = true;
  return PSIM_OK;
}

static psim_status parse_layout(psim_alpa_fix *f) {
  const psim_constraint_map *layout = &f->k->layout;
  if (!f->has_mesh)
    return psim_error(PSIM_EINPUT, "%s: layout: needs \"mesh\" to name its axes", fname(f));
  f->layout_axis = psim_calloc((size_t)(layout->n > 0 ? layout->n : 1), sizeof *f->layout_axis);
  if (!f->layout_axis)
    return psim_error(PSIM_ENOMEM, "out of memory (--fix)");
  for (int32_t e = 0; e < layout->n; e++) {
    int32_t axis = -1;
    for (int a = 0; a < 2 && layout->entry[e].string; a++)
      if (strcmp(f->axis_name[a], layout->entry[e].string) == 0)
        axis = a;
    if (axis < 0)
      return psim_error(PSIM_EINPUT, "%s: layout.%s: expected an axis of mesh.axes", fname(f),
                        layout->entry[e].key);
    f->layout_axis[e] = axis;
  }
  return PSIM_OK;
}

static psim_status parse_key(psim_alpa_fix *f, const cJSON *k, const psim_model *m) {
  if (strcmp(k->string, "format") == 0 || strcmp(k->string, "name") == 0 ||
      strcmp(k->string, "description") == 0)
    return PSIM_OK;
  if (strcmp(k->string, "ops") == 0 && cJSON_IsObject(k))
    return check_ops(f);
  if (strcmp(k->string, "pipeline") == 0 && cJSON_IsObject(k))
    return parse_pipeline(f, k, m);
  if (strcmp(k->string, "mesh") == 0 && cJSON_IsObject(k))
    return parse_mesh(f);
  if (strcmp(k->string, "layout") == 0 && cJSON_IsObject(k))
    return PSIM_OK; /* after the mesh */
  if (strcmp(k->string, "recompute") == 0 && cJSON_IsString(k)) {
    f->has_recompute = true;
    return psim_recompute_parse(k->valuestring, &f->recompute);
  }
  if (strcmp(k->string, "split") == 0)
    return psim_error(PSIM_EINPUT,
                      "%s: split: a top-level split is a constraint of --search mcmc and "
                      "exhaustive; for --search alpa or auto use a layout over mesh axes, or "
                      "ops.NAME.split (docs/strategy.md)",
                      fname(f));
  return psim_error(PSIM_EINPUT,
                    "%s: %s: a partial strategy may fix ops, pipeline, mesh, layout and "
                    "recompute only",
                    fname(f), k->string);
}

/* Checks that every op pattern matches an op. */
static psim_status check_patterns(const psim_alpa_fix *f, const psim_model *m) {
  for (int32_t e = 0; e < f->k->n_ops; e++) {
    bool hit = false;
    for (int32_t i = 0; i < m->n_ops && !hit; i++)
      hit = psim_constraint_op_matches(&f->k->ops[e], m->ops[i].name);
    if (!hit)
      return psim_error(PSIM_EINPUT, "%s: ops.%s: matches no op of %s", fname(f),
                        f->k->ops[e].pattern, m->name);
  }
  return PSIM_OK;
}

psim_status psim_alpa_fix_parse(const psim_constraints *k, const psim_model *m, psim_alpa_fix *f) {
  psim_alpa_fix_init(f);
  if (!k || !k->root)
    return PSIM_OK;
  f->file = k->file;
  f->k = k;
  const cJSON *root = k->root;
  f->active = true;
  const char *fmt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "format"));
  if (!cJSON_IsObject(root) || !fmt || strcmp(fmt, "plansim.strategy/1") != 0)
    return psim_error(PSIM_EINPUT, "%s: expected a plansim.strategy/1 object", fname(f));
  if (cJSON_GetObjectItemCaseSensitive(root, "template"))
    return psim_error(PSIM_EINPUT, "%s: template: a partial strategy is in the explicit form",
                      fname(f));
  const cJSON *key;
  cJSON_ArrayForEach(key, root) PSIM_CHECK(parse_key(f, key, m));
  if (f->k->layout.json)
    PSIM_CHECK(parse_layout(f));
  return check_patterns(f, m);
}

int32_t psim_alpa_fix_entries(const psim_alpa_fix *f) {
  return f->k->n_ops + (f->layout_axis ? f->k->layout.n : 0);
}

/* Op dim index of op matching key by dim name, else by role name; -1. */
static int32_t key_dim(const psim_model *m, const psim_op *op, const char *key) {
  for (int32_t i = 0; i < op->n_dims; i++)
    if (strcmp(m->dims[op->dims[i].dim].name, key) == 0)
      return i;
  for (int32_t i = 0; i < op->n_dims; i++)
    if (strcmp(psim_role_name(m->dims[op->dims[i].dim].role), key) == 0)
      return i;
  return -1;
}

psim_status psim_alpa_fix_degrees(const psim_alpa_fix *f, const psim_model *m, int32_t op,
                                  int32_t *degree, uint8_t *hit) {
  assert(op >= 0 && op < m->n_ops);
  const psim_op *o = &m->ops[op];
  for (int32_t i = 0; i < o->n_dims; i++)
    degree[i] = 0; /* free */
  for (int32_t e = 0; e < f->k->n_ops; e++) {
    const psim_constraint_op *c = &f->k->ops[e];
    if (!psim_constraint_op_matches(c, o->name))
      continue;
    if (hit)
      hit[e] = 1;
    for (int32_t i = 0; i < o->n_dims; i++)
      degree[i] = 1;
    for (int32_t k = 0; k < c->split.n; k++) {
      const char *key = c->split.entry[k].key;
      int32_t i = key_dim(m, o, key);
      if (i < 0)
        return psim_error(PSIM_EINPUT, "%s: ops.%s.split.%s: op '%s' has no dim '%s'", fname(f),
                          c->pattern, key, o->name, key);
      degree[i] = (int32_t)c->split.entry[k].number;
    }
  }
  return PSIM_OK;
}

bool psim_alpa_fix_same_entries(const psim_alpa_fix *f, const psim_model *m, int32_t a, int32_t b) {
  for (int32_t e = 0; e < f->k->n_ops; e++)
    if (psim_constraint_op_matches(&f->k->ops[e], m->ops[a].name) !=
        psim_constraint_op_matches(&f->k->ops[e], m->ops[b].name))
      return false;
  return true;
}

int32_t psim_alpa_fix_layout_dim(const psim_alpa_fix *f, const psim_model *m, int32_t op, int axis,
                                 uint8_t *hit) {
  assert(axis == 0 || axis == 1);
  for (int32_t e = 0; f->layout_axis && e < f->k->layout.n; e++) {
    if (f->layout_axis[e] != axis)
      continue;
    int32_t i = key_dim(m, &m->ops[op], f->k->layout.entry[e].key);
    if (i >= 0) {
      hit[f->k->n_ops + e] = 1;
      return i;
    }
  }
  return -1;
}

void psim_alpa_fix_describe(const psim_alpa_fix *f, const uint8_t *blame, char *buf, size_t size) {
  size_t n = 0;
  buf[0] = '\0';
  for (int32_t e = 0; e < f->k->n_ops && n < size; e++)
    if (blame[e])
      n += (size_t)snprintf(buf + n, size - n, "%sops.%s", n ? ", " : "", f->k->ops[e].pattern);
  for (int32_t e = 0; f->layout_axis && e < f->k->layout.n && n < size; e++)
    if (blame[f->k->n_ops + e])
      n += (size_t)snprintf(buf + n, size - n, "%slayout.%s", n ? ", " : "",
                            f->k->layout.entry[e].key);
}
