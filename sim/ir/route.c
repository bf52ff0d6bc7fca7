/* route.c - shortest routes between devices, cached per (src, dst) pair.
 *
 * A route minimises, in order: the number of hops; then it maximises the
 * bottleneck bandwidth and minimises the summed latency; remaining ties go to
 * the link added first, so routes are deterministic. This is NCCL's rule for
 * the paths between its devices (src/graph/paths.cc, ncclTopoSetPaths, read
 * at NVIDIA/nccl 04cdb80: a breadth-first search where a path replaces
 * another only when it is no longer and wider); latency only breaks ties of
 * width, so two hops over NVLink through a peer (NCCL's NVB) win over two
 * hops over PCIe through a host bridge. It is found by a breadth-first
 * search over the directed links from the source, level by level (all
 * vertices h hops away are final before any h+1 away is expanded; as in
 * NCCL each vertex keeps its best label only, so the width-then-latency
 * tie-break is exact for width and greedy for latency). This is BFS
 * rather than igraph_get_shortest_path because the lexicographic key and
 * the NIC transit rule below are not expressible as igraph edge weights;
 * igraph validates the same graph (cluster.c) and the unit tests check that
 * hop counts equal igraph_distances.
 *
 * NIC transit rule: a NIC vertex joins a host side (GPUs, PCIe switches) to
 * the network. A route that enters a NIC from the host side leaves it into
 * the network, and one that enters from the network leaves it to the host
 * side, so traffic between two GPUs of a node never "bounces" through their
 * shared NIC.
 *
 * Cost: a pair from a new source is found by pair_search, which expands only the vertices
 * that can lie on a route of its length (on a fat tree: the two ends' nodes, racks and the
 * spine); requests from the last full search's source resume that search; O(1) amortised
 * per cached pair. Where the rotation of every node's devices (route_shift.h) and node and
 * rack transpositions (route_blocks.h) are automorphisms of the links' graph, a pair is its
 * representative's route translated if that route is the only shortest path (translated,
 * unique_shortest once per representative): 3 full racks of DGX nodes search 23 pairs of
 * 9,120 (issue 19). One mutex guards the cache; route_build.c builds its graph (adjacency,
 * colouring, automorphisms) on the first route. */
#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/route_impl.h"

static pthread_mutex_t create_mu = PTHREAD_MUTEX_INITIALIZER;

/* Each thread remembers its recent lookups in front of the mutex (the
 * builder asks for the same few pairs again and again). Safe because a
 * cache's routes are never moved or freed before the cache, and a cache id
 * is never reused. */
enum { THREAD_ROUTES = 1024 };
typedef struct remembered {
  uint64_t cache_id, key;
  const int32_t *links;
  int32_t n;
} remembered;
static _Thread_local remembered thread_routes[THREAD_ROUTES];

/* ---- search ------------------------------------------------------------------ */

/* May the route, having reached u over link in (-1 at the source) after hops_u hops, go on
 * over out? Two transit rules:
 * - NIC: a NIC joins a host side to the network (see the file comment).
 * - GPU: NVLink and PCIe traffic crosses a device only as NCCL's paths do, one NVLink hop
 *   from the source and then on over an NVLink to a GPU (NVB: GPU-NVLink-GPU-NVLink-GPU) or
 *   over the GPU's PCIe toward its NIC (PXN), and at the receiving end from PCIe over an NVLink
 *   to a GPU (PXN's mirror: the GPU reached so is the route's last, as it forwards no
 *   further). NCCL routes through a GPU "only as 1 hop"
 *   (src/graph/paths.cc, ncclTopoSetPaths and PXN in ncclTopoComputePaths, NVIDIA/nccl
 *   v2.21); a longer chain of GPUs is no path, NCCL takes the PCIe / host route instead.
 *   Without the rule, a cluster with a PCIe link removed routed over several NVLink hops
 *   through peers and ran faster (issue 18, the invariant suite's property (b)). Links of
 *   other kinds between devices (hand-written meshes, tori) forward freely. */
static bool gpu_may_forward(const psim_cluster *c, int32_t hops_u, const psim_link *in,
                            const psim_link *out) {
  bool nccl_in = in->kind == PSIM_LINK_NVLINK || in->kind == PSIM_LINK_PCIE;
  bool nccl_out = out->kind == PSIM_LINK_NVLINK || out->kind == PSIM_LINK_PCIE;
  if (!nccl_in && !nccl_out)
    return true;
  bool to_gpu = out->kind == PSIM_LINK_NVLINK && c->vertex_kinds[out->dst] == PSIM_VERTEX_DEVICE;
  if (in->kind == PSIM_LINK_PCIE) /* the receiving end's PXN: the peer's NVLink delivers */
    return to_gpu;
  return hops_u == 1 && in->kind == PSIM_LINK_NVLINK && (to_gpu || out->kind == PSIM_LINK_PCIE);
}

static bool may_follow(const psim_cluster *c, int32_t u, int32_t hops_u, int32_t in, int32_t out) {
  if (in < 0)
    return true;
  const psim_link *li = &c->links[in], *lo = &c->links[out];
  if (c->vertex_kinds[u] == PSIM_VERTEX_DEVICE)
    return gpu_may_forward(c, hops_u, li, lo);
  if (c->vertex_kinds[u] != PSIM_VERTEX_NIC)
    return true;
  bool in_net = li->kind == PSIM_LINK_NIC, out_net = lo->kind == PSIM_LINK_NIC;
  return in_net != out_net;
}

/* The labels of one search: the full search's (r->hops ...) or the pruned pair search's
 * (r->p_hops ...). */
typedef struct labels {
  int32_t *hops, *pred, *queue;
  double *lat, *bw;
} labels;

/* Is (bw, lat) over link l from u better than v's current label (wider, then
 * lower latency)? */
static bool better(const labels *r, const psim_link *l, int32_t u, int32_t v) {
  double lat = r->lat[u] + l->latency_s, bw = fmin(r->bw[u], l->bw / l->slowdown);
  if (bw != r->bw[v])
    return bw > r->bw[v];
  return lat < r->lat[v];
}

static void relax(const psim_cluster *c, const labels *r, int32_t u, int32_t li, int32_t *tail) {
  const psim_link *l = &c->links[li];
  int32_t v = l->dst;
  if (r->hops[v] < 0) {
    r->hops[v] = r->hops[u] + 1;
    r->queue[(*tail)++] = v;
  } else if (r->hops[v] != r->hops[u] + 1 || !better(r, l, u, v)) {
    return;
  }
  r->pred[v] = li;
  r->lat[v] = r->lat[u] + l->latency_s;
  r->bw[v] = fmin(r->bw[u], l->bw / l->slowdown);
}

static void start(const psim_cluster *c, psim_route_cache *r, int32_t src) {
  for (int32_t v = 0; v < c->n_vertices; v++)
    r->hops[v] = -1;
  r->head = r->tail = 0;
  r->hops[src] = 0;
  r->pred[src] = -1;
  r->lat[src] = 0;
  r->bw[src] = INFINITY;
  r->queue[r->tail++] = src;
  r->last_src = src;
}

/* Expands the search from r->last_src until dst's label is final: every
 * vertex one level closer than dst has been expanded. The search stops
 * there and resumes on the next request from the same source. */
static void search(const psim_cluster *c, psim_route_cache *r, int32_t src, int32_t dst) {
  if (r->last_src != src)
    start(c, r, src);
  labels L = {r->hops, r->pred, r->queue, r->lat, r->bw};
  while (r->head < r->tail) {
    int32_t u = r->queue[r->head];
    if (r->hops[dst] >= 0 && r->hops[u] >= r->hops[dst])
      return;
    r->head++;
    for (int32_t k = r->adj_start[u]; k < r->adj_start[u + 1]; k++)
      if (may_follow(c, u, r->hops[u], r->pred[u], r->adj[k]))
        relax(c, &L, u, r->adj[k], &r->tail);
  }
}

/* ---- goal-directed search of one pair ---------------------------------------------
 * The search above expands every vertex closer to the source than the destination: on a
 * fat tree, the whole cluster for a route between racks, so routing each member of a
 * 100,000-device ring cost O(devices) per route (issue 19). pair_search finds the same
 * route expanding only vertices that can lie on a route of d hops: back[v], v's hop
 * distance to the destination over any links (no NIC transit rule, so a lower bound lb(v)
 * on the hops a route from v still needs), known within radius d / 2 and bounded below by
 * radius + 1 beyond. With d = 1, 2, ... the first pass that reaches the destination finds
 * it at the full search's hop count with the full search's label: a vertex u with
 * hops(u) + lb(u) <= d has every same-level predecessor p so bounded too (lb(p) <= lb(u)
 * + 1 along a link), so by induction over levels the expanded vertices have the full
 * search's hops, labels and queue order; every vertex whose label the destination's
 * depends on is so bounded at d = its hop count; a pass with d below it cannot reach it
 * (it would reach it over labels the full search has). tests/unit/test_coll_large.c
 * compares both on every pair of several clusters. */

/* Extends the distances to goal to every vertex within radius hops. */
static void back_extend(psim_route_cache *r, int32_t goal, int32_t radius) {
  if (r->back_goal != goal) {
    for (int32_t i = 0; i < r->back_tail; i++)
      r->back[r->back_queue[i]] = -1;
    r->back_goal = goal;
    r->back_head = r->back_tail = 0;
    r->back[goal] = 0;
    r->back_queue[r->back_tail++] = goal;
  }
  while (r->back_head < r->back_tail && r->back[r->back_queue[r->back_head]] < radius) {
    int32_t v = r->back_queue[r->back_head++];
    for (int32_t k = r->in_start[v]; k < r->in_start[v + 1]; k++) {
      int32_t u = r->in_src[k];
      if (r->back[u] < 0) {
        r->back[u] = r->back[v] + 1;
        r->back_queue[r->back_tail++] = u;
      }
    }
  }
  r->back_radius = radius;
}

static inline int32_t lower_bound(const psim_route_cache *r, int32_t v) {
  return r->back[v] >= 0 ? r->back[v] : r->back_radius + 1;
}

/* The slots of u's links toward the vertices at most `left` hops from the goal, as the scan
 * of pruned_pass would take them (the links whose destination's lower bound is <= left, in
 * slot order), but found by looking those vertices up in u's sorted links: at the spine, a few
 * lookups instead of a scan of every rack's link. Where left <= the radius of the distances known,
 * a vertex they do not reach has the bound radius + 1 > left, so the links that qualify
 * are those to the first vertices of the distances' queue (in order of distance). False,
 * with nothing found, where u is not wide, left is beyond the radius, or the lookups
 * would cost about the scan. */
enum { FOUND_MAX = 64 };
static bool toward_goal_slots(const psim_route_cache *r, int32_t u, int32_t left,
                              int32_t found[FOUND_MAX], int32_t *n_found) {
  int32_t lo0 = r->adj_start[u], hi0 = r->adj_start[u + 1], deg = hi0 - lo0;
  if (deg < WIDE_DEGREE || left > r->back_radius)
    return false;
  int32_t n = 0;
  for (int32_t i = 0; i < r->back_tail && r->back[r->back_queue[i]] <= left; i++) {
    if (i >= deg / 8)
      return false;
    int32_t w = r->back_queue[i], lo = lo0, hi = hi0;
    while (lo < hi) { /* the first of u's sorted slots whose destination is >= w */
      int32_t mid = lo + (hi - lo) / 2;
      if (r->adj_dst[r->adj_sorted[mid]] < w)
        lo = mid + 1;
      else
        hi = mid;
    }
    for (; lo < hi0 && r->adj_dst[r->adj_sorted[lo]] == w; lo++) {
      if (n == FOUND_MAX)
        return false;
      found[n++] = r->adj_sorted[lo];
    }
  }
  for (int32_t i = 1; i < n; i++) /* slot order: the scan's order of relaxation */
    for (int32_t j = i; j > 0 && found[j - 1] > found[j]; j--) {
      int32_t t = found[j];
      found[j] = found[j - 1];
      found[j - 1] = t;
    }
  *n_found = n;
  return true;
}

static bool relax_toward_goal(const psim_cluster *c, psim_route_cache *r, const labels *L,
                              int32_t u, int32_t left, int32_t *tail) {
  int32_t found[FOUND_MAX], n = 0;
  if (!toward_goal_slots(r, u, left, found, &n))
    return false;
  for (int32_t i = 0; i < n; i++)
    if (may_follow(c, u, L->hops[u], L->pred[u], r->adj[found[i]]))
      relax(c, L, u, r->adj[found[i]], tail);
  return true;
}

/* One pass bounded by d hops; whether it reached dst. */
static bool pruned_pass(const psim_cluster *c, psim_route_cache *r, int32_t src, int32_t dst,
                        int32_t d) {
  for (int32_t i = 0; i < r->p_tail; i++)
    r->p_hops[r->p_queue[i]] = -1;
  labels L = {r->p_hops, r->p_pred, r->p_queue, r->p_lat, r->p_bw};
  int32_t tail = 0;
  L.hops[src] = 0;
  L.pred[src] = -1;
  L.lat[src] = 0;
  L.bw[src] = INFINITY;
  L.queue[tail++] = src;
  for (int32_t head = 0; head < tail; head++) {
    int32_t u = L.queue[head];
    if (L.hops[dst] >= 0 && L.hops[u] >= L.hops[dst])
      break;
    if (L.hops[u] + lower_bound(r, u) > d)
      continue;
    int32_t left = d - L.hops[u] - 1; /* hops a link's destination may still need */
    if (relax_toward_goal(c, r, &L, u, left, &tail))
      continue;
    for (int32_t k = r->adj_start[u]; k < r->adj_start[u + 1]; k++)
      if (lower_bound(r, r->adj_dst[k]) <= left &&
          may_follow(c, u, L.hops[u], L.pred[u], r->adj[k]))
        relax(c, &L, u, r->adj[k], &tail);
  }
  r->p_tail = tail;
  return L.hops[dst] >= 0;
}

/* Passes of growing bound; false (the caller searches in full) past PAIR_MAX_HOPS or
 * when the destination is unreachable even ignoring the transit rule. On a bipartite graph
 * (two_colour) the bounds of the wrong parity are skipped: every route has the parity of
 * colour[src] ^ colour[dst], so the route's length H has it, and a pass bounded below H
 * reaches nothing (above), so skipping it changes no route; the pass bounded by H reads the
 * distances to dst within H / 2 as before (back_extend's queue is the same however its
 * radius grew). 131,072 GPUs: 1.18 M of 2.36 M passes, all failing (issue 19). */
enum { PAIR_MAX_HOPS = 24 };
static bool pair_search(const psim_cluster *c, psim_route_cache *r, int32_t src, int32_t dst) {
  int32_t parity = r->bipartite ? (r->colour[src] ^ r->colour[dst]) & 1 : -1;
  for (int32_t d = 1; d <= PAIR_MAX_HOPS; d++) {
    if (parity >= 0 && (d & 1) != parity)
      continue;
    back_extend(r, dst, d / 2);
    if (r->back_head == r->back_tail && r->back[src] < 0)
      return false;
    if (pruned_pass(c, r, src, dst, d))
      return true;
  }
  return false;
}

/* ---- routes translated by automorphisms (route_shift.h, route_blocks.h) -----------
 * Lemma: where the links' graph, rules ignored, has exactly one path of the fewest hops h
 * from s to t (counted as sequences of links), and the search's route R has h hops, the
 * search from phi(s) to phi(t) gives phi(R), for any automorphism phi that keeps vertex and
 * link kinds. phi(R) is then the only h-hop path from phi(s) to phi(t) (phi maps paths to
 * paths one to one) and obeys the transit rules (may_follow reads the kinds and the hop
 * count only). The search (full or pair_search: the same routes) labels the i-th vertex v_i
 * of that path at level i with pred its i-th link: v_i is no nearer than i even without
 * rules, and another candidate at level i - 1 would give a second h-hop path s -> t. So
 * neither the ties (slot order, which phi need not keep) nor the widths and latencies (which
 * phi need not keep) decide the route. unique_shortest checks the premise once per
 * representative pair; a pair whose representative fails it is searched as before. */

/* Whether the only path of h hops from s to t, rules ignored, is the only shortest one:
 * a breadth-first count of paths (capped at 2) over the vertices pair_search's bound keeps
 * (hops + lower bound <= h: every vertex of an h-hop path), in the pruned pass's arrays. */
static void count_link(psim_route_cache *r, int32_t u, int32_t k, int32_t *tail) {
  int32_t v = r->adj_dst[k];
  if (r->p_hops[v] < 0) {
    r->p_hops[v] = r->p_hops[u] + 1;
    r->p_count[v] = 0;
    r->p_queue[(*tail)++] = v;
  }
  if (r->p_hops[v] == r->p_hops[u] + 1) {
    int32_t sum = r->p_count[v] + r->p_count[u];
    r->p_count[v] = (uint8_t)(sum < 2 ? sum : 2);
  }
}

static bool unique_shortest(psim_route_cache *r, int32_t s, int32_t t, int32_t h) {
  back_extend(r, t, h / 2);
  for (int32_t i = 0; i < r->p_tail; i++)
    r->p_hops[r->p_queue[i]] = -1;
  int32_t tail = 0;
  r->p_hops[s] = 0;
  r->p_count[s] = 1;
  r->p_queue[tail++] = s;
  for (int32_t head = 0; head < tail; head++) {
    int32_t u = r->p_queue[head], found[FOUND_MAX], n = 0;
    if (r->p_hops[u] >= h)
      break;
    if (r->p_hops[u] + lower_bound(r, u) > h)
      continue;
    int32_t left = h - r->p_hops[u] - 1;
    if (toward_goal_slots(r, u, left, found, &n)) {
      for (int32_t i = 0; i < n; i++)
        count_link(r, u, found[i], &tail);
      continue;
    }
    for (int32_t k = r->adj_start[u]; k < r->adj_start[u + 1]; k++)
      if (lower_bound(r, r->adj_dst[k]) <= left)
        count_link(r, u, k, &tail);
  }
  r->p_tail = tail;
  return r->p_hops[t] == h && r->p_count[t] == 1;
}

/* ---- cache ---------------------------------------------------------------------- */

/* Room for n ints that will never move. */
static psim_status storage(psim_route_cache *r, int32_t n, int32_t **out) {
  size_t need = (size_t)n;
  if (r->n_chunks == 0 || r->chunk_used + need > CHUNK_INTS) {
    if (PSIM_VEC_RESERVE(r->chunks, r->chunks_cap, r->n_chunks + 1) != PSIM_OK)
      return psim_error(PSIM_ENOMEM, "out of memory storing a route");
    size_t size = need > CHUNK_INTS ? need : CHUNK_INTS;
    int32_t *chunk = psim_malloc(sizeof(int32_t) * size);
    if (!chunk)
      return psim_error(PSIM_ENOMEM, "out of memory storing a route");
    r->chunks[r->n_chunks++] = chunk;
    r->chunk_used = 0;
  }
  *out = r->chunks[r->n_chunks - 1] + r->chunk_used;
  r->chunk_used += need;
  return PSIM_OK;
}

static psim_status compute(const psim_cluster *c, psim_route_cache *r, int32_t src, int32_t dst,
                           entry *e) {
  const int32_t *hops = r->p_hops, *pred = r->p_pred;
  if (r->last_src == src || !pair_search(c, r, src, dst)) {
    search(c, r, src, dst); /* resumes the last source's search, or the full search */
    hops = r->hops;
    pred = r->pred;
  }
  int32_t n = hops[dst];
  if (n < 0)
    return psim_error(PSIM_EFAILED, "no route from device '%s' to device '%s'",
                      c->vertex_names[src], c->vertex_names[dst]);
  int32_t *links = NULL;
  PSIM_CHECK(storage(r, n, &links));
  for (int32_t v = dst, i = n - 1; i >= 0; i--) {
    links[i] = pred[v];
    v = c->links[links[i]].src;
  }
  e->links = links;
  e->n = n;
  return PSIM_OK;
}

static psim_status lookup_index(const psim_cluster *c, psim_route_cache *r, int32_t src,
                                int32_t dst, bool may_translate, int32_t *i);

/* The route from src to dst as phi^j of the pair's with a first-rank source (itself cached,
 * translated in turn), or, for a first-rank source, as the searched representative's image
 * under the moves (route_blocks.h; the lemma above): *done false where the pair is its own
 * representative or the representative's route is not the only shortest path. The rotation
 * first: its images cost j link look-ups, and 7 pairs in 8 of a DGX cluster are one. */
static psim_status translated(const psim_cluster *c, psim_route_cache *r, int32_t src, int32_t dst,
                              entry *e, bool *done) {
  *done = false;
  psim_route_graph g = graph_of(r);
  psim_route_moves m = {0};
  int32_t src0 = src, dst0 = dst, j = 0, i0;
  if (r->shift)
    psim_route_shift_rep(r->shift, c, src, dst, &src0, &dst0, &j);
  if (j == 0 && r->blocks)
    psim_route_blocks_rep(r->blocks, &g, src, dst, &src0, &dst0, &m);
  if (j == 0 && m.n == 0)
    return PSIM_OK;
  PSIM_CHECK(lookup_index(c, r, src0, dst0, j > 0, &i0));
  entry *e0 = &r->routes[i0];
  if (e0->unique == 0)
    e0->unique = unique_shortest(r, src0, dst0, e0->n) ? 1 : 2;
  if (e0->unique != 1) {
    r->n_rejected++;
    return PSIM_OK;
  }
  int32_t *links = NULL;
  PSIM_CHECK(storage(r, e0->n, &links));
  if (j > 0)
    psim_route_shift_links(r->shift, e0->links, e0->n, j, links);
  else
    psim_route_blocks_links(r->blocks, &g, &m, e0->links, e0->n, links);
  *e = (entry){links, e0->n, 1};
  *done = true;
  r->n_translated++;
  return PSIM_OK;
}

/* The index of the cached route from src to dst, found and added on a miss (translated from
 * its representative's where may_translate). Caller holds r->mu. */
static psim_status lookup_index(const psim_cluster *c, psim_route_cache *r, int32_t src,
                                int32_t dst, bool may_translate, int32_t *i) {
  assert(src != dst && src >= 0 && dst >= 0 && src < c->n_devices && dst < c->n_devices);
  psim_hmap_key key = {(uint64_t)(uint32_t)src, (uint64_t)(uint32_t)dst};
  if (psim_hmap_find(&r->index, key, i))
    return PSIM_OK;
  entry e = {NULL, 0, 0};
  bool done = false;
  if (may_translate)
    PSIM_CHECK(translated(c, r, src, dst, &e, &done));
  if (!done) {
    PSIM_CHECK(compute(c, r, src, dst, &e));
    r->n_searched++;
  }
  if (r->n_routes >= INT32_MAX)
    return psim_error(PSIM_ENOMEM, "route cache full");
  PSIM_CHECK(PSIM_VEC_RESERVE(r->routes, r->cap_routes, r->n_routes + 1));
  PSIM_CHECK(psim_hmap_put(&r->index, key, (int32_t)r->n_routes));
  *i = (int32_t)r->n_routes;
  r->routes[r->n_routes++] = e;
  return PSIM_OK;
}

/* The cached route from src to dst, found and added on a miss. Caller
 * holds r->mu. */
static psim_status lookup(const psim_cluster *c, psim_route_cache *r, int32_t src, int32_t dst,
                          entry *out) {
  int32_t i = -1;
  PSIM_CHECK(lookup_index(c, r, src, dst, true, &i));
  assert(i >= 0 && (size_t)i < r->n_routes);
  *out = r->routes[i];
  return PSIM_OK;
}

/* The cluster's route cache, created on first use (double-checked: the
 * pointer is published with release and read with acquire). */
static psim_status ensure_cache(psim_cluster *c, psim_route_cache **out) {
  *out = __atomic_load_n(&c->routes, __ATOMIC_ACQUIRE);
  if (*out)
    return PSIM_OK;
  pthread_mutex_lock(&create_mu);
  psim_status s = PSIM_OK;
  if (!c->routes) {
    psim_route_cache *r = NULL;
    s = psim_route_cache_create(c, &r);
    if (s == PSIM_OK)
      __atomic_store_n(&c->routes, r, __ATOMIC_RELEASE);
  }
  *out = c->routes;
  pthread_mutex_unlock(&create_mu);
  return s;
}

psim_status psim_cluster_route(psim_cluster *c, int32_t src, int32_t dst, const int32_t **links,
                               int32_t *n_links) {
  if (src < 0 || dst < 0 || src >= c->n_devices || dst >= c->n_devices)
    return psim_error(PSIM_EINPUT, "route between devices %d and %d: the cluster has %d devices",
                      (int)src, (int)dst, (int)c->n_devices);
  *links = NULL;
  *n_links = 0;
  if (src == dst)
    return PSIM_OK;
  psim_route_cache *r;
  PSIM_CHECK(ensure_cache(c, &r));
  uint64_t key = (uint64_t)(uint32_t)src << 32 | (uint32_t)dst;
  remembered *m = &thread_routes[(key * 0x9e3779b97f4a7c15ULL) >> 54];
  if (m->cache_id == r->id && m->key == key) {
    *links = m->links;
    *n_links = m->n;
    return PSIM_OK;
  }
  pthread_mutex_lock(&r->mu);
  entry e = {NULL, 0, 0};
  psim_status s = lookup(c, r, src, dst, &e);
  pthread_mutex_unlock(&r->mu);
  if (s == PSIM_OK)
    *m = (remembered){r->id, key, e.links, e.n};
  *links = e.links;
  *n_links = e.n;
  return s;
}

/* lookup's links. Caller holds r->mu. */
static psim_status lookup_links(const psim_cluster *c, psim_route_cache *r, int32_t src,
                                int32_t dst, const int32_t **links, int32_t *n_links) {
  entry e = {NULL, 0, 0};
  PSIM_CHECK(lookup(c, r, src, dst, &e));
  *links = e.links;
  *n_links = e.n;
  return PSIM_OK;
}

psim_status psim_cluster_routes(psim_cluster *c, const int32_t *pairs, int32_t n,
                                const int32_t **links, int32_t *n_links) {
  for (int32_t i = 0; i < n; i++)
    if (pairs[2 * i] < 0 || pairs[2 * i + 1] < 0 || pairs[2 * i] >= c->n_devices ||
        pairs[2 * i + 1] >= c->n_devices)
      return psim_error(PSIM_EINPUT, "route between devices %d and %d: the cluster has %d devices",
                        (int)pairs[2 * i], (int)pairs[2 * i + 1], (int)c->n_devices);
  psim_route_cache *r;
  PSIM_CHECK(ensure_cache(c, &r));
  pthread_mutex_lock(&r->mu);
  psim_status s = PSIM_OK;
  for (int32_t i = 0; i < n && s == PSIM_OK; i++) {
    links[i] = NULL;
    n_links[i] = 0;
    if (pairs[2 * i] != pairs[2 * i + 1])
      s = lookup_links(c, r, pairs[2 * i], pairs[2 * i + 1], &links[i], &n_links[i]);
  }
  pthread_mutex_unlock(&r->mu);
  return s;
}

/* The cache's counts (zero before it exists) and whether it holds a rotation. */
static bool read_counts(psim_cluster *c, int64_t *searched, int64_t *translated,
                        int64_t *rejected) {
  psim_route_cache *r = __atomic_load_n(&c->routes, __ATOMIC_ACQUIRE);
  *searched = *translated = *rejected = 0;
  if (!r)
    return false;
  pthread_mutex_lock(&r->mu);
  *searched = r->n_searched;
  *translated = r->n_translated;
  *rejected = r->n_rejected;
  bool has_rotation = r->shift != NULL;
  pthread_mutex_unlock(&r->mu);
  return has_rotation;
}

void psim_cluster_route_counts(psim_cluster *c, int64_t *searched, int64_t *translated) {
  int64_t rejected;
  read_counts(c, searched, translated, &rejected);
}

void psim_cluster_route_rotation(psim_cluster *c, bool *has_rotation, int64_t *rejected) {
  int64_t searched, translated;
  *has_rotation = read_counts(c, &searched, &translated, rejected);
}

psim_status psim_cluster_route_no_translation(psim_cluster *c) {
  psim_route_cache *r;
  PSIM_CHECK(ensure_cache(c, &r));
  pthread_mutex_lock(&r->mu);
  psim_route_shift_free(r->shift);
  psim_route_blocks_free(r->blocks);
  r->shift = NULL;
  r->blocks = NULL;
  pthread_mutex_unlock(&r->mu);
  return PSIM_OK;
}
