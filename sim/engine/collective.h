/* collective.h - collective communication over the real topology.
 *
 * Two fidelities that agree within 1% where links are uncontended
 * (docs/simulator.md says how they differ under contention):
 *  - aggregated: one task per collective holding the comm engines of the
 *    group and the links its algorithm fills, for the duration given by the
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

#include "sim/engine/taskgraph.h"
#include "sim/ir/cluster.h"
#include "sim/strategy/strategy.h"

typedef enum psim_fidelity { PSIM_FIDELITY_AGGREGATE = 0, PSIM_FIDELITY_EXPANDED } psim_fidelity;

/* Routes of collectives' phases kept for later collectives over the same devices
 * (coll_routes.c): an owner passes one in psim_coll_desc.routes to every collective it adds
 * to one build, and frees it after them. */
typedef struct psim_coll_routes psim_coll_routes;
psim_coll_routes *psim_coll_routes_new(void);
void psim_coll_routes_free(psim_coll_routes *m);

typedef struct psim_coll_desc {
  psim_coll_kind kind;
  psim_allreduce_algo algo;  /* for all-reduce; others use ring/tree as fits */
  const int32_t *devices;    /* the group, in rank order */
  int32_t n;                 /* group size */
  double bytes;              /* full buffer size per rank, bytes (all-gather: gathered size) */
  int32_t concurrent_groups; /* identical groups running at once over disjoint
                                devices (folded replicas); their traffic shares links. 1 = none */
  int32_t group_stride;      /* the k-th concurrent group is devices[i] + k * group_stride;
                                0 = unknown (no contention assumed) */
  bool own_stream;           /* runs on a communicator of its own (data parallelism's: Megatron-
                                LM's and PyTorch DDP's gradient reduction is issued on a separate
                                NCCL communicator and stream from tensor/pipeline traffic), so it
                                holds no device comm engine; the caller orders it after the same
                                communicator's previous collective. false = the comm engine */
  psim_coll_routes *routes;  /* where phases' routes are kept and found again, or NULL: the
                                same routes, found once per message set (the cluster must
                                not change while it is used) */
  int32_t group_index;       /* which of the concurrent groups this one is: the k-th routed group
                                is devices[i] + (k - group_index) * group_stride, k <
                                concurrent_groups. 0 = the first (a folded representative); an
                                unfolded build adds each group with its own index, and every group
                                of a family then takes the same time (docs/simulator.md,
                                "Concurrent groups") */
  bool list_first_piece;     /* aggregated: only the first piece of the chain is given the resource
                                list, the others none; for a caller that keeps the lists itself and
                                gives every piece the first's (the builder's res_deferred, colls.c):
                                a list of 16,384 ranks' links is then not copied 64 times. false =
                                every piece holds the list */
} psim_coll_desc;

/* Sets a descriptor to: all-reduce, auto algorithm, no devices, 0 bytes, one
 * group, stride 0, on the comm engine, group index 0. */
void psim_coll_desc_init(psim_coll_desc *d);

/* An own-stream collective is added as a chain of pieces, each holding the links the whole
 * one fills for 1/k of its time: a link is an exclusive resource in the engine, and without
 * pieces a pipeline transfer that shares a NIC with a data-parallel bucket waited for the
 * whole bucket (tens of ms, on the critical path of every pipeline hop of the cooldown)
 * where NCCL's proxy and the NIC interleave the two streams' sends chunk by chunk (NCCL
 * v2.18.3 src/init.cc: a channel's Simple buffer NCCL_BUFFSIZE = 4 MiB in NCCL_STEPS = 8
 * slots). A transfer now waits at most one piece: PSIM_COLL_PIECE_S, the time four
 * channels' buffers (16 MiB) take on a 400 Gb/s NIC, and at most PSIM_COLL_MAX_PIECES
 * pieces (the cost of simulating them). By time, not bytes: a latency-bound collective (a
 * layer norm's bucket over 1,000 ranks, 4 ms of ring steps for a few KB) holds its links
 * no longer than a bandwidth-bound one. */
#define PSIM_COLL_PIECE_S    (16.0 * 1024 * 1024 / 50e9)
#define PSIM_COLL_MAX_PIECES 64

/* Pieces of an aggregated collective of `seconds`: 1 unless own_stream, else
 * ceil(seconds / PSIM_COLL_PIECE_S) within [1, PSIM_COLL_MAX_PIECES]. */
int32_t psim_coll_pieces(const psim_coll_desc *d, double seconds);

/* Adds a chain of `pieces` tasks of seconds / pieces each, holding res; *entry is the
 * first, *exit the last (one task when pieces is 1). */
psim_status psim_coll_add_pieces(psim_taskgraph *g, int32_t pieces, double seconds,
                                 const int32_t *res, int32_t n_res, const psim_task_info *info,
                                 int32_t *entry, int32_t *exit);
/* The same chain (the same durations to the bit), res given to the first piece only. */
psim_status psim_coll_add_pieces_first(psim_taskgraph *g, int32_t pieces, double seconds,
                                       const int32_t *res, int32_t n_res,
                                       const psim_task_info *info, int32_t *entry, int32_t *exit);

/* Time of the collective by formula (or measured table), in s. */
psim_status psim_coll_time(psim_cluster *c, const psim_coll_desc *d, double *seconds);

/* Adds the collective to g. Its tasks start after *entry (the caller adds
 * edges into it) and *exit finishes last (the caller adds edges out of it).
 * Aggregated: one PSIM_TASK_COLLECTIVE task, *entry == *exit == that task (own_stream:
 * a chain of psim_coll_pieces tasks from *entry to *exit).
 * Expanded: entry and exit are zero-duration barriers around the transfers.
 * A group of one device adds one barrier (*entry == *exit). info is copied
 * into every task (kind/device are filled in). Time and memory O(steps x
 * ranks x route length x concurrent_groups). */
psim_status psim_coll_add(psim_taskgraph *g, psim_cluster *c, const psim_coll_desc *d,
                          psim_fidelity fidelity, const psim_task_info *info, int32_t *entry,
                          int32_t *exit);
/* psim_coll_add that also gives the collective's time in s, with its concurrent groups: the
 * figure psim_coll_time gives for d (the builder's folding check reads it instead of costing
 * the collective a second time). */
psim_status psim_coll_add_timed(psim_taskgraph *g, psim_cluster *c, const psim_coll_desc *d,
                                psim_fidelity fidelity, const psim_task_info *info, int32_t *entry,
                                int32_t *exit, double *seconds);

/* Time (s) a measured bus-bandwidth table gives for a collective of bytes:
 * busbw interpolated linearly in log(bytes) between points, held at the last
 * point above the table, and the first point's time below it; then
 * t = bytes * factor / busbw with the nccl-tests factors (all-reduce
 * 2(n-1)/n; all-gather, reduce-scatter, all-to-all, gather, scatter (n-1)/n;
 * broadcast, reduce 1). O(log points). */
double psim_coll_table_time(const psim_coll_table *t, double bytes);
/* The cluster's measured table for d (same kind and group size, intra-node
 * when every member is on one node, else inter-node), or NULL. O(n + tables). */
const psim_coll_table *psim_coll_find_table(const psim_cluster *c, const psim_coll_desc *d);

/* Adds a point-to-point transfer of bytes from device src to dst over its
 * route: one PSIM_TASK_TRANSFER task holding the links it fills (those at
 * the route's bottleneck bandwidth; faster links carry other traffic) for
 * the cut-through time of psim_p2p_time (the limit of segments pipelined
 * across hops; docs/simulator.md gives the error). *entry == *exit == that
 * task; src == dst adds a zero-duration barrier. */
psim_status psim_p2p_add(psim_taskgraph *g, psim_cluster *c, int32_t src, int32_t dst, double bytes,
                         const psim_task_info *info, int32_t *entry, int32_t *exit);
/* The links a transfer from src to dst holds in the engine (psim_p2p_add:
 * those it fills, its route's bottleneck links). Writes at most cap link ids
 * to held and their number to *n (folding's symmetry checks, sim/builder/
 * locals.c). O(route length). */
psim_status psim_p2p_held_links(psim_cluster *c, int32_t src, int32_t dst, int32_t *held,
                                int32_t cap, int32_t *n);
/* Time of that transfer when uncontended, s: the route's summed latency plus
 * bytes / its bottleneck bandwidth (link bandwidth / slowdown). */
psim_status psim_p2p_time(psim_cluster *c, int32_t src, int32_t dst, double bytes, double *seconds);

#endif
