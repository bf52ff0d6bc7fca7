/* collective.h - collective communication over the real topology.
 *
 * Two fidelities that agree within 1% where links are uncontended:
 *  - aggregated: one task per collective holding the comm engines of the
 *    group and every link its algorithm uses, for the duration given by the
 *    algorithm's alpha-beta formula at the bottleneck bandwidth of its routes
 *    (or a measured bus-bandwidth table of the cluster where one applies);
 *  - expanded: the algorithm's point-to-point steps as transfer tasks on the
 *    links of each route, with dependencies between steps.
 * Formulas (p ranks, n bytes, alpha = per-message latency s, B = bytes/s):
 *   ring all-reduce      2(p-1) alpha + 2(p-1)/p * n/B
 *   ring all-gather / reduce-scatter   (p-1) alpha + (p-1)/p * n/B  (n = full size)
 *   tree broadcast/reduce  ceil(log2 p) * (alpha + n/B)
 *   halving-doubling all-reduce  2 log2(p) alpha + 2(p-1)/p * n/B
 *   hierarchical: reduce-scatter in node, all-reduce across nodes on 1/k of
 *   the data, all-gather in node.
 *   all-to-all (p-1) alpha + (p-1)/p * n/B */
#ifndef PSIM_COLLECTIVE_H
#define PSIM_COLLECTIVE_H

#include "cluster.h"
#include "strategy.h"
#include "taskgraph.h"

typedef enum psim_fidelity { PSIM_FIDELITY_AGGREGATE = 0, PSIM_FIDELITY_EXPANDED } psim_fidelity;

typedef struct psim_coll_desc {
  psim_coll_kind kind;
  psim_allreduce_algo algo; /* for all-reduce; others use ring/tree as fits */
  const int32_t *devices;   /* the group, in rank order */
  int32_t n;                /* group size */
  double bytes;             /* full buffer size per rank, bytes (all-gather: gathered size) */
  int32_t concurrent_groups;/* identical groups running at once over disjoint
                               devices (folded replicas); their traffic shares links. 1 = none */
} psim_coll_desc;

/* Time of the collective by formula (or measured table), in s. */
psim_status psim_coll_time(psim_cluster *c, const psim_coll_desc *d, double *seconds);

/* Adds the collective to g. Its tasks start after *entry (a barrier the caller
 * adds edges into) and *exit finishes last (the caller adds edges out of it).
 * info is copied into every task (kind/device are filled in). */
psim_status psim_coll_add(psim_taskgraph *g, psim_cluster *c, const psim_coll_desc *d,
                          psim_fidelity fidelity, const psim_task_info *info, int32_t *entry,
                          int32_t *exit);

/* Adds a point-to-point transfer of bytes from device src to dst over its
 * route, split into segments that pipeline across hops. */
psim_status psim_p2p_add(psim_taskgraph *g, psim_cluster *c, int32_t src, int32_t dst,
                         double bytes, const psim_task_info *info, int32_t *entry,
                         int32_t *exit);
/* Time of that transfer when uncontended, s. */
psim_status psim_p2p_time(psim_cluster *c, int32_t src, int32_t dst, double bytes,
                          double *seconds);

#endif
