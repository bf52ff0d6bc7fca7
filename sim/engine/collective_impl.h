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

/* ---- phases' routes kept (coll_routes.c) ---- */

/* The routes (rl, rn: groups x n entries, group-major) kept for the phase whose group-0
 * messages go between the devices pairs[2i] -> pairs[2i + 1], routed over groups concurrent
 * groups at stride, and their entry; false when none are. */
bool psim_coll_routes_find(const psim_coll_routes *m, const int32_t *pairs, int32_t n,
                           int32_t groups, int32_t stride, const int32_t **rl, int32_t *rn,
                           int32_t *entry);
psim_status psim_coll_routes_put(psim_coll_routes *m, const int32_t *pairs, int32_t n,
                                 int32_t groups, int32_t stride, const int32_t *const *rl,
                                 const int32_t *rn, int32_t *entry);
/* An entry's phase rate (phase_rate's bottleneck bandwidth, bytes/s, and largest route
 * latency, s, under the loads of its own routes): false when not yet set. */
bool psim_coll_routes_rate(const psim_coll_routes *m, int32_t entry, double *bw_Bps, double *lat_s);
void psim_coll_routes_set_rate(psim_coll_routes *m, int32_t entry, double bw_Bps, double lat_s);
/* Lends the memo's zeroed scratch for a cluster of n_links links: *load 2 x n_links counts,
 * *held n_links flags, to be returned zeroed; false (nothing lent) when lent already or out
 * of memory. unborrow takes it back, zeroing it where dirty (after an error). */
bool psim_coll_routes_borrow(psim_coll_routes *m, size_t n_links, int32_t **load, uint8_t **held);
void psim_coll_routes_unborrow(psim_coll_routes *m, bool dirty);
/* The links an entry's phase fills for own group self (mark_saturated's), or false. */
bool psim_coll_routes_held(const psim_coll_routes *m, int32_t entry, int32_t self,
                           const int32_t **links, int32_t *n);
psim_status psim_coll_routes_put_held(psim_coll_routes *m, int32_t entry, int32_t self,
                                      const int32_t *links, int32_t n);

/* ---- plans (coll_plan.c) ---- */

typedef struct coll_msg {
  int32_t src, dst; /* ranks */
  double bytes;
} coll_msg;

typedef struct coll_phase {
  int32_t first, n; /* messages msgs[first .. first + n) */
  int32_t repeat;
} coll_phase;

typedef struct coll_plan {
  bool tree_alt; /* auto all-reduce over one rank per node: the tree may cost less */
  coll_msg *msgs;
  size_t n_msgs, cap_msgs;
  coll_phase *phases;
  size_t n_phases, cap_phases;
} coll_plan;

/* The plan of d over the cluster c (tree_alt set where the tree may cost less). */
psim_status psim_coll_plan_build(coll_plan *p, const psim_cluster *c, const psim_coll_desc *d);
void psim_coll_plan_destroy(coll_plan *p);
/* Binomial-tree reduce to rank 0 and broadcast from it, over m ranks of bytes each. */
psim_status psim_coll_plan_reduce(coll_plan *p, int32_t m, double bytes);
psim_status psim_coll_plan_bcast(coll_plan *p, int32_t m, double bytes);

#endif
