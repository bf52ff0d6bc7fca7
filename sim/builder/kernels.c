/* kernels.c - compute tasks: shard costs, kernel issue on each device's
 * stream, and the pipeline schedules' issue order. */
#include "sim/builder/build_impl.h"
#include "sim/builder/routing.h"

#include <math.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/engine/collective.h"

/* ---- task creation ------------------------------------------------------- */

/* ---- selective recompute: the attention core ----------------------------- */

/* Selective recompute drops the attention core and nothing else: QK^T,
 * softmax, dropout on the probabilities and AV (Korthikanti et al. 2022,
 * section 5; Megatron-LM's --recompute-granularity selective checkpoints
 * only core attention, megatron/core/transformer/attention.py,
 * _checkpointed_attention_forward). The core is found by op kind and by the
 * kinds of the tensors an op reads, never by dim sizes: fused attention, an
 * op the model tags "attn_core", or (untagged models) the chain
 * activation-by-activation matmul (QK^T) -> elementwise / dropout ->
 * softmax -> elementwise / dropout -> activation-by-activation matmul (AV).
 * The linear layers (qkv, proj, fc1, fc2) read a weight and are never in it. */

/* Longest chain of elementwise / dropout ops walked through (scale, mask,
 * dropout between the products and the softmax). */
#define ATTN_CHAIN_MAX 8

static bool is_weight_free_matmul(const psim_model *m, const psim_op *op) {
  if (op->kind != PSIM_OP_MATMUL)
    return false;
  for (int32_t i = 0; i < op->n_in; i++)
    if (m->tensors[op->in[i]].kind == PSIM_TENSOR_WEIGHT)
      return false;
  return true;
}

static bool is_passthrough(const psim_op *op) {
  return op->kind == PSIM_OP_DROPOUT || op->kind == PSIM_OP_ELEMENTWISE;
}

/* The producer of op's first activation input, or NULL. */
static const psim_op *activation_producer(const psim_model *m, const psim_op *op) {
  for (int32_t i = 0; i < op->n_in; i++) {
    const psim_tensor *t = &m->tensors[op->in[i]];
    if (t->kind != PSIM_TENSOR_WEIGHT)
      return t->producer >= 0 ? &m->ops[t->producer] : NULL;
  }
  return NULL;
}

/* Walks producers back from op's activation input i through elementwise /
 * dropout ops; returns the first other op reached, or NULL. */
static const psim_op *through_chain(const psim_model *m, const psim_op *op, int32_t i) {
  const psim_tensor *t = &m->tensors[op->in[i]];
  const psim_op *p =
      t->kind != PSIM_TENSOR_WEIGHT && t->producer >= 0 ? &m->ops[t->producer] : NULL;
  for (int k = 0; p && is_passthrough(p) && k < ATTN_CHAIN_MAX; k++)
    p = activation_producer(m, p);
  return p && !is_passthrough(p) ? p : NULL;
}

/* A softmax over the product of two activations (QK^T), not a router's. */
static bool is_score_softmax(const psim_model *m, const psim_op *op) {
  if (op->kind != PSIM_OP_SOFTMAX || op->n_in < 1)
    return false;
  const psim_op *p = through_chain(m, op, 0);
  return p && is_weight_free_matmul(m, p);
}

/* QK^T: a weight-free matmul whose product a later softmax of its layer
 * normalises (ops are in topological order). */
static bool is_qk(const psim_model *m, const psim_op *op) {
  if (!is_weight_free_matmul(m, op))
    return false;
  for (const psim_op *q = op + 1; q < m->ops + m->n_ops && q->layer == op->layer; q++)
    if (q->kind == PSIM_OP_SOFTMAX && q->n_in > 0 && through_chain(m, q, 0) == op)
      return true;
  return false;
}

/* AV: a weight-free matmul reading the (dropped-out) probabilities. */
static bool is_av(const psim_model *m, const psim_op *op) {
  if (!is_weight_free_matmul(m, op))
    return false;
  for (int32_t i = 0; i < op->n_in; i++) {
    const psim_op *p = through_chain(m, op, i);
    if (p && is_score_softmax(m, p))
      return true;
  }
  return false;
}

static bool is_attention_core(const psim_model *m, const psim_op *op) {
  if (op->kind == PSIM_OP_ATTENTION || (op->tag && strcmp(op->tag, "attn_core") == 0))
    return true;
  if (is_passthrough(op)) { /* dropout after the softmax, scale / mask before it */
    const psim_op *p = op->n_in > 0 ? through_chain(m, op, 0) : NULL;
    return p && (is_score_softmax(m, p) || is_qk(m, p));
  }
  return is_score_softmax(m, op) || is_qk(m, op) || is_av(m, op);
}

/* ---- op-level selective recompute (torchtitan) --------------------------- */

/* A matmul reading a weight (a linear layer), not QK^T / AV. */
static bool is_weight_matmul(const psim_model *m, const psim_op *op) {
  if (op->kind != PSIM_OP_MATMUL)
    return false;
  for (int32_t i = 0; i < op->n_in; i++)
    if (m->tensors[op->in[i]].kind == PSIM_TENSOR_WEIGHT)
      return true;
  return false;
}

/* torchtitan's op-level selective activation checkpointing (activation_checkpoint
 * mode "selective", selective_ac_option "op": the default of its llama3_8b.toml at
 * 9dec370, 820504e and v0.2.2). Each transformer block runs under
 * create_selective_checkpoint_contexts with a policy that saves the outputs of
 * aten.mm, the SDPA kernels, _c10d_functional.reduce_scatter_tensor and the
 * Float8 amax ops, "except every second mm" (a per-block mm counter, odd ones
 * saved), and recomputes everything else (torchtitan/parallelisms/
 * parallelize_llama.py _save_list / _apply_ac_to_transformer_block at 9dec370,
 * torchtitan/models/llama3/parallelize_llama.py at 820504e). In torchtitan's
 * order (wq, wk, wv, wo, w1, w3, w2) wk, wo and w3 are recomputed, with the norms,
 * RoPE, SwiGLU, the residual adds and, under tensor parallelism, the sequence-
 * parallel all-gathers feeding them (their producers recompute, so comm.c builds
 * the gather again). A recomputed matmul whose output is a partial sum over
 * tensor parallelism (wo, row-parallel) feeds only the reduce-scatter whose
 * output the policy saves: the recompute would be dead code, which torch.compile
 * (every tensor-parallel row) drops, so it is not run. */
static bool op_sac_recomputed(const psim_build *b, int32_t o) {
  const psim_model *m = b->m;
  const psim_op *op = &m->ops[o];
  if (is_attention_core(m, op))
    return false; /* SDPA's output is saved */
  if (!is_weight_matmul(m, op))
    return true;
  int32_t n = 0; /* this matmul's place among its layer's weight matmuls, from 1 */
  for (int32_t p = o; p >= 0 && m->ops[p].layer == op->layer; p--)
    n += is_weight_matmul(m, &m->ops[p]);
  if (n % 2 == 1)
    return false;
  for (int32_t j = 0; j < op->n_out; j++)
    if (psim_build_partial_mask(b, o, op->out[j], PSIM_DIR_FWD) != 0)
      return false;
  return true;
}

/* Whether op o is recomputed in backward under the strategy's mode. */
bool psim_build_recomputed(const psim_build *b, int32_t o) {
  const psim_op *op = &b->m->ops[o];
  if (op->block < 0)
    return false; /* embedding and head are not checkpointed (Megatron) */
  switch (b->s->recompute) {
  case PSIM_RECOMPUTE_FULL: /* a layer of its method or every N-th of its rank (rc_unit) */
    if (b->rc_unit)
      return b->rc_unit[op->layer] >= 0;
    return b->s->recompute_every <= 1 || (op->repeat_index + 1) % b->s->recompute_every == 0;
  case PSIM_RECOMPUTE_SELECTIVE: return is_attention_core(b->m, op);
  case PSIM_RECOMPUTE_OP: return op_sac_recomputed(b, o);
  default: return false;
  }
}

/* Megatron-Core's recompute methods over each model chunk's transformer layers
 * (megatron/core/recompute.py checkpointed_forward, NVIDIA/Megatron-LM d98e8a6): a chunk is
 * a virtual stage, its transformer layers the layers holding ops of repeated blocks, counted
 * in op order (a layer's ops are consecutive). uniform N: layers r = 0, 1, ... of the chunk
 * in groups [kN, (k+1)N), each recomputed as one unit; block N: layers r < N recomputed one
 * by one, the rest not. torchtitan's every N-th block (recompute_every N): its counter
 * (_layer_sac_count, torchtitan v0.2.2 torchtitan/distributed/activation_checkpoint.py) is
 * the process's, so it counts the blocks of one pipeline rank across its chunks in order,
 * whatever their kind: blocks r = 0, 1, ... of the rank with (r + 1) % N == 0 recomputed. */
psim_status psim_build_recompute_units(psim_build *b) {
  const psim_model *m = b->m;
  const psim_strategy *s = b->s;
  bool every = s->recompute == PSIM_RECOMPUTE_FULL && s->recompute_every > 1;
  if ((!psim_strategy_partial_recompute(s) && !every) || m->n_layers <= 0)
    return PSIM_OK;
  int32_t nv = s->n_stages * (s->virtual_stages > 0 ? s->virtual_stages : 1);
  b->rc_unit = psim_malloc(sizeof *b->rc_unit * (size_t)m->n_layers);
  int32_t *seen = psim_calloc((size_t)nv * 3 + 3, sizeof *seen); /* per chunk: count, last, first */
  if (!b->rc_unit || !seen) {
    psim_free(seen);
    return psim_error(PSIM_ENOMEM, "out of memory");
  }
  memset(b->rc_unit, 0xff, sizeof *b->rc_unit * (size_t)m->n_layers);
  bool block = s->recompute_method == PSIM_RCM_BLOCK;
  int32_t n = s->recompute_layers;
  for (int32_t o = 0; o < m->n_ops; o++) {
    const psim_op *op = &m->ops[o];
    int32_t v = s->ops[o].stage;
    if (op->block < 0 || v < 0 || v >= nv || op->layer < 0 || op->layer >= m->n_layers)
      continue;
    /* c[0]: layers seen + 1 (0: none), c[1]: the last, c[2]: group; per chunk, or per
     * pipeline rank (psim_schedule_chunk_rank, kernels.c issue order) for every-N */
    int32_t *c = &seen[3 * (every ? psim_schedule_chunk_rank(s->schedule, s->n_stages, v) : v)];
    if (c[0] > 0 && c[1] == op->layer)
      continue;
    int32_t r = c[0]; /* the layer's rank in its chunk (its pipeline rank for every-N) */
    c[0] = r + 1;
    c[1] = op->layer;
    if (every) {
      b->rc_unit[op->layer] = (r + 1) % s->recompute_every == 0 ? op->layer : -1;
      continue;
    }
    if (block) {
      b->rc_unit[op->layer] = r < n ? op->layer : -1;
      continue;
    }
    if (r % n == 0)
      c[2] = op->layer;
    b->rc_unit[op->layer] = c[2];
  }
  psim_free(seen);
  return PSIM_OK;
}

/* need_sync: the next kernel starts a pipeline slot (drains only when pp > 1),
 * follows a host synchronisation of the MoE dispatcher (always drains) or reads
 * what a DeepEP dispatch received (waits for its inputs: mark_multihot_sync). */
enum { SYNC_SLOT = 1, SYNC_DISPATCH = 2, SYNC_INPUTS = 3 };

/* What the host waits for before it issues the next kernel on device dev: its
 * stream to drain (PSIM_ISSUE_DRAIN: the first kernel of a pipeline slot, a
 * dropless dispatch), that and the kernel's inputs (PSIM_ISSUE_INPUTS), or
 * nothing (0); one kernel takes it. */
static int32_t take_sync(psim_build *b, int32_t dev) {
  uint8_t why = b->need_sync[dev];
  b->need_sync[dev] = 0;
  if (!why || b->last_task[dev] < 0)
    return 0;
  if (why == SYNC_INPUTS)
    return PSIM_ISSUE_INPUTS;
  return why == SYNC_DISPATCH || b->s->n_stages > 1 ? PSIM_ISSUE_DRAIN : 0;
}

/* Whether the stack's moe_multihot_sync applies: DeepEP's dispatcher under it. */
static bool multihot_sync(const psim_build *b) {
  return b->c->stack.moe_multihot_sync && b->c->stack.moe_dispatcher == PSIM_MOE_DEEPEP;
}

/* A dropless MoE dispatch's forward (and recompute) under the stack's
 * moe_dispatch_sync: the host waits for the device before issuing it, as
 * it needs the routed token counts on the host to size the all-to-all and
 * the expert GEMMs. Megatron-Core's MoEAlltoAllTokenDispatcher (Megatron-LM
 * megatron/core/transformer/moe/token_dispatcher.py @ 0014f137) copies the
 * counts to the host on a side stream after preprocess() and waits on that
 * copy's event (cuda_sync_point "before_ep_alltoall" with ep or tp > 1, else
 * "before_finish"; "before_permutation_1" with a capacity but no padding),
 * except with moe_pad_expert_input_to_capacity (drop_and_pad: static splits,
 * "no_sync"), which the IR's capacity dispatch is; the flex dispatcher's
 * DeepEP dispatch waits on the CPU for the GPU's counts ("the CPU will wait
 * for GPU's signal to arrive", fused_a2a.py @ 02ad939b), HybridEP's unless
 * it is given num_permuted_tokens. The event follows the router and the
 * count exchange: the drain is taken before the dispatch's own kernel (the
 * permutation, issued before the wait in Megatron-Core: at most one kernel
 * early). Backward passes reuse the forward's splits: no wait. */
static void mark_dispatch_sync(psim_build *b, int32_t o, int pass_kind, int32_t dev) {
  const psim_op *op = &b->m->ops[o];
  if (b->c->stack.moe_dispatch_sync && (pass_kind == PSIM_DIR_FWD || pass_kind == PSIM_DIR_REC) &&
      op->kind == PSIM_OP_DISPATCH && op->attrs.dropless)
    b->need_sync[dev] = SYNC_DISPATCH;
}

/* After a DeepEP dispatch's forward (and recompute) kernel under the stack's
 * moe_multihot_sync: the next kernel the host issues waits for the dispatch's
 * received tokens. Megatron-Core's _DeepepManager (Megatron-LM
 * megatron/core/transformer/moe/token_dispatcher.py @ b0cc2706, which
 * Megatron-Bridge v0.3.0 pins; core_v0.15.0 alike) turns DeepEP's received top-k
 * indices into a multi-hot map for the expert GEMMs; without the experimental
 * flag (megatron/core/config.py ENABLE_EXPERIMENTAL) _indices_to_multihot does it
 * with indices[mask], repeat_interleave(mask.sum(dim=1)) and probs[mask], each
 * sizing its output from device data, so the host waits on the received tokens
 * (the first of the three; the other two, a few element-wise kernels later, and
 * the backward's before the dispatch's backward all-to-all, which this host does
 * not issue, are not modelled). The experimental fused_indices_to_multihot (one
 * Triton kernel) does not wait. */
static void mark_multihot_sync(psim_build *b, int32_t o, int pass_kind, int32_t dev) {
  if (b->m->ops[o].kind == PSIM_OP_DISPATCH && multihot_sync(b) &&
      (pass_kind == PSIM_DIR_FWD || pass_kind == PSIM_DIR_REC))
    b->need_sync[dev] = SYNC_INPUTS;
}

/* What the host does to issue a kernel: calls from Python (each runtime.host_issue_s) and
 * launches from a C++ loop inside one of them (each a kernel launch's overhead). */
typedef struct host_work {
  int32_t calls, launches;
} host_work;

/* The host issues each kernel (runtime.host_issue_s) and runs ahead of the
 * device, except at the start of a pipeline slot when pp > 1 (Megatron-LM's
 * point-to-point calls synchronise the device first) and before a dropless
 * dispatch (mark_dispatch_sync). False when the kernel has no issue latency. */
static bool host_issue(psim_build *b, int32_t dev, host_work hw, psim_task_issue *out) {
  const psim_device_type *t = &b->c->types[b->c->devices[dev].type];
  double issue_s = t->rt.host_issue_s;
  if (issue_s <= 0 || (hw.calls <= 0 && hw.launches <= 0))
    return false;
  /* a launch from a C++ loop costs the host what a kernel launch costs (the stack's
   * launch_overhead, else the device type's, as costdb/cost.c charges the device) */
  double launch_s = b->c->stack.launch_s > 0 ? b->c->stack.launch_s : t->launch_s;
  *out = (psim_task_issue){issue_s * hw.calls + launch_s * hw.launches,
                           psim_res_host(b->c->n_devices, b->c->n_links, dev), take_sync(b, dev)};
  return true;
}

/* Records kernel id as the last of device dev's stream (next_compute has
 * room for it). */
static void stream_push(psim_build *b, int32_t dev, int32_t id) {
  int32_t *last = &b->last_task[dev];
  b->next_compute[id] = -1;
  if (*last >= 0)
    b->next_compute[*last] = id;
  *last = id;
}

/* Appends a kernel to its device's stream (issue order = run order). */
static psim_status chain(psim_build *b, int32_t dev, double duration_s, const psim_task_info *info,
                         host_work hw, int32_t *id) {
  psim_task_issue is;
  bool issued = host_issue(b, dev, hw, &is);
  PSIM_CHECK(psim_tg_add_kernel(&b->g, duration_s, psim_res_compute(dev), info, issued ? &is : NULL,
                                b->last_task[dev], id));
  PSIM_CHECK(PSIM_VEC_RESERVE(b->next_compute, b->cap_next, (size_t)b->g.n_tasks));
  stream_push(b, dev, *id);
  return PSIM_OK;
}

/* Kernels plus communication calls the host issues for a pass of op o: a
 * forward whose output is a partial sum also calls the reduction; a
 * backward also reduces each input gradient that is a partial sum. */
static int32_t host_calls(const psim_build *b, int32_t o, psim_pass pass) {
  const psim_op *op = &b->m->ops[o];
  int32_t n = psim_cost_kernels(b->m, op, pass);
  if (pass == PSIM_PASS_FWD) {
    for (int32_t j = 0; j < op->n_out; j++)
      n += psim_build_partial_mask(b, o, op->out[j], PSIM_DIR_FWD) != 0;
    return n;
  }
  for (int32_t i = 0; i < op->n_in; i++)
    n += b->m->tensors[op->in[i]].kind == PSIM_TENSOR_ACTIVATION &&
         psim_build_partial_mask(b, o, op->in[i], PSIM_DIR_BWD) != 0;
  return n;
}

/* The dim index of a grouped expert matmul's expert dim (role expert, in its input and
 * its weight; the router's input has none), or -1. */
static int32_t expert_dim_index(const psim_model *m, const psim_op *op) {
  if (op->kind != PSIM_OP_MATMUL || op->n_in < 2)
    return -1;
  for (int32_t i = 0; i < op->n_dims; i++) {
    int32_t d = op->dims[i].dim;
    if (m->dims[d].role == PSIM_ROLE_EXPERT &&
        psim_build_dim_in_tensor(&m->tensors[op->in[0]], d) &&
        psim_build_dim_in_tensor(&m->tensors[op->in[1]], d))
      return i;
  }
  return -1;
}

/* Host work of a grouped expert linear's pass under the stack's moe_grouped_host_calls:
 * Transformer Engine's GroupedLinear (transformer_engine/pytorch/module/grouped_linear.py,
 * v2.10 @ 769ed778) takes the per-expert token counts as a host list (Megatron-Core's
 * TEGroupedMLP.forward: tokens_per_expert.tolist(), experts.py @ core_v0.15.0) and, inside
 * its one Python call per GEMM kind, launches for each of its num_gemms local experts a
 * quantize of the split (tex.split_quantize: one per split for MXFP8 and current scaling,
 * cast.cpp) and a GEMM (general_grouped_gemm: one cuBLAS call per split,
 * cublaslt_gemm.cu multi_stream_cublas_gemm) forward; backward a quantize of the output
 * gradient's split, the dgrad and the wgrad GEMM. So the op's calls stay as they are (n:
 * its kernels and the reductions of partial sums) and it adds, per local expert, its GEMMs
 * (psim_cost_kernels: 1 forward, one per gradient backward) plus one quantize when FP8, as
 * C++ launches. A gate and an up projection reading the same input are one GroupedLinear
 * (Megatron-Core's linear_fc1 of width 2 x moe_ffn_hidden_size when gated_linear_unit): the
 * later of the two issues neither its GEMM calls nor launches. */
static void expert_host_work(const psim_build *b, int32_t o, const int64_t *ext, psim_pass pass,
                             int32_t n, psim_task_cost *tc) {
  const psim_model *m = b->m;
  const psim_op *op = &m->ops[o];
  int32_t ie;
  tc->host_calls = (uint8_t)n;
  tc->host_launches = 0;
  if (!b->c->stack.moe_grouped_host_calls || (ie = expert_dim_index(m, op)) < 0)
    return;
  int32_t own = psim_cost_kernels(m, op, pass); /* the grouped GEMM's, in n */
  for (int32_t q = o - 1; q >= 0 && m->ops[q].layer == op->layer; q--)
    if (m->ops[q].n_in > 0 && m->ops[q].in[0] == op->in[0] &&
        expert_dim_index(m, &m->ops[q]) >= 0) {
      tc->host_calls = (uint8_t)(n - own); /* the gate's GroupedLinear issued it */
      return;
    }
  int64_t launches = ext[ie] * (own + (op->attrs.fp8 ? 1 : 0));
  tc->host_launches = (uint16_t)(launches < UINT16_MAX ? launches : UINT16_MAX);
}

/* The change of saved activations at the end of a shard's pass: they live
 * from the forward's end to the backward's end; recomputed ones from the
 * recompute's end to the backward's end. Depends on the producers' shards
 * (memory.c), unlike the rest of the cost. */
static double shard_mem_bytes(const psim_build *b, int32_t o, const int64_t *ext, int pass_kind) {
  bool rc = psim_build_recomputed(b, o);
  if (pass_kind != PSIM_DIR_BWD)
    return psim_memory_saved_bytes(b, o, ext, pass_kind == PSIM_DIR_FWD && rc);
  return -(psim_memory_saved_bytes(b, o, ext, rc) +
           (rc ? psim_memory_saved_bytes(b, o, ext, false) : 0));
}

/* Cost, FLOPs and memory change of one shard's pass: the same for every
 * micro-batch, so computed once per (shard, pass) and reused. */
static const psim_task_cost *shard_cost(psim_build *b, int32_t o, int32_t k, int pass_kind) {
  psim_task_cost *tc = &b->costs[((size_t)b->loc_first[o] + (size_t)k) * 3 + (size_t)pass_kind];
  if (tc->valid == PSIM_COST_VALID)
    return tc;
  const psim_op_local *loc = &b->locals[b->loc_first[o] + k];
  int64_t ext[PSIM_MAX_OP_DIMS];
  psim_build_shard_extents(b, o, loc->shard, ext);
  psim_routing_shard_extents(b, o, loc->shard, ext); /* MoE: the tokens routed to its experts */
  if (tc->valid == PSIM_COST_MEM_STALE) {            /* the op is prev's, a producer is not */
    tc->mem_bytes = shard_mem_bytes(b, o, ext, pass_kind);
    tc->valid = PSIM_COST_VALID;
    return tc;
  }
  psim_pass pass = pass_kind == PSIM_DIR_BWD ? PSIM_PASS_BWD : PSIM_PASS_FWD;
  psim_cost_origin origin = PSIM_ORIGIN_ESTIMATED;
  tc->duration_s =
      psim_cost_compute(b->c, loc->device, b->m, &b->m->ops[o], ext, pass, b->o->costdb, &origin) -
      psim_build_fp8_cast_saving_s(b, o, loc->device, ext, pass_kind);
  tc->origin = (uint8_t)origin;
  double bytes = 0;
  psim_op_shard_work(b->m, &b->m->ops[o], ext, pass, &tc->flops, &bytes);
  tc->mem_bytes = shard_mem_bytes(b, o, ext, pass_kind);
  expert_host_work(b, o, ext, pass, host_calls(b, o, pass), tc);
  tc->valid = PSIM_COST_VALID;
  return tc;
}

/* Tensorwise Float8 under tensor parallelism (the stack's fp8_tp_all_gather without
 * rowwise scaling): torchtitan's plan puts PrepareFloat8ModuleInput on "attention"
 * and "feed_forward" (apply_tp, torchtitan/parallelisms/parallelize_llama.py at
 * 9dec370), which casts the module's sequence-sharded input to FP8 once and
 * all-gathers the FP8 tensor; wq / wk / wv (w1 / w3) take it as it is
 * (hp_tensor_to_float8_dynamic returns a tensor already cast, torchao/float8/
 * float8_tensor_parallel.py and float8_scaling_utils.py at eab345c). The cost
 * model casts each FP8 matmul's whole gathered input (costdb/cost.c fp8_casts):
 * the part not spent is that cast less the producer shard's, shared by the
 * tensor's FP8 matmuls. Forward and recompute only; 0 otherwise. */
double psim_build_fp8_cast_saving_s(const psim_build *b, int32_t o, int32_t dev, const int64_t *ext,
                                    int pass_kind) {
  const psim_model *m = b->m;
  const psim_op *op = &m->ops[o];
  const psim_stack *st = &b->c->stack;
  if (pass_kind == PSIM_DIR_BWD || !st->fp8_tp_all_gather || st->fp8_rowwise ||
      op->kind != PSIM_OP_MATMUL || !op->attrs.fp8 || op->n_in < 2 ||
      psim_cost_fp8_cast_s(b->c, dev, m, op, ext, PSIM_PASS_FWD, b->o->costdb) <= 0)
    return 0; /* no cast in the cost (a cost database's time, no FP8 casts) */
  int32_t t = op->in[0];
  int32_t p = m->tensors[t].producer;
  if (p < 0 || m->tensors[t].kind != PSIM_TENSOR_ACTIVATION)
    return 0;
  double whole = 1; /* the input at this shard's extents (the gathered tensor) */
  for (int32_t j = 0; j < m->tensors[t].rank; j++) {
    int32_t i = psim_op_dim_index(op, m->tensors[t].dims[j]);
    whole *= i >= 0 ? (double)ext[i] : (double)m->dims[m->tensors[t].dims[j]].size;
  }
  double shard = psim_memory_producer_shard_elems(b, p, t);
  if (shard >= whole)
    return 0; /* not gathered: the matmul casts its own input */
  int32_t users = 0;
  for (int32_t q = 0; q < m->n_ops; q++)
    if (m->ops[q].kind == PSIM_OP_MATMUL && m->ops[q].attrs.fp8 && m->ops[q].n_in > 0 &&
        m->ops[q].in[0] == t)
      users++;
  return psim_cost_fp8_cast_elems_s(b->c, dev, whole) -
         psim_cost_fp8_cast_elems_s(b->c, dev, shard) / (users > 0 ? users : 1);
}

/* Counts a kernel's cost in the build's totals and its memory event. */
static inline psim_status account_kernel(psim_build *b, const psim_task_cost *tc, int32_t id,
                                         int32_t device) {
  b->compute_by_origin[tc->origin] += tc->duration_s;
  b->hardware_flops += tc->flops;
  if (tc->mem_bytes != 0) {
    PSIM_CHECK(PSIM_VEC_RESERVE(b->mem, b->cap_mem, b->n_mem + 1));
    b->mem[b->n_mem++] = (psim_mem_event){id, device, tc->mem_bytes};
  }
  return PSIM_OK;
}

/* A view (reshape, split) issues no kernel: a zero-duration task off the
 * stream, done when its input is there, so that waiting for a gathered input
 * does not hold the kernels issued after it. */
static psim_status view_task(psim_build *b, psim_task_info *info, int32_t *id) {
  info->kind = PSIM_TASK_BARRIER;
  PSIM_CHECK(psim_tg_add_task(&b->g, 0, NULL, 0, info, id));
  PSIM_CHECK(PSIM_VEC_RESERVE(b->next_compute, b->cap_next, (size_t)b->g.n_tasks));
  b->next_compute[*id] = -1;
  return PSIM_OK;
}

/* The ring steps of a pass of op o (context.c): forward and recompute of an
 * attention under context parallelism, else 1. */
static int32_t ring_steps(const psim_build *b, int32_t o, int pass_kind) {
  return pass_kind == PSIM_DIR_BWD || pass_kind == PSIM_DIR_WGT ? 1 : psim_build_cp_steps(b, o);
}

/* Weight gradients are a GEMM of the input-gradient's size for a matmul or convolution
 * (dW = x^T dy against dx = dy W^T: the same FLOPs), and the same pass over x-hat and dy for
 * a norm's gamma and beta as for its dx; an embedding's backward is all weight gradient (its
 * ids have none). torch.distributed.pipelining runs the two as separate autograd passes
 * (stage_backward_input, stage_backward_weight in _backward.py, pytorch 00722e648b). */
double psim_build_weight_share(const psim_build *b, int32_t o) {
  const psim_op *op = &b->m->ops[o];
  bool weights = false;
  for (int32_t i = 0; i < op->n_in; i++)
    weights |= b->m->tensors[op->in[i]].kind == PSIM_TENSOR_WEIGHT;
  if (!weights)
    return 0;
  return op->kind == PSIM_OP_EMBEDDING ? 1.0 : 0.5;
}

double psim_build_wgrad_share(const psim_build *b, int32_t o) {
  return b->wgt ? psim_build_weight_share(b, o) : 0;
}

/* The weight gradient's share w of n host calls (at least one of them when there are any;
 * wgt) or the input gradient's, the rest. */
static int32_t wgrad_part(int32_t n, double w, bool wgt) {
  int32_t nw = n > 0 ? (int32_t)(n * w + 0.5) : 0;
  if (nw < 1 && n > 0)
    nw = 1;
  return wgt ? nw : n - nw;
}

/* The cost of shard k's pass: the backward split into its input-gradient (PSIM_DIR_BWD) and
 * weight-gradient (PSIM_DIR_WGT) parts by psim_build_wgrad_share. The saved activations
 * are freed at the weight-gradient kernel's end, which reads them. */
static psim_task_cost pass_cost(psim_build *b, int32_t o, int32_t k, int pass_kind) {
  psim_task_cost c = *shard_cost(b, o, k, pass_kind == PSIM_DIR_WGT ? PSIM_DIR_BWD : pass_kind);
  double w =
      pass_kind == PSIM_DIR_WGT || pass_kind == PSIM_DIR_BWD ? psim_build_wgrad_share(b, o) : 0;
  if (w <= 0)
    return c;
  double f = pass_kind == PSIM_DIR_WGT ? w : 1 - w;
  c.host_calls = (uint8_t)wgrad_part(c.host_calls, w, pass_kind == PSIM_DIR_WGT);
  c.host_launches = (uint16_t)wgrad_part(c.host_launches, w, pass_kind == PSIM_DIR_WGT);
  c.duration_s *= f;
  c.flops *= f;
  c.mem_bytes = pass_kind == PSIM_DIR_WGT ? c.mem_bytes : 0;
  return c;
}

/* Transformer Engine's backward TP pairs (context.c psim_build_tp_bwd_plan): the dgrad (cut
 * around a ring-exchange all-gather), then the wgrad (under a bulk reduce-scatter); *id is
 * the kernel the incoming gradient and the input gradient's collective attach to. */
static psim_status tp_backward_pairs(psim_build *b, int32_t o, const psim_task_cost *tc,
                                     const psim_task_info *info, host_work calls,
                                     const psim_tp_bwd_plan *p, int32_t *id) {
  int32_t dev = info->device, last;
  if (p->early_s > 0) {
    PSIM_CHECK(chain(b, dev, p->early_s, info, calls, &last));
    calls = (host_work){0, 0};
  }
  PSIM_CHECK(chain(b, dev, p->dgrad_s, info, calls, id));
  last = *id;
  if (p->wgrad_s > 0)
    PSIM_CHECK(chain(b, dev, p->wgrad_s, info, (host_work){0, 0}, &last));
  b->compute_by_origin[tc->origin] += p->extra_s;
  b->last_bwd[dev] = last;
  mark_multihot_sync(b, o, PSIM_DIR_BWD, dev);
  return account_kernel(b, tc, last, dev);
}

static psim_status compute_task(psim_build *b, int32_t o, int32_t k, int32_t mu, int pass_kind,
                                int32_t *id) {
  const psim_op_local *loc = &b->locals[b->loc_first[o] + k];
  psim_task_cost cost; /* a split backward's part; else the shard's cost as it is */
  const psim_task_cost *tc =
      b->wgt ? (cost = pass_cost(b, o, k, pass_kind), &cost) : shard_cost(b, o, k, pass_kind);
  bool backward = pass_kind == PSIM_DIR_BWD || pass_kind == PSIM_DIR_WGT;
  psim_task_info info = {PSIM_TASK_COMPUTE,
                         pass_kind == PSIM_DIR_FWD ? PSIM_TP_FWD
                         : backward                ? PSIM_TP_BWD
                                                   : PSIM_TP_RECOMPUTE,
                         (int16_t)b->s->ops[o].stage,
                         o,
                         mu,
                         loc->device,
                         loc->shard};
  if (psim_build_is_view(&b->m->ops[o]) && tc->duration_s == 0)
    return view_task(b, &info, id);
  int32_t steps = ring_steps(b, o, pass_kind);
  bool has_work = tc->duration_s > 0; /* a kernel of no time issues nothing */
  host_work calls = {has_work ? tc->host_calls : 0, has_work ? tc->host_launches : 0};
  mark_dispatch_sync(b, o, pass_kind, loc->device);
  psim_tp_bwd_plan plan;
  if (pass_kind == PSIM_DIR_BWD && psim_build_tp_bwd_plan(b, o, k, tc->duration_s, &plan))
    return tp_backward_pairs(b, o, tc, &info, calls, &plan, id);
  bool gather = false; /* async TP's all-gather chunks (else a context-parallel ring) */
  if (steps == 1 && !backward)
    gather = (steps = psim_build_tp_gather_chunks(b, o, k)) > 1;
  int32_t scatter = backward ? 1 : psim_build_tp_scatter_chunks(b, o);
  double total_s = tc->duration_s; /* async TP: n GEMMs of 1/n of the rows (context.c) */
  if (gather || scatter > 1) {
    int32_t n = gather ? steps : scatter;
    total_s = n * psim_build_tp_chunk_s(b, o, k, pass_kind, n, tc->duration_s);
    b->compute_by_origin[tc->origin] += total_s - tc->duration_s;
  }
  double last_s = total_s;
  if (steps > 1) { /* the first steps' blocks: local data only, overlapping the K/V exchange */
    int32_t early;
    PSIM_CHECK(chain(b, loc->device, total_s * (steps - 1) / steps, &info, calls, &early));
    last_s = total_s / steps;
    calls = (host_work){0, 0};
  }
  if (scatter > 1) { /* async TP: the first chunk feeds the reduce-scatter, the rest overlaps it */
    int32_t rest;    /* ... on the SMs the reduce-scatter leaves (the stack's comm_sms) */
    double slow = psim_build_comm_sm_slowdown(b, loc->device);
    PSIM_CHECK(chain(b, loc->device, last_s / scatter, &info, calls, id));
    PSIM_CHECK(chain(b, loc->device, slow * last_s * (scatter - 1) / scatter, &info,
                     (host_work){0, 0}, &rest));
    return account_kernel(b, tc, rest, loc->device);
  }
  PSIM_CHECK(chain(b, loc->device, last_s, &info, calls, id));
  if (backward)
    b->last_bwd[loc->device] = *id;
  mark_multihot_sync(b, o, pass_kind, loc->device);
  return account_kernel(b, tc, *id, loc->device);
}

/* The task array (fwd, bwd, rec) of a pass in build x. */

/* Incremental builds: op o's kernels of one pass and micro-batch copied from
 * the last graph, where o is unchanged (so are its shard costs, but for the
 * saved activations, which shard_cost brings up to date: reuse_costs). They
 * are what compute_task would add: the same durations, resources, infos,
 * issue latencies, memory events and totals, in the same order; the stream
 * edges and the host's sync flags are made again, as they depend on the
 * kernels issued before. *done is false (nothing added) when prev's kernels
 * are not consecutive or a cost is missing. */
static psim_status copy_kernels(psim_build *b, int32_t o, int32_t mu, int pass_kind, bool *done) {
  const psim_build *p = b->inc.prev;
  int32_t n = b->loc_first[o + 1] - b->loc_first[o];
  *done = n == 0; /* no shard simulated (folding) */
  if (n == 0)
    return PSIM_OK;
  const int32_t *from = psim_build_task_slot(p, psim_build_pass_tasks(p, pass_kind), o, 0, mu);
  int32_t *to = psim_build_task_slot(b, psim_build_pass_tasks(b, pass_kind), o, 0, mu),
          t0 = from[0];
  const psim_task_cost *tc = &b->costs[(size_t)b->loc_first[o] * 3 + (size_t)pass_kind];
  const psim_op_local *loc = &b->locals[b->loc_first[o]];
  size_t stride = (size_t)b->n_micro;
  for (int32_t k = 0; k < n; k++)
    if (from[(size_t)k * stride] != t0 + k || tc[3 * k].valid == PSIM_COST_NONE)
      return PSIM_OK;
  int32_t first = b->g.n_tasks;
  PSIM_CHECK(psim_tg_append_tasks(&b->g, &p->g, t0, t0 + n));
  PSIM_CHECK(psim_tg_reserve(&b->g, (size_t)b->g.n_tasks, b->g.n_res, b->g.n_edges + (size_t)n));
  PSIM_CHECK(PSIM_VEC_RESERVE(b->next_compute, b->cap_next, (size_t)b->g.n_tasks));
  psim_task_issue *issue = b->g.issue ? b->g.issue + first : NULL;
  for (int32_t k = 0; k < n; k++) {
    int32_t id = first + k, dev = loc[k].device;
    const psim_task_cost *c = &tc[3 * k];
    if (c->valid != PSIM_COST_VALID) /* saved activations stale: computed now */
      c = shard_cost(b, o, k, pass_kind);
    mark_dispatch_sync(b, o, pass_kind, dev);
    if (issue && issue[k].res >= 0) /* host_issue gave prev's kernel a latency */
      issue[k].sync = take_sync(b, dev);
    if (b->last_task[dev] >= 0)
      psim_tg_add_edge_reserved(&b->g, b->last_task[dev], id);
    stream_push(b, dev, id);
    mark_multihot_sync(b, o, pass_kind, dev);
    if (pass_kind == PSIM_DIR_BWD)
      b->last_bwd[dev] = id;
    PSIM_CHECK(account_kernel(b, c, id, dev));
    to[(size_t)k * stride] = id;
  }
  *done = true;
  return PSIM_OK;
}

/* Op o's kernels of one pass for micro-batch mu, one per simulated shard. */
static psim_status op_kernels(psim_build *b, int32_t o, int32_t mu, int pass_kind) {
  if (pass_kind == PSIM_DIR_WGT && psim_build_wgrad_share(b, o) <= 0)
    return PSIM_OK; /* no weights: its backward is all input gradient */
  if (b->inc.prev && !b->inc.changed[o] && !psim_build_is_view(&b->m->ops[o]) &&
      ring_steps(b, o, pass_kind) == 1 && !psim_build_async_tp(b)) {
    bool done;
    PSIM_CHECK(copy_kernels(b, o, mu, pass_kind, &done));
    if (done)
      return PSIM_OK;
  }
  int32_t *arr = psim_build_pass_tasks(b, pass_kind);
  for (int32_t k = 0; k < b->loc_first[o + 1] - b->loc_first[o]; k++)
    PSIM_CHECK(compute_task(b, o, k, mu, pass_kind, psim_build_task_slot(b, arr, o, k, mu)));
  return PSIM_OK;
}

/* Recompute (forward order) then backward (reverse order) of ops lo..hi. */
static psim_status issue_layer_backward(psim_build *b, int32_t lo, int32_t hi, int32_t mu) {
  for (int32_t o = lo; o <= hi; o++)
    if (psim_build_recomputed(b, o))
      PSIM_CHECK(op_kernels(b, o, mu, PSIM_DIR_REC));
  for (int32_t o = hi; o >= lo; o--)
    PSIM_CHECK(op_kernels(b, o, mu, PSIM_DIR_BWD));
  return PSIM_OK;
}

psim_status psim_build_issue_slot(psim_build *b, int32_t vs, int32_t mu, int pass_kind) {
  const psim_model *m = b->m;
  const psim_stage *st = &b->s->stages[vs];
  for (int32_t i = 0; i < st->n_devices; i++)
    b->need_sync[st->devices[i]] = SYNC_SLOT;
  if (pass_kind == PSIM_DIR_FWD) {
    for (int32_t o = 0; o < m->n_ops; o++) {
      if (b->s->ops[o].stage == vs)
        PSIM_CHECK(op_kernels(b, o, mu, PSIM_DIR_FWD));
    }
    return PSIM_OK;
  }
  if (pass_kind == PSIM_DIR_WGT) { /* the weight gradients, in the backward's op order */
    for (int32_t o = m->n_ops - 1; o >= 0; o--)
      if (b->s->ops[o].stage == vs)
        PSIM_CHECK(op_kernels(b, o, mu, PSIM_DIR_WGT));
    return PSIM_OK;
  }
  /* checkpoint unit by unit from the last (a layer, or a uniform group of layers:
   * psim_build_rc_unit): recompute the unit, then run its backward, as Megatron-LM does */
  for (int32_t hi = m->n_ops - 1; hi >= 0;) {
    if (b->s->ops[hi].stage != vs) {
      hi--;
      continue;
    }
    int32_t lo = hi;
    while (lo > 0 && b->s->ops[lo - 1].stage == vs &&
           psim_build_rc_unit(b, lo - 1) == psim_build_rc_unit(b, hi))
      lo--;
    PSIM_CHECK(issue_layer_backward(b, lo, hi, mu));
    hi = lo - 1;
  }
  return PSIM_OK;
}

/* Combined 1F1B (the stack's moe_a2a_overlap): a virtual stage's ops cut where a MoE
 * all-to-all runs, after each dispatch (its output reaches the experts) and before each
 * combine (its input comes back): a segment starts at op o. */
static bool a2a_cut(const psim_model *m, int32_t o) {
  return o > 0 && (m->ops[o - 1].kind == PSIM_OP_DISPATCH || m->ops[o].kind == PSIM_OP_COMBINE);
}

/* The forward segment of virtual stage vs from op *f; *f moves to the next one. */
static psim_status fwd_segment(psim_build *b, int32_t vs, int32_t mu, int32_t *f) {
  int32_t o = *f;
  do {
    if (b->s->ops[o].stage == vs)
      PSIM_CHECK(op_kernels(b, o, mu, PSIM_DIR_FWD));
    o++;
  } while (o < b->m->n_ops && !a2a_cut(b->m, o));
  *f = o;
  return PSIM_OK;
}

/* The backward segment ending at op *hi (its recomputed ops first, in forward order, then
 * the backward in reverse); *hi moves to the segment before. */
static psim_status bwd_segment(psim_build *b, int32_t vs, int32_t mu, int32_t *hi) {
  int32_t lo = *hi;
  while (lo > 0 && !a2a_cut(b->m, lo))
    lo--;
  for (int32_t o = lo; o <= *hi; o++)
    if (b->s->ops[o].stage == vs && psim_build_recomputed(b, o))
      PSIM_CHECK(op_kernels(b, o, mu, PSIM_DIR_REC));
  for (int32_t o = *hi; o >= lo; o--)
    if (b->s->ops[o].stage == vs)
      PSIM_CHECK(op_kernels(b, o, mu, PSIM_DIR_BWD));
  *hi = lo - 1;
  return PSIM_OK;
}

/* Micro-batch mu_b's backward and mu_f's forward of virtual stage vs as one merged slot:
 * their segments alternate, backward first, the forward's layers ascending while the
 * backward's descend, so each all-to-all (between two segments of one pass) runs while
 * the other pass's segment computes. Megatron-Core's schedule_layer_1f1b
 * (Megatron-LM megatron/core/models/common/model_chunk_schedule_plan.py @ d428de40): combine
 * backward (comm) | attention forward; dispatch forward (comm) | MLP backward; dispatch
 * backward (comm) | MLP forward; combine forward (comm) | attention backward. */
psim_status psim_build_issue_merged(psim_build *b, int32_t vs, int32_t mu_f, int32_t mu_b) {
  const psim_stage *st = &b->s->stages[vs];
  for (int32_t i = 0; i < st->n_devices; i++)
    b->need_sync[st->devices[i]] = SYNC_SLOT;
  int32_t f = 0, hi = b->m->n_ops - 1;
  while (f < b->m->n_ops || hi >= 0) {
    if (hi >= 0)
      PSIM_CHECK(bwd_segment(b, vs, mu_b, &hi));
    if (f < b->m->n_ops)
      PSIM_CHECK(fwd_segment(b, vs, mu_f, &f));
  }
  return PSIM_OK;
}
