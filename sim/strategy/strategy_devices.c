/* strategy_devices.c - device lists of plansim.strategy/1 files: indices,
 * names or {"first", "count", "stride"} ranges, every device distinct. */
#define _POSIX_C_SOURCE 200809L
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/strategy/strategy_impl.h"

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
psim_status psim_strategy_read_devices(psim_jctx *c, const cJSON *v, const psim_cluster *cl,
                                       int32_t **out, int32_t *n) {
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
  assert(s != PSIM_OK || !cl || devs[count - 1] < cl->n_devices);
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

psim_status psim_strategy_check_devices_key(psim_jctx *c, const cJSON *obj, const char *key,
                                            const cJSON **out) {
  *out = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!*out)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, key);
  int32_t *d = NULL, n = 0;
  psim_status s = psim_strategy_read_devices(c, *out, NULL, &d, &n);
  psim_jctx_pop(c, sv);
  return s;
}
