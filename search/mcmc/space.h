/* space.h - the SOAP configuration space of each op (FlexFlow, SysML'19).
 *
 * A configuration of an op is a degree for each of its splittable dims
 * (Sample = the batch-role dim; Attribute = other output dims, spatial dims
 * under a window; Parameter = dims carried by a weight, output or contracted)
 * and a placement (the Operator dimension): the ordered list of devices that
 * compute its shards, one device per shard (replicas = 1). Degrees need not
 * divide the dim (uneven shards, as GSPMD allows; the largest shard sets the
 * time); their product P is bounded by the devices of the op's pipeline stage.
 *
 * Placements of P devices, within the stage's device list (its order is the
 * topology's: devices of a node are contiguous):
 *  - contiguous blocks aligned with the topology: with q devices of the
 *    stage on each node (options.cluster given), a block of P <= q devices
 *    lies inside one node (devices [k*P, (k+1)*P) of that node, floor(q / P)
 *    per node), and a larger block takes the first P devices of ceil(P / q)
 *    whole neighbouring nodes starting at a node boundary; so a block of a
 *    node's size is a node and one of two nodes' size spans two neighbouring
 *    nodes. Without a cluster (or when the stage's nodes hold different
 *    device counts) blocks are devices [k*P, (k+1)*P) of the stage;
 *  - when the stage has at most PSIM_SPACE_MAX_ARBITRARY devices (and the
 *    option is on), every set of P devices (in increasing device order), which
 *    includes the aligned blocks.
 *
 * The space is enumerable (an index in [0, count) per op, for exhaustive
 * search) and sampleable (uniform over degree vectors, then over placements).
 * NORMALIZED and FIXED dims are never split. Fixed ops (--fix) have a space
 * of one configuration: the one they were given. */
#ifndef PSIM_SPACE_H
#define PSIM_SPACE_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/ir/cluster.h"
#include "sim/ir/model.h"
#include "sim/strategy/strategy.h"

#define PSIM_SPACE_MAX_ARBITRARY 16 /* devices per stage for arbitrary device sets */

typedef struct psim_space_options {
  bool arbitrary_sets;         /* arbitrary device sets on stages of <= 16 devices; default true */
  bool uneven;                 /* degrees that do not divide the dim; default true */
  int32_t max_degree;          /* bound on one dim's degree; 0 = the stage's devices (default) */
  const psim_cluster *cluster; /* nodes of the devices, for aligned blocks; default NULL */
} psim_space_options;

void psim_space_options_init(psim_space_options *o);

/* One degree vector: degree per op dim (1 for dims not split) and P. */
typedef struct psim_space_split {
  int32_t degree[PSIM_MAX_OP_DIMS];
  int32_t n_devices; /* product of the degrees */
} psim_space_split;

typedef struct psim_space_op {
  int32_t stage;        /* the op's (virtual) stage; placements are within it */
  bool fixed;           /* --fix: the op keeps `fixed_cfg` */
  int32_t n_splittable; /* splittable op dims */
  int32_t splittable[PSIM_MAX_OP_DIMS];
  psim_space_split *splits; /* degree vectors, owned */
  int32_t n_splits;
  int64_t *first;                         /* per split: index of its first config (n_splits + 1) */
  int32_t fixed_degree[PSIM_MAX_OP_DIMS]; /* > 0: this dim's degree is fixed (--fix split) */
  int32_t *fixed_devices; /* --fix devices without split: the only placement, owned; or NULL */
  int32_t n_fixed_devices;
} psim_space_op;

typedef struct psim_space {
  const psim_model *m;
  int32_t n_ops;
  psim_space_op *ops; /* one per model op */
  /* placements per stage: for each P in 1..n, the device sets of size P as
   * bitmask-free lists; pl_first[st][P] indexes pl_dev[st] in units of P */
  int32_t n_stages;        /* entries in the strategy's stage list */
  int32_t **stage_devices; /* per stage: its devices (borrowed copies) */
  int32_t *stage_n;
  int32_t *stage_node_n; /* per stage: its devices on each node (q), 0 = not uniform */
  int64_t **pl_count;    /* per stage, per P (0..n): number of placements */
  bool *arbitrary;       /* per stage: arbitrary sets enabled */
  psim_space_options opt;
} psim_space;

/* Builds the space of every op of model m under strategy s's stages (each op
 * stays in its stage). O(ops * degree vectors). */
psim_status psim_space_init(psim_space *sp, const psim_model *m, const psim_strategy *s,
                            const psim_space_options *o);
void psim_space_destroy(psim_space *sp);

/* Configurations of op o (1 when fixed). */
int64_t psim_space_op_count(const psim_space *sp, int32_t o);
/* log10 of the number of strategies (product over ops), for messages. */
double psim_space_log10_size(const psim_space *sp);

/* Writes configuration `index` (in [0, count)) of op o into cfg (devices
 * reallocated; stage kept). O(P * stage devices). */
psim_status psim_space_op_config(const psim_space *sp, int32_t o, int64_t index,
                                 psim_op_config *cfg);
/* A random configuration of op o: a uniform degree vector, then a uniform
 * placement. rng is a splitmix64 state (psim_space_rand). */
psim_status psim_space_sample(const psim_space *sp, int32_t o, uint64_t *rng, psim_op_config *cfg);
/* Whether cfg is in op o's space (degrees allowed, devices in the stage).
 * Placement shape is not checked (propagated configs may be any valid set). */
bool psim_space_allows(const psim_space *sp, int32_t o, const psim_op_config *cfg);

/* Marks op o fixed; a dim degree fixed with psim_space_fix_dim restricts the
 * degree vectors instead. */
void psim_space_fix_op(psim_space *sp, int32_t o);
psim_status psim_space_fix_dim(psim_space *sp, int32_t o, int32_t op_dim, int32_t degree);
/* Restricts op o to one placement, `devices` in this order (one shard each):
 * only the degree vectors with n shards stay. Devices must be in the op's
 * stage, each once (PSIM_EINPUT otherwise). */
psim_status psim_space_fix_devices(psim_space *sp, int32_t o, const int32_t *devices, int32_t n);

/* splitmix64: next value of the generator; psim_space_rand_below: uniform in
 * [0, n) (n > 0). Deterministic across platforms. */
uint64_t psim_space_rand(uint64_t *state);
uint64_t psim_space_rand_below(uint64_t *state, uint64_t n);

/* Copies config src (holding a list, devlist.h) into dst, the list shared: O(1). */
psim_status psim_space_config_copy(const psim_op_config *src, psim_op_config *dst);
/* Copies src into dst with src->devices any array of src->n_devices entries (a stage's
 * devices, a --fix list) other than dst's own list: written into a list of dst's own. */
psim_status psim_space_config_set(const psim_op_config *src, psim_op_config *dst);

#endif
