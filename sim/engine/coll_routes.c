/* coll_routes.c - routes of collectives' phases kept for later collectives over the same
 * devices (psim_coll_routes, collective.h).
 *
 * A phase's routes depend on its messages' devices only, not on their bytes: the buckets of
 * one data-parallel group (a few sizes) route the same 2 x 2,048 x 8 ring and tree messages
 * each (issue 19: routing was 37% of the 131,072-GPU run). An entry is keyed by group 0's
 * (source, destination) devices of every message, the concurrent groups routed and their
 * stride, compared in full: a hit gives the routes a search would.
 *
 * An entry also keeps what the costing derives from its routes alone (issue 19, session 15):
 * the phase's bottleneck bandwidth and largest route latency under its own loads (phase_rate
 * in collective.c: a function of the routes and the links' figures, not of the bytes), and
 * per own group (group index) the links the phase fills that no other group crosses
 * (mark_saturated: a function of the routes, that rate and the own group). The buckets of one
 * data-parallel group then load and rate each phase once, not once per bucket and pass. */
#include "sim/engine/collective_impl.h"

#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/hashmap.h"

typedef struct memo_entry {
  int32_t n, groups, stride;
  size_t key_at, tab_at; /* offsets into keys (2 n) and the tables (groups x n) */
  bool rated;            /* bw_Bps, lat_s known */
  double bw_Bps, lat_s;  /* bytes/s, s */
} memo_entry;

struct psim_coll_routes {
  psim_hmap index; /* hash of a key -> its entry */
  memo_entry *items;
  size_t n, cap;
  int32_t *keys;
  size_t n_keys, cap_keys;
  const int32_t **rl;
  int32_t *rn;
  size_t n_tab, cap_rl, cap_rn;
  /* the filled links per (entry, own group): held_index -> lists[i], links in held */
  psim_hmap held_index;
  struct held_list {
    size_t at;
    int32_t n;
  } * lists;
  size_t n_lists, cap_lists;
  int32_t *held;
  size_t n_held, cap_held;
  /* the costing's per-link scratch (collective.c prepare): 2 x n_links loads and n_links
   * held flags, zero whenever not lent (a collective leaves them zeroed), so a collective on a
   * 100,000-GPU cluster neither clears nor faults in megabytes */
  int32_t *scratch_load;
  uint8_t *scratch_held;
  size_t scratch_links;
  bool lent;
};

psim_coll_routes *psim_coll_routes_new(void) {
  psim_coll_routes *m = psim_calloc(1, sizeof *m);
  if (m) {
    psim_hmap_init(&m->index);
    psim_hmap_init(&m->held_index);
  }
  return m;
}

void psim_coll_routes_free(psim_coll_routes *m) {
  if (!m)
    return;
  psim_hmap_destroy(&m->index);
  psim_hmap_destroy(&m->held_index);
  psim_free(m->lists);
  psim_free(m->held);
  psim_free(m->scratch_load);
  psim_free(m->scratch_held);
  psim_free(m->items);
  psim_free(m->keys);
  psim_free(m->rl);
  psim_free(m->rn);
  psim_free(m);
}

static uint64_t key_hash(const int32_t *pairs, int32_t n, int32_t groups, int32_t stride) {
  uint64_t h = psim_hmap_mix64(((uint64_t)(uint32_t)groups << 32) ^ (uint32_t)stride);
  return psim_hmap_hash_bytes(pairs, 2 * (size_t)n * sizeof *pairs, h);
}

typedef struct memo_probe {
  const psim_coll_routes *m;
  const int32_t *pairs;
  int32_t n, groups, stride;
} memo_probe;

static bool memo_same(const void *ctx, int32_t i) {
  const memo_probe *p = ctx;
  const memo_entry *e = &p->m->items[i];
  return e->n == p->n && e->groups == p->groups && e->stride == p->stride &&
         memcmp(p->m->keys + e->key_at, p->pairs, 2 * (size_t)p->n * sizeof *p->pairs) == 0;
}

bool psim_coll_routes_find(const psim_coll_routes *m, const int32_t *pairs, int32_t n,
                           int32_t groups, int32_t stride, const int32_t **rl, int32_t *rn,
                           int32_t *entry) {
  memo_probe p = {m, pairs, n, groups, stride};
  int32_t i;
  if (!psim_hmap_find_eq(&m->index, key_hash(pairs, n, groups, stride), memo_same, &p, &i))
    return false;
  size_t at = m->items[i].tab_at, cnt = (size_t)groups * (size_t)n;
  memcpy(rl, m->rl + at, cnt * sizeof *rl);
  memcpy(rn, m->rn + at, cnt * sizeof *rn);
  *entry = i;
  return true;
}

psim_status psim_coll_routes_put(psim_coll_routes *m, const int32_t *pairs, int32_t n,
                                 int32_t groups, int32_t stride, const int32_t *const *rl,
                                 const int32_t *rn, int32_t *entry) {
  size_t cnt = (size_t)groups * (size_t)n;
  PSIM_CHECK(PSIM_VEC_RESERVE(m->items, m->cap, m->n + 1));
  PSIM_CHECK(PSIM_VEC_RESERVE(m->keys, m->cap_keys, m->n_keys + 2 * (size_t)n));
  PSIM_CHECK(PSIM_VEC_RESERVE(m->rl, m->cap_rl, m->n_tab + cnt));
  PSIM_CHECK(PSIM_VEC_RESERVE(m->rn, m->cap_rn, m->n_tab + cnt));
  PSIM_CHECK(psim_hmap_add(&m->index, key_hash(pairs, n, groups, stride), (int32_t)m->n));
  *entry = (int32_t)m->n;
  m->items[m->n++] = (memo_entry){n, groups, stride, m->n_keys, m->n_tab, false, 0, 0};
  memcpy(m->keys + m->n_keys, pairs, 2 * (size_t)n * sizeof *pairs);
  memcpy(m->rl + m->n_tab, rl, cnt * sizeof *rl);
  memcpy(m->rn + m->n_tab, rn, cnt * sizeof *rn);
  m->n_keys += 2 * (size_t)n;
  m->n_tab += cnt;
  return PSIM_OK;
}

bool psim_coll_routes_rate(const psim_coll_routes *m, int32_t entry, double *bw_Bps,
                           double *lat_s) {
  const memo_entry *e = &m->items[entry];
  *bw_Bps = e->bw_Bps;
  *lat_s = e->lat_s;
  return e->rated;
}

void psim_coll_routes_set_rate(psim_coll_routes *m, int32_t entry, double bw_Bps, double lat_s) {
  memo_entry *e = &m->items[entry];
  e->rated = true;
  e->bw_Bps = bw_Bps;
  e->lat_s = lat_s;
}

static psim_hmap_key held_key(int32_t entry, int32_t self) {
  return (psim_hmap_key){(uint64_t)(uint32_t)entry, (uint64_t)(uint32_t)self};
}

bool psim_coll_routes_held(const psim_coll_routes *m, int32_t entry, int32_t self,
                           const int32_t **links, int32_t *n) {
  int32_t i;
  if (!psim_hmap_find(&m->held_index, held_key(entry, self), &i))
    return false;
  *links = m->held + m->lists[i].at;
  *n = m->lists[i].n;
  return true;
}

psim_status psim_coll_routes_put_held(psim_coll_routes *m, int32_t entry, int32_t self,
                                      const int32_t *links, int32_t n) {
  PSIM_CHECK(PSIM_VEC_RESERVE(m->lists, m->cap_lists, m->n_lists + 1));
  PSIM_CHECK(PSIM_VEC_RESERVE(m->held, m->cap_held, m->n_held + (size_t)n + 1));
  PSIM_CHECK(psim_hmap_put(&m->held_index, held_key(entry, self), (int32_t)m->n_lists));
  m->lists[m->n_lists++] = (struct held_list){m->n_held, n};
  if (n > 0) /* links may be NULL then (a phase that fills no link): UBSan */
    memcpy(m->held + m->n_held, links, (size_t)n * sizeof *links);
  m->n_held += (size_t)n;
  return PSIM_OK;
}

bool psim_coll_routes_borrow(psim_coll_routes *m, size_t n_links, int32_t **load, uint8_t **held) {
  if (m->lent)
    return false;
  if (m->scratch_links != n_links) {
    psim_free(m->scratch_load);
    psim_free(m->scratch_held);
    m->scratch_links = 0;
    m->scratch_load = psim_calloc(2 * n_links, sizeof *m->scratch_load);
    m->scratch_held = psim_calloc(n_links, 1);
    if (!m->scratch_load || !m->scratch_held)
      return false; /* freed with the memo or on the next try */
    m->scratch_links = n_links;
  }
  m->lent = true;
  *load = m->scratch_load;
  *held = m->scratch_held;
  return true;
}

void psim_coll_routes_unborrow(psim_coll_routes *m, bool dirty) {
  if (dirty && m->scratch_links > 0) { /* no scratch (and NULL) for a cluster without links */
    memset(m->scratch_load, 0, 2 * m->scratch_links * sizeof *m->scratch_load);
    memset(m->scratch_held, 0, m->scratch_links);
  }
  m->lent = false;
}
