/* cluster.h - cluster topology (plansim.cluster/1): device types, devices,
 * switches and directed links, checked strongly connected on load.
 *
 * Vertices 0..n_devices-1 are the compute devices, the switches (and host
 * CPUs / PCIe switches / NICs when modelled) follow. Every directed link is a
 * resource of the simulator: a full-duplex cable is two psim_links. Routes are
 * shortest paths (fewest hops, then lowest latency) computed by route.c on
 * first use and cached, so route lookups are O(1) after the first. */
#ifndef PSIM_CLUSTER_H
#define PSIM_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/core/status.h"
#include "sim/ir/model.h"
#include "sim/ir/stack.h"

typedef enum psim_link_kind {
  PSIM_LINK_NVLINK = 0, /* NVLink / NVSwitch port */
  PSIM_LINK_PCIE,
  PSIM_LINK_NIC,    /* host NIC to its first switch (InfiniBand / Ethernet) */
  PSIM_LINK_FABRIC, /* switch to switch between nodes */
  PSIM_LINK_MEMORY, /* CPU memory bus (cpu clusters) */
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

/* Overheads of the training software stack (PyTorch + NCCL, as Megatron-LM
 * runs it) on a device, fitted to measured iteration times (docs/accuracy.md).
 * Zero for runtimes without them (the cpu device type). */
typedef struct psim_runtime {
  double host_issue_s; /* host time to issue one kernel; the host runs ahead of the
                          device except where the schedule synchronises */
  double coll_sync_s;  /* extra latency of a collective per peer (rank skew), s */
  double iteration_s;  /* fixed overhead per iteration (data loader, logging), s */
} psim_runtime;

typedef struct psim_device_type {
  char *name;
  double peak_flops[PSIM_DTYPE_COUNT]; /* FLOP/s per dtype; 0 = unsupported */
  double mem_bytes;                    /* device memory, bytes */
  double mem_bw;                       /* device memory bandwidth, bytes/s */
  double launch_s;                     /* kernel launch overhead, s */
  psim_efficiency eff;
  double peak_tf32; /* FLOP/s of fp32 matmuls on tensor cores (TF32); 0 = none */
  psim_runtime rt;
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
  int32_t src, dst; /* vertex indices */
  psim_link_kind kind;
  double bw;        /* bytes/s in this direction */
  double latency_s; /* s per message */
  double slowdown;  /* bandwidth divisor, 1 = nominal */
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
  double *bytes; /* message size, bytes, increasing */
  double *busbw; /* bus bandwidth, bytes/s */
} psim_coll_table;

typedef struct psim_route_cache psim_route_cache; /* private */

/* What a vertex of the topology graph is. Routes treat NIC vertices as
 * transit between a host side and the network only (a route never enters a
 * NIC from a host-side link and leaves through another host-side link). */
typedef enum psim_vertex_kind {
  PSIM_VERTEX_DEVICE = 0,
  PSIM_VERTEX_SWITCH, /* NVSwitch, PCIe switch, host bridge, network switch, memory bus */
  PSIM_VERTEX_NIC
} psim_vertex_kind;

/* Most devices a cluster may hold (hierarchical nodes * devices_per_node). The fuzz build
 * lowers it (tests/fuzz/meson.build): a 10^6-device graph takes seconds per input there. */
#ifndef PSIM_CLUSTER_MAX_DEVICES
#define PSIM_CLUSTER_MAX_DEVICES 1048576
#endif

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
  void *graph; /* igraph_t *, built by psim_cluster_igraph on first call; private to cluster.c */
  psim_route_cache *routes;
  /* Added by the cluster module: */
  unsigned char *vertex_kinds; /* n_vertices psim_vertex_kind values */
  int32_t *name_slots_;        /* open-addressed vertex indices by name hash, -1 empty (private) */
  uint32_t name_mask_;         /* slots - 1 (a power of two at least twice the vertices) */
  int32_t n_racks;             /* racks / leaf switches (1 when flat) */
  psim_stack stack;            /* issue 20: the software stack (zero: megatron-lm-2021) */
} psim_cluster;

void psim_cluster_init(psim_cluster *c);
void psim_cluster_destroy(psim_cluster *c);
/* Frees the measured collective tables, so collectives are costed by the
 * formulas of collective.c (tests compare against the closed forms). */
void psim_cluster_drop_coll_tables(psim_cluster *c);
/* Loading (docs/cluster.md): c must have been initialised; what it held is
 * destroyed first, and on failure it is left empty. Errors name the file and
 * the JSON path. O(V + E) plus an O(V log V) name index. */
psim_status psim_cluster_load(const char *file, psim_cluster *c);
struct cJSON;
psim_status psim_cluster_from_json(const char *file, const struct cJSON *root, psim_cluster *c);
/* Writes the explicit form (every vertex and link; duplex pairs merged). */
psim_status psim_cluster_to_json(const psim_cluster *c, struct cJSON **out);
/* A copy of c without the links between vertices a and b (both directions): everything
 * else (device types with their runtime overheads, slowdowns, collective tables) exactly
 * as in c. *removed counts the directed links dropped; *connected is false when some
 * device no longer reaches every other (out is still a valid cluster). O(V log V + E). */
psim_status psim_cluster_without_links(const psim_cluster *c, int32_t a, int32_t b,
                                       psim_cluster *out, int32_t *removed, bool *connected);
/* Adds a device type's fields (SI numbers) to the JSON object o. */
psim_status psim_device_type_to_json(const psim_device_type *t, struct cJSON *o);

/* The links as an igraph_t (one directed edge per link, edge id = link index), built on the
 * first call and kept until the cluster is destroyed (tests' oracle: igraph_distances). */
psim_status psim_cluster_igraph(psim_cluster *c, const void **graph);

/* Directed links from device src to device dst along the shortest route.
 * *links points into the cache (valid until the cluster is destroyed).
 * src == dst gives an empty route. Amortised O(1); first call per pair runs
 * a shortest-path search. Thread-safe. */
psim_status psim_cluster_route(psim_cluster *c, int32_t src, int32_t dst, const int32_t **links,
                               int32_t *n_links);
/* psim_cluster_route of n pairs (pairs[2i] -> pairs[2i + 1]) under one lock and without the
 * per-thread memory (a concurrent group's phase asks for thousands of distinct pairs at once,
 * which the memory's 1,024 slots would only churn): the same links. */
psim_status psim_cluster_routes(psim_cluster *c, const int32_t *pairs, int32_t n,
                                const int32_t **links, int32_t *n_links);
/* The route cache's counts (tests, benchmarks): routes found by a search, and routes
 * translated from their representative pair's by the rotation of the nodes' devices
 * (sim/ir/route_shift.h). */
void psim_cluster_route_counts(psim_cluster *c, int64_t *searched, int64_t *translated);
/* Whether the route cache found a rotation of the nodes' devices (an automorphism), and
 * how many pairs were searched although it did because their representative's route is not
 * the only shortest path (tests: a rejected rotation from none found). */
void psim_cluster_route_rotation(psim_cluster *c, bool *has_rotation, int64_t *rejected);
/* Routes found from now on are all searched, none translated (tests: the per-pair path). */
psim_status psim_cluster_route_no_translation(psim_cluster *c);
/* Bottleneck bandwidth (bytes/s, each link's bw / slowdown) and summed
 * latency (s) of a route; an empty route gives INFINITY and 0. O(n_links). */
void psim_cluster_route_cost(const psim_cluster *c, const int32_t *links, int32_t n_links,
                             double *bw, double *latency_s);

int32_t psim_cluster_find_device(const psim_cluster *c, const char *name);
int32_t psim_cluster_find_type(const psim_cluster *c, const char *name);
/* Peak FLOP/s of a device for a dtype, falling back to fp32 when unsupported. */
double psim_device_peak_flops(const psim_cluster *c, int32_t device, psim_dtype dt);
/* Whether the device's type has FP8 tensor cores: an FP8 rate of its own above its BF16 rate
 * (H100 and later; A100 has none, psim_device_peak_flops then falls back to FP32). */
bool psim_device_has_fp8(const psim_cluster *c, int32_t device);

/* Vertex index of a device or switch by name, -1 when absent. O(log V). */
int32_t psim_cluster_find_vertex(const psim_cluster *c, const char *name);

/* Built-in device types (sim/ir/device_types.c; every figure names its source):
 * a100-80g a100-40g h100 h200 v100 p100 k80 cpu. "cpu" is one core of this
 * machine. Fills *out (out->name allocated; psim_device_type_destroy frees
 * it). PSIM_EINPUT when name is not built in. */
psim_status psim_device_type_builtin(const char *name, psim_device_type *out);
/* NULL-terminated list of the built-in type names. */
const char *const *psim_device_type_builtin_names(void);
void psim_device_type_destroy(psim_device_type *t);
/* This machine's CPU figures used by the "cpu" type and preset: online cores,
 * per-core peak fp32 FLOP/s, node memory bandwidth (bytes/s), node RAM (bytes). */
typedef struct psim_cpu_info {
  int32_t cores;
  double core_fp32_flops;
  double node_mem_bw;
  double node_mem_bytes;
  double clock_hz;
  int32_t simd_fp32_lanes; /* per FMA unit: 16 AVX-512, 8 AVX2, 4 SSE */
} psim_cpu_info;
void psim_cpu_info_detect(psim_cpu_info *out);

const char *psim_link_kind_name(psim_link_kind k);
psim_status psim_link_kind_parse(const char *s, psim_link_kind *out);
const char *psim_coll_kind_name(psim_coll_kind k);
psim_status psim_coll_kind_parse(const char *s, psim_coll_kind *out);

#endif
