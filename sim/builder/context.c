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
