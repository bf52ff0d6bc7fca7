/* fold_checks.c - folding's checks during the build: a folded-away peer
 * group must take the time its simulated twin takes (psim_build_fold_check_coll,
 * psim_build_fold_check_transfer); otherwise the build is redone unfolded. */
#include "sim/builder/build_impl.h"

#include <stdint.h>

#include "sim/core/alloc.h"
#include "sim/engine/collective.h"

/* Stage entries (stages x virtual stages) of b's strategy. */
static int32_t n_entries(const psim_build *b) {
  return b->s->n_stages * (b->s->virtual_stages > 0 ? b->s->virtual_stages : 1);
}

/* Whether each concurrent peer group of d takes, alone, the time d takes
 * alone (t_s): their routes may differ (a hybrid cube mesh doubles some
 * NVLinks). Each group routes its own members (a search per new source,
 * sim/ir/route.c), so past PSIM_FOLD_ROUTE_BUDGET the peers are taken to be
 * alike, as the columns' route keys are (a generated cluster's tiers). */
static psim_status peers_alike(psim_build *b, const psim_coll_desc *d, double t_s) {
  double work = (double)d->concurrent_groups * d->n * (b->c->n_vertices + b->c->n_links);
  if (work > PSIM_FOLD_ROUTE_BUDGET)
    return PSIM_OK;
  int32_t *dev = psim_malloc((size_t)d->n * sizeof *dev);
  if (!dev)
    return psim_error(PSIM_ENOMEM, "out of memory");
  psim_coll_desc peer = *d;
  peer.devices = dev;
  peer.concurrent_groups = 1;
  peer.group_stride = 0;
  psim_status st = PSIM_OK;
  for (int32_t k = 1; k < d->concurrent_groups && st == PSIM_OK && !b->fold_broken; k++) {
    for (int32_t i = 0; i < d->n; i++)
      dev[i] = d->devices[i] + k * d->group_stride;
    double t;
    st = psim_coll_time(b->c, &peer, &t);
    b->fold_broken = st == PSIM_OK && t != t_s;
  }
  psim_free(dev);
  return st;
}

/* Whether d's group lies in one exchange block of one stage, its translates by whole blocks
 * at one device stride: sets *stride and *n (the blocks). */
static bool block_translates(const psim_build *b, const psim_coll_desc *d, int32_t *stride,
                             int32_t *n) {
  int32_t g = b->fold_block, p0 = b->fold_pos[d->devices[0]];
  const psim_stage *st = NULL;
  for (int32_t v = 0; v < n_entries(b) && !st && p0 >= 0; v++)
    if (b->s->stages[v].devices[p0] == d->devices[0])
      st = &b->s->stages[v];
  if (!st || st->n_devices / g < 2)
    return false;
  *n = st->n_devices / g;
  *stride = st->devices[p0 + g] - st->devices[p0];
  for (int32_t i = 0; i < d->n; i++) {
    int32_t p = b->fold_pos[d->devices[i]];
    if (p < 0 || p / g != p0 / g || st->devices[p] != d->devices[i])
      return false;
    for (int32_t k = 1; k < *n; k++)
      if (st->devices[p + k * g] != d->devices[i] + k * *stride)
        return false;
  }
  return *stride > 0;
}

bool psim_build_fold_peers_built(const psim_build *b, const psim_coll_desc *d) {
  if (!b->folded || b->fold_block <= 1 || d->concurrent_groups <= 1)
    return false;
  int32_t g = b->fold_block, n_pos = b->s->stages[0].n_devices, p0 = b->fold_pos[d->devices[0]];
  if (p0 < 0 || d->n != n_pos / g || (int64_t)d->n * d->concurrent_groups != n_pos)
    return false;
  uint64_t seen = 0;
  for (int32_t i = 0; i < d->n; i++) {
    int32_t p = b->fold_pos[d->devices[i]];
    if (p < 0 || p % g != p0 % g || d->n > 64 || (seen >> (p / g) & 1))
      return false;
    seen |= 1ull << (p / g);
  }
  return true;
}

/* Exchange blocks: a collective inside one block whose concurrent groups the build could not
 * place (group_stride 0). Its peers in the same block are simulated themselves; those of
 * the other blocks are its translates by whole blocks, checked as check 4 checks peers.
 * *applies false when the group is not of that form. */
static psim_status block_peers(psim_build *b, const psim_coll_desc *d, bool *applies) {
  int32_t stride, n;
  *applies = block_translates(b, d, &stride, &n);
  if (!*applies)
    return PSIM_OK;
  psim_coll_desc peers = *d, alone = *d;
  peers.concurrent_groups = n;
  peers.group_stride = stride;
  alone.concurrent_groups = 1;
  alone.group_stride = 0;
  double with_peers, by_itself;
  PSIM_CHECK(psim_coll_time(b->c, &peers, &with_peers));
  PSIM_CHECK(psim_coll_time(b->c, &alone, &by_itself));
  b->fold_broken = with_peers != by_itself;
  return b->fold_broken ? PSIM_OK : peers_alike(b, &peers, by_itself);
}

psim_status psim_build_fold_check_coll(psim_build *b, const psim_coll_desc *d,
                                       const double *with_peers_s) {
  if (!b->folded || b->fold_broken || d->concurrent_groups <= 1 || d->n < 2)
    return PSIM_OK;
  if (d->group_stride == 0 && b->fold_block > 1) {
    bool applies;
    PSIM_CHECK(block_peers(b, d, &applies));
    if (applies)
      return PSIM_OK;
  }
  if (d->group_stride == 0) {
    /* the peers' routes are unknown, which is an error in the first column (its groups
     * come first); another class's group lies amid its peers (their stride runs past the
     * cluster), which the first column's checks and the columns' signatures cover */
    b->fold_broken = b->fold_pos[d->devices[0]] == 0;
    return PSIM_OK;
  }
  psim_coll_desc alone = *d;
  alone.concurrent_groups = 1;
  alone.group_stride = 0;
  double with_peers, by_itself;
  if (with_peers_s) /* psim_coll_add_timed's figure: psim_coll_time's for d */
    with_peers = *with_peers_s;
  else
    PSIM_CHECK(psim_coll_time(b->c, d, &with_peers));
  PSIM_CHECK(psim_coll_time(b->c, &alone, &by_itself));
  b->fold_broken = with_peers != by_itself;
  return b->fold_broken ? PSIM_OK : peers_alike(b, d, by_itself);
}

void psim_build_fold_check_transfer(psim_build *b, int pipeline, int32_t src, int32_t d) {
  if (b->folded && !pipeline &&
      (b->fold_block <= 1 || b->fold_pos[src] < 0 ||
       b->fold_pos[src] / b->fold_block != b->fold_pos[d] / b->fold_block))
    b->fold_broken = true;
}
