/* alpa_fix.c - partial strategies (--fix) for the Alpa optimizer: parsing
 * and the constraints they put on sharding strategies and DP choices
 * (docs/strategy.md, "Partial strategies"). */
#include <cjson/cJSON.h>
#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

#include "search/alpa/alpa_fix.h"
#include "sim/core/alloc.h"

void psim_alpa_fix_init(psim_alpa_fix *f) {
  memset(f, 0, sizeof *f);
}

void psim_alpa_fix_destroy(psim_alpa_fix *f) {
  psim_free(f->stage_last);
  memset(f, 0, sizeof *f);
}

static const char *fname(const psim_alpa_fix *f) {
  return f->file ? f->file : "--fix";
}

static psim_status parse_split(psim_alpa_fix *f, int32_t e, const cJSON *split) {
  psim_alpa_fix_op *op = &f->ops[e];
  if (!cJSON_IsObject(split))
    return psim_error(PSIM_EINPUT, "%s: ops.%s.split: expected an object of dim -> degree",
                      fname(f), op->pattern);
  const cJSON *d;
  cJSON_ArrayForEach(d, split) {
    if (op->n_split >= PSIM_MAX_OP_DIMS || !cJSON_IsNumber(d) || d->valuedouble < 1)
      return psim_error(PSIM_EINPUT, "%s: ops.%s.split.%s: expected a degree >= 1", fname(f),
                        op->pattern, d->string);
    snprintf(op->split_key[op->n_split], sizeof op->split_key[0], "%s", d->string);
    op->split_degree[op->n_split++] = (int32_t)d->valuedouble;
  }
  return PSIM_OK;
}

static psim_status parse_ops(psim_alpa_fix *f, const cJSON *ops) {
  const cJSON *o;
  cJSON_ArrayForEach(o, ops) {
    if (f->n_ops >= PSIM_ALPA_FIX_MAX_OPS)
      return psim_error(PSIM_EINPUT, "%s: ops: more than %d entries", fname(f),
                        PSIM_ALPA_FIX_MAX_OPS);
    psim_alpa_fix_op *op = &f->ops[f->n_ops];
    snprintf(op->pattern, sizeof op->pattern, "%s", o->string);
    const cJSON *k;
    cJSON_ArrayForEach(k, o) {
      if (strcmp(k->string, "devices") == 0)
        return psim_error(PSIM_EINPUT,
                          "%s: ops.%s.devices: placements are constraints of --search mcmc and "
                          "exhaustive; --search alpa or auto fixes an op's 'split' only",
                          fname(f), op->pattern);
      if (strcmp(k->string, "split") != 0)
        return psim_error(PSIM_EINPUT,
                          "%s: ops.%s.%s: a partial strategy fixes an op's 'split' only", fname(f),
                          op->pattern, k->string);
    }
    const cJSON *split = cJSON_GetObjectItemCaseSensitive(o, "split");
    if (!split)
      return psim_error(PSIM_EINPUT, "%s: ops.%s: expected {\"split\": {...}}", fname(f),
                        op->pattern);
    PSIM_CHECK(parse_split(f, f->n_ops++, split));
  }
  return PSIM_OK;
}

static psim_status parse_stages(psim_alpa_fix *f, const cJSON *stages, const psim_model *m) {
  int32_t n = cJSON_GetArraySize(stages);
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

static psim_status parse_mesh(psim_alpa_fix *f, const cJSON *mesh) {
  const cJSON *axes = cJSON_GetObjectItemCaseSensitive(mesh, "axes"), *a;
  int32_t n = cJSON_GetArraySize(axes);
  if (!cJSON_IsObject(axes) || n < 1 || n > 2)
    return psim_error(PSIM_EINPUT, "%s: mesh.axes: expected one or two axes", fname(f));
  f->mesh[0] = f->mesh[1] = 1;
  int32_t i = 0;
  cJSON_ArrayForEach(a, axes) {
    snprintf(f->axis_name[i], sizeof f->axis_name[0], "%s", a->string);
    f->mesh[i++] = cJSON_IsNumber(a) ? (int32_t)a->valuedouble : 0;
  }
  if (f->mesh[0] < 1 || f->mesh[1] < 1)
    return psim_error(PSIM_EINPUT, "%s: mesh.axes: sizes must be integers >= 1", fname(f));
  f->has_mesh = true;
  return PSIM_OK;
}

static psim_status parse_layout(psim_alpa_fix *f, const cJSON *layout) {
  const cJSON *k;
  if (!f->has_mesh)
    return psim_error(PSIM_EINPUT, "%s: layout: needs \"mesh\" to name its axes", fname(f));
  cJSON_ArrayForEach(k, layout) {
    int32_t axis = -1;
    for (int a = 0; a < 2 && cJSON_IsString(k); a++)
      if (strcmp(f->axis_name[a], k->valuestring) == 0)
        axis = a;
    if (axis < 0 || f->n_layout >= PSIM_ALPA_FIX_MAX_OPS)
      return psim_error(PSIM_EINPUT, "%s: layout.%s: expected an axis of mesh.axes", fname(f),
                        k->string);
    snprintf(f->layout_key[f->n_layout], sizeof f->layout_key[0], "%s", k->string);
    f->layout_axis[f->n_layout++] = axis;
  }
  return PSIM_OK;
}

static psim_status parse_key(psim_alpa_fix *f, const cJSON *k, const psim_model *m) {
  if (strcmp(k->string, "format") == 0 || strcmp(k->string, "name") == 0 ||
      strcmp(k->string, "description") == 0)
    return PSIM_OK;
  if (strcmp(k->string, "ops") == 0 && cJSON_IsObject(k))
    return parse_ops(f, k);
  if (strcmp(k->string, "pipeline") == 0 && cJSON_IsObject(k))
    return parse_pipeline(f, k, m);
  if (strcmp(k->string, "mesh") == 0 && cJSON_IsObject(k))
    return parse_mesh(f, k);
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
  for (int32_t e = 0; e < f->n_ops; e++) {
    bool hit = false;
    for (int32_t i = 0; i < m->n_ops && !hit; i++)
      hit = fnmatch(f->ops[e].pattern, m->ops[i].name, 0) == 0;
    if (!hit)
      return psim_error(PSIM_EINPUT, "%s: ops.%s: matches no op of %s", fname(f), f->ops[e].pattern,
                        m->name);
  }
  return PSIM_OK;
}

psim_status psim_alpa_fix_parse(const cJSON *root, const char *file, const psim_model *m,
                                psim_alpa_fix *f) {
  psim_alpa_fix_init(f);
  f->file = file;
  if (!root)
    return PSIM_OK;
  f->active = true;
  const char *fmt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "format"));
  if (!cJSON_IsObject(root) || !fmt || strcmp(fmt, "plansim.strategy/1") != 0)
    return psim_error(PSIM_EINPUT, "%s: expected a plansim.strategy/1 object", fname(f));
  if (cJSON_GetObjectItemCaseSensitive(root, "template"))
    return psim_error(PSIM_EINPUT, "%s: template: a partial strategy is in the explicit form",
                      fname(f));
  const cJSON *k;
  cJSON_ArrayForEach(k, root) PSIM_CHECK(parse_key(f, k, m));
  const cJSON *layout = cJSON_GetObjectItemCaseSensitive(root, "layout");
  if (layout)
    PSIM_CHECK(parse_layout(f, layout));
  return check_patterns(f, m);
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
                                  int32_t *degree, uint64_t *entries) {
  const psim_op *o = &m->ops[op];
  *entries = 0;
  for (int32_t i = 0; i < o->n_dims; i++)
    degree[i] = 0; /* free */
  for (int32_t e = 0; e < f->n_ops; e++) {
    if (fnmatch(f->ops[e].pattern, o->name, 0) != 0)
      continue;
    *entries |= 1ull << (e & 63);
    for (int32_t i = 0; i < o->n_dims; i++)
      degree[i] = 1;
    for (int32_t k = 0; k < f->ops[e].n_split; k++) {
      int32_t i = key_dim(m, o, f->ops[e].split_key[k]);
      if (i < 0)
        return psim_error(PSIM_EINPUT, "%s: ops.%s.split.%s: op '%s' has no dim '%s'", fname(f),
                          f->ops[e].pattern, f->ops[e].split_key[k], o->name,
                          f->ops[e].split_key[k]);
      degree[i] = f->ops[e].split_degree[k];
    }
  }
  return PSIM_OK;
}

int32_t psim_alpa_fix_layout_dim(const psim_alpa_fix *f, const psim_model *m, int32_t op, int axis,
                                 uint64_t *entries) {
  for (int32_t e = 0; e < f->n_layout; e++) {
    if (f->layout_axis[e] != axis)
      continue;
    int32_t i = key_dim(m, &m->ops[op], f->layout_key[e]);
    if (i >= 0) {
      *entries |= 1ull << ((PSIM_ALPA_FIX_MAX_OPS + e) & 63);
      return i;
    }
  }
  return -1;
}

void psim_alpa_fix_describe(const psim_alpa_fix *f, uint64_t entries, char *buf, size_t size) {
  size_t n = 0;
  buf[0] = '\0';
  for (int32_t e = 0; e < f->n_ops && n < size; e++)
    if (entries & (1ull << (e & 63)))
      n += (size_t)snprintf(buf + n, size - n, "%sops.%s", n ? ", " : "", f->ops[e].pattern);
  for (int32_t e = 0; e < f->n_layout && n < size; e++)
    if (entries & (1ull << ((PSIM_ALPA_FIX_MAX_OPS + e) & 63)))
      n += (size_t)snprintf(buf + n, size - n, "%slayout.%s", n ? ", " : "", f->layout_key[e]);
}
