/* route_build.c - the route cache's graph (route_impl.h): the links as CSR adjacency by
 * source and by destination, a wide vertex's slots sorted by destination, a 2-colouring, and
 * the automorphisms route.c translates routes by (route_shift.h, route_blocks.h). O(V + E)
 * once per cluster, on its first route. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/route_impl.h"

static atomic_uint_fast64_t next_cache_id;

void psim_route_cache_free(psim_route_cache *r) {
  if (!r)
    return;
  pthread_mutex_destroy(&r->mu);
  for (size_t i = 0; i < r->n_chunks; i++)
    psim_free(r->chunks[i]);
  psim_free(r->chunks);
  psim_hmap_destroy(&r->index);
  psim_free(r->routes);
  psim_free(r->adj_start);
  psim_free(r->adj);
  psim_free(r->adj_dst);
  psim_free(r->adj_sorted);
  psim_free(r->hops);
  psim_free(r->pred);
  psim_free(r->queue);
  psim_free(r->lat);
  psim_free(r->bw);
  psim_free(r->in_start);
  psim_free(r->in_adj);
  psim_free(r->in_src);
  psim_free(r->back);
  psim_free(r->back_queue);
  psim_free(r->p_hops);
  psim_free(r->p_pred);
  psim_free(r->p_queue);
  psim_free(r->p_lat);
  psim_free(r->p_bw);
  psim_free(r->colour);
  psim_free(r->p_count);
  psim_route_shift_free(r->shift);
  psim_route_blocks_free(r->blocks);
  psim_free(r);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Sorts each wide vertex's adjacency slots by (destination, slot); false when out of memory. */
static bool sort_wide(psim_route_cache *r, const psim_cluster *c) {
  int32_t most = 0;
  for (int32_t v = 0; v < c->n_vertices; v++) {
    int32_t deg = r->adj_start[v + 1] - r->adj_start[v];
    most = deg > most ? deg : most;
  }
  if (most < WIDE_DEGREE)
    return true;
  uint64_t *keys = psim_malloc(sizeof *keys * (size_t)most);
  if (!keys)
    return false;
  for (int32_t v = 0; v < c->n_vertices; v++) {
    int32_t lo = r->adj_start[v], deg = r->adj_start[v + 1] - lo;
    if (deg < WIDE_DEGREE)
      continue;
    for (int32_t i = 0; i < deg; i++)
      keys[i] = (uint64_t)(uint32_t)r->adj_dst[lo + i] << 32 | (uint32_t)(lo + i);
    qsort(keys, (size_t)deg, sizeof *keys, cmp_u64);
    for (int32_t i = 0; i < deg; i++)
      r->adj_sorted[lo + i] = (int32_t)(uint32_t)keys[i];
  }
  psim_free(keys);
  return true;
}

/* Two-colours the links' undirected graph breadth-first from each uncoloured vertex
 * (r->queue as scratch): r->bipartite false when some link joins two vertices of one
 * colour, i.e. the graph has a cycle of odd length. O(V + E). */
static void two_colour(psim_route_cache *r, const psim_cluster *c) {
  uint8_t *col = r->colour; /* 0: not yet; 1 or 2 */
  memset(col, 0, (size_t)c->n_vertices);
  r->bipartite = true;
  for (int32_t s0 = 0; s0 < c->n_vertices && r->bipartite; s0++) {
    if (col[s0])
      continue;
    int32_t head = 0, tail = 0;
    col[s0] = 1;
    r->queue[tail++] = s0;
    while (head < tail && r->bipartite) {
      int32_t u = r->queue[head++];
      for (int side = 0; side < 2; side++) {
        const int32_t *start = side ? r->in_start : r->adj_start;
        const int32_t *far = side ? r->in_src : r->adj_dst;
        for (int32_t k = start[u]; k < start[u + 1]; k++) {
          int32_t v = far[k];
          if (!col[v]) {
            col[v] = (uint8_t)(3 - col[u]);
            r->queue[tail++] = v;
          } else if (col[v] == col[u]) {
            r->bipartite = false;
          }
        }
      }
    }
  }
}

static bool build_adjacency(psim_route_cache *r, const psim_cluster *c) {
  for (int32_t i = 0; i < c->n_links; i++)
    r->adj_start[c->links[i].src + 1]++;
  for (int32_t v = 0; v < c->n_vertices; v++)
    r->adj_start[v + 1] += r->adj_start[v];
  int32_t *fill = r->queue; /* scratch: next free slot per vertex */
  memcpy(fill, r->adj_start, sizeof(int32_t) * (size_t)c->n_vertices);
  for (int32_t i = 0; i < c->n_links; i++) /* in link order: ties go to the first link */
    r->adj[fill[c->links[i].src]++] = i;
  for (int32_t i = 0; i < c->n_links; i++) /* in-links, for the distances to a goal */
    r->in_start[c->links[i].dst + 1]++;
  for (int32_t v = 0; v < c->n_vertices; v++)
    r->in_start[v + 1] += r->in_start[v];
  memcpy(fill, r->in_start, sizeof(int32_t) * (size_t)c->n_vertices);
  for (int32_t i = 0; i < c->n_links; i++)
    r->in_adj[fill[c->links[i].dst]++] = i;
  for (int32_t k = 0; k < c->n_links; k++) {
    r->adj_dst[k] = c->links[r->adj[k]].dst;
    r->in_src[k] = c->links[r->in_adj[k]].src;
  }
  for (int32_t v = 0; v < c->n_vertices; v++)
    r->back[v] = r->p_hops[v] = -1;
  two_colour(r, c);
  if (!sort_wide(r, c))
    return false;
  psim_route_graph g = graph_of(r);
  psim_route_shift_build(c, &g, &r->shift);
  psim_route_blocks_build(c, &g, &r->blocks);
  return true;
}

psim_status psim_route_cache_create(const psim_cluster *c, psim_route_cache **out) {
  psim_route_cache *r = psim_calloc(1, sizeof *r);
  if (!r)
    return psim_error(PSIM_ENOMEM, "out of memory creating the route cache");
  size_t nv = (size_t)c->n_vertices + 1;
  r->last_src = -1;
  psim_hmap_init(&r->index);
  r->id = atomic_fetch_add(&next_cache_id, 1) + 1;
  size_t ne = (size_t)c->n_links + 1, i4 = sizeof(int32_t), f8 = sizeof(double);
  r->adj_start = psim_calloc(nv, i4), r->in_start = psim_calloc(nv, i4);
  r->adj = psim_malloc(i4 * ne), r->adj_dst = psim_malloc(i4 * ne);
  r->adj_sorted = psim_malloc(i4 * ne), r->in_adj = psim_malloc(i4 * ne);
  r->in_src = psim_malloc(i4 * ne);
  r->hops = psim_malloc(i4 * nv), r->pred = psim_malloc(i4 * nv), r->queue = psim_malloc(i4 * nv);
  r->lat = psim_malloc(f8 * nv), r->bw = psim_malloc(f8 * nv);
  r->back_goal = -1;
  r->back = psim_malloc(i4 * nv), r->back_queue = psim_malloc(i4 * nv);
  r->p_hops = psim_malloc(i4 * nv), r->p_pred = psim_malloc(i4 * nv);
  r->p_queue = psim_malloc(i4 * nv);
  r->p_lat = psim_malloc(f8 * nv), r->p_bw = psim_malloc(f8 * nv);
  r->colour = psim_malloc(nv), r->p_count = psim_malloc(nv);
  bool pair = r->in_start && r->in_adj && r->in_src && r->adj_dst && r->adj_sorted && r->back &&
              r->back_queue && r->p_hops && r->p_pred && r->p_queue && r->p_lat && r->p_bw &&
              r->colour && r->p_count;
  if (!r->adj_start || !r->adj || !r->hops || !r->pred || !r->queue || !r->lat || !r->bw || !pair ||
      pthread_mutex_init(&r->mu, NULL) != 0 || !build_adjacency(r, c)) {
    psim_route_cache_free(r);
    return psim_error(PSIM_ENOMEM, "out of memory creating the route cache");
  }
  *out = r;
  return PSIM_OK;
}
