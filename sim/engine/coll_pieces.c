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

/* The chain of pieces; every piece holds res, or only the first where first_only. */
static psim_status add_chain(psim_taskgraph *g, int32_t pieces, double seconds, const int32_t *res,
                             int32_t n_res, bool first_only, const psim_task_info *info,
                             int32_t *entry, int32_t *exit) {
  for (int32_t k = 0; k < pieces; k++) {
    int32_t id;
    bool listed = k == 0 || !first_only;
    PSIM_CHECK(
        psim_tg_add_task(g, seconds / pieces, listed ? res : NULL, listed ? n_res : 0, info, &id));
    if (k == 0)
      *entry = id;
    else
      PSIM_CHECK(psim_tg_add_edge(g, *exit, id));
    *exit = id;
  }
  return PSIM_OK;
}

psim_status psim_coll_add_pieces(psim_taskgraph *g, int32_t pieces, double seconds,
                                 const int32_t *res, int32_t n_res, const psim_task_info *info,
                                 int32_t *entry, int32_t *exit) {
  return add_chain(g, pieces, seconds, res, n_res, false, info, entry, exit);
}

psim_status psim_coll_add_pieces_first(psim_taskgraph *g, int32_t pieces, double seconds,
                                       const int32_t *res, int32_t n_res,
                                       const psim_task_info *info, int32_t *entry, int32_t *exit) {
  return add_chain(g, pieces, seconds, res, n_res, true, info, entry, exit);
}
