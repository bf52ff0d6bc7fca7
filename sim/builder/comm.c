/* comm.c - communication from layouts: reductions of partial sums,
 * all-gathers, scatter-gather pipeline transfers, point-to-point gathers, and
 * the per-edge connect of producer to consumer shards (see build.c). */
#include "sim/builder/build_impl.h"
#include "sim/builder/routing.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/engine/collective.h"

/* Whether every dim op o is split on is in mask (then a group's members
 * enumerate the shards in order: shard_index of row-major coordinates). */
static bool splits_within(const psim_op *op, const psim_op_config *cfg, uint32_t mask) {
  for (int32_t i = 0; i < op->n_dims; i++)
    if (cfg->degree[i] > 1 && !(mask & (1u << i)))
      return false;
  return true;
}

/* The members of entry e's group when o is split on dims outside mask as well:
 * e's coordinates with the masked ones enumerated row-major (the last masked dim
 * fastest), as an odometer over the masked dims' shard-index strides, O(1) per
 * member (a data-parallel group has 2,048 members at 131,072 GPUs, issue 19). */
static void masked_members(const psim_op *op, const psim_op_config *cfg, int32_t e, uint32_t mask,
                           psim_group *g) {
  int32_t coord[PSIM_MAX_OP_DIMS], stride[PSIM_MAX_OP_DIMS], digit[PSIM_MAX_OP_DIMS];
  int32_t dims[PSIM_MAX_OP_DIMS], q = 0, r = e % cfg->replicas;
  psim_build_shard_coords(op, cfg, e / cfg->replicas, coord);
  for (int32_t i = op->n_dims - 1, s = 1; i >= 0; s *= cfg->degree[i], i--)
    stride[i] = s;
  for (int32_t i = 0; i < op->n_dims; i++)
    if (mask & (1u << i)) {
      coord[i] = 0;
      digit[i] = 0;
      dims[q++] = i;
    }
  int32_t at = psim_build_shard_index(op, cfg, coord);
  for (int32_t n = 0; n < g->n; n++) {
    g->entries[n] = at * cfg->replicas + r;
    for (int32_t k = q - 1; k >= 0; k--) { /* the next member: carry through the digits */
      int32_t i = dims[k];
      at += stride[i];
      if (++digit[i] < cfg->degree[i])
        break;
      at -= cfg->degree[i] * stride[i];
      digit[i] = 0;
    }
  }
}

/* Devices holding the partial sums that entry e of op o reduces with, k of them (the
 * product of the degrees in mask). */
static void partial_group(const psim_build *b, int32_t o, int32_t e, uint32_t mask, int32_t k,
                          psim_group *g) {
  const psim_op *op = &b->m->ops[o];
  const psim_op_config *cfg = &b->s->ops[o];
  int32_t r = e % cfg->replicas;
  g->wanted = k;
  g->n = k;
  assert(k >= 1 && cfg->n_devices % k == 0); /* the group's degrees divide the op's devices */
  if (splits_within(op, cfg, mask)) { /* member n is shard n (the grouping of data parallelism) */
    for (int32_t n = 0; n < g->n; n++)
      g->entries[n] = n * cfg->replicas + r;
  } else
    masked_members(op, cfg, e, mask, g);
  for (int32_t n = 0; n < g->n; n++)
    g->devices[n] = cfg->devices[g->entries[n]];
  g->n_groups = cfg->n_devices / (g->n ? g->n : 1);
  g->stride = 0;
}

void psim_build_partial_group(const psim_build *b, int32_t o, int32_t e, uint32_t mask,
                              psim_group *g) {
  const psim_op *op = &b->m->ops[o];
  int32_t k = 1;
  for (int32_t i = 0; i < op->n_dims; i++)
    if (mask & (1u << i))
      k *= b->s->ops[o].degree[i];
  bool memo = b->groups && k >= PSIM_GROUP_MEMO_MIN;
  if (memo && psim_build_group_memo_get(b->groups, b, o, e, mask, g))
    return;
  partial_group(b, o, e, mask, k, g);
  if (memo)
    psim_build_group_memo_put(b->groups, b, o, e, mask, g);
}

psim_status psim_build_group_fits(const psim_group *g) {
  if (g->wanted <= g->n)
    return PSIM_OK;
  return psim_error(PSIM_ELIMIT, "a collective over %d devices: the group holds %d", (int)g->wanted,
                    (int)g->n);
}

/* Allocates and fills the group of entry e (partial_group); the caller frees *out. */
static psim_status new_group(const psim_build *b, int32_t o, int32_t e, uint32_t mask,
                             psim_group **out) {
  *out = NULL; /* set on every path: callers read it after PSIM_CHECK */
  psim_group *g = psim_build_group_new(b);
  if (!g)
    return psim_error(PSIM_ENOMEM, "out of memory");
  psim_build_partial_group(b, o, e, mask, g);
  psim_status st = psim_build_group_fits(g);
  if (st != PSIM_OK) {
    psim_free(g);
    return st;
  }
  *out = g;
  return PSIM_OK;
}

int32_t psim_build_src_task(const psim_build *b, int32_t *arr, int32_t o, int32_t d, int32_t mu) {
  int32_t k = psim_build_local_on(b, o, d);
  if (k < 0) /* folded: the representative stands for its symmetric peers */
    k = psim_build_local_on(b, o, b->rep_of[d]);
  if (k < 0)
    k = 0;
  if (b->loc_first[o + 1] == b->loc_first[o])
    return -1;
  return *psim_build_task_slot(b, arr, o, k, mu);
}

/* Tensor-parallel collectives inside training wait for the slowest of their
 * ranks: runtime.coll_sync_s per peer, on the members' communication
 * engines, before the collective itself. *entry becomes the wait. */
static psim_status rank_skew(psim_build *b, const psim_group *g, const psim_task_info *info,
                             int32_t *entry) {
  const psim_device_type *t = &b->c->types[b->c->devices[g->devices[0]].type];
  if (t->rt.coll_sync_s <= 0 || g->n < 2)
    return PSIM_OK;
  int32_t res[64], n = 0, wait;
  for (int32_t i = 0; i < g->n && n < 64; i++)
    if (b->simulated[g->devices[i]])
      res[n++] = psim_res_comm(g->devices[i]);
  PSIM_CHECK(psim_tg_add_task(&b->g, t->rt.coll_sync_s * (g->n - 1), res, n, info, &wait));
  PSIM_CHECK(psim_tg_add_edge(&b->g, wait, *entry));
  *entry = wait;
  return PSIM_OK;
}

/* The cache key of the reduction of X's partial view of t (output `slot` of
 * X). Backward, the partial sums are input gradients, and every consumer of
 * t shares one collective, keyed by t's producer: autograd sums the
 * consumers' gradients of a tensor locally before its one reduce-scatter
 * (torchtitan's PrepareModuleInput/SequenceParallel gather the input of
 * wq, wk, wv once and reduce-scatter its gradient once, torchtitan v0.2.2
 * torchtitan/models/llama3/infra/parallelize.py apply_tp; Megatron-LM's
 * fused QKV has one consumer). */
static uint64_t shared_key(const psim_build *b, int kind, int32_t x, int32_t slot, int32_t t,
                           int32_t mu, int dir) {
  int32_t p = b->m->tensors[t].producer;
  if (dir != PSIM_DIR_BWD || p < 0)
    return psim_build_key1(kind, x, slot, mu, dir);
  int32_t ps = 0;
  for (int32_t j = 0; j < b->m->ops[p].n_out; j++)
    if (b->m->ops[p].out[j] == t)
      ps = j;
  return psim_build_key1(kind + 5, p, ps, mu, dir); /* 6: reductions, 8: all-gathers */
}

static uint64_t reduction_key(const psim_build *b, int32_t x, int32_t slot, int32_t t, int32_t mu,
                              int dir) {
  return shared_key(b, 1, x, slot, t, mu, dir);
}

/* Key marking that consumer X's gradient (its input `slot`) feeds the
 * shared backward collective (shared_key). */
static uint64_t joined_key(int32_t x, int32_t slot, int32_t mu, int dir) {
  return psim_build_key1(7, x, slot, mu, dir);
}

/* Edges from X's tasks on the group's simulated devices into entry. */
static psim_status collective_inputs(psim_build *b, int32_t x, int32_t *xt, const psim_group *g,
                                     int32_t mu, int32_t entry) {
  psim_status st = PSIM_OK;
  for (int32_t i = 0; i < g->n && st == PSIM_OK; i++) {
    if (!b->simulated[g->devices[i]])
      continue;
    int32_t from = psim_build_src_task(b, xt, x, g->devices[i], mu);
    if (from >= 0)
      st = psim_tg_add_edge(&b->g, from, entry);
  }
  return st;
}

/* A later consumer's gradient joins the shared backward collective whose
 * exit is `cached`: it is summed locally into its input (once). */
static psim_status join_collective(psim_build *b, int32_t x, int32_t slot, int32_t *xt,
                                   const psim_group *g, uint64_t k1, int32_t mu, int dir,
                                   int32_t cached) {
  uint64_t kj = joined_key(x, slot, mu, dir), k2 = (uint64_t)g->devices[0];
  if (dir != PSIM_DIR_BWD || psim_bcache_get(b->cache, kj, k2) >= 0)
    return PSIM_OK;
  int32_t entry = psim_bcache_get(b->cache, k1 | 1ull << 59, k2);
  assert(entry >= 0); /* kept with the exit */
  PSIM_CHECK(collective_inputs(b, x, xt, g, mu, entry));
  return psim_build_keep(b, b->cache, kj, k2, cached);
}

/* Keeps a new collective's exit under (k1, k2) and, backward, its entry
 * (for the consumers that join it later) and X's membership. */
static psim_status keep_collective(psim_build *b, int32_t x, int32_t slot, uint64_t k1, uint64_t k2,
                                   int32_t mu, int dir, int32_t entry, int32_t exit) {
  PSIM_CHECK(psim_build_keep(b, b->cache, k1, k2, exit));
  if (dir != PSIM_DIR_BWD)
    return PSIM_OK;
  PSIM_CHECK(psim_build_keep(b, b->cache, k1 | 1ull << 59, k2, entry));
  return psim_build_keep(b, b->cache, joined_key(x, slot, mu, dir), k2, exit);
}

/* Adds (once) the reduction of X's partial sums for the group containing
 * entry e and returns its exit task. */
static psim_status reduction(psim_build *b, int32_t x, int32_t slot, int32_t t, int32_t *xt,
                             int32_t e, uint32_t mask, int32_t mu, int dir, bool scatter,
                             int32_t *exit) {
  psim_group *g;
  PSIM_CHECK(new_group(b, x, e, mask, &g));
  psim_comm_cache *cache = b->cache;
  uint64_t k1 = reduction_key(b, x, slot, t, mu, dir), k2 = (uint64_t)g->devices[0];
  b->reduce_leader = g->devices[0];
  int32_t cached = psim_bcache_get(cache, k1, k2);
  psim_status st = PSIM_OK;
  if (cached >= 0) {
    *exit = cached;
    st = join_collective(b, x, slot, xt, g, k1, mu, dir, cached);
    psim_free(g);
    return st;
  }
  psim_build_group_stride(b, x, e, mask, g);
  psim_region r;
  psim_build_tensor_region(b, x, e / b->s->ops[x].replicas, t, &r);
  const psim_tensor *ten = &b->m->tensors[t];
  psim_coll_desc d = psim_build_group_coll(
      b, g, scatter ? PSIM_COLL_REDUCE_SCATTER : PSIM_COLL_ALL_REDUCE,
      psim_build_region_elems(&r, ten->rank) * (double)psim_dtype_bytes(ten->dtype), false);
  psim_task_info info = {
      PSIM_TASK_COLLECTIVE, PSIM_TP_COMM_TP, (int16_t)b->s->ops[x].stage, x, mu, g->devices[0], -1};
  int32_t entry;
  st = psim_build_add_collective(b, &d, &info, &entry, exit);
  if (st == PSIM_OK)
    st = rank_skew(b, g, &info, &entry);
  if (st == PSIM_OK)
    st = collective_inputs(b, x, xt, g, mu, entry);
  if (st == PSIM_OK)
    st = keep_collective(b, x, slot, k1, k2, mu, dir, entry, *exit);
  psim_free(g);
  return st;
}

/* Canonical shard of sh: the same coordinates on t's dims, 0 elsewhere
 * (shards differing only off t's dims hold the same region of t). */
static int32_t region_id(const psim_build *b, int32_t x, int32_t sh, int32_t t) {
  const psim_op *op = &b->m->ops[x];
  const psim_op_config *cfg = &b->s->ops[x];
  int32_t coord[PSIM_MAX_OP_DIMS];
  psim_build_shard_coords(op, cfg, sh, coord);
  int32_t gqa = psim_build_gqa_heads(b, x, t); /* GQA: query heads select kv heads */
  for (int32_t i = 0; i < op->n_dims; i++)     /* a MoE token shard holds its own capacity slice */
    if (!psim_build_dim_in_tensor(&b->m->tensors[t], op->dims[i].dim) &&
        !psim_routing_token_dim(b->m, op, t, op->dims[i].dim) && i != gqa)
      coord[i] = 0;
  return psim_build_shard_index(op, cfg, coord);
}

/* Regions of tensor t held by each shard of op x and their region_id: the
 * consumers of one edge all gather from the same shards, so they are
 * computed once per (x, t) rather than per consumer shard. */
static psim_status shard_regions(const psim_build *b, int32_t x, int32_t t,
                                 const psim_region **regs, const int32_t **ids) {
  psim_comm_cache *h = b->cache;
  const psim_op_config *cx = &b->s->ops[x];
  size_t n = (size_t)(cx->n_devices / cx->replicas);
  if (!h->regs || h->reg_x != x || h->reg_t != t) {
    if (n > h->cap_regs) {
      psim_region *r = psim_realloc(h->regs, n * sizeof *r);
      int32_t *id = r ? psim_realloc(h->reg_ids, n * sizeof *id) : NULL;
      if (r)
        h->regs = r;
      if (!r || !id)
        return psim_error(PSIM_ENOMEM, "out of memory for %zu shard regions", n);
      h->reg_ids = id;
      h->cap_regs = n;
    }
    for (size_t sh = 0; sh < n; sh++) {
      psim_build_tensor_region(b, x, (int32_t)sh, t, &h->regs[sh]);
      h->reg_ids[sh] = region_id(b, x, (int32_t)sh, t);
    }
    h->reg_x = x;
    h->reg_t = t;
  }
  *regs = h->regs;
  *ids = h->reg_ids;
  return PSIM_OK;
}

/* Marks the regions X holds on device d (any shard, any replica) in served. */
static void serve_local(const psim_build *b, int32_t x, int32_t d, const int32_t *ids,
                        uint8_t *served) {
  const psim_op_config *cx = &b->s->ops[x];
  for (int32_t e = 0; e < cx->n_devices; e++)
    if (cx->devices[e] == d)
      served[ids[e / cx->replicas]] = 2;
}

/* A transfer of bytes from src to d after task `from` (-1: none), ending in
 * the barrier `arrived`. */
psim_status psim_build_add_transfer_after(psim_build *b, int32_t x, int32_t from, int32_t src,
                                          int32_t d, double bytes, int32_t mu, int pipeline,
                                          int32_t arrived) {
  psim_task_info info = {PSIM_TASK_TRANSFER,
                         (uint8_t)(pipeline ? PSIM_TP_COMM_PP : PSIM_TP_COMM_TP),
                         (int16_t)b->s->ops[x].stage,
                         x,
                         mu,
                         d,
                         -1};
  int32_t entry, exit;
  PSIM_CHECK(psim_p2p_add(&b->g, b->c, src, d, bytes, &info, &entry, &exit));
  if (from >= 0)
    PSIM_CHECK(psim_tg_add_edge(&b->g, from, entry));
  if (pipeline && b->inc.record)
    b->inc.seg_fixed[b->inc.cur_seg] = 1; /* the edge below depends on other ops' streams */
  int32_t waiter = pipeline && from >= 0 ? psim_build_send_waiter(b, from) : -1; /* schedules.c */
  if (waiter >= 0)
    PSIM_CHECK(psim_tg_add_edge(&b->g, exit, waiter));
  return psim_tg_add_edge(&b->g, exit, arrived);
}

static psim_status add_transfer(psim_build *b, int32_t x, int32_t *xt, int32_t src, int32_t d,
                                double bytes, int32_t mu, int pipeline, int32_t arrived) {
  int32_t from = psim_build_src_task(b, xt, x, src, mu);
  return psim_build_add_transfer_after(b, x, from, src, d, bytes, mu, pipeline, arrived);
}

/* Defers a transfer of the current connect edge to flush_exchange: region rs of tensor t
 * (the source's) to region rd (the consumer's). */
static psim_status defer_transfer(psim_build *b, int32_t x, int32_t from, int32_t src, int32_t d,
                                  double bytes, int32_t mu, int32_t arrived, int32_t t,
                                  const psim_region *rs, const psim_region *rd) {
  psim_comm_cache *h = b->cache;
  PSIM_CHECK(PSIM_VEC_RESERVE(h->pend, h->cap_pend, h->n_pend + 1));
  int32_t n = b->c->n_devices;
  psim_pending_xfer *p = &h->pend[h->n_pend];
  *p = (psim_pending_xfer){
      bytes, x, from, src,          d, mu, arrived, ((d - src) % n + n) % n, (int32_t)h->n_pend,
      t,     0, 0,    PSIM_A2A_NONE};
  psim_moe_a2a_classify(b, t, rs, rd, p);
  h->n_pend++;
  return PSIM_OK;
}

static int cmp_round(const void *pa, const void *pb) {
  const psim_pending_xfer *a = pa, *c = pb;
  if (a->round != c->round)
    return a->round < c->round ? -1 : 1;
  return (a->seq > c->seq) - (a->seq < c->seq);
}

/* The point-to-point transfers of one connect edge (every consumer shard's
 * gathers: a MoE dispatch's or combine's all-to-all, a resharding) in
 * pairwise-exchange rounds: round k holds the transfers from device i to
 * i + k (mod the device count), so each device sends to one peer and receives
 * from one peer per round. NCCL schedules grouped send/recv (its all-to-all,
 * torch.distributed.all_to_all_single) the same way: rank r sends to
 * r + delta and receives from r - delta in round delta (ncclP2pSchedule, NCCL
 * 2.30.7 src/init.cc); the pairwise exchange of Thakur et al. 2005 section
 * 4.5. The engine books links first come by (ready time, task id), so adding
 * the tasks round by round gives the exchange's (n - 1) m / bw on a
 * non-blocking switch; consumer by consumer gave (2n - 3) m / bw. Only the
 * tokens of a MoE layer (tensors with an expert dim) are exchanged so; other
 * gathers keep consumer order (docs/simulator.md, "Mixture of experts"). */
static psim_status flush_exchange(psim_build *b) {
  psim_comm_cache *h = b->cache;
  if (h->n_pend > 1)
    qsort(h->pend, h->n_pend, sizeof *h->pend, cmp_round);
  if (b->c->stack.moe_dispatcher != PSIM_MOE_ALLTOALL)
    return psim_moe_a2a_flush(b); /* DeepEP / HybridEP (moe_a2a.c) */
  psim_status st = PSIM_OK;
  for (size_t i = 0; i < h->n_pend && st == PSIM_OK; i++) {
    const psim_pending_xfer *p = &h->pend[i];
    st = psim_build_add_transfer_after(b, p->x, p->from, p->src, p->dst, p->bytes, p->mu, 0,
                                       p->arrived);
  }
  h->n_pend = 0;
  return st;
}

/* Partial sums that each source of a gather reduces in its group before it
 * sends (connect_partial): the reduction of output `slot` over `mask`. */
typedef struct reduced_src {
  int32_t slot;
  uint32_t mask;
  int dir;
} reduced_src;

/* The task a transfer of X's data from X's entry `entry` waits for: X's task
 * there, or (red) the reduction of that entry's group. */
static psim_status source_task(psim_build *b, int32_t x, int32_t t, int32_t *xt, int32_t entry,
                               int32_t mu, const reduced_src *red, int32_t *from) {
  if (!red) {
    *from = psim_build_src_task(b, xt, x, b->s->ops[x].devices[entry], mu);
    return PSIM_OK;
  }
  return reduction(b, x, red->slot, t, xt, entry, red->mask, mu, red->dir, false, from);
}

/* Transfers that bring region r of tensor t to device d from X's shards (one
 * source per distinct region, the local copy when d holds one). Returns the
 * barrier task that completes when everything has arrived. red: X's view of
 * t is a partial sum that each source reduces first (NULL: none). */
static psim_status gather_region(psim_build *b, int32_t x, int32_t t, int32_t *xt,
                                 const psim_region *r, int32_t d, int32_t mu, int pipeline,
                                 const reduced_src *red, int32_t *arrived) {
  const psim_op_config *cx = &b->s->ops[x];
  const psim_tensor *ten = &b->m->tensors[t];
  int32_t n_shards = cx->n_devices / cx->replicas;
  psim_comm_cache *cache = b->cache;
  PSIM_CHECK(PSIM_VEC_RESERVE(cache->served, cache->cap_served, (size_t)n_shards));
  memset(cache->served, 0, (size_t)n_shards);
  const psim_region *regs = NULL;
  const int32_t *ids = NULL;
  PSIM_CHECK(shard_regions(b, x, t, &regs, &ids));
  serve_local(b, x, d, ids, cache->served);
  bool exchange = !pipeline && psim_routing_expert_tensor(b->m, t);
  psim_task_info bar = {
      PSIM_TASK_BARRIER, (uint8_t)(pipeline ? PSIM_TP_COMM_PP : PSIM_TP_COMM_TP), -1, x, mu, d, -1};
  PSIM_CHECK(psim_tg_add_task(&b->g, 0, NULL, 0, &bar, arrived));
  for (int32_t sh = 0; sh < n_shards; sh++) {
    int32_t id = ids[sh];
    if (cache->served[id] == 1)
      continue;
    double elems = psim_build_overlap(&regs[sh], r, ten->rank);
    if (elems <= 0)
      continue;
    if (cache->served[id] == 2) { /* d holds this region itself */
      int32_t from = psim_build_src_task(b, xt, x, d, mu);
      cache->served[id] = 1;
      if (from >= 0)
        PSIM_CHECK(psim_tg_add_edge(&b->g, from, *arrived));
      continue;
    }
    cache->served[id] = 1;
    int32_t src = cx->devices[id * cx->replicas];
    psim_build_fold_check_transfer(b, pipeline, src, d);
    elems *= psim_routing_bytes_scale(b, t, &regs[sh], r); /* MoE: the routed tokens */
    double bytes = elems * (double)psim_dtype_bytes(ten->dtype);
    int32_t from;
    PSIM_CHECK(source_task(b, x, t, xt, id * cx->replicas, mu, red, &from));
    if (exchange) /* a MoE all-to-all: added in rounds (flush_exchange) */
      PSIM_CHECK(defer_transfer(b, x, from, src, d, bytes, mu, *arrived, t, &regs[sh], r));
    else
      PSIM_CHECK(psim_build_add_transfer_after(b, x, from, src, d, bytes, mu, pipeline, *arrived));
  }
  return PSIM_OK;
}

/* Dims of X (in t) along which region r is wider than entry e's shard. */
static uint32_t gather_mask(const psim_build *b, int32_t x, int32_t t, int32_t e,
                            const psim_region *r) {
  const psim_op *op = &b->m->ops[x];
  const psim_op_config *cfg = &b->s->ops[x];
  const psim_tensor *ten = &b->m->tensors[t];
  psim_region rx;
  psim_build_tensor_region(b, x, e / cfg->replicas, t, &rx);
  uint32_t mask = 0;
  for (int32_t j = 0; j < ten->rank; j++) {
    if (rx.lo[j] == r->lo[j] && rx.hi[j] == r->hi[j])
      continue;
    int32_t i = psim_op_dim_index(op, ten->dims[j]);
    if (i >= 0 && cfg->degree[i] > 1)
      mask |= 1u << i;
  }
  return mask;
}

/* Bytes per element of t that an all-gather for consumer y moves: 1 for the
 * input of an FP8 GEMM under a stack that casts before gathering
 * (fp8_tp_all_gather, tensorwise scaling: torchao PrepareFloat8ModuleInput
 * "cast happens before the all-gather", torchao/float8/float8_tensor_parallel.py;
 * torchtitan v0.2.2 parallelize.py: "for rowwise recipes, we use regular TP
 * and all-gather happens in high precision"), else t's dtype. */
static double gather_elem_bytes(const psim_build *b, int32_t y, int32_t t, int dir) {
  const psim_stack *st = &b->c->stack;
  double bytes = (double)psim_dtype_bytes(b->m->tensors[t].dtype);
  if (dir != PSIM_DIR_BWD && b->m->ops[y].attrs.fp8 && st->fp8_tp_all_gather && !st->fp8_rowwise)
    return fmin(bytes, 1.0);
  return bytes;
}

/* When region r on entry e's device is exactly the union of the shards of a
 * group that differs from e only along dims of t (sharded -> replicated),
 * adds (once) that group's all-gather and returns its exit in *exit; else
 * leaves *exit at -1. */
static psim_status all_gather(psim_build *b, int32_t x, int32_t slot, int32_t t, int32_t *xt,
                              int32_t e, const psim_region *r, int32_t mu, int dir, double esize,
                              int32_t *exit) {
  const psim_tensor *ten = &b->m->tensors[t];
  uint32_t mask = gather_mask(b, x, t, e, r);
  if (!mask)
    return PSIM_OK;
  psim_group *g;
  PSIM_CHECK(new_group(b, x, e, mask, &g));
  const psim_region *regs;
  const int32_t *ids;
  psim_status rs = shard_regions(b, x, t, &regs, &ids);
  if (rs != PSIM_OK) {
    psim_free(g);
    return rs;
  }
  double covered = 0;
  for (int32_t i = 0; i < g->n; i++) { /* devices are distinct: entries[i] is entry_on's */
    const psim_region *rg = &regs[g->entries[i] / b->s->ops[x].replicas];
    double elems = psim_build_region_elems(rg, ten->rank);
    covered += psim_build_overlap(rg, r, ten->rank) == elems ? elems : -1e300;
  }
  psim_status st = PSIM_OK;
  if (g->n > 1 && covered == psim_build_region_elems(r, ten->rank)) {
    psim_comm_cache *cache = b->cache;
    uint64_t k1 = shared_key(b, 3, x, slot, t, mu, dir), k2 = (uint64_t)g->devices[0];
    *exit = psim_bcache_get(cache, k1, k2);
    if (*exit >= 0) {
      st = join_collective(b, x, slot, xt, g, k1, mu, dir, *exit);
    } else {
      psim_build_group_stride(b, x, e, mask, g);
      psim_coll_desc d = psim_build_group_coll(b, g, PSIM_COLL_ALL_GATHER, covered * esize, false);
      psim_task_info info = {PSIM_TASK_COLLECTIVE,
                             PSIM_TP_COMM_TP,
                             (int16_t)b->s->ops[x].stage,
                             x,
                             mu,
                             g->devices[0],
                             -1};
      int32_t entry;
      st = psim_build_add_collective(b, &d, &info, &entry, exit);
      if (st == PSIM_OK)
        st = rank_skew(b, g, &info, &entry);
      if (st == PSIM_OK)
        st = collective_inputs(b, x, xt, g, mu, entry);
      if (st == PSIM_OK)
        st = keep_collective(b, x, slot, k1, k2, mu, dir, entry, *exit);
    }
  }
  psim_free(g);
  return st;
}

/* A shard of X holding all of region r (any replica), or -1. */
static int32_t covering_shard(const psim_build *b, int32_t x, int32_t t, const psim_region *r) {
  const psim_op_config *cx = &b->s->ops[x];
  const psim_tensor *ten = &b->m->tensors[t];
  double want = psim_build_region_elems(r, ten->rank);
  for (int32_t sh = 0; sh < cx->n_devices / cx->replicas; sh++) {
    psim_region rx;
    psim_build_tensor_region(b, x, sh, t, &rx);
    if (psim_build_overlap(&rx, r, ten->rank) == want)
      return sh;
  }
  return -1;
}

/* Megatron-LM's scatter-gather pipeline transfer (Narayanan et al. 2021,
 * section 4.1): when the receiving op is replicated r ways (a tensor-parallel
 * group), each replica receives 1/r of the tensor over its own link and the
 * group all-gathers it. *exit is the all-gather's end, or -1 when X holds no
 * shard covering r (then the plain transfers apply). */
static psim_status scatter_gather(psim_build *b, int32_t x, int32_t t, int32_t *xt, int32_t y,
                                  const psim_op_local *ly, const psim_region *r, int32_t mu,
                                  int dir, int32_t *exit) {
  const psim_op_config *cx = &b->s->ops[x], *cy = &b->s->ops[y];
  const psim_tensor *ten = &b->m->tensors[t];
  int32_t sh = covering_shard(b, x, t, r);
  if (sh < 0)
    return PSIM_OK;
  double bytes = psim_build_region_elems(r, ten->rank) * (double)psim_dtype_bytes(ten->dtype);
  int32_t src = cx->devices[sh * cx->replicas + ly->replica % cx->replicas];
  int32_t piece = b->g.n_tasks; /* the barrier gather_region-style transfers end in */
  psim_task_info bar = {PSIM_TASK_BARRIER, PSIM_TP_COMM_PP, -1, x, mu, ly->device, -1};
  PSIM_CHECK(psim_tg_add_task(&b->g, 0, NULL, 0, &bar, &piece));
  PSIM_CHECK(add_transfer(b, x, xt, src, ly->device, bytes / cy->replicas, mu, 1, piece));
  /* the all-gather among the receiving replicas of this shard */
  psim_group *g = psim_build_group_new(b);
  if (!g)
    return psim_error(PSIM_ENOMEM, "out of memory");
  g->n = 0;
  for (int32_t rep = 0; rep < cy->replicas; rep++)
    g->devices[g->n++] = cy->devices[ly->shard * cy->replicas + rep];
  g->n_groups = cy->n_devices / g->n;
  psim_build_replica_family(b, cy, ly->shard, g);
  psim_comm_cache *cache = b->cache;
  uint64_t k1 = psim_build_key1(4, y, 0, mu, dir),
           k2 = ((uint64_t)(uint32_t)t << 32) | (uint32_t)g->devices[0];
  int32_t entry = psim_bcache_get(cache, k1 | 1ull << 59, k2);
  *exit = psim_bcache_get(cache, k1, k2);
  psim_status st = PSIM_OK;
  if (*exit < 0) {
    psim_coll_desc d = psim_build_group_coll(b, g, PSIM_COLL_ALL_GATHER, bytes, false);
    psim_task_info info = {
        PSIM_TASK_COLLECTIVE, PSIM_TP_COMM_PP, (int16_t)cy->stage, y, mu, g->devices[0], -1};
    st = psim_build_add_collective(b, &d, &info, &entry, exit);
    if (st == PSIM_OK)
      st = psim_build_keep(b, cache, k1, k2, *exit);
    if (st == PSIM_OK)
      st = psim_build_keep(b, cache, k1 | 1ull << 59, k2, entry);
  }
  if (st == PSIM_OK)
    st = psim_tg_add_edge(&b->g, piece, entry);
  psim_free(g);
  return st;
}

/* Connects X's tasks (producing tensor t, in X's layout) to Y's task on local
 * k, adding whatever communication the two layouts need. */
static psim_status connect_layouts(psim_build *b, int32_t x, int32_t slot, int32_t *xt, int32_t y,
                                   int32_t k, int32_t *yt, int32_t t, int32_t mu, int dir);

/* The edge X -> Y(local k) needs the same communication for every
 * micro-batch; when it is a plain local dependency the source shard is
 * remembered and later micro-batches skip the layout analysis. */
static psim_status connect(psim_build *b, int32_t x, int32_t slot, int32_t *xt, int32_t y,
                           int32_t k, int32_t *yt, int32_t t, int32_t mu, int dir) {
  /* one memo entry per edge: (payload << 2) | kind, kind 1 = a local
   * dependency on X's shard `payload`, 2 = a reduction led by device
   * `payload` whose result stays local, 3 = anything else */
  if (b->n_micro == 1) /* the memo would never be read */
    return connect_layouts(b, x, slot, xt, y, k, yt, t, mu, dir);
  psim_comm_cache *cache = b->memo;
  uint64_t k1 = psim_build_key1(5, x, slot, 0, dir),
           k2 = ((uint64_t)(uint32_t)y << 32) | (uint32_t)k;
  int32_t memo = psim_bcache_get(cache, k1, k2);
  int32_t to = *psim_build_task_slot(b, yt, y, k, mu);
  if (memo >= 0 && (memo & 3) == 1) {
    int32_t from = *psim_build_task_slot(b, xt, x, memo >> 2, mu);
    return from >= 0 ? psim_tg_add_edge(&b->g, from, to) : PSIM_OK;
  }
  if (memo >= 0 && (memo & 3) == 2) { /* backward: once X joined the shared reduction */
    uint64_t lead = (uint64_t)(memo >> 2);
    int32_t exit = psim_bcache_get(b->cache, reduction_key(b, x, slot, t, mu, dir), lead);
    if (exit >= 0 &&
        (dir != PSIM_DIR_BWD || psim_bcache_get(b->cache, joined_key(x, slot, mu, dir), lead) >= 0))
      return psim_tg_add_edge(&b->g, exit, to);
  }
  if (memo >= 0)
    return connect_layouts(b, x, slot, xt, y, k, yt, t, mu, dir);
  b->direct_local = -1;
  b->reduce_local = false;
  PSIM_CHECK(connect_layouts(b, x, slot, xt, y, k, yt, t, mu, dir));
  if (b->direct_local >= 0)
    return psim_build_keep(b, cache, k1, k2, b->direct_local << 2 | 1);
  if (b->reduce_local)
    return psim_build_keep(b, cache, k1, k2, b->reduce_leader << 2 | 2);
  return psim_build_keep(b, cache, k1, k2, 3);
}

/* X's view of t is a partial sum (mask): reduce it in the group of X's entry
 * e (a reduce-scatter when Y's region on e's device is 1/k of X's), then
 * bring Y's region over unless the result is already on Y's device. */
static psim_status connect_partial(psim_build *b, int32_t x, int32_t slot, int32_t *xt,
                                   const psim_op_local *ly, int32_t to, int32_t t,
                                   const psim_region *ry, uint32_t mask, int32_t e, int32_t mu,
                                   int dir, int pipeline) {
  const psim_op_config *cx = &b->s->ops[x];
  const psim_tensor *ten = &b->m->tensors[t];
  psim_region rx;
  psim_build_tensor_region(b, x, e / cx->replicas, t, &rx);
  int32_t k_red = 1;
  for (int32_t i = 0; i < b->m->ops[x].n_dims; i++)
    if (mask & (1u << i))
      k_red *= cx->degree[i];
  double ratio =
      psim_build_region_elems(&rx, ten->rank) / fmax(1, psim_build_region_elems(ry, ten->rank));
  bool scatter = fabs(ratio - k_red) < 0.5 && cx->devices[e] == ly->device;
  int32_t exit;
  PSIM_CHECK(reduction(b, x, slot, t, xt, e, mask, mu, dir, scatter, &exit));
  bool local = cx->devices[e] == ly->device;
  if (local && psim_build_overlap(&rx, ry, ten->rank) == psim_build_region_elems(ry, ten->rank)) {
    b->reduce_local = true;
    return psim_tg_add_edge(&b->g, exit, to);
  }
  /* Y needs more than the local sums hold (a MoE combine whose experts are
   * split over etp: the other experts' reduced tokens, the all-to-all) */
  reduced_src red = {slot, mask, dir};
  int32_t arrived;
  PSIM_CHECK(
      gather_region(b, x, t, xt, ry, ly->device, mu, pipeline, local ? &red : NULL, &arrived));
  PSIM_CHECK(psim_tg_add_edge(&b->g, exit, arrived));
  return psim_tg_add_edge(&b->g, arrived, to);
}

static psim_status connect_layouts(psim_build *b, int32_t x, int32_t slot, int32_t *xt, int32_t y,
                                   int32_t k, int32_t *yt, int32_t t, int32_t mu, int dir) {
  const psim_op_local *ly = &b->locals[b->loc_first[y] + k];
  const psim_op_config *cx = &b->s->ops[x];
  int32_t to = *psim_build_task_slot(b, yt, y, k, mu);
  psim_region ry;
  psim_build_tensor_region(b, y, ly->shard, t, &ry);
  const psim_tensor *ten = &b->m->tensors[t];
  uint32_t mask = psim_build_partial_mask(b, x, t, dir);
  int pipeline = cx->stage != b->s->ops[y].stage;
  int32_t e = psim_build_entry_on(b, x, ly->device);
  if (mask && e < 0)
    e = 0; /* different device sets: reduce in X's first group, then transfer */
  if (mask)
    return connect_partial(b, x, slot, xt, ly, to, t, &ry, mask, e, mu, dir, pipeline);
  if (e >= 0) {
    psim_region rx;
    psim_build_tensor_region(b, x, e / cx->replicas, t, &rx);
    if (psim_build_overlap(&rx, &ry, ten->rank) == psim_build_region_elems(&ry, ten->rank)) {
      int32_t lx = psim_build_local_on(b, x, ly->device);
      b->direct_local = lx >= 0 ? lx : 0;
      int32_t from = psim_build_src_task(b, xt, x, ly->device, mu);
      return from >= 0 ? psim_tg_add_edge(&b->g, from, to) : PSIM_OK;
    }
  }
  if (e >= 0 && !pipeline) {
    int32_t exit = -1;
    PSIM_CHECK(
        all_gather(b, x, slot, t, xt, e, &ry, mu, dir, gather_elem_bytes(b, y, t, dir), &exit));
    if (exit >= 0)
      return psim_tg_add_edge(&b->g, exit, to);
  }
  if (pipeline && b->s->ops[y].replicas > 1) {
    int32_t exit = -1;
    PSIM_CHECK(scatter_gather(b, x, t, xt, y, ly, &ry, mu, dir, &exit));
    if (exit >= 0)
      return psim_tg_add_edge(&b->g, exit, to);
  }
  psim_comm_cache *cache = b->cache;
  uint64_t k1 = psim_build_key1(2, x, slot, mu, dir);
  uint64_t k2 = ((uint64_t)(uint32_t)ly->device << 32) | (uint32_t)(dir == PSIM_DIR_BWD ? y : t);
  int32_t arrived = psim_bcache_get(cache, k1, k2);
  if (arrived < 0) {
    PSIM_CHECK(gather_region(b, x, t, xt, &ry, ly->device, mu, pipeline, NULL, &arrived));
    PSIM_CHECK(psim_build_keep(b, cache, k1, k2, arrived));
  }
  return psim_tg_add_edge(&b->g, arrived, to);
}

/* Forward (and recompute) data edges into op y. */
psim_status psim_build_connect_inputs(psim_build *b, int32_t y, int32_t mu) {
  const psim_op *op = &b->m->ops[y];
  int32_t nk = b->loc_first[y + 1] - b->loc_first[y];
  for (int32_t i = 0; i < op->n_in; i++) {
    int32_t t = op->in[i];
    int32_t x = b->m->tensors[t].producer;
    if (x < 0)
      continue; /* inputs come from the data loader, weights are resident */
    int32_t slot = 0;
    for (int32_t j = 0; j < b->m->ops[x].n_out; j++)
      if (b->m->ops[x].out[j] == t)
        slot = j;
    for (int32_t k = 0; k < nk; k++) {
      PSIM_CHECK(connect(b, x, slot, b->fwd, y, k, b->fwd, t, mu, PSIM_DIR_FWD));
      if (psim_build_recomputed(b, y) && psim_build_recomputed(b, x) &&
          psim_build_rc_unit(b, x) == psim_build_rc_unit(b, y))
        PSIM_CHECK(connect(b, x, slot, b->rec, y, k, b->rec, t, mu, PSIM_DIR_REC));
    }
    PSIM_CHECK(flush_exchange(b));
  }
  return PSIM_OK;
}

/* Backward: the gradient of each input activation flows from y back to x. */
psim_status psim_build_connect_grads(psim_build *b, int32_t y, int32_t mu) {
  const psim_op *op = &b->m->ops[y];
  for (int32_t i = 0; i < op->n_in; i++) {
    int32_t t = op->in[i];
    int32_t x = b->m->tensors[t].producer;
    if (x < 0)
      continue;
    bool cross = b->s->ops[x].stage != b->s->ops[y].stage;
    int32_t r = cross ? psim_build_first_recomputed(b, x) : -1;
    int32_t nk = b->loc_first[x + 1] - b->loc_first[x];
    for (int32_t k = 0; k < nk; k++) {
      size_t e0 = b->g.n_edges;
      PSIM_CHECK(connect(b, y, i, b->bwd, x, k, b->bwd, t, mu, PSIM_DIR_BWD));
      if (r >= 0)
        PSIM_CHECK(psim_build_gate_recompute(b, x, k, r, mu, e0));
    }
    PSIM_CHECK(flush_exchange(b));
  }
  return PSIM_OK;
}
