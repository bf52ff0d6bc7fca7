/* cluster.h - cluster topology (plansim.cluster/1): device types, devices,
 * switches and directed links, loaded into an igraph graph.
 *
 * Vertices 0..n_devices-1 are the compute devices, the switches (and host
 * CPUs / PCIe switches / NICs when modelled) follow. Every directed link is a
 * resource of the simulator: a full-duplex cable is two psim_links. Routes are
 * shortest paths (fewest hops, then lowest latency) computed with igraph on
 * first use and cached, so route lookups are O(1) after the first. */
#ifndef PSIM_CLUSTER_H
#define PSIM_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"
#include "status.h"

typedef enum psim_link_kind {
  PSIM_LINK_NVLINK = 0, /* NVLink / NVSwitch port */
  PSIM_LINK_PCIE,
  PSIM_LINK_NIC,        /* host NIC to its first switch (InfiniBand / Ethernet) */
  PSIM_LINK_FABRIC,     /* switch to switch between nodes */
  PSIM_LINK_MEMORY,     /* CPU memory bus (cpu clusters) */
  PSIM_LINK_OTHER,
  PSIM_LINK_KIND_COUNT
} psim_link_kind;

/* GEMM efficiency as a function of the FLOPs of one kernel call:
 *   eff(f) = eff_max * f / (f + half_flops)
 * saturating towards eff_max for large kernels (fitted to measurements,
 * docs/accuracy.md). Memory-bound kernels reach mem_eff of mem_bw. */
typedef struct psim_efficiency {
  double gemm_max;        /* fraction of peak, (0, 1] */
  double gemm_half_flops; /* FLOPs at which a GEMM reaches half of gemm_max */
  double mem;             /* fraction of memory bandwidth, (0, 1] */
} psim_efficiency;

typedef struct psim_device_type {
  char *name;
  double peak_flops[PSIM_DTYPE_COUNT]; /* FLOP/s per dtype; 0 = unsupported */
  double mem_bytes;                    /* device memory, bytes */
  double mem_bw;                       /* device memory bandwidth, bytes/s */
  double launch_s;                     /* kernel launch overhead, s */
  psim_efficiency eff;
} psim_device_type;

typedef struct psim_device {
  char *name;
  int32_t type;       /* index into types */
  int32_t node;       /* server index (0-based) */
  int32_t local_rank; /* index within its node */
  int32_t rack;       /* rack / pod index; 0 when flat */
  double slowdown;    /* compute slowdown factor, 1 = nominal (stragglers) */
} psim_device;

typedef struct psim_link {
  int32_t src, dst;  /* vertex indices */
  psim_link_kind kind;
  double bw;         /* bytes/s in this direction */
  double latency_s;  /* s per message */
  double slowdown;   /* bandwidth divisor, 1 = nominal */
} psim_link;

/* A measured collective bus-bandwidth table (nccl-tests convention). */
typedef enum psim_coll_kind {
  PSIM_COLL_ALL_REDUCE = 0,
  PSIM_COLL_ALL_GATHER,
  PSIM_COLL_REDUCE_SCATTER,
  PSIM_COLL_ALL_TO_ALL,
  PSIM_COLL_BROADCAST,
  PSIM_COLL_REDUCE,
  PSIM_COLL_GATHER,
  PSIM_COLL_SCATTER,
  PSIM_COLL_KIND_COUNT
} psim_coll_kind;

typedef struct psim_coll_table {
  psim_coll_kind kind;
  int32_t group_size;
  bool intra_node; /* applies to groups inside one node (else across nodes) */
  int32_t n_points;
  double *bytes;   /* message size, bytes, increasing */
  double *busbw;   /* bus bandwidth, bytes/s */
} psim_coll_table;

typedef struct psim_route_cache psim_route_cache; /* private */

typedef struct psim_cluster {
  char *name;
  char *file;
  psim_device_type *types;
  int32_t n_types;
  psim_device *devices;
  int32_t n_devices;
  char **vertex_names; /* n_vertices names: devices first, then switches etc. */
  int32_t n_vertices;
  psim_link *links;
  int32_t n_links;
  int32_t n_nodes;
  int32_t devices_per_node; /* when uniform, else 0 */
  psim_coll_table *coll_tables;
  int32_t n_coll_tables;
  void *graph; /* igraph_t *, private to cluster.c / route.c */
  psim_route_cache *routes;
} psim_cluster;

void psim_cluster_init(psim_cluster *c);
void psim_cluster_destroy(psim_cluster *c);
psim_status psim_cluster_load(const char *file, psim_cluster *c);
struct cJSON;
psim_status psim_cluster_from_json(const char *file, const struct cJSON *root, psim_cluster *c);
psim_status psim_cluster_to_json(const psim_cluster *c, struct cJSON **out);

/* Directed links from device src to device dst along the shortest route.
 * *links points into the cache (valid until the cluster is destroyed).
 * src == dst gives an empty route. Amortised O(1); first call per pair runs
 * a shortest-path search. Thread-safe. */
psim_status psim_cluster_route(psim_cluster *c, int32_t src, int32_t dst, const int32_t **links,
                               int32_t *n_links);
/* Bottleneck bandwidth (bytes/s) and summed latency (s) of a route. */
void psim_cluster_route_cost(const psim_cluster *c, const int32_t *links, int32_t n_links,
                             double *bw, double *latency_s);

int32_t psim_cluster_find_device(const psim_cluster *c, const char *name);
int32_t psim_cluster_find_type(const psim_cluster *c, const char *name);
/* Peak FLOP/s of a device for a dtype, falling back to fp32 when unsupported. */
double psim_device_peak_flops(const psim_cluster *c, int32_t device, psim_dtype dt);

const char *psim_link_kind_name(psim_link_kind k);
const char *psim_coll_kind_name(psim_coll_kind k);
psim_status psim_coll_kind_parse(const char *s, psim_coll_kind *out);

#endif
