/* route_blocks.c - node and rack transpositions, checked to be automorphisms of the links'
 * graph (route_blocks.h). */
#include "sim/ir/route_blocks.h"

#include <assert.h>
#include <stdlib.h>

#include "sim/core/alloc.h"

enum { MIXED = -2, LEVELS = 2 };

/* One level's blocks: members[start[k] .. start[k + 1]) ascending, per vertex its block (-1
 * none) and position in it; per block the first and second blocks of its group (a node's
 * rack; all racks form one group) and whether its transposition with its group's first is
 * an automorphism (0 not checked yet, 1 yes, 2 no). */
typedef struct level {
  int32_t n_blocks;
  int32_t *start, *members, *blk, *pos, *first, *second;
  uint8_t *ok;
} level;

struct psim_route_blocks {
  const psim_cluster *c;
  level lv[LEVELS];
  bool on[LEVELS];             /* the level has two blocks or more */
  int32_t *out_slot, *in_slot; /* per link: its slot among its source's out-links, its
                                * destination's in-links */
};

static void level_free(level *l) {
  psim_free(l->start);
  psim_free(l->members);
  psim_free(l->blk);
  psim_free(l->pos);
  psim_free(l->first);
  psim_free(l->second);
  psim_free(l->ok);
}

void psim_route_blocks_free(psim_route_blocks *b) {
  if (!b)
    return;
  for (int i = 0; i < LEVELS; i++)
    level_free(&b->lv[i]);
  psim_free(b->out_slot);
  psim_free(b->in_slot);
  psim_free(b);
}

/* Labels every vertex with the node and the rack of the devices nearest to it (hops over
 * out-links, a breadth-first search from every device at once), MIXED where the nearest
 * devices are of several; -1 where no device reaches it. */
static bool label(const psim_cluster *c, const psim_route_graph *g, int32_t *lab[LEVELS]) {
  int32_t nv = c->n_vertices, *dist = psim_malloc(((size_t)nv + 1) * sizeof *dist),
          *queue = psim_malloc(((size_t)nv + 1) * sizeof *queue), tail = 0;
  if (!dist || !queue) {
    psim_free(dist);
    psim_free(queue);
    return false;
  }
  for (int32_t v = 0; v < nv; v++) {
    bool device = v < c->n_devices;
    dist[v] = device ? 0 : -1;
    lab[0][v] = device ? c->devices[v].node : -1;
    lab[1][v] = device ? c->devices[v].rack : -1;
    if (device)
      queue[tail++] = v;
  }
  for (int32_t head = 0; head < tail; head++) {
    int32_t u = queue[head];
    for (int32_t k = g->adj_start[u]; k < g->adj_start[u + 1]; k++) {
      int32_t v = g->adj_dst[k];
      if (dist[v] < 0) {
        dist[v] = dist[u] + 1;
        lab[0][v] = lab[0][u];
        lab[1][v] = lab[1][u];
        queue[tail++] = v;
      } else if (dist[v] == dist[u] + 1) {
        for (int i = 0; i < LEVELS; i++)
          lab[i][v] = lab[i][v] == lab[i][u] ? lab[i][v] : MIXED;
      }
    }
  }
  psim_free(dist);
  psim_free(queue);
  return true;
}

/* Block k's members: the vertices labelled k, in vertex order, with their positions. */
static bool fill_members(level *l, const int32_t *lab, int32_t nv) {
  int32_t *fill = psim_malloc(((size_t)l->n_blocks + 1) * sizeof *fill);
  if (!fill)
    return false;
  for (int32_t v = 0; v < nv; v++)
    if (lab[v] >= 0)
      l->start[lab[v] + 1]++;
  for (int32_t k = 0; k < l->n_blocks; k++) {
    l->start[k + 1] += l->start[k];
    fill[k] = l->start[k];
  }
  for (int32_t v = 0; v < nv; v++) {
    l->blk[v] = lab[v] >= 0 ? lab[v] : -1;
    l->pos[v] = -1;
    if (lab[v] >= 0) {
      l->pos[v] = fill[lab[v]] - l->start[lab[v]];
      l->members[fill[lab[v]]++] = v;
    }
  }
  psim_free(fill);
  return true;
}

/* Per block, the first and second non-empty blocks of its group (group_of[k] < n_keys). */
static bool set_groups(level *l, const int32_t *group_of, int32_t n_keys) {
  int32_t *kf = psim_malloc(((size_t)n_keys + 1) * 2 * sizeof *kf);
  if (!kf)
    return false;
  for (int32_t i = 0; i < 2 * (n_keys + 1); i++)
    kf[i] = -1;
  for (int32_t k = 0; k < l->n_blocks; k++) {
    int32_t *f = &kf[2 * group_of[k]];
    if (l->start[k + 1] > l->start[k] && f[0] < 0)
      f[0] = k;
    else if (l->start[k + 1] > l->start[k] && f[1] < 0)
      f[1] = k;
  }
  for (int32_t k = 0; k < l->n_blocks; k++) {
    l->first[k] = kf[2 * group_of[k]];
    l->second[k] = kf[2 * group_of[k] + 1];
  }
  psim_free(kf);
  return true;
}

/* The blocks of level l from the labels; group_of[k]: the group key of block k. */
static bool make_level(level *l, const int32_t *lab, int32_t nv, int32_t n_blocks,
                       const int32_t *group_of, int32_t n_keys) {
  l->n_blocks = n_blocks;
  size_t nb = (size_t)n_blocks + 1;
  l->start = psim_calloc(nb + 1, sizeof(int32_t));
  l->members = psim_malloc(((size_t)nv + 1) * sizeof(int32_t));
  l->blk = psim_malloc(((size_t)nv + 1) * sizeof(int32_t));
  l->pos = psim_malloc(((size_t)nv + 1) * sizeof(int32_t));
  l->first = psim_malloc(nb * sizeof(int32_t));
  l->second = psim_malloc(nb * sizeof(int32_t));
  l->ok = psim_calloc(nb, 1);
  return l->start && l->members && l->blk && l->pos && l->first && l->second && l->ok &&
         fill_members(l, lab, nv) && set_groups(l, group_of, n_keys);
}

/* The levels' group keys: a node's rack (that of its first device), one group of racks. */
static bool build_levels(psim_route_blocks *b, int32_t *lab[LEVELS]) {
  const psim_cluster *c = b->c;
  int32_t n_nodes = 0, n_racks = 0;
  for (int32_t d = 0; d < c->n_devices; d++) {
    if (c->devices[d].node < 0 || c->devices[d].rack < 0)
      return false;
    n_nodes = c->devices[d].node >= n_nodes ? c->devices[d].node + 1 : n_nodes;
    n_racks = c->devices[d].rack >= n_racks ? c->devices[d].rack + 1 : n_racks;
  }
  int32_t *node_rack = psim_calloc((size_t)n_nodes + 1, sizeof *node_rack),
          *rack_group = psim_calloc((size_t)n_racks + 1, sizeof *rack_group);
  bool ok = node_rack && rack_group;
  for (int32_t d = c->n_devices - 1; d >= 0 && ok; d--)
    node_rack[c->devices[d].node] = c->devices[d].rack;
  ok = ok && make_level(&b->lv[0], lab[0], c->n_vertices, n_nodes, node_rack, n_racks) &&
       make_level(&b->lv[1], lab[1], c->n_vertices, n_racks, rack_group, 1);
  for (int i = 0; i < LEVELS && ok; i++) {
    int32_t used = 0;
    for (int32_t k = 0; k < b->lv[i].n_blocks; k++)
      used += b->lv[i].start[k + 1] > b->lv[i].start[k];
    b->on[i] = used >= 2;
  }
  psim_free(node_rack);
  psim_free(rack_group);
  return ok && (b->on[0] || b->on[1]);
}

static bool make_slots(psim_route_blocks *b, const psim_route_graph *g) {
  const psim_cluster *c = b->c;
  b->out_slot = psim_malloc(((size_t)c->n_links + 1) * sizeof(int32_t));
  b->in_slot = psim_malloc(((size_t)c->n_links + 1) * sizeof(int32_t));
  if (!b->out_slot || !b->in_slot)
    return false;
  for (int32_t v = 0; v < c->n_vertices; v++) {
    for (int32_t k = g->adj_start[v]; k < g->adj_start[v + 1]; k++)
      b->out_slot[g->adj[k]] = k - g->adj_start[v];
    for (int32_t k = g->in_start[v]; k < g->in_start[v + 1]; k++)
      b->in_slot[g->in_adj[k]] = k - g->in_start[v];
  }
  return true;
}

void psim_route_blocks_build(const psim_cluster *c, const psim_route_graph *g,
                             psim_route_blocks **out) {
  *out = NULL;
  if (c->n_devices < 2)
    return;
  psim_route_blocks *b = psim_calloc(1, sizeof *b);
  int32_t *lab[LEVELS] = {psim_malloc(((size_t)c->n_vertices + 1) * sizeof(int32_t)),
                          psim_malloc(((size_t)c->n_vertices + 1) * sizeof(int32_t))};
  bool ok = b && lab[0] && lab[1];
  if (ok) {
    b->c = c;
    ok = label(c, g, lab) && build_levels(b, lab) && make_slots(b, g);
  }
  psim_free(lab[0]);
  psim_free(lab[1]);
  if (!ok) {
    psim_route_blocks_free(b);
    return;
  }
  *out = b;
}

/* ---- one transposition --------------------------------------------------------- */

static int32_t block_size(const level *l, int32_t k) {
  return l->start[k + 1] - l->start[k];
}

/* The image of vertex v under the transposition of blocks x and y of level l. */
static int32_t swap_vertex(const level *l, int32_t x, int32_t y, int32_t v) {
  int32_t k = l->blk[v];
  if (k == x)
    return l->members[l->start[y] + l->pos[v]];
  if (k == y)
    return l->members[l->start[x] + l->pos[v]];
  return v;
}

/* Whether v's links (out-links if out, else in-links) map slot by slot to those of its image
 * w: the same count, and the i-th link's other end mapped to the i-th link's of w, of the
 * same kind. */
static bool slots_map(const psim_route_blocks *b, const psim_route_graph *g, const level *l,
                      int32_t x, int32_t y, int32_t v, int32_t w, bool out) {
  const int32_t *start = out ? g->adj_start : g->in_start, *link = out ? g->adj : g->in_adj,
                *end = out ? g->adj_dst : g->in_src;
  if (start[v + 1] - start[v] != start[w + 1] - start[w])
    return false;
  for (int32_t i = 0; i < start[v + 1] - start[v]; i++)
    if (swap_vertex(l, x, y, end[start[v] + i]) != end[start[w] + i] ||
        b->c->links[link[start[v] + i]].kind != b->c->links[link[start[w] + i]].kind)
      return false;
  return true;
}

/* Whether the transposition of blocks x and y of level l, with the links mapped slot by slot
 * (a link out of a moved vertex to the same out-slot of its image; one into a moved vertex
 * from a fixed one to the same in-slot of its image), is an automorphism keeping vertex and
 * link kinds: equal sizes and kinds position by position, and every moved vertex's out- and
 * in-slots matching its image's. The map is an involution, so a bijection of the links. */
static bool swap_is_automorphism(const psim_route_blocks *b, const psim_route_graph *g,
                                 const level *l, int32_t x, int32_t y) {
  if (block_size(l, x) != block_size(l, y))
    return false;
  for (int32_t i = 0; i < block_size(l, x); i++) {
    int32_t u = l->members[l->start[x] + i], v = l->members[l->start[y] + i];
    if (b->c->vertex_kinds[u] != b->c->vertex_kinds[v] || !slots_map(b, g, l, x, y, u, v, true) ||
        !slots_map(b, g, l, x, y, u, v, false))
      return false;
  }
  return true;
}

/* Whether block k's transposition with its group's first is an automorphism (checked once;
 * the first itself: the identity). The transposition of two blocks x, y of a group is then
 * one too: the conjugate (f x)(f y)(f x) of two, the same vertex map position by position. */
static bool block_ok(psim_route_blocks *b, const psim_route_graph *g, int level_i, int32_t k) {
  level *l = &b->lv[level_i];
  if (k < 0 || l->first[k] < 0)
    return false;
  if (k == l->first[k])
    return true;
  if (l->ok[k] == 0)
    l->ok[k] = swap_is_automorphism(b, g, l, l->first[k], k) ? 1 : 2;
  return l->ok[k] == 1;
}

/* ---- representatives ----------------------------------------------------------- */

/* Moves block `from` of level i onto block `to` (swapping them) for both ends, if both
 * blocks' transpositions are checked. */
static void move(psim_route_blocks *b, const psim_route_graph *g, int i, int32_t from, int32_t to,
                 int32_t *s, int32_t *d, psim_route_moves *m) {
  if (from == to || to < 0 || !block_ok(b, g, i, from) || !block_ok(b, g, i, to))
    return;
  assert(m->n < PSIM_ROUTE_MOVES_MAX);
  const level *l = &b->lv[i];
  *s = swap_vertex(l, from, to, *s);
  *d = swap_vertex(l, from, to, *d);
  m->level[m->n] = (int8_t)i;
  m->a[m->n] = from;
  m->b[m->n] = to;
  m->n++;
}

void psim_route_blocks_rep(psim_route_blocks *b, const psim_route_graph *g, int32_t src,
                           int32_t dst, int32_t *src1, int32_t *dst1, psim_route_moves *m) {
  m->n = 0;
  *src1 = src;
  *dst1 = dst;
  for (int i = LEVELS - 1; i >= 0; i--) /* the source: its rack, then its node, to the first */
    if (b->on[i] && b->lv[i].blk[*src1] >= 0)
      move(b, g, i, b->lv[i].blk[*src1], b->lv[i].first[b->lv[i].blk[*src1]], src1, dst1, m);
  for (int i = LEVELS - 1; i >= 0; i--) { /* the destination: to the first other block */
    const level *l = &b->lv[i];
    int32_t k = b->on[i] ? l->blk[*dst1] : -1;
    if (k < 0 || k == l->blk[*src1])
      continue;
    int32_t to = l->first[k] == l->blk[*src1] ? l->second[k] : l->first[k];
    move(b, g, i, k, to, src1, dst1, m); /* neither block holds the source: it stays */
  }
}

void psim_route_blocks_links(const psim_route_blocks *b, const psim_route_graph *g,
                             const psim_route_moves *m, const int32_t *links, int32_t n,
                             int32_t *out) {
  const psim_link *all = b->c->links;
  for (int32_t i = 0; i < n; i++) {
    int32_t link = links[i];
    for (int32_t k = m->n - 1; k >= 0; k--) {
      const level *l = &b->lv[m->level[k]];
      int32_t u = all[link].src, v = all[link].dst;
      int32_t u2 = swap_vertex(l, m->a[k], m->b[k], u), v2 = swap_vertex(l, m->a[k], m->b[k], v);
      if (u2 != u)
        link = g->adj[g->adj_start[u2] + b->out_slot[link]];
      else if (v2 != v)
        link = g->in_adj[g->in_start[v2] + b->in_slot[link]];
    }
    out[i] = link;
  }
}
