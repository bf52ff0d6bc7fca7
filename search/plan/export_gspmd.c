/* export_gspmd.c - plans as JAX/GSPMD meshes and PartitionSpecs (export.h,
 * docs/export.md): the plan's own mesh when every op follows it, else one
 * mesh inferred from the per-op configurations; refused with the first op
 * that no single mesh can express. */
#include "search/plan/export.h"
#include "search/plan/export_impl.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "search/plan/plan.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"
/* ---- gspmd ---- */

/* The export's view of a plan: one mesh (axes slowest first, device_ids
 * row-major) and, per op, the mesh axes each of its dims is split over. It is
 * the plan's own mesh when every op follows the plan's mesh + layout
 * (gs_from_plan_mesh), else a mesh inferred from the per-op configurations
 * (gs_infer). */
#define GS_MAX_AXES 20 /* prime factors of PSIM_CLUSTER_MAX_DEVICES (2^20), at most */

typedef struct gs_use {
  int8_t dim[GS_MAX_AXES];  /* op dim split over axis a; -1: replicated over a */
  int8_t rank[GS_MAX_AXES]; /* place of a among that dim's axes, 0 = major */
} gs_use;

typedef struct gs_layout {
  int32_t n_axes;
  int32_t size[GS_MAX_AXES];
  char name[GS_MAX_AXES][PSIM_MESH_NAME];
  int32_t n;           /* devices in the mesh */
  int32_t *device_ids; /* n devices, the mesh row-major (owned) */
  gs_use *use;         /* one per op (owned) */
} gs_layout;

static void gs_use_clear(gs_use *u) {
  memset(u->dim, -1, sizeof u->dim);
  memset(u->rank, 0, sizeof u->rank);
}

static void gs_layout_destroy(gs_layout *L) {
  psim_free(L->device_ids);
  psim_free(L->use);
  memset(L, 0, sizeof *L);
}

static psim_status gs_alloc(gs_layout *L, int32_t n_ops, const int32_t *devices, int32_t n) {
  L->n = n;
  L->device_ids = psim_malloc((size_t)(n > 0 ? n : 1) * sizeof *L->device_ids);
  L->use = psim_malloc((size_t)(n_ops > 0 ? n_ops : 1) * sizeof *L->use);
  if (!L->device_ids || !L->use)
    return psim_error(PSIM_ENOMEM, "export: out of memory");
  memcpy(L->device_ids, devices, (size_t)n * sizeof *devices);
  for (int32_t o = 0; o < n_ops; o++)
    gs_use_clear(&L->use[o]);
  return PSIM_OK;
}

static psim_status gspmd_refusals(const psim_strategy *s) {
  if (s->n_stages > 1 || s->virtual_stages > 1)
    return psim_error(PSIM_EFAILED,
                      "%d pipeline stages: GSPMD partition specs describe one SPMD "
                      "program over one mesh, not a pipeline",
                      s->n_stages * s->virtual_stages);
  if (s->zero_stage > 0)
    return psim_error(PSIM_EFAILED,
                      "ZeRO stage %d (optimizer state sharded over data-parallel "
                      "ranks) is not part of per-tensor partition specs",
                      s->zero_stage);
  if (s->sync == PSIM_SYNC_PS)
    return psim_error(PSIM_EFAILED, "parameter servers: GSPMD all-reduces gradients");
  if (psim_strategy_partial_recompute(s))
    return psim_error(PSIM_EFAILED,
                      "full recomputation by method %s of %d layers: \"remat\" names one "
                      "mode for every layer",
                      psim_recompute_method_name(s->recompute_method), (int)s->recompute_layers);
  return PSIM_OK;
}

/* *follows: every op is what the plan's mesh + layout give it (no per-op
 * overrides), so the plan's mesh and axis names are exported as they are. */
static psim_status gspmd_follows_mesh(const psim_model *m, const psim_strategy *s, bool *follows) {
  const psim_stage *st = &s->stages[0];
  *follows = s->mesh.n_axes == 0 || psim_mesh_size(&s->mesh) == st->n_devices;
  for (int32_t o = 0; o < m->n_ops && *follows; o++) {
    psim_op_config cfg;
    PSIM_CHECK(psim_mesh_op_config(&s->mesh, m, o, st->devices, st->n_devices, &cfg));
    cfg.stage = s->ops[o].stage;
    *follows = psim_export_config_equal(&cfg, &s->ops[o]);
    psim_op_config_destroy(&cfg);
  }
  return PSIM_OK;
}

/* The plan's mesh (one axis "replica" when it has none), each op dim on the
 * axis the layout maps it to (psim_mesh_map_axes). */
static psim_status gs_from_plan_mesh(const psim_model *m, const psim_strategy *s, gs_layout *L) {
  const psim_mesh *me = &s->mesh;
  const psim_stage *st = &s->stages[0];
  L->n_axes = me->n_axes > 0 ? me->n_axes : 1;
  for (int32_t a = 0; a < L->n_axes; a++) {
    snprintf(L->name[a], PSIM_MESH_NAME, "%s", me->n_axes > 0 ? me->axis[a] : "replica");
    L->size[a] = me->n_axes > 0 ? me->size[a] : st->n_devices;
  }
  PSIM_CHECK(gs_alloc(L, m->n_ops, st->devices, st->n_devices));
  for (int32_t o = 0; o < m->n_ops; o++) {
    int32_t dim_of_axis[PSIM_MESH_MAX_AXES];
    psim_mesh_map_axes(me, m, &m->ops[o], dim_of_axis);
    for (int32_t a = 0; a < me->n_axes; a++) {
      int32_t i = dim_of_axis[a];
      if (i >= 0 && me->size[a] > 1 && s->ops[o].degree[i] > 1)
        L->use[o].dim[a] = (int8_t)i;
    }
  }
  return PSIM_OK;
}

/* ---- gspmd: a mesh for per-op strategies ----
 *
 * A mesh over the devices the ops run on, given by a device order (its
 * row-major layout) and axis sizes, expresses op o when each split dim's
 * shard index, as a function of the device, is the mixed-radix number of the
 * device's coordinates on some of the axes (distinct axes per dim); the
 * remaining axes replicate the op. Any such mesh can be refined into one of
 * prime-sized axes over the same device order, so gs_infer tries, for each
 * candidate device order (the stage's, then each op's own device list), every
 * ordering of the prime factors of the device count (GS_MAX_ORDERS orders and
 * GS_MAX_TRIES meshes at most); the first that holds every op wins, and
 * gs_merge then fuses axes that every op uses together (data parallelism over
 * 128 devices: seven axes of 2 -> one of 128). The order of replicas within a
 * shard is not checked: it is not part of a PartitionSpec and does not change
 * what GSPMD computes. */
#define GS_MAX_ORDERS 64   /* device orders tried (the stage's, then ops') */
#define GS_MAX_TRIES  4096 /* candidate meshes (device order x factor ordering) tried */
#define GS_MEMO       8    /* recently matched placements reused */

typedef struct gs_search {
  const psim_model *m;
  const psim_strategy *s;
  int32_t n;                 /* devices the ops run on */
  int32_t *order;            /* those devices in the candidate order */
  int32_t *first;            /* those devices in the stage's order */
  int32_t *mpos;             /* cluster device -> position in order, -1 outside */
  int32_t *coord;            /* scratch: shard index per mesh position */
  int32_t k, f[GS_MAX_AXES]; /* the candidate mesh: k prime axes, slowest first */
  gs_use *use;               /* per op, on the candidate mesh */
  int32_t memo[GS_MEMO], memo_next;
  int32_t best, best_dim; /* the op the furthest candidate failed at, and its dim */
  int32_t tried;          /* candidate meshes tried */
} gs_search;

static psim_status gs_search_init(gs_search *g, const psim_plan_doc *d) {
  memset(g, 0, sizeof *g);
  g->m = &d->model;
  g->s = &d->strategy;
  g->best = -1;
  size_t nc = (size_t)(d->cluster.n_devices > 0 ? d->cluster.n_devices : 1);
  g->order = psim_malloc(nc * sizeof *g->order);
  g->first = psim_malloc(nc * sizeof *g->first);
  g->mpos = psim_malloc(nc * sizeof *g->mpos);
  g->coord = psim_malloc(nc * sizeof *g->coord);
  g->use = psim_malloc((size_t)(g->m->n_ops > 0 ? g->m->n_ops : 1) * sizeof *g->use);
  if (!g->order || !g->first || !g->mpos || !g->coord || !g->use)
    return psim_error(PSIM_ENOMEM, "export: out of memory");
  for (size_t i = 0; i < nc; i++)
    g->mpos[i] = -1;
  return PSIM_OK;
}

static void gs_search_destroy(gs_search *g) {
  psim_free(g->order);
  psim_free(g->first);
  psim_free(g->mpos);
  psim_free(g->coord);
  psim_free(g->use);
}

/* Appends device v to the mesh when an op uses it (mpos -2) and it is not in yet. */
static void gs_add_device(gs_search *g, int32_t v) {
  if (g->mpos[v] == -2) {
    g->mpos[v] = g->n;
    g->order[g->n++] = v;
  }
}

/* The mesh's devices: every device an op runs on, in the stage's order. Each
 * op must run on all of them: a GSPMD program runs every op on the whole mesh. */
static psim_status gs_devices(gs_search *g) {
  const psim_strategy *s = g->s;
  for (int32_t o = 0; o < g->m->n_ops; o++)
    for (int32_t j = 0; j < s->ops[o].n_devices; j++)
      g->mpos[s->ops[o].devices[j]] = -2;
  for (int32_t i = 0; i < s->stages[0].n_devices; i++)
    gs_add_device(g, s->stages[0].devices[i]);
  for (int32_t o = 0; o < g->m->n_ops; o++)
    for (int32_t j = 0; j < s->ops[o].n_devices; j++)
      gs_add_device(g, s->ops[o].devices[j]);
  for (int32_t o = 0; o < g->m->n_ops; o++)
    if (s->ops[o].n_devices != g->n)
      return psim_error(PSIM_EFAILED,
                        "op '%s' runs on %d of the %d devices the plan's ops use: a GSPMD "
                        "program runs every op on the whole mesh (an op may be replicated "
                        "over mesh axes, not leave devices out)",
                        g->m->ops[o].name, s->ops[o].n_devices, g->n);
  return PSIM_OK;
}

static void gs_set_order(gs_search *g, const int32_t *order) {
  if (order != g->order)
    memcpy(g->order, order, (size_t)g->n * sizeof *order);
  for (int32_t p = 0; p < g->n; p++)
    g->mpos[g->order[p]] = p;
}

/* Prime factors of n, ascending, into p; returns their number. */
static int32_t gs_factor(int32_t n, int32_t *p) {
  int32_t k = 0;
  for (int32_t q = 2; (int64_t)q * q <= n; q++)
    while (n % q == 0) {
      p[k++] = q;
      n /= q;
    }
  if (n > 1)
    p[k++] = n;
  return k;
}

/* The next distinct ordering of a[0..k-1] in lexicographic order; false after the last. */
static bool gs_next_perm(int32_t *a, int32_t k) {
  int32_t i = k - 2, j = k - 1;
  while (i >= 0 && a[i] >= a[i + 1])
    i--;
  if (i < 0)
    return false;
  while (a[j] <= a[i])
    j--;
  int32_t t = a[i];
  a[i] = a[j];
  a[j] = t;
  for (int32_t l = i + 1, r = k - 1; l < r; l++, r--) {
    t = a[l];
    a[l] = a[r];
    a[r] = t;
  }
  return true;
}

/* coord[p]: the shard index along op dim i of the device at mesh position p
 * (shards are row-major over the op's dims, replicas innermost). */
static void gs_coords(gs_search *g, const psim_op_config *c, int32_t n_dims, int32_t i) {
  int32_t stride = 1;
  for (int32_t t = i + 1; t < n_dims; t++)
    stride *= c->degree[t];
  for (int32_t j = 0; j < c->n_devices; j++)
    g->coord[g->mpos[c->devices[j]]] = (j / c->replicas / stride) % c->degree[i];
}

/* The axes with delta > 0, taken by increasing delta, must be the digits of a
 * mixed-radix number 0..deg-1: deltas 1, f_a, f_a * f_b, ..., none negative. */
static bool gs_chain(const gs_search *g, const int32_t *delta, int32_t deg) {
  int32_t want = 1, found = 0, positive = 0;
  for (int32_t a = 0; a < g->k; a++) {
    if (delta[a] < 0)
      return false;
    positive += delta[a] > 0;
  }
  for (bool more = true; more;) {
    more = false;
    for (int32_t a = 0; a < g->k && !more; a++)
      if (delta[a] == want) {
        want *= g->f[a];
        found++;
        more = true;
      }
  }
  return want == deg && found == positive;
}

/* Records in u the axes whose coordinates give g->coord as a mixed-radix
 * number (delta[a]: what one step along axis a adds) as op dim i's; false
 * when coord is no such function or an axis is taken by another dim. O(n k). */
static bool gs_match_dim(const gs_search *g, int32_t deg, int32_t i, gs_use *u) {
  int32_t delta[GS_MAX_AXES], stride = 1;
  for (int32_t a = g->k - 1; a >= 0; a--) {
    delta[a] = g->coord[stride] - g->coord[0];
    stride *= g->f[a];
  }
  if (g->coord[0] != 0 || !gs_chain(g, delta, deg))
    return false;
  for (int32_t p = 0; p < g->n; p++) {
    int32_t rem = p, sum = 0;
    for (int32_t a = g->k - 1; a >= 0; a--) {
      sum += rem % g->f[a] * delta[a];
      rem /= g->f[a];
    }
    if (sum != g->coord[p])
      return false;
  }
  for (int32_t a = 0; a < g->k; a++) {
    if (delta[a] == 0)
      continue;
    if (u->dim[a] >= 0)
      return false;
    u->dim[a] = (int8_t)i;
    for (int32_t b = 0; b < g->k; b++)
      u->rank[a] = (int8_t)(u->rank[a] + (delta[b] > delta[a]));
  }
  return true;
}

static bool gs_match_op(gs_search *g, int32_t o, int32_t *bad_dim) {
  const psim_op_config *c = &g->s->ops[o];
  const psim_op *op = &g->m->ops[o];
  gs_use_clear(&g->use[o]);
  for (int32_t i = 0; i < op->n_dims; i++) {
    if (c->degree[i] <= 1)
      continue;
    gs_coords(g, c, op->n_dims, i);
    if (!gs_match_dim(g, c->degree[i], i, &g->use[o])) {
      *bad_dim = i;
      return false;
    }
  }
  return true;
}

static bool same_placement(const psim_op_config *a, const psim_op_config *b) {
  return memcmp(a->degree, b->degree, sizeof a->degree) == 0 && a->replicas == b->replicas &&
         a->n_devices == b->n_devices &&
         memcmp(a->devices, b->devices, (size_t)a->n_devices * sizeof *a->devices) == 0;
}

/* Op o placed like one matched recently takes its axes (plans repeat a few
 * placements over many ops). */
static bool gs_memo(gs_search *g, int32_t o) {
  for (int32_t r = 0; r < GS_MEMO; r++) {
    int32_t q = g->memo[r];
    if (q >= 0 && same_placement(&g->s->ops[q], &g->s->ops[o])) {
      g->use[o] = g->use[q];
      return true;
    }
  }
  return false;
}

/* Matches every op, in order, on the candidate mesh; remembers how far the
 * furthest candidate got, for the message when none holds them all. */
static bool gs_try(gs_search *g) {
  g->tried++;
  for (int32_t r = 0; r < GS_MEMO; r++)
    g->memo[r] = -1;
  for (int32_t o = 0; o < g->m->n_ops; o++) {
    int32_t bad = -1;
    if (gs_memo(g, o))
      continue;
    if (!gs_match_op(g, o, &bad)) {
      if (o > g->best) {
        g->best = o;
        g->best_dim = bad;
      }
      return false;
    }
    g->memo[g->memo_next++ % GS_MEMO] = o;
  }
  return true;
}

/* Tries the orderings of the prime factors (primes ascending) over the
 * current device order. */
static bool gs_try_shapes(gs_search *g, const int32_t *primes, int32_t k) {
  memcpy(g->f, primes, (size_t)k * sizeof *primes);
  g->k = k;
  do {
    if (gs_try(g))
      return true;
  } while (g->tried < GS_MAX_TRIES && gs_next_perm(g->f, k));
  return false;
}

/* The stage's device order first, then each op's device list that is
 * neither that nor the order tried last. */
static bool gs_try_orders(gs_search *g, const int32_t *primes, int32_t k) {
  size_t bytes = (size_t)g->n * sizeof *g->order;
  memcpy(g->first, g->order, bytes);
  gs_set_order(g, g->order);
  if (gs_try_shapes(g, primes, k))
    return true;
  for (int32_t o = 0, orders = 1; o < g->m->n_ops && orders < GS_MAX_ORDERS; o++) {
    const int32_t *dev = g->s->ops[o].devices;
    if (g->tried >= GS_MAX_TRIES)
      return false;
    if (memcmp(dev, g->order, bytes) == 0 || memcmp(dev, g->first, bytes) == 0)
      continue;
    gs_set_order(g, dev);
    orders++;
    if (gs_try_shapes(g, primes, k))
      return true;
  }
  return false;
}

static psim_status gs_no_mesh(const gs_search *g) {
  int32_t o = g->best;
  const psim_op *op = &g->m->ops[o];
  int32_t i = g->best_dim >= 0 ? g->best_dim : 0;
  char cfg[192];
  psim_export_fmt_config(g->m, o, &g->s->ops[o], cfg, sizeof cfg);
  return psim_error(PSIM_EFAILED,
                    "op '%s' (%s) cannot be expressed on one device mesh with the ops before "
                    "it: no mesh over the plan's %d devices lays out its %d shards of dim '%s' "
                    "along mesh axes while holding theirs (%d candidate meshes tried)",
                    op->name, cfg, g->n, g->s->ops[o].degree[i], g->m->dims[op->dims[i].dim].name,
                    g->tried);
}

/* ---- gspmd: fusing and naming the inferred mesh's axes ---- */

/* Axes a and b can become one axis (a major) when every op splits the same
 * dim over both with b right after a, or splits neither. O(ops). */
static bool gs_mergeable(const gs_layout *L, int32_t n_ops, int32_t a, int32_t b) {
  for (int32_t o = 0; o < n_ops; o++) {
    const gs_use *u = &L->use[o];
    if (u->dim[a] != u->dim[b] || (u->dim[a] >= 0 && u->rank[b] != u->rank[a] + 1))
      return false;
  }
  return true;
}

static bool gs_find_pair(const gs_layout *L, int32_t n_ops, int32_t *a, int32_t *b) {
  for (*a = 0; *a < L->n_axes; (*a)++)
    for (*b = 0; *b < L->n_axes; (*b)++)
      if (*a != *b && gs_mergeable(L, n_ops, *a, *b))
        return true;
  return false;
}

/* Reorders the axes as perm (new axis t = old axis perm[t]); every device
 * keeps its coordinates, so device_ids is transposed. O(n * axes + ops * axes). */
static psim_status gs_transpose(gs_layout *L, int32_t n_ops, const int32_t *perm) {
  int32_t *ids = psim_malloc((size_t)(L->n > 0 ? L->n : 1) * sizeof *ids);
  int32_t stride[GS_MAX_AXES], size[GS_MAX_AXES], s = 1;
  if (!ids)
    return psim_error(PSIM_ENOMEM, "export: out of memory");
  for (int32_t a = L->n_axes - 1; a >= 0; a--) {
    stride[a] = s;
    s *= L->size[a];
  }
  for (int32_t q = 0; q < L->n; q++) {
    int32_t rem = q, p = 0;
    for (int32_t t = L->n_axes - 1; t >= 0; t--) {
      p += rem % L->size[perm[t]] * stride[perm[t]];
      rem /= L->size[perm[t]];
    }
    ids[q] = L->device_ids[p];
  }
  psim_free(L->device_ids);
  L->device_ids = ids;
  for (int32_t o = 0; o < n_ops; o++) {
    gs_use u = L->use[o];
    for (int32_t t = 0; t < L->n_axes; t++) {
      L->use[o].dim[t] = u.dim[perm[t]];
      L->use[o].rank[t] = u.rank[perm[t]];
    }
  }
  for (int32_t t = 0; t < L->n_axes; t++)
    size[t] = L->size[perm[t]];
  memcpy(L->size, size, (size_t)L->n_axes * sizeof *size);
  return PSIM_OK;
}

/* Fuses adjacent axes t (major) and t + 1 into one. */
static void gs_fuse_adjacent(gs_layout *L, int32_t n_ops, int32_t t) {
  L->size[t] *= L->size[t + 1];
  for (int32_t o = 0; o < n_ops; o++) {
    gs_use *u = &L->use[o];
    for (int32_t a = 0; a < L->n_axes && u->dim[t] >= 0; a++)
      if (u->dim[a] == u->dim[t] && u->rank[a] > u->rank[t + 1])
        u->rank[a]--;
    for (int32_t a = t + 1; a + 1 < L->n_axes; a++) {
      u->dim[a] = u->dim[a + 1];
      u->rank[a] = u->rank[a + 1];
    }
    u->dim[L->n_axes - 1] = -1;
  }
  for (int32_t a = t + 1; a + 1 < L->n_axes; a++)
    L->size[a] = L->size[a + 1];
  L->n_axes--;
}

/* Fuses axis pairs until none is left (b moves next to a, then they fuse). */
static psim_status gs_merge(gs_layout *L, int32_t n_ops) {
  int32_t a, b;
  while (gs_find_pair(L, n_ops, &a, &b)) {
    int32_t perm[GS_MAX_AXES], k = 0, at = 0;
    for (int32_t x = 0; x < L->n_axes; x++) {
      if (x == b)
        continue;
      if (x == a)
        at = k;
      perm[k++] = x;
      if (x == a)
        perm[k++] = b;
    }
    PSIM_CHECK(gs_transpose(L, n_ops, perm));
    gs_fuse_adjacent(L, n_ops, at);
  }
  return PSIM_OK;
}

/* The plan's own axis names when the inferred mesh is the plan's mesh (its
 * axes of size > 1, over the stage's devices in order). */
static void gs_plan_names(gs_layout *L, const psim_strategy *s) {
  const psim_mesh *me = &s->mesh;
  const psim_stage *st = &s->stages[0];
  int32_t t = 0, axis[GS_MAX_AXES];
  for (int32_t a = 0; a < me->n_axes; a++) {
    if (me->size[a] <= 1)
      continue;
    if (t >= L->n_axes || me->size[a] != L->size[t])
      return;
    axis[t++] = a;
  }
  if (t != L->n_axes || st->n_devices != L->n ||
      memcmp(st->devices, L->device_ids, (size_t)L->n * sizeof *L->device_ids) != 0)
    return;
  for (t = 0; t < L->n_axes; t++)
    snprintf(L->name[t], PSIM_MESH_NAME, "%s", me->axis[axis[t]]);
}

/* "dp" for an axis that only batch-role dims are split over, "tp" for one
 * that other dims are split over too, "replica" for one no op splits over;
 * the second of a kind is "dp_2", and so on. */
static void gs_name(gs_layout *L, const psim_model *m, const psim_strategy *s) {
  static const char *const kinds[3] = {"dp", "tp", "replica"};
  int32_t count[3] = {0, 0, 0};
  for (int32_t a = 0; a < L->n_axes; a++) {
    int32_t kind = 2;
    for (int32_t o = 0; o < m->n_ops && kind != 1; o++) {
      int32_t i = L->use[o].dim[a];
      if (i >= 0)
        kind = m->dims[m->ops[o].dims[i].dim].role == PSIM_ROLE_BATCH ? 0 : 1;
    }
    if (count[kind]++ == 0)
      snprintf(L->name[a], PSIM_MESH_NAME, "%s", kinds[kind]);
    else
      snprintf(L->name[a], PSIM_MESH_NAME, "%s_%d", kinds[kind], count[kind]);
  }
  gs_plan_names(L, s);
}

/* The fine mesh g found, fused and named, into L (takes g's per-op axes). */
static psim_status gs_finish(gs_search *g, gs_layout *L) {
  L->n = g->n;
  L->device_ids = g->order;
  L->use = g->use;
  g->order = NULL;
  g->use = NULL;
  L->n_axes = g->k;
  memcpy(L->size, g->f, (size_t)g->k * sizeof *g->f);
  PSIM_CHECK(gs_merge(L, g->m->n_ops));
  if (L->n_axes == 0) /* one device: a mesh needs an axis */
    L->size[L->n_axes++] = 1;
  gs_name(L, g->m, g->s);
  return PSIM_OK;
}

/* A mesh that expresses every op of a per-op strategy, or PSIM_EFAILED
 * naming the first op none can hold. O(orders * shapes * ops * devices * axes)
 * in the worst case; one candidate and O(distinct placements) ops in practice. */
static psim_status gs_infer(const psim_plan_doc *d, gs_layout *L) {
  gs_search g;
  psim_status st = gs_search_init(&g, d);
  if (st == PSIM_OK)
    st = gs_devices(&g);
  if (st == PSIM_OK) {
    int32_t primes[GS_MAX_AXES], k = gs_factor(g.n, primes);
    if (gs_try_orders(&g, primes, k))
      st = gs_finish(&g, L);
    else
      st = gs_no_mesh(&g);
  }
  gs_search_destroy(&g);
  return st;
}

/* ---- gspmd: the document ---- */

/* The op whose sharding a tensor takes: its producer, else its first consumer. */
static int32_t tensor_op(const psim_model *m, int32_t t) {
  if (m->tensors[t].producer >= 0)
    return m->tensors[t].producer;
  for (int32_t o = 0; o < m->n_ops; o++)
    for (int32_t i = 0; i < m->ops[o].n_in; i++)
      if (m->ops[o].in[i] == t)
        return o;
  return -1;
}

static bool add_to_array(cJSON *array, cJSON *x) {
  if (x && cJSON_AddItemToArray(array, x))
    return true;
  cJSON_Delete(x);
  return false;
}

static psim_status gspmd_mesh(const gs_layout *L, cJSON *root) {
  cJSON *mesh, *names, *shape, *ids;
  PSIM_CHECK(psim_json_add_object(root, "mesh", &mesh));
  PSIM_CHECK(psim_json_add_array(mesh, "axis_names", &names));
  PSIM_CHECK(psim_json_add_array(mesh, "shape", &shape));
  PSIM_CHECK(psim_json_add_array(mesh, "device_ids", &ids));
  for (int32_t a = 0; a < L->n_axes; a++)
    if (!add_to_array(names, cJSON_CreateString(L->name[a])) ||
        !add_to_array(shape, cJSON_CreateNumber(L->size[a])))
      return psim_error(PSIM_ENOMEM, "export: out of memory");
  for (int32_t i = 0; i < L->n; i++)
    if (!add_to_array(ids, cJSON_CreateNumber(L->device_ids[i])))
      return psim_error(PSIM_ENOMEM, "export: out of memory");
  return PSIM_OK;
}

/* Op o's dim i in a spec: null, the axis it is split over, or the list of
 * axes (major first) when it is split over several. */
static cJSON *gs_entry(const gs_layout *L, int32_t o, int32_t i) {
  /* The axes of dim i in rank order (major first). The ranks order the axes but need not be
   * 0..n-1 (merging axes leaves gaps: a plan with ep and cp crashed indexing by them). */
  int32_t axes[GS_MAX_AXES], n = 0;
  for (int32_t a = 0; a < L->n_axes; a++)
    if (L->use[o].dim[a] == i) {
      int32_t j = n++;
      for (; j > 0 && L->use[o].rank[axes[j - 1]] > L->use[o].rank[a]; j--)
        axes[j] = axes[j - 1];
      axes[j] = a;
    }
  if (n <= 1)
    return n == 0 ? cJSON_CreateNull() : cJSON_CreateString(L->name[axes[0]]);
  cJSON *list = cJSON_CreateArray();
  for (int32_t r = 0; list && r < n; r++)
    if (!add_to_array(list, cJSON_CreateString(L->name[axes[r]]))) {
      cJSON_Delete(list);
      return NULL;
    }
  return list;
}

/* One tensor's PartitionSpec: per tensor dim, the entry of the matching dim
 * of the op the tensor takes its sharding from. */
static psim_status gspmd_spec(const psim_model *m, const gs_layout *L, int32_t t, cJSON *specs) {
  const psim_tensor *tn = &m->tensors[t];
  int32_t o = tensor_op(m, t);
  cJSON *spec = cJSON_CreateArray();
  if (!spec || !cJSON_AddItemToObject(specs, tn->name, spec)) {
    cJSON_Delete(spec);
    return psim_error(PSIM_ENOMEM, "export: out of memory");
  }
  for (int32_t k = 0; k < tn->rank; k++) {
    int32_t i = o >= 0 ? psim_op_dim_index(&m->ops[o], tn->dims[k]) : -1;
    if (!add_to_array(spec, i >= 0 ? gs_entry(L, o, i) : cJSON_CreateNull()))
      return psim_error(PSIM_ENOMEM, "export: out of memory");
  }
  return PSIM_OK;
}

static psim_status gspmd_doc(const psim_plan_doc *d, const gs_layout *L, cJSON *root) {
  const psim_strategy *s = &d->strategy;
  cJSON *specs;
  PSIM_CHECK(gspmd_mesh(L, root));
  PSIM_CHECK(psim_json_add_object(root, "partition_specs", &specs));
  for (int32_t t = 0; t < d->model.n_tensors; t++)
    PSIM_CHECK(gspmd_spec(&d->model, L, t, specs));
  PSIM_CHECK(psim_json_add_number(root, "gradient_accumulation_steps", s->n_micro));
  return psim_json_add_string(root, "remat", psim_recompute_name(s->recompute));
}

/* The plan's mesh when every op follows it, else one inferred from the ops. */
static psim_status gs_layout_of(const psim_plan_doc *d, gs_layout *L) {
  bool follows;
  PSIM_CHECK(gspmd_follows_mesh(&d->model, &d->strategy, &follows));
  return follows ? gs_from_plan_mesh(&d->model, &d->strategy, L) : gs_infer(d, L);
}

psim_status psim_export_gspmd(const psim_plan_doc *d, char **text, size_t *len) {
  PSIM_CHECK(gspmd_refusals(&d->strategy));
  gs_layout L;
  memset(&L, 0, sizeof L);
  cJSON *root = NULL;
  psim_status st = gs_layout_of(d, &L);
  if (st == PSIM_OK && !(root = cJSON_CreateObject()))
    st = psim_error(PSIM_ENOMEM, "export: out of memory");
  if (st == PSIM_OK)
    st = gspmd_doc(d, &L, root);
  if (st == PSIM_OK)
    st = psim_export_json_text(root, text, len);
  cJSON_Delete(root);
  gs_layout_destroy(&L);
  return st;
}
