/* gradsync.c - weight-gradient synchronisation in buckets and the
 * optimizer update. */
#include "sim/build/build_impl.h"

#include <math.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/engine/collective.h"

/* ---- gradient synchronisation and optimizer ------------------------------ */

/* A gradient bucket: weights whose gradients reduce over the same groups. */
typedef struct bucket {
  double bytes;    /* gradient bytes per group */
  int32_t op;      /* first op added (defines the groups) */
  int32_t last_op; /* last op added: its backward finishes last */
  psim_group key;  /* group of op's first local */
} bucket;

static double grad_bytes_per_elem(const psim_model *m) {
  /* Megatron-LM accumulates and all-reduces bf16 models' gradients in fp32
   * (arguments.py: accumulate_allreduce_grads_in_fp32 forced for bf16). */
  return m->dtype == PSIM_DTYPE_BF16 ? 4.0 : (double)psim_dtype_bytes(m->dtype);
}

static int32_t local_entry(const psim_build *b, int32_t o, int32_t k) {
  const psim_op_local *loc = &b->locals[b->loc_first[o] + k];
  return loc->shard * b->s->ops[o].replicas + loc->replica;
}

/* One collective for the group holding entry e of the bucket's first op. */
static psim_status sync_group(psim_build *b, const bucket *bk, psim_group *g, int32_t *sync_done) {
  psim_coll_desc d = {b->s->zero_stage >= 2 ? PSIM_COLL_REDUCE_SCATTER : PSIM_COLL_ALL_REDUCE,
                      b->s->allreduce,
                      g->devices,
                      g->n,
                      bk->bytes,
                      b->folded ? g->n_groups : 1,
                      g->stride};
  psim_task_info info = {PSIM_TASK_COLLECTIVE,
                         PSIM_TP_COMM_DP,
                         (int16_t)b->s->ops[bk->op].stage,
                         bk->op,
                         -1,
                         g->devices[0],
                         -1};
  int32_t entry, exit;
  PSIM_CHECK(psim_build_add_collective(b, &d, &info, &entry, &exit));
  for (int32_t i = 0; i < g->n; i++) {
    int32_t dev = g->devices[i];
    if (!b->simulated[dev])
      continue;
    int32_t dep = b->s->overlap_grad_reduce
                      ? psim_build_src_task(b, b->bwd, bk->last_op, dev, b->n_micro - 1)
                      : b->last_bwd[dev];
    if (dep >= 0)
      PSIM_CHECK(psim_tg_add_edge(&b->g, dep, entry));
    if (sync_done[dev] >= 0)
      PSIM_CHECK(psim_tg_add_edge(&b->g, exit, sync_done[dev]));
  }
  return PSIM_OK;
}

/* psim_build_partial_group(b, o, e, mask, g)->devices[0] without the whole group. */
static int32_t first_member(const psim_build *b, int32_t o, int32_t e, uint32_t mask) {
  const psim_op *op = &b->m->ops[o];
  const psim_op_config *cfg = &b->s->ops[o];
  int32_t coord[PSIM_MAX_OP_DIMS];
  psim_build_shard_coords(op, cfg, e / cfg->replicas, coord);
  for (int32_t i = 0; i < op->n_dims; i++)
    if (mask & (1u << i))
      coord[i] = 0;
  return cfg->devices[psim_build_shard_index(op, cfg, coord) * cfg->replicas + e % cfg->replicas];
}

static psim_status flush_bucket(psim_build *b, bucket *bk, uint32_t mask, int32_t *sync_done) {
  if (bk->bytes <= 0)
    return PSIM_OK;
  psim_group *g = psim_malloc(sizeof *g);
  if (!g)
    return psim_error(PSIM_ENOMEM, "out of memory");
  psim_status st = PSIM_OK;
  int32_t nk = b->loc_first[bk->op + 1] - b->loc_first[bk->op];
  for (int32_t k = 0; k < nk && st == PSIM_OK; k++) {
    int32_t e = local_entry(b, bk->op, k);
    if (k > 0 && !b->folded && first_member(b, bk->op, e, mask) != b->s->ops[bk->op].devices[e])
      continue; /* each group once, from its first member (k = 0 checks the group's size) */
    psim_build_partial_group(b, bk->op, e, mask, g);
    st = psim_build_group_fits(g);
    if (st != PSIM_OK)
      break;
    if (!b->folded && g->devices[0] != b->s->ops[bk->op].devices[e])
      continue; /* each group once, from its first member */
    if (b->folded)
      psim_build_group_stride(b, bk->op, e, mask, g);
    st = sync_group(b, bk, g, sync_done);
  }
  psim_free(g);
  bk->bytes = 0;
  return st;
}

/* The members of c into a (a group is 32 KB; most hold a few devices). */
static void group_copy(psim_group *a, const psim_group *c) {
  a->n = c->n;
  memcpy(a->devices, c->devices, sizeof(int32_t) * (size_t)c->n);
}

static bool same_group(const psim_group *a, const psim_group *c) {
  return a->n == c->n && memcmp(a->devices, c->devices, sizeof(int32_t) * (size_t)a->n) == 0;
}

/* Weight gradients: buckets of bucket_bytes in reverse op order. */
static psim_status grad_sync(psim_build *b, int32_t *sync_done) {
  const psim_model *m = b->m;
  bucket *bk = psim_calloc(1, sizeof *bk);
  psim_group *g = psim_malloc(sizeof *g);
  uint32_t bk_mask = 0;
  psim_status st = bk && g ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory");
  for (int32_t o = m->n_ops - 1; o >= 0 && st == PSIM_OK; o--) {
    const psim_op *op = &m->ops[o];
    if (b->loc_first[o + 1] == b->loc_first[o])
      continue;
    for (int32_t i = 0; i < op->n_in && st == PSIM_OK; i++) {
      int32_t t = op->in[i];
      uint32_t mask = psim_build_partial_mask(b, o, t, PSIM_DIR_BWD);
      if (m->tensors[t].kind != PSIM_TENSOR_WEIGHT || !mask)
        continue;
      psim_region r;
      psim_build_tensor_region(b, o, b->locals[b->loc_first[o]].shard, t, &r);
      psim_build_partial_group(b, o, local_entry(b, o, 0), mask, g);
      if (bk->bytes > 0 && !same_group(&bk->key, g))
        st = flush_bucket(b, bk, bk_mask, sync_done);
      if (st != PSIM_OK)
        break;
      if (bk->bytes == 0) {
        bk->op = o;
        group_copy(&bk->key, g);
        bk_mask = mask;
      }
      bk->last_op = o;
      bk->bytes += psim_build_region_elems(&r, m->tensors[t].rank) * grad_bytes_per_elem(m);
      if (bk->bytes >= b->s->bucket_bytes)
        st = flush_bucket(b, bk, bk_mask, sync_done);
    }
  }
  if (st == PSIM_OK)
    st = flush_bucket(b, bk, bk_mask, sync_done);
  psim_free(bk);
  psim_free(g);
  return st;
}

/* Per simulated device: a barrier after its gradient sync, then the update. */
psim_status psim_build_optimizer(psim_build *b) {
  int32_t nd = b->c->n_devices;
  int32_t *sync_done = psim_malloc(sizeof *sync_done * (size_t)nd);
  if (!sync_done)
    return psim_error(PSIM_ENOMEM, "out of memory");
  psim_status st = PSIM_OK;
  for (int32_t d = 0; d < nd && st == PSIM_OK; d++) {
    sync_done[d] = -1;
    if (!b->simulated[d] || b->last_task[d] < 0)
      continue;
    psim_task_info info = {PSIM_TASK_BARRIER, PSIM_TP_COMM_DP, -1, -1, -1, d, -1};
    st = psim_tg_add_task(&b->g, 0, NULL, 0, &info, &sync_done[d]);
    if (st == PSIM_OK)
      st = psim_tg_add_edge(&b->g, b->last_task[d], sync_done[d]);
  }
  if (st == PSIM_OK && b->s->sync == PSIM_SYNC_PS) { /* issue 8: the servers update (ps.c) */
    st = psim_build_ps_sync(b, sync_done);
    psim_free(sync_done);
    return st;
  }
  if (st == PSIM_OK)
    st = grad_sync(b, sync_done);
  for (int32_t d = 0; d < nd && st == PSIM_OK; d++) {
    if (sync_done[d] < 0)
      continue;
    double params = b->static_mem[3 * d] / (double)psim_dtype_bytes(b->m->dtype);
    double shards = 1;
    if (b->s->zero_stage >= 1) /* ZeRO shards the update over data-parallel ranks */
      shards = b->s->tmpl.dp > 1 ? b->s->tmpl.dp : 1;
    psim_task_info info = {PSIM_TASK_COMPUTE, PSIM_TP_UPDATE, -1, -1, -1, d, -1};
    int32_t res = psim_res_compute(d), id;
    st = psim_tg_add_task(&b->g, psim_cost_optimizer(b->c, d, params / shards, b->o->costdb), &res,
                          1, &info, &id);
    if (st == PSIM_OK)
      st = psim_tg_add_edge(&b->g, sync_done[d], id);
  }
  psim_free(sync_done);
  return st;
}
