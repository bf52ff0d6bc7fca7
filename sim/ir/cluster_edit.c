/* cluster_edit.c - a cluster changed in memory: the copy without the links between two
 * vertices (a failed cable, sim/faults.c). Everything else is kept exactly: the device
 * types with their runtime overheads, device and link slowdowns, the collective tables.
 * (Rebuilding the cluster from its explicit JSON form lost the runtime overheads, so a
 * cluster with a failed link ran faster than the healthy one: issue #18, defect 4.) */
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/cluster_impl.h"

static psim_status oom(void) {
  return psim_error(PSIM_ENOMEM, "out of memory copying a cluster");
}

static void *dup_array(const void *p, size_t n, size_t size) {
  void *q = psim_malloc(n * size > 0 ? n * size : 1);
  if (q && n > 0)
    memcpy(q, p, n * size);
  return q;
}

static psim_status copy_types(const psim_cluster *c, psim_cluster *out) {
  out->types = psim_calloc((size_t)c->n_types + 1, sizeof *out->types);
  if (!out->types)
    return oom();
  for (int32_t i = 0; i < c->n_types; i++) {
    out->types[i] = c->types[i];
    out->types[i].name = NULL;
    out->n_types = i + 1;
    if (c->types[i].name && !(out->types[i].name = psim_strdup(c->types[i].name)))
      return oom();
  }
  return PSIM_OK;
}

/* Vertex names and kinds, and the devices (whose names alias the vertex names). */
static psim_status copy_vertices(const psim_cluster *c, psim_cluster *out) {
  out->vertex_names = psim_calloc((size_t)c->n_vertices + 1, sizeof *out->vertex_names);
  out->vertex_kinds = dup_array(c->vertex_kinds, (size_t)c->n_vertices, 1);
  out->devices = dup_array(c->devices, (size_t)c->n_devices, sizeof *c->devices);
  if (!out->vertex_names || !out->vertex_kinds || !out->devices)
    return oom();
  out->n_devices = c->n_devices;
  for (int32_t v = 0; v < c->n_vertices; v++) {
    if (!(out->vertex_names[v] = psim_strdup(c->vertex_names[v])))
      return oom();
    out->n_vertices = v + 1;
  }
  for (int32_t d = 0; d < c->n_devices; d++)
    out->devices[d].name = out->vertex_names[d];
  return PSIM_OK;
}

static psim_status copy_tables(const psim_cluster *c, psim_cluster *out) {
  out->coll_tables = psim_calloc((size_t)c->n_coll_tables + 1, sizeof *out->coll_tables);
  if (!out->coll_tables)
    return oom();
  for (int32_t i = 0; i < c->n_coll_tables; i++) {
    psim_coll_table *t = &out->coll_tables[i];
    *t = c->coll_tables[i];
    t->bytes = dup_array(c->coll_tables[i].bytes, (size_t)t->n_points, sizeof *t->bytes);
    t->busbw = dup_array(c->coll_tables[i].busbw, (size_t)t->n_points, sizeof *t->busbw);
    out->n_coll_tables = i + 1;
    if (!t->bytes || !t->busbw)
      return oom();
  }
  return PSIM_OK;
}

/* The links except those between a and b (either direction); *removed counts them. */
static psim_status copy_links(const psim_cluster *c, int32_t a, int32_t b, psim_cluster *out,
                              int32_t *removed) {
  out->links = psim_malloc(sizeof *out->links * ((size_t)c->n_links + 1));
  if (!out->links)
    return oom();
  *removed = 0;
  for (int32_t i = 0; i < c->n_links; i++) {
    const psim_link *l = &c->links[i];
    if ((l->src == a && l->dst == b) || (l->src == b && l->dst == a))
      (*removed)++;
    else
      out->links[out->n_links++] = *l;
  }
  return PSIM_OK;
}

static psim_status copy_without(const psim_cluster *c, int32_t a, int32_t b, psim_cluster *out,
                                int32_t *removed, bool *connected) {
  out->name = psim_strdup(c->name ? c->name : "");
  out->file = c->file ? psim_strdup(c->file) : NULL;
  if (!out->name || (c->file && !out->file))
    return oom();
  PSIM_CHECK(copy_types(c, out));
  PSIM_CHECK(copy_vertices(c, out));
  PSIM_CHECK(copy_tables(c, out));
  PSIM_CHECK(copy_links(c, a, b, out, removed));
  out->n_nodes = c->n_nodes;
  out->devices_per_node = c->devices_per_node;
  out->n_racks = c->n_racks;
  out->stack = c->stack;
  bool unique;
  int32_t x, y;
  PSIM_CHECK(psim_cluster_index_names(out, &unique, &x, &y));
  return psim_cluster_check_connected(out, connected, &x, &y);
}

psim_status psim_cluster_without_links(const psim_cluster *c, int32_t a, int32_t b,
                                       psim_cluster *out, int32_t *removed, bool *connected) {
  psim_cluster_init(out);
  *removed = 0;
  *connected = false;
  psim_status st = copy_without(c, a, b, out, removed, connected);
  if (st != PSIM_OK)
    psim_cluster_destroy(out);
  return st;
}
