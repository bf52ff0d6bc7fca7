/* build.c - the task-graph builder: (model, cluster, strategy) -> tasks.
 *
 * Compute tasks: one per (op, simulated shard, micro-batch, pass), issued per
 * device in the pipeline schedule's order and chained in that order (a CUDA
 * stream runs kernels in issue order).
 *
 * Communication follows from layouts (GSPMD/Alpa rules), per tensor edge
 * X -> T -> Y and micro-batch:
 *  - partial sums: X splits a dim that T does not carry (forward: a contracted
 *    dim; backward: any dim of the consumer outside T) -> the group of shards
 *    differing only in those dims reduces: reduce-scatter when Y's region is
 *    1/k of X's, else all-reduce;
 *  - then Y's shard region of T is gathered from the shards of X that overlap
 *    it (FlexFlow's rectangle intersection): a local edge when Y's device
 *    holds it, else point-to-point transfers over the route (this covers
 *    all-gather, all-to-all and pipeline boundaries alike).
 * Backward mirrors forward with producer and consumer swapped. Weight
 * gradients of shards that differ only in non-weight dims are synchronised
 * (all-reduce, or reduce-scatter under ZeRO >= 2) in buckets, optionally
 * overlapped with the backward pass; then the optimizer update runs. */
#include "sim/build/build.h"

#include <math.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/engine/collective.h"

enum { DIR_FWD = 0, DIR_BWD = 1, DIR_REC = 2 };

static uint32_t partial_mask(const psim_build *b, int32_t o, int32_t t, int dir);

/* ---- communication cache: (kind, a, b, c, d) -> task ------------------- */

typedef struct cache_entry {
  uint64_t k1, k2;
  int32_t value;
  int32_t used;
} cache_entry;

typedef struct region region;

typedef struct comm_cache {
  cache_entry *slots;
  size_t cap, n;
  uint8_t *served; /* scratch for gather_region, one byte per shard */
  size_t cap_served;
  /* the regions of tensor t held by every shard of op x, and their
   * region_id, for the last (x, t) asked (shard_regions) */
  int32_t reg_x, reg_t;
  region *regs;
  int32_t *reg_ids;
  size_t cap_regs;
} comm_cache;

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

static psim_status cache_grow(comm_cache *h) {
  size_t ncap = h->cap ? h->cap * 2 : 1024;
  cache_entry *ns = psim_calloc(ncap, sizeof *ns);
  if (!ns)
    return psim_error(PSIM_ENOMEM, "out of memory in the task-graph builder");
  for (size_t i = 0; i < h->cap; i++) {
    if (!h->slots[i].used)
      continue;
    size_t j = mix64(h->slots[i].k1 ^ mix64(h->slots[i].k2)) & (ncap - 1);
    while (ns[j].used)
      j = (j + 1) & (ncap - 1);
    ns[j] = h->slots[i];
  }
  psim_free(h->slots);
  h->slots = ns;
  h->cap = ncap;
  return PSIM_OK;
}

/* Finds key; returns the slot (used or the empty one where it would go). */
static cache_entry *cache_slot(comm_cache *h, uint64_t k1, uint64_t k2) {
  size_t j = mix64(k1 ^ mix64(k2)) & (h->cap - 1);
  while (h->slots[j].used && (h->slots[j].k1 != k1 || h->slots[j].k2 != k2))
    j = (j + 1) & (h->cap - 1);
  return &h->slots[j];
}

static psim_status cache_put(comm_cache *h, uint64_t k1, uint64_t k2, int32_t v) {
  if ((h->n + 1) * 2 > h->cap)
    PSIM_CHECK(cache_grow(h));
  cache_entry *e = cache_slot(h, k1, k2);
  if (!e->used)
    h->n++;
  e->k1 = k1;
  e->k2 = k2;
  e->value = v;
  e->used = 1;
  return PSIM_OK;
}

/* Forgets every entry (keeps the capacity): the per-micro-batch entries are
 * dead once that micro-batch's edges are built. */
static void cache_reset(comm_cache *h) {
  if (h->n)
    memset(h->slots, 0, h->cap * sizeof *h->slots);
  h->n = 0;
}

static int32_t cache_get(comm_cache *h, uint64_t k1, uint64_t k2) {
  if (!h->cap)
    return -1;
  cache_entry *e = cache_slot(h, k1, k2);
  return e->used ? e->value : -1;
}

/* A communication-cache entry as a connect segment added it (incremental
 * builds replay them; build.h). */
typedef struct put_record {
  uint64_t k1, k2;
  int32_t value; /* a task of the segment, or (memo) an edge decision */
  uint8_t memo;  /* 1: b->memo, 0: b->cache */
} put_record;

static psim_status record_put(psim_build *b, uint64_t k1, uint64_t k2, int32_t v, bool memo) {
  if (!b->record)
    return PSIM_OK;
  PSIM_CHECK(PSIM_VEC_RESERVE(b->puts, b->cap_puts, b->n_puts + 1));
  b->puts[b->n_puts++] = (put_record){k1, k2, v, (uint8_t)memo};
  return PSIM_OK;
}

/* cache_put into b->cache or b->memo, recorded for incremental builds. */
static psim_status keep(psim_build *b, comm_cache *h, uint64_t k1, uint64_t k2, int32_t v) {
  PSIM_CHECK(cache_put(h, k1, k2, v));
  return record_put(b, k1, k2, v, h == b->memo);
}

/* The op a communication-cache key belongs to (key1's op field). */
static int32_t key_op(uint64_t k1) {
  return (int32_t)((k1 >> 28) & 0x7fffffff);
}

static uint64_t key1(int kind, int32_t op, int32_t slot, int32_t micro, int dir) {
  return ((uint64_t)kind << 60) | ((uint64_t)(uint32_t)op << 28) | ((uint64_t)slot << 24) |
         ((uint64_t)(micro & 0x3fffff) << 2) | (uint64_t)dir;
}

/* ---- collective templates --------------------------------------------------
 * The same collective (kind, group, bytes, contention) recurs for every layer
 * and micro-batch; costing it routes every member, so aggregated collectives
 * are costed once and later copies reuse the duration and resources. */

typedef struct coll_template {
  uint64_t hash;
  psim_coll_kind kind;
  psim_allreduce_algo algo;
  int32_t n, concurrent, stride;
  double bytes;
  size_t dev_at, res_at; /* offsets into the pools */
  int32_t n_res;
  double duration_s;
} coll_template;

typedef struct coll_cache {
  coll_template *items;
  size_t n, cap;
  int32_t *dev_pool, *res_pool;
  size_t n_dev, cap_dev, n_resv, cap_resv;
  int32_t *index; /* open addressing over items, -1 = empty */
  size_t cap_index;
} coll_cache;

static uint64_t coll_hash(const psim_coll_desc *d) {
  uint64_t h = mix64(((uint64_t)d->kind << 56) ^ ((uint64_t)d->algo << 48) ^ (uint64_t)d->n);
  union {
    double d;
    uint64_t u;
  } bytes = {d->bytes};
  h = mix64(h ^ bytes.u ^ ((uint64_t)(uint32_t)d->concurrent_groups << 32) ^
            (uint32_t)d->group_stride);
  for (int32_t i = 0; i < d->n; i++)
    h = mix64(h ^ (uint64_t)(uint32_t)d->devices[i]);
  return h;
}

static bool coll_same(const coll_cache *cc, const coll_template *t, const psim_coll_desc *d) {
  return t->kind == d->kind && t->algo == d->algo && t->n == d->n && t->bytes == d->bytes &&
         t->concurrent == d->concurrent_groups && t->stride == d->group_stride &&
         memcmp(cc->dev_pool + t->dev_at, d->devices, sizeof(int32_t) * (size_t)d->n) == 0;
}

static int32_t coll_find(const coll_cache *cc, const psim_coll_desc *d, uint64_t h) {
  if (!cc->cap_index)
    return -1;
  for (size_t j = h & (cc->cap_index - 1);; j = (j + 1) & (cc->cap_index - 1)) {
    int32_t i = cc->index[j];
    if (i < 0)
      return -1;
    if (cc->items[i].hash == h && coll_same(cc, &cc->items[i], d))
      return i;
  }
}

static psim_status coll_reindex(coll_cache *cc) {
  size_t cap = cc->cap_index ? cc->cap_index * 2 : 256;
  int32_t *idx = psim_malloc(sizeof *idx * cap);
  if (!idx)
    return psim_error(PSIM_ENOMEM, "out of memory in the task-graph builder");
  memset(idx, 0xff, sizeof *idx * cap);
  for (size_t i = 0; i < cc->n; i++) {
    size_t j = cc->items[i].hash & (cap - 1);
    while (idx[j] >= 0)
      j = (j + 1) & (cap - 1);
    idx[j] = (int32_t)i;
  }
  psim_free(cc->index);
  cc->index = idx;
  cc->cap_index = cap;
  return PSIM_OK;
}

/* Remembers the single task just added for d (aggregated fidelity). */
static psim_status coll_remember(psim_build *b, const psim_coll_desc *d, uint64_t h, int32_t task) {
  coll_cache *cc = b->colls;
  const psim_taskgraph *g = &b->g;
  int32_t n_res = g->res_first[task + 1] - g->res_first[task];
  PSIM_CHECK(PSIM_VEC_RESERVE(cc->items, cc->cap, cc->n + 1));
  PSIM_CHECK(PSIM_VEC_RESERVE(cc->dev_pool, cc->cap_dev, cc->n_dev + (size_t)d->n));
  PSIM_CHECK(PSIM_VEC_RESERVE(cc->res_pool, cc->cap_resv, cc->n_resv + (size_t)n_res));
  if ((cc->n + 1) * 2 > cc->cap_index)
    PSIM_CHECK(coll_reindex(cc));
  coll_template *t = &cc->items[cc->n];
  *t =
      (coll_template){h,        d->kind,   d->algo,    d->n,  d->concurrent_groups, d->group_stride,
                      d->bytes, cc->n_dev, cc->n_resv, n_res, g->duration_s[task]};
  memcpy(cc->dev_pool + cc->n_dev, d->devices, sizeof(int32_t) * (size_t)d->n);
  memcpy(cc->res_pool + cc->n_resv, g->res + g->res_first[task], sizeof(int32_t) * (size_t)n_res);
  cc->n_dev += (size_t)d->n;
  cc->n_resv += (size_t)n_res;
  size_t j = h & (cc->cap_index - 1);
  while (cc->index[j] >= 0)
    j = (j + 1) & (cc->cap_index - 1);
  cc->index[j] = (int32_t)cc->n++;
  return PSIM_OK;
}

/* psim_coll_add with the template cache (aggregated fidelity). */
static psim_status add_collective(psim_build *b, const psim_coll_desc *d,
                                  const psim_task_info *info, int32_t *entry, int32_t *exit) {
  if (b->o->fidelity != PSIM_FIDELITY_AGGREGATE || d->n < 2)
    return psim_coll_add(&b->g, b->c, d, b->o->fidelity, info, entry, exit);
  uint64_t h = coll_hash(d);
  int32_t i = coll_find(b->colls, d, h);
  if (i < 0) {
    PSIM_CHECK(psim_coll_add(&b->g, b->c, d, b->o->fidelity, info, entry, exit));
    if (*entry != *exit || *entry != b->g.n_tasks - 1)
      return PSIM_OK; /* not a single task: nothing to reuse */
    return coll_remember(b, d, h, *entry);
  }
  const coll_cache *cc = b->colls;
  const coll_template *t = &cc->items[i];
  psim_task_info ti = *info;
  ti.kind = PSIM_TASK_COLLECTIVE;
  ti.device = d->devices[0];
  PSIM_CHECK(
      psim_tg_add_task(&b->g, t->duration_s, cc->res_pool + t->res_at, t->n_res, &ti, entry));
  *exit = *entry;
  return PSIM_OK;
}

static void coll_cache_free(coll_cache *cc) {
  if (!cc)
    return;
  psim_free(cc->items);
  psim_free(cc->dev_pool);
  psim_free(cc->res_pool);
  psim_free(cc->index);
  psim_free(cc);
}

/* ---- shards and regions -------------------------------------------------- */

/* Size of model dim d within one micro-batch (the batch dim is sliced). */
static int64_t dim_size(const psim_build *b, int32_t d) {
  int64_t n = b->m->dims[d].size;
  if (b->m->dims[d].role == PSIM_ROLE_BATCH && b->n_micro > 1)
    n = n / b->n_micro;
  return n > 0 ? n : 1;
}

static void shard_coords(const psim_op *op, const psim_op_config *cfg, int32_t shard,
                         int32_t *coord) {
  for (int32_t i = op->n_dims - 1; i >= 0; i--) {
    coord[i] = shard % cfg->degree[i];
    shard /= cfg->degree[i];
  }
}

static int32_t shard_index(const psim_op *op, const psim_op_config *cfg, const int32_t *coord) {
  int32_t s = 0;
  for (int32_t i = 0; i < op->n_dims; i++)
    s = s * cfg->degree[i] + coord[i];
  return s;
}

static int64_t shard_offset(int64_t n, int32_t d, int32_t j) {
  int64_t base = n / d, rem = n % d;
  return j * base + (j < rem ? j : rem);
}

/* Extents of op's iteration dims in shard `shard` (per micro-batch). */
static void shard_extents(const psim_build *b, int32_t o, int32_t shard, int64_t *ext) {
  const psim_op *op = &b->m->ops[o];
  const psim_op_config *cfg = &b->s->ops[o];
  int32_t coord[PSIM_MAX_OP_DIMS];
  shard_coords(op, cfg, shard, coord);
  for (int32_t i = 0; i < op->n_dims; i++)
    ext[i] = psim_shard_size(dim_size(b, op->dims[i].dim), cfg->degree[i], coord[i]);
}

struct region {
  int64_t lo[PSIM_MAX_RANK], hi[PSIM_MAX_RANK];
};

/* Region of tensor t held (or needed) by shard `shard` of op o. */
static void tensor_region(const psim_build *b, int32_t o, int32_t shard, int32_t t, region *r) {
  const psim_op *op = &b->m->ops[o];
  const psim_op_config *cfg = &b->s->ops[o];
  const psim_tensor *ten = &b->m->tensors[t];
  int32_t coord[PSIM_MAX_OP_DIMS];
  shard_coords(op, cfg, shard, coord);
  for (int32_t j = 0; j < ten->rank; j++) {
    int64_t n = dim_size(b, ten->dims[j]);
    int32_t i = psim_op_dim_index(op, ten->dims[j]);
    if (i < 0 || cfg->degree[i] == 1) {
      r->lo[j] = 0;
      r->hi[j] = n;
    } else {
      r->lo[j] = shard_offset(n, cfg->degree[i], coord[i]);
      r->hi[j] = r->lo[j] + psim_shard_size(n, cfg->degree[i], coord[i]);
    }
  }
}

/* Elements of the intersection of two regions of a tensor of rank n. */
static double overlap(const region *a, const region *c, int32_t rank) {
  double v = 1;
  for (int32_t j = 0; j < rank; j++) {
    int64_t lo = a->lo[j] > c->lo[j] ? a->lo[j] : c->lo[j];
    int64_t hi = a->hi[j] < c->hi[j] ? a->hi[j] : c->hi[j];
    if (hi <= lo)
      return 0;
    v *= (double)(hi - lo);
  }
  return v;
}

static double region_elems(const region *a, int32_t rank) {
  return overlap(a, a, rank);
}

/* Entry index (shard * replicas + replica) of op o on device d, or -1. */
/* Ops spread over more devices than this find a device's entry or shard by
 * hash (built once in make_locals) rather than by a scan. */
#define PSIM_BUILD_SCAN_DEVICES 64

static int32_t entry_on(const psim_build *b, int32_t o, int32_t d) {
  const psim_op_config *cfg = &b->s->ops[o];
  if (cfg->n_devices > PSIM_BUILD_SCAN_DEVICES)
    return cache_get(b->where, (uint64_t)(uint32_t)o, (uint64_t)(uint32_t)d);
  for (int32_t e = 0; e < cfg->n_devices; e++)
    if (cfg->devices[e] == d)
      return e;
  return -1;
}

/* Local index (within op o's locals) on device d, or -1. */
static int32_t local_on(const psim_build *b, int32_t o, int32_t d) {
  if (b->loc_first[o + 1] - b->loc_first[o] > PSIM_BUILD_SCAN_DEVICES)
    return cache_get(b->where, (uint64_t)(uint32_t)o | 1ull << 62, (uint64_t)(uint32_t)d);
  for (int32_t k = b->loc_first[o]; k < b->loc_first[o + 1]; k++)
    if (b->locals[k].device == d)
      return k - b->loc_first[o];
  return -1;
}

/* Indexes the entries and simulated shards of widely spread ops by device. */
static psim_status index_devices(psim_build *b) {
  for (int32_t o = 0; o < b->m->n_ops; o++) {
    const psim_op_config *cfg = &b->s->ops[o];
    for (int32_t e = 0; cfg->n_devices > PSIM_BUILD_SCAN_DEVICES && e < cfg->n_devices; e++)
      if (cache_get(b->where, (uint64_t)(uint32_t)o, (uint64_t)(uint32_t)cfg->devices[e]) < 0)
        PSIM_CHECK(
            cache_put(b->where, (uint64_t)(uint32_t)o, (uint64_t)(uint32_t)cfg->devices[e], e));
    int32_t nk = b->loc_first[o + 1] - b->loc_first[o];
    for (int32_t k = 0; nk > PSIM_BUILD_SCAN_DEVICES && k < nk; k++) {
      uint64_t d = (uint64_t)(uint32_t)b->locals[b->loc_first[o] + k].device;
      if (cache_get(b->where, (uint64_t)(uint32_t)o | 1ull << 62, d) < 0)
        PSIM_CHECK(cache_put(b->where, (uint64_t)(uint32_t)o | 1ull << 62, d, k));
    }
  }
  return PSIM_OK;
}

static int32_t *task_slot(const psim_build *b, int32_t *arr, int32_t o, int32_t k, int32_t mu) {
  return &arr[((size_t)b->loc_first[o] + (size_t)k) * (size_t)b->n_micro + (size_t)mu];
}

/* ---- locals (which shards are simulated) -------------------------------- */

/* Whether every device of cfg is one of the stage's. mark (one byte per
 * cluster device, all zero) is scratch, left all zero. O(devices of the
 * stage); issue 9: was O(devices^2) per op, hours on 10^6 devices. */
static bool op_in_stage(const psim_op_config *cfg, const psim_stage *st, unsigned char *mark) {
  for (int32_t k = 0; k < st->n_devices; k++)
    mark[st->devices[k]] = 1;
  bool all_in = true;
  for (int32_t e = 0; e < cfg->n_devices && all_in; e++)
    all_in = mark[cfg->devices[e]] != 0;
  for (int32_t k = 0; k < st->n_devices; k++)
    mark[st->devices[k]] = 0;
  return all_in;
}

/* Folding applies when every op is spread evenly over all of its stage's
 * devices and the stages are equally large. */
static bool can_fold(const psim_build *b, unsigned char *mark) {
  const psim_strategy *s = b->s;
  const psim_model *m = b->m;
  if (!psim_build_may_fold(b)) /* issue 8 (ps.c): parameter servers, stragglers, mixed types */
    return false;
  for (int32_t o = 0; o < m->n_ops; o++) {
    const psim_op_config *cfg = &s->ops[o];
    const psim_stage *st = &s->stages[cfg->stage];
    if (cfg->n_devices != st->n_devices || st->n_devices != s->stages[0].n_devices)
      return false;
    for (int32_t i = 0; i < m->ops[o].n_dims; i++)
      if (dim_size(b, m->ops[o].dims[i].dim) % cfg->degree[i] != 0)
        return false;
    if (!op_in_stage(cfg, st, mark))
      return false;
  }
  return true;
}

static psim_status choose_simulated(psim_build *b) {
  int32_t nd = b->c->n_devices;
  b->simulated = psim_calloc((size_t)nd, 1);
  if (!b->simulated)
    return psim_error(PSIM_ENOMEM, "out of memory choosing simulated devices");
  b->folded = b->o->fold && can_fold(b, b->simulated); /* simulated: zeroed scratch here */
  int32_t n_entries = b->s->n_stages * (b->s->virtual_stages > 0 ? b->s->virtual_stages : 1);
  if (b->folded) {
    for (int32_t v = 0; v < n_entries; v++)
      b->simulated[b->s->stages[v].devices[0]] = 1;
  } else {
    for (int32_t o = 0; o < b->m->n_ops; o++)
      for (int32_t e = 0; e < b->s->ops[o].n_devices; e++)
        b->simulated[b->s->ops[o].devices[e]] = 1;
  }
  for (int32_t d = 0; d < nd; d++)
    b->n_simulated += b->simulated[d];
  return PSIM_OK;
}

/* Refuses graphs over the task or memory limits (psim_sim_options.max_tasks,
 * .max_graph_bytes) from the shard count alone, before anything per shard is
 * allocated: shards x micro-batches x 3 passes compute tasks, each with its
 * share of communication and host tasks at PSIM_GRAPH_BYTES_PER_TASK. */
static psim_status check_limits(const psim_build *b, size_t shards) {
  double tasks = (double)shards * (double)b->n_micro * 3;
  if (b->o->max_tasks > 0 && tasks > (double)b->o->max_tasks)
    return psim_error(PSIM_ELIMIT,
                      "the task graph would hold about %.3g compute tasks, over the limit of "
                      "%lld (raise it with --max-tasks)",
                      tasks, (long long)b->o->max_tasks);
  double bytes = tasks * PSIM_GRAPH_BYTES_PER_TASK;
  if (b->o->max_graph_bytes > 0 && bytes > (double)b->o->max_graph_bytes)
    return psim_error(PSIM_ELIMIT,
                      "the task graph would take about %.3g GB of memory (%.3g compute tasks), "
                      "over the limit of %.3g GB (raise it with --max-memory)",
                      bytes / 1e9, tasks, (double)b->o->max_graph_bytes / 1e9);
  return PSIM_OK;
}

static psim_status make_locals(psim_build *b) {
  const psim_model *m = b->m;
  size_t total = 0;
  for (int32_t o = 0; o < m->n_ops; o++)
    for (int32_t e = 0; e < b->s->ops[o].n_devices; e++)
      total += b->simulated[b->s->ops[o].devices[e]];
  PSIM_CHECK(check_limits(b, total)); /* issue 9: before any per-shard allocation */
  b->loc_first = psim_calloc((size_t)m->n_ops + 1, sizeof *b->loc_first);
  b->locals = psim_calloc(total ? total : 1, sizeof *b->locals);
  if (!b->loc_first || !b->locals)
    return psim_error(PSIM_ENOMEM, "out of memory for %zu op shards", total);
  int32_t k = 0;
  for (int32_t o = 0; o < m->n_ops; o++) {
    const psim_op_config *cfg = &b->s->ops[o];
    b->loc_first[o] = k;
    for (int32_t e = 0; e < cfg->n_devices; e++) {
      if (!b->simulated[cfg->devices[e]])
        continue;
      b->locals[k].device = cfg->devices[e];
      b->locals[k].shard = e / cfg->replicas;
      b->locals[k].replica = e % cfg->replicas;
      k++;
    }
  }
  b->loc_first[m->n_ops] = k;
  size_t slots = (size_t)k * (size_t)b->n_micro;
  b->fwd = psim_malloc((slots ? slots : 1) * sizeof *b->fwd);
  b->bwd = psim_malloc((slots ? slots : 1) * sizeof *b->bwd);
  b->rec = psim_malloc((slots ? slots : 1) * sizeof *b->rec);
  if (!b->fwd || !b->bwd || !b->rec)
    return psim_error(PSIM_ENOMEM, "out of memory for %zu task slots", slots);
  memset(b->rec, 0xff, (slots ? slots : 1) * sizeof *b->rec);
  b->costs = psim_calloc((size_t)k * 3 + 1, sizeof *b->costs);
  if (!b->costs)
    return psim_error(PSIM_ENOMEM, "out of memory for %d op shards", (int)k);
  return index_devices(b);
}

/* ---- task creation ------------------------------------------------------- */

/* The attention core (QK^T, softmax, dropout, AV): ops tagged "attn_core"
 * by the model, fused attention, or else ops touching a tensor with two
 * sequence-long dims (the score matrix). */
static bool is_attention_core(const psim_model *m, const psim_op *op) {
  if (op->kind == PSIM_OP_ATTENTION || (op->tag && strcmp(op->tag, "attn_core") == 0))
    return true;
  int32_t sd = m->role_dim[PSIM_ROLE_SEQUENCE];
  if (sd < 0)
    return false;
  int64_t seq = m->dims[sd].size;
  for (int32_t i = 0; i < op->n_in + op->n_out; i++) {
    int32_t t = i < op->n_in ? op->in[i] : op->out[i - op->n_in];
    const psim_tensor *ten = &m->tensors[t];
    int n = 0;
    bool has_role = false;
    for (int32_t j = 0; j < ten->rank; j++) {
      n += m->dims[ten->dims[j]].size == seq;
      has_role = has_role || m->dims[ten->dims[j]].role == PSIM_ROLE_SEQUENCE;
    }
    if (n >= 2 && has_role)
      return true;
  }
  return false;
}

/* Whether op o is recomputed in backward under the strategy's mode. */
bool psim_build_recomputed(const psim_build *b, int32_t o) {
  const psim_op *op = &b->m->ops[o];
  if (op->block < 0)
    return false; /* embedding and head are not checkpointed (Megatron) */
  switch (b->s->recompute) {
  case PSIM_RECOMPUTE_FULL: return true;
  case PSIM_RECOMPUTE_SELECTIVE: return is_attention_core(b->m, op);
  default: return false;
  }
}

static bool recomputed(const psim_build *b, int32_t o) {
  return psim_build_recomputed(b, o);
}

/* Whether the host must wait for device dev's stream to drain before it
 * issues the next kernel (the first of a pipeline slot); one kernel takes it. */
static int32_t take_sync(psim_build *b, int32_t dev) {
  bool sync = b->need_sync[dev] && b->s->n_stages > 1 && b->last_task[dev] >= 0;
  b->need_sync[dev] = 0;
  return sync ? 1 : 0;
}

/* The host issues each kernel (runtime.host_issue_s) and runs ahead of the
 * device, except at the start of a pipeline slot when pp > 1: Megatron-LM's
 * point-to-point calls synchronise the device first. False when the kernel
 * has no issue latency. */
static bool host_issue(psim_build *b, int32_t dev, int32_t calls, psim_task_issue *out) {
  double issue_s = b->c->types[b->c->devices[dev].type].rt.host_issue_s;
  if (issue_s <= 0 || calls <= 0)
    return false;
  *out = (psim_task_issue){issue_s * calls, psim_res_host(b->c->n_devices, b->c->n_links, dev),
                           take_sync(b, dev)};
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
                         int32_t host_calls, int32_t *id) {
  psim_task_issue is;
  bool issued = host_issue(b, dev, host_calls, &is);
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
      n += partial_mask(b, o, op->out[j], DIR_FWD) != 0;
    return n;
  }
  for (int32_t i = 0; i < op->n_in; i++)
    n += b->m->tensors[op->in[i]].kind == PSIM_TENSOR_ACTIVATION &&
         partial_mask(b, o, op->in[i], DIR_BWD) != 0;
  return n;
}

/* The change of saved activations at the end of a shard's pass: they live
 * from the forward's end to the backward's end; recomputed ones from the
 * recompute's end to the backward's end. Depends on the producers' shards
 * (memory.c), unlike the rest of the cost. */
static double shard_mem_bytes(const psim_build *b, int32_t o, const int64_t *ext, int pass_kind) {
  bool rc = recomputed(b, o);
  if (pass_kind != DIR_BWD)
    return psim_memory_saved_bytes(b, o, ext, pass_kind == DIR_FWD && rc);
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
  shard_extents(b, o, loc->shard, ext);
  if (tc->valid == PSIM_COST_MEM_STALE) { /* the op is prev's, a producer is not */
    tc->mem_bytes = shard_mem_bytes(b, o, ext, pass_kind);
    tc->valid = PSIM_COST_VALID;
    return tc;
  }
  psim_pass pass = pass_kind == DIR_BWD ? PSIM_PASS_BWD : PSIM_PASS_FWD;
  psim_cost_origin origin = PSIM_ORIGIN_ESTIMATED;
  tc->duration_s =
      psim_cost_compute(b->c, loc->device, b->m, &b->m->ops[o], ext, pass, b->o->costdb, &origin);
  tc->origin = (uint8_t)origin;
  double bytes = 0;
  psim_op_shard_work(b->m, &b->m->ops[o], ext, pass, &tc->flops, &bytes);
  tc->mem_bytes = shard_mem_bytes(b, o, ext, pass_kind);
  tc->host_calls = (uint8_t)host_calls(b, o, pass_kind == DIR_BWD ? PSIM_PASS_BWD : PSIM_PASS_FWD);
  tc->valid = PSIM_COST_VALID;
  return tc;
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

static psim_status compute_task(psim_build *b, int32_t o, int32_t k, int32_t mu, int pass_kind,
                                int32_t *id) {
  const psim_op_local *loc = &b->locals[b->loc_first[o] + k];
  const psim_task_cost *tc = shard_cost(b, o, k, pass_kind);
  psim_task_info info = {PSIM_TASK_COMPUTE,
                         pass_kind == DIR_FWD   ? PSIM_TP_FWD
                         : pass_kind == DIR_BWD ? PSIM_TP_BWD
                                                : PSIM_TP_RECOMPUTE,
                         (int16_t)b->s->ops[o].stage,
                         o,
                         mu,
                         loc->device,
                         loc->shard};
  PSIM_CHECK(
      chain(b, loc->device, tc->duration_s, &info, tc->duration_s > 0 ? tc->host_calls : 0, id));
  if (pass_kind == DIR_BWD)
    b->last_bwd[loc->device] = *id;
  return account_kernel(b, tc, *id, loc->device);
}

/* The task array (fwd, bwd, rec) of a pass in build x. */
static int32_t *pass_tasks(const psim_build *x, int pass_kind) {
  return pass_kind == DIR_FWD ? x->fwd : pass_kind == DIR_BWD ? x->bwd : x->rec;
}

/* Incremental builds: op o's kernels of one pass and micro-batch copied from
 * the last graph, where o is unchanged (so are its shard costs, but for the
 * saved activations, which shard_cost brings up to date: reuse_costs). They
 * are what compute_task would add: the same durations, resources, infos,
 * issue latencies, memory events and totals, in the same order; the stream
 * edges and the host's sync flags are made again, as they depend on the
 * kernels issued before. *done is false (nothing added) when prev's kernels
 * are not consecutive or a cost is missing. */
static psim_status copy_kernels(psim_build *b, int32_t o, int32_t mu, int pass_kind, bool *done) {
  const psim_build *p = b->prev;
  int32_t n = b->loc_first[o + 1] - b->loc_first[o];
  *done = n == 0; /* no shard simulated (folding) */
  if (n == 0)
    return PSIM_OK;
  const int32_t *from = task_slot(p, pass_tasks(p, pass_kind), o, 0, mu);
  int32_t *to = task_slot(b, pass_tasks(b, pass_kind), o, 0, mu), t0 = from[0];
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
    if (issue && issue[k].res >= 0) /* host_issue gave prev's kernel a latency */
      issue[k].sync = take_sync(b, dev);
    if (b->last_task[dev] >= 0)
      psim_tg_add_edge_reserved(&b->g, b->last_task[dev], id);
    stream_push(b, dev, id);
    if (pass_kind == DIR_BWD)
      b->last_bwd[dev] = id;
    PSIM_CHECK(account_kernel(b, c, id, dev));
    to[(size_t)k * stride] = id;
  }
  *done = true;
  return PSIM_OK;
}

/* Op o's kernels of one pass for micro-batch mu, one per simulated shard. */
static psim_status op_kernels(psim_build *b, int32_t o, int32_t mu, int pass_kind) {
  if (b->prev && !b->changed[o]) {
    bool done;
    PSIM_CHECK(copy_kernels(b, o, mu, pass_kind, &done));
    if (done)
      return PSIM_OK;
  }
  int32_t *arr = pass_tasks(b, pass_kind);
  for (int32_t k = 0; k < b->loc_first[o + 1] - b->loc_first[o]; k++)
    PSIM_CHECK(compute_task(b, o, k, mu, pass_kind, task_slot(b, arr, o, k, mu)));
  return PSIM_OK;
}

/* Recompute (forward order) then backward (reverse order) of ops lo..hi. */
static psim_status issue_layer_backward(psim_build *b, int32_t lo, int32_t hi, int32_t mu) {
  for (int32_t o = lo; o <= hi; o++)
    if (recomputed(b, o))
      PSIM_CHECK(op_kernels(b, o, mu, DIR_REC));
  for (int32_t o = hi; o >= lo; o--)
    PSIM_CHECK(op_kernels(b, o, mu, DIR_BWD));
  return PSIM_OK;
}

/* Issues the ops of virtual stage vs for micro-batch mu and a pass. */
static psim_status issue_slot(psim_build *b, int32_t vs, int32_t mu, int pass_kind) {
  const psim_model *m = b->m;
  const psim_stage *st = &b->s->stages[vs];
  for (int32_t i = 0; i < st->n_devices; i++)
    b->need_sync[st->devices[i]] = 1;
  if (pass_kind == DIR_FWD) {
    for (int32_t o = 0; o < m->n_ops; o++) {
      if (b->s->ops[o].stage == vs)
        PSIM_CHECK(op_kernels(b, o, mu, DIR_FWD));
    }
    return PSIM_OK;
  }
  /* layer by layer from the last: recompute a layer (checkpointed per layer,
   * as Megatron-LM does), then run its backward */
  for (int32_t hi = m->n_ops - 1; hi >= 0;) {
    if (b->s->ops[hi].stage != vs) {
      hi--;
      continue;
    }
    int32_t lo = hi;
    while (lo > 0 && b->s->ops[lo - 1].stage == vs && m->ops[lo - 1].layer == m->ops[hi].layer)
      lo--;
    PSIM_CHECK(issue_layer_backward(b, lo, hi, mu));
    hi = lo - 1;
  }
  return PSIM_OK;
}

/* ---- pipeline schedules --------------------------------------------------- */

typedef struct slot {
  int32_t chunk; /* virtual chunk on this physical stage */
  int32_t micro;
  int pass_kind;
} slot;

/* Megatron-LM's interleaved order: the k-th forward (or backward) of a stage
 * runs micro-batch `micro` of chunk `chunk` (schedules.py, get_model_chunk_id). */
static slot nth_slot(int32_t k, int32_t p, int32_t v, int pass_kind) {
  slot s = {0, k, pass_kind};
  if (v > 1) {
    int32_t in_group = k % (p * v);
    s.chunk = in_group / p;
    s.micro = (k / (p * v)) * p + in_group % p;
  }
  if (pass_kind == DIR_BWD)
    s.chunk = v - 1 - s.chunk;
  return s;
}

/* Stage i's issue order (2 * m * v slots): warm-up forwards, then one
 * forward and one backward in turn, then the remaining backwards. GPipe runs
 * every forward first. Warm-up lengths are Megatron-LM's. */
static int32_t schedule_order(const psim_strategy *s, int32_t i, int32_t m, slot *out) {
  int32_t p = s->n_stages, v = s->virtual_stages > 0 ? s->virtual_stages : 1;
  int32_t total = m * v, n = 0, warm;
  if (s->schedule == PSIM_SCHED_GPIPE)
    warm = total;
  else if (v == 1)
    warm = p - i - 1;
  else
    warm = (p - i - 1) * 2 + (v - 1) * p;
  if (warm > total)
    warm = total;
  for (int32_t k = 0; k < warm; k++)
    out[n++] = nth_slot(k, p, v, DIR_FWD);
  for (int32_t j = 0; j < total - warm; j++) {
    out[n++] = nth_slot(warm + j, p, v, DIR_FWD);
    out[n++] = nth_slot(j, p, v, DIR_BWD);
  }
  for (int32_t j = total - warm; j < total; j++)
    out[n++] = nth_slot(j, p, v, DIR_BWD);
  return n;
}

static psim_status issue_compute(psim_build *b) {
  const psim_strategy *s = b->s;
  int32_t v = s->virtual_stages > 0 ? s->virtual_stages : 1;
  slot *order = psim_malloc(sizeof *order * (size_t)b->n_micro * (size_t)v * 2);
  if (!order)
    return psim_error(PSIM_ENOMEM, "out of memory for the pipeline schedule");
  psim_status st = PSIM_OK;
  for (int32_t i = 0; i < s->n_stages && st == PSIM_OK; i++) {
    int32_t n = schedule_order(s, i, b->n_micro, order);
    for (int32_t j = 0; j < n && st == PSIM_OK; j++)
      st = issue_slot(b, order[j].chunk * s->n_stages + i, order[j].micro, order[j].pass_kind);
  }
  psim_free(order);
  return st;
}

/* ---- communication -------------------------------------------------------- */

static bool dim_in_tensor(const psim_tensor *t, int32_t d) {
  for (int32_t j = 0; j < t->rank; j++)
    if (t->dims[j] == d)
      return true;
  return false;
}

/* Mask of op dims whose split makes op's view of tensor t a partial sum. */
static uint32_t partial_mask(const psim_build *b, int32_t o, int32_t t, int dir) {
  const psim_op *op = &b->m->ops[o];
  const psim_op_config *cfg = &b->s->ops[o];
  uint32_t mask = 0;
  for (int32_t i = 0; i < op->n_dims; i++) {
    if (cfg->degree[i] == 1 || dim_in_tensor(&b->m->tensors[t], op->dims[i].dim))
      continue;
    if (dir == DIR_BWD || op->dims[i].use == PSIM_USE_CONTRACTED)
      mask |= 1u << i;
  }
  return mask;
}

/* Largest collective group the builder handles (devices). */
#define PSIM_BUILD_MAX_GROUP 4096

typedef struct group {
  int32_t devices[PSIM_BUILD_MAX_GROUP];
  int32_t entries[PSIM_BUILD_MAX_GROUP]; /* each member's entry in the op's device list */
  int32_t n;
  int32_t wanted; /* members the layout asks for (> n: over the limit) */
  int32_t stride; /* device offset of the next concurrent group, 0 = unknown */
  int32_t n_groups;
} group;

/* Whether every dim op o is split on is in mask (then a group's members
 * enumerate the shards in order: shard_index of row-major coordinates). */
static bool splits_within(const psim_op *op, const psim_op_config *cfg, uint32_t mask) {
  for (int32_t i = 0; i < op->n_dims; i++)
    if (cfg->degree[i] > 1 && !(mask & (1u << i)))
      return false;
  return true;
}

/* Devices holding the partial sums that entry e of op o reduces with. */
static void partial_group(const psim_build *b, int32_t o, int32_t e, uint32_t mask, group *g) {
  const psim_op *op = &b->m->ops[o];
  const psim_op_config *cfg = &b->s->ops[o];
  int32_t r = e % cfg->replicas, k = 1;
  for (int32_t i = 0; i < op->n_dims; i++)
    if (mask & (1u << i))
      k *= cfg->degree[i];
  g->wanted = k;
  g->n = k < PSIM_BUILD_MAX_GROUP ? k : PSIM_BUILD_MAX_GROUP;
  if (splits_within(op, cfg, mask)) { /* member n is shard n (the grouping of data parallelism) */
    for (int32_t n = 0; n < g->n; n++)
      g->entries[n] = n * cfg->replicas + r;
  } else { /* e's coordinates, the masked ones enumerated row-major */
    int32_t coord[PSIM_MAX_OP_DIMS], c2[PSIM_MAX_OP_DIMS];
    shard_coords(op, cfg, e / cfg->replicas, coord);
    for (int32_t n = 0; n < g->n; n++) {
      int32_t rem = n;
      for (int32_t i = op->n_dims - 1; i >= 0; i--) {
        c2[i] = coord[i];
        if (mask & (1u << i)) {
          c2[i] = rem % cfg->degree[i];
          rem /= cfg->degree[i];
        }
      }
      g->entries[n] = shard_index(op, cfg, c2) * cfg->replicas + r;
    }
  }
  for (int32_t n = 0; n < g->n; n++)
    g->devices[n] = cfg->devices[g->entries[n]];
  g->n_groups = cfg->n_devices / (g->n ? g->n : 1);
  g->stride = 0;
}

static psim_status group_fits(const group *g) {
  if (g->wanted <= g->n)
    return PSIM_OK;
  return psim_error(PSIM_ELIMIT,
                    "a collective over %d devices: the simulator handles groups of at most %d "
                    "(PSIM_BUILD_MAX_GROUP in sim/build/build.c)",
                    (int)g->wanted, PSIM_BUILD_MAX_GROUP);
}

/* Allocates and fills the group of entry e (partial_group), refusing groups
 * over PSIM_BUILD_MAX_GROUP; the caller frees *out. */
static psim_status new_group(const psim_build *b, int32_t o, int32_t e, uint32_t mask,
                             group **out) {
  group *g = psim_malloc(sizeof *g);
  if (!g)
    return psim_error(PSIM_ENOMEM, "out of memory");
  partial_group(b, o, e, mask, g);
  psim_status st = group_fits(g);
  if (st != PSIM_OK) {
    psim_free(g);
    return st;
  }
  *out = g;
  return PSIM_OK;
}

/* Offset between this group and a neighbouring one, when all members shift
 * alike (identical concurrent groups share links). */
static void group_stride(const psim_build *b, int32_t o, int32_t e, uint32_t mask, group *g) {
  const psim_op *op = &b->m->ops[o];
  const psim_op_config *cfg = &b->s->ops[o];
  int32_t other = -1;
  if (cfg->replicas > 1) {
    other = e % cfg->replicas + 1 < cfg->replicas ? e + 1 : e - 1;
  } else {
    int32_t coord[PSIM_MAX_OP_DIMS];
    shard_coords(op, cfg, e / cfg->replicas, coord);
    for (int32_t i = 0; i < op->n_dims && other < 0; i++) {
      if ((mask & (1u << i)) || cfg->degree[i] == 1)
        continue;
      coord[i] = coord[i] + 1 < cfg->degree[i] ? coord[i] + 1 : coord[i] - 1;
      other = shard_index(op, cfg, coord) * cfg->replicas;
    }
  }
  if (other < 0 || g->n_groups <= 1)
    return;
  group g2;
  partial_group(b, o, other, mask, &g2);
  int32_t stride = g2.devices[0] - g->devices[0];
  for (int32_t i = 0; i < g->n; i++)
    if (g2.devices[i] - g->devices[i] != stride)
      return;
  /* the engine routes groups devices + k * stride for k < n_groups: use the
   * stride only when every one of them is a real device */
  if (stride <= 0)
    return;
  for (int32_t i = 0; i < g->n; i++)
    if ((int64_t)g->devices[i] + (int64_t)(g->n_groups - 1) * stride >= b->c->n_devices)
      return;
  g->stride = stride;
}

static int32_t src_task(const psim_build *b, int32_t *arr, int32_t o, int32_t d, int32_t mu) {
  int32_t k = local_on(b, o, d);
  if (k < 0)
    k = 0; /* folded: the representative stands for its symmetric peers */
  if (b->loc_first[o + 1] == b->loc_first[o])
    return -1;
  return *task_slot(b, arr, o, k, mu);
}

/* Tensor-parallel collectives inside training wait for the slowest of their
 * ranks: runtime.coll_sync_s per peer, on the members' communication
 * engines, before the collective itself. *entry becomes the wait. */
static psim_status rank_skew(psim_build *b, const group *g, const psim_task_info *info,
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

/* Adds (once) the reduction of X's partial sums for the group containing
 * entry e and returns its exit task. */
static psim_status reduction(psim_build *b, int32_t x, int32_t slot, int32_t t, int32_t *xt,
                             int32_t e, uint32_t mask, int32_t mu, int dir, bool scatter,
                             int32_t *exit) {
  group *g;
  PSIM_CHECK(new_group(b, x, e, mask, &g));
  comm_cache *cache = b->cache;
  uint64_t k1 = key1(1, x, slot, mu, dir);
  b->reduce_leader = g->devices[0];
  int32_t cached = cache_get(cache, k1, (uint64_t)g->devices[0]);
  psim_status st = PSIM_OK;
  if (cached >= 0) {
    *exit = cached;
    psim_free(g);
    return PSIM_OK;
  }
  if (b->folded)
    group_stride(b, x, e, mask, g);
  region r;
  tensor_region(b, x, e / b->s->ops[x].replicas, t, &r);
  const psim_tensor *ten = &b->m->tensors[t];
  psim_coll_desc d = {scatter ? PSIM_COLL_REDUCE_SCATTER : PSIM_COLL_ALL_REDUCE,
                      b->s->allreduce,
                      g->devices,
                      g->n,
                      region_elems(&r, ten->rank) * (double)psim_dtype_bytes(ten->dtype),
                      b->folded ? g->n_groups : 1,
                      g->stride};
  psim_task_info info = {
      PSIM_TASK_COLLECTIVE, PSIM_TP_COMM_TP, (int16_t)b->s->ops[x].stage, x, mu, g->devices[0], -1};
  int32_t entry;
  st = add_collective(b, &d, &info, &entry, exit);
  if (st == PSIM_OK)
    st = rank_skew(b, g, &info, &entry);
  for (int32_t i = 0; i < g->n && st == PSIM_OK; i++) {
    if (!b->simulated[g->devices[i]])
      continue;
    int32_t from = src_task(b, xt, x, g->devices[i], mu);
    if (from >= 0)
      st = psim_tg_add_edge(&b->g, from, entry);
  }
  if (st == PSIM_OK)
    st = keep(b, cache, k1, (uint64_t)g->devices[0], *exit);
  psim_free(g);
  return st;
}

/* Canonical shard of sh: the same coordinates on t's dims, 0 elsewhere
 * (shards differing only off t's dims hold the same region of t). */
static int32_t region_id(const psim_build *b, int32_t x, int32_t sh, int32_t t) {
  const psim_op *op = &b->m->ops[x];
  const psim_op_config *cfg = &b->s->ops[x];
  int32_t coord[PSIM_MAX_OP_DIMS];
  shard_coords(op, cfg, sh, coord);
  for (int32_t i = 0; i < op->n_dims; i++)
    if (!dim_in_tensor(&b->m->tensors[t], op->dims[i].dim))
      coord[i] = 0;
  return shard_index(op, cfg, coord);
}

/* Regions of tensor t held by each shard of op x and their region_id: the
 * consumers of one edge all gather from the same shards, so they are
 * computed once per (x, t) rather than per consumer shard. */
static psim_status shard_regions(const psim_build *b, int32_t x, int32_t t, const region **regs,
                                 const int32_t **ids) {
  comm_cache *h = b->cache;
  const psim_op_config *cx = &b->s->ops[x];
  size_t n = (size_t)(cx->n_devices / cx->replicas);
  if (!h->regs || h->reg_x != x || h->reg_t != t) {
    if (n > h->cap_regs) {
      region *r = psim_realloc(h->regs, n * sizeof *r);
      int32_t *id = r ? psim_realloc(h->reg_ids, n * sizeof *id) : NULL;
      if (r)
        h->regs = r;
      if (!r || !id)
        return psim_error(PSIM_ENOMEM, "out of memory for %zu shard regions", n);
      h->reg_ids = id;
      h->cap_regs = n;
    }
    for (size_t sh = 0; sh < n; sh++) {
      tensor_region(b, x, (int32_t)sh, t, &h->regs[sh]);
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

static psim_status add_transfer(psim_build *b, int32_t x, int32_t *xt, int32_t src, int32_t d,
                                double bytes, int32_t mu, int pipeline, int32_t arrived) {
  psim_task_info info = {PSIM_TASK_TRANSFER,
                         (uint8_t)(pipeline ? PSIM_TP_COMM_PP : PSIM_TP_COMM_TP),
                         (int16_t)b->s->ops[x].stage,
                         x,
                         mu,
                         d,
                         -1};
  int32_t entry, exit, from = src_task(b, xt, x, src, mu);
  PSIM_CHECK(psim_p2p_add(&b->g, b->c, src, d, bytes, &info, &entry, &exit));
  if (from >= 0)
    PSIM_CHECK(psim_tg_add_edge(&b->g, from, entry));
  if (pipeline && b->record)
    b->seg_fixed[b->cur_seg] = 1; /* the edge below depends on other ops' streams */
  /* Megatron-LM's pipeline sends block the sender until they complete */
  if (pipeline && from >= 0 && b->next_compute[from] >= 0)
    PSIM_CHECK(psim_tg_add_edge(&b->g, exit, b->next_compute[from]));
  return psim_tg_add_edge(&b->g, exit, arrived);
}

/* Transfers that bring region r of tensor t to device d from X's shards (one
 * source per distinct region, the local copy when d holds one). Returns the
 * barrier task that completes when everything has arrived. */
static psim_status gather_region(psim_build *b, int32_t x, int32_t t, int32_t *xt, const region *r,
                                 int32_t d, int32_t mu, int pipeline, int32_t *arrived) {
  const psim_op_config *cx = &b->s->ops[x];
  const psim_tensor *ten = &b->m->tensors[t];
  int32_t n_shards = cx->n_devices / cx->replicas;
  comm_cache *cache = b->cache;
  PSIM_CHECK(PSIM_VEC_RESERVE(cache->served, cache->cap_served, (size_t)n_shards));
  memset(cache->served, 0, (size_t)n_shards);
  const region *regs = NULL;
  const int32_t *ids = NULL;
  PSIM_CHECK(shard_regions(b, x, t, &regs, &ids));
  serve_local(b, x, d, ids, cache->served);
  psim_task_info bar = {
      PSIM_TASK_BARRIER, (uint8_t)(pipeline ? PSIM_TP_COMM_PP : PSIM_TP_COMM_TP), -1, x, mu, d, -1};
  PSIM_CHECK(psim_tg_add_task(&b->g, 0, NULL, 0, &bar, arrived));
  for (int32_t sh = 0; sh < n_shards; sh++) {
    int32_t id = ids[sh];
    if (cache->served[id] == 1)
      continue;
    double elems = overlap(&regs[sh], r, ten->rank);
    if (elems <= 0)
      continue;
    if (cache->served[id] == 2) { /* d holds this region itself */
      int32_t from = src_task(b, xt, x, d, mu);
      cache->served[id] = 1;
      if (from >= 0)
        PSIM_CHECK(psim_tg_add_edge(&b->g, from, *arrived));
      continue;
    }
    cache->served[id] = 1;
    int32_t src = cx->devices[id * cx->replicas];
    PSIM_CHECK(add_transfer(b, x, xt, src, d, elems * (double)psim_dtype_bytes(ten->dtype), mu,
                            pipeline, *arrived));
  }
  return PSIM_OK;
}

/* Dims of X (in t) along which region r is wider than entry e's shard. */
static uint32_t gather_mask(const psim_build *b, int32_t x, int32_t t, int32_t e, const region *r) {
  const psim_op *op = &b->m->ops[x];
  const psim_op_config *cfg = &b->s->ops[x];
  const psim_tensor *ten = &b->m->tensors[t];
  region rx;
  tensor_region(b, x, e / cfg->replicas, t, &rx);
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

/* When region r on entry e's device is exactly the union of the shards of a
 * group that differs from e only along dims of t (sharded -> replicated),
 * adds (once) that group's all-gather and returns its exit in *exit; else
 * leaves *exit at -1. */
static psim_status all_gather(psim_build *b, int32_t x, int32_t slot, int32_t t, int32_t *xt,
                              int32_t e, const region *r, int32_t mu, int dir, int32_t *exit) {
  const psim_tensor *ten = &b->m->tensors[t];
  uint32_t mask = gather_mask(b, x, t, e, r);
  if (!mask)
    return PSIM_OK;
  group *g;
  PSIM_CHECK(new_group(b, x, e, mask, &g));
  const region *regs;
  const int32_t *ids;
  psim_status rs = shard_regions(b, x, t, &regs, &ids);
  if (rs != PSIM_OK) {
    psim_free(g);
    return rs;
  }
  double covered = 0;
  for (int32_t i = 0; i < g->n; i++) { /* devices are distinct: entries[i] is entry_on's */
    const region *rg = &regs[g->entries[i] / b->s->ops[x].replicas];
    double elems = region_elems(rg, ten->rank);
    covered += overlap(rg, r, ten->rank) == elems ? elems : -1e300;
  }
  psim_status st = PSIM_OK;
  if (g->n > 1 && covered == region_elems(r, ten->rank)) {
    comm_cache *cache = b->cache;
    uint64_t k1 = key1(3, x, slot, mu, dir);
    *exit = cache_get(cache, k1, (uint64_t)g->devices[0]);
    if (*exit < 0) {
      if (b->folded)
        group_stride(b, x, e, mask, g);
      psim_coll_desc d = {PSIM_COLL_ALL_GATHER,
                          b->s->allreduce,
                          g->devices,
                          g->n,
                          covered * (double)psim_dtype_bytes(ten->dtype),
                          b->folded ? g->n_groups : 1,
                          g->stride};
      psim_task_info info = {PSIM_TASK_COLLECTIVE,
                             PSIM_TP_COMM_TP,
                             (int16_t)b->s->ops[x].stage,
                             x,
                             mu,
                             g->devices[0],
                             -1};
      int32_t entry;
      st = add_collective(b, &d, &info, &entry, exit);
      if (st == PSIM_OK)
        st = rank_skew(b, g, &info, &entry);
      for (int32_t i = 0; i < g->n && st == PSIM_OK; i++) {
        int32_t from = b->simulated[g->devices[i]] ? src_task(b, xt, x, g->devices[i], mu) : -1;
        if (from >= 0)
          st = psim_tg_add_edge(&b->g, from, entry);
      }
      if (st == PSIM_OK)
        st = keep(b, cache, k1, (uint64_t)g->devices[0], *exit);
    }
  }
  psim_free(g);
  return st;
}

/* A shard of X holding all of region r (any replica), or -1. */
static int32_t covering_shard(const psim_build *b, int32_t x, int32_t t, const region *r) {
  const psim_op_config *cx = &b->s->ops[x];
  const psim_tensor *ten = &b->m->tensors[t];
  double want = region_elems(r, ten->rank);
  for (int32_t sh = 0; sh < cx->n_devices / cx->replicas; sh++) {
    region rx;
    tensor_region(b, x, sh, t, &rx);
    if (overlap(&rx, r, ten->rank) == want)
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
                                  const psim_op_local *ly, const region *r, int32_t mu, int dir,
                                  int32_t *exit) {
  const psim_op_config *cx = &b->s->ops[x], *cy = &b->s->ops[y];
  const psim_tensor *ten = &b->m->tensors[t];
  int32_t sh = covering_shard(b, x, t, r);
  if (sh < 0 || cy->replicas > PSIM_BUILD_MAX_GROUP)
    return PSIM_OK;
  double bytes = region_elems(r, ten->rank) * (double)psim_dtype_bytes(ten->dtype);
  int32_t src = cx->devices[sh * cx->replicas + ly->replica % cx->replicas];
  int32_t piece = b->g.n_tasks; /* the barrier gather_region-style transfers end in */
  psim_task_info bar = {PSIM_TASK_BARRIER, PSIM_TP_COMM_PP, -1, x, mu, ly->device, -1};
  PSIM_CHECK(psim_tg_add_task(&b->g, 0, NULL, 0, &bar, &piece));
  PSIM_CHECK(add_transfer(b, x, xt, src, ly->device, bytes / cy->replicas, mu, 1, piece));
  /* the all-gather among the receiving replicas of this shard */
  group *g = psim_malloc(sizeof *g);
  if (!g)
    return psim_error(PSIM_ENOMEM, "out of memory");
  g->n = 0;
  for (int32_t rep = 0; rep < cy->replicas; rep++)
    g->devices[g->n++] = cy->devices[ly->shard * cy->replicas + rep];
  g->n_groups = cy->n_devices / g->n;
  g->stride = 0; /* replica groups of consecutive shards: a uniform shift? */
  int32_t n_shards = cy->n_devices / cy->replicas;
  if (b->folded && n_shards > 1 && ly->shard + 1 < n_shards) {
    int32_t stride = cy->devices[(ly->shard + 1) * cy->replicas] - g->devices[0];
    bool uniform = stride > 0;
    for (int32_t i = 0; i < g->n && uniform; i++)
      uniform = cy->devices[(ly->shard + 1) * cy->replicas + i] - g->devices[i] == stride &&
                (int64_t)g->devices[i] + (int64_t)(g->n_groups - 1) * stride < b->c->n_devices;
    g->stride = uniform ? stride : 0;
  }
  comm_cache *cache = b->cache;
  uint64_t k1 = key1(4, y, 0, mu, dir),
           k2 = ((uint64_t)(uint32_t)t << 32) | (uint32_t)g->devices[0];
  int32_t entry = cache_get(cache, k1 | 1ull << 59, k2);
  *exit = cache_get(cache, k1, k2);
  psim_status st = PSIM_OK;
  if (*exit < 0) {
    psim_coll_desc d = {PSIM_COLL_ALL_GATHER,        b->s->allreduce, g->devices, g->n, bytes,
                        b->folded ? g->n_groups : 1, g->stride};
    psim_task_info info = {
        PSIM_TASK_COLLECTIVE, PSIM_TP_COMM_PP, (int16_t)cy->stage, y, mu, g->devices[0], -1};
    st = add_collective(b, &d, &info, &entry, exit);
    if (st == PSIM_OK)
      st = keep(b, cache, k1, k2, *exit);
    if (st == PSIM_OK)
      st = keep(b, cache, k1 | 1ull << 59, k2, entry);
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
  comm_cache *cache = b->memo;
  uint64_t k1 = key1(5, x, slot, 0, dir), k2 = ((uint64_t)(uint32_t)y << 32) | (uint32_t)k;
  int32_t memo = cache_get(cache, k1, k2);
  int32_t to = *task_slot(b, yt, y, k, mu);
  if (memo >= 0 && (memo & 3) == 1) {
    int32_t from = *task_slot(b, xt, x, memo >> 2, mu);
    return from >= 0 ? psim_tg_add_edge(&b->g, from, to) : PSIM_OK;
  }
  if (memo >= 0 && (memo & 3) == 2) {
    int32_t exit = cache_get(b->cache, key1(1, x, slot, mu, dir), (uint64_t)(memo >> 2));
    if (exit >= 0)
      return psim_tg_add_edge(&b->g, exit, to);
  }
  if (memo >= 0)
    return connect_layouts(b, x, slot, xt, y, k, yt, t, mu, dir);
  b->direct_local = -1;
  b->reduce_local = false;
  PSIM_CHECK(connect_layouts(b, x, slot, xt, y, k, yt, t, mu, dir));
  if (b->direct_local >= 0)
    return keep(b, cache, k1, k2, b->direct_local << 2 | 1);
  if (b->reduce_local)
    return keep(b, cache, k1, k2, b->reduce_leader << 2 | 2);
  return keep(b, cache, k1, k2, 3);
}

static psim_status connect_layouts(psim_build *b, int32_t x, int32_t slot, int32_t *xt, int32_t y,
                                   int32_t k, int32_t *yt, int32_t t, int32_t mu, int dir) {
  const psim_op_local *ly = &b->locals[b->loc_first[y] + k];
  const psim_op_config *cx = &b->s->ops[x];
  int32_t to = *task_slot(b, yt, y, k, mu);
  region ry;
  tensor_region(b, y, ly->shard, t, &ry);
  const psim_tensor *ten = &b->m->tensors[t];
  uint32_t mask = partial_mask(b, x, t, dir);
  int pipeline = cx->stage != b->s->ops[y].stage;
  int32_t e = entry_on(b, x, ly->device);
  if (mask && e < 0)
    e = 0; /* different device sets: reduce in X's first group, then transfer */
  if (mask) {
    region rx;
    tensor_region(b, x, e / cx->replicas, t, &rx);
    int32_t k_red = 1;
    for (int32_t i = 0; i < b->m->ops[x].n_dims; i++)
      if (mask & (1u << i))
        k_red *= cx->degree[i];
    double ratio = region_elems(&rx, ten->rank) / fmax(1, region_elems(&ry, ten->rank));
    bool scatter = fabs(ratio - k_red) < 0.5 && cx->devices[e] == ly->device;
    int32_t exit;
    PSIM_CHECK(reduction(b, x, slot, t, xt, e, mask, mu, dir, scatter, &exit));
    if (cx->devices[e] == ly->device) {
      b->reduce_local = true;
      return psim_tg_add_edge(&b->g, exit, to);
    }
    int32_t arrived;
    PSIM_CHECK(gather_region(b, x, t, xt, &ry, ly->device, mu, pipeline, &arrived));
    PSIM_CHECK(psim_tg_add_edge(&b->g, exit, arrived));
    return psim_tg_add_edge(&b->g, arrived, to);
  }
  if (e >= 0) {
    region rx;
    tensor_region(b, x, e / cx->replicas, t, &rx);
    if (overlap(&rx, &ry, ten->rank) == region_elems(&ry, ten->rank)) {
      int32_t lx = local_on(b, x, ly->device);
      b->direct_local = lx >= 0 ? lx : 0;
      int32_t from = src_task(b, xt, x, ly->device, mu);
      return from >= 0 ? psim_tg_add_edge(&b->g, from, to) : PSIM_OK;
    }
  }
  if (e >= 0 && !pipeline) {
    int32_t exit = -1;
    PSIM_CHECK(all_gather(b, x, slot, t, xt, e, &ry, mu, dir, &exit));
    if (exit >= 0)
      return psim_tg_add_edge(&b->g, exit, to);
  }
  if (pipeline && b->s->ops[y].replicas > 1) {
    int32_t exit = -1;
    PSIM_CHECK(scatter_gather(b, x, t, xt, y, ly, &ry, mu, dir, &exit));
    if (exit >= 0)
      return psim_tg_add_edge(&b->g, exit, to);
  }
  comm_cache *cache = b->cache;
  uint64_t k1 = key1(2, x, slot, mu, dir);
  uint64_t k2 = ((uint64_t)(uint32_t)ly->device << 32) | (uint32_t)(dir == DIR_BWD ? y : t);
  int32_t arrived = cache_get(cache, k1, k2);
  if (arrived < 0) {
    PSIM_CHECK(gather_region(b, x, t, xt, &ry, ly->device, mu, pipeline, &arrived));
    PSIM_CHECK(keep(b, cache, k1, k2, arrived));
  }
  return psim_tg_add_edge(&b->g, arrived, to);
}

/* Forward (and recompute) data edges into op y. */
static psim_status connect_inputs(psim_build *b, int32_t y, int32_t mu) {
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
      PSIM_CHECK(connect(b, x, slot, b->fwd, y, k, b->fwd, t, mu, DIR_FWD));
      if (recomputed(b, y) && recomputed(b, x) && b->m->ops[x].layer == op->layer)
        PSIM_CHECK(connect(b, x, slot, b->rec, y, k, b->rec, t, mu, DIR_REC));
    }
  }
  return PSIM_OK;
}

/* Backward: the gradient of each input activation flows from y back to x. */
static psim_status connect_grads(psim_build *b, int32_t y, int32_t mu) {
  const psim_op *op = &b->m->ops[y];
  for (int32_t i = 0; i < op->n_in; i++) {
    int32_t t = op->in[i];
    int32_t x = b->m->tensors[t].producer;
    if (x < 0)
      continue;
    int32_t nk = b->loc_first[x + 1] - b->loc_first[x];
    for (int32_t k = 0; k < nk; k++)
      PSIM_CHECK(connect(b, y, i, b->bwd, x, k, b->bwd, t, mu, DIR_BWD));
  }
  return PSIM_OK;
}

/* ---- incremental builds (psim_build_graph_reusing) -------------------------
 *
 * Why a copied segment equals the one connect_inputs + connect_grads would
 * build. Segment (mu, y) reads: the configurations of y and of the producers
 * x of y's inputs; the communication cache, whose entries it reads are keyed
 * by y (backward, scatter-gather) or by a producer x (forward reductions,
 * gathers, all-gathers), put there by segments of x's consumers; the
 * per-edge memo (keyed by y); compute task ids of x and y. A segment is
 * dirty when y, a producer x or a consumer of x's outputs changed; a clean
 * segment's inputs are those prev read, up to task numbering, so its output
 * is prev's up to numbering. Numbering: every task it names outside itself
 * (compute tasks, communication of earlier segments) must have a counterpart
 * in old2new (compute tasks of unchanged ops, tasks of copied segments), else
 * it is built instead. Cache entries it put are put again, renumbered, so
 * later built segments see the cache a full build would. A segment naming a
 * stream successor (pipeline sends) depends on other ops and is always
 * built. */

/* Segment seg starts here (its end is the next one's start). */
static void begin_segment(psim_build *b, size_t seg) {
  b->cur_seg = seg;
  b->seg_task[seg] = b->g.n_tasks;
  b->seg_edge[seg] = b->g.n_edges;
  b->seg_put[seg] = b->n_puts;
}

/* Copies segment seg of prev (tasks, edges, cache entries, renumbered) when
 * every task it names outside itself has a counterpart in this graph, else
 * adds nothing and sets *copied false (the segment is built instead). */
static psim_status copy_segment(psim_build *b, size_t seg, bool *copied) {
  const psim_build *p = b->prev;
  int32_t t0 = p->seg_task[seg], t1 = p->seg_task[seg + 1];
  *copied = false;
  for (size_t i = p->seg_put[seg]; i < p->seg_put[seg + 1]; i++) {
    int32_t v = p->puts[i].value;
    if (!p->puts[i].memo && (v < t0 || v >= t1) && b->old2new[v] < 0)
      return PSIM_OK;
  }
  int32_t first = b->g.n_tasks;
  PSIM_CHECK(psim_tg_append_tasks(&b->g, &p->g, t0, t1));
  for (int32_t t = t0; t < t1; t++)
    b->old2new[t] = first + (t - t0);
  PSIM_CHECK(psim_tg_append_edges(&b->g, &p->g, p->seg_edge[seg], p->seg_edge[seg + 1], b->old2new,
                                  copied));
  if (!*copied) { /* an edge leaves to a task without counterpart */
    for (int32_t t = t0; t < t1; t++)
      b->old2new[t] = -1;
    return psim_tg_truncate(&b->g, first);
  }
  for (size_t i = p->seg_put[seg]; i < p->seg_put[seg + 1]; i++) {
    const put_record *r = &p->puts[i];
    int32_t v = r->memo ? r->value : b->old2new[r->value];
    PSIM_CHECK(record_put(b, r->k1, r->k2, v, r->memo));
    if (b->key_read[key_op(r->k1)]) /* else no built segment reads it (ensure_keys) */
      PSIM_CHECK(cache_put(r->memo ? b->memo : b->cache, r->k1, r->k2, v));
  }
  b->segments_copied++;
  return PSIM_OK;
}

/* Marks op o's cache entries as read; true when it was not yet. */
static bool mark_read(psim_build *b, int32_t o) {
  bool fresh = !b->key_read[o];
  b->key_read[o] = 1;
  return fresh;
}

/* Before building segment (mu, y): it reads cache entries keyed by y or a
 * producer of y. Copied segments put only entries of ops marked in key_read
 * (those of dirty segments, marked up front); a clean segment built anyway
 * (pipeline sends, unmapped tasks) marks its ops now and puts the entries
 * copied so far: the memo's of every micro-batch, the cache's of this one. */
static psim_status ensure_keys(psim_build *b, int32_t y) {
  const psim_op *op = &b->m->ops[y];
  bool fresh = mark_read(b, y);
  for (int32_t i = 0; i < op->n_in; i++)
    if (b->m->tensors[op->in[i]].producer >= 0)
      fresh |= mark_read(b, b->m->tensors[op->in[i]].producer);
  for (size_t i = 0; fresh && i < b->n_puts; i++) {
    const put_record *r = &b->puts[i];
    if ((r->memo || i >= b->micro_put0) && b->key_read[key_op(r->k1)])
      PSIM_CHECK(cache_put(r->memo ? b->memo : b->cache, r->k1, r->k2, r->value));
  }
  return PSIM_OK;
}

/* The edges into op y (forward, recompute) and out of it (backward) for
 * micro-batch mu: copied from prev when clean, else built. */
static psim_status connect_op(psim_build *b, int32_t y, int32_t mu) {
  size_t seg = (size_t)mu * (size_t)b->m->n_ops + (size_t)y;
  if (b->record)
    begin_segment(b, seg);
  if (b->prev && !b->seg_dirty[y] && !b->prev->seg_fixed[seg]) {
    bool copied;
    PSIM_CHECK(copy_segment(b, seg, &copied));
    if (copied)
      return PSIM_OK;
  }
  if (b->prev)
    PSIM_CHECK(ensure_keys(b, y));
  b->segments_built++;
  PSIM_CHECK(connect_inputs(b, y, mu));
  return connect_grads(b, y, mu);
}

static psim_status connect_all(psim_build *b) {
  for (int32_t mu = 0; mu < b->n_micro; mu++) {
    cache_reset(b->cache);
    b->micro_put0 = b->n_puts;
    for (int32_t o = 0; o < b->m->n_ops; o++) {
      PSIM_CHECK(connect_op(b, o, mu));
      if (psim_interrupted())
        return psim_error(PSIM_EINTERRUPTED, "interrupted while building the task graph");
    }
  }
  if (b->record)
    begin_segment(b, (size_t)b->n_micro * (size_t)b->m->n_ops);
  return PSIM_OK;
}

/* ---- gradient synchronisation and optimizer ------------------------------ */

/* A gradient bucket: weights whose gradients reduce over the same groups. */
typedef struct bucket {
  double bytes;    /* gradient bytes per group */
  int32_t op;      /* first op added (defines the groups) */
  int32_t last_op; /* last op added: its backward finishes last */
  group key;       /* group of op's first local */
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
static psim_status sync_group(psim_build *b, const bucket *bk, group *g, int32_t *sync_done) {
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
  PSIM_CHECK(add_collective(b, &d, &info, &entry, &exit));
  for (int32_t i = 0; i < g->n; i++) {
    int32_t dev = g->devices[i];
    if (!b->simulated[dev])
      continue;
    int32_t dep = b->s->overlap_grad_reduce ? src_task(b, b->bwd, bk->last_op, dev, b->n_micro - 1)
                                            : b->last_bwd[dev];
    if (dep >= 0)
      PSIM_CHECK(psim_tg_add_edge(&b->g, dep, entry));
    if (sync_done[dev] >= 0)
      PSIM_CHECK(psim_tg_add_edge(&b->g, exit, sync_done[dev]));
  }
  return PSIM_OK;
}

/* partial_group(b, o, e, mask, g)->devices[0] without the whole group. */
static int32_t first_member(const psim_build *b, int32_t o, int32_t e, uint32_t mask) {
  const psim_op *op = &b->m->ops[o];
  const psim_op_config *cfg = &b->s->ops[o];
  int32_t coord[PSIM_MAX_OP_DIMS];
  shard_coords(op, cfg, e / cfg->replicas, coord);
  for (int32_t i = 0; i < op->n_dims; i++)
    if (mask & (1u << i))
      coord[i] = 0;
  return cfg->devices[shard_index(op, cfg, coord) * cfg->replicas + e % cfg->replicas];
}

static psim_status flush_bucket(psim_build *b, bucket *bk, uint32_t mask, int32_t *sync_done) {
  if (bk->bytes <= 0)
    return PSIM_OK;
  group *g = psim_malloc(sizeof *g);
  if (!g)
    return psim_error(PSIM_ENOMEM, "out of memory");
  psim_status st = PSIM_OK;
  int32_t nk = b->loc_first[bk->op + 1] - b->loc_first[bk->op];
  for (int32_t k = 0; k < nk && st == PSIM_OK; k++) {
    int32_t e = local_entry(b, bk->op, k);
    if (k > 0 && !b->folded && first_member(b, bk->op, e, mask) != b->s->ops[bk->op].devices[e])
      continue; /* each group once, from its first member (k = 0 checks the group's size) */
    partial_group(b, bk->op, e, mask, g);
    st = group_fits(g);
    if (st != PSIM_OK)
      break;
    if (!b->folded && g->devices[0] != b->s->ops[bk->op].devices[e])
      continue; /* each group once, from its first member */
    if (b->folded)
      group_stride(b, bk->op, e, mask, g);
    st = sync_group(b, bk, g, sync_done);
  }
  psim_free(g);
  bk->bytes = 0;
  return st;
}

/* The members of c into a (a group is 32 KB; most hold a few devices). */
static void group_copy(group *a, const group *c) {
  a->n = c->n;
  memcpy(a->devices, c->devices, sizeof(int32_t) * (size_t)c->n);
}

static bool same_group(const group *a, const group *c) {
  return a->n == c->n && memcmp(a->devices, c->devices, sizeof(int32_t) * (size_t)a->n) == 0;
}

/* Weight gradients: buckets of bucket_bytes in reverse op order. */
static psim_status grad_sync(psim_build *b, int32_t *sync_done) {
  const psim_model *m = b->m;
  bucket *bk = psim_calloc(1, sizeof *bk);
  group *g = psim_malloc(sizeof *g);
  uint32_t bk_mask = 0;
  psim_status st = bk && g ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory");
  for (int32_t o = m->n_ops - 1; o >= 0 && st == PSIM_OK; o--) {
    const psim_op *op = &m->ops[o];
    if (b->loc_first[o + 1] == b->loc_first[o])
      continue;
    for (int32_t i = 0; i < op->n_in && st == PSIM_OK; i++) {
      int32_t t = op->in[i];
      uint32_t mask = partial_mask(b, o, t, DIR_BWD);
      if (m->tensors[t].kind != PSIM_TENSOR_WEIGHT || !mask)
        continue;
      region r;
      tensor_region(b, o, b->locals[b->loc_first[o]].shard, t, &r);
      partial_group(b, o, local_entry(b, o, 0), mask, g);
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
      bk->bytes += region_elems(&r, m->tensors[t].rank) * grad_bytes_per_elem(m);
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
static psim_status optimizer(psim_build *b) {
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

/* ---- entry point ------------------------------------------------------------ */

/* Whether prev was built over the same devices, folding and micro-batches
 * (then op-local indices and segment numbers mean the same in both). */
static bool can_reuse(const psim_build *b, const psim_build *p) {
  return p && p->record && p->seg_task && p->m == b->m && p->c == b->c && p->o == b->o &&
         p->n_micro == b->n_micro && p->folded == b->folded &&
         memcmp(p->simulated, b->simulated, (size_t)b->c->n_devices) == 0;
}

/* From changed[]: seg_dirty (op y, a producer x of its inputs, or another
 * consumer of x changed) and cost_dirty (y or a producer changed: saved
 * activations depend on the producer's shards, memory.c). */
static psim_status mark_dirty(psim_build *b, const uint8_t *changed, uint8_t *cost_dirty) {
  const psim_model *m = b->m;
  uint8_t *sibling = psim_calloc((size_t)m->n_ops, 1); /* a consumer of op x changed */
  b->seg_dirty = psim_calloc((size_t)m->n_ops, 1);
  b->key_read = psim_calloc((size_t)m->n_ops, 1);
  if (!sibling || !b->seg_dirty || !b->key_read) {
    psim_free(sibling);
    return psim_error(PSIM_ENOMEM, "out of memory");
  }
  for (int32_t z = 0; z < m->n_ops; z++)
    for (int32_t i = 0; changed[z] && i < m->ops[z].n_in; i++)
      if (m->tensors[m->ops[z].in[i]].producer >= 0)
        sibling[m->tensors[m->ops[z].in[i]].producer] = 1;
  for (int32_t y = 0; y < m->n_ops; y++) {
    b->seg_dirty[y] = cost_dirty[y] = changed[y];
    for (int32_t i = 0; i < m->ops[y].n_in; i++) {
      int32_t x = m->tensors[m->ops[y].in[i]].producer;
      if (x < 0)
        continue;
      b->seg_dirty[y] |= changed[x] | sibling[x];
      cost_dirty[y] |= changed[x];
    }
  }
  for (int32_t y = 0; y < m->n_ops; y++) /* a dirty segment reads y's and its producers' keys */
    for (int32_t i = -1; b->seg_dirty[y] && i < m->ops[y].n_in; i++) {
      int32_t x = i < 0 ? y : m->tensors[m->ops[y].in[i]].producer;
      if (x >= 0)
        b->key_read[x] = 1;
    }
  psim_free(sibling);
  return PSIM_OK;
}

/* Takes from prev what the changed ops leave valid: the shard costs of the
 * unchanged ops (but the saved activations of those with a changed
 * producer, marked stale for shard_cost) and the collective templates. */
static psim_status reuse_costs(psim_build *b, psim_build *p, const uint8_t *changed) {
  uint8_t *cost_dirty = psim_calloc((size_t)b->m->n_ops, 1);
  if (!cost_dirty)
    return psim_error(PSIM_ENOMEM, "out of memory");
  psim_status st = mark_dirty(b, changed, cost_dirty);
  for (int32_t o = 0; o < b->m->n_ops && st == PSIM_OK; o++) {
    if (changed[o])
      continue;
    size_t at = (size_t)b->loc_first[o] * 3,
           n = 3 * (size_t)(b->loc_first[o + 1] - b->loc_first[o]);
    memcpy(b->costs + at, p->costs + (size_t)p->loc_first[o] * 3, sizeof *b->costs * n);
    for (size_t i = 0; cost_dirty[o] && i < n; i++)
      if (b->costs[at + i].valid == PSIM_COST_VALID)
        b->costs[at + i].valid = PSIM_COST_MEM_STALE;
  }
  psim_free(cost_dirty);
  if (p->colls) { /* templates are pure functions of their descriptions */
    coll_cache_free(b->colls);
    b->colls = p->colls;
    p->colls = NULL;
  }
  return st;
}

/* old2new for the compute tasks of unchanged ops (the same locals). */
static psim_status map_compute_tasks(psim_build *b, const uint8_t *changed) {
  const psim_build *p = b->prev;
  b->old2new = psim_malloc(sizeof *b->old2new * ((size_t)p->g.n_tasks + 1));
  if (!b->old2new)
    return psim_error(PSIM_ENOMEM, "out of memory");
  memset(b->old2new, 0xff, sizeof *b->old2new * ((size_t)p->g.n_tasks + 1));
  for (int32_t o = 0; o < b->m->n_ops; o++) {
    if (changed[o])
      continue;
    size_t n = (size_t)(b->loc_first[o + 1] - b->loc_first[o]) * (size_t)b->n_micro;
    size_t at = (size_t)b->loc_first[o] * (size_t)b->n_micro;
    size_t at_p = (size_t)p->loc_first[o] * (size_t)b->n_micro;
    for (size_t i = 0; i < n; i++) {
      b->old2new[p->fwd[at_p + i]] = b->fwd[at + i];
      b->old2new[p->bwd[at_p + i]] = b->bwd[at + i];
      if (p->rec[at_p + i] >= 0)
        b->old2new[p->rec[at_p + i]] = b->rec[at + i];
    }
  }
  return PSIM_OK;
}

static psim_status alloc_segments(psim_build *b) {
  size_t n = (size_t)b->n_micro * (size_t)b->m->n_ops + 1;
  b->seg_task = psim_malloc(sizeof *b->seg_task * n);
  b->seg_edge = psim_malloc(sizeof *b->seg_edge * n);
  b->seg_put = psim_malloc(sizeof *b->seg_put * n);
  b->seg_fixed = psim_calloc(n, 1);
  if (!b->seg_task || !b->seg_edge || !b->seg_put || !b->seg_fixed)
    return psim_error(PSIM_ENOMEM, "out of memory for %zu build segments", n);
  return PSIM_OK;
}

static psim_status build(psim_build *b, const psim_model *m, psim_cluster *c,
                         const psim_strategy *s, const psim_sim_options *o, psim_build *prev,
                         const uint8_t *changed, psim_taskgraph *spare) {
  memset(b, 0, sizeof *b);
  b->m = m;
  b->c = c;
  b->s = s;
  b->o = o;
  b->record = changed != NULL;
  b->n_micro = s->n_micro > 0 ? s->n_micro : 1;
  psim_tg_init(&b->g, 3 * c->n_devices + c->n_links); /* compute, comm, links, host */
  if (spare) {                                        /* take over its buffers */
    b->g = *spare;
    psim_tg_init(spare, 0);
    psim_tg_clear(&b->g, 3 * c->n_devices + c->n_links);
  }
  b->cache = psim_calloc(1, sizeof(comm_cache));
  b->memo = psim_calloc(1, sizeof(comm_cache));
  b->where = psim_calloc(1, sizeof(comm_cache));
  b->colls = psim_calloc(1, sizeof(coll_cache));
  if (!b->cache || !b->memo || !b->where || !b->colls)
    return psim_error(PSIM_ENOMEM, "out of memory");
  PSIM_CHECK(choose_simulated(b));
  PSIM_CHECK(make_locals(b));
  if (b->record)
    PSIM_CHECK(alloc_segments(b));
  if (changed && can_reuse(b, prev)) {
    b->prev = prev;
    b->changed = changed;
    PSIM_CHECK(reuse_costs(b, prev, changed));
  }
  size_t nd = (size_t)c->n_devices;
  b->last_task = psim_malloc(sizeof *b->last_task * nd);
  b->last_bwd = psim_malloc(sizeof *b->last_bwd * nd);
  b->need_sync = psim_calloc(nd, 1);
  if (!b->last_task || !b->last_bwd || !b->need_sync)
    return psim_error(PSIM_ENOMEM, "out of memory");
  memset(b->last_task, 0xff, sizeof *b->last_task * nd);
  memset(b->last_bwd, 0xff, sizeof *b->last_bwd * nd);
  size_t slots = (size_t)b->loc_first[m->n_ops] * (size_t)b->n_micro;
  /* measured on Megatron graphs: about 4 tasks, 5 resource slots and 8 edges per
   * (shard, micro-batch); untouched reserve costs no page faults */
  if (b->prev) /* about the last graph's size: no regrowth */
    PSIM_CHECK(psim_tg_reserve(&b->g, (size_t)prev->g.n_tasks * 9 / 8 + 1024,
                               prev->g.n_res * 9 / 8 + 1024, prev->g.n_edges * 9 / 8 + 1024));
  else
    PSIM_CHECK(psim_tg_reserve(&b->g, slots * 4 + 1024, slots * 5 + 1024, slots * 8 + 1024));
  /* at most three kernels (forward, recompute, backward) per slot: no regrowth */
  PSIM_CHECK(PSIM_VEC_RESERVE(b->next_compute, b->cap_next, slots * 3 + 1));
  PSIM_CHECK(psim_memory_static(b));
  PSIM_CHECK(issue_compute(b));
  if (b->prev)
    PSIM_CHECK(map_compute_tasks(b, changed));
  PSIM_CHECK(connect_all(b));
  b->prev = NULL; /* nothing below reads it; prev may be destroyed from here on */
  psim_free(b->old2new);
  psim_free(b->seg_dirty);
  psim_free(b->key_read);
  b->old2new = NULL;
  b->seg_dirty = NULL;
  b->key_read = NULL;
  b->changed = NULL;
  PSIM_CHECK(optimizer(b));
  /* an incremental graph is a full build's graph, acyclic when that is; a
   * builder bug would still stop the engine (tasks left unrun) */
  return changed ? psim_tg_finalize_unchecked(&b->g) : psim_tg_finalize(&b->g);
}

psim_status psim_build_graph(psim_build *b, const psim_model *m, psim_cluster *c,
                             const psim_strategy *s, const psim_sim_options *o) {
  return build(b, m, c, s, o, NULL, NULL, NULL);
}

psim_status psim_build_graph_reusing(psim_build *b, const psim_model *m, psim_cluster *c,
                                     const psim_strategy *s, const psim_sim_options *o,
                                     psim_build *prev, const uint8_t *changed,
                                     psim_taskgraph *spare) {
  if (!changed) {
    memset(b, 0, sizeof *b);
    return psim_error(PSIM_EINPUT, "psim_build_graph_reusing: no changed[] flags (one per op)");
  }
  return build(b, m, c, s, o, prev, changed, spare);
}

void psim_build_destroy(psim_build *b) {
  psim_tg_destroy(&b->g);
  psim_build_ps_free(b); /* issue 8 */
  psim_free(b->simulated);
  psim_free(b->locals);
  psim_free(b->loc_first);
  psim_free(b->fwd);
  psim_free(b->bwd);
  psim_free(b->rec);
  psim_free(b->last_task);
  psim_free(b->last_bwd);
  psim_free(b->need_sync);
  psim_free(b->next_compute);
  psim_free(b->mem);
  psim_free(b->static_mem);
  psim_free(b->wshares);
  psim_free(b->wshare_first);
  psim_free(b->save_slots);
  psim_free(b->costs);
  psim_free(b->seg_task);
  psim_free(b->seg_edge);
  psim_free(b->seg_put);
  psim_free(b->seg_fixed);
  psim_free(b->puts);
  psim_free(b->old2new);
  psim_free(b->seg_dirty);
  psim_free(b->key_read);
  coll_cache_free(b->colls);
  psim_free(b->ps_opts);
  psim_free(b->ps_dropped);
  for (int i = 0; i < 3; i++) {
    comm_cache *h = i == 0 ? b->cache : i == 1 ? b->memo : b->where;
    if (!h)
      continue;
    psim_free(h->slots);
    psim_free(h->served);
    psim_free(h->regs);
    psim_free(h->reg_ids);
    psim_free(h);
  }
  memset(b, 0, sizeof *b);
}
