/* colls.c - collectives with costed templates: the same collective (kind,
 * group, bytes, contention) recurs for every layer and micro-batch. */
#include "sim/builder/build_impl.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/engine/collective.h"

/* ---- collective templates --------------------------------------------------
 * The same collective (kind, group, bytes, contention) recurs for every layer
 * and micro-batch; costing it routes every member, so aggregated collectives
 * are costed once and later copies reuse the duration and resources. */

typedef struct coll_template {
  psim_coll_kind kind;
  psim_allreduce_algo algo;
  int32_t n, concurrent, stride, index;
  bool own_stream;
  double bytes;
  size_t dev_at, res_at; /* offsets into the pools */
  int32_t n_res;
  int32_t pieces;    /* tasks in the chain (psim_coll_pieces) */
  double duration_s; /* of the whole chain */
} coll_template;

struct psim_coll_cache {
  coll_template *items;
  size_t n, cap;
  int32_t *dev_pool, *res_pool;
  size_t n_dev, cap_dev, n_resv, cap_resv;
  psim_hmap index;          /* coll_hash of a template -> its place in items */
  psim_coll_routes *routes; /* the phases' routes, kept for the templates after (res_deferred) */
};

static uint64_t coll_hash(const psim_coll_desc *d) {
  uint64_t h =
      psim_hmap_mix64(((uint64_t)d->kind << 56) ^ ((uint64_t)d->algo << 48) ^ (uint64_t)d->n);
  union {
    double d;
    uint64_t u;
  } bytes = {d->bytes};
  h = psim_hmap_mix64(h ^ bytes.u ^ ((uint64_t)(uint32_t)d->concurrent_groups << 32) ^
                      (uint32_t)d->group_stride ^ ((uint64_t)d->own_stream << 31) ^
                      ((uint64_t)(uint32_t)d->group_index << 40));
  for (int32_t i = 0; i < d->n; i++)
    h = psim_hmap_mix64(h ^ (uint64_t)(uint32_t)d->devices[i]);
  return h;
}

/* What psim_hmap_find_eq compares a candidate template with. */
typedef struct coll_probe {
  const psim_coll_cache *cc;
  const psim_coll_desc *d;
} coll_probe;

/* Whether template i describes the same collective as the probe's. */
static bool coll_same(const void *ctx, int32_t i) {
  const coll_probe *p = ctx;
  const psim_coll_desc *d = p->d;
  assert(i >= 0 && (size_t)i < p->cc->n);
  const coll_template *t = &p->cc->items[i];
  return t->kind == d->kind && t->algo == d->algo && t->n == d->n && t->bytes == d->bytes &&
         t->concurrent == d->concurrent_groups && t->stride == d->group_stride &&
         t->own_stream == d->own_stream && t->index == d->group_index &&
         memcmp(p->cc->dev_pool + t->dev_at, d->devices, sizeof(int32_t) * (size_t)d->n) == 0;
}

/* The template of d (hash h), or -1. */
static int32_t coll_find(const psim_coll_cache *cc, const psim_coll_desc *d, uint64_t h) {
  coll_probe p = {cc, d};
  int32_t i;
  return psim_hmap_find_eq(&cc->index, h, coll_same, &p, &i) ? i : -1;
}

/* Remembers the task (or chain of pieces, entry .. exit) just added for d (aggregated
 * fidelity). */
static psim_status coll_remember(psim_build *b, const psim_coll_desc *d, uint64_t h, int32_t task,
                                 int32_t pieces) {
  psim_coll_cache *cc = b->colls;
  const psim_taskgraph *g = &b->g;
  int32_t n_res = g->res_first[task + 1] - g->res_first[task];
  PSIM_CHECK(PSIM_VEC_RESERVE(cc->items, cc->cap, cc->n + 1));
  PSIM_CHECK(PSIM_VEC_RESERVE(cc->dev_pool, cc->cap_dev, cc->n_dev + (size_t)d->n));
  PSIM_CHECK(PSIM_VEC_RESERVE(cc->res_pool, cc->cap_resv, cc->n_resv + (size_t)n_res));
  PSIM_CHECK(psim_hmap_add(&cc->index, h, (int32_t)cc->n));
  coll_template *t = &cc->items[cc->n];
  *t = (coll_template){d->kind,
                       d->algo,
                       d->n,
                       d->concurrent_groups,
                       d->group_stride,
                       d->group_index,
                       d->own_stream,
                       d->bytes,
                       cc->n_dev,
                       cc->n_resv,
                       n_res,
                       pieces,
                       g->duration_s[task] * pieces};
  memcpy(cc->dev_pool + cc->n_dev, d->devices, sizeof(int32_t) * (size_t)d->n);
  if (n_res > 0) /* none: a collective whose links its concurrent groups share (collective.c)
                   on its own stream; the pool may not exist yet (memcpy of NULL is undefined) */
    memcpy(cc->res_pool + cc->n_resv, g->res + g->res_first[task], sizeof(int32_t) * (size_t)n_res);
  cc->n_dev += (size_t)d->n;
  cc->n_resv += (size_t)n_res;
  cc->n++;
  return PSIM_OK;
}

/* Tasks entry .. exit, the graph's last, take template i's list (res_deferred): whatever the
 * graph holds for them (the first piece's list, which coll_remember copied) is dropped, so
 * the first chain's list is not kept twice, nor scanned once per piece. */
static psim_status list_from_template(psim_build *b, int32_t entry, int32_t exit, int32_t i) {
  psim_taskgraph *g = &b->g;
  assert(exit == g->n_tasks - 1 && entry <= exit);
  PSIM_CHECK(PSIM_VEC_RESERVE(b->task_tmpl, b->cap_task_tmpl, (size_t)exit + 1));
  while (b->n_task_tmpl <= exit)
    b->task_tmpl[b->n_task_tmpl++] = -1;
  for (int32_t k = entry; k <= exit; k++) {
    b->task_tmpl[k] = i;
    g->res_first[k + 1] = g->res_first[entry];
  }
  g->n_res = (size_t)g->res_first[entry];
  return PSIM_OK;
}

/* psim_coll_add with the template cache (aggregated fidelity). */
psim_status psim_build_add_collective(psim_build *b, const psim_coll_desc *d,
                                      const psim_task_info *info, int32_t *entry, int32_t *exit) {
  assert(d->n >= 1 && d->n <= b->c->n_devices);
  psim_coll_desc alone = *d;
  if (psim_build_fold_peers_built(b, d)) { /* folded by exchange blocks (locals.c) */
    alone.concurrent_groups = 1;
    alone.group_stride = 0;
  }
  if (b->res_deferred && !b->colls->routes) /* a large build's: buckets of one group */
    b->colls->routes = psim_coll_routes_new();
  alone.routes = b->res_deferred ? b->colls->routes : NULL;
  d = &alone;
  /* a graph that tracks bytes (keep_graph) gets them from psim_coll_add */
  int32_t t0 = b->g.n_tasks;
  if (b->o->fidelity != PSIM_FIDELITY_AGGREGATE || d->n < 2 || b->g.bytes) {
    PSIM_CHECK(psim_build_fold_check_coll(b, d, NULL));
    PSIM_CHECK(psim_coll_add(&b->g, b->c, d, b->o->fidelity, info, entry, exit));
    return psim_build_fold_note_coll(b, d, t0);
  }
  uint64_t h = coll_hash(d);
  int32_t i = coll_find(b->colls, d, h);
  if (i < 0) {
    double with_peers;
    alone.list_first_piece = b->res_deferred; /* the chain's lists: the template's (below) */
    PSIM_CHECK(psim_coll_add_timed(&b->g, b->c, d, b->o->fidelity, info, entry, exit, &with_peers));
    PSIM_CHECK(psim_build_fold_check_coll(b, d, &with_peers)); /* once per template */
    int32_t pieces = *exit - *entry + 1;
    if (*exit != b->g.n_tasks - 1 || b->g.n_tasks - t0 != pieces) {
      if (b->res_deferred && pieces > 1) /* pieces without lists that no template gives them */
        return psim_error(PSIM_EFAILED, "collective: its pieces are not one chain");
      return psim_build_fold_note_coll(b, d, t0); /* nothing to reuse */
    }
    PSIM_CHECK(coll_remember(b, d, h, *entry, pieces));
    if (b->res_deferred)
      PSIM_CHECK(list_from_template(b, *entry, *exit, (int32_t)b->colls->n - 1));
    return psim_build_fold_note_coll(b, d, t0);
  }
  const psim_coll_cache *cc = b->colls;
  const coll_template *t = &cc->items[i];
  psim_task_info ti = *info;
  ti.kind = PSIM_TASK_COLLECTIVE;
  ti.device = d->devices[0];
  if (!b->res_deferred) {
    PSIM_CHECK(psim_coll_add_pieces(&b->g, t->pieces, t->duration_s, cc->res_pool + t->res_at,
                                    t->n_res, &ti, entry, exit));
    return psim_build_fold_note_coll(b, d, t0);
  }
  PSIM_CHECK(psim_coll_add_pieces(&b->g, t->pieces, t->duration_s, NULL, 0, &ti, entry, exit));
  PSIM_CHECK(list_from_template(b, *entry, *exit, i));
  return psim_build_fold_note_coll(b, d, t0);
}

void psim_build_task_res(const psim_build *b, int32_t t, const int32_t **res, int32_t *n) {
  int32_t i = t < b->n_task_tmpl ? b->task_tmpl[t] : -1;
  if (i >= 0) {
    const coll_template *tp = &b->colls->items[i];
    *res = b->colls->res_pool + tp->res_at;
    *n = tp->n_res;
    return;
  }
  *res = b->g.res + b->g.res_first[t];
  *n = b->g.res_first[t + 1] - b->g.res_first[t];
}

int32_t psim_build_n_templates(const psim_build *b) {
  return b->colls ? (int32_t)b->colls->n : 0;
}

void psim_build_colls_free(psim_coll_cache *cc) {
  if (!cc)
    return;
  psim_free(cc->items);
  psim_free(cc->dev_pool);
  psim_free(cc->res_pool);
  psim_hmap_destroy(&cc->index);
  psim_coll_routes_free(cc->routes);
  psim_free(cc);
}

psim_group *psim_build_group_new(const psim_build *b) {
  size_t cap = (size_t)(b->c->n_devices > 0 ? b->c->n_devices : 1);
  psim_group *g = psim_malloc(sizeof *g + 2 * cap * sizeof(int32_t));
  if (!g)
    return NULL;
  *g = (psim_group){0};
  g->devices = (int32_t *)(g + 1);
  g->entries = g->devices + cap;
  return g;
}

/* ---- the partial-group memo ---------------------------------------------------- */

psim_group_memo *psim_build_group_memo_new(void) {
  return psim_calloc(1, sizeof(psim_group_memo));
}

void psim_build_group_memo_free(psim_group_memo *gm) {
  if (!gm)
    return;
  for (int32_t i = 0; i < PSIM_GROUP_MEMO_SLOTS; i++)
    psim_free(gm->slot[i].devices);
  psim_free(gm);
}

/* Whether slot sl holds the group of (o, e, mask): every field the group is made from. */
static bool memo_slot_is(const psim_group_memo_slot *sl, const psim_op *op,
                         const psim_op_config *cfg, int32_t e, uint32_t mask) {
  if (sl->list != cfg->devices || sl->e != e || sl->mask != mask ||
      sl->n_devices != cfg->n_devices || sl->replicas != cfg->replicas || sl->n_dims != op->n_dims)
    return false;
  return memcmp(sl->degree, cfg->degree, sizeof(int32_t) * (size_t)op->n_dims) == 0;
}

bool psim_build_group_memo_get(psim_group_memo *gm, const psim_build *b, int32_t o, int32_t e,
                               uint32_t mask, psim_group *g) {
  const psim_op *op = &b->m->ops[o];
  const psim_op_config *cfg = &b->s->ops[o];
  for (int32_t i = 0; i < PSIM_GROUP_MEMO_SLOTS; i++) {
    const psim_group_memo_slot *sl = &gm->slot[i];
    if (!sl->list || !memo_slot_is(sl, op, cfg, e, mask))
      continue;
    memcpy(g->devices, sl->devices, sizeof(int32_t) * (size_t)sl->n);
    memcpy(g->entries, sl->entries, sizeof(int32_t) * (size_t)sl->n);
    g->n = g->wanted = sl->n;
    g->n_groups = cfg->n_devices / (sl->n ? sl->n : 1);
    g->stride = 0;
    gm->hits++;
    return true;
  }
  gm->misses++;
  return false;
}

void psim_build_group_memo_put(psim_group_memo *gm, const psim_build *b, int32_t o, int32_t e,
                               uint32_t mask, const psim_group *g) {
  const psim_op *op = &b->m->ops[o];
  const psim_op_config *cfg = &b->s->ops[o];
  psim_group_memo_slot *sl = &gm->slot[gm->next];
  gm->next = (gm->next + 1) % PSIM_GROUP_MEMO_SLOTS;
  sl->list = NULL; /* empty until filled */
  if (g->n > sl->cap) {
    int32_t *mem = psim_realloc(sl->devices, 2 * sizeof(int32_t) * (size_t)g->n);
    if (!mem)
      return; /* the slot stays empty: the next request is a miss */
    sl->devices = mem;
    sl->cap = g->n;
  }
  sl->entries = sl->devices + sl->cap;
  memcpy(sl->devices, g->devices, sizeof(int32_t) * (size_t)g->n);
  memcpy(sl->entries, g->entries, sizeof(int32_t) * (size_t)g->n);
  memcpy(sl->degree, cfg->degree, sizeof(int32_t) * (size_t)op->n_dims);
  sl->n = g->n;
  sl->n_devices = cfg->n_devices;
  sl->replicas = cfg->replicas;
  sl->n_dims = op->n_dims;
  sl->e = e;
  sl->mask = mask;
  sl->list = cfg->devices;
}

psim_coll_cache *psim_build_colls_new(void) {
  return psim_calloc(1, sizeof(psim_coll_cache));
}

/* ---- families of concurrent groups (docs/simulator.md, "Concurrent groups") ---- */

/* Unfolded: g's place in the family of concurrent groups g->devices + j * stride (stride
 * from a neighbouring group, either side), or stride 0 when the family is not n_groups groups
 * of op o each shifted alike. g2: scratch. */
static void unfolded_family(const psim_build *b, int32_t o, uint32_t mask, psim_group *g,
                            psim_group *g2, int32_t stride) {
  int32_t below = 0, above = 0, nd = b->c->n_devices;
  for (int32_t dir = -1; dir <= 1; dir += 2) {
    for (int32_t j = 1; below + above + 1 < g->n_groups; j++) {
      int64_t d0 = (int64_t)g->devices[0] + (int64_t)dir * j * stride;
      int32_t e2 = d0 >= 0 && d0 < nd ? psim_build_entry_on(b, o, (int32_t)d0) : -1;
      if (e2 < 0)
        break;
      psim_build_partial_group(b, o, e2, mask, g2);
      bool same = g2->n == g->n;
      for (int32_t i = 0; i < g->n && same; i++)
        same = (int64_t)g2->devices[i] == (int64_t)g->devices[i] + (int64_t)dir * j * stride;
      if (!same)
        break;
      *(dir < 0 ? &below : &above) += 1;
    }
  }
  if (below + above + 1 != g->n_groups)
    return;
  g->stride = stride;
  g->index = below;
}

void psim_build_group_stride(const psim_build *b, int32_t o, int32_t e, uint32_t mask,
                             psim_group *g) {
  g->index = 0;
  const psim_op *op = &b->m->ops[o];
  const psim_op_config *cfg = &b->s->ops[o];
  int32_t other = -1;
  if (cfg->replicas > 1) {
    other = e % cfg->replicas + 1 < cfg->replicas ? e + 1 : e - 1;
  } else {
    int32_t coord[PSIM_MAX_OP_DIMS];
    psim_build_shard_coords(op, cfg, e / cfg->replicas, coord);
    for (int32_t i = 0; i < op->n_dims && other < 0; i++) {
      if ((mask & (1u << i)) || cfg->degree[i] == 1)
        continue;
      coord[i] = coord[i] + 1 < cfg->degree[i] ? coord[i] + 1 : coord[i] - 1;
      other = psim_build_shard_index(op, cfg, coord) * cfg->replicas;
    }
  }
  if (other < 0 || g->n_groups <= 1)
    return;
  psim_group *g2 = psim_build_group_new(b);
  if (!g2)
    return; /* out of memory: the stride stays unknown (0) */
  psim_build_partial_group(b, o, other, mask, g2);
  int32_t stride = g2->devices[0] - g->devices[0];
  for (int32_t i = 0; i < g->n && stride != INT32_MIN; i++)
    if (g2->devices[i] - g->devices[i] != stride)
      stride = INT32_MIN;
  if (!b->folded) {
    if (stride != INT32_MIN && stride != 0)
      unfolded_family(b, o, mask, g, g2, stride > 0 ? stride : -stride);
    psim_free(g2);
    return;
  }
  psim_free(g2);
  /* the engine routes groups devices + k * stride for k < n_groups: use the
   * stride only when every one of them is a real device */
  if (stride <= 0) /* INT32_MIN: members shift unalike */
    return;
  for (int32_t i = 0; i < g->n; i++)
    if ((int64_t)g->devices[i] + (int64_t)(g->n_groups - 1) * stride >= b->c->n_devices)
      return;
  g->stride = stride;
}

void psim_build_replica_family(const psim_build *b, const psim_op_config *cy, int32_t shard,
                               psim_group *g) {
  g->stride = 0;
  g->index = 0;
  int32_t n_shards = cy->n_devices / cy->replicas;
  if (b->folded && n_shards > 1 && shard + 1 < n_shards) { /* a uniform shift to the next? */
    int32_t stride = cy->devices[(shard + 1) * cy->replicas] - g->devices[0];
    bool uniform = stride > 0;
    for (int32_t i = 0; i < g->n && uniform; i++)
      uniform = cy->devices[(shard + 1) * cy->replicas + i] - g->devices[i] == stride &&
                (int64_t)g->devices[i] + (int64_t)(g->n_groups - 1) * stride < b->c->n_devices;
    g->stride = uniform ? stride : 0;
  }
  if (!b->folded && n_shards > 1) { /* unfolded: every shard's replicas shifted alike */
    int32_t stride = cy->devices[cy->replicas] - cy->devices[0];
    bool uniform = stride > 0;
    for (int32_t sh = 1; sh < n_shards && uniform; sh++)
      for (int32_t i = 0; i < g->n && uniform; i++)
        uniform = cy->devices[sh * cy->replicas + i] == cy->devices[i] + sh * stride;
    g->stride = uniform ? stride : 0;
    g->index = uniform ? shard : 0;
  }
}
