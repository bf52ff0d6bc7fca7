/* cluster_types.c - the device types of plansim.cluster/1 ("device_types":
 * figures, optionally on top of a built-in base) and the lookup both forms use
 * to name a type (a loaded one, or a built-in one added on first use). */
#include <stdio.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/cluster_impl.h"
/* Launch overhead of a custom device type that gives none: the GPU figure of
 * sim/ir/device_types.c (typical CUDA kernel launch latency). */
#define DEFAULT_LAUNCH_S 4.5e-6

/* A quantity that must be > 0 (bandwidths, memory sizes, peaks). */
psim_status psim_cluster_positive(psim_jctx *j, const cJSON *o, const char *key, bool required,
                                  psim_unit_kind kind, double *out) {
  double v = *out;
  PSIM_CHECK(psim_json_quantity(j, o, key, required, kind, &v));
  if (!(v > 0) && cJSON_GetObjectItemCaseSensitive(o, key)) {
    return psim_cluster_key_err(j, key, "must be greater than zero; expected %s",
                                psim_units_kind_name(kind));
  }
  *out = v;
  return PSIM_OK;
}

/* A fraction in (0, 1]. */
static psim_status fraction(psim_jctx *j, const cJSON *o, const char *key, double *out) {
  PSIM_CHECK(psim_json_number(j, o, key, false, 0, 1, out));
  if (!(*out > 0)) {
    return psim_cluster_key_err(j, key, "must be in (0, 1]");
  }
  return PSIM_OK;
}

/* ---- device types ---------------------------------------------------------- */

static psim_status load_peaks(psim_jctx *j, const cJSON *o, psim_device_type *t) {
  static const char *const keys[] = {"bf16", "fp16", "fp32", "tf32", "fp8", "fp64", NULL};
  static const psim_dtype dts[] = {PSIM_DTYPE_BF16,  PSIM_DTYPE_FP16, PSIM_DTYPE_FP32,
                                   PSIM_DTYPE_COUNT, PSIM_DTYPE_FP8,  PSIM_DTYPE_FP64};
  PSIM_CHECK(psim_json_check_keys(j, o, keys));
  for (int i = 0; keys[i]; i++) {
    double *dst = dts[i] == PSIM_DTYPE_COUNT ? &t->peak_tf32 : &t->peak_flops[dts[i]];
    PSIM_CHECK(psim_json_quantity(j, o, keys[i], false, PSIM_UNIT_FLOPS, dst));
  }
  if (!(t->peak_flops[PSIM_DTYPE_FP32] > 0))
    return psim_jerr(j, "'fp32' must be given and greater than zero (other dtypes fall back "
                        "to it)");
  return PSIM_OK;
}

static psim_status load_eff(psim_jctx *j, const cJSON *o, psim_efficiency *e) {
  static const char *const keys[] = {"gemm_max", "gemm_half_flops", "mem", NULL};
  PSIM_CHECK(psim_json_check_keys(j, o, keys));
  PSIM_CHECK(fraction(j, o, "gemm_max", &e->gemm_max));
  PSIM_CHECK(psim_json_number(j, o, "gemm_half_flops", false, 0, 1e30, &e->gemm_half_flops));
  return fraction(j, o, "mem", &e->mem);
}

/* The software's overheads on the type ("runtime"): the built-in GPU types carry the fitted
 * Megatron-LM figures (sim/ir/device_types.c); a type without a base has none. Each a time in
 * [0, 10 s]. */
static psim_status load_runtime(psim_jctx *j, const cJSON *o, psim_runtime *rt) {
  static const char *const keys[] = {"host_issue", "collective_skew", "iteration_overhead", NULL};
  double *dst[] = {&rt->host_issue_s, &rt->coll_sync_s, &rt->iteration_s};
  PSIM_CHECK(psim_json_check_keys(j, o, keys));
  for (int i = 0; keys[i]; i++) {
    PSIM_CHECK(psim_json_quantity(j, o, keys[i], false, PSIM_UNIT_TIME, dst[i]));
    if (!(*dst[i] >= 0 && *dst[i] <= 10))
      return psim_cluster_key_err(j, keys[i], "must be a time in [0, 10 s]");
  }
  return PSIM_OK;
}

static psim_status sub_object(psim_jctx *j, const cJSON *o, const char *key,
                              psim_status (*fn)(psim_jctx *, const cJSON *, void *), void *arg) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v)
    return PSIM_OK;
  size_t sv = psim_jctx_key(j, key);
  psim_status s = fn(j, v, arg);
  psim_jctx_pop(j, sv);
  return s;
}

static psim_status peaks_fn(psim_jctx *j, const cJSON *v, void *t) {
  return load_peaks(j, v, t);
}
static psim_status eff_fn(psim_jctx *j, const cJSON *v, void *e) {
  return load_eff(j, v, e);
}
static psim_status runtime_fn(psim_jctx *j, const cJSON *v, void *rt) {
  return load_runtime(j, v, rt);
}

/* The device type object: figures, optionally on top of a built-in "base". */
static psim_status load_type_fields(psim_jctx *j, const cJSON *o, psim_device_type *t) {
  static const char *const keys[] = {
      "base",    "peak_flops",  "memory", "memory_bandwidth", "launch_overhead", "efficiency",
      "runtime", "description", NULL};
  PSIM_CHECK(psim_json_check_keys(j, o, keys));
  const char *base = NULL, *desc = NULL;
  PSIM_CHECK(psim_json_string(j, o, "description", false, &desc));
  PSIM_CHECK(psim_json_string(j, o, "base", false, &base));
  psim_status bs = base ? psim_device_type_builtin(base, t) : PSIM_OK;
  if (bs == PSIM_ENOMEM)
    return bs;
  if (bs != PSIM_OK) {
    return psim_cluster_key_err(j, "base", "unknown built-in device type '%.80s'", base);
  }
  if (!base) {
    t->launch_s = DEFAULT_LAUNCH_S;
    t->eff = (psim_efficiency){0.75, 1e9, 0.8}; /* provisional, as sim/ir/device_types.c */
  }
  PSIM_CHECK(sub_object(j, o, "peak_flops", peaks_fn, t));
  if (!base && !cJSON_GetObjectItemCaseSensitive(o, "peak_flops"))
    return psim_jerr(j, "missing required key 'peak_flops' (or give a built-in 'base')");
  PSIM_CHECK(psim_cluster_positive(j, o, "memory", !base, PSIM_UNIT_BYTES, &t->mem_bytes));
  PSIM_CHECK(
      psim_cluster_positive(j, o, "memory_bandwidth", !base, PSIM_UNIT_BANDWIDTH, &t->mem_bw));
  PSIM_CHECK(psim_json_quantity(j, o, "launch_overhead", false, PSIM_UNIT_TIME, &t->launch_s));
  PSIM_CHECK(sub_object(j, o, "runtime", runtime_fn, &t->rt));
  return sub_object(j, o, "efficiency", eff_fn, &t->eff);
}

static psim_status load_type(psim_jctx *j, const cJSON *v, psim_cbuild *b) {
  psim_device_type t;
  memset(&t, 0, sizeof t);
  psim_status s;
  if (cJSON_IsString(v)) {
    s = psim_device_type_builtin(v->valuestring, &t);
    if (s == PSIM_ENOMEM)
      return s;
    if (s != PSIM_OK)
      return psim_jerr(j, "unknown built-in device type '%.80s'", v->valuestring);
  } else if (cJSON_IsObject(v)) {
    s = load_type_fields(j, v, &t);
  } else {
    s = psim_jerr(j, "expected a device type object or a built-in type name");
  }
  psim_free(t.name);
  t.name = s == PSIM_OK ? psim_strdup(v->string) : NULL;
  if (s == PSIM_OK && !t.name)
    s = psim_error(PSIM_ENOMEM, "out of memory");
  if (s != PSIM_OK)
    return s;
  int32_t idx;
  return psim_cb_type(b, &t, &idx);
}

psim_status psim_cluster_load_types(psim_jctx *j, const cJSON *root, psim_cbuild *b) {
  const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "device_types");
  if (!types)
    return PSIM_OK;
  size_t sv = psim_jctx_key(j, "device_types");
  psim_status s = psim_json_expect_object(j, types);
  for (const cJSON *it = types->child; it && s == PSIM_OK; it = it->next) {
    size_t sk = psim_jctx_key(j, it->string);
    if (psim_cluster_find_type(b->c, it->string) >= 0)
      s = psim_jerr(j, "duplicate device type name '%.80s'", it->string);
    else
      s = load_type(j, it, b);
    psim_jctx_pop(j, sk);
  }
  psim_jctx_pop(j, sv);
  return s;
}

psim_status psim_cluster_resolve_type(psim_jctx *j, psim_cbuild *b, const char *name,
                                      int32_t *out) {
  *out = psim_cluster_find_type(b->c, name);
  if (*out >= 0)
    return PSIM_OK;
  psim_device_type t;
  psim_status st = psim_device_type_builtin(name, &t);
  if (st == PSIM_ENOMEM)
    return st;
  if (st != PSIM_OK) {
    char list[256] = "";
    for (const char *const *n = psim_device_type_builtin_names(); *n; n++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", *list ? ", " : "", *n);
    return psim_jerr(j,
                     "unknown device type '%.80s'; expected one of device_types or a "
                     "built-in type (%s)",
                     name, list);
  }
  return psim_cb_type(b, &t, out);
}
