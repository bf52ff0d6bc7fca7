/* cache.c - the builder's hash maps: (key1, key2) -> task, and the record of
 * what each connect segment put into them (incremental builds). */
#include "sim/builder/build_impl.h"

#include <math.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/engine/collective.h"

psim_status psim_bcache_put(psim_comm_cache *h, uint64_t k1, uint64_t k2, int32_t v) {
  return psim_hmap_put(&h->map, (psim_hmap_key){k1, k2}, v);
}

/* Forgets every entry (keeps the capacity): the per-micro-batch entries are
 * dead once that micro-batch's edges are built. */
void psim_bcache_reset(psim_comm_cache *h) {
  psim_hmap_clear(&h->map);
  h->n_pend = 0;
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
  psim_hmap_destroy(&h->map);
  psim_free(h->served);
  psim_free(h->pend);
  psim_free(h->regs);
  psim_free(h->reg_ids);
  psim_free(h);
}
