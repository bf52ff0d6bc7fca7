/* route_shift.c - the rotation of every node's devices, checked to be an automorphism of the
 * links' graph (route_shift.h). O(V + E log deg) once per route cache. */
#include "sim/ir/route_shift.h"

#include <stdlib.h>

#include "sim/core/alloc.h"

struct psim_route_shift {
  int32_t *vmap;      /* phi on vertices */
  int32_t *lmap;      /* phi on links */
  int32_t *node_size; /* per device: the devices of its run (its node's, contiguous) */
};

void psim_route_shift_free(psim_route_shift *s) {
  if (!s)
    return;
  psim_free(s->vmap);
  psim_free(s->lmap);
  psim_free(s->node_size);
  psim_free(s);
}

/* Each node's devices contiguous, local ranks 0, 1, ... in order: node_size per device, and
 * phi on the devices. False where the devices are not so laid out or no node has two. */
static bool rotate_devices(const psim_cluster *c, psim_route_shift *s) {
  bool any = false;
  for (int32_t d = 0; d < c->n_devices;) {
    int32_t k = 0;
    while (d + k < c->n_devices && c->devices[d + k].node == c->devices[d].node &&
           c->devices[d + k].local_rank == k)
      k++;
    if (k == 0)
      return false;
    for (int32_t i = 0; i < k; i++) {
      s->node_size[d + i] = k;
      s->vmap[d + i] = d + (i + 1) % k;
    }
    any |= k > 1;
    d += k;
  }
  return any;
}

/* phi of a vertex that is not a device: where a device's out-link slot j reaches it (the
 * device of least index), the image device's slot j; itself where no device links to it. */
static bool rotate_vertex(const psim_route_shift *s, const psim_route_graph *g, int32_t n_devices,
                          int32_t v) {
  int32_t best = -1, link = -1;
  for (int32_t k = g->in_start[v]; k < g->in_start[v + 1]; k++)
    if (g->in_src[k] < n_devices && (best < 0 || g->in_src[k] < best)) {
      best = g->in_src[k];
      link = g->in_adj[k];
    }
  if (best < 0) {
    s->vmap[v] = v;
    return true;
  }
  int32_t j = 0;
  while (g->adj[g->adj_start[best] + j] != link)
    j++;
  int32_t to = s->vmap[best];
  if (g->adj_start[to] + j >= g->adj_start[to + 1])
    return false;
  s->vmap[v] = g->adj_dst[g->adj_start[to] + j];
  return true;
}

int32_t psim_route_graph_only_link(const psim_route_graph *g, int32_t u, int32_t v) {
  int32_t lo = g->adj_start[u], hi = g->adj_start[u + 1], found = -1, count = 0;
  if (hi - lo >= g->wide_degree) {
    int32_t a = lo, b = hi;
    while (a < b) { /* the first sorted slot whose destination is >= v */
      int32_t mid = a + (b - a) / 2;
      if (g->adj_dst[g->adj_sorted[mid]] < v)
        a = mid + 1;
      else
        b = mid;
    }
    for (; a < hi && g->adj_dst[g->adj_sorted[a]] == v; a++, count++)
      found = g->adj[g->adj_sorted[a]];
  } else {
    for (int32_t k = lo; k < hi; k++)
      if (g->adj_dst[k] == v) {
        found = g->adj[k];
        count++;
      }
  }
  return count == 1 ? found : -1;
}

/* Whether phi is a bijection of the vertices keeping their kinds, and maps every link to the
 * only link between the images, of its kind, one to one (lmap filled). */
static bool check_automorphism(const psim_cluster *c, const psim_route_graph *g,
                               psim_route_shift *s) {
  uint8_t *seen =
      psim_calloc((size_t)(c->n_vertices > c->n_links ? c->n_vertices : c->n_links) + 1, 1);
  if (!seen)
    return false;
  bool ok = true;
  for (int32_t v = 0; v < c->n_vertices && ok; v++) {
    int32_t w = s->vmap[v];
    ok = w >= 0 && w < c->n_vertices && !seen[w] && c->vertex_kinds[w] == c->vertex_kinds[v];
    if (ok)
      seen[w] = 1;
  }
  for (int32_t v = 0; v < c->n_vertices; v++)
    seen[v] = 0;
  for (int32_t l = 0; l < c->n_links && ok; l++) {
    const psim_link *a = &c->links[l];
    int32_t m = psim_route_graph_only_link(g, s->vmap[a->src], s->vmap[a->dst]);
    ok = m >= 0 && !seen[m] && c->links[m].kind == a->kind;
    if (ok) {
      seen[m] = 1;
      s->lmap[l] = m;
    }
  }
  psim_free(seen);
  return ok;
}

void psim_route_shift_build(const psim_cluster *c, const psim_route_graph *g,
                            psim_route_shift **out) {
  *out = NULL;
  if (c->n_devices < 2)
    return;
  psim_route_shift *s = psim_calloc(1, sizeof *s);
  if (!s)
    return;
  s->vmap = psim_malloc(((size_t)c->n_vertices + 1) * sizeof *s->vmap);
  s->lmap = psim_malloc(((size_t)c->n_links + 1) * sizeof *s->lmap);
  s->node_size = psim_malloc(((size_t)c->n_devices + 1) * sizeof *s->node_size);
  bool ok = s->vmap && s->lmap && s->node_size && rotate_devices(c, s);
  for (int32_t v = c->n_devices; v < c->n_vertices && ok; v++)
    ok = rotate_vertex(s, g, c->n_devices, v);
  ok = ok && check_automorphism(c, g, s);
  if (!ok) {
    psim_route_shift_free(s);
    return;
  }
  *out = s;
}

void psim_route_shift_rep(const psim_route_shift *s, const psim_cluster *c, int32_t src,
                          int32_t dst, int32_t *src0, int32_t *dst0, int32_t *j) {
  *j = c->devices[src].local_rank;
  *src0 = src - *j;
  int32_t size = s->node_size[dst], at = c->devices[dst].local_rank;
  *dst0 = dst - at + ((at - *j) % size + size) % size;
}

void psim_route_shift_links(const psim_route_shift *s, const int32_t *links, int32_t n, int32_t j,
                            int32_t *out) {
  for (int32_t i = 0; i < n; i++) {
    int32_t l = links[i];
    for (int32_t k = 0; k < j; k++)
      l = s->lmap[l];
    out[i] = l;
  }
}
