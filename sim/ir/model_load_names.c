/* model_load_names.c - the loader's names: a string -> index hash map (open
 * addressing, FNV-1a), the JSON paths where things are defined, and tensor
 * names resolved through the block scopes. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/model_load_impl.h"

/* ------------------------------------------------------------ string map */

typedef struct smap {
  char **key; /* owned */
  int32_t *val;
  size_t cap, n;
} smap;

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

size_t psim_name_map_slot(const psim_name_map *m, const char *k) {
  size_t i = (size_t)hash_str(k) & (m->cap - 1);
  while (m->key[i] && strcmp(m->key[i], k) != 0)
    i = (i + 1) & (m->cap - 1);
  return i;
}

int32_t psim_name_map_get(const psim_name_map *m, const char *k) {
  if (!m->cap)
    return -1;
  size_t i = psim_name_map_slot(m, k);
  return m->key[i] ? m->val[i] : -1;
}

static psim_status name_map_rehash(psim_name_map *m) {
  psim_name_map n = {0};
  n.cap = m->cap ? m->cap * 2 : 64;
  n.key = psim_calloc(n.cap, sizeof *n.key);
  n.val = psim_calloc(n.cap, sizeof *n.val);
  if (!n.key || !n.val) {
    psim_free(n.key);
    psim_free(n.val);
    return psim_error(PSIM_ENOMEM, "out of memory growing a name table");
  }
  for (size_t i = 0; i < m->cap; i++)
    if (m->key[i]) {
      size_t j = psim_name_map_slot(&n, m->key[i]);
      n.key[j] = m->key[i];
      n.val[j] = m->val[i];
    }
  n.n = m->n;
  psim_free(m->key);
  psim_free(m->val);
  *m = n;
  return PSIM_OK;
}

/* Inserts k (absent) with value v. */
psim_status psim_name_map_put(psim_name_map *m, const char *k, int32_t v) {
  if (2 * (m->n + 1) > m->cap)
    PSIM_CHECK(name_map_rehash(m));
  size_t i = psim_name_map_slot(m, k);
  assert(!m->key[i]); /* callers look k up first: a name is defined once */
  m->key[i] = psim_strdup(k);
  if (!m->key[i])
    return psim_error(PSIM_ENOMEM, "out of memory");
  m->val[i] = v;
  m->n++;
  return PSIM_OK;
}

void psim_name_map_destroy(psim_name_map *m) {
  for (size_t i = 0; i < m->cap; i++)
    psim_free(m->key[i]);
  psim_free(m->key);
  psim_free(m->val);
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
    L->defs[L->n_defs++] = L->defmap.key[psim_name_map_slot(&L->defmap, L->c.path)];
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
