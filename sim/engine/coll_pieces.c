/* coll_pieces.c - a collective descriptor's defaults and the chain of pieces an own-stream
 * collective is added as (collective.h, PSIM_COLL_PIECE_S). */
#include <math.h>
#include <string.h>

#include "sim/engine/collective.h"

void psim_coll_desc_init(psim_coll_desc *d) {
  memset(d, 0, sizeof *d);
  d->kind = PSIM_COLL_ALL_REDUCE;
  d->algo = PSIM_AR_AUTO;
  d->concurrent_groups = 1;
}

int32_t psim_coll_pieces(const psim_coll_desc *d, double seconds) {
  if (!d->own_stream || !(seconds > PSIM_COLL_PIECE_S))
    return 1;
  double k = ceil(seconds / PSIM_COLL_PIECE_S);
  return k < PSIM_COLL_MAX_PIECES ? (int32_t)k : PSIM_COLL_MAX_PIECES;
}

psim_status psim_coll_add_pieces(psim_taskgraph *g, int32_t pieces, double seconds,
                                 const int32_t *res, int32_t n_res, const psim_task_info *info,
                                 int32_t *entry, int32_t *exit) {
  for (int32_t k = 0; k < pieces; k++) {
    int32_t id;
    PSIM_CHECK(psim_tg_add_task(g, seconds / pieces, res, n_res, info, &id));
    if (k == 0)
      *entry = id;
    else
      PSIM_CHECK(psim_tg_add_edge(g, *exit, id));
    *exit = id;
  }
  return PSIM_OK;
}
