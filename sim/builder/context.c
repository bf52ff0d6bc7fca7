/* context.c - context parallelism: attention whose query sequence is split
 * while its keys and values keep their own, whole sequence dim.
 *
 * Megatron-Core runs context parallelism through TransformerEngine's
 * attn_forward_func_with_cp (transformer_engine/pytorch/attention.py,
 * AttnFuncWithCPAndKVP2P, "p2p", the default cp_comm_type): the cp ranks form
 * a ring; each holds its query and K/V blocks and, in cp steps, computes
 * attention of its queries against one K/V block while it sends that block
 * to the next rank and receives the next block from the previous one (cp - 1
 * exchanges, each overlapped with the current block's compute). With the
 * causal load balancing of Megatron-Core (get_batch_on_this_cp_rank in
 * megatron/training/utils.py: the sequence in 2 cp chunks, rank r holding
 * chunks r and 2 cp - 1 - r) every rank does the same work at every step, so
 * a step is 1/cp of the rank's attention compute.
 *
 * In the task graph the keys' sequence dim is not split, so the consumer
 * gathers K/V from the cp ranks (comm.c's rectangle intersection: (cp - 1) /
 * cp of K and V per rank, the ring's traffic). The overlap is the split of
 * the rank's attention kernel (forward and recompute) in two: the first
 * cp - 1 steps' compute, which needs only the local data and runs while the
 * exchange proceeds, and the last step's, which waits for the exchange. With
 * uniform steps (compute c, exchange x each) the ring ends after
 * c + (cp - 1) max(c, x); the two kernels end after
 * c + max((cp - 1) c, (cp - 1) x): the same. Backward all-reduces dK/dV
 * after the attention backward: 2 (cp - 1)/cp of K and V per rank, the
 * bytes of TE's backward ring, which keeps only the local K/V block from the
 * forward and so sends each K/V block cp - 1 steps again beside the dK/dV
 * blocks (AttnFuncWithCPAndKVP2P.backward, TE v1.9 attention.py and v2.18
 * dot_product_attention/context_parallel.py: p2p buffers of shape
 * (2, *kv.shape), K/V at steps 0 .. cp - 2, dK/dV at steps 1 .. cp - 1).
 * Not overlapped with the block compute as the ring is: an upper bound.
 * docs/simulator.md, "Context parallelism". */
#include "sim/builder/build_impl.h"

#include <math.h>

#include "costdb/kernels.h"

bool psim_build_is_view(const psim_op *op) {
  return op->kind == PSIM_OP_RESHAPE || op->kind == PSIM_OP_SPLIT;
}

int32_t psim_build_cp_steps(const psim_build *b, int32_t o) {
  const psim_op *op = &b->m->ops[o];
  if (op->kind != PSIM_OP_ATTENTION)
    return 1;
  const psim_tensor *q = &b->m->tensors[op->in[0]], *k = &b->m->tensors[op->in[1]];
  if (k->dims[1] == q->dims[1])
    return 1; /* keys on the query's sequence dim: a split of it splits both */
  int32_t iq = psim_op_dim_index(op, q->dims[1]), ik = psim_op_dim_index(op, k->dims[1]);
  const psim_op_config *cfg = &b->s->ops[o];
  if (iq < 0 || ik < 0 || cfg->degree[ik] > 1)
    return 1;
  return cfg->degree[iq];
}

/* Grouped-query attention: query head h reads key/value head h / (H / KV)
 * (flash-attn's MQA/GQA rule; torch SDPA enable_gqa). Tensor parallelism
 * splits the key/value heads with the query heads: Megatron-Core gives each
 * tp rank num_query_groups / tp groups (megatron/core/transformer/attention.py,
 * num_query_groups_per_partition), torchtitan's wk and wv are ColwiseParallel
 * and the model views their output with -1 heads (torchtitan v0.2.2
 * torchtitan/models/llama3/infra/parallelize.py apply_tp, model/model.py
 * Attention.forward). The attention op iterates over both heads dims, and a
 * layout splits the first (the query heads); its shard c of d reads kv heads
 * [c KV / d, (c + 1) KV / d) and writes their gradient whole, no partial sum,
 * when d divides KV (Megatron asserts num_query_groups % tp == 0). A split
 * of the kv heads dim itself, or d not dividing KV, keeps whole K/V per shard
 * (gathered forward, reduced backward). */
int32_t psim_build_gqa_heads(const psim_build *b, int32_t o, int32_t t) {
  const psim_op *op = &b->m->ops[o];
  if (op->kind != PSIM_OP_ATTENTION || (t != op->in[1] && t != op->in[2]))
    return -1;
  const psim_tensor *q = &b->m->tensors[op->in[0]], *k = &b->m->tensors[op->in[1]];
  if (q->dims[2] == k->dims[2])
    return -1;
  const psim_op_config *cfg = &b->s->ops[o];
  int32_t ih = psim_op_dim_index(op, q->dims[2]), ik = psim_op_dim_index(op, k->dims[2]);
  if (ih < 0 || ik < 0 || cfg->degree[ik] > 1 || cfg->degree[ih] == 1)
    return -1;
  return psim_build_dim_size(b, k->dims[2]) % cfg->degree[ih] == 0 ? ih : -1;
}

void psim_build_gqa_region(const psim_build *b, int32_t o, const int32_t *coord, int32_t t,
                           psim_region *r) {
  int32_t ih = psim_build_gqa_heads(b, o, t);
  if (ih < 0)
    return;
  int32_t d = b->s->ops[o].degree[ih];
  int64_t kv = psim_build_dim_size(b, b->m->tensors[t].dims[2]);
  r->lo[2] = psim_build_shard_offset(kv, d, coord[ih]);
  r->hi[2] = r->lo[2] + psim_shard_size(kv, d, coord[ih]);
}

/* Async tensor parallelism (the stack's tp_overlap): torch's micro-pipeline
 * TP, which torchtitan turns on with enable_async_tensor_parallel (Inductor's
 * micro_pipeline_tp pass, torch/_inductor/fx_passes/micro_pipeline_tp.py,
 * replaces all-gather -> matmul by fused_all_gather_matmul and matmul ->
 * reduce-scatter by fused_matmul_reduce_scatter,
 * torch/distributed/_symmetric_memory/__init__.py). The all-gather's matmul
 * runs shard by shard: its local shard first while the others arrive, the
 * last shard when the gather is complete; the reduce-scatter's matmul
 * computes the remote ranks' chunks first, each sent as it is done, its own
 * last. With n shards, matmul time M and gather/scatter time C the pair
 * ends after max(M, C + M / n): the kernel is split in two, (n - 1) / n
 * that needs only local data (or feeds the scatter) and 1 / n, so that the
 * collective overlaps the larger part. Forward and recompute passes; the
 * backward's pairs are TE's (psim_build_tp_bwd_plan, below). */
int32_t psim_build_tp_gather_chunks(const psim_build *b, int32_t o, int32_t k) {
  const psim_op *op = &b->m->ops[o];
  if (!psim_build_async_tp(b) || !b->s->sequence_parallel || op->kind != PSIM_OP_MATMUL)
    return 1;
  int32_t t = op->in[0], x = b->m->tensors[t].producer;
  if (x < 0 || b->s->ops[x].stage != b->s->ops[o].stage ||
      psim_build_partial_mask(b, x, t, PSIM_DIR_FWD))
    return 1;
  const psim_op_local *loc = &b->locals[b->loc_first[o] + k];
  int32_t e = psim_build_entry_on(b, x, loc->device);
  if (e < 0)
    return 1;
  psim_region rx, ry;
  psim_build_tensor_region(b, x, e / b->s->ops[x].replicas, t, &rx);
  psim_build_tensor_region(b, o, loc->shard, t, &ry);
  int32_t rank = b->m->tensors[t].rank;
  double held = psim_build_overlap(&rx, &ry, rank), need = psim_build_region_elems(&ry, rank);
  return held > 0 && need > 1.5 * held ? (int32_t)lround(need / held) : 1;
}

int32_t psim_build_tp_scatter_chunks(const psim_build *b, int32_t o) {
  const psim_op *op = &b->m->ops[o];
  if (!psim_build_async_tp(b) || !b->s->sequence_parallel || op->kind != PSIM_OP_MATMUL)
    return 1;
  uint32_t mask = psim_build_partial_mask(b, o, op->out[0], PSIM_DIR_FWD);
  int32_t n = 1;
  for (int32_t i = 0; i < op->n_dims; i++)
    if (mask & (1u << i))
      n *= b->s->ops[o].degree[i];
  return n;
}

/* The chunked GEMMs of async TP: fused_all_gather_matmul and
 * fused_matmul_reduce_scatter (torch/distributed/_symmetric_memory/__init__.py)
 * run one matmul per shard, each on 1/n of the rows (tokens), so each chunk
 * costs what the cost model gives a GEMM of that shape: tile and wave
 * quantisation, the efficiency curve of small GEMMs and one launch each; the
 * FP8 casts of the operands (costdb/cost.c) are the whole shard's, once. The
 * rows are split along the output's sequence dim, the one sequence
 * parallelism gathers and scatters; without one, or with fewer than n
 * positions, 1/n of the unsplit time. */
double psim_build_tp_chunk_s(const psim_build *b, int32_t o, int32_t k, int pass_kind, int32_t n,
                             double whole_s) {
  const psim_op *op = &b->m->ops[o];
  const psim_op_local *loc = &b->locals[b->loc_first[o] + k];
  const psim_tensor *y = &b->m->tensors[op->out[0]];
  int64_t ext[PSIM_MAX_OP_DIMS];
  psim_build_shard_extents(b, o, loc->shard, ext);
  psim_routing_shard_extents(b, o, loc->shard, ext);
  int32_t row = -1;
  for (int32_t i = 0; i < op->n_dims; i++)
    for (int32_t j = 0; j < y->rank; j++)
      if (op->dims[i].dim == y->dims[j] && b->m->dims[y->dims[j]].role == PSIM_ROLE_SEQUENCE)
        row = i;
  if (row < 0 || ext[row] < n)
    return whole_s / n;
  psim_pass pass = pass_kind == PSIM_DIR_BWD ? PSIM_PASS_BWD : PSIM_PASS_FWD;
  const psim_costdb *db = b->o->costdb;
  double casts_s = psim_cost_fp8_cast_s(b->c, loc->device, b->m, op, ext, pass, db) -
                   psim_build_fp8_cast_saving_s(b, o, loc->device, ext, pass_kind);
  ext[row] = (ext[row] + n - 1) / n;
  psim_cost_origin origin;
  double chunk_s = psim_cost_compute(b->c, loc->device, b->m, op, ext, pass, db, &origin);
  return chunk_s - psim_cost_fp8_cast_s(b->c, loc->device, b->m, op, ext, pass, db) + casts_s / n;
}

/* The slowdown of compute that overlaps a reduce-scatter holding comm_sms of
 * the device's SMs (the stack's comm_sms; 1 when 0 or the SM count is unknown). */
double psim_build_comm_sm_slowdown(const psim_build *b, int32_t dev) {
  int32_t sms = b->c->stack.comm_sms;
  const psim_device_type *t = &b->c->types[b->c->devices[dev].type];
  int32_t total = psim_kernels_arch(t->name).n_sms;
  return sms > 0 && total > sms ? (double)total / (total - sms) : 1.0;
}

/* Transformer Engine's backward TP overlap (the stack's tp_overlap_bwd, with async TP and
 * sequence parallelism; docs/stacks.md). A matmul whose output was reduce-scattered forward
 * (Linear, row parallel: proj, fc2) gets its output gradient by an all-gather, which TE runs
 * as a ring exchange inside the dgrad GEMM (ub_split_ag / ub_overlap_ag on the proj_dgrad,
 * fc2_dgrad buffers, linear.py _Linear.backward): the dgrad is split as the forward's
 * gathers are, (n - 1) / n on the local shard, the last 1 / n when the gather is done; the
 * wgrad, which reads the whole gradient, after it. A matmul whose input was all-gathered
 * forward (LayerNormLinear, column parallel: qkv, fc1) reduce-scatters its input gradient;
 * with ub_bulk_wgrad the dgrad GEMM runs first and the reduce-scatter of its output overlaps
 * the wgrad GEMM (UbufOverlapAlgo.BULK_OVERLAP_RS), on the SMs the bulk kernel leaves
 * (comm_sms; TE's default 16 with set_sm_margin, base.py get_default_config)
 * (layernorm_linear.py _LayerNormLinear.backward, TransformerEngine @ 3ec87875). The dgrad /
 * wgrad split is the builder's (psim_build_weight_share); a split backward (b->wgt) has
 * its wgrad in a pass of its own. */
bool psim_build_tp_bwd_plan(const psim_build *b, int32_t o, int32_t k, double duration_s,
                            psim_tp_bwd_plan *p) {
  if (!psim_build_tp_bwd_overlap(b) || b->m->ops[o].kind != PSIM_OP_MATMUL)
    return false;
  int32_t n = psim_build_tp_scatter_chunks(b, o); /* ranks the output gradient comes from */
  double w = psim_build_weight_share(b, o), dgrad_share = 1 - w;
  bool bulk = !b->wgt && w > 0 && psim_build_tp_gather_chunks(b, o, k) > 1;
  if ((n <= 1 && !bulk) || dgrad_share <= 0)
    return false;
  double dgrad_s = b->wgt ? duration_s : duration_s * dgrad_share, chunked_s = dgrad_s;
  if (n > 1) /* n dgrad GEMMs of 1/n of the rows */
    chunked_s =
        n * dgrad_share * psim_build_tp_chunk_s(b, o, k, PSIM_DIR_BWD, n, dgrad_s / dgrad_share);
  int32_t dev = b->locals[b->loc_first[o] + k].device;
  *p = (psim_tp_bwd_plan){.early_s = n > 1 ? chunked_s * (n - 1) / n : 0,
                          .dgrad_s = n > 1 ? chunked_s / n : chunked_s,
                          .wgrad_s = (duration_s - dgrad_s) *
                                     (bulk ? psim_build_comm_sm_slowdown(b, dev) : 1.0),
                          .extra_s = chunked_s - dgrad_s};
  return true;
}
