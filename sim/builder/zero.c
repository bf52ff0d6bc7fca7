/* zero.c - ZeRO-3's parameter all-gathers, prefetched as DeepSpeed and
 * PyTorch FSDP issue them (zero.h). */
#include "sim/builder/zero.h"

#include <assert.h>
#include <string.h>

#include "sim/builder/memory.h"
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

/* ---- HSDP: shard and replicate groups ------------------------------------------------- */

/* Member i's shard group (part PSIM_ZERO_SHARD: the chunk of n / r consecutive members
 * holding i) or replicate group (the members at i's place in every chunk) of the group g of
 * n = r * chunk members, into sub. */
static void sub_group(const psim_group *g, int32_t i, int32_t r, psim_zero_part part,
                      psim_group *sub) {
  int32_t chunk = g->n / r, n = part == PSIM_ZERO_SHARD ? chunk : r;
  for (int32_t j = 0; j < n; j++) {
    int32_t m = part == PSIM_ZERO_SHARD ? i / chunk * chunk + j : i % chunk + j * chunk;
    sub->entries[j] = g->entries[m];
    sub->devices[j] = g->devices[m];
  }
  sub->n = sub->wanted = n;
  sub->stride = 0;
}

/* The offset between members a and c of g when every chunk (shard) or place (replicate)
 * shifts alike, else 0. */
static int32_t shift_alike(const psim_group *g, int32_t r, psim_zero_part part) {
  int32_t chunk = g->n / r, s = 0;
  for (int32_t j = 0; j < g->n; j++) {
    int32_t next = part == PSIM_ZERO_SHARD ? j + chunk : j + 1;
    if (part == PSIM_ZERO_SHARD ? next >= g->n : (j % chunk) + 1 >= chunk)
      continue;
    int32_t d = g->devices[next] - g->devices[j];
    if (s != 0 && d != s)
      return 0;
    s = d;
  }
  return s > 0 ? s : 0;
}

/* Folded: the family of sub's concurrent peers (folding's contention check routes
 * devices + k stride, k < n_groups; sim/builder/locals.c). The whole group's family (whole:
 * its stride and n_groups, the groups along the op's other dims) and the other chunks (shard)
 * or places (replicate) must form one arithmetic progression: the chunks alone (no other
 * groups), the places alone, or the whole family nested inside one place's step (Megatron's
 * order with tp ranks fastest: replicate groups' first members are consecutive). Otherwise
 * folding is declined (b->fold_broken: rebuilt unfolded), never approximated. */
static void sub_family(psim_build *b, const psim_group *whole, int32_t r, psim_zero_part part,
                       psim_group *sub) {
  int32_t chunk = whole->n / r, inner = part == PSIM_ZERO_SHARD ? r : chunk;
  int32_t step = inner > 1 ? shift_alike(whole, r, part) : 0;
  sub->n_groups = whole->n_groups * inner;
  if (sub->n_groups <= 1)
    return;
  if (whole->n_groups <= 1 && step > 0)
    sub->stride = step;
  else if (inner <= 1)
    sub->stride = whole->stride;
  else if (whole->stride > 0 && whole->stride * whole->n_groups == step)
    sub->stride = whole->stride;
  else {
    b->fold_broken = true;
    return;
  }
  for (int32_t i = 0; i < sub->n && sub->stride > 0; i++)
    if ((int64_t)sub->devices[i] + (int64_t)(sub->n_groups - 1) * sub->stride >= b->c->n_devices)
      sub->stride = 0;
  if (sub->stride <= 0)
    b->fold_broken = true;
}

/* psim_zero_each_group under HSDP (dp_replicate r > 1): each shard or replicate group once,
 * from its first (simulated) member; groups of one rank are skipped (no collective). */
static psim_status each_sub_group(psim_build *b, int32_t o, uint32_t mask, psim_zero_part part,
                                  psim_zero_group_fn fn, void *ctx) {
  int32_t r = b->s->dp_replicate;
  psim_group *g = psim_build_group_new(b), *sub = psim_build_group_new(b);
  psim_status st = g && sub ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory");
  int32_t nk = b->loc_first[o + 1] - b->loc_first[o];
  for (int32_t k = 0; k < nk && st == PSIM_OK; k++) {
    int32_t e = local_entry(b, o, k);
    psim_build_partial_group(b, o, e, mask, g);
    st = psim_build_group_fits(g);
    if (st == PSIM_OK && g->n % r != 0)
      st = psim_error(PSIM_EINPUT,
                      "dp_replicate: %d replicas do not divide the %d data-parallel ranks of "
                      "op '%s''s weights",
                      (int)r, (int)g->n, b->m->ops[o].name);
    if (st != PSIM_OK)
      break;
    int32_t i = 0;
    while (i < g->n && g->entries[i] != e)
      i++;
    if (i == g->n)
      continue; /* not a member of its own group: cannot happen (comm.c) */
    sub_group(g, i, r, part, sub);
    int32_t first = 0; /* folded: its first simulated member */
    while (b->folded && first < sub->n && !b->simulated[sub->devices[first]])
      first++;
    if (sub->n < 2 || sub->devices[b->folded ? first : 0] != b->s->ops[o].devices[e])
      continue;
    sub->n_groups = 1;
    if (b->folded) {
      psim_build_group_stride(b, o, e, mask, g);
      sub_family(b, g, r, part, sub);
    }
    st = fn(b, sub, ctx);
  }
  psim_free(g);
  psim_free(sub);
  return st;
}

psim_status psim_zero_each_group(psim_build *b, int32_t o, uint32_t mask, psim_zero_part part,
                                 psim_zero_group_fn fn, void *ctx) {
  if (b->s->dp_replicate > 1 && part != PSIM_ZERO_WHOLE)
    return each_sub_group(b, o, mask, part, fn, ctx);
  if (part == PSIM_ZERO_REPLICATE)
    return PSIM_OK; /* one replica: nothing to all-reduce across */
  psim_group *g = psim_build_group_new(b);
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
      continue;            /* each group once, from its first member */
    int32_t first_sim = 0; /* folded: ... from its first simulated member */
    while (b->folded && !b->simulated[g->devices[first_sim]])
      first_sim++;
    if (b->folded && g->devices[first_sim] != b->s->ops[o].devices[e])
      continue;
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
  int32_t first_op, last_op, stage, layer;
  int32_t group;  /* its checkpoint unit (psim_build_rc_unit): its layer, or a uniform group's */
  int32_t rec_op; /* the first of its ops reading a weight that is recomputed, or -1 */
  uint32_t mask;
  int32_t n;    /* ranks of its data-parallel group (its shard group: n / dp_replicate) */
  double elems; /* gathered parameters per rank */
} zunit;

typedef struct zunits {
  zunit *u;
  int32_t n;
  double wbytes;  /* bytes per gathered parameter (memory.h's table) */
  int32_t *order; /* per pass (forward, then backward): the units in issue order */
} zunits;

static bool same_members(const psim_group *a, const psim_group *c) {
  return a->n == c->n && memcmp(a->devices, c->devices, sizeof(int32_t) * (size_t)a->n) == 0;
}

double psim_zero_gather_share(const psim_build *b, int32_t o, double wbytes) {
  const psim_op *op = &b->m->ops[o];
  bool fp8 =
      op->kind == PSIM_OP_MATMUL &&
      (op->attrs.fp8 || (op->n_out > 0 && b->m->tensors[op->out[0]].dtype == PSIM_DTYPE_FP8));
  return b->c->stack.fp8_all_gather && fp8 && wbytes > 1 ? 1.0 / wbytes : 1.0;
}

/* Adds op o's weight t to the units (a new one when the layer, stage or group changes). */
static void unit_add(const psim_build *b, int32_t o, int32_t t, uint32_t mask, psim_group *key,
                     psim_group *g, zunits *us) {
  zunit *last = us->n ? &us->u[us->n - 1] : NULL;
  psim_build_partial_group(b, o, local_entry(b, o, 0), mask, g);
  if (!last || last->layer != b->m->ops[o].layer || last->stage != b->s->ops[o].stage ||
      !same_members(key, g)) {
    us->u[us->n++] = (zunit){
        o, o, b->s->ops[o].stage, b->m->ops[o].layer, psim_build_rc_unit(b, o), -1, mask, g->n, 0};
    last = &us->u[us->n - 1];
    key->n = g->n;
    memcpy(key->devices, g->devices, sizeof(int32_t) * (size_t)g->n);
  }
  psim_region r;
  psim_build_tensor_region(b, o, b->locals[b->loc_first[o]].shard, t, &r);
  last->elems +=
      psim_build_region_elems(&r, b->m->tensors[t].rank) * psim_zero_gather_share(b, o, us->wbytes);
  last->last_op = o;
  if (last->rec_op < 0 && psim_build_recomputed(b, o))
    last->rec_op = o;
}

/* The units in each pass's issue order (kernels.c, issue_slot): forward in
 * op order; backward checkpoint unit by unit (a layer, or a uniform group of layers)
 * from the last, each one's recompute
 * in op order before its backward in reverse op order, so that a unit whose
 * weights the recompute reads comes before those only the backward reads. */
static void make_orders(zunits *us) {
  int32_t *fwd = us->order, *bwd = us->order + us->n, n = 0;
  for (int32_t j = 0; j < us->n; j++)
    fwd[j] = j;
  for (int32_t hi = us->n - 1; hi >= 0;) {
    int32_t lo = hi;
    while (lo > 0 && us->u[lo - 1].stage == us->u[hi].stage &&
           us->u[lo - 1].group == us->u[hi].group)
      lo--;
    for (int32_t j = lo; j <= hi; j++)
      if (us->u[j].rec_op >= 0)
        bwd[n++] = j;
    for (int32_t j = hi; j >= lo; j--)
      if (us->u[j].rec_op < 0)
        bwd[n++] = j;
    hi = lo - 1;
  }
  assert(n == us->n);
}

/* The units and their issue orders; us->u and us->order are allocated here
 * (a unit per weight input at most), freed by units_free. */
static psim_status make_units(const psim_build *b, zunits *us) {
  const psim_model *m = b->m;
  double pb[3];
  psim_memory_param_bytes(m->dtype, pb);
  us->n = 0;
  us->wbytes = pb[0];
  size_t cap = 1;
  for (int32_t o = 0; o < m->n_ops; o++)
    cap += (size_t)m->ops[o].n_in;
  us->u = psim_malloc(sizeof *us->u * cap);
  us->order = psim_malloc(sizeof *us->order * 2 * cap);
  psim_group *key = psim_build_group_new(b), *g = psim_build_group_new(b);
  psim_status st = us->u && us->order && key && g
                       ? PSIM_OK
                       : psim_error(PSIM_ENOMEM, "out of memory for ZeRO-3's units");
  for (int32_t o = 0; o < m->n_ops && st == PSIM_OK; o++) {
    if (b->loc_first[o + 1] == b->loc_first[o])
      continue;
    for (int32_t i = 0; i < m->ops[o].n_in; i++) {
      int32_t t = m->ops[o].in[i];
      uint32_t mask = psim_build_partial_mask(b, o, t, PSIM_DIR_BWD);
      if (m->tensors[t].kind == PSIM_TENSOR_WEIGHT && mask)
        unit_add(b, o, t, mask, key, g, us);
    }
  }
  if (st == PSIM_OK)
    make_orders(us);
  psim_free(key);
  psim_free(g);
  return st;
}

static void units_free(zunits *us) {
  psim_free(us->u);
  psim_free(us->order);
}

/* The unit at which the gather of the unit at position p of a pass's issue
 * order ord is issued: the earliest unit i of its stage before it in ord
 * such that the units strictly between i and it, with it, hold at most
 * `prefetch` parameters; always at least the unit just before it (FSDP's
 * one-unit prefetch). The unit itself when none of its stage comes before
 * it in the pass. */
static int32_t issue_unit(const zunits *us, const int32_t *ord, int32_t p, double prefetch) {
  const zunit *u = &us->u[ord[p]];
  if (p == 0 || us->u[ord[p - 1]].stage != u->stage)
    return ord[p];
  int32_t i = p - 1;
  double acc = u->elems;
  for (int32_t k = i - 1; k >= 0 && us->u[ord[k]].stage == u->stage; k--) {
    if (acc + us->u[ord[i]].elems > prefetch)
      break;
    acc += us->u[ord[i]].elems;
    i = k;
  }
  return ord[i];
}

/* ---- ZeRO-3 gathers ---------------------------------------------------------- */

typedef struct gather_ctx {
  const zunits *us;
  int32_t p, mu, dir; /* position in the pass's order, micro-batch, PSIM_DIR_FWD or _BWD */
  int32_t *prev;      /* per task: the kernel before it on its stream, or -1 */
  double prefetch;    /* parameters */
} gather_ctx;

/* The first kernel of unit u in a pass on device dev that reads its
 * weights: its forward, or in backward the recompute (in op order before
 * the layer's backward) or else the backward that runs first. */
static int32_t first_kernel(const psim_build *b, const zunit *u, int dir, int32_t dev, int32_t mu) {
  if (dir == PSIM_DIR_FWD)
    return psim_build_src_task(b, b->fwd, u->first_op, dev, mu);
  if (u->rec_op >= 0)
    return psim_build_src_task(b, b->rec, u->rec_op, dev, mu);
  return psim_build_src_task(b, b->bwd, u->last_op, dev, mu);
}

static psim_status gather_group(psim_build *b, psim_group *g, void *vctx) {
  const gather_ctx *c = vctx;
  const int32_t *ord = c->us->order + (c->dir == PSIM_DIR_FWD ? 0 : c->us->n);
  const zunit *u = &c->us->u[ord[c->p]];
  psim_coll_desc d =
      psim_build_group_coll(b, g, PSIM_COLL_ALL_GATHER, u->elems * c->us->wbytes, false);
  psim_task_info info = {PSIM_TASK_COLLECTIVE,
                         PSIM_TP_COMM_DP,
                         (int16_t)u->stage,
                         u->first_op,
                         c->mu,
                         g->devices[0],
                         -1};
  int32_t entry, exit;
  PSIM_CHECK(psim_build_add_collective(b, &d, &info, &entry, &exit));
  b->dp_bytes += psim_zero_coll_volume(d.kind, d.bytes, d.n, psim_build_counted_groups(b, &d));
  const zunit *at = &c->us->u[issue_unit(c->us, ord, c->p, c->prefetch)];
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
  const int32_t *arrs[4] = {b->fwd, b->bwd, b->rec, b->wgt};
  for (int a = 0; a < 4 && arrs[a]; a++)
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
      for (c.p = 0; c.p < us.n && st == PSIM_OK; c.p++) {
        const zunit *u = &us.u[us.order[pass * us.n + c.p]];
        st = psim_zero_each_group(b, u->first_op, u->mask, PSIM_ZERO_SHARD, gather_group, &c);
      }
    }
  psim_free(c.prev);
  units_free(&us);
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
    units_free(&us);
    return psim_error(PSIM_ENOMEM, "out of memory for ZeRO-3");
  }
  int32_t r = b->s->dp_replicate > 1 ? b->s->dp_replicate : 1;
  for (int32_t j = 0; j < us.n; j++) {
    int32_t i = issue_unit(&us, us.order, j, b->s->zero_prefetch); /* forward: order[j] = j */
    double bytes = 0;                /* units i..j resident when j's gather is issued */
    for (int32_t k = i; k <= j; k++) /* HSDP shard groups of one rank gather nothing */
      bytes += us.u[k].n / r > 1 ? us.u[k].elems * us.wbytes : 0;
    const psim_op_config *cfg = &b->s->ops[us.u[j].first_op];
    for (int32_t e = 0; e < cfg->n_devices; e++)
      if (bytes > win[cfg->devices[e]])
        win[cfg->devices[e]] = bytes;
  }
  for (int32_t d = 0; d < b->c->n_devices; d++)
    b->static_mem[3 * d] += win[d];
  psim_free(win);
  units_free(&us);
  return PSIM_OK;
}
