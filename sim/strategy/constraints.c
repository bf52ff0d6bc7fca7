/* constraints.c - the one reader of per-op overrides and --fix partial
 * strategies (constraints.h). */
#define _POSIX_C_SOURCE 200809L
#include "sim/strategy/constraints.h"

#include <assert.h>
#include <fnmatch.h>
#include <string.h>

#include "sim/core/alloc.h"

void psim_constraints_init(psim_constraints *k) {
  memset(k, 0, sizeof *k);
}

static void map_destroy(psim_constraint_map *map) {
  psim_free(map->entry);
  memset(map, 0, sizeof *map);
}

void psim_constraints_destroy(psim_constraints *k) {
  for (int32_t i = 0; i < k->n_ops; i++) {
    map_destroy(&k->ops[i].split);
    psim_free(k->ops[i].indices);
  }
  psim_free(k->ops);
  map_destroy(&k->split);
  map_destroy(&k->layout);
  map_destroy(&k->mesh_axes);
  memset(k, 0, sizeof *k);
}

static psim_status enomem(void) {
  return psim_error(PSIM_ENOMEM, "out of memory reading constraints");
}

/* The entries of obj (when it is an object) into map. */
static psim_status read_map(const cJSON *obj, psim_constraint_map *map) {
  memset(map, 0, sizeof *map);
  map->json = obj;
  if (!cJSON_IsObject(obj) || !obj->child)
    return PSIM_OK;
  int32_t n = cJSON_GetArraySize(obj);
  map->entry = psim_calloc((size_t)n, sizeof *map->entry);
  if (!map->entry)
    return enomem();
  for (const cJSON *it = obj->child; it; it = it->next) {
    assert(map->n < n);
    psim_constraint_entry *e = &map->entry[map->n++];
    e->key = it->string;
    e->json = it;
    e->is_number = cJSON_IsNumber(it);
    e->number = e->is_number ? it->valuedouble : 0;
    e->string = cJSON_IsString(it) ? it->valuestring : NULL;
  }
  return PSIM_OK;
}

/* Device indices when devs is a non-empty array of integers >= 0. */
static psim_status read_indices(const cJSON *devs, psim_constraint_op *e) {
  int32_t n = cJSON_IsArray(devs) ? cJSON_GetArraySize(devs) : 0;
  if (n < 1)
    return PSIM_OK;
  for (const cJSON *x = devs->child; x; x = x->next)
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble != (int32_t)x->valuedouble)
      return PSIM_OK;
  e->indices = psim_malloc((size_t)n * sizeof *e->indices);
  if (!e->indices)
    return enomem();
  int32_t i = 0;
  for (const cJSON *x = devs->child; x; x = x->next)
    e->indices[i++] = (int32_t)x->valuedouble;
  assert(i == n);
  e->n_indices = n;
  return PSIM_OK;
}

static psim_status read_op(const cJSON *it, psim_constraint_op *e) {
  e->pattern = it->string;
  e->star = strchr(it->string, '*') != NULL;
  e->json = it;
  if (!cJSON_IsObject(it))
    return PSIM_OK;
  PSIM_CHECK(read_map(cJSON_GetObjectItemCaseSensitive(it, "split"), &e->split));
  e->devices = cJSON_GetObjectItemCaseSensitive(it, "devices");
  e->replicas = cJSON_GetObjectItemCaseSensitive(it, "replicas");
  return read_indices(e->devices, e);
}

psim_status psim_constraints_read_ops(const cJSON *ops, psim_constraints *k) {
  assert(k->n_ops == 0 && !k->ops);
  k->ops_json = ops;
  if (!cJSON_IsObject(ops) || !ops->child)
    return PSIM_OK;
  int32_t n = cJSON_GetArraySize(ops);
  k->ops = psim_calloc((size_t)n, sizeof *k->ops);
  if (!k->ops)
    return enomem();
  for (const cJSON *it = ops->child; it; it = it->next) {
    assert(k->n_ops < n);
    PSIM_CHECK(read_op(it, &k->ops[k->n_ops++]));
  }
  return PSIM_OK;
}

psim_status psim_constraints_read(const cJSON *root, const char *file, psim_constraints *k) {
  psim_constraints_init(k);
  k->file = file;
  k->root = root;
  if (!cJSON_IsObject(root))
    return PSIM_OK;
  PSIM_CHECK(psim_constraints_read_ops(cJSON_GetObjectItemCaseSensitive(root, "ops"), k));
  PSIM_CHECK(read_map(cJSON_GetObjectItemCaseSensitive(root, "split"), &k->split));
  PSIM_CHECK(read_map(cJSON_GetObjectItemCaseSensitive(root, "layout"), &k->layout));
  k->mesh = cJSON_GetObjectItemCaseSensitive(root, "mesh");
  PSIM_CHECK(read_map(cJSON_GetObjectItemCaseSensitive(k->mesh, "axes"), &k->mesh_axes));
  k->recompute = cJSON_GetObjectItemCaseSensitive(root, "recompute");
  k->pipeline = cJSON_GetObjectItemCaseSensitive(root, "pipeline");
  return PSIM_OK;
}

bool psim_constraint_op_matches(const psim_constraint_op *e, const char *name) {
  assert(e->pattern && name);
  return fnmatch(e->pattern, name, 0) == 0;
}

const psim_constraint_entry *psim_constraint_map_find(const psim_constraint_map *map,
                                                      const char *key) {
  for (int32_t i = 0; i < map->n; i++)
    if (strcmp(map->entry[i].key, key) == 0)
      return &map->entry[i];
  return NULL;
}
