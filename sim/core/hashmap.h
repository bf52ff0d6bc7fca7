/* hashmap.h - the library's one hash map: open addressing with linear
 * probing over one contiguous slot array, at most half full. Inserts
 * allocate only when the array doubles; lookups never allocate, so
 * concurrent readers are safe while nobody writes.
 *
 * A slot holds a key of two 64-bit words and an int32 value (typically an
 * index into an array the caller owns). Two ways to key a map; use one per
 * map:
 *   fixed keys     the key is the two words themselves (e.g. an (op, micro,
 *                  pass) code and a second code; a (src, dst) pair):
 *                  psim_hmap_find, psim_hmap_put, psim_hmap_remove.
 *   variable keys  strings, cost keys, device lists: the caller keeps the
 *                  key beside the value it indexes, hashes it
 *                  (psim_hmap_hash_bytes) and confirms candidates with an
 *                  equality callback: psim_hmap_find_eq, psim_hmap_add.
 * Costs: O(1) expected per operation; growth is O(capacity). */
#ifndef PSIM_HASHMAP_H
#define PSIM_HASHMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/core/status.h"

typedef struct psim_hmap_key {
  uint64_t a, b;
} psim_hmap_key;

typedef struct psim_hmap_slot {
  psim_hmap_key key;
  int32_t value;
  uint32_t used; /* 0 = empty */
} psim_hmap_slot;

typedef struct psim_hmap {
  psim_hmap_slot *slots;
  size_t cap;   /* 0 or a power of two */
  size_t count; /* used slots, <= cap / 2 */
} psim_hmap;

void psim_hmap_init(psim_hmap *m);
void psim_hmap_destroy(psim_hmap *m);
/* Forgets every entry and keeps the capacity. O(capacity). */
void psim_hmap_clear(psim_hmap *m);
/* Grows so that n entries fit without another allocation. */
psim_status psim_hmap_reserve(psim_hmap *m, size_t n);

/* Fixed keys. True and *value set when key is present (value may be NULL). */
bool psim_hmap_find(const psim_hmap *m, psim_hmap_key key, int32_t *value);
/* Inserts key, or overwrites its value when present. */
psim_status psim_hmap_put(psim_hmap *m, psim_hmap_key key, int32_t value);
/* Removes key; false when absent. Backward-shift deletion: no tombstones. */
bool psim_hmap_remove(psim_hmap *m, psim_hmap_key key);

/* Variable keys. eq(ctx, value) tells whether the entry holding value has
 * the key the caller is looking for. */
typedef bool (*psim_hmap_eq)(const void *ctx, int32_t value);
/* True and *value set for the first entry of this hash that eq accepts. */
bool psim_hmap_find_eq(const psim_hmap *m, uint64_t hash, psim_hmap_eq eq, const void *ctx,
                       int32_t *value);
/* Adds an entry of this hash without looking for an equal one (the caller
 * has found none with psim_hmap_find_eq): entries may share a hash. */
psim_status psim_hmap_add(psim_hmap *m, uint64_t hash, int32_t value);

/* Finaliser of a 64-bit hash (MurmurHash3's fmix64): spreads every input
 * bit over every output bit; for hashing integer fields. */
uint64_t psim_hmap_mix64(uint64_t x);
/* 64-bit hash of n bytes (a word at a time, then a finalising mix),
 * chained through seed (0 to start) so that a key of several fields hashes
 * field by field. */
uint64_t psim_hmap_hash_bytes(const void *p, size_t n, uint64_t seed);

#endif
