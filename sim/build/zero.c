/* zero.c - ZeRO-3's parameter all-gathers, prefetched as DeepSpeed and
 * PyTorch FSDP issue them (zero.h). */
#include "sim/build/zero.h"

#include <string.h>

#include "sim/build/memory.h"
#include "sim/core/alloc.h"

/* ---- groups ---------------------------------------------------------------- */

static int32_t local_entry(const psim_build *b, int32_t o, int32_t k) {
  const psim_op_local *loc = &b->locals[b->loc_first[o] + k];
  return loc->shard * b->s->ops[o].replicas + loc->replica;
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

psim_status psim_zero_each_group(psim_build *b, int32_t o, uint32_t mask, psim_zero_group_fn fn,
                                 void *ctx) {
  psim_group *g = psim_malloc(sizeof *g);
  if (!g)
    return psim_error(PSIM_ENOMEM, "out of memory");
  psim_status st = PSIM_OK;
  int32_t nk = b->loc_first[o + 1] - b->loc_first[o];
  for (int32_t k = 0; k < nk && st == PSIM_OK; k++) {
    int32_t e = local_entry(b, o, k);
    if (k > 0 && !b->folded && first_member(b, o, e, mask) != b->s->ops[o].devices[e])
      continue; /* each group once, from its first member (k = 0 checks the group's size) */
    psim_build_partial_group(b, o, e, mask, g);
    st = psim_build_group_fits(g);
    if (st != PSIM_OK)
      break;
    if (!b->folded && g->devices[0] != b->s->ops[o].devices[e])
      continue; /* each group once, from its first member */
    if (b->folded)
      psim_build_group_stride(b, o, e, mask, g);
    st = fn(b, g, ctx);
  }
  psim_free(g);
  return st;
}

double psim_zero_coll_volume(psim_coll_kind kind, double bytes, int32_t n, int32_t groups) {
  double per_rank = n > 1 ? (double)(n - 1) / n * bytes : 0;
  if (kind == PSIM_COLL_ALL_REDUCE)
    per_rank *= 2;
  return per_rank * n * (groups > 0 ? groups : 1);
}

/* ---- ZeRO-3 units ------------------------------------------------------------ */

/* A unit: consecutive ops of one layer whose weights gather over one group
 * (DeepSpeed gathers per submodule and prefetches by parameter count; FSDP
 * per wrapped unit, usually a transformer layer). */
typedef struct zunit {
  int32_t first_op, last_op, stage;
  uint32_t mask;
  double elems; /* gathered parameters per rank */
} zunit;

typedef struct zunits {
  zunit *u;
  int32_t n;
  double wbytes; /* bytes per gathered parameter (memory.h's table) */
} zunits;

static bool same_members(const psim_group *a, const psim_group *c) {
  return a->n == c->n && memcmp(a->devices, c->devices, sizeof(int32_t) * (size_t)a->n) == 0;
}

/* Adds op o's weight t to the units (a new one when the layer, stage or group changes). */
static void unit_add(const psim_build *b, int32_t o, int32_t t, uint32_t mask, psim_group *key,
                     psim_group *g, zunits *us) {
  zunit *last = us->n ? &us->u[us->n - 1] : NULL;
  psim_build_partial_group(b, o, local_entry(b, o, 0), mask, g);
  if (!last || b->m->ops[last->first_op].layer != b->m->ops[o].layer ||
      last->stage != b->s->ops[o].stage || !same_members(key, g)) {
    us->u[us->n++] = (zunit){o, o, b->s->ops[o].stage, mask, 0};
    last = &us->u[us->n - 1];
    key->n = g->n;
    memcpy(key->devices, g->devices, sizeof(int32_t) * (size_t)g->n);
  }
  psim_region r;
  psim_build_tensor_region(b, o, b->locals[b->loc_first[o]].shard, t, &r);
  last->elems += psim_build_region_elems(&r, b->m->tensors[t].rank);
  last->last_op = o;
}

/* The units in forward order; us->u is allocated here (n_ops at most). */
static psim_status make_units(const psim_build *b, zunits *us) {
  const psim_model *m = b->m;
  double pb[3];
  psim_memory_param_bytes(m->dtype, pb);
  us->n = 0;
  us->wbytes = pb[0];
  us->u = psim_malloc(sizeof *us->u * ((size_t)m->n_ops + 1));
  psim_group *key = psim_malloc(sizeof *key), *g = psim_malloc(sizeof *g);
  if (!us->u || !key || !g) {
    psim_free(key);
    psim_free(g);
    return psim_error(PSIM_ENOMEM, "out of memory for ZeRO-3's units");
  }
  for (int32_t o = 0; o < m->n_ops; o++) {
    if (b->loc_first[o + 1] == b->loc_first[o])
      continue;
    for (int32_t i = 0; i < m->ops[o].n_in; i++) {
      int32_t t = m->ops[o].in[i];
      uint32_t mask = psim_build_partial_mask(b, o, t, PSIM_DIR_BWD);
      if (m->tensors[t].kind == PSIM_TENSOR_WEIGHT && mask)
        unit_add(b, o, t, mask, key, g, us);
    }
  }
  psim_free(key);
  psim_free(g);
  return PSIM_OK;
}

/* The unit at which the gather of unit j is issued, in pass order (forward:
 * ascending, backward: descending): the earliest unit i of j's stage such
 * that units strictly between i and j, with j, hold at most `prefetch`
 * parameters; always at least the unit before j (FSDP's one-unit prefetch).
 * Returns j itself when no unit of its stage comes before it in the pass. */
static int32_t issue_unit(const zunits *us, int32_t j, int step, double prefetch) {
  int32_t i = j - step;
  if (i < 0 || i >= us->n || us->u[i].stage != us->u[j].stage)
    return j;
  double acc = us->u[j].elems;
  for (int32_t k = i - step; k >= 0 && k < us->n && us->u[k].stage == us->u[j].stage; k -= step) {
    if (acc + us->u[i].elems > prefetch)
      break;
    acc += us->u[i].elems;
    i = k;
  }
  return i;
}

/* ---- ZeRO-3 gathers ---------------------------------------------------------- */

typedef struct gather_ctx {
  const zunits *us;
  int32_t j, mu, dir; /* unit, micro-batch, PSIM_DIR_FWD or PSIM_DIR_BWD */
  int32_t *prev;      /* per task: the kernel before it on its stream, or -1 */
  double prefetch;    /* parameters */
} gather_ctx;

/* The first kernel of unit u in a pass on device dev: its forward, or the
 * recompute or else the backward that runs first in the layer's backward. */
static int32_t first_kernel(const psim_build *b, const zunit *u, int dir, int32_t dev, int32_t mu) {
  if (dir == PSIM_DIR_FWD)
    return psim_build_src_task(b, b->fwd, u->first_op, dev, mu);
  if (psim_build_recomputed(b, u->first_op))
    return psim_build_src_task(b, b->rec, u->first_op, dev, mu);
  return psim_build_src_task(b, b->bwd, u->last_op, dev, mu);
}

static psim_status gather_group(psim_build *b, psim_group *g, void *vctx) {
  const gather_ctx *c = vctx;
  const zunit *u = &c->us->u[c->j];
  psim_coll_desc d = {
      PSIM_COLL_ALL_GATHER,        b->s->allreduce, g->devices, g->n, u->elems * c->us->wbytes,
      b->folded ? g->n_groups : 1, g->stride};
  psim_task_info info = {PSIM_TASK_COLLECTIVE,
                         PSIM_TP_COMM_DP,
                         (int16_t)u->stage,
                         u->first_op,
                         c->mu,
                         g->devices[0],
                         -1};
  int32_t entry, exit;
  PSIM_CHECK(psim_build_add_collective(b, &d, &info, &entry, &exit));
  b->dp_bytes += psim_zero_coll_volume(d.kind, d.bytes, d.n, d.concurrent_groups);
  int step = c->dir == PSIM_DIR_FWD ? 1 : -1;
  const zunit *at = &c->us->u[issue_unit(c->us, c->j, step, c->prefetch)];
  for (int32_t i = 0; i < g->n; i++) {
    int32_t dev = g->devices[i];
    if (!b->simulated[dev])
      continue;
    int32_t need = first_kernel(b, u, c->dir, dev, c->mu);
    int32_t issue = first_kernel(b, at, c->dir, dev, c->mu);
    int32_t gate = issue >= 0 ? c->prev[issue] : -1;
    if (gate >= 0)
      PSIM_CHECK(psim_tg_add_edge(&b->g, gate, entry));
    if (need >= 0)
      PSIM_CHECK(psim_tg_add_edge(&b->g, exit, need));
  }
  return PSIM_OK;
}

/* Per task: the compute kernel issued before it on its device, or -1. */
static int32_t *stream_prev(const psim_build *b) {
  int32_t *prev = psim_malloc(sizeof *prev * ((size_t)b->g.n_tasks + 1));
  if (!prev)
    return NULL;
  memset(prev, 0xff, sizeof *prev * ((size_t)b->g.n_tasks + 1));
  size_t slots = (size_t)b->loc_first[b->m->n_ops] * (size_t)b->n_micro;
  const int32_t *arrs[3] = {b->fwd, b->bwd, b->rec};
  for (int a = 0; a < 3; a++)
    for (size_t i = 0; i < slots; i++) {
      int32_t id = arrs[a][i];
      if (id >= 0 && b->next_compute[id] >= 0)
        prev[b->next_compute[id]] = id;
    }
  return prev;
}

psim_status psim_zero_gathers(psim_build *b) {
  if (b->s->zero_stage < 3)
    return PSIM_OK;
  zunits us;
  PSIM_CHECK(make_units(b, &us));
  gather_ctx c = {&us, 0, 0, 0, stream_prev(b), b->s->zero_prefetch};
  psim_status st = c.prev ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory for ZeRO-3");
  for (c.mu = 0; c.mu < b->n_micro && st == PSIM_OK; c.mu++)
    for (int pass = 0; pass < 2 && st == PSIM_OK; pass++) {
      c.dir = pass == 0 ? PSIM_DIR_FWD : PSIM_DIR_BWD;
      for (int32_t k = 0; k < us.n && st == PSIM_OK; k++) {
        c.j = pass == 0 ? k : us.n - 1 - k;
        st = psim_zero_each_group(b, us.u[c.j].first_op, us.u[c.j].mask, gather_group, &c);
      }
    }
  psim_free(c.prev);
  psim_free(us.u);
  return st;
}

/* ---- ZeRO-3 memory ----------------------------------------------------------- */

psim_status psim_zero_gathered_memory(psim_build *b) {
  if (b->s->zero_stage < 3)
    return PSIM_OK;
  zunits us;
  PSIM_CHECK(make_units(b, &us));
  double *win = psim_calloc((size_t)b->c->n_devices + 1, sizeof *win);
  if (!win) {
    psim_free(us.u);
    return psim_error(PSIM_ENOMEM, "out of memory for ZeRO-3");
  }
  for (int32_t j = 0; j < us.n; j++) {
    int32_t i = issue_unit(&us, j, 1, b->s->zero_prefetch);
    double bytes = 0; /* units i..j resident when j's gather is issued */
    for (int32_t k = i; k <= j; k++)
      bytes += us.u[k].elems * us.wbytes;
    const psim_op_config *cfg = &b->s->ops[us.u[j].first_op];
    for (int32_t e = 0; e < cfg->n_devices; e++)
      if (bytes > win[cfg->devices[e]])
        win[cfg->devices[e]] = bytes;
  }
  for (int32_t d = 0; d < b->c->n_devices; d++)
    b->static_mem[3 * d] += win[d];
  psim_free(win);
  psim_free(us.u);
  return PSIM_OK;
}
