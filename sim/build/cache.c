/* cache.c - the builder's hash maps: (key1, key2) -> task, and the record of
 * what each connect segment put into them (incremental builds). */
#include "sim/build/build_impl.h"

#include <math.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/engine/collective.h"

static psim_status comm_cache_grow(psim_comm_cache *h) {
  size_t ncap = h->cap ? h->cap * 2 : 1024;
  psim_cache_entry *ns = psim_calloc(ncap, sizeof *ns);
  if (!ns)
    return psim_error(PSIM_ENOMEM, "out of memory in the task-graph builder");
  for (size_t i = 0; i < h->cap; i++) {
    if (!h->slots[i].used)
      continue;
    size_t j = psim_build_mix64(h->slots[i].k1 ^ psim_build_mix64(h->slots[i].k2)) & (ncap - 1);
    while (ns[j].used)
      j = (j + 1) & (ncap - 1);
    ns[j] = h->slots[i];
  }
  psim_free(h->slots);
  h->slots = ns;
  h->cap = ncap;
  return PSIM_OK;
}

psim_status psim_bcache_put(psim_comm_cache *h, uint64_t k1, uint64_t k2, int32_t v) {
  if ((h->n + 1) * 2 > h->cap)
    PSIM_CHECK(comm_cache_grow(h));
  psim_cache_entry *e = psim_bcache_slot(h, k1, k2);
  if (!e->used)
    h->n++;
  e->k1 = k1;
  e->k2 = k2;
  e->value = v;
  e->used = 1;
  return PSIM_OK;
}

/* Forgets every entry (keeps the capacity): the per-micro-batch entries are
 * dead once that micro-batch's edges are built. */
void psim_bcache_reset(psim_comm_cache *h) {
  if (h->n)
    memset(h->slots, 0, h->cap * sizeof *h->slots);
  h->n = 0;
}

psim_status psim_build_record_put(psim_build *b, uint64_t k1, uint64_t k2, int32_t v, bool memo) {
  if (!b->inc.record)
    return PSIM_OK;
  PSIM_CHECK(PSIM_VEC_RESERVE(b->inc.puts, b->inc.cap_puts, b->inc.n_puts + 1));
  b->inc.puts[b->inc.n_puts++] = (psim_put_record){k1, k2, v, (uint8_t)memo};
  return PSIM_OK;
}

/* cache_put into b->cache or b->memo, recorded for incremental builds. */
psim_status psim_build_keep(psim_build *b, psim_comm_cache *h, uint64_t k1, uint64_t k2,
                            int32_t v) {
  PSIM_CHECK(psim_bcache_put(h, k1, k2, v));
  return psim_build_record_put(b, k1, k2, v, h == b->memo);
}

void psim_bcache_free(psim_comm_cache *h) {
  if (!h)
    return;
  psim_free(h->slots);
  psim_free(h->served);
  psim_free(h->regs);
  psim_free(h->reg_ids);
  psim_free(h);
}
