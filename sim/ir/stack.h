/* stack.h - the software stack a training run uses (issue 20, docs/stacks.md):
 * what the training software decides and the cost model can use (launch
 * overhead per kernel, a fused flash-attention kernel and its version, FP8
 * scaling casts, the optimizer's implementation, GEMM wave quantisation) and
 * flags for overlap that the builder may read later.
 *
 * A stack is a value (no heap): the cluster carries one (psim_cluster.stack),
 * so every cost of costdb/cost.c sees it. The zero value is the stack the
 * simulator was calibrated on, megatron-lm-2021 (Megatron-LM as Korthikanti
 * et al. 2022 ran it on DGX A100): every field zero means "as before", so a
 * cluster without a stack simulates exactly as it did. */
#ifndef PSIM_STACK_H
#define PSIM_STACK_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/core/status.h"

struct cJSON;

/* How the optimizer step runs; each moves its own bytes per parameter
 * (costdb/cost.c, docs/stacks.md). */
typedef enum psim_optim_impl {
  PSIM_OPTIM_FUSED = 0,   /* Megatron mixed-precision Adam, fused multi-tensor (46 B/param) */
  PSIM_OPTIM_TORCH_FUSED, /* torch.optim.AdamW(fused=True) on fp32 shards (32 B/param) */
  PSIM_OPTIM_FOREACH      /* torch multi-tensor (foreach) AdamW, one pass per step (84 B/param);
                             also composer's DecoupledAdamW, a per-tensor loop of the same ops */
} psim_optim_impl;

/* The gradient bucket when the strategy gives no bucket_size (docs/stacks.md). */
typedef enum psim_dp_bucket_rule {
  PSIM_BUCKET_DDP = 0, /* the strategy's default, 25 MiB (PyTorch DDP's bucket_cap_mb) */
  PSIM_BUCKET_MCORE    /* max(4e7, 1e6 x dp) parameters: Megatron-Core's DDP default
                          (megatron/core/distributed/distributed_data_parallel.py) */
} psim_dp_bucket_rule;

/* How a MoE layer's tokens reach their experts' ranks (docs/stacks.md,
 * "moe_dispatcher"; sim/builder/moe_a2a.c). */
typedef enum psim_moe_dispatcher {
  PSIM_MOE_ALLTOALL = 0, /* Megatron-Core's MoEAlltoAllTokenDispatcher: one copy per (token,
                            expert) to the expert's rank, rank pair by rank pair */
  PSIM_MOE_DEEPEP,       /* the flex dispatcher's DeepEP backend: once per destination rank over
                            NVLink, once per destination node over RDMA, forwarded inside it */
  PSIM_MOE_HYBRIDEP      /* the flex dispatcher's HybridEP backend: the same traffic */
} psim_moe_dispatcher;

#define PSIM_STACK_NAME_MAX 48
#define PSIM_STACK_FIT_MAX  8

typedef struct psim_stack {
  char name[PSIM_STACK_NAME_MAX]; /* "" = megatron-lm-2021 */
  /* host/launch overhead per kernel, s (replaces the device type's launch_overhead);
   * 0 = the device type's */
  double launch_s;
  /* Attention: a fused flash kernel costed on its own efficiency curve
   * (costdb/kernels.h) instead of the GEMM curve. flash_version 2 or 3
   * (FlashAttention-3 / cuDNN fused attention on Hopper and later); 0 = the GEMM
   * curve (megatron-lm-2021). attn_scale multiplies the published efficiency
   * (a fitted stack parameter, 1 = the papers' kernels; 0 reads as 1). */
  int32_t flash_version;
  double attn_scale;
  /* Fused kernels (docs/stacks.md: recorded, not yet consumed by the builder,
   * whose model files already hold one op per kernel). */
  bool fused_norm, fused_act;
  /* FP8 GEMMs (dtype fp8): bytes moved per element of each operand cast to FP8
   * (read 16-bit, write 8-bit, amax: 3) and fixed time per FP8 GEMM for the scaling
   * kernels (amax reduction, scale update), s. 0 = none. */
  double fp8_cast_bytes;
  double fp8_scale_s;
  /* Rowwise FP8 scaling (torchao "rowwise"): the backward casts its operands again
   * along its own reduction dims (costdb/cost.c); false = tensorwise / delayed. */
  bool fp8_rowwise;
  /* FSDP all-gathers the FP8 linear weights in FP8 (torchtitan
   * enable_fsdp_float8_all_gather): 1 byte per parameter of an FP8 matmul's weight
   * instead of the 16-bit copy (sim/builder/zero.c). */
  bool fp8_all_gather;
  /* 16-bit models' gradients reduced in 16 bits, not fp32 (NeMo's distributed_fused_adam
   * grad_sync_dtype: bf16; Megatron-Core's grad_reduce_in_fp32 = False; gradsync.c). */
  bool grad_reduce_bf16;
  /* Tensor parallelism casts an FP8 linear's input to FP8 before its all-gather (torchao
   * PrepareFloat8ModuleInput / Float8ColwiseParallel, which torchtitan applies for tensorwise
   * recipes only): 1 byte per element unless fp8_rowwise (sim/builder/comm.c). */
  bool fp8_tp_all_gather;
  /* A dropless MoE dispatch makes the host wait for the device: the host needs the
   * routed token counts to size the all-to-all and the expert GEMMs (Megatron-Core's
   * alltoall dispatcher synchronises on its device-to-host copy, DeepEP's and HybridEP's
   * dispatch wait on the CPU for the counts; sim/builder/kernels.c). */
  bool moe_dispatch_sync;
  /* DeepEP's received top-k indices become a multi-hot routing map by boolean indexing
   * (Megatron-Core's _DeepepManager._indices_to_multihot without the experimental flag):
   * under the deepep dispatcher the host waits for the dispatch's received tokens before
   * it issues the next kernel, and for the stream before the dispatch's backward
   * (sim/builder/kernels.c mark_multihot_sync). */
  bool moe_multihot_sync;
  /* A grouped expert linear (a matmul over the expert dim) launches its quantize and GEMM
   * kernels once per local expert from C++, each at the launch overhead, as Transformer
   * Engine's GroupedLinear does (a gate and an
   * up projection of one input are one GroupedLinear, Megatron-Core's linear_fc1;
   * sim/builder/kernels.c expert_host_work). */
  bool moe_grouped_host_calls;
  /* The MoE token dispatcher: alltoall (the zero value) sends one copy per (token, expert);
   * deepep / hybridep send a token once per destination rank inside a node and once per
   * destination node across nodes, forwarding over NVLink (sim/builder/moe_a2a.c). */
  psim_moe_dispatcher moe_dispatcher;
  /* Megatron-Core's overlap_moe_expert_parallel_comm (combined 1F1B): without pipelining,
   * micro-batch i's backward and i+1's forward issue as one merged slot, their MoE
   * segments alternating so that one's all-to-all runs under the other's kernels
   * (sim/builder/schedules.c, kernels.c psim_build_issue_merged). */
  bool moe_a2a_overlap;
  psim_optim_impl optimizer;
  psim_dp_bucket_rule dp_bucket; /* default bucket size (PSIM_BUCKET_DDP: the strategy's) */
  /* GEMM efficiency by shape: wave quantisation of 128x128 (Ampere) / 128x256
   * (Hopper and later) output tiles on the SM count (costdb/kernels.h). */
  bool wave_quant;
  /* Multiplies the device type's GEMM gemm_max (a fitted stack parameter: the
   * GEMM library and its heuristics; 0 reads as 1). */
  double gemm_scale;
  /* Overlap and runtime flags: read by no cost yet (docs/stacks.md lists them);
   * the builder may read them later. */
  bool dp_overlap, tp_overlap, pp_overlap, cuda_graphs, compile;
  /* With tp_overlap: Transformer Engine's backward pairs too (docs/stacks.md tp_overlap_bwd). */
  bool tp_overlap_bwd;
  int32_t comm_sms; /* SMs NCCL/userbuffers take from compute; 0 = unknown */
  /* Fitted per device type (the calibration's one set per stack and device type):
   * device types named here use these scales instead of attn_scale / gemm_scale. */
  struct psim_stack_fit {
    char type[24];
    double attn_scale, gemm_scale;
  } fit[PSIM_STACK_FIT_MAX];
  int32_t n_fit;
} psim_stack;

/* attn_scale and gemm_scale of s for device type name (the per-type fit, else the
 * stack's own; 0 read as 1). */
void psim_stack_scales(const psim_stack *s, const char *type, double *attn, double *gemm);

/* Parameters per gradient bucket under s's rule for a data-parallel group of dp ranks
 * when the strategy gives no bucket_size; 0 = the strategy's bucket_size (bytes). */
double psim_stack_bucket_params(const psim_stack *s, int32_t dp);

/* The built-in profiles (docs/stacks.md), NULL-terminated. */
const char *const *psim_stack_builtin_names(void);
/* Fills s with built-in profile name; PSIM_EINPUT naming it when unknown. */
psim_status psim_stack_builtin(const char *name, psim_stack *s);
/* A profile object (plansim.stack/1, docs/stacks.md): "base" names a built-in the
 * object starts from; errors name file and JSON path. */
psim_status psim_stack_from_json(const char *file, const struct cJSON *root, psim_stack *s);
/* A "stack" value inside another file (cluster, strategy): a name or file as
 * psim_stack_select, or a profile object; errors carry j's path. */
struct psim_jctx;
psim_status psim_stack_from_value(struct psim_jctx *j, const struct cJSON *v, psim_stack *s);
/* The "stack" key of obj, when present, into s (unchanged when absent). */
psim_status psim_stack_from_key(struct psim_jctx *j, const struct cJSON *obj, psim_stack *s);
/* NAME of a built-in profile or a FILE holding a profile object. */
psim_status psim_stack_select(const char *name_or_file, psim_stack *s);
/* The name to print ("megatron-lm-2021" for the zero value). */
const char *psim_stack_name(const psim_stack *s);
const char *psim_optim_impl_name(psim_optim_impl o);

#endif
