/* route_blocks.h - transpositions of whole nodes and whole racks as automorphisms of the links'
 * graph (route_blocks.c), private to route.c.
 *
 * A block is a node (its devices and the vertices nearer to them than to any other node's: its
 * NVSwitch, PCIe switches, NICs) or a rack (its nodes' blocks and the vertices nearer to its
 * devices than to any other rack's: its leaf switch). The transposition of two blocks of one
 * level swaps their i-th vertices (in vertex order) and fixes every other vertex; it is used
 * only where it is checked to be an automorphism of the directed link graph keeping vertex
 * and link kinds (every link touching the two blocks has exactly one image link, of its kind).
 * Two nodes of one rack, or two racks of one size, of a generated fat tree qualify; route.c
 * carries any pair of devices by at most four transpositions (the source's rack and node to
 * the first, the destination's to the first other) to one of a few representative pairs and
 * translates the representative's route back where it is the only shortest path (issue 19:
 * a data-parallel ring of 2,048 nodes searched one pair per node pair before). */
#ifndef PSIM_IR_ROUTE_BLOCKS_H
#define PSIM_IR_ROUTE_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/ir/cluster.h"
#include "sim/ir/route_shift.h"

typedef struct psim_route_blocks psim_route_blocks;

/* Transpositions carrying a pair to its representative, in the order applied. */
enum { PSIM_ROUTE_MOVES_MAX = 4 };
typedef struct psim_route_moves {
  int32_t n;
  int8_t level[PSIM_ROUTE_MOVES_MAX]; /* 0 nodes, 1 racks */
  int32_t a[PSIM_ROUTE_MOVES_MAX], b[PSIM_ROUTE_MOVES_MAX];
} psim_route_moves;

/* The blocks of c, or *out NULL where no level has two blocks (or out of memory: NULL too,
 * which only costs speed). O(V + E) once per route cache; each transposition is checked on
 * first use. */
void psim_route_blocks_build(const psim_cluster *c, const psim_route_graph *g,
                             psim_route_blocks **out);
void psim_route_blocks_free(psim_route_blocks *b);

/* The representative (*src1, *dst1) of the pair (src, dst) of devices and the moves that carry
 * the pair there (m->n 0: the pair is its own). Checks the transpositions it uses. */
void psim_route_blocks_rep(psim_route_blocks *b, const psim_route_graph *g, int32_t src,
                           int32_t dst, int32_t *src1, int32_t *dst1, psim_route_moves *m);

/* out[i] = the image of links[i] under m's moves undone (the last applied first): the route of
 * the pair from its representative's. */
void psim_route_blocks_links(const psim_route_blocks *b, const psim_route_graph *g,
                             const psim_route_moves *m, const int32_t *links, int32_t n,
                             int32_t *out);

#endif
