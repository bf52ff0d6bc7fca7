/* strategy_load.c - plansim.strategy/1 files: structure checks (no model
 * needed), template and explicit-form expansion against a model and cluster,
 * and the explicit form written back as JSON (docs/strategy.md). */
#define _POSIX_C_SOURCE 200809L
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/strategy/strategy.h"

#define FORMAT      "plansim.strategy/1"
#define MAX_DEVICES (1 << 24) /* longest device list accepted */
#define MAX_DEGREE  (1 << 24)

typedef enum form { FORM_EXPLICIT = 0, FORM_MEGATRON, FORM_DATA_PARALLEL, FORM_ZERO } form;

/* What a document says, before any model or cluster is known. */
typedef struct spec {
  form form;
  psim_megatron_opts mo; /* megatron; dp == 0 means "fill the cluster" */
  bool schedule_given;
  int32_t dp_n;          /* data_parallel / zero: 0 = all devices */
  int32_t micro_batches; /* data_parallel / zero / explicit pipeline */
  int32_t zero_stage;
  psim_recompute recompute;
  bool sequence_parallel, overlap_grad_reduce;
  double bucket_bytes;
  psim_allreduce_algo allreduce;
  psim_grad_sync sync;
  psim_ps_mode ps_mode;
  int32_t ps_backup_k, ps_replicas;
  psim_schedule schedule;
  int32_t virtual_stages;
  psim_mesh mesh;
  psim_template_info tmpl;
  const cJSON *mesh_devices, *layout, *ops, *stages, *ps_servers;
  psim_checkpoint checkpoint;
} spec;

/* ---------------- device lists ---------------- */

static psim_status device_index(psim_jctx *c, const cJSON *v, const psim_cluster *cl,
                                int32_t *out) {
  if (cJSON_IsString(v)) {
    for (int32_t i = 0; cl && i < cl->n_devices; i++)
      if (cl->devices[i].name && strcmp(cl->devices[i].name, v->valuestring) == 0) {
        *out = i;
        return PSIM_OK;
      }
    if (cl)
      return psim_jerr(c, "unknown device '%.80s' (not in the cluster)", v->valuestring);
    *out = 0;
    return PSIM_OK;
  }
  int64_t i = 0;
  PSIM_CHECK(psim_json_value_int(c, v, 0, MAX_DEVICES, &i));
  if (cl && i >= cl->n_devices)
    return psim_jerr(c, "device %lld out of range; the cluster has devices 0..%d", (long long)i,
                     (int)cl->n_devices - 1);
  *out = (int32_t)i;
  return PSIM_OK;
}

static psim_status range_params(psim_jctx *c, const cJSON *v, int64_t *first, int64_t *count,
                                int64_t *stride) {
  static const char *const keys[] = {"first", "count", "stride", NULL};
  PSIM_CHECK(psim_json_check_keys(c, v, keys));
  *first = 0;
  *stride = 1;
  PSIM_CHECK(psim_json_int(c, v, "first", true, 0, MAX_DEVICES, first));
  PSIM_CHECK(psim_json_int(c, v, "count", true, 1, MAX_DEVICES, count));
  PSIM_CHECK(psim_json_int(c, v, "stride", false, 1, MAX_DEVICES, stride));
  if (*first + (*count - 1) * *stride >= MAX_DEVICES)
    return psim_jerr(c, "the range ends beyond device %d", MAX_DEVICES);
  return PSIM_OK;
}

static int cmp_int32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* Fails when a device appears twice. O(n log n). */
static psim_status check_distinct(psim_jctx *c, const int32_t *devs, int32_t n) {
  int32_t *sorted = psim_malloc((size_t)n * sizeof *sorted);
  if (!sorted)
    return psim_error(PSIM_ENOMEM, "out of memory reading a device list");
  memcpy(sorted, devs, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_int32);
  psim_status s = PSIM_OK;
  for (int32_t i = 1; i < n && s == PSIM_OK; i++)
    if (sorted[i] == sorted[i - 1])
      s = psim_jerr(c, "device %d listed twice", (int)sorted[i]);
  psim_free(sorted);
  return s;
}

/* Reads a device list: an array of indices or names, or a range object
 * {"first", "count", "stride"}. With cl == NULL only the syntax is checked
 * and *out is left NULL. Every device must be distinct. */
static psim_status read_devices(psim_jctx *c, const cJSON *v, const psim_cluster *cl, int32_t **out,
                                int32_t *n) {
  *out = NULL;
  *n = 0;
  int64_t first = 0, count = 0, stride = 1;
  if (cJSON_IsObject(v))
    PSIM_CHECK(range_params(c, v, &first, &count, &stride));
  else if (!cJSON_IsArray(v))
    return psim_jerr(c, "expected a device list (an array, or {\"first\", \"count\", "
                        "\"stride\"})");
  else
    count = cJSON_GetArraySize(v);
  if (count < 1)
    return psim_jerr(c, "empty device list");
  if (count > MAX_DEVICES)
    return psim_jerr(c, "more than %d devices", MAX_DEVICES);
  int32_t *devs = psim_malloc((size_t)count * sizeof *devs);
  if (!devs)
    return psim_error(PSIM_ENOMEM, "out of memory reading a device list");
  psim_status s = PSIM_OK;
  const cJSON *it = cJSON_IsArray(v) ? v->child : NULL;
  for (int64_t i = 0; i < count && s == PSIM_OK; i++) {
    if (it) {
      size_t sv = psim_jctx_index(c, (size_t)i);
      s = device_index(c, it, cl, &devs[i]);
      psim_jctx_pop(c, sv);
      it = it->next;
    } else {
      devs[i] = (int32_t)(first + i * stride);
      if (cl && devs[i] >= cl->n_devices)
        s = psim_jerr(c, "device %d out of range; the cluster has devices 0..%d", (int)devs[i],
                      (int)cl->n_devices - 1);
    }
  }
  if (cl && s == PSIM_OK)
    s = check_distinct(c, devs, (int32_t)count);
  if (s != PSIM_OK || !cl) {
    psim_free(devs);
    return s;
  }
  *out = devs;
  *n = (int32_t)count;
  return PSIM_OK;
}

static psim_status check_devices_key(psim_jctx *c, const cJSON *obj, const char *key,
                                     const cJSON **out) {
  *out = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!*out)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, key);
  int32_t *d = NULL, n = 0;
  psim_status s = read_devices(c, *out, NULL, &d, &n);
  psim_jctx_pop(c, sv);
  return s;
}

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
static psim_status p_ar(const char *n, void *o) {
  return psim_allreduce_algo_parse(n, o);
}
static psim_status p_ps(const char *n, void *o) {
  return psim_ps_mode_parse(n, o);
}

static psim_status int32_key(psim_jctx *c, const cJSON *obj, const char *key, bool required,
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

/* Options every form accepts. */
static psim_status read_common(psim_jctx *c, const cJSON *root, spec *sp) {
  PSIM_CHECK(read_checkpoint(c, root, &sp->checkpoint));
  PSIM_CHECK(enum_key(c, root, "recompute", p_recomp, &sp->recompute, NULL));
  PSIM_CHECK(psim_json_bool(c, root, "sequence_parallel", false, &sp->sequence_parallel));
  PSIM_CHECK(psim_json_bool(c, root, "overlap_grad_reduce", false, &sp->overlap_grad_reduce));
  PSIM_CHECK(int32_key(c, root, "zero", false, 0, 3, &sp->zero_stage));
  PSIM_CHECK(psim_json_quantity(c, root, "bucket_size", false, PSIM_UNIT_BYTES, &sp->bucket_bytes));
  if (sp->bucket_bytes < 1) {
    size_t sv = psim_jctx_key(c, "bucket_size");
    psim_status s = psim_jerr(c, "a gradient bucket must hold at least 1 byte");
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
                                            "micro_batch",
                                            "virtual_stages",
                                            "schedule",
                                            "recompute",
                                            "sequence_parallel",
                                            "zero",
                                            "overlap_grad_reduce",
                                            "allreduce",
                                            "bucket_size",
                                            "checkpoint",
                                            NULL};
static const char *const dp_keys[] = {
    "format",    "name", "description",         "template",  "dp",          "micro_batches",
    "recompute", "zero", "overlap_grad_reduce", "allreduce", "bucket_size", "checkpoint",
    NULL};
static const char *const zero_keys[] = {"format",
                                        "name",
                                        "description",
                                        "template",
                                        "stage",
                                        "dp",
                                        "micro_batches",
                                        "recompute",
                                        "overlap_grad_reduce",
                                        "allreduce",
                                        "bucket_size",
                                        "checkpoint",
                                        NULL};

static psim_status read_megatron(psim_jctx *c, const cJSON *root, spec *sp) {
  psim_megatron_opts *o = &sp->mo;
  PSIM_CHECK(psim_json_check_keys(c, root, megatron_keys));
  o->dp = 0;
  PSIM_CHECK(int32_key(c, root, "tp", false, 1, MAX_DEGREE, &o->tp));
  PSIM_CHECK(int32_key(c, root, "pp", false, 1, MAX_DEGREE, &o->pp));
  PSIM_CHECK(int32_key(c, root, "dp", false, 1, MAX_DEGREE, &o->dp));
  PSIM_CHECK(int32_key(c, root, "micro_batch", false, 1, MAX_DEGREE, &o->micro_batch));
  PSIM_CHECK(int32_key(c, root, "virtual_stages", false, 1, 4096, &o->virtual_stages));
  PSIM_CHECK(enum_key(c, root, "schedule", p_sched, &o->schedule, &sp->schedule_given));
  PSIM_CHECK(read_common(c, root, sp));
  if (!sp->schedule_given && o->virtual_stages > 1)
    o->schedule = PSIM_SCHED_INTERLEAVED;
  size_t sv = psim_jctx_key(c, "schedule");
  psim_status s = PSIM_OK;
  if (o->virtual_stages > 1 && o->schedule != PSIM_SCHED_INTERLEAVED)
    s = psim_jerr(c, "'%s' with virtual_stages = %d; virtual stages need 'interleaved'",
                  psim_schedule_name(o->schedule), (int)o->virtual_stages);
  else if (o->virtual_stages == 1 && o->schedule == PSIM_SCHED_INTERLEAVED)
    s = psim_jerr(c, "'interleaved' needs virtual_stages > 1");
  psim_jctx_pop(c, sv);
  return s;
}

static psim_status read_template(psim_jctx *c, const cJSON *root, const char *name, spec *sp) {
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
    PSIM_CHECK(int32_key(c, root, "stage", true, 0, 3, &sp->zero_stage));
  PSIM_CHECK(int32_key(c, root, "dp", false, 1, MAX_DEGREE, &sp->dp_n));
  PSIM_CHECK(int32_key(c, root, "micro_batches", false, 1, MAX_DEGREE, &sp->micro_batches));
  return read_common(c, root, sp);
}

/* ---------------- explicit form: structure ---------------- */

static const char *const explicit_keys[] = {
    "format",      "name",          "description",       "mesh",
    "layout",      "ops",           "pipeline",          "gradient_sync",
    "zero",        "recompute",     "sequence_parallel", "overlap_grad_reduce",
    "bucket_size", "template_info", "checkpoint",        NULL};

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

/* A {key: axis name} object; fallback == true fills mesh->fallback. */
static psim_status read_axis_map(psim_jctx *c, const cJSON *obj, psim_mesh *mesh, bool fallback) {
  PSIM_CHECK(psim_json_expect_object(c, obj));
  for (const cJSON *it = obj->child; it; it = it->next) {
    size_t sv = psim_jctx_key(c, it->string);
    PSIM_CHECK(name_fits(c, it->string));
    if (!cJSON_IsString(it))
      return psim_jerr(c, "expected the name of a mesh axis (a string)");
    const char *axis = fallback ? it->string : it->valuestring;
    const char *key = fallback ? it->valuestring : it->string;
    PSIM_CHECK(name_fits(c, key));
    int32_t a = axis_find(mesh, axis);
    if (a < 0)
      return psim_jerr(c, "'%.80s' is not an axis of the mesh", axis);
    if (fallback) {
      snprintf(mesh->fallback[a], PSIM_MESH_NAME, "%s", key);
    } else {
      for (int32_t k = 0; k < mesh->n_layout; k++)
        if (strcmp(mesh->layout_key[k], key) == 0)
          return psim_jerr(c, "duplicate layout key '%.80s'", key);
      if (mesh->n_layout == PSIM_MESH_MAX_LAYOUT)
        return psim_jerr(c, "more than %d layout entries", PSIM_MESH_MAX_LAYOUT);
      snprintf(mesh->layout_key[mesh->n_layout], PSIM_MESH_NAME, "%s", key);
      mesh->layout_axis[mesh->n_layout++] = a;
    }
    psim_jctx_pop(c, sv);
  }
  return PSIM_OK;
}

static psim_status read_mesh(psim_jctx *c, const cJSON *root, spec *sp) {
  static const char *const keys[] = {"axes", "devices", "fallback", NULL};
  const cJSON *mesh = cJSON_GetObjectItemCaseSensitive(root, "mesh");
  const cJSON *layout = cJSON_GetObjectItemCaseSensitive(root, "layout");
  if (!mesh) {
    if (layout)
      return psim_jerr(c, "'layout' needs a 'mesh' with axes");
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
  PSIM_CHECK(check_devices_key(c, mesh, "devices", &sp->mesh_devices));
  s2 = psim_jctx_key(c, "fallback");
  if (fb)
    PSIM_CHECK(read_axis_map(c, fb, &sp->mesh, true));
  psim_jctx_pop(c, sv);
  sp->layout = layout;
  if (!layout)
    return PSIM_OK;
  sv = psim_jctx_key(c, "layout");
  PSIM_CHECK(read_axis_map(c, layout, &sp->mesh, false));
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status read_op_override(psim_jctx *c, const cJSON *o) {
  static const char *const keys[] = {"split", "devices", "replicas", NULL};
  PSIM_CHECK(psim_json_check_keys(c, o, keys));
  const cJSON *split = cJSON_GetObjectItemCaseSensitive(o, "split"), *d = NULL;
  if (split) {
    size_t sv = psim_jctx_key(c, "split");
    PSIM_CHECK(psim_json_expect_object(c, split));
    for (const cJSON *it = split->child; it; it = it->next) {
      size_t s2 = psim_jctx_key(c, it->string);
      int64_t deg = 0;
      PSIM_CHECK(psim_json_value_int(c, it, 1, MAX_DEGREE, &deg));
      psim_jctx_pop(c, s2);
    }
    psim_jctx_pop(c, sv);
  }
  int32_t r = 1;
  PSIM_CHECK(int32_key(c, o, "replicas", false, 1, MAX_DEVICES, &r));
  return check_devices_key(c, o, "devices", &d);
}

static psim_status read_ops(psim_jctx *c, const cJSON *root, spec *sp) {
  sp->ops = cJSON_GetObjectItemCaseSensitive(root, "ops");
  if (!sp->ops)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, "ops");
  PSIM_CHECK(psim_json_expect_object(c, sp->ops));
  for (const cJSON *it = sp->ops->child; it; it = it->next) {
    size_t s2 = psim_jctx_key(c, it->string);
    for (const cJSON *jt = sp->ops->child; jt != it; jt = jt->next)
      if (strcmp(jt->string, it->string) == 0)
        return psim_jerr(c, "duplicate op '%.80s'", it->string);
    PSIM_CHECK(read_op_override(c, it));
    psim_jctx_pop(c, s2);
  }
  psim_jctx_pop(c, sv);
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
  return check_devices_key(c, st, "devices", &d);
}

static psim_status read_stages(psim_jctx *c, const cJSON *stages, spec *sp) {
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

static psim_status read_pipeline(psim_jctx *c, const cJSON *root, spec *sp) {
  static const char *const keys[] = {"stages", "micro_batches", "schedule", "virtual_stages", NULL};
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "pipeline");
  sp->micro_batches = 1;
  sp->virtual_stages = 1;
  if (!p)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, "pipeline");
  PSIM_CHECK(psim_json_check_keys(c, p, keys));
  PSIM_CHECK(int32_key(c, p, "micro_batches", false, 1, MAX_DEGREE, &sp->micro_batches));
  PSIM_CHECK(int32_key(c, p, "virtual_stages", false, 1, 4096, &sp->virtual_stages));
  bool given = false;
  PSIM_CHECK(enum_key(c, p, "schedule", p_sched, &sp->schedule, &given));
  if (!given)
    sp->schedule = sp->virtual_stages > 1 ? PSIM_SCHED_INTERLEAVED : PSIM_SCHED_1F1B;
  if ((sp->virtual_stages > 1) != (sp->schedule == PSIM_SCHED_INTERLEAVED))
    return psim_jerr(c,
                     "schedule '%s' with virtual_stages = %d: 'interleaved' goes with "
                     "virtual_stages > 1 and only with it",
                     psim_schedule_name(sp->schedule), (int)sp->virtual_stages);
  const cJSON *stages = cJSON_GetObjectItemCaseSensitive(p, "stages");
  if (stages)
    PSIM_CHECK(read_stages(c, stages, sp));
  else if (sp->virtual_stages > 1)
    return psim_jerr(c, "virtual_stages needs explicit 'stages'");
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status read_ps(psim_jctx *c, const cJSON *ps, spec *sp) {
  static const char *const keys[] = {"servers", "mode", "backup_k", "replicas", NULL};
  PSIM_CHECK(psim_json_check_keys(c, ps, keys));
  if (!cJSON_GetObjectItemCaseSensitive(ps, "servers"))
    return psim_jerr(c, "missing required key 'servers'");
  PSIM_CHECK(check_devices_key(c, ps, "servers", &sp->ps_servers));
  PSIM_CHECK(enum_key(c, ps, "mode", p_ps, &sp->ps_mode, NULL));
  PSIM_CHECK(int32_key(c, ps, "replicas", false, 1, 64, &sp->ps_replicas));
  PSIM_CHECK(int32_key(c, ps, "backup_k", sp->ps_mode == PSIM_PS_BACKUP, 1, MAX_DEVICES,
                       &sp->ps_backup_k));
  return PSIM_OK;
}

static psim_status read_sync(psim_jctx *c, const cJSON *root, spec *sp) {
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

static psim_status read_tmpl_info(psim_jctx *c, const cJSON *root, spec *sp) {
  static const char *const keys[] = {"name",           "tp", "pp", "dp", "micro_batch",
                                     "virtual_stages", NULL};
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
  PSIM_CHECK(int32_key(c, t, "tp", false, 0, MAX_DEGREE, &sp->tmpl.tp));
  PSIM_CHECK(int32_key(c, t, "pp", false, 0, MAX_DEGREE, &sp->tmpl.pp));
  PSIM_CHECK(int32_key(c, t, "dp", false, 0, MAX_DEGREE, &sp->tmpl.dp));
  PSIM_CHECK(int32_key(c, t, "micro_batch", false, 0, MAX_DEGREE, &sp->tmpl.micro_batch));
  PSIM_CHECK(int32_key(c, t, "virtual_stages", false, 0, 4096, &sp->tmpl.virtual_stages));
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status read_explicit(psim_jctx *c, const cJSON *root, spec *sp) {
  sp->form = FORM_EXPLICIT;
  PSIM_CHECK(psim_json_check_keys(c, root, explicit_keys));
  PSIM_CHECK(read_mesh(c, root, sp));
  PSIM_CHECK(read_ops(c, root, sp));
  PSIM_CHECK(read_pipeline(c, root, sp));
  PSIM_CHECK(read_sync(c, root, sp));
  PSIM_CHECK(read_tmpl_info(c, root, sp));
  PSIM_CHECK(read_common(c, root, sp));
  if (sp->stages && sp->mesh_devices)
    return psim_jerr(c, "mesh.devices: not allowed with pipeline.stages (each stage names its "
                        "devices)");
  return PSIM_OK;
}

static void spec_init(spec *sp) {
  memset(sp, 0, sizeof *sp);
  psim_megatron_opts_init(&sp->mo);
  sp->bucket_bytes = 25.0 * 1048576.0; /* PyTorch DDP bucket_cap_mb = 25 */
  sp->ps_replicas = 1;
  sp->micro_batches = 1;
  sp->virtual_stages = 1;
  sp->schedule = PSIM_SCHED_1F1B;
}

static psim_status read_spec(psim_jctx *c, const cJSON *root, spec *sp) {
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

psim_status psim_strategy_check_json(const char *file, const cJSON *root) {
  psim_jctx c;
  psim_jctx_init(&c, file);
  spec sp;
  return read_spec(&c, root, &sp);
}

/* ---------------- expansion: templates ---------------- */

static void apply_common(const spec *sp, psim_strategy *s) {
  s->recompute = sp->recompute;
  s->sequence_parallel = s->sequence_parallel || sp->sequence_parallel;
  s->overlap_grad_reduce = sp->overlap_grad_reduce;
  s->bucket_bytes = sp->bucket_bytes;
  s->allreduce = sp->allreduce;
  s->zero_stage = sp->zero_stage;
  s->checkpoint = sp->checkpoint;
}

static psim_status expand_template(const spec *sp, const psim_model *m, psim_cluster *cl,
                                   psim_strategy *s) {
  if (sp->form == FORM_MEGATRON) {
    psim_megatron_opts o = sp->mo;
    o.recompute = sp->recompute;
    o.sequence_parallel = sp->sequence_parallel;
    o.zero_stage = sp->zero_stage;
    o.overlap_grad_reduce = sp->overlap_grad_reduce;
    if (o.dp == 0)
      o.dp = cl->n_devices / ((int64_t)o.tp * o.pp) > 0
                 ? (int32_t)(cl->n_devices / ((int64_t)o.tp * o.pp))
                 : 1;
    PSIM_CHECK(psim_strategy_megatron(m, cl, &o, s));
  } else {
    PSIM_CHECK(psim_strategy_data_parallel(m, cl, sp->dp_n, sp->micro_batches, s));
    if (sp->form == FORM_ZERO)
      snprintf(s->tmpl.name, sizeof s->tmpl.name, "zero");
  }
  apply_common(sp, s);
  return PSIM_OK;
}

/* ---------------- expansion: explicit form ---------------- */

static psim_status check_layout_keys(psim_jctx *c, const spec *sp, const psim_model *m) {
  for (int32_t k = 0; k < sp->mesh.n_layout; k++) {
    const char *key = sp->mesh.layout_key[k];
    psim_role r;
    bool is_dim = false;
    for (int32_t d = 0; d < m->n_dims && !is_dim; d++)
      is_dim = strcmp(m->dims[d].name, key) == 0;
    if (is_dim || psim_role_parse(key, &r) == PSIM_OK)
      continue;
    size_t sv = psim_jctx_key(c, "layout");
    psim_jctx_key(c, key);
    psim_status s = psim_jerr(c, "the model has no dim named '%s' and it is not a role name", key);
    psim_jctx_pop(c, sv);
    return s;
  }
  psim_error_clear();
  return PSIM_OK;
}

/* One stage covering every layer, on mesh.devices (default 0..n-1). */
static psim_status single_stage(psim_jctx *c, const spec *sp, const psim_model *m, psim_cluster *cl,
                                psim_strategy *s) {
  s->stages = psim_calloc(1, sizeof *s->stages);
  if (!s->stages)
    return psim_error(PSIM_ENOMEM, "out of memory expanding a strategy");
  s->stages[0].last_layer = m->n_layers - 1;
  if (sp->mesh_devices) {
    size_t sv = psim_jctx_key(c, "mesh");
    psim_jctx_key(c, "devices");
    PSIM_CHECK(
        read_devices(c, sp->mesh_devices, cl, &s->stages[0].devices, &s->stages[0].n_devices));
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

static psim_status stage_layers(psim_jctx *c, const cJSON *st, const psim_model *m, int32_t idx,
                                int32_t *owner, psim_stage *out) {
  const cJSON *layers = cJSON_GetObjectItemCaseSensitive(st, "layers");
  out->first_layer = (int32_t)layers->child->valuedouble;
  out->last_layer = (int32_t)layers->child->next->valuedouble;
  size_t sv = psim_jctx_key(c, "layers");
  if (out->last_layer >= m->n_layers)
    return psim_jerr(c, "layer %d out of range; the model has layers 0..%d", (int)out->last_layer,
                     (int)m->n_layers - 1);
  for (int32_t l = out->first_layer; l <= out->last_layer; l++) {
    if (owner[l] >= 0)
      return psim_jerr(c, "layer %d is assigned to two stages (%d and %d)", (int)l, (int)owner[l],
                       (int)idx);
    owner[l] = idx;
  }
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status read_all_stages(psim_jctx *c, const spec *sp, const psim_model *m,
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
    PSIM_CHECK(stage_layers(c, it, m, i, owner, &s->stages[i]));
    psim_jctx_key(c, "devices");
    PSIM_CHECK(read_devices(c, cJSON_GetObjectItemCaseSensitive(it, "devices"), cl,
                            &s->stages[i].devices, &s->stages[i].n_devices));
    psim_jctx_pop(c, s2);
  }
  for (int32_t l = 0; l < m->n_layers; l++)
    if (owner[l] < 0)
      return psim_jerr(c, "layer %d is in no stage", (int)l);
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status explicit_stages(psim_jctx *c, const spec *sp, const psim_model *m,
                                   psim_cluster *cl, psim_strategy *s) {
  if (!sp->stages)
    return single_stage(c, sp, m, cl, s);
  int32_t *owner = psim_malloc((size_t)(m->n_layers > 0 ? m->n_layers : 1) * sizeof *owner);
  if (!owner)
    return psim_error(PSIM_ENOMEM, "out of memory expanding a strategy");
  for (int32_t l = 0; l < m->n_layers; l++)
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

static psim_status split_dim(psim_jctx *c, const psim_strategy *s, const psim_model *m,
                             const psim_op *op, const cJSON *it, int32_t *degree) {
  int32_t d = -1; /* by dim name first, else by role name */
  for (int32_t j = 0; j < op->n_dims && d < 0; j++)
    if (strcmp(m->dims[op->dims[j].dim].name, it->string) == 0)
      d = j;
  for (int32_t j = 0; j < op->n_dims && d < 0; j++) {
    psim_role r = m->dims[op->dims[j].dim].role;
    if (r != PSIM_ROLE_NONE && strcmp(psim_role_name(r), it->string) == 0)
      d = j;
  }
  if (d < 0) {
    char list[400] = "";
    for (int32_t j = 0; j < op->n_dims; j++) {
      strncat(list, j ? ", " : "", sizeof list - strlen(list) - 1);
      strncat(list, m->dims[op->dims[j].dim].name, sizeof list - strlen(list) - 1);
    }
    return psim_jerr(c, "op '%s' has no dim '%.80s' (its dims: %s)", op->name, it->string, list);
  }
  int64_t ext = psim_strategy_dim_extent(s, m, op->dims[d].dim);
  int64_t deg = 0;
  PSIM_CHECK(psim_json_value_int(c, it, 1, MAX_DEGREE, &deg));
  if (deg > ext)
    return psim_jerr(c, "degree %lld is larger than the dim (%lld per micro-batch)", (long long)deg,
                     (long long)ext);
  degree[d] = (int32_t)deg;
  return PSIM_OK;
}

static psim_status override_split(psim_jctx *c, const psim_strategy *s, const psim_model *m,
                                  const psim_op *op, const cJSON *split, psim_op_config *cfg) {
  for (int32_t j = 0; j < PSIM_MAX_OP_DIMS; j++)
    cfg->degree[j] = 1;
  size_t sv = psim_jctx_key(c, "split");
  for (const cJSON *it = split->child; it; it = it->next) {
    size_t s2 = psim_jctx_key(c, it->string);
    PSIM_CHECK(split_dim(c, s, m, op, it, cfg->degree));
    psim_jctx_pop(c, s2);
  }
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

/* devices (given, or the first prod * replicas of the op's stage) and replicas. */
static psim_status override_devices(psim_jctx *c, const psim_strategy *s, const cJSON *o,
                                    psim_cluster *cl, int64_t prod, psim_op_config *cfg) {
  const cJSON *devs = cJSON_GetObjectItemCaseSensitive(o, "devices");
  const psim_stage *st = &s->stages[cfg->stage];
  int64_t r = 0;
  PSIM_CHECK(psim_json_int(c, o, "replicas", false, 1, MAX_DEVICES, &r));
  int64_t avail = st->n_devices;
  if (devs) {
    psim_op_config_destroy(cfg);
    size_t sv = psim_jctx_key(c, "devices");
    PSIM_CHECK(read_devices(c, devs, cl, &cfg->devices, &cfg->n_devices));
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
  if (!devs) {
    cfg->n_devices = (int32_t)(prod * r);
    memcpy(cfg->devices, st->devices, (size_t)cfg->n_devices * sizeof *cfg->devices);
  }
  return PSIM_OK;
}

static psim_status apply_override(psim_jctx *c, psim_strategy *s, const psim_model *m,
                                  psim_cluster *cl, int32_t i, const cJSON *o) {
  psim_op_config *cfg = &s->ops[i];
  const cJSON *split = cJSON_GetObjectItemCaseSensitive(o, "split");
  if (split)
    PSIM_CHECK(override_split(c, s, m, &m->ops[i], split, cfg));
  int64_t prod = 1;
  for (int32_t j = 0; j < m->ops[i].n_dims; j++) {
    prod *= cfg->degree[j];
    if (prod > MAX_DEVICES)
      return psim_jerr(c, "the split makes more than %d shards", MAX_DEVICES);
  }
  return override_devices(c, s, o, cl, prod, cfg);
}

static psim_status apply_overrides(psim_jctx *c, const spec *sp, psim_strategy *s,
                                   const psim_model *m, psim_cluster *cl) {
  if (!sp->ops)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, "ops");
  for (const cJSON *it = sp->ops->child; it; it = it->next) {
    size_t s2 = psim_jctx_key(c, it->string);
    bool glob = strchr(it->string, '*') != NULL;
    int32_t hits = 0;
    for (int32_t i = 0; i < m->n_ops; i++) {
      bool match = glob ? fnmatch(it->string, m->ops[i].name, 0) == 0
                        : strcmp(it->string, m->ops[i].name) == 0;
      if (!match)
        continue;
      hits++;
      PSIM_CHECK(apply_override(c, s, m, cl, i, it));
    }
    if (hits == 0)
      return psim_jerr(c, glob ? "the pattern matches no op of the model"
                               : "unknown op (the model has no op of this name)");
    psim_jctx_pop(c, s2);
  }
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status explicit_micro(psim_jctx *c, const spec *sp, const psim_model *m,
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
  if (s->schedule == PSIM_SCHED_INTERLEAVED && s->n_micro % s->n_stages != 0)
    return psim_jerr(c,
                     "interleaved needs the %d micro-batches to be a multiple of the %d "
                     "stages (Megatron-LM's rule)",
                     (int)s->n_micro, (int)s->n_stages);
  s->micro_batch = batch / s->n_micro;
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status explicit_ps(psim_jctx *c, const spec *sp, psim_cluster *cl, psim_strategy *s) {
  s->sync = sp->sync;
  if (sp->sync != PSIM_SYNC_PS)
    return PSIM_OK;
  s->ps.mode = sp->ps_mode;
  s->ps.backup_k = sp->ps_backup_k;
  s->ps.replicas = sp->ps_replicas;
  size_t sv = psim_jctx_key(c, "gradient_sync");
  psim_jctx_key(c, "parameter_server");
  psim_jctx_key(c, "servers");
  PSIM_CHECK(read_devices(c, sp->ps_servers, cl, &s->ps.servers, &s->ps.n_servers));
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status expand_explicit(psim_jctx *c, const spec *sp, const psim_model *m,
                                   psim_cluster *cl, psim_strategy *s) {
  PSIM_CHECK(check_layout_keys(c, sp, m));
  s->mesh = sp->mesh;
  s->tmpl = sp->tmpl;
  apply_common(sp, s);
  PSIM_CHECK(explicit_stages(c, sp, m, cl, s));
  PSIM_CHECK(check_mesh_fits(c, s));
  PSIM_CHECK(explicit_micro(c, sp, m, s));
  PSIM_CHECK(psim_strategy_apply_mesh(s, m));
  PSIM_CHECK(apply_overrides(c, sp, s, m, cl));
  return explicit_ps(c, sp, cl, s);
}

psim_status psim_strategy_from_json(const char *file, const cJSON *root, const psim_model *m,
                                    psim_cluster *cl, psim_strategy *s) {
  psim_jctx c;
  psim_jctx_init(&c, file);
  spec sp;
  psim_strategy_init(s);
  PSIM_CHECK(read_spec(&c, root, &sp));
  psim_status st;
  if (sp.form == FORM_EXPLICIT) {
    st = expand_explicit(&c, &sp, m, cl, s);
    if (st == PSIM_OK)
      st = psim_strategy_validate(s, m, cl, file);
  } else {
    st = expand_template(&sp, m, cl, s);
    if (st != PSIM_OK && st != PSIM_ENOMEM)
      psim_error_prefix("%s: ", file);
  }
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

/* ---------------- writing the explicit form ---------------- */

static psim_status enomem(void) {
  return psim_error(PSIM_ENOMEM, "out of memory writing a strategy");
}

static psim_status add_item(cJSON *parent, const char *key, cJSON *item) {
  if (!item)
    return enomem();
  if (key)
    cJSON_AddItemToObject(parent, key, item);
  else
    cJSON_AddItemToArray(parent, item);
  return PSIM_OK;
}

/* A device list: {"first","count","stride"} when it is an arithmetic
 * progression of 3 or more entries, else an array of indices. */
static psim_status devices_json(const int32_t *d, int32_t n, cJSON *parent, const char *key) {
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
  if (s->mesh.n_layout == 0)
    return PSIM_OK;
  cJSON *layout = NULL;
  PSIM_CHECK(psim_json_add_object(root, "layout", &layout));
  for (int32_t k = 0; k < s->mesh.n_layout; k++)
    PSIM_CHECK(
        psim_json_add_string(layout, s->mesh.layout_key[k], s->mesh.axis[s->mesh.layout_axis[k]]));
  return PSIM_OK;
}

static psim_status pipeline_json(const psim_strategy *s, cJSON *root) {
  cJSON *p = NULL, *stages = NULL;
  PSIM_CHECK(psim_json_add_object(root, "pipeline", &p));
  PSIM_CHECK(psim_json_add_number(p, "micro_batches", s->n_micro));
  PSIM_CHECK(psim_json_add_string(p, "schedule", psim_schedule_name(s->schedule)));
  PSIM_CHECK(psim_json_add_number(p, "virtual_stages", s->virtual_stages));
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
  return psim_json_add_number(t, "virtual_stages", s->tmpl.virtual_stages);
}

static psim_status options_json(const psim_strategy *s, cJSON *root) {
  PSIM_CHECK(psim_json_add_number(root, "zero", s->zero_stage));
  PSIM_CHECK(psim_json_add_string(root, "recompute", psim_recompute_name(s->recompute)));
  PSIM_CHECK(psim_json_add_bool(root, "sequence_parallel", s->sequence_parallel));
  PSIM_CHECK(psim_json_add_bool(root, "overlap_grad_reduce", s->overlap_grad_reduce));
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
  return psim_json_add_number(root, "bucket_size", s->bucket_bytes);
}

static psim_status to_json(const psim_strategy *s, const psim_model *m, cJSON *root) {
  PSIM_CHECK(psim_json_add_string(root, "format", FORMAT));
  PSIM_CHECK(tmpl_json(s, root));
  PSIM_CHECK(mesh_json(s, root));
  PSIM_CHECK(pipeline_json(s, root));
  PSIM_CHECK(ops_json(s, m, root));
  PSIM_CHECK(sync_json(s, root));
  return options_json(s, root);
}

psim_status psim_strategy_to_json(const psim_strategy *s, const psim_model *m,
                                  const psim_cluster *c, cJSON **out) {
  (void)c;
  psim_json_init_hooks();
  *out = NULL;
  if (!s->stages || s->n_ops != m->n_ops)
    return psim_error(PSIM_EINPUT, "the strategy does not belong to model '%s'", m->name);
  cJSON *root = cJSON_CreateObject();
  if (!root)
    return enomem();
  psim_status st = to_json(s, m, root);
  if (st != PSIM_OK) {
    cJSON_Delete(root);
    return st;
  }
  *out = root;
  return PSIM_OK;
}
