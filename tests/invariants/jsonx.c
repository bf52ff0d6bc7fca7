/* jsonx.c - cluster documents changed for the monotonicity properties (inv.h): bandwidths,
 * peak FLOP/s and latencies scaled, as a person would edit the file (docs/cluster.md). */
#include <string.h>

#include "inv.h"
#include "sim/core/units.h"

/* Replaces o[key] (a number or a string with a unit) by f times its value. */
static bool scale_item(cJSON *o, const char *key, psim_unit_kind kind, double f) {
  cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v)
    return true;
  double x;
  if (cJSON_IsNumber(v))
    x = v->valuedouble;
  else if (!cJSON_IsString(v) || psim_units_parse(v->valuestring, kind, &x) != PSIM_OK)
    return false;
  return cJSON_ReplaceItemInObjectCaseSensitive(o, key, cJSON_CreateNumber(x * f));
}

static bool scale_tables(cJSON *cluster, double f) {
  cJSON *t;
  cJSON_ArrayForEach(t, cJSON_GetObjectItem(cluster, "collectives")) {
    cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(t, "points")) {
      cJSON *bw = cJSON_GetArrayItem(p, 1);
      double x;
      if (cJSON_IsNumber(bw))
        x = bw->valuedouble;
      else if (!bw || psim_units_parse(bw->valuestring, PSIM_UNIT_BANDWIDTH, &x) != PSIM_OK)
        return false;
      cJSON_ReplaceItemInArray(p, 1, cJSON_CreateNumber(x * f));
    }
  }
  return true;
}

bool inv_scale_bandwidth(cJSON *cluster, double f) {
  static const char *const top[] = {"nic_bandwidth", "pcie_bandwidth", NULL};
  static const char *const sub[] = {"bandwidth", "host_bandwidth", "link_bandwidth", NULL};
  bool ok = true;
  for (int i = 0; top[i]; i++)
    ok = ok && scale_item(cluster, top[i], PSIM_UNIT_BANDWIDTH, f);
  for (int i = 0; sub[i]; i++) {
    ok = ok &&
         scale_item(cJSON_GetObjectItem(cluster, "intra_node"), sub[i], PSIM_UNIT_BANDWIDTH, f);
    ok = ok && scale_item(cJSON_GetObjectItem(cluster, "fabric"), sub[i], PSIM_UNIT_BANDWIDTH, f);
  }
  cJSON *l;
  cJSON_ArrayForEach(l, cJSON_GetObjectItem(cluster, "links")) {
    ok = ok && scale_item(l, "bandwidth", PSIM_UNIT_BANDWIDTH, f);
  }
  return ok && scale_tables(cluster, f);
}

bool inv_scale_latency(cJSON *cluster, double f) {
  bool ok = cJSON_GetObjectItem(cluster, "links") != NULL;
  cJSON *l;
  cJSON_ArrayForEach(l, cJSON_GetObjectItem(cluster, "links")) {
    if (!cJSON_GetObjectItem(l, "latency"))
      cJSON_AddNumberToObject(l, "latency", 0);
    ok = ok && scale_item(l, "latency", PSIM_UNIT_TIME, f);
  }
  return ok;
}

/* device_types[name] as an object with a base and its peak_flops written out. */
static cJSON *type_object(cJSON *types, const char *name) {
  cJSON *e = cJSON_GetObjectItemCaseSensitive(types, name);
  if (cJSON_IsObject(e) && cJSON_GetObjectItem(e, "peak_flops"))
    return e;
  const char *base = cJSON_IsString(e) ? e->valuestring : name;
  if (cJSON_IsObject(e)) {
    cJSON *b = cJSON_GetObjectItem(e, "base");
    base = cJSON_IsString(b) ? b->valuestring : NULL;
  }
  psim_device_type t;
  memset(&t, 0, sizeof t);
  if (!base || psim_device_type_builtin(base, &t) != PSIM_OK)
    return NULL;
  cJSON *full = cJSON_CreateObject();
  psim_status st = psim_device_type_to_json(&t, full);
  psim_device_type_destroy(&t);
  cJSON *obj = cJSON_IsObject(e) ? e : cJSON_CreateObject();
  if (!cJSON_IsObject(e))
    cJSON_AddStringToObject(obj, "base", base);
  cJSON_AddItemToObject(obj, "peak_flops", cJSON_DetachItemFromObject(full, "peak_flops"));
  cJSON_Delete(full);
  if (e && !cJSON_IsObject(e))
    cJSON_ReplaceItemInObjectCaseSensitive(types, name, obj);
  else if (!e)
    cJSON_AddItemToObject(types, name, obj);
  return st == PSIM_OK ? obj : NULL;
}

static bool scale_type(cJSON *types, const char *name, double f) {
  cJSON *o = type_object(types, name);
  if (!o)
    return false;
  cJSON *p = cJSON_GetObjectItem(o, "peak_flops");
  bool ok = p != NULL;
  for (cJSON *v = p ? p->child : NULL, *next; ok && v; v = next) {
    next = v->next; /* scale_item replaces v */
    ok = scale_item(p, v->string, PSIM_UNIT_FLOPS, f);
  }
  return ok;
}

bool inv_scale_flops(cJSON *cluster, double f) {
  cJSON *types = cJSON_GetObjectItem(cluster, "device_types");
  if (!types)
    types = cJSON_AddObjectToObject(cluster, "device_types");
  cJSON *dt = cJSON_GetObjectItem(cluster, "device_type");
  if (cJSON_IsString(dt))
    return scale_type(types, dt->valuestring, f);
  /* explicit form: every type a device names, once */
  cJSON *done = cJSON_CreateObject(), *d;
  bool ok = true;
  cJSON_ArrayForEach(d, cJSON_GetObjectItem(cluster, "devices")) {
    cJSON *t = cJSON_GetObjectItem(d, "type");
    if (!cJSON_IsString(t) || cJSON_GetObjectItem(done, t->valuestring))
      continue;
    cJSON_AddTrueToObject(done, t->valuestring);
    ok = ok && scale_type(types, t->valuestring, f);
  }
  cJSON_Delete(done);
  return ok;
}
