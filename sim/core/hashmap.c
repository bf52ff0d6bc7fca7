/* hashmap.c - open addressing with linear probing (hashmap.h). */
#include "sim/core/hashmap.h"

#include <assert.h>
#include <string.h>

#include "sim/core/alloc.h"

enum { FIRST_CAP = 16 };

uint64_t psim_hmap_mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

static size_t home(const psim_hmap *m, psim_hmap_key k) {
  assert(m->cap > 0 && (m->cap & (m->cap - 1)) == 0);
  return (size_t)psim_hmap_mix64(k.a ^ psim_hmap_mix64(k.b)) & (m->cap - 1);
}

static bool key_eq(psim_hmap_key x, psim_hmap_key y) {
  return x.a == y.a && x.b == y.b;
}

/* The slot holding key, or the empty slot where it would go. */
static size_t probe(const psim_hmap *m, psim_hmap_key k) {
  size_t mask = m->cap - 1, i = home(m, k);
  while (m->slots[i].used && !key_eq(m->slots[i].key, k))
    i = (i + 1) & mask;
  return i;
}

void psim_hmap_init(psim_hmap *m) {
  memset(m, 0, sizeof *m);
}

void psim_hmap_destroy(psim_hmap *m) {
  psim_free(m->slots);
  psim_hmap_init(m);
}

void psim_hmap_clear(psim_hmap *m) {
  if (m->count)
    memset(m->slots, 0, m->cap * sizeof *m->slots);
  m->count = 0;
}

/* Rehashes into cap slots (a power of two, at least twice the count). */
static psim_status rehash(psim_hmap *m, size_t cap) {
  assert(cap >= FIRST_CAP && (cap & (cap - 1)) == 0 && cap >= 2 * m->count);
  psim_hmap n = {psim_calloc(cap, sizeof(psim_hmap_slot)), cap, m->count};
  if (!n.slots)
    return psim_error(PSIM_ENOMEM, "out of memory growing a hash map to %zu slots", cap);
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->slots[i].used)
      continue;
    size_t j = home(&n, m->slots[i].key);
    while (n.slots[j].used)
      j = (j + 1) & (cap - 1);
    n.slots[j] = m->slots[i];
  }
  psim_free(m->slots);
  *m = n;
  return PSIM_OK;
}

psim_status psim_hmap_reserve(psim_hmap *m, size_t n) {
  if (n > SIZE_MAX / 4)
    return psim_error(PSIM_ENOMEM, "a hash map of %zu entries does not fit in memory", n);
  size_t cap = m->cap ? m->cap : FIRST_CAP;
  while (cap < 2 * n)
    cap *= 2;
  return cap == m->cap ? PSIM_OK : rehash(m, cap);
}

bool psim_hmap_find(const psim_hmap *m, psim_hmap_key key, int32_t *value) {
  if (m->count == 0)
    return false;
  const psim_hmap_slot *s = &m->slots[probe(m, key)];
  if (s->used && value)
    *value = s->value;
  return s->used != 0;
}

psim_status psim_hmap_put(psim_hmap *m, psim_hmap_key key, int32_t value) {
  psim_hmap_slot *s = m->cap ? &m->slots[probe(m, key)] : NULL;
  if (s && s->used) {
    s->value = value;
    return PSIM_OK;
  }
  if (2 * (m->count + 1) > m->cap) { /* growing moves the empty slot found */
    PSIM_CHECK(psim_hmap_reserve(m, m->count + 1));
    s = &m->slots[probe(m, key)];
  }
  assert(s && !s->used);
  *s = (psim_hmap_slot){key, value, 1};
  m->count++;
  return PSIM_OK;
}

/* Whether the entry at j, whose home is h, may move back into the hole at
 * i: true when h does not lie cyclically in (i, j]. */
static bool may_fill(size_t i, size_t j, size_t h) {
  return i <= j ? (h <= i || h > j) : (h <= i && h > j);
}

bool psim_hmap_remove(psim_hmap *m, psim_hmap_key key) {
  if (m->count == 0)
    return false;
  size_t mask = m->cap - 1, i = probe(m, key);
  if (!m->slots[i].used)
    return false;
  for (size_t j = (i + 1) & mask; m->slots[j].used; j = (j + 1) & mask)
    if (may_fill(i, j, home(m, m->slots[j].key))) {
      m->slots[i] = m->slots[j];
      i = j;
    }
  m->slots[i].used = 0;
  m->count--;
  return true;
}

bool psim_hmap_find_eq(const psim_hmap *m, uint64_t hash, psim_hmap_eq eq, const void *ctx,
                       int32_t *value) {
  if (m->count == 0)
    return false;
  psim_hmap_key k = {hash, 0};
  size_t mask = m->cap - 1;
  for (size_t i = home(m, k); m->slots[i].used; i = (i + 1) & mask)
    if (key_eq(m->slots[i].key, k) && eq(ctx, m->slots[i].value)) {
      if (value)
        *value = m->slots[i].value;
      return true;
    }
  return false;
}

psim_status psim_hmap_add(psim_hmap *m, uint64_t hash, int32_t value) {
  if (2 * (m->count + 1) > m->cap) /* the common case, room left, skips the call */
    PSIM_CHECK(psim_hmap_reserve(m, m->count + 1));
  psim_hmap_key k = {hash, 0};
  size_t mask = m->cap - 1, i = home(m, k);
  while (m->slots[i].used) /* past every entry of the chain, equal hashes too */
    i = (i + 1) & mask;
  m->slots[i] = (psim_hmap_slot){k, value, 1};
  m->count++;
  return PSIM_OK;
}

uint64_t psim_hmap_hash_bytes(const void *p, size_t n, uint64_t seed) {
  const unsigned char *c = p;
  uint64_t h = psim_hmap_mix64(seed ^ n) ^ 0x9e3779b97f4a7c15ULL;
  for (; n >= 8; n -= 8, c += 8) { /* a word at a time: keys are mostly int64 fields */
    uint64_t w;
    memcpy(&w, c, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  memcpy(&tail, c, n);
  return psim_hmap_mix64(h ^ tail);
}
