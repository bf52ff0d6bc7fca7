/* route_shift.h - the rotation of every node's devices as an automorphism of the links'
 * graph (route_shift.c), private to route.c.
 *
 * phi moves device (node n, local rank i) to (n, (i + 1) mod the node's devices), a vertex
 * reached from a device's out-link slot j to the vertex at the image device's slot j, and
 * every other vertex to itself. It is kept only where it is checked to be an automorphism of
 * the directed link graph that keeps vertex kinds and link kinds (every link u -> v has
 * exactly one link phi(u) -> phi(v), of its kind; no two links join the same ordered pair).
 * route.c uses it to translate the unique shortest route of a representative pair to the
 * pairs of its orbit (issue 19: the 8 rails of a DGX cluster route the same rings). */
#ifndef PSIM_IR_ROUTE_SHIFT_H
#define PSIM_IR_ROUTE_SHIFT_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/ir/cluster.h"

/* The graph's adjacency as route.c holds it (CSR by source, by destination; wide vertices'
 * slots sorted by destination). */
typedef struct psim_route_graph {
  const int32_t *adj_start, *adj, *adj_dst, *adj_sorted;
  const int32_t *in_start, *in_adj, *in_src;
  int32_t wide_degree;
} psim_route_graph;

/* The only link u -> v, or -1 (none, or several): a binary search of a wide vertex's sorted
 * slots, a scan of another's. */
int32_t psim_route_graph_only_link(const psim_route_graph *g, int32_t u, int32_t v);

typedef struct psim_route_shift psim_route_shift;

/* The rotation of c, or *out NULL where it is not an automorphism (or out of memory: NULL
 * too, which only costs speed). */
void psim_route_shift_build(const psim_cluster *c, const psim_route_graph *g,
                            psim_route_shift **out);
void psim_route_shift_free(psim_route_shift *s);

/* The representative of the pair (src, dst) of devices: *src0 = phi^-j(src) has local rank 0,
 * *dst0 = phi^-j(dst), *j = src's local rank (0: the pair is its own representative). */
void psim_route_shift_rep(const psim_route_shift *s, const psim_cluster *c, int32_t src,
                          int32_t dst, int32_t *src0, int32_t *dst0, int32_t *j);

/* out[i] = phi^j(links[i]) for i < n. */
void psim_route_shift_links(const psim_route_shift *s, const int32_t *links, int32_t n, int32_t j,
                            int32_t *out);

#endif
