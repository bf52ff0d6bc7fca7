/* strategy.h - a parallel strategy (plansim.strategy/1), always held in its
 * explicit, expanded form: a split degree per op dim and a device list per op,
 * pipeline stages, micro-batches, schedule, gradient synchronisation and
 * memory options. Templates (megatron, data_parallel, zero) and the
 * Mesh-TensorFlow mesh+layout form expand into this at load time; the
 * template's parameters are kept for exporters.
 *
 * Shards of an op. An op config with degrees d_0..d_{k-1} (over op->dims) has
 * P = prod(d_i) shards, placed on devices[0..P-1] in row-major order of the
 * dims with degree > 1 (first dim slowest). Uneven splits are allowed: shard j
 * of a dim of size n split d ways has size ceil(n/d) for j < n % d (or n/d
 * when d divides n), so the largest shard sets the time. n_devices == P.
 *
 * Micro-batches. Every op runs once per micro-batch on a 1/n_micro slice of
 * the batch-role dim; degrees apply within a micro-batch. */
#ifndef PSIM_STRATEGY_H
#define PSIM_STRATEGY_H

#include <stdbool.h>
#include <stdint.h>

#include "cluster.h"
#include "model.h"
#include "status.h"

typedef enum psim_schedule {
  PSIM_SCHED_GPIPE = 0,
  PSIM_SCHED_1F1B,
  PSIM_SCHED_INTERLEAVED /* 1F1B with virtual_stages chunks per device */
} psim_schedule;

typedef enum psim_recompute {
  PSIM_RECOMPUTE_NONE = 0,
  PSIM_RECOMPUTE_SELECTIVE, /* attention core (softmax, dropout, QK^T, AV) recomputed */
  PSIM_RECOMPUTE_FULL       /* every layer's forward recomputed in backward */
} psim_recompute;

typedef enum psim_allreduce_algo {
  PSIM_AR_AUTO = 0, /* hierarchical across nodes, ring inside (NCCL's usual choice) */
  PSIM_AR_RING,
  PSIM_AR_TREE,
  PSIM_AR_HALVING_DOUBLING,
  PSIM_AR_HIERARCHICAL
} psim_allreduce_algo;

typedef enum psim_grad_sync {
  PSIM_SYNC_ALLREDUCE = 0,
  PSIM_SYNC_PS /* parameter servers */
} psim_grad_sync;

typedef enum psim_ps_mode { PSIM_PS_SYNC = 0, PSIM_PS_ASYNC, PSIM_PS_BACKUP } psim_ps_mode;

typedef struct psim_op_config {
  int32_t degree[PSIM_MAX_OP_DIMS]; /* per op->dims[i]; 1 = not split */
  int32_t *devices;                 /* n_devices device indices, owned */
  int32_t n_devices;                /* == product of degrees */
  int32_t stage;                    /* pipeline stage (virtual stage when interleaved) */
} psim_op_config;

typedef struct psim_stage {
  int32_t first_layer, last_layer; /* inclusive layer range */
  int32_t *devices;                /* the stage's device set, owned */
  int32_t n_devices;
} psim_stage;

/* Parameters a template was given (kept for exporters); tp/pp/dp are 0 when
 * the strategy is not a template. */
typedef struct psim_template_info {
  char name[32]; /* "megatron", "data_parallel", "zero", "" */
  int32_t tp, pp, dp, micro_batch, virtual_stages;
} psim_template_info;

typedef struct psim_ps_config {
  int32_t n_servers;
  int32_t *servers; /* device indices of the servers (may be workers too) */
  psim_ps_mode mode;
  int32_t backup_k; /* backup mode: proceed after k of n pushes */
  int32_t replicas; /* copies of each server shard, 1 = none */
} psim_ps_config;

typedef struct psim_strategy {
  psim_op_config *ops; /* one per model op, same order */
  int32_t n_ops;
  psim_stage *stages; /* n_stages * virtual_stages entries, in pipeline order */
  int32_t n_stages;   /* physical stages (pipeline-parallel degree) */
  int32_t virtual_stages;
  int32_t n_micro;      /* micro-batches per iteration */
  int64_t micro_batch;  /* samples per micro-batch (batch dim / n_micro) */
  psim_schedule schedule;
  psim_recompute recompute;
  bool sequence_parallel;
  int32_t zero_stage;   /* 0-3 */
  bool overlap_grad_reduce;
  double bucket_bytes;  /* gradient bucket, bytes (default 25 MiB? see .c) */
  psim_allreduce_algo allreduce;
  psim_grad_sync sync;
  psim_ps_config ps;
  psim_template_info tmpl;
} psim_strategy;

void psim_strategy_init(psim_strategy *s);
void psim_strategy_destroy(psim_strategy *s);

/* Loads a strategy file (any form) and expands it against model and cluster;
 * errors name the file, the field and why it does not fit. */
psim_status psim_strategy_load(const char *file, const psim_model *m, psim_cluster *c,
                               psim_strategy *s);
struct cJSON;
psim_status psim_strategy_from_json(const char *file, const struct cJSON *root,
                                    const psim_model *m, psim_cluster *c, psim_strategy *s);
/* The explicit form as JSON (what `plansim expand` prints and plans embed). */
psim_status psim_strategy_to_json(const psim_strategy *s, const psim_model *m,
                                  const psim_cluster *c, struct cJSON **out);

/* Builds the Megatron-LM strategy tp x pp x dp (the template's expansion). */
typedef struct psim_megatron_opts {
  int32_t tp, pp, dp;         /* required; tp*pp*dp <= devices */
  int32_t micro_batch;        /* samples per micro-batch per data-parallel rank; default 1 */
  int32_t virtual_stages;     /* default 1 */
  psim_schedule schedule;     /* default 1f1b (interleaved when virtual_stages > 1) */
  psim_recompute recompute;   /* default none */
  bool sequence_parallel;     /* default false */
  int32_t zero_stage;         /* default 0 */
  bool overlap_grad_reduce;   /* default false */
} psim_megatron_opts;
void psim_megatron_opts_init(psim_megatron_opts *o);
psim_status psim_strategy_megatron(const psim_model *m, psim_cluster *c,
                                   const psim_megatron_opts *o, psim_strategy *s);
/* Pure data parallelism over the first n devices (batch split n ways). */
psim_status psim_strategy_data_parallel(const psim_model *m, psim_cluster *c, int32_t n,
                                        int32_t micro_batches, psim_strategy *s);

/* Size of shard j (0-based) of a dim of size n split d ways (uneven allowed). */
int64_t psim_shard_size(int64_t n, int32_t d, int32_t j);
/* Largest shard size: ceil(n / d). */
int64_t psim_shard_max(int64_t n, int32_t d);

/* Deep copy (searchers mutate copies). */
psim_status psim_strategy_copy(const psim_strategy *src, psim_strategy *dst);

const char *psim_schedule_name(psim_schedule s);
const char *psim_recompute_name(psim_recompute r);
const char *psim_allreduce_algo_name(psim_allreduce_algo a);

#endif
