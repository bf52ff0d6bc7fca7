/* model_load_names.c - the loader's names: a string -> index map (on the core hash
 * map, sim/core/hashmap.h), the JSON paths where things are defined, and tensor
 * names resolved through the block scopes. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/model_load_impl.h"

/* ------------------------------------------------------------ string map */

/* A name being looked up, for the hash map's equality test. */
typedef struct name_probe {
  const psim_name_map *m;
  const char *name;
} name_probe;

static bool same_name(const void *ctx, int32_t entry) {
  const name_probe *p = ctx;
  return strcmp(p->m->key[entry], p->name) == 0;
}

static uint64_t name_hash(const char *k) {
  return psim_hmap_hash_bytes(k, strlen(k), 0);
}

/* The entry of name k, or -1. */
static int32_t name_entry(const psim_name_map *m, const char *k) {
  name_probe p = {m, k};
  int32_t e;
  return psim_hmap_find_eq(&m->index, name_hash(k), same_name, &p, &e) ? e : -1;
}

int32_t psim_name_map_get(const psim_name_map *m, const char *k) {
  int32_t e = name_entry(m, k);
  return e < 0 ? -1 : m->val[e];
}

/* Inserts k (absent) with value v. */
psim_status psim_name_map_put(psim_name_map *m, const char *k, int32_t v) {
  assert(name_entry(m, k) < 0); /* callers look k up first: a name is defined once */
  size_t cap = m->cap;
  PSIM_CHECK(psim_grow((void **)&m->key, &cap, m->n + 1, sizeof *m->key));
  PSIM_CHECK(psim_grow((void **)&m->val, &m->cap, m->n + 1, sizeof *m->val));
  assert(cap == m->cap);
  char *copy = psim_strdup(k);
  if (!copy)
    return psim_error(PSIM_ENOMEM, "out of memory");
  psim_status st = psim_hmap_add(&m->index, name_hash(k), (int32_t)m->n);
  if (st != PSIM_OK) {
    psim_free(copy);
    return st;
  }
  m->key[m->n] = copy;
  m->val[m->n++] = v;
  return PSIM_OK;
}

const char *psim_name_map_key(const psim_name_map *m, const char *k) {
  int32_t e = name_entry(m, k);
  return e < 0 ? NULL : m->key[e];
}

void psim_name_map_destroy(psim_name_map *m) {
  for (size_t i = 0; i < m->n; i++)
    psim_free(m->key[i]);
  psim_free(m->key);
  psim_free(m->val);
  psim_hmap_destroy(&m->index);
  memset(m, 0, sizeof *m);
}

bool psim_mload_join(char *out, const char *a, const char *b) {
  return (size_t)snprintf(out, NAME_MAX_LEN, "%s%s", a, b) < NAME_MAX_LEN;
}

/* Index of the current JSON path in defs, adding it when new. */
psim_status psim_mload_def_here(psim_model_loader *L, int32_t *out) {
  int32_t d = psim_name_map_get(&L->defmap, L->c.path);
  if (d < 0) {
    d = L->n_defs;
    PSIM_CHECK(psim_name_map_put(&L->defmap, L->c.path, d));
    PSIM_CHECK(psim_grow((void **)&L->defs, &L->cap_defs, (size_t)d + 1, sizeof *L->defs));
    L->defs[L->n_defs++] = psim_name_map_key(&L->defmap, L->c.path);
  }
  *out = d;
  return PSIM_OK;
}

/* Error at the definition path of def. */
psim_status psim_mload_def_err(psim_model_loader *L, int32_t def, const char *msg) {
  return psim_error(PSIM_EINPUT, "%s: %s: %s", L->c.file, L->defs[def], msg);
}

int32_t psim_mload_resolve(psim_model_loader *L, const psim_model_scope *s, const char *name) {
  char full[NAME_MAX_LEN];
  for (; s; s = s->parent)
    if (psim_mload_join(full, s->prefix, name)) {
      int32_t t = psim_name_map_get(&L->tensors, full);
      if (t >= 0)
        return t;
    }
  return -1;
}
