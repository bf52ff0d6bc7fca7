/* locals.c - which devices and op shards are simulated (folding), and their
 * task slots. */
#include "sim/builder/build_impl.h"
#include "sim/builder/routing.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/engine/collective.h"

/* Stage entries (stages x virtual stages) of s. */
static int32_t n_entries_of(const psim_strategy *s) {
  return s->n_stages * (s->virtual_stages > 0 ? s->virtual_stages : 1);
}

/* Indexes the entries and local shards of wide ops by device, for the
 * simulated devices only: psim_build_entry_on and psim_build_local_on are
 * asked about a local's device, never about a folded-away peer. Issue 24
 * item 9: indexing every entry of every op took ops x devices entries
 * (10.2 GB for tp 8 x dp 12,500) although folding simulates one device. */
psim_status psim_build_index_devices(psim_build *b) {
  for (int32_t o = 0; o < b->m->n_ops; o++) {
    const psim_op_config *cfg = &b->s->ops[o];
    int32_t nk = b->loc_first[o + 1] - b->loc_first[o];
    /* the simulated devices' entries are the locals', in the same (entry) order: the locals
     * are read, not every device of the op (issue 19) */
    for (int32_t k = 0; cfg->n_devices > PSIM_BUILD_SCAN_DEVICES && k < nk; k++) {
      const psim_op_local *loc = &b->locals[b->loc_first[o] + k];
      int32_t e = loc->shard * cfg->replicas + loc->replica;
      if (psim_bcache_get(b->where, (uint64_t)(uint32_t)o, (uint64_t)(uint32_t)loc->device) < 0)
        PSIM_CHECK(
            psim_bcache_put(b->where, (uint64_t)(uint32_t)o, (uint64_t)(uint32_t)loc->device, e));
    }
    for (int32_t k = 0; nk > PSIM_BUILD_SCAN_DEVICES && k < nk; k++) {
      uint64_t d = (uint64_t)(uint32_t)b->locals[b->loc_first[o] + k].device;
      if (psim_bcache_get(b->where, (uint64_t)(uint32_t)o | 1ull << 62, d) < 0)
        PSIM_CHECK(psim_bcache_put(b->where, (uint64_t)(uint32_t)o | 1ull << 62, d, k));
    }
  }
  return PSIM_OK;
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

/* Whether every dim op o splits is a dim of tensor t: its shards then hold
 * distinct regions of t. */
static bool splits_in(const psim_build *b, int32_t o, int32_t t) {
  const psim_op *op = &b->m->ops[o];
  int32_t gqa = psim_build_gqa_heads(b, o, t); /* GQA: query heads split the kv heads */
  for (int32_t i = 0; i < op->n_dims; i++)
    if (b->s->ops[o].degree[i] > 1 && i != gqa &&
        !psim_build_dim_in_tensor(&b->m->tensors[t], op->dims[i].dim))
      return false;
  return true;
}

/* Degree of op o along model dim d (1 when o does not iterate d). */
static int32_t degree_along(const psim_build *b, int32_t o, int32_t d) {
  int32_t i = psim_op_dim_index(&b->m->ops[o], d);
  return i < 0 ? 1 : b->s->ops[o].degree[i];
}

/* A pipeline edge x -t-> y folds when each sender serves one receiver at the
 * same position of the next stage: both ops hold distinct regions of t split
 * alike, with as many replicas, and entry e of x sits where entry e of y does
 * (pos: a device's position in its stage). Then peer k's transfer is the
 * representative's moved to position k. */
static bool pipeline_edge_aligned(const psim_build *b, int32_t x, int32_t y, int32_t t,
                                  const int32_t *pos) {
  const psim_op_config *cx = &b->s->ops[x], *cy = &b->s->ops[y];
  if (!splits_in(b, x, t) || !splits_in(b, y, t) || cx->replicas != cy->replicas)
    return false;
  const psim_tensor *ten = &b->m->tensors[t];
  for (int32_t j = 0; j < ten->rank; j++)
    if (degree_along(b, x, ten->dims[j]) != degree_along(b, y, ten->dims[j]))
      return false;
  for (int32_t e = 0; e < cx->n_devices; e++)
    if (pos[cx->devices[e]] != pos[cy->devices[e]])
      return false;
  return true;
}

/* Ops of one stage whose device lists a stage's last FOLD_TWIN_LISTS distinct lists are
 * compared with (a layer's ops repeat a few lists). */
#define FOLD_TWIN_LISTS 8

/* twin[o]: the first op of o's stage with o's device list (the same devices in the same
 * order), o itself when none before it has: what folding's checks read of an op's devices
 * is then read once per list, not once per op (issue 19: per op, 16,384 devices a stage at
 * 131,072 GPUs). A memcmp per op and earlier list, no hashing. */
static psim_status device_twins(const psim_build *b, int32_t *twin) {
  int32_t n_st = n_entries_of(b->s);
  int32_t *recent = psim_malloc(((size_t)n_st * FOLD_TWIN_LISTS + 1) * sizeof *recent);
  int32_t *n_recent = psim_calloc((size_t)n_st + 1, sizeof *n_recent);
  if (!recent || !n_recent) {
    psim_free(recent);
    psim_free(n_recent);
    return psim_error(PSIM_ENOMEM, "out of memory for folding");
  }
  for (int32_t o = 0; o < b->m->n_ops; o++) {
    const psim_op_config *cfg = &b->s->ops[o];
    int32_t st = cfg->stage;
    twin[o] = o;
    if (st < 0 || st >= n_st)
      continue;
    int32_t *mine = &recent[(size_t)st * FOLD_TWIN_LISTS];
    for (int32_t k = 0; k < n_recent[st] && twin[o] == o; k++) {
      const psim_op_config *c2 = &b->s->ops[mine[k]];
      if (c2->n_devices == cfg->n_devices &&
          (c2->devices == cfg->devices ||
           memcmp(c2->devices, cfg->devices, (size_t)cfg->n_devices * sizeof *cfg->devices) == 0))
        twin[o] = mine[k];
    }
    if (twin[o] == o) { /* a new list: remembered, the oldest dropped */
      int32_t n = n_recent[st] < FOLD_TWIN_LISTS ? n_recent[st]++ : FOLD_TWIN_LISTS - 1;
      memmove(mine + 1, mine, (size_t)n * sizeof *mine);
      mine[0] = o;
    }
  }
  psim_free(recent);
  psim_free(n_recent);
  return PSIM_OK;
}

/* Folding applies when every op is spread evenly over all of its stage's
 * devices and the stages are equally large. */
static bool can_fold(const psim_build *b, unsigned char *mark) {
  const psim_strategy *s = b->s;
  const psim_model *m = b->m;
  if (!psim_build_may_fold(b)) /* issue 8 (ps.c): parameter servers, stragglers, mixed types */
    return false;
  /* MoE: skewed routing loads expert-split devices unequally, which whole exchange blocks
   * keep (fold_blocks.c: each block holds every expert group) */
  for (int32_t o = 0; o < m->n_ops; o++) {
    const psim_op_config *cfg = &s->ops[o];
    const psim_stage *st = &s->stages[cfg->stage];
    if (cfg->n_devices != st->n_devices || st->n_devices != s->stages[0].n_devices)
      return false;
    for (int32_t i = 0; i < m->ops[o].n_dims; i++)
      if (psim_build_dim_size(b, m->ops[o].dims[i].dim) % cfg->degree[i] != 0)
        return false;
    /* a twin (same stage, same list) was found in the stage already */
    if (b->dev_twin[o] == o && !op_in_stage(cfg, st, mark))
      return false;
  }
  return true;
}

/* ---- folding: classes of symmetric positions --------------------------------
 * docs/simulator.md, "Folding symmetric devices". A stage's devices are
 * numbered by position; the peers at one position across the stages form a
 * column. Columns whose pipeline routes look alike (same hops, latency and
 * bottleneck bandwidth, both ways, at every boundary) are one class; one
 * column per class is simulated. Folding is declined when two columns would
 * hold a common link (their transfers would queue on it). */

/* Most classes folded (columns simulated per stage) before folding is declined. */
#define PSIM_FOLD_MAX_CLASSES 64

typedef struct fold_state {
  int32_t *pos;   /* per device: its position in its stage, or -1 */
  int32_t *pairs; /* stage entries (from, to) that pipeline edges join, two per pair */
  size_t n_pairs, cap_pairs;
  int32_t n_pos;  /* devices per stage */
  double *sig;    /* per position: 6 figures per pair (fold_signatures) */
  bool by_key;    /* routes searched once per route_key (large clusters) */
  psim_hmap keys; /* route_key -> index into key_sig */
  double *key_sig;
  size_t n_key, cap_key;
  int32_t *owner; /* per link: the position whose transfers hold it, or -1 */
  int32_t *role;  /* per link: which of them (route_figures' role), when owned */
  int32_t g;      /* positions per exchange block (fold_blocks.c), 1 without */
  uint8_t *xsrc;  /* g x g: member i of a block receives from member j */
  uint64_t *xsig; /* per block: its exchange routes' figures */
} fold_state;

static int32_t n_entries(const psim_build *b) {
  return n_entries_of(b->s);
}

/* Each device's position in its stage; false when a device has two. */
static bool stage_positions(const psim_build *b, int32_t *pos) {
  for (int32_t d = 0; d < b->c->n_devices; d++)
    pos[d] = -1;
  for (int32_t v = 0; v < n_entries(b); v++)
    for (int32_t k = 0; k < b->s->stages[v].n_devices; k++) {
      int32_t d = b->s->stages[v].devices[k];
      if (pos[d] >= 0 && pos[d] != k)
        return false;
      pos[d] = k;
    }
  return true;
}

/* The stage entries joined by pipeline edges, each pair once; *ok false when
 * an edge is not aligned (pipeline_edge_aligned). */
static psim_status pipeline_pairs(const psim_build *b, fold_state *f, bool *ok) {
  for (int32_t y = 0; y < b->m->n_ops && *ok; y++)
    for (int32_t i = 0; i < b->m->ops[y].n_in && *ok; i++) {
      int32_t t = b->m->ops[y].in[i], x = b->m->tensors[t].producer;
      int32_t from = x < 0 ? -1 : b->s->ops[x].stage, to = b->s->ops[y].stage;
      if (x < 0 || from == to)
        continue;
      *ok = pipeline_edge_aligned(b, x, y, t, f->pos);
      bool seen = false;
      for (size_t j = 0; j < f->n_pairs && !seen; j++)
        seen = f->pairs[2 * j] == from && f->pairs[2 * j + 1] == to;
      if (seen || !*ok)
        continue;
      PSIM_CHECK(PSIM_VEC_RESERVE(f->pairs, f->cap_pairs, 2 * f->n_pairs + 2));
      f->pairs[2 * f->n_pairs] = from;
      f->pairs[2 * f->n_pairs + 1] = to;
      f->n_pairs++;
    }
  return PSIM_OK;
}

/* The route src -> dst into sig (hops, latency, bottleneck bandwidth), its
 * held links marked as position p's in owner (the k-th held link of route
 * `route` as role route * 64 + k); *ok false when another position holds one
 * of them. */
/* What a route in a generated (hierarchical) cluster depends on: the two
 * devices' types and local ranks, and whether they share a node or a rack. */
static psim_hmap_key route_key(const psim_cluster *c, int32_t src, int32_t dst) {
  const psim_device *a = &c->devices[src], *z = &c->devices[dst];
  return (psim_hmap_key){(uint64_t)(uint32_t)a->local_rank << 32 | (uint32_t)z->local_rank,
                         (uint64_t)(uint32_t)a->type << 34 | (uint64_t)(uint32_t)z->type << 4 |
                             (uint64_t)(a->node == z->node) << 1 | (a->rack == z->rack)};
}

/* route_figures' memo for large clusters: true (sig filled) when a route of
 * the same key was searched. */
static psim_status figures_by_key(const psim_build *b, fold_state *f, int32_t src, int32_t dst,
                                  double *sig, bool *hit) {
  int32_t i;
  *hit = f->by_key && psim_hmap_find(&f->keys, route_key(b->c, src, dst), &i);
  if (*hit)
    memcpy(sig, &f->key_sig[3 * (size_t)i], 3 * sizeof *sig);
  return PSIM_OK;
}

static psim_status remember_key(const psim_build *b, fold_state *f, int32_t src, int32_t dst,
                                const double *sig) {
  if (!f->by_key)
    return PSIM_OK;
  PSIM_CHECK(PSIM_VEC_RESERVE(f->key_sig, f->cap_key, 3 * f->n_key + 3));
  memcpy(&f->key_sig[3 * f->n_key], sig, 3 * sizeof *sig);
  return psim_hmap_put(&f->keys, route_key(b->c, src, dst), (int32_t)f->n_key++);
}

static psim_status route_figures(psim_build *b, fold_state *f, int32_t src, int32_t dst, int32_t p,
                                 int32_t route, double *sig, bool *ok) {
  bool hit;
  PSIM_CHECK(figures_by_key(b, f, src, dst, sig, &hit));
  if (hit)
    return PSIM_OK;
  const int32_t *links;
  int32_t nl, held[64], nh;
  PSIM_CHECK(psim_cluster_route(b->c, src, dst, &links, &nl));
  psim_cluster_route_cost(b->c, links, nl, &sig[2], &sig[1]);
  sig[0] = nl;
  PSIM_CHECK(psim_p2p_held_links(b->c, src, dst, held, 64, &nh));
  for (int32_t j = 0; j < nh; j++) { /* one block's own links may be shared: all simulated */
    *ok = *ok && (f->owner[held[j]] < 0 || f->owner[held[j]] / f->g == p / f->g);
    if (f->owner[held[j]] < 0) {
      f->role[held[j]] = route * 64 + j;
      f->owner[held[j]] = p;
    }
  }
  return remember_key(b, f, src, dst, sig);
}

/* Each exchange block's routes (member j -> member i where i gathers from j, in every
 * stage) into xsig[block], their held links owned by the receiving position. */
static psim_status exchange_signatures(psim_build *b, fold_state *f, bool *ok) {
  int32_t g = f->g, n_blocks = f->n_pos / g, base = (int32_t)(2 * f->n_pairs);
  if ((double)n_entries(b) * g * g + base > (double)(INT32_MAX / 64))
    return (*ok = false), PSIM_OK;
  f->xsig = psim_calloc((size_t)n_blocks + 1, sizeof *f->xsig);
  if (!f->xsig)
    return psim_error(PSIM_ENOMEM, "out of memory for folding's classes");
  for (int32_t a = 0; a < n_blocks && *ok; a++)
    for (int32_t v = 0; v < n_entries(b) && *ok; v++)
      for (int32_t i = 0; i < g && *ok; i++)
        for (int32_t j = 0; j < g && *ok; j++) {
          if (!f->xsrc[(size_t)i * (size_t)g + (size_t)j])
            continue;
          const psim_stage *st = &b->s->stages[v];
          double sig[3];
          uint64_t bits[3];
          PSIM_CHECK(route_figures(b, f, st->devices[a * g + j], st->devices[a * g + i], a * g + i,
                                   base + (v * g + i) * g + j, sig, ok));
          memcpy(bits, sig, sizeof bits);
          for (int k = 0; k < 3; k++)
            f->xsig[a] = psim_hmap_mix64(f->xsig[a] ^ bits[k]);
        }
  return PSIM_OK;
}

/* Every position's signature: for each pair, its route forward and back. */
static psim_status fold_signatures(psim_build *b, fold_state *f, bool *ok) {
  size_t per = 6 * f->n_pairs;
  f->sig = psim_malloc(((size_t)f->n_pos * per + 1) * sizeof *f->sig);
  f->owner = psim_malloc(((size_t)b->c->n_links + 1) * sizeof *f->owner);
  f->role = psim_malloc(((size_t)b->c->n_links + 1) * sizeof *f->role);
  if (!f->sig || !f->owner || !f->role)
    return psim_error(PSIM_ENOMEM, "out of memory for folding's classes");
  for (int32_t l = 0; l < b->c->n_links; l++)
    f->owner[l] = -1;
  double sources = (double)f->n_pos * n_entries(b);
  f->by_key = sources * (double)(b->c->n_vertices + b->c->n_links) > PSIM_FOLD_ROUTE_BUDGET;
  /* by source device: the routes from one source cost one search (sim/ir/route.c) */
  for (int32_t p = 0; p < f->n_pos && *ok; p++)
    for (int32_t v = 0; v < n_entries(b) && *ok; v++)
      for (size_t j = 0; j < f->n_pairs && *ok; j++) {
        int32_t from = f->pairs[2 * j], to = f->pairs[2 * j + 1], dir = v == to;
        if (v != from && v != to)
          continue;
        int32_t src = b->s->stages[v].devices[p], dst = b->s->stages[dir ? from : to].devices[p];
        double *sig = &f->sig[(size_t)p * per + 6 * j + 3 * (size_t)dir];
        PSIM_CHECK(route_figures(b, f, src, dst, p, (int32_t)(2 * j) + dir, sig, ok));
      }
  return f->g > 1 ? exchange_signatures(b, f, ok) : PSIM_OK;
}

/* Whether blocks r and a (of g positions; a column when g is 1) are one class: the same
 * pipeline routes and taint at each offset, the same exchange routes. */
static bool same_class(const psim_build *b, const fold_state *f, int32_t r, int32_t a) {
  size_t per = 6 * f->n_pairs, g = (size_t)f->g;
  if (memcmp(&f->sig[(size_t)r * g * per], &f->sig[(size_t)a * g * per],
             g * per * sizeof *f->sig) != 0)
    return false;
  if (f->xsig && f->xsig[r] != f->xsig[a])
    return false;
  for (size_t i = 0; b->fold_taint && i < g; i++)
    if (b->fold_taint[(size_t)r * g + i] != b->fold_taint[(size_t)a * g + i])
      return false;
  return true;
}

/* Marks one column per class simulated and maps every device to its class's
 * column (rep_of); *ok false over PSIM_FOLD_MAX_CLASSES classes. */
static void fold_mark(psim_build *b, const fold_state *f, bool *ok) {
  int32_t reps[PSIM_FOLD_MAX_CLASSES], n_reps = 0, g = f->g;
  for (int32_t a = 0; a < f->n_pos / g && *ok; a++) {
    int32_t r = 0;
    while (r < n_reps && !same_class(b, f, reps[r], a))
      r++;
    if (r == n_reps && n_reps == PSIM_FOLD_MAX_CLASSES) {
      *ok = false;
      break;
    }
    if (r == n_reps)
      reps[n_reps++] = a;
    for (int32_t v = 0; v < n_entries(b); v++)
      for (int32_t i = 0; i < g; i++) {
        const psim_stage *st = &b->s->stages[v];
        b->rep_of[st->devices[a * g + i]] = st->devices[reps[r] * g + i];
        b->simulated[st->devices[a * g + i]] = reps[r] == a;
      }
  }
}

/* Whether the shards of op `to` find their region of tensor t on their own
 * device in op from's layout all alike, or all not (ent: per device, -1,
 * scratch left so): a representative that reads locally while its peers
 * fetch from each other would not see their transfers. Reductions (from's
 * view of t is a partial sum) are collectives of symmetric groups. */
static bool locality_uniform(const psim_build *b, int32_t from, int32_t to, int32_t t, int dir,
                             int32_t *ent) {
  const psim_op_config *cf = &b->s->ops[from], *ct = &b->s->ops[to];
  if (psim_build_partial_mask(b, from, t, dir))
    return true;
  const psim_tensor *ten = &b->m->tensors[t];
  psim_region_plan made[2];
  psim_build_region_plan_init(b, from, t, &made[0]);
  psim_build_region_plan_init(b, to, t, &made[1]);
  /* copies whose address never leaves this function: the compiler keeps their fields in
   * registers across the loop's calls (on the plans themselves, which the calls above saw,
   * the loop reloaded them per shard: 0.03e9 instructions at 131,072 GPUs) */
  const psim_region_plan pf = made[0], pt = made[1];
  for (int32_t e = 0; e < cf->n_devices; e++)
    ent[cf->devices[e]] = e;
  int local = -1;
  bool ok = true;
  psim_region rf, rt;
  psim_build_plan_fixed(&pf, &rf);
  psim_build_plan_fixed(&pt, &rt);
  for (int32_t e = 0; e < ct->n_devices && ok; e++) {
    int32_t ef = ent[ct->devices[e]];
    psim_build_plan_region(b, &pt, to, e / ct->replicas, t, &rt);
    if (ef >= 0)
      psim_build_plan_region(b, &pf, from, ef / cf->replicas, t, &rf);
    int here = ef >= 0 && psim_build_covers(&rf, &rt, ten->rank);
    ok = local < 0 || here == local;
    local = here;
  }
  for (int32_t e = 0; e < cf->n_devices; e++)
    ent[cf->devices[e]] = -1;
  psim_build_region_plan_free(&made[0]);
  psim_build_region_plan_free(&made[1]);
  return ok;
}

/* A hash of what locality_uniform reads of op o and tensor t: t's extents,
 * the op's degree along each of its dims and where t has it, its replicas
 * and device list (hash_dev[o]). Edges of every layer repeat a few of them. The
 * list is hashed by its devices' positions in the stage: locality_uniform pairs
 * the entries of two ops of one stage on one device, and within a stage device and
 * position are one-to-one (stage_positions), so the stages' alike lists share a key. */
static uint64_t layout_hash(const psim_build *b, int32_t o, int32_t t, const uint64_t *hash_dev) {
  const psim_op *op = &b->m->ops[o];
  const psim_tensor *ten = &b->m->tensors[t];
  uint64_t h = psim_hmap_mix64(hash_dev[o] ^ (uint64_t)(uint32_t)b->s->ops[o].replicas << 8 ^
                               (uint64_t)(uint32_t)ten->rank);
  for (int32_t j = 0; j < ten->rank; j++)
    h = psim_hmap_mix64(h ^ (uint64_t)psim_build_dim_size(b, ten->dims[j]));
  for (int32_t i = 0; i < op->n_dims; i++) {
    int32_t d = op->dims[i].dim, j = 0;
    while (j < b->m->tensors[t].rank && b->m->tensors[t].dims[j] != d)
      j++;
    h = psim_hmap_mix64(h ^ (uint64_t)(uint32_t)b->s->ops[o].degree[i] << 20 ^
                        (uint64_t)(uint32_t)j << 8 ^ (uint64_t)(uint32_t)i ^
                        (uint64_t)psim_build_dim_size(b, d) << 32);
  }
  return h;
}

/* locality_uniform of the edge x -t-> y both ways, once per layout pair. */
static psim_status edge_uniform(const psim_build *b, int32_t x, int32_t y, int32_t t,
                                const uint64_t *hash_dev, psim_hmap *seen, int32_t *ent, bool *ok) {
  psim_hmap_key k = {layout_hash(b, x, t, hash_dev), layout_hash(b, y, t, hash_dev)};
  int32_t v;
  if (psim_hmap_find(seen, k, &v))
    return PSIM_OK; /* a failure stops the scan: a key seen is a key that passed */
  *ok = locality_uniform(b, x, y, t, PSIM_DIR_FWD, ent) &&
        locality_uniform(b, y, x, t, PSIM_DIR_BWD, ent);
  return psim_hmap_put(seen, k, 1);
}

/* locality_uniform for every edge inside a stage, both ways (pos: stage_positions). */
static psim_status stage_edges_uniform(const psim_build *b, const int32_t *pos, bool *ok) {
  int32_t *ent = psim_malloc(((size_t)b->c->n_devices + 1) * sizeof *ent);
  uint64_t *hash_dev = psim_malloc(((size_t)b->m->n_ops + 1) * sizeof *hash_dev);
  psim_hmap seen;
  psim_hmap_init(&seen);
  psim_status st = ent && hash_dev ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory for folding");
  for (int32_t d = 0; st == PSIM_OK && d < b->c->n_devices; d++)
    ent[d] = -1;
  for (int32_t o = 0; st == PSIM_OK && o < b->m->n_ops; o++) {
    if (b->dev_twin[o] != o) { /* the same list (device_twins): the same hash */
      hash_dev[o] = hash_dev[b->dev_twin[o]];
      continue;
    }
    hash_dev[o] = (uint64_t)(uint32_t)b->s->ops[o].n_devices;
    for (int32_t e = 0; e < b->s->ops[o].n_devices; e++)
      hash_dev[o] = psim_hmap_mix64(hash_dev[o] ^ (uint64_t)(uint32_t)pos[b->s->ops[o].devices[e]]);
  }
  for (int32_t y = 0; st == PSIM_OK && y < b->m->n_ops && *ok; y++)
    for (int32_t i = 0; st == PSIM_OK && i < b->m->ops[y].n_in && *ok; i++) {
      int32_t t = b->m->ops[y].in[i], x = b->m->tensors[t].producer;
      if (x >= 0 && b->s->ops[x].stage == b->s->ops[y].stage)
        st = edge_uniform(b, x, y, t, hash_dev, &seen, ent, ok);
    }
  psim_hmap_destroy(&seen);
  psim_free(ent);
  psim_free(hash_dev);
  return st;
}

/* Chooses the simulated columns of a foldable strategy; *ok false (nothing
 * marked) when the columns are not symmetric. */
static psim_status fold_columns(psim_build *b, bool *ok) {
  fold_state f = {0};
  f.n_pos = b->s->stages[0].n_devices;
  f.pos = psim_malloc(((size_t)b->c->n_devices + 1) * sizeof *f.pos);
  psim_status st = f.pos ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory for folding");
  *ok = st == PSIM_OK && stage_positions(b, f.pos);
  f.g = 1;
  if (*ok && psim_build_fold_needs_blocks(b)) { /* MoE all-to-all: whole exchange blocks */
    st = psim_build_fold_blocks(b, f.pos, f.n_pos, &f.g, &f.xsrc);
    *ok = st == PSIM_OK && f.g > 0;
  } else if (*ok)
    st = stage_edges_uniform(b, f.pos, ok);
  if (st == PSIM_OK && *ok)
    st = pipeline_pairs(b, &f, ok);
  if (st == PSIM_OK && *ok)
    st = fold_signatures(b, &f, ok);
  if (st == PSIM_OK && *ok)
    fold_mark(b, &f, ok);
  if (st != PSIM_OK || !*ok)
    for (int32_t d = 0; d < b->c->n_devices; d++) {
      b->simulated[d] = 0;
      b->rep_of[d] = d;
    }
  b->fold_by_key = f.by_key;
  b->fold_block = f.g > 0 ? f.g : 1;
  b->fold_pos = f.pos;     /* kept for psim_build_fold_check_coll */
  b->fold_owner = f.owner; /* ... and psim_build_fold_check_graph */
  b->fold_role = f.role;
  psim_free(f.pairs);
  psim_free(f.xsrc);
  psim_free(f.xsig);
  psim_free(f.sig);
  psim_free(f.key_sig);
  psim_hmap_destroy(&f.keys);
  return st;
}

psim_status psim_build_choose_simulated(psim_build *b) {
  int32_t nd = b->c->n_devices;
  b->simulated = psim_calloc((size_t)nd + 1, 1);
  b->rep_of = psim_malloc(((size_t)nd + 1) * sizeof *b->rep_of);
  if (!b->simulated || !b->rep_of)
    return psim_error(PSIM_ENOMEM, "out of memory choosing simulated devices");
  for (int32_t d = 0; d < nd; d++)
    b->rep_of[d] = d;
  if (b->o->fold) {
    b->dev_twin = psim_malloc(((size_t)b->m->n_ops + 1) * sizeof *b->dev_twin);
    if (!b->dev_twin)
      return psim_error(PSIM_ENOMEM, "out of memory choosing simulated devices");
    PSIM_CHECK(device_twins(b, b->dev_twin));
  }
  b->folded = b->o->fold && can_fold(b, b->simulated); /* simulated: zeroed scratch here */
  if (b->folded)
    PSIM_CHECK(fold_columns(b, &b->folded));
  if (!b->folded) {
    for (int32_t o = 0; o < b->m->n_ops; o++)
      for (int32_t e = 0; e < b->s->ops[o].n_devices; e++)
        b->simulated[b->s->ops[o].devices[e]] = 1;
  }
  for (int32_t d = 0; d < nd; d++)
    b->n_simulated += b->simulated[d];
  return PSIM_OK;
}

/* Bytes of the per-(op, weight, device) shares of the static memory model
 * (memory.c: one psim_weight_share per weight input of an op and device of
 * the op, simulated or not), counted twice: the vector grows by doubling.
 * Issue 24 item 9: 1.3 GB for GPT 1.3B on 100,000 devices, not in the
 * estimate before. */
static double weight_share_bytes(const psim_build *b) {
  double n = 0;
  for (int32_t o = 0; o < b->m->n_ops; o++) {
    const psim_op *op = &b->m->ops[o];
    for (int32_t i = 0; i < op->n_in; i++)
      if (b->m->tensors[op->in[i]].kind == PSIM_TENSOR_WEIGHT)
        n += b->s->ops[o].n_devices;
  }
  return 2 * n * (double)sizeof(psim_weight_share);
}

/* Refuses graphs over the task or memory limits (psim_sim_options.max_tasks,
 * .max_graph_bytes) from the shard count alone, before anything per shard is
 * allocated: shards x micro-batches x 3 passes compute tasks, each with its
 * share of communication and host tasks at PSIM_GRAPH_BYTES_PER_TASK, plus
 * the weight shares of the memory model. */
static psim_status check_limits(const psim_build *b, size_t shards) {
  double tasks = (double)shards * (double)b->n_micro * 3;
  if (b->o->max_tasks > 0 && tasks > (double)b->o->max_tasks)
    return psim_error(PSIM_ELIMIT,
                      "the task graph would hold about %.3g compute tasks, over the limit of "
                      "%lld (raise it with --max-tasks)",
                      tasks, (long long)b->o->max_tasks);
  double shares = weight_share_bytes(b), bytes = tasks * PSIM_GRAPH_BYTES_PER_TASK + shares;
  if (b->o->max_graph_bytes > 0 && bytes > (double)b->o->max_graph_bytes)
    return psim_error(PSIM_ELIMIT,
                      "the task graph would take about %.3g GB of memory (%.3g compute tasks, "
                      "%.3g GB for the per-device weight shares), over the limit of %.3g GB (raise "
                      "it with --max-memory)",
                      bytes / 1e9, tasks, shares / 1e9, (double)b->o->max_graph_bytes / 1e9);
  return PSIM_OK;
}

/* The task slots per (local, micro-batch) of every pass, and the shards' costs, for k locals.
 * Weight-gradient slots only where the schedule splits the backward. */
static psim_status alloc_task_slots(psim_build *b, int32_t k) {
  size_t slots = (size_t)k * (size_t)b->n_micro, n = slots ? slots : 1;
  bool split = psim_schedule_splits_backward(b->s->schedule);
  b->fwd = psim_malloc(n * sizeof *b->fwd);
  b->bwd = psim_malloc(n * sizeof *b->bwd);
  b->rec = psim_malloc(n * sizeof *b->rec);
  b->wgt = split ? psim_malloc(n * sizeof *b->wgt) : NULL;
  if (!b->fwd || !b->bwd || !b->rec || (split && !b->wgt))
    return psim_error(PSIM_ENOMEM, "out of memory for %zu task slots", slots);
  memset(b->rec, 0xff, n * sizeof *b->rec);
  if (split)
    memset(b->wgt, 0xff, n * sizeof *b->wgt);
  b->costs = psim_calloc((size_t)k * 3 + 1, sizeof *b->costs);
  if (!b->costs)
    return psim_error(PSIM_ENOMEM, "out of memory for %d op shards", (int)k);
  return PSIM_OK;
}

psim_status psim_build_make_locals(psim_build *b) {
  const psim_model *m = b->m;
  size_t total = 0;
  int32_t *count = psim_malloc(((size_t)m->n_ops + 1) * sizeof *count);
  if (!count)
    return psim_error(PSIM_ENOMEM, "out of memory for op shards");
  for (int32_t o = 0; o < m->n_ops; o++) {
    int32_t tw = b->dev_twin ? b->dev_twin[o] : o; /* the same list: the same devices simulated */
    count[o] = 0;
    if (tw != o)
      count[o] = count[tw];
    else
      for (int32_t e = 0; e < b->s->ops[o].n_devices; e++)
        count[o] += b->simulated[b->s->ops[o].devices[e]];
    total += (size_t)count[o];
  }
  psim_free(count);
  PSIM_CHECK(check_limits(b, total)); /* issue 9: before any per-shard allocation */
  b->loc_first = psim_calloc((size_t)m->n_ops + 1, sizeof *b->loc_first);
  b->locals = psim_calloc(total ? total : 1, sizeof *b->locals);
  if (!b->loc_first || !b->locals)
    return psim_error(PSIM_ENOMEM, "out of memory for %zu op shards", total);
  int32_t k = 0;
  for (int32_t o = 0; o < m->n_ops; o++) {
    const psim_op_config *cfg = &b->s->ops[o];
    b->loc_first[o] = k;
    int32_t tw = b->dev_twin ? b->dev_twin[o] : o;
    if (tw != o) { /* the twin's simulated entries (its list is o's), split by o's replicas */
      const psim_op_config *ct = &b->s->ops[tw];
      for (int32_t j = b->loc_first[tw]; j < b->loc_first[tw + 1]; j++) {
        int32_t e = b->locals[j].shard * ct->replicas + b->locals[j].replica;
        b->locals[k].device = b->locals[j].device;
        b->locals[k].shard = e / cfg->replicas;
        b->locals[k].replica = e % cfg->replicas;
        k++;
      }
      continue;
    }
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
  PSIM_CHECK(alloc_task_slots(b, k));
  return psim_build_index_devices(b);
}
