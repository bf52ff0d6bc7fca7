/* cluster_impl.h - private to the cluster module (cluster.c, cluster_load.c,
 * cluster_types.c, cluster_hier.c, route.c): building a psim_cluster vertex
 * by vertex.
 *
 * Dependencies go one way: cluster_load.c -> cluster_hier.c ->
 * cluster_types.c -> cluster.c, device_types.c; cluster.c -> route.c. */
#ifndef PSIM_CLUSTER_IMPL_H
#define PSIM_CLUSTER_IMPL_H

#include <stddef.h>

#include "sim/core/json.h"
#include "sim/ir/cluster.h"

/* Growable arrays of the cluster under construction. */
typedef struct psim_cbuild {
  psim_cluster *c;
  size_t vcap, kcap, lcap, dcap, tcap;
} psim_cbuild;

void psim_cb_init(psim_cbuild *b, psim_cluster *c);
/* Adds a vertex named name (copied); *out gets its index. */
psim_status psim_cb_vertex(psim_cbuild *b, const char *name, psim_vertex_kind kind, int32_t *out);
/* Adds a device (and its vertex). Devices must all be added before any other
 * vertex, so that vertex i is device i. */
psim_status psim_cb_device(psim_cbuild *b, const char *name, int32_t type, int32_t node,
                           int32_t local_rank, int32_t rack);
/* Adds the directed link a->b, and b->a right after it when duplex. */
psim_status psim_cb_link(psim_cbuild *b, int32_t a, int32_t bv, psim_link_kind kind, double bw,
                         double latency_s, bool duplex);
/* Appends a device type (takes ownership of t->name); *out gets its index. */
psim_status psim_cb_type(psim_cbuild *b, psim_device_type *t, int32_t *out);

/* Indexes the vertex names for psim_cluster_find_vertex (c->name_slots_). On a
 * duplicate name *unique is false with the first vertex (by index) that repeats
 * an earlier one's name in *dup_b and that earlier one in *dup_a (< *dup_b). */
psim_status psim_cluster_index_names(psim_cluster *c, bool *unique, int32_t *dup_a, int32_t *dup_b);
/* Finds two devices that cannot reach each other (*ok false) if any (cluster.c). */
psim_status psim_cluster_check_connected(const psim_cluster *c, bool *ok, int32_t *dev_a,
                                         int32_t *dev_b);
/* Fills n_nodes, devices_per_node and n_racks from the devices. */
void psim_cluster_count_nodes(psim_cluster *c);

/* Fails with PSIM_EINPUT at the current path's `key` (printf-style message); the path is
 * restored. */
psim_status psim_cluster_key_err(psim_jctx *j, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The device types (cluster_types.c), which both forms name. */
/* Reads "device_types" of root into b (none when absent). */
psim_status psim_cluster_load_types(psim_jctx *j, const cJSON *root, psim_cbuild *b);
/* Finds a device type by name among the loaded ones, or adds the built-in
 * one of that name. The error names the current JSON path. */
psim_status psim_cluster_resolve_type(psim_jctx *j, psim_cbuild *b, const char *name, int32_t *out);
/* A quantity of the given unit that must be > 0 (bandwidths, memory sizes);
 * *out keeps its value when the key is absent and not required. */
psim_status psim_cluster_positive(psim_jctx *j, const cJSON *o, const char *key, bool required,
                                  psim_unit_kind kind, double *out);

/* The hierarchical form (cluster_hier.c). The device types are loaded. */
psim_status psim_cluster_load_hier(psim_jctx *j, const cJSON *root, psim_cbuild *b);

/* The route cache (route.c). */
void psim_route_cache_free(psim_route_cache *r);

#endif
