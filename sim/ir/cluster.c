/* cluster.c - the psim_cluster object: construction helpers, lookups, the
 * connectivity check, the igraph graph (built on request) and writing the explicit form. */
#include <assert.h>
#include <igraph/igraph.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/hashmap.h"
#include "sim/ir/cluster_impl.h"

void psim_cluster_init(psim_cluster *c) {
  memset(c, 0, sizeof *c);
}

static void free_graph(psim_cluster *c) {
  if (c->graph) {
    igraph_destroy((igraph_t *)c->graph);
    psim_free(c->graph);
    c->graph = NULL;
  }
}

void psim_cluster_drop_coll_tables(psim_cluster *c) {
  for (int32_t i = 0; i < c->n_coll_tables; i++) {
    psim_free(c->coll_tables[i].bytes);
    psim_free(c->coll_tables[i].busbw);
  }
  psim_free(c->coll_tables);
  c->coll_tables = NULL;
  c->n_coll_tables = 0;
}

void psim_cluster_destroy(psim_cluster *c) {
  psim_route_cache_free(c->routes);
  free_graph(c);
  for (int32_t i = 0; i < c->n_types; i++)
    psim_device_type_destroy(&c->types[i]);
  for (int32_t i = 0; i < c->n_vertices; i++)
    psim_free(c->vertex_names[i]);
  psim_cluster_drop_coll_tables(c);
  psim_free(c->vertex_names);
  psim_free(c->vertex_kinds);
  psim_free(c->name_slots_);
  psim_free(c->types);
  psim_free(c->devices); /* device names alias vertex_names */
  psim_free(c->links);
  psim_free(c->name);
  psim_free(c->file);
  psim_cluster_init(c);
}

/* ---- construction ------------------------------------------------------ */

void psim_cb_init(psim_cbuild *b, psim_cluster *c) {
  memset(b, 0, sizeof *b);
  b->c = c;
}

static psim_status oom(void) {
  return psim_error(PSIM_ENOMEM, "out of memory building a cluster");
}

psim_status psim_cb_vertex(psim_cbuild *b, const char *name, psim_vertex_kind kind, int32_t *out) {
  psim_cluster *c = b->c;
  *out = -1; /* set on every path: callers read it after PSIM_CHECK */
  size_t need = (size_t)c->n_vertices + 1;
  if (PSIM_VEC_RESERVE(c->vertex_names, b->vcap, need) != PSIM_OK ||
      PSIM_VEC_RESERVE(c->vertex_kinds, b->kcap, need) != PSIM_OK)
    return oom();
  char *copy = psim_strdup(name);
  if (!copy)
    return oom();
  c->vertex_names[c->n_vertices] = copy;
  c->vertex_kinds[c->n_vertices] = (unsigned char)kind;
  *out = c->n_vertices++;
  return PSIM_OK;
}

psim_status psim_cb_device(psim_cbuild *b, const char *name, int32_t type, int32_t node,
                           int32_t local_rank, int32_t rack) {
  psim_cluster *c = b->c;
  if (c->n_vertices != c->n_devices)
    return psim_error(PSIM_EFAILED, "internal: devices must precede other vertices");
  if (PSIM_VEC_RESERVE(c->devices, b->dcap, (size_t)c->n_devices + 1) != PSIM_OK)
    return oom();
  int32_t v;
  PSIM_CHECK(psim_cb_vertex(b, name, PSIM_VERTEX_DEVICE, &v));
  c->devices[c->n_devices++] = (psim_device){c->vertex_names[v], type, node, local_rank, rack, 1.0};
  return PSIM_OK;
}

psim_status psim_cb_link(psim_cbuild *b, int32_t a, int32_t bv, psim_link_kind kind, double bw,
                         double latency_s, bool duplex) {
  psim_cluster *c = b->c;
  assert(a >= 0 && a < c->n_vertices && bv >= 0 && bv < c->n_vertices); /* ends resolved */
  if (PSIM_VEC_RESERVE(c->links, b->lcap, (size_t)c->n_links + 2) != PSIM_OK)
    return oom();
  c->links[c->n_links++] = (psim_link){a, bv, kind, bw, latency_s, 1.0};
  if (duplex)
    c->links[c->n_links++] = (psim_link){bv, a, kind, bw, latency_s, 1.0};
  return PSIM_OK;
}

psim_status psim_cb_type(psim_cbuild *b, psim_device_type *t, int32_t *out) {
  psim_cluster *c = b->c;
  if (PSIM_VEC_RESERVE(c->types, b->tcap, (size_t)c->n_types + 1) != PSIM_OK) {
    psim_device_type_destroy(t);
    return oom();
  }
  c->types[c->n_types] = *t;
  t->name = NULL;
  *out = c->n_types++;
  return PSIM_OK;
}

/* ---- names ---------------------------------------------------------------- */

static uint32_t name_hash(const char *name) {
  return (uint32_t)psim_hmap_hash_bytes(name, strlen(name), 0);
}

/* The slot holding name, or the empty slot where it would go. */
static uint32_t name_slot(const psim_cluster *c, const char *name) {
  uint32_t i = name_hash(name) & c->name_mask_;
  while (c->name_slots_[i] >= 0 && strcmp(c->vertex_names[c->name_slots_[i]], name) != 0)
    i = (i + 1) & c->name_mask_;
  return i;
}

/* Open addressing over int32 slots (4 bytes per slot, at most half full) instead of a sorted
 * index: O(V) expected where sorting the names was O(V log V) string comparisons (3.8% of a
 * 131,072-GPU simulation, issue 19), in 2 MiB there. */
psim_status psim_cluster_index_names(psim_cluster *c, bool *unique, int32_t *dup_a,
                                     int32_t *dup_b) {
  size_t cap = 16;
  while (cap < 2 * (size_t)c->n_vertices)
    cap *= 2;
  psim_free(c->name_slots_);
  c->name_mask_ = 0;
  c->name_slots_ = psim_malloc(cap * sizeof *c->name_slots_);
  if (!c->name_slots_)
    return oom();
  memset(c->name_slots_, 0xff, cap * sizeof *c->name_slots_);
  c->name_mask_ = (uint32_t)(cap - 1);
  *unique = true;
  for (int32_t v = 0; v < c->n_vertices; v++) {
    uint32_t i = name_slot(c, c->vertex_names[v]);
    if (c->name_slots_[i] >= 0) {
      *unique = false; /* the first vertex whose name an earlier one has */
      *dup_a = c->name_slots_[i];
      *dup_b = v;
      return PSIM_OK;
    }
    c->name_slots_[i] = v;
  }
  return PSIM_OK;
}

int32_t psim_cluster_find_vertex(const psim_cluster *c, const char *name) {
  return c->name_slots_ ? c->name_slots_[name_slot(c, name)] : -1;
}

int32_t psim_cluster_find_device(const psim_cluster *c, const char *name) {
  int32_t v = psim_cluster_find_vertex(c, name);
  return v >= 0 && v < c->n_devices ? v : -1;
}

int32_t psim_cluster_find_type(const psim_cluster *c, const char *name) {
  for (int32_t i = 0; i < c->n_types; i++)
    if (strcmp(c->types[i].name, name) == 0)
      return i;
  return -1;
}

double psim_device_peak_flops(const psim_cluster *c, int32_t device, psim_dtype dt) {
  const psim_device_type *t = &c->types[c->devices[device].type];
  double f = t->peak_flops[dt];
  return f > 0 ? f : t->peak_flops[PSIM_DTYPE_FP32];
}

bool psim_device_has_fp8(const psim_cluster *c, int32_t device) {
  const psim_device_type *t = &c->types[c->devices[device].type];
  return t->peak_flops[PSIM_DTYPE_FP8] > t->peak_flops[PSIM_DTYPE_BF16];
}

void psim_cluster_count_nodes(psim_cluster *c) {
  int32_t max_node = -1, max_rack = -1;
  for (int32_t i = 0; i < c->n_devices; i++) {
    max_node = c->devices[i].node > max_node ? c->devices[i].node : max_node;
    max_rack = c->devices[i].rack > max_rack ? c->devices[i].rack : max_rack;
  }
  c->n_nodes = max_node + 1;
  c->n_racks = max_rack + 1 > 0 ? max_rack + 1 : 1;
  c->devices_per_node = 0;
  if (c->n_nodes > 0 && c->n_devices % c->n_nodes == 0) {
    int32_t d = c->n_devices / c->n_nodes;
    bool uniform = true;
    for (int32_t i = 0; i < c->n_devices && uniform; i++)
      uniform = c->devices[i].node == i / d;
    c->devices_per_node = uniform ? d : 0;
  }
}

/* ---- igraph --------------------------------------------------------------- */

static psim_status igraph_failed(const char *what) {
  return psim_error(PSIM_ENOMEM, "igraph failed while %s (out of memory?)", what);
}

static psim_status make_graph(psim_cluster *c) {
  igraph_set_error_handler(igraph_error_handler_ignore);
  igraph_vector_int_t edges;
  if (igraph_vector_int_init(&edges, 2 * (igraph_integer_t)c->n_links) != IGRAPH_SUCCESS)
    return igraph_failed("building the topology graph");
  for (int32_t i = 0; i < c->n_links; i++) {
    VECTOR(edges)[2 * i] = c->links[i].src;
    VECTOR(edges)[2 * i + 1] = c->links[i].dst;
  }
  igraph_t *g = psim_malloc(sizeof *g);
  psim_status s = g ? PSIM_OK : oom();
  if (s == PSIM_OK && igraph_create(g, &edges, c->n_vertices, IGRAPH_DIRECTED) != IGRAPH_SUCCESS) {
    psim_free(g);
    s = igraph_failed("building the topology graph");
  }
  igraph_vector_int_destroy(&edges);
  if (s == PSIM_OK)
    c->graph = g;
  return s;
}

psim_status psim_cluster_igraph(psim_cluster *c, const void **graph) {
  if (!c->graph)
    PSIM_CHECK(make_graph(c));
  *graph = c->graph;
  return PSIM_OK;
}

/* ---- connectivity ------------------------------------------------------------ */

/* Sets bit `bit` of seen[v] for every vertex v that vertex 0 reaches over the links (forward)
 * or that reaches vertex 0 (backward): a breadth-first search over the links' adjacency,
 * start/adj built by a counting sort of the links by tail. O(vertices + links). */
static void mark_reached(const psim_cluster *c, bool forward, uint8_t bit, int32_t *start,
                         int32_t *adj, int32_t *queue, uint8_t *seen) {
  int32_t nv = c->n_vertices;
  memset(start, 0, sizeof(int32_t) * ((size_t)nv + 1));
  for (int32_t i = 0; i < c->n_links; i++)
    start[(forward ? c->links[i].src : c->links[i].dst) + 1]++;
  for (int32_t v = 0; v < nv; v++)
    start[v + 1] += start[v];
  for (int32_t i = 0; i < c->n_links; i++) {
    const psim_link *l = &c->links[i];
    int32_t tail = forward ? l->src : l->dst;
    adj[start[tail]++] = forward ? l->dst : l->src;
  }
  for (int32_t v = nv; v > 0; v--) /* the fill advanced start[v] to start[v + 1] */
    start[v] = start[v - 1];
  start[0] = 0;
  int32_t head = 0, n = 0;
  queue[n++] = 0;
  seen[0] |= bit;
  while (head < n) {
    int32_t u = queue[head++];
    for (int32_t k = start[u]; k < start[u + 1]; k++)
      if (!(seen[adj[k]] & bit)) {
        seen[adj[k]] |= bit;
        queue[n++] = adj[k];
      }
  }
}

/* Strongly connected devices (one-way links: every device must reach every other in both
 * directions) if and only if every device reaches device 0 and device 0 reaches it (paths
 * compose through device 0). The first device that fails is reported with device 0: the
 * pair igraph_connected_components(IGRAPH_STRONG) gave before (the first device whose
 * component is not device 0's); test_cluster's connectivity_matches_igraph compares both. */
psim_status psim_cluster_check_connected(const psim_cluster *c, bool *ok, int32_t *dev_a,
                                         int32_t *dev_b) {
  *ok = true;
  if (c->n_devices < 2)
    return PSIM_OK;
  size_t nv = (size_t)c->n_vertices;
  int32_t *start = psim_malloc(sizeof(int32_t) * (nv + 1));
  int32_t *adj = psim_malloc(sizeof(int32_t) * ((size_t)c->n_links + 1));
  int32_t *queue = psim_malloc(sizeof(int32_t) * nv);
  uint8_t *seen = psim_calloc(nv, 1);
  psim_status s = start && adj && queue && seen ? PSIM_OK : oom();
  if (s == PSIM_OK) {
    mark_reached(c, true, 1, start, adj, queue, seen);
    mark_reached(c, false, 2, start, adj, queue, seen);
    for (int32_t i = 1; i < c->n_devices && *ok; i++)
      if (seen[i] != 3) {
        *ok = false;
        *dev_a = 0;
        *dev_b = i;
      }
  }
  psim_free(start);
  psim_free(adj);
  psim_free(queue);
  psim_free(seen);
  return s;
}

/* ---- names of enums -------------------------------------------------------- */

static const char *const link_kind_names[PSIM_LINK_KIND_COUNT] = {"nvlink", "pcie",   "nic",
                                                                  "fabric", "memory", "other"};
static const char *const coll_kind_names[PSIM_COLL_KIND_COUNT] = {
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
    "broadcast",  "reduce",     "gather",         "scatter"};

const char *psim_link_kind_name(psim_link_kind k) {
  return k >= 0 && k < PSIM_LINK_KIND_COUNT ? link_kind_names[k] : "?";
}

/* Index of s in names[0..n), -1 when absent. */
static int name_index(const char *const *names, int n, const char *s) {
  for (int i = 0; i < n; i++)
    if (strcmp(s, names[i]) == 0)
      return i;
  return -1;
}

psim_status psim_link_kind_parse(const char *s, psim_link_kind *out) {
  int i = name_index(link_kind_names, PSIM_LINK_KIND_COUNT, s);
  if (i >= 0) {
    *out = (psim_link_kind)i;
    return PSIM_OK;
  }
  return psim_error(PSIM_EINPUT,
                    "unknown link kind '%.80s'; expected nvlink, pcie, nic, fabric, "
                    "memory or other",
                    s);
}

const char *psim_coll_kind_name(psim_coll_kind k) {
  return k >= 0 && k < PSIM_COLL_KIND_COUNT ? coll_kind_names[k] : "?";
}

psim_status psim_coll_kind_parse(const char *s, psim_coll_kind *out) {
  int i = name_index(coll_kind_names, PSIM_COLL_KIND_COUNT, s);
  if (i >= 0) {
    *out = (psim_coll_kind)i;
    return PSIM_OK;
  }
  return psim_error(PSIM_EINPUT,
                    "unknown collective '%.80s'; expected all_reduce, all_gather, "
                    "reduce_scatter, all_to_all, broadcast, reduce, gather or scatter",
                    s);
}

void psim_cluster_route_cost(const psim_cluster *c, const int32_t *links, int32_t n_links,
                             double *bw, double *latency_s) {
  *bw = INFINITY;
  *latency_s = 0;
  for (int32_t i = 0; i < n_links; i++) {
    const psim_link *l = &c->links[links[i]];
    *bw = fmin(*bw, l->bw / l->slowdown);
    *latency_s += l->latency_s;
  }
}
