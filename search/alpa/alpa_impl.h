/* alpa_impl.h - internals of the Alpa optimizer shared by alpa.c,
 * shardings.c and cluster_layers.c (not installed; tests include it). */
#ifndef PSIM_ALPA_IMPL_H
#define PSIM_ALPA_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "search/alpa/ilp.h"
#include "sim/ir/cluster.h"
#include "sim/ir/model.h"

struct psim_costdb;

/* Collective kinds costed per mesh axis. */
#define PSIM_SH_MAX_AXIS 4096 /* devices along one logical mesh axis */
enum { PSIM_SH_AR = 0, PSIM_SH_AG, PSIM_SH_A2A, PSIM_SH_NCOLL };

/* A logical mesh a0 x a1 (a0 slowest) over a submesh's devices, with an
 * alpha-beta fit per axis and collective kind measured on the real topology
 * (psim_coll_time at two message sizes, every concurrent group sharing links). */
typedef struct psim_sh_mesh {
  int32_t shape[2];
  int32_t devices[2][PSIM_SH_MAX_AXIS];                   /* the first group along each axis */
  double alpha[2][PSIM_SH_NCOLL], beta[2][PSIM_SH_NCOLL]; /* s, s/byte */
} psim_sh_mesh;

/* Fits the mesh over devices first..first+a0*a1-1 of the cluster. */
psim_status psim_sh_mesh_init(psim_cluster *c, int32_t first, int32_t a0, int32_t a1,
                              psim_sh_mesh *mesh);
/* Time of a collective of kind over axis (bytes as psim_coll_desc), s. */
double psim_sh_coll(const psim_sh_mesh *mesh, int axis, int kind, double bytes);

/* A sharding strategy of one op: the op dim (index into op->dims) each mesh
 * axis splits, -1 = replicated along that axis. */
typedef struct psim_sh_strat {
  int8_t dim[2];
  /* Mesh axis whose partial sums (a contracted dim split along it) are
   * reduce-scattered along the sequence instead of all-reduced, so that the
   * trivial ops merged after the op run on sequence shards (Megatron-LM's
   * sequence parallelism, Korthikanti et al. 2022); -1 = none. */
  int8_t rs;
} psim_sh_strat;

/* Costs of one group strategy (per micro-batch unless noted). */
typedef struct psim_sh_cost {
  double fwd, bwd;     /* compute, s */
  double fwd_attn;     /* forward compute of attention-core ops (selective recompute), s */
  double comm;         /* collectives of the strategies and resharding inside the group, s */
  double sync;         /* weight-gradient all-reduce, s per iteration */
  double sync_z1;      /* ZeRO 1: gradient reduce-scatter + weight all-gather, s per iteration */
  double wmem;         /* weights + gradients + optimizer state, bytes per device */
  double wmem_z1;      /* the same under ZeRO 1 (optimizer state sharded), bytes per device */
  double wmem_z2;      /* ZeRO 2: gradients sharded too, bytes per device */
  double wmem_z3;      /* ZeRO 3: weights sharded too (without the gathered window), bytes */
  double sync_z3;      /* ZeRO 3: gradient reduce-scatter (no weight all-gather), s per iteration */
  double gather_z3;    /* ZeRO 3: the weights' all-gather before one pass, s per micro-batch */
  double gbytes_z3;    /* ZeRO 3: bytes of the weights one all-gather assembles on a device */
  double act, act_sel; /* activations kept for backward (all; without attention core), bytes */
} psim_sh_cost;

/* Activation bytes (<= 0) an edge's choice pair takes off the consumer's
 * count: a saved input gathered from the producer's smaller shards is kept as
 * that shard and gathered again in backward (as sim/builder/memory.c counts it).
 * n_a * n_b entries each, like psim_ilp_edge.cost. */
typedef struct psim_sh_edge_act {
  double *all, *sel; /* all activations; without the attention core (selective) */
} psim_sh_edge_act;

/* The sharding problem of one layer on one logical mesh for one micro-batch
 * size: groups (roots and the trivial ops merged into them), their
 * strategies and costs, and the resharding edges between groups. */
typedef struct psim_sh_layer {
  const psim_model *m;
  int32_t n_ops;
  int32_t *ops;      /* model op indices of the layer, in order */
  int32_t *group_of; /* per local op */
  int32_t *parent;   /* per local op: local op it is merged into, -1 for roots */
  int32_t n_groups;
  int32_t *root; /* per group: local op index */
  int32_t *n_strats;
  psim_sh_strat **strats; /* per group */
  psim_sh_cost **costs;   /* per group per strategy */
  double **obj;           /* per group per strategy: ILP objective coefficient, s */
  double **mem;           /* per group per strategy: bytes */
  uint8_t **allowed;      /* per group per strategy (--fix) */
  int32_t n_edges;
  psim_ilp_edge *edges;       /* costs owned */
  psim_sh_edge_act *edge_act; /* per edge, beside edges[] */
} psim_sh_layer;

typedef struct psim_sh_params {
  int64_t micro_batch; /* samples per micro-batch (batch-role extent) */
  int32_t n_micro;     /* micro-batches per iteration (amortises the gradient sync) */
  const struct psim_costdb *costdb;
  double mem_weight; /* s per byte added to the objective (memory pressure level) */
} psim_sh_params;

/* Builds the problem of the ops of `layer` (costs on mesh). O(ops x strategies^2). */
psim_status psim_sh_layer_build(const psim_model *m, psim_cluster *c, int32_t layer,
                                const psim_sh_mesh *mesh, const psim_sh_params *p,
                                psim_sh_layer *L);
void psim_sh_layer_destroy(psim_sh_layer *L);
/* The ILP problem view of L (arrays point into L). */
void psim_sh_layer_problem(const psim_sh_layer *L, psim_ilp_problem *p);
/* Strategy of local op i under the group choices: the root's own, or derived
 * from its parent's (the axis keeps the parent's dim when the op has it as an
 * output dim dividing evenly, else the op is replicated along that axis). */
psim_sh_strat psim_sh_op_strat(const psim_sh_layer *L, const psim_sh_mesh *mesh, int64_t mb,
                               const int32_t *choice, int32_t i);
/* Bytes per device of the layer's inputs from other layers (each once, as
 * its first consumer shards it): what full recomputation keeps. */
double psim_sh_input_bytes(const psim_sh_layer *L, const psim_sh_mesh *mesh, int64_t mb,
                           const int32_t *choice);
/* Model dim split by axis a under strategy s of op (or -1). */
int32_t psim_sh_model_dim(const psim_op *op, psim_sh_strat s, int a);

/* Builds and solves the ILP of one layer on a logical mesh a0 x a1 over
 * devices 0.. (alpa.c; tests). mesh, L and sol are the caller's to destroy
 * (psim_sh_layer_destroy, psim_ilp_solution_destroy). */
psim_status psim_alpa_layer_ilp(const psim_model *m, psim_cluster *c, int32_t layer, int32_t a0,
                                int32_t a1, int64_t micro_batch, int32_t n_micro,
                                psim_sh_mesh *mesh, psim_sh_layer *L, psim_ilp_solution *sol);

/* Layer clustering (Alpa, section 5.3) for models without layer indices:
 * splits the ops (topological order) into n_clusters contiguous groups whose
 * FLOPs stay within (1 + delta) of the average, minimising the largest number
 * of bytes crossing one boundary, then the bytes crossing all boundaries.
 * cluster[i] receives op i's group. O(ops^2 x n_clusters). */
psim_status psim_alpa_cluster_layers(const psim_model *m, int32_t n_clusters, double delta,
                                     int32_t *cluster);

#endif
