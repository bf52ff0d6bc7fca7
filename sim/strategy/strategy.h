/* strategy.h - a parallel strategy (plansim.strategy/1), always held in its
 * explicit, expanded form: a split degree per op dim and a device list per op,
 * pipeline stages, micro-batches, schedule, gradient synchronisation and
 * memory options. Templates (megatron, data_parallel, zero) and the
 * Mesh-TensorFlow mesh+layout form expand into this at load time; the
 * template's parameters are kept for exporters.
 *
 * Shards of an op. An op config with degrees d_0..d_{k-1} (over op->dims) has
 * P = prod(d_i) shards, each computed by `replicas` devices (replicated
 * compute, e.g. a LayerNorm inside a tensor-parallel group). devices holds
 * P * replicas entries: entry s * replicas + r is replica r of shard s, and
 * shards are numbered in row-major order of op->dims (first dim slowest).
 * Uneven splits are allowed: shard j of a dim of size n split d ways has size
 * ceil(n/d) for j < n % d, else floor(n/d) (psim_shard_size), so the largest
 * shard sets the time. n_devices == P * replicas.
 *
 * Micro-batches. Every op runs once per micro-batch on a 1/n_micro slice of
 * the batch-role dim; degrees apply within a micro-batch. */
#ifndef PSIM_STRATEGY_H
#define PSIM_STRATEGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/core/status.h"
#include "sim/ir/cluster.h"
#include "sim/ir/model.h"
#include "sim/strategy/devlist.h"

/* Pipeline schedules (sim/strategy/schedule.c has their rules, sim/builder/schedules.c their
 * orders). The last three are torchtitan's (torch.distributed.pipelining, schedules.py of
 * pytorch 00722e6); interleaved_zb and zbv split each backward into an input-gradient and a
 * weight-gradient kernel and run the weight gradients later (Qi et al. 2024, Zero Bubble
 * Pipeline Parallelism, arXiv 2401.10241). */
typedef enum psim_schedule {
  PSIM_SCHED_GPIPE = 0,
  PSIM_SCHED_1F1B,
  PSIM_SCHED_INTERLEAVED,    /* 1F1B with virtual_stages chunks per device */
  PSIM_SCHED_LOOPED_BFS,     /* ScheduleLoopedBFS: each chunk's forwards for every micro-batch,
                                then the backwards, chunks in reverse */
  PSIM_SCHED_INTERLEAVED_ZB, /* ScheduleInterleavedZeroBubble (ZB1P) */
  PSIM_SCHED_ZBV,            /* ScheduleZBVZeroBubble: 2 chunks per device placed in a V */
  PSIM_SCHED_DUALPIPEV       /* ScheduleDualPipeV (DeepSeek-V3's DualPipe folded to a V) */
} psim_schedule;

typedef enum psim_recompute {
  PSIM_RECOMPUTE_NONE = 0,
  PSIM_RECOMPUTE_SELECTIVE, /* attention core (softmax, dropout, QK^T, AV) recomputed */
  PSIM_RECOMPUTE_FULL,      /* whole layers' forward recomputed in backward (recompute_method,
                             * recompute_every) */
  PSIM_RECOMPUTE_OP         /* torchtitan's op-level selective AC: a block's ops but attention,
                             * every odd weight matmul and the tensor-parallel reductions
                             * (sim/builder/kernels.c, psim_build_recomputed) */
} psim_recompute;

/* Which layers full recomputation recomputes (Megatron-Core --recompute-method and
 * --recompute-num-layers, megatron/core/transformer/transformer_config.py; the loop is
 * megatron/core/recompute.py checkpointed_forward, NVIDIA/Megatron-LM d98e8a6, formerly
 * TransformerBlock._checkpointed_forward). Both count the transformer layers of one model
 * chunk (one virtual stage; TransformerBlock.num_layers_per_pipeline_rank = len(self.layers)):
 *   uniform: groups of N consecutive layers (the last may be shorter), each group's input
 *            kept and the whole group recomputed before its backward (N = 1: every layer
 *            checkpointed, plansim's "full" before these keys);
 *   block:   the first N layers of the chunk recomputed one by one, the others keep their
 *            activations (N = 0: no recomputation; N >= the chunk's layers: as uniform 1). */
typedef enum psim_recompute_method { PSIM_RCM_UNIFORM = 0, PSIM_RCM_BLOCK } psim_recompute_method;

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

/* psim_strategy.async_tp: the stack's tp_overlap, or the run's own off / on. */
#define PSIM_ASYNC_TP_STACK 0
#define PSIM_ASYNC_TP_OFF   1
#define PSIM_ASYNC_TP_ON    2

/* psim_strategy.fp8: the model's own FP8 GEMMs (its matmuls' "fp8"), or the run's own: none,
 * or every linear layer of the repeated blocks (docs/strategy.md "fp8"). */
#define PSIM_FP8_MODEL 0
#define PSIM_FP8_OFF   1
#define PSIM_FP8_ON    2

typedef struct psim_op_config {
  int32_t degree[PSIM_MAX_OP_DIMS]; /* per op->dims[i]; 1 = not split */
  int32_t replicas;                 /* devices computing each shard, >= 1 */
  /* n_devices device indices: a shared list (sim/strategy/devlist.h) holding one reference,
   * read-only; written through psim_op_config_writable (copy on write) */
  const int32_t *devices;
  int32_t n_devices; /* == product of degrees * replicas */
  int32_t stage;     /* pipeline stage (virtual stage when interleaved) */
} psim_op_config;

typedef struct psim_stage {
  int32_t first_layer, last_layer; /* inclusive layer range */
  int32_t *devices;                /* the stage's device set, owned */
  int32_t n_devices;
} psim_stage;

#define PSIM_PIPELINE_LAYOUT_MAX 256 /* characters of a pipeline_layout string, with its NUL */

/* Parameters a template was given (kept for exporters); tp/pp/dp are 0 when
 * the strategy is not a template. */
typedef struct psim_template_info {
  char name[32]; /* "megatron", "data_parallel", "zero", "" */
  int32_t tp, pp, dp, micro_batch, virtual_stages;
  /* Megatron-Core's MoE and long-context degrees (1 when unused; 0 when not a template):
   * ep = --expert-model-parallel-size, etp = --expert-tensor-parallel-size,
   * cp = --context-parallel-size. */
  int32_t ep, etp, cp;
  /* Megatron-Core --decoder-first/last-pipeline-num-layers (0 = even split) */
  int32_t first_stage_layers, last_stage_layers;
  char pipeline_layout[PSIM_PIPELINE_LAYOUT_MAX]; /* --pipeline-model-parallel-layout, "" none */
} psim_template_info;

typedef struct psim_ps_config {
  int32_t n_servers;
  int32_t *servers; /* device indices of the servers (may be workers too) */
  psim_ps_mode mode;
  int32_t backup_k; /* backup mode: proceed after k of n pushes */
  int32_t replicas; /* copies of each server shard, 1 = none */
} psim_ps_config;

/* A logical device mesh and a Mesh-TensorFlow layout (the explicit form's
 * "mesh" and "layout"). Axes are ordered first slowest; a stage's devices are
 * laid out on the mesh row-major. An op dim whose name, or else whose role
 * name, is a layout key gets the axes of that key's entries (a key may have
 * several entries: the dim is split over the product of those axes, in mesh
 * order, first slowest); an axis goes to the first of an op's dims that claims
 * it; axes no dim of the op maps to replicate it. fallback[a] (a dim or role
 * name, "" for none) is mapped to axis a by ops that map no dim to a, even a
 * dim the layout already split (Megatron's sequence parallelism, also under
 * context parallelism). n_axes == 0 means one implicit axis over the stage's
 * devices with nothing mapped.
 *
 * Expert ops (psim_mesh_expert_op: the ops between a MoE dispatch and its
 * combine, e.g. the expert GEMMs) use the expert layout instead when it has
 * entries (Megatron-Core's separate expert groups), without fallbacks; without
 * one they use the layout, their expert-role dim claiming its axes first (the
 * dispatch's all-to-all moves the tokens to the expert's rank, GShard). */
#define PSIM_MESH_MAX_AXES   8
#define PSIM_MESH_MAX_LAYOUT 16
#define PSIM_MESH_NAME       64
typedef struct psim_mesh {
  int32_t n_axes;
  char axis[PSIM_MESH_MAX_AXES][PSIM_MESH_NAME];
  int32_t size[PSIM_MESH_MAX_AXES];
  int32_t n_layout;
  char layout_key[PSIM_MESH_MAX_LAYOUT][PSIM_MESH_NAME]; /* dim name or role name */
  int32_t layout_axis[PSIM_MESH_MAX_LAYOUT];
  char fallback[PSIM_MESH_MAX_AXES][PSIM_MESH_NAME];
  int32_t n_expert_layout; /* the expert layout, same form as the layout */
  char expert_layout_key[PSIM_MESH_MAX_LAYOUT][PSIM_MESH_NAME];
  int32_t expert_layout_axis[PSIM_MESH_MAX_LAYOUT];
} psim_mesh;

/* Checkpointing of the job (the recovery model of sim/faults.h restarts from
 * the last checkpoint); 0 = unset: the fault options' defaults apply. */
typedef struct psim_checkpoint {
  int32_t every;   /* iterations between checkpoints */
  double write_bw; /* aggregate checkpoint write bandwidth, bytes/s */
  double read_bw;  /* aggregate checkpoint read bandwidth, bytes/s */
} psim_checkpoint;

/* DeepSpeed's stage3_prefetch_bucket_size default, 5e7 parameters
 * (deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig.prefetch_bucket_size). */
#define PSIM_ZERO_PREFETCH_DEFAULT 5e7

typedef struct psim_strategy {
  psim_op_config *ops; /* one per model op, same order */
  int32_t n_ops;
  psim_stage *stages; /* n_stages * virtual_stages entries, in pipeline order */
  int32_t n_stages;   /* physical stages (pipeline-parallel degree) */
  int32_t virtual_stages;
  int32_t n_micro;     /* micro-batches per iteration */
  int64_t micro_batch; /* samples per micro-batch (batch dim / n_micro) */
  psim_schedule schedule;
  psim_recompute recompute;
  /* full recompute of every N-th transformer block only (the N-th, 2N-th, ...: torchtitan's
   * layer-level selective AC, selective_ac_option "N"); 0 or 1: every block */
  int32_t recompute_every;
  psim_recompute_method recompute_method; /* full only; default uniform */
  int32_t recompute_layers;               /* full only: N above; default 1 (uniform <= 0 = 1) */
  bool sequence_parallel;
  int32_t zero_stage; /* 0-3 */
  /* HSDP (torchtitan's data_parallel_replicate_degree; the explicit form's "dp_replicate"):
   * each weight's data-parallel group of n ranks, in its rank order, is cut into dp_replicate
   * shard groups of n / dp_replicate consecutive members. ZeRO shards over a shard group; the
   * gradients are reduce-scattered within it, then all-reduced across the dp_replicate
   * replicas (the members at the same place of every shard group). 1 = shard over the whole
   * group (the default). Used only with zero_stage >= 1. */
  int32_t dp_replicate;
  /* Async tensor parallelism (torchtitan's enable_async_tensor_parallel) for this run:
   * PSIM_ASYNC_TP_STACK (0, the default: the stack's tp_overlap), _OFF or _ON (key "async_tp",
   * a bool); docs/stacks.md tp_overlap. */
  int8_t async_tp;
  /* FP8 linear layers for this run (key "fp8", a bool): PSIM_FP8_MODEL (0, the default: the
   * model's matmuls as they are), _OFF (every GEMM in the model's dtype) or _ON (the weight
   * matmuls of the repeated blocks, the ones a generator's linear_dtype "fp8" marks, run as FP8
   * GEMMs: Transformer Engine's fp8_autocast over Megatron-Core's TransformerLayer, torchao's
   * Float8Linear; the LM head and embeddings outside the blocks stay as they are). */
  int8_t fp8;
  bool overlap_grad_reduce;
  /* ZeRO-1/2: the updated parameters' all-gathers overlap the next iteration's forward,
   * bucket by bucket (Megatron-Core --overlap-param-gather); default false: after the step */
  bool overlap_param_gather;
  double bucket_bytes;  /* gradient bucket, bytes (default 25 MiB, PyTorch DDP's bucket_cap_mb) */
  bool bucket_given;    /* bucket_size was given; else the stack's rule may size the buckets
                           (psim_stack_bucket_params: Megatron-Core's). Not compared by
                           psim_strategy_equal: under a stack without a rule both mean the
                           same buckets, and under one a written file keeps it (no
                           bucket_size written when not given) */
  double zero_prefetch; /* ZeRO-3: parameters gathered ahead of the unit computing (default 5e7,
                           DeepSpeed's stage3_prefetch_bucket_size); at least the next unit */
  psim_allreduce_algo allreduce;
  psim_grad_sync sync;
  psim_ps_config ps;
  psim_template_info tmpl;
  psim_mesh mesh; /* the mesh + layout the per-op configs default to (to_json) */
  psim_checkpoint checkpoint;
  /* Per-op layer override (the explicit form's pipeline.layer_starts; NULL: the model's
   * layers): op i is in layer op_layer[i] of n_op_layers, each layer a contiguous range of
   * ops in model (topological) order. Stages cover these layers. Only for models without
   * repeated blocks, where the builder's per-layer rules (recomputation, ZeRO units) are
   * inert or also follow the ops' stages. The Alpa optimizer's layer clustering writes it
   * for graphs without layer indices. */
  int32_t *op_layer;
  int32_t n_op_layers;
} psim_strategy;

/* The layer op `op` is in under s (its override, else the model's). */
static inline int32_t psim_strategy_op_layer(const psim_strategy *s, const psim_model *m,
                                             int32_t op) {
  return s->op_layer ? s->op_layer[op] : m->ops[op].layer;
}
/* The number of layers the stages of s cover. */
static inline int32_t psim_strategy_n_layers(const psim_strategy *s, const psim_model *m) {
  return s->op_layer ? s->n_op_layers : m->n_layers;
}

void psim_strategy_init(psim_strategy *s);
void psim_strategy_destroy(psim_strategy *s);

/* Loads a strategy file (any form) and expands it against model and cluster;
 * errors name the file, the field and why it does not fit. */
psim_status psim_strategy_load(const char *file, const psim_model *m, psim_cluster *c,
                               psim_strategy *s);
struct cJSON;
psim_status psim_strategy_from_json(const char *file, const struct cJSON *root, const psim_model *m,
                                    psim_cluster *c, psim_strategy *s);
/* The explicit form as JSON (what `plansim expand` prints and plans embed). */
psim_status psim_strategy_to_json(const psim_strategy *s, const psim_model *m,
                                  const psim_cluster *c, struct cJSON **out);

/* Builds the Megatron-LM strategy tp x pp x dp (the template's expansion). */
typedef struct psim_megatron_opts {
  int32_t tp, pp, dp;       /* required; tp*pp*dp <= devices */
  int32_t micro_batch;      /* samples per micro-batch per data-parallel rank; default 1 */
  int32_t virtual_stages;   /* default 1 */
  psim_schedule schedule;   /* default 1f1b (interleaved when virtual_stages > 1) */
  psim_recompute recompute; /* default none */
  psim_recompute_method recompute_method; /* full: default uniform (psim_strategy) */
  int32_t recompute_layers;               /* full: default 1 */
  /* full: every N-th block only (psim_strategy.recompute_every, torchtitan's layer-level
   * selective AC); default 0 (every block) */
  int32_t recompute_every;
  bool sequence_parallel; /* default false */
  int32_t zero_stage;     /* default 0 */
  /* HSDP: the ZeRO / FSDP shard group's data-parallel ranks (torchtitan's
   * data_parallel_shard_degree), dividing dp; 0 = dp (the default: shard over all of dp).
   * dp / dp_shard becomes psim_strategy.dp_replicate. Template key "dp_shard". */
  int32_t dp_shard;
  int8_t async_tp;          /* psim_strategy.async_tp; default PSIM_ASYNC_TP_STACK */
  int8_t fp8;               /* psim_strategy.fp8; default PSIM_FP8_MODEL */
  bool overlap_grad_reduce; /* default false */
  /* psim_strategy.overlap_param_gather (ZeRO 1/2; Megatron-Core --overlap-param-gather);
   * default false */
  bool overlap_param_gather;
  /* Expert parallel (divides the experts), expert tensor parallel and context parallel
   * degrees, Megatron-Core's rules (docs/strategy.md); ep and cp default 1, etp 0 = tp
   * (Megatron-LM arguments.py: expert_tensor_parallel_size defaults to tp); 0 for ep or
   * cp also means 1. tp*cp*dp devices per stage; the expert layers regroup them as
   * etp x ep x expert-dp, expert-dp = tp*cp*dp / (etp*ep). */
  int32_t ep, etp, cp;
  /* Uneven pipeline stages (Megatron-Core --decoder-first-pipeline-num-layers /
   * --decoder-last-pipeline-num-layers, megatron/training/arguments.py): transformer layers
   * of the first / last pipeline stage; the rest split evenly over the middle stages.
   * 0 = even split (the default). Template keys "first_stage_layers", "last_stage_layers". */
  int32_t first_stage_layers, last_stage_layers;
  /* Megatron-Core --pipeline-model-parallel-layout ("" = none; psim_pipeline_layout_parse):
   * places the layers chunk by chunk and sets the virtual stages (chunks / pp); not with
   * first/last_stage_layers. Template key "pipeline_layout". */
  char pipeline_layout[PSIM_PIPELINE_LAYOUT_MAX];
} psim_megatron_opts;
void psim_megatron_opts_init(psim_megatron_opts *o);
psim_status psim_strategy_megatron(const psim_model *m, psim_cluster *c,
                                   const psim_megatron_opts *o, psim_strategy *s);
/* Pure data parallelism over the first n devices (batch split n ways). */
psim_status psim_strategy_data_parallel(const psim_model *m, psim_cluster *c, int32_t n,
                                        int32_t micro_batches, psim_strategy *s);

/* The Mesh-TensorFlow rule: dim_of_axis[a] (PSIM_MESH_MAX_AXES entries) is the
 * index into op->dims of the dim split over mesh axis a (the layout first,
 * then the axis fallbacks), or -1. */
void psim_mesh_map_axes(const psim_mesh *mesh, const psim_model *m, const psim_op *op,
                        int32_t *dim_of_axis);

/* Size of shard j (0-based) of a dim of size n split d ways (uneven allowed). */
int64_t psim_shard_size(int64_t n, int32_t d, int32_t j);
/* Largest shard size: ceil(n / d). */
int64_t psim_shard_max(int64_t n, int32_t d);

/* Deep copy (searchers mutate copies). */
psim_status psim_strategy_copy(const psim_strategy *src, psim_strategy *dst);

const char *psim_schedule_name(psim_schedule s);
/* Whether schedule s runs with v chunks per device (schedule.c): gpipe and 1f1b one,
 * interleaved more, zbv and dualpipev exactly 2, looped_bfs and interleaved_zb any. NULL when it
 * does, else the rule broken, for a message. */
const char *psim_schedule_chunks_rule(psim_schedule s, int32_t v);
/* The schedule used when none is given: interleaved with v > 1 chunks, else 1f1b. */
psim_schedule psim_schedule_default(int32_t v);
/* Whether s splits a backward into input- and weight-gradient kernels (the zero-bubble ones). */
bool psim_schedule_splits_backward(psim_schedule s);
/* Whether s needs as many micro-batches as a multiple of the stages: Megatron-LM's interleaved
 * rule; torchtitan's multi-chunk schedules need n_micro a multiple of max(1, n_micro / pp)
 * (the rounds), dualpipev at least 2 pp. NULL when n_micro fits, else the rule broken. */
const char *psim_schedule_micro_rule(psim_schedule s, int32_t n_micro, int32_t pp);
/* The physical stage chunk c (in pipeline order) runs on: c % pp, or under zbv and dualpipev the V
 * of torchtitan's generate_stage_to_rank_mapping(style="v"): c < pp ? c : 2 pp - 1 - c. */
int32_t psim_schedule_chunk_rank(psim_schedule s, int32_t pp, int32_t c);
/* Whether s places its 2 chunks per rank in a V (zbv, dualpipev: torchtitan's
 * generate_stage_to_rank_mapping(style="v"), torch/distributed/pipelining/_utils.py). */
bool psim_schedule_v_shaped(psim_schedule s);
/* Local chunk j (0-based, in pipeline order) of physical stage r: chunk_rank's inverse. */
int32_t psim_schedule_rank_chunk(psim_schedule s, int32_t pp, int32_t r, int32_t j);
const char *psim_recompute_name(psim_recompute r);
const char *psim_recompute_method_name(psim_recompute_method r);
const char *psim_allreduce_algo_name(psim_allreduce_algo a);
const char *psim_ps_mode_name(psim_ps_mode m);
/* Parsers for the names above; PSIM_EINPUT (message lists the valid names). */
psim_status psim_schedule_parse(const char *name, psim_schedule *out);
psim_status psim_recompute_parse(const char *name, psim_recompute *out);
psim_status psim_recompute_method_parse(const char *name, psim_recompute_method *out);
/* Whether s recomputes less than every layer or in groups: full recomputation with
 * method block, or uniform with groups of more than one layer (the keys a writer adds). */
bool psim_strategy_partial_recompute(const psim_strategy *s);
/* Whether ZeRO stage zero_stage is the distributed optimizer's (1 or 2): gradients
 * reduce-scattered, the updated parameter shards all-gathered after the step
 * (sim/builder/gradsync.c), the only gathers overlap_param_gather moves (stage 3 gathers
 * before each use, stage 0 has none). */
bool psim_zero_gathers_after_step(int32_t zero_stage);
/* Whether s's post-step parameter gathers overlap the next forward: overlap_param_gather
 * at ZeRO 1-2. Megatron-LM also requires overlap_grad_reduce (megatron/training/
 * arguments.py), which the searchers pair it with and the exports check. */
bool psim_strategy_param_gather_overlapped(const psim_strategy *s);
/* Whether model op o runs as an FP8 GEMM under s: the op's own "fp8" (PSIM_FP8_MODEL), never
 * (PSIM_FP8_OFF), or for every block linear (PSIM_FP8_ON; psim_op_is_block_linear). */
bool psim_strategy_op_fp8(const psim_strategy *s, const psim_model *m, int32_t o);
/* Whether any op of m runs as an FP8 GEMM under s (the exports' FP8 recipe). */
bool psim_strategy_any_fp8(const psim_strategy *s, const psim_model *m);
/* Whether a strategy's "fp8" (PSIM_FP8_ON) changes m on c: the device has an FP8 rate (H100 and
 * later: sim/ir/device_types.c), the stack casts to FP8 (fp8_cast_bytes > 0: its recipes,
 * docs/stacks.md; megatron-lm-2021 has none), m has block linears and none of its ops is FP8
 * already (the model's own dtype decides then). The searchers try it only where asked (plan
 * --fp8: FP8 changes the numerics, so it is the user's choice). */
bool psim_strategy_fp8_applies(const psim_model *m, const psim_cluster *c);
psim_status psim_allreduce_algo_parse(const char *name, psim_allreduce_algo *out);
psim_status psim_ps_mode_parse(const char *name, psim_ps_mode *out);

/* Validates a strategy document's structure (keys, types, value ranges,
 * template parameters) without a model or cluster: what `plansim check` runs
 * on a plansim.strategy/1 file. O(size of the document). */
psim_status psim_strategy_check_json(const char *file, const struct cJSON *root);

/* True when op o is an expert op: not a dispatch or combine, and reading a
 * routed tensor (a dispatch's output, or an expert op's output with an
 * expert-role dim). O(depth of the expert region). */
bool psim_mesh_expert_op(const psim_model *m, int32_t o);

/* Devices of the mesh (product of axis sizes; 0 when n_axes == 0). */
int32_t psim_mesh_size(const psim_mesh *mesh);
/* The config op `op` gets from mesh+layout over a stage's devices (stage not
 * set; cfg->devices a new list, released by psim_op_config_destroy).
 * O(n_devices * n_dims). */
psim_status psim_mesh_op_config(const psim_mesh *mesh, const psim_model *m, int32_t op,
                                const int32_t *stage_devices, int32_t n_stage_devices,
                                psim_op_config *cfg);
/* What psim_mesh_op_config's device list depends on besides the stage's devices: the op's
 * degrees, replicas and the dim split over each mesh axis (zero past n_dims / n_axes). */
typedef struct psim_mesh_split {
  int32_t n_dims, replicas;
  int32_t degree[PSIM_MAX_OP_DIMS];
  int32_t dim_of_axis[PSIM_MESH_MAX_AXES];
} psim_mesh_split;

/* The device lists psim_mesh_op_config_like made, the newest first, each a split over a
 * stage's list (by address: the strategy's stages, which must outlive the memo), with a
 * reference of the memo's own; and each split's positions in a stage's list, which every
 * stage of the same size shares. Zero-initialise; psim_mesh_memo_destroy. */
#define PSIM_MESH_MEMO 32
typedef struct psim_mesh_memo {
  psim_mesh_split split[PSIM_MESH_MEMO];
  const int32_t *stage[PSIM_MESH_MEMO];
  const int32_t *devices[PSIM_MESH_MEMO];
  int32_t n;
  psim_mesh_split pos_split[PSIM_MESH_MEMO];
  int32_t *pos[PSIM_MESH_MEMO]; /* owned */
  int32_t n_pos;
} psim_mesh_memo;
void psim_mesh_memo_destroy(psim_mesh_memo *memo);

/* psim_mesh_op_config through the memo: the device list shared (one more reference,
 * devlist.h) when an earlier op split alike over the same stage, else gathered from the
 * split's positions, which are computed once for all stages: O(1) or O(n_devices) per op
 * instead of O(n_devices * n_dims) index arithmetic, or an O(n_devices) copy (issue 19). */
psim_status psim_mesh_op_config_like(const psim_mesh *mesh, const psim_model *m, int32_t op,
                                     const int32_t *stage_devices, int32_t n_stage_devices,
                                     psim_mesh_memo *memo, psim_op_config *cfg);
void psim_op_config_destroy(psim_op_config *cfg);
/* dst becomes a copy of src sharing its device list (dst's own reference dropped): O(1). */
void psim_op_config_copy(const psim_op_config *src, psim_op_config *dst);
/* cfg's device list made its own and writable, with room for cap entries and its first
 * min(n_devices, cap) kept (copied only when shared: psim_devlist_writable); n_devices is
 * not changed. Every in-place edit of a config's list goes through here, so the other
 * configs sharing it keep theirs. */
psim_status psim_op_config_writable(psim_op_config *cfg, int32_t cap, int32_t **out);
/* Extent of op dim i within one micro-batch: the model dim size, divided by
 * n_micro for the batch-role dim. */
int64_t psim_strategy_dim_extent(const psim_strategy *s, const psim_model *m, int32_t dim);
/* Checks every invariant of the explicit form (degrees in [1, extent],
 * n_devices == prod(degree) * replicas, devices distinct and in range, stages
 * covering every layer once, op stages consistent with their layers, stage
 * device sets disjoint). file names the source in messages. O(ops * devices). */
psim_status psim_strategy_validate(const psim_strategy *s, const psim_model *m,
                                   const psim_cluster *c, const char *file);
/* Pipeline-order stage holding layer (-1 when none). O(stages). */
int32_t psim_strategy_layer_stage(const psim_strategy *s, int32_t layer);
/* True when a and b are the same strategy (every field). */
bool psim_strategy_equal(const psim_strategy *a, const psim_strategy *b);
/* Splits the model's layers into n chunks in order, writing first_layer and
 * last_layer of stages[0..n-1]. The layers of repeated blocks (the
 * transformer layers) are divided: earlier chunks get one more when n does
 * not divide them (require_even: that is an error); layers before the first
 * block go to chunk 0 and layers after the last to chunk n-1 (Megatron puts
 * the embedding on the first stage and the head on the last). A model without
 * blocks splits all its layers. O(ops). */
psim_status psim_strategy_split_layers(const psim_model *m, int32_t n, bool require_even,
                                       psim_stage *stages);
/* The range [lo, hi] of the layers of the model's repeated blocks (the transformer and
 * MTP layers a pipeline split divides; a model without blocks: all its layers). O(ops). */
void psim_strategy_block_range(const psim_model *m, int32_t *lo, int32_t *hi);
/* As psim_strategy_split_layers with the block layers of each chunk given: sizes[c] >= 1,
 * summing to the layers of psim_strategy_block_range. O(ops + n). */
psim_status psim_strategy_split_sizes(const psim_model *m, int32_t n, const int32_t *sizes,
                                      psim_stage *stages);
/* Megatron-Core's uneven split (--decoder-first/last-pipeline-num-layers, core_v0.15.0
 * transformer_config.py and transformer_block.py get_num_layers_to_build): transformer
 * layers of each of the pp * v chunks in pipeline order (chunk c on stage c % pp) for
 * count layers with first / last (0 = not set) on the first / last stage. Errors name the
 * key: first and last multiples of v, pp > 1, the middle layers dividing evenly over the
 * middle stages x v, at least one layer per chunk. O(pp * v). */
psim_status psim_megatron_chunk_layers(int32_t count, int32_t pp, int32_t v, int32_t first,
                                       int32_t last, int32_t *sizes);
/* Megatron-Core's --pipeline-model-parallel-layout (core_v0.15.0
 * megatron/core/transformer/pipeline_parallel_layer_layout.py, parse_str_to_list and
 * validate_layer_layout): "Et*3|(tt|)*29,m|L" lists the pipeline chunks in pipeline order
 * (chunk c on stage c % pp, virtual stage c / pp), '|' between them; E embedding,
 * t transformer layer, m MTP layer, L loss; "(...)*n" and "x*n" repeat, commas are
 * cosmetic. Gives the chunk count (a multiple of pp), the t + m layers of each chunk
 * (*sizes, release with psim_free) and the totals of t and m. Errors start with
 * "pipeline_layout:"; plansim also refuses a chunk without a t or m. O(length unrolled). */
psim_status psim_pipeline_layout_parse(const char *text, int32_t pp, int32_t *n_chunks,
                                       int32_t **sizes, int32_t *n_t, int32_t *n_m);
/* Applies o->pipeline_layout to o: virtual_stages = its chunks / pp (an error when given
 * otherwise, or with first/last_stage_layers: Megatron-Core's rules), the interleaved
 * schedule when > 1. No-op without a layout. O(length unrolled). */
psim_status psim_megatron_resolve_layout(psim_megatron_opts *o);
/* The block layers of each of the pp * virtual_stages chunks under o's uneven split
 * (*sizes, release with psim_free; NULL for the even split). Layers of repeated blocks
 * after the loss's layer are MTP modules (the decoder generator's DeepSeek MTP):
 * first/last_stage_layers split the transformer layers and the MTP layers join the last
 * chunk (Megatron-Core builds them with the loss); the layout's t and m counts must match
 * them. O(ops + chunks). */
psim_status psim_megatron_stage_sizes(const psim_model *m, const psim_megatron_opts *o,
                                      int32_t **sizes);
/* Sets every op's config from s->mesh over the devices of the stage holding
 * the op's layer (s->stages, n_stages, virtual_stages set; s->ops allocated
 * here). O(ops * devices per stage). */
psim_status psim_strategy_apply_mesh(psim_strategy *s, const psim_model *m);
/* A "zero" template: data parallel over n devices with ZeRO stage `stage`. */
psim_status psim_strategy_zero(const psim_model *m, psim_cluster *c, int32_t n, int32_t stage,
                               psim_strategy *s);

#endif
