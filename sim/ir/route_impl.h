/* route_impl.h - the route cache's state, shared by route.c (search, lookups) and
 * route_build.c (its graph: adjacency, colouring, automorphisms). Private to sim/ir. */
#ifndef PSIM_IR_ROUTE_IMPL_H
#define PSIM_IR_ROUTE_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "sim/core/hashmap.h"
#include "sim/ir/cluster_impl.h"
#include "sim/ir/route_blocks.h"
#include "sim/ir/route_shift.h"

#define CHUNK_INTS 65536

/* A cached route: n links from links[0]. */
typedef struct entry {
  const int32_t *links;
  int32_t n;
  uint8_t unique; /* 1: the only shortest path of the links' graph; 2: not; 0: not known */
} entry;

struct psim_route_cache {
  uint64_t id; /* unique over the process: names this cache in the threads' memories */
  pthread_mutex_t mu;
  psim_hmap index; /* (src, dst) -> routes[i] */
  entry *routes;
  size_t n_routes, cap_routes;
  int32_t **chunks; /* route storage; never moved, so returned pointers stay valid */
  size_t n_chunks, chunks_cap, chunk_used;
  int32_t *adj_start, *adj; /* out-links of each vertex (CSR) */
  int32_t *adj_dst;         /* adj's links' destinations, beside them: the pair search's scan of a
                             * switch's links reads no link record (issue 19) */
  int32_t *adj_sorted;      /* a wide vertex's slots of adj sorted by (destination, slot) */
  int32_t last_src;         /* source of the (partial) search below, -1 none */
  int32_t head, tail;       /* its queue: vertices before head are expanded */
  int32_t *hops, *pred, *queue;
  double *lat, *bw;
  /* the goal-directed search (pair_search): in-links (CSR), hop distances to the goal over
   * them (-1 unknown) with their queue, and the forward labels of the pruned search */
  int32_t *in_start, *in_adj, *in_src, *back, *back_queue; /* in_src: in_adj's links' sources */
  int32_t back_goal, back_head, back_tail, back_radius, p_tail;
  int32_t *p_hops, *p_pred, *p_queue;
  double *p_lat, *p_bw;
  /* a 2-colouring of the links' undirected graph, when it has one (no cycle of odd length:
   * a fat tree of GPUs, NICs and switches): every route between u and v then has a length of
   * the parity of colour[u] ^ colour[v], and pair_search skips the bounds of the other */
  uint8_t *colour;
  bool bipartite;
  /* the rotation of the nodes' devices where it is an automorphism (route_shift.h), and the
   * path counts of unique_shortest (capped at 2) */
  psim_route_shift *shift;
  psim_route_blocks *blocks; /* node and rack transpositions (route_blocks.h), or NULL */
  uint8_t *p_count;
  int64_t n_searched, n_translated;
  int64_t n_rejected; /* pairs searched because their representative's route is not unique */
};

/* Vertices with at least WIDE_DEGREE out-links (a rack's leaf, the spine) have them sorted by
 * destination too, for pair_search's lookups toward its goal (relax_toward_goal). */
enum { WIDE_DEGREE = 32 };

static inline psim_route_graph graph_of(const psim_route_cache *r) {
  return (psim_route_graph){r->adj_start, r->adj,    r->adj_dst, r->adj_sorted,
                            r->in_start,  r->in_adj, r->in_src,  WIDE_DEGREE};
}

/* A new cache for c: its adjacency (CSR both ways, wide vertices' slots sorted), colouring,
 * rotation and block transpositions; no route yet. */
psim_status psim_route_cache_create(const psim_cluster *c, psim_route_cache **out);

#endif
