/* gradsync.c - weight-gradient synchronisation in buckets, the optimizer
 * update, and under ZeRO-1/2 the all-gather of the updated parameters. */
#include "sim/builder/build_impl.h"

#include <math.h>
#include <string.h>

#include "sim/builder/memory.h"
#include "sim/builder/zero.h"
#include "sim/core/alloc.h"
#include "sim/engine/collective.h"

/* ---- gradient synchronisation and optimizer ------------------------------ */

/* A gradient bucket: weights whose gradients reduce over the same groups. */
typedef struct bucket {
  double bytes;    /* gradient bytes per group */
  double elems;    /* parameters per group */
  double gather;   /* ZeRO-1/2: parameter bytes per group its all-gather sends */
  int32_t op;      /* first op added (defines the groups) */
  int32_t last_op; /* last op added: its backward finishes last */
  psim_group *key; /* group of op's first local (psim_build_group_new) */
} bucket;

/* The buckets flushed, kept under ZeRO-1/2 for the parameters' all-gather
 * after the update. */
typedef struct flushed {
  int32_t op;
  int32_t first_op; /* its op that runs first in the forward (the lowest index) */
  uint32_t mask;
  double gather; /* parameter bytes of its all-gather */
} flushed;

typedef struct sync_state {
  int32_t *sync_done; /* per device: the barrier after its gradient sync */
  const bucket *bk;
  flushed *done;
  size_t n_done, cap_done;
  int32_t *update;  /* per device: its optimizer step (after the sync) */
  int32_t *dp_last; /* per device: exit of its last data-parallel collective, or -1 */
  double bytes;     /* all-gather: parameter bytes of the bucket */
  bool across;      /* HSDP: this pass all-reduces across the replicas (sync_group) */
  int32_t fwd_op;   /* all-gather: the bucket's op whose forward reads it first */
} sync_state;

static double grad_bytes_per_elem(const psim_build *b) {
  /* Megatron-LM accumulates and all-reduces bf16 models' gradients in fp32
   * (arguments.py: accumulate_allreduce_grads_in_fp32 forced for bf16), as
   * FP8 models', whose params are bf16 (memory.h's table); a stack with
   * grad_reduce_bf16 sends them in 16 bits (NeMo's distributed_fused_adam
   * grad_sync_dtype bf16; Megatron-Core's grad_reduce_in_fp32 = False). */
  double pb[3];
  psim_memory_param_bytes(b->m->dtype, pb);
  return b->c->stack.grad_reduce_bf16 && pb[1] > 2 ? 2 : pb[1];
}

static int32_t local_entry(const psim_build *b, int32_t o, int32_t k) {
  const psim_op_local *loc = &b->locals[b->loc_first[o] + k];
  return loc->shard * b->s->ops[o].replicas + loc->replica;
}

/* Orders a data-parallel collective after its members' previous one: the
 * data-parallel communicator issues its collectives in order on one stream
 * (own_stream in collective.h), apart from tensor and pipeline traffic. */
static psim_status stream_order(psim_build *b, const psim_group *g, int32_t *dp_last, int32_t entry,
                                int32_t exit) {
  for (int32_t i = 0; i < g->n; i++) {
    int32_t dev = g->devices[i];
    if (!b->simulated[dev])
      continue;
    if (dp_last[dev] >= 0)
      PSIM_CHECK(psim_tg_add_edge(&b->g, dp_last[dev], entry));
    dp_last[dev] = exit;
  }
  return PSIM_OK;
}

/* A data-parallel collective on its own stream: added, its bytes counted
 * (dp_bytes), and ordered after the group's previous one (stream_order). */
static psim_status add_dp_collective(psim_build *b, psim_group *g, sync_state *ss,
                                     const psim_coll_desc *d, const psim_task_info *info,
                                     int32_t *entry, int32_t *exit) {
  PSIM_CHECK(psim_build_add_collective(b, d, info, entry, exit));
  b->dp_bytes += psim_zero_coll_volume(d->kind, d->bytes, d->n, psim_build_counted_groups(b, d));
  return stream_order(b, g, ss->dp_last, *entry, *exit);
}

/* The last kernel of the pass of kernel id's op and micro-batch on its stream: a backward
 * that Transformer Engine's TP overlap splits ends with its weight gradient (kernels.c
 * tp_backward_pairs), after the kernel its input gradient leaves from. */
static int32_t last_kernel(const psim_build *b, int32_t id) {
  if (id < 0)
    return id;
  const psim_task_info *in = &b->g.info[id];
  for (int32_t n = b->next_compute[id]; n >= 0; n = b->next_compute[n]) {
    const psim_task_info *x = &b->g.info[n];
    if (x->op != in->op || x->micro != in->micro || x->pass != in->pass || x->shard != in->shard)
      break;
    id = n;
  }
  return id;
}

/* One collective for the group holding entry e of the bucket's first op:
 * an all-reduce, or under ZeRO (any stage; Megatron-LM's distributed
 * optimizer) a reduce-scatter onto the shards each rank updates. Under HSDP
 * (ss->across) the all-reduce across the replicas of the reduce-scattered
 * shard, 1/shard of the bucket, after it on the same stream (stream_order);
 * it waits for the backward itself when the shard group is one rank. */
static psim_status sync_group(psim_build *b, psim_group *g, void *ctx) {
  sync_state *ss = ctx;
  const bucket *bk = ss->bk;
  int32_t *sync_done = ss->sync_done;
  int32_t shard = ss->across ? bk->key->n / g->n : 1; /* the shard group's ranks */
  psim_coll_desc d = psim_build_group_coll(
      b, g, b->s->zero_stage >= 1 && !ss->across ? PSIM_COLL_REDUCE_SCATTER : PSIM_COLL_ALL_REDUCE,
      bk->bytes / shard, true);
  psim_task_info info = {PSIM_TASK_COLLECTIVE,
                         PSIM_TP_COMM_DP,
                         (int16_t)b->s->ops[bk->op].stage,
                         bk->op,
                         -1,
                         g->devices[0],
                         -1};
  int32_t entry, exit;
  PSIM_CHECK(add_dp_collective(b, g, ss, &d, &info, &entry, &exit));
  for (int32_t i = 0; i < g->n; i++) {
    int32_t dev = g->devices[i];
    if (!b->simulated[dev])
      continue;
    int32_t dep = b->s->overlap_grad_reduce
                      ? last_kernel(b, psim_build_src_task(b, psim_build_grad_tasks(b, bk->last_op),
                                                           bk->last_op, dev, b->n_micro - 1))
                      : b->last_bwd[dev];
    if (dep >= 0 && (!ss->across || shard == 1))
      PSIM_CHECK(psim_tg_add_edge(&b->g, dep, entry));
    if (sync_done[dev] >= 0)
      PSIM_CHECK(psim_tg_add_edge(&b->g, exit, sync_done[dev]));
  }
  return PSIM_OK;
}

static psim_status flush_bucket(psim_build *b, bucket *bk, uint32_t mask, sync_state *ss) {
  if (bk->bytes <= 0)
    return PSIM_OK;
  ss->bk = bk;
  ss->across = false;
  psim_status st = psim_zero_each_group(b, bk->op, mask, PSIM_ZERO_SHARD, sync_group, ss);
  ss->across = true; /* HSDP: then across the replicas (none without) */
  if (st == PSIM_OK && b->s->zero_stage >= 1)
    st = psim_zero_each_group(b, bk->op, mask, PSIM_ZERO_REPLICATE, sync_group, ss);
  ss->across = false;
  if (st == PSIM_OK && psim_zero_gathers_after_step(b->s->zero_stage)) {
    st = PSIM_VEC_RESERVE(ss->done, ss->cap_done, ss->n_done + 1);
    if (st == PSIM_OK)
      ss->done[ss->n_done++] = (flushed){bk->op, bk->last_op, mask, bk->gather};
  }
  bk->bytes = 0;
  bk->elems = 0;
  bk->gather = 0;
  return st;
}

/* The members of c into a. */
static void group_copy(psim_group *a, const psim_group *c) {
  a->n = c->n;
  memcpy(a->devices, c->devices, sizeof(int32_t) * (size_t)c->n);
}

static bool same_group(const psim_group *a, const psim_group *c) {
  return a->n == c->n && memcmp(a->devices, c->devices, sizeof(int32_t) * (size_t)a->n) == 0;
}

/* Whether bk is full: it holds the strategy's bucket_size bytes, or when none was given and
 * the stack has a rule (Megatron-Core's, psim_stack_bucket_params, over the bucket's
 * data-parallel group) that many parameters. A bucket closes once it reaches the size, as
 * Megatron-Core's param_and_grad_buffer.py and PyTorch DDP's reducer close theirs. */
static bool bucket_full(const psim_build *b, const bucket *bk) {
  double params = b->s->bucket_given ? 0 : psim_stack_bucket_params(&b->c->stack, bk->key->n);
  return params > 0 ? bk->elems >= params : bk->bytes >= b->s->bucket_bytes;
}

/* The dims of mask whose partial sums a weight's bucket reduces. Megatron-Core's
 * DistributedDataParallel puts every parameter of a model chunk into one contiguous gradient
 * buffer, the norms and biases that sequence parallelism leaves partial over tensor
 * parallelism included: they reduce over the data-parallel group with their neighbours in
 * the bucket, and over tensor parallelism in one flattened all-reduce of all of them after
 * the backward (megatron/core/distributed/finalize_model_grads.py, `finalize_model_grads`
 * calls `finish_grad_sync` then `_allreduce_layernorm_grads`), not modelled: 74K parameters a
 * GPT-3 layer over NVLink. Keying them by their tp x dp group instead cut the buckets at every
 * norm and bias and made each its own ring over tp x dp ranks. Under the stack's Megatron-Core
 * bucket rule, a rank-1 weight's sequence dims leave the mask. */
static uint32_t bucket_dims(const psim_build *b, const psim_op *op, const psim_tensor *w,
                            uint32_t mask) {
  if (b->c->stack.dp_bucket != PSIM_BUCKET_MCORE || w->rank != 1)
    return mask;
  for (int32_t i = 0; i < op->n_dims; i++)
    if (b->m->dims[op->dims[i].dim].role == PSIM_ROLE_SEQUENCE)
      mask &= ~(1u << i);
  return mask;
}

/* Weight gradients: buckets of bucket_bytes in reverse op order. */
static psim_status grad_sync(psim_build *b, sync_state *ss) {
  const psim_model *m = b->m;
  bucket *bk = psim_calloc(1, sizeof *bk);
  psim_group *g = psim_build_group_new(b);
  if (bk)
    bk->key = psim_build_group_new(b);
  uint32_t bk_mask = 0;
  double pb[3];
  psim_memory_param_bytes(m->dtype, pb);
  psim_status st = bk && bk->key && g ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory");
  for (int32_t o = m->n_ops - 1; o >= 0 && st == PSIM_OK; o--) {
    const psim_op *op = &m->ops[o];
    if (b->loc_first[o + 1] == b->loc_first[o])
      continue;
    for (int32_t i = 0; i < op->n_in && st == PSIM_OK; i++) {
      int32_t t = op->in[i];
      uint32_t mask = psim_build_partial_mask(b, o, t, PSIM_DIR_BWD);
      if (m->tensors[t].kind != PSIM_TENSOR_WEIGHT ||
          !(mask = bucket_dims(b, op, &m->tensors[t], mask)))
        continue;
      psim_region r;
      psim_build_tensor_region(b, o, b->locals[b->loc_first[o]].shard, t, &r);
      psim_build_partial_group(b, o, local_entry(b, o, 0), mask, g);
      if (bk->bytes > 0 && !same_group(bk->key, g))
        st = flush_bucket(b, bk, bk_mask, ss);
      if (st != PSIM_OK)
        break;
      if (bk->bytes == 0) {
        bk->op = o;
        group_copy(bk->key, g);
        bk_mask = mask;
      }
      bk->last_op = o;
      double elems = psim_build_region_elems(&r, m->tensors[t].rank);
      bk->bytes += elems * grad_bytes_per_elem(b);
      bk->elems += elems;
      bk->gather += elems * pb[0] * psim_zero_gather_share(b, o, pb[0]);
      if (bucket_full(b, bk))
        st = flush_bucket(b, bk, bk_mask, ss);
    }
  }
  if (st == PSIM_OK)
    st = flush_bucket(b, bk, bk_mask, ss);
  if (bk)
    psim_free(bk->key);
  psim_free(bk);
  psim_free(g);
  return st;
}

/* ZeRO-1/2: the all-gather of one bucket's updated parameters over a group,
 * after its members' optimizer steps (Megatron-LM's distributed optimizer,
 * DeepSpeed's stage 1/2 all-gather in allgather_bucket_size pieces; here in
 * the gradient buckets' pieces). */
static psim_status param_gather(psim_build *b, psim_group *g, void *ctx) {
  sync_state *ss = ctx;
  psim_coll_desc d = psim_build_group_coll(b, g, PSIM_COLL_ALL_GATHER, ss->bytes, true);
  psim_task_info info = {PSIM_TASK_COLLECTIVE, PSIM_TP_COMM_DP, -1, -1, -1, g->devices[0], -1};
  int32_t entry, exit;
  PSIM_CHECK(add_dp_collective(b, g, ss, &d, &info, &entry, &exit));
  for (int32_t i = 0; i < g->n; i++) {
    int32_t dev = g->devices[i];
    if (!b->simulated[dev])
      continue;
    if (!b->s->overlap_param_gather && ss->update[dev] >= 0)
      PSIM_CHECK(psim_tg_add_edge(&b->g, ss->update[dev], entry));
    int32_t use =
        b->s->overlap_param_gather ? psim_build_src_task(b, b->fwd, ss->fwd_op, dev, 0) : -1;
    if (use >= 0) /* the forward pre-hook waits for the bucket's gather */
      PSIM_CHECK(psim_tg_add_edge(&b->g, exit, use));
  }
  return PSIM_OK;
}

/* The gathers after the step, in bucket order; or with overlap_param_gather those of the
 * step before, at the start of this iteration: Megatron-Core (megatron/core/distributed/
 * distributed_data_parallel.py, next_param_gather_bucket_group; param_and_grad_buffer.py,
 * finish_param_sync) gathers the buckets in reverse bucket order, i.e. forward order, on the
 * data-parallel stream, and a forward pre-hook makes a module's first kernel wait for its
 * bucket; the iteration ends at the step. The gathers are ordered among themselves only: the
 * gradient reduce-scatters follow the forward that waits for them. */
static psim_status param_gathers(psim_build *b, sync_state *ss) {
  bool overlap = b->s->overlap_param_gather;
  for (int32_t d = 0; overlap && d < b->c->n_devices; d++)
    ss->dp_last[d] = -1;
  for (size_t k = 0; k < ss->n_done; k++) {
    const flushed *f = &ss->done[overlap ? ss->n_done - 1 - k : k];
    ss->bytes = f->gather;
    ss->fwd_op = f->first_op;
    PSIM_CHECK(psim_zero_each_group(b, f->op, f->mask, PSIM_ZERO_SHARD, param_gather, ss));
  }
  return PSIM_OK;
}

/* Per simulated device after its sync: the optimizer step on the parameters
 * whose optimizer state it holds (all of them, or its shard under ZeRO). */
static psim_status updates(psim_build *b, sync_state *ss) {
  double pb[3];
  psim_memory_param_bytes(b->m->dtype, pb);
  for (int32_t d = 0; d < b->c->n_devices; d++) {
    ss->update[d] = -1;
    if (ss->sync_done[d] < 0)
      continue;
    double params = b->static_mem[3 * d + 2] / pb[2];
    psim_task_info info = {PSIM_TASK_COMPUTE, PSIM_TP_UPDATE, -1, -1, -1, d, -1};
    int32_t res = psim_res_compute(d);
    PSIM_CHECK(psim_tg_add_task(&b->g, psim_cost_optimizer(b->c, d, params, b->o->costdb), &res, 1,
                                &info, &ss->update[d]));
    PSIM_CHECK(psim_tg_add_edge(&b->g, ss->sync_done[d], ss->update[d]));
  }
  return PSIM_OK;
}

/* Per simulated device: a barrier after its last kernel (sync_done). */
static psim_status sync_barriers(psim_build *b, int32_t *sync_done) {
  for (int32_t d = 0; d < b->c->n_devices; d++) {
    sync_done[d] = -1;
    if (!b->simulated[d] || b->last_task[d] < 0)
      continue;
    psim_task_info info = {PSIM_TASK_BARRIER, PSIM_TP_COMM_DP, -1, -1, -1, d, -1};
    PSIM_CHECK(psim_tg_add_task(&b->g, 0, NULL, 0, &info, &sync_done[d]));
    PSIM_CHECK(psim_tg_add_edge(&b->g, b->last_task[d], sync_done[d]));
  }
  return PSIM_OK;
}

/* ZeRO-3's parameter gathers, a barrier per device after its gradient sync,
 * the update, and under ZeRO-1/2 the updated parameters' all-gather. */
psim_status psim_build_optimizer(psim_build *b) {
  size_t nd = (size_t)b->c->n_devices;
  sync_state ss = {0};
  ss.sync_done = psim_malloc(sizeof *ss.sync_done * (nd + 1));
  ss.update = psim_malloc(sizeof *ss.update * (nd + 1));
  ss.dp_last = psim_malloc(sizeof *ss.dp_last * (nd + 1));
  psim_status st =
      ss.sync_done && ss.update && ss.dp_last ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory");
  for (size_t i = 0; st == PSIM_OK && i < nd; i++)
    ss.dp_last[i] = -1;
  if (st == PSIM_OK)
    st = psim_zero_gathers(b);
  if (st == PSIM_OK)
    st = sync_barriers(b, ss.sync_done);
  if (st == PSIM_OK && b->s->sync == PSIM_SYNC_PS) /* issue 8: the servers update (ps.c) */
    st = psim_build_ps_sync(b, ss.sync_done);
  else {
    if (st == PSIM_OK)
      st = grad_sync(b, &ss);
    if (st == PSIM_OK)
      st = updates(b, &ss);
    if (st == PSIM_OK)
      st = param_gathers(b, &ss);
  }
  psim_free(ss.sync_done);
  psim_free(ss.update);
  psim_free(ss.dp_last);
  psim_free(ss.done);
  return st;
}
