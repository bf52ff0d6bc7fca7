/* collective_impl.h - what collective.c and p2p.c share (private to sim/engine). */
#ifndef PSIM_ENGINE_COLLECTIVE_IMPL_H
#define PSIM_ENGINE_COLLECTIVE_IMPL_H

#include "sim/engine/collective.h"

/* A link's bandwidth (bytes/s) under its slowdown (a straggling link). */
static inline double psim_coll_link_bw(const psim_link *l) {
  return l->bw / (l->slowdown > 0 ? l->slowdown : 1.0);
}

/* Whether flows of demand bytes/s fill a link of bandwidth bytes/s (1e-9:
 * rounding of bandwidth / load). Tasks hold only the links they fill: one with
 * room to spare carries other traffic at full speed, as a 4 TB/s leaf uplink
 * carries eight 25 GB/s rings at once (docs/simulator.md, "Collectives"). */
static inline int psim_coll_saturates(double demand, double bw) {
  return demand >= bw * (1 - 1e-9);
}

/* The info of a communication task of `kind` on device dev (info's pass,
 * stage, op, micro-batch; a default when info is NULL). */
psim_task_info psim_coll_task_info(const psim_task_info *info, psim_task_kind kind, int32_t dev);

/* A zero-length barrier task on device dev. */
psim_status psim_coll_add_barrier(psim_taskgraph *g, const psim_task_info *info, int32_t dev,
                                  int32_t *id);

#endif
