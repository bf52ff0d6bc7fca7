/* space.c - per-op SOAP configuration spaces: degree vectors x placements. */
#include "search/mcmc/space.h"

#include <math.h>
#include <string.h>

#include "sim/core/alloc.h"

void psim_space_options_init(psim_space_options *o) {
  memset(o, 0, sizeof *o);
  o->arbitrary_sets = true;
  o->uneven = true;
  o->max_degree = 0;
}

uint64_t psim_space_rand(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t psim_space_rand_below(uint64_t *state, uint64_t n) {
  /* rejection sampling keeps it uniform */
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do
    x = psim_space_rand(state);
  while (x >= limit);
  return x % n;
}

/* Binomial coefficient (n <= 64 here; exact in double below 2^53). */
static int64_t choose(int32_t n, int32_t k) {
  if (k < 0 || k > n)
    return 0;
  double r = 1;
  for (int32_t i = 1; i <= k; i++)
    r = r * (double)(n - k + i) / (double)i;
  return (int64_t)llround(r);
}

/* ---- placements ------------------------------------------------------------ */

/* Nodes spanned by an aligned block of p devices when q of the stage's
 * devices sit on each node (p > q). */
static int32_t block_nodes(int32_t p, int32_t q) {
  return (p + q - 1) / q;
}

static int64_t placements(const psim_space *sp, int32_t st, int32_t p) {
  int32_t n = sp->stage_n[st], q = sp->stage_node_n[st];
  if (p < 1 || p > n)
    return 0;
  if (sp->arbitrary[st])
    return choose(n, p);
  if (q == 0)
    return n / p;
  return p <= q ? (int64_t)(n / q) * (q / p) : (n / q) / block_nodes(p, q);
}

/* Writes placement `idx` of size p of stage st (positions in the stage's
 * device list, increasing) into pos. Arbitrary sets are unranked in
 * lexicographic order of combinations. */
static void placement_positions(const psim_space *sp, int32_t st, int32_t p, int64_t idx,
                                int32_t *pos) {
  int32_t n = sp->stage_n[st], q = sp->stage_node_n[st];
  if (!sp->arbitrary[st]) {
    int32_t first = (int32_t)idx * p; /* no topology: blocks of the list */
    if (q > 0 && p <= q)
      first = (int32_t)(idx / (q / p)) * q + (int32_t)(idx % (q / p)) * p;
    else if (q > 0)
      first = (int32_t)idx * block_nodes(p, q) * q;
    for (int32_t i = 0; i < p; i++)
      pos[i] = first + i;
    return;
  }
  int32_t next = 0;
  for (int32_t i = 0; i < p; i++) {
    for (int32_t v = next;; v++) {
      int64_t with_v = choose(n - v - 1, p - i - 1); /* sets whose i-th element is v */
      if (idx < with_v) {
        pos[i] = v;
        next = v + 1;
        break;
      }
      idx -= with_v;
    }
  }
}

/* Makes cfg a placement of p devices, one shard each, in a list of its own (copy on write:
 * the current strategy and the delta's snapshot may share the old one); *d to be filled. */
static psim_status resize_devices(psim_op_config *cfg, int32_t p, int32_t **d) {
  PSIM_CHECK(psim_op_config_writable(cfg, p, d));
  cfg->n_devices = p;
  cfg->replicas = 1;
  return PSIM_OK;
}

static psim_status set_devices(const psim_space *sp, int32_t st, int32_t p, int64_t idx,
                               psim_op_config *cfg) {
  int32_t pos[4096], *d;
  if (p > 4096)
    return psim_error(PSIM_ELIMIT, "a placement of %d devices is over the limit of 4096", p);
  placement_positions(sp, st, p, idx, pos);
  PSIM_CHECK(resize_devices(cfg, p, &d));
  for (int32_t i = 0; i < p; i++)
    d[i] = sp->stage_devices[st][pos[i]];
  return PSIM_OK;
}

static bool in_stage(const psim_space *sp, int32_t st, int32_t device) {
  for (int32_t k = 0; k < sp->stage_n[st]; k++)
    if (sp->stage_devices[st][k] == device)
      return true;
  return false;
}

/* Placements of p devices open to op so: its fixed device set (--fix
 * devices without split) when it has one, else the stage's. */
static int64_t op_placements(const psim_space *sp, const psim_space_op *so, int32_t p) {
  if (so->fixed_devices)
    return p == so->n_fixed_devices ? 1 : 0;
  return placements(sp, so->stage, p);
}

static psim_status op_set_devices(const psim_space *sp, const psim_space_op *so, int32_t p,
                                  int64_t idx, psim_op_config *cfg) {
  if (!so->fixed_devices)
    return set_devices(sp, so->stage, p, idx, cfg);
  int32_t *d;
  PSIM_CHECK(resize_devices(cfg, p, &d));
  memcpy(d, so->fixed_devices, sizeof(int32_t) * (size_t)p);
  return PSIM_OK;
}

/* Index of the first config of every degree vector of op so (first[]). */
static void index_configs(const psim_space *sp, psim_space_op *so) {
  so->first[0] = 0;
  for (int32_t k = 0; k < so->n_splits; k++)
    so->first[k + 1] = so->first[k] + op_placements(sp, so, so->splits[k].n_devices);
}

/* ---- degree vectors -------------------------------------------------------- */

static bool dim_splittable(const psim_op_dim *d) {
  return d->use == PSIM_USE_OUTPUT || d->use == PSIM_USE_CONTRACTED || d->use == PSIM_USE_WINDOW;
}

typedef struct enum_ctx {
  psim_space *sp;
  psim_space_op *so;
  const psim_op *op;
  int64_t ext[PSIM_MAX_OP_DIMS];
  int32_t limit; /* stage devices */
  psim_space_split cur;
  size_t cap;
} enum_ctx;

static bool degree_ok(const enum_ctx *e, int32_t i, int32_t d) {
  int32_t fd = e->so->fixed_degree[i];
  if (fd > 0)
    return d == fd;
  if (d > e->ext[i])
    return false;
  if (e->sp->opt.max_degree > 0 && d > e->sp->opt.max_degree)
    return false;
  return e->sp->opt.uneven || e->ext[i] % d == 0;
}

/* Depth-first over the splittable dims, product bounded by the stage. */
static psim_status enum_splits(enum_ctx *e, int32_t k, int32_t prod) {
  psim_space_op *so = e->so;
  if (k == so->n_splittable) {
    if (placements(e->sp, so->stage, prod) <= 0)
      return PSIM_OK;
    PSIM_CHECK(PSIM_VEC_RESERVE(so->splits, e->cap, (size_t)so->n_splits + 1));
    e->cur.n_devices = prod;
    so->splits[so->n_splits++] = e->cur;
    return PSIM_OK;
  }
  int32_t i = so->splittable[k];
  for (int32_t d = 1; (int64_t)prod * d <= e->limit; d++) {
    if (!degree_ok(e, i, d))
      continue;
    e->cur.degree[i] = d;
    PSIM_CHECK(enum_splits(e, k + 1, prod * d));
  }
  e->cur.degree[i] = 1;
  return PSIM_OK;
}

/* (Re)computes op o's degree vectors and config index. */
static psim_status build_op(psim_space *sp, int32_t o, const psim_strategy *s) {
  psim_space_op *so = &sp->ops[o];
  enum_ctx e = {.sp = sp, .so = so, .op = &sp->m->ops[o], .limit = sp->stage_n[so->stage]};
  for (int32_t i = 0; i < e.op->n_dims; i++) {
    e.ext[i] = psim_strategy_dim_extent(s, sp->m, e.op->dims[i].dim);
    e.cur.degree[i] = 1;
  }
  psim_free(so->splits);
  psim_free(so->first);
  so->splits = NULL;
  so->first = NULL;
  so->n_splits = 0;
  PSIM_CHECK(enum_splits(&e, 0, 1));
  so->first = psim_malloc(sizeof *so->first * ((size_t)so->n_splits + 1));
  if (!so->first)
    return psim_error(PSIM_ENOMEM, "out of memory for the configuration space");
  index_configs(sp, so);
  return PSIM_OK;
}

/* ---- construction ---------------------------------------------------------- */

/* Devices per node in stage st's list when the list is whole nodes' worth of
 * devices: q of them on each node it touches, in one contiguous run per node;
 * else 0 (blocks then ignore nodes). */
static int32_t stage_node_devices(const psim_space *sp, int32_t st) {
  const psim_cluster *c = sp->opt.cluster;
  const int32_t *d = sp->stage_devices[st];
  int32_t n = sp->stage_n[st], q = 1;
  bool *seen = c && n > 0 ? psim_calloc((size_t)c->n_nodes + 1, sizeof *seen) : NULL;
  if (!seen)
    return 0; /* no cluster, or out of memory: plain blocks are still correct */
  for (int32_t i = 0; i < n; i++)
    if (d[i] < 0 || d[i] >= c->n_devices || c->devices[d[i]].node < 0 ||
        c->devices[d[i]].node >= c->n_nodes)
      n = 0; /* not a device of the cluster: no alignment */
  while (q < n && c->devices[d[q]].node == c->devices[d[0]].node)
    q++;
  bool ok = n > 0 && n % q == 0;
  for (int32_t i = 0; i < n && ok; i++) {
    int32_t node = c->devices[d[i - i % q]].node; /* the node of i's run of q */
    ok = c->devices[d[i]].node == node && (i % q != 0 || !seen[node]);
    seen[node] = true;
  }
  psim_free(seen);
  return ok ? q : 0;
}

static psim_status init_stages(psim_space *sp, const psim_strategy *s) {
  int32_t ns = s->n_stages * (s->virtual_stages > 0 ? s->virtual_stages : 1);
  sp->n_stages = ns;
  sp->stage_devices = psim_calloc((size_t)ns, sizeof *sp->stage_devices);
  sp->stage_n = psim_calloc((size_t)ns, sizeof *sp->stage_n);
  sp->arbitrary = psim_calloc((size_t)ns, sizeof *sp->arbitrary);
  sp->stage_node_n = psim_calloc((size_t)ns, sizeof *sp->stage_node_n);
  if (!sp->stage_devices || !sp->stage_n || !sp->arbitrary || !sp->stage_node_n)
    return psim_error(PSIM_ENOMEM, "out of memory for the configuration space");
  for (int32_t st = 0; st < ns; st++) {
    int32_t n = s->stages[st].n_devices;
    sp->stage_devices[st] = psim_malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!sp->stage_devices[st])
      return psim_error(PSIM_ENOMEM, "out of memory for the configuration space");
    memcpy(sp->stage_devices[st], s->stages[st].devices, sizeof(int32_t) * (size_t)n);
    sp->stage_n[st] = n;
    sp->arbitrary[st] = sp->opt.arbitrary_sets && n <= PSIM_SPACE_MAX_ARBITRARY;
    sp->stage_node_n[st] = stage_node_devices(sp, st);
  }
  return PSIM_OK;
}

psim_status psim_space_init(psim_space *sp, const psim_model *m, const psim_strategy *s,
                            const psim_space_options *o) {
  memset(sp, 0, sizeof *sp);
  sp->m = m;
  if (o)
    sp->opt = *o;
  else
    psim_space_options_init(&sp->opt);
  if (s->n_ops != m->n_ops)
    return psim_error(PSIM_EINPUT, "the strategy has %d ops but the model has %d", s->n_ops,
                      m->n_ops);
  PSIM_CHECK(init_stages(sp, s));
  sp->n_ops = m->n_ops;
  sp->ops = psim_calloc((size_t)m->n_ops, sizeof *sp->ops);
  if (!sp->ops)
    return psim_error(PSIM_ENOMEM, "out of memory for the configuration space");
  for (int32_t k = 0; k < m->n_ops; k++) {
    psim_space_op *so = &sp->ops[k];
    const psim_op *op = &m->ops[k];
    so->stage = s->ops[k].stage;
    for (int32_t i = 0; i < op->n_dims; i++)
      if (dim_splittable(&op->dims[i]))
        so->splittable[so->n_splittable++] = i;
    PSIM_CHECK(build_op(sp, k, s));
  }
  return PSIM_OK;
}

void psim_space_destroy(psim_space *sp) {
  for (int32_t k = 0; sp->ops && k < sp->n_ops; k++) {
    psim_free(sp->ops[k].splits);
    psim_free(sp->ops[k].first);
    psim_free(sp->ops[k].fixed_devices);
  }
  for (int32_t st = 0; sp->stage_devices && st < sp->n_stages; st++)
    psim_free(sp->stage_devices[st]);
  psim_free(sp->ops);
  psim_free(sp->stage_devices);
  psim_free(sp->stage_n);
  psim_free(sp->arbitrary);
  psim_free(sp->stage_node_n);
  memset(sp, 0, sizeof *sp);
}

/* ---- queries --------------------------------------------------------------- */

int64_t psim_space_op_count(const psim_space *sp, int32_t o) {
  const psim_space_op *so = &sp->ops[o];
  return so->fixed ? 1 : so->first[so->n_splits];
}

double psim_space_log10_size(const psim_space *sp) {
  double l = 0;
  for (int32_t o = 0; o < sp->n_ops; o++)
    l += log10((double)psim_space_op_count(sp, o));
  return l;
}

static void set_degrees(const psim_op *op, const psim_space_split *sv, psim_op_config *cfg) {
  for (int32_t i = 0; i < PSIM_MAX_OP_DIMS; i++)
    cfg->degree[i] = i < op->n_dims ? sv->degree[i] : 1;
}

psim_status psim_space_op_config(const psim_space *sp, int32_t o, int64_t index,
                                 psim_op_config *cfg) {
  const psim_space_op *so = &sp->ops[o];
  if (so->fixed)
    return PSIM_OK; /* the op keeps the configuration it was given */
  if (index < 0 || index >= so->first[so->n_splits])
    return psim_error(PSIM_EINPUT, "configuration %lld of op %s is outside [0, %lld)",
                      (long long)index, sp->m->ops[o].name, (long long)so->first[so->n_splits]);
  int32_t lo = 0, hi = so->n_splits - 1; /* last split with first <= index */
  while (lo < hi) {
    int32_t mid = (lo + hi + 1) / 2;
    if (so->first[mid] <= index)
      lo = mid;
    else
      hi = mid - 1;
  }
  const psim_space_split *sv = &so->splits[lo];
  set_degrees(&sp->m->ops[o], sv, cfg);
  return op_set_devices(sp, so, sv->n_devices, index - so->first[lo], cfg);
}

psim_status psim_space_sample(const psim_space *sp, int32_t o, uint64_t *rng, psim_op_config *cfg) {
  const psim_space_op *so = &sp->ops[o];
  if (so->fixed || so->n_splits == 0)
    return PSIM_OK;
  const psim_space_split *sv = &so->splits[psim_space_rand_below(rng, (uint64_t)so->n_splits)];
  int64_t np = op_placements(sp, so, sv->n_devices);
  set_degrees(&sp->m->ops[o], sv, cfg);
  return op_set_devices(sp, so, sv->n_devices, (int64_t)psim_space_rand_below(rng, (uint64_t)np),
                        cfg);
}

bool psim_space_allows(const psim_space *sp, int32_t o, const psim_op_config *cfg) {
  const psim_space_op *so = &sp->ops[o];
  const psim_op *op = &sp->m->ops[o];
  if (so->fixed || cfg->replicas != 1)
    return false;
  int32_t p = 1;
  for (int32_t i = 0; i < op->n_dims; i++) {
    bool split_ok = false;
    for (int32_t k = 0; k < so->n_splittable; k++)
      split_ok = split_ok || so->splittable[k] == i;
    if (cfg->degree[i] != 1 && !split_ok)
      return false;
    if (so->fixed_degree[i] > 0 && cfg->degree[i] != so->fixed_degree[i])
      return false;
    p *= cfg->degree[i];
  }
  bool listed = false;
  for (int32_t k = 0; k < so->n_splits && !listed; k++)
    listed = memcmp(so->splits[k].degree, cfg->degree, sizeof(int32_t) * (size_t)op->n_dims) == 0;
  if (!listed || p != cfg->n_devices)
    return false;
  if (so->fixed_devices)
    return memcmp(cfg->devices, so->fixed_devices, sizeof(int32_t) * (size_t)p) == 0;
  for (int32_t e = 0; e < cfg->n_devices; e++)
    if (!in_stage(sp, so->stage, cfg->devices[e]))
      return false;
  return true;
}

void psim_space_fix_op(psim_space *sp, int32_t o) {
  sp->ops[o].fixed = true;
}

psim_status psim_space_fix_dim(psim_space *sp, int32_t o, int32_t op_dim, int32_t degree) {
  sp->ops[o].fixed_degree[op_dim] = degree;
  /* rebuilding needs the extents: recompute from the model (micro-batches are
   * folded in by the caller through the degree it gives) */
  psim_space_op *so = &sp->ops[o];
  int32_t keep = 0;
  for (int32_t k = 0; k < so->n_splits; k++)
    if (so->splits[k].degree[op_dim] == degree)
      so->splits[keep++] = so->splits[k];
  so->n_splits = keep;
  index_configs(sp, so);
  if (so->n_splits == 0)
    return psim_error(PSIM_EINPUT, "op %s: no configuration has degree %d for dim %s",
                      sp->m->ops[o].name, degree, sp->m->dims[sp->m->ops[o].dims[op_dim].dim].name);
  return PSIM_OK;
}

psim_status psim_space_config_copy(const psim_op_config *src, psim_op_config *dst) {
  psim_op_config_copy(src, dst);
  return PSIM_OK;
}

psim_status psim_space_config_set(const psim_op_config *src, psim_op_config *dst) {
  int32_t *d;
  PSIM_CHECK(psim_op_config_writable(dst, src->n_devices, &d));
  memmove(d, src->devices, sizeof(int32_t) * (size_t)src->n_devices);
  memcpy(dst->degree, src->degree, sizeof dst->degree);
  dst->n_devices = src->n_devices;
  dst->replicas = src->replicas;
  dst->stage = src->stage;
  return PSIM_OK;
}

/* Keeps the degree vectors of op o with n shards, each placed on `devices`. */
psim_status psim_space_fix_devices(psim_space *sp, int32_t o, const int32_t *devices, int32_t n) {
  psim_space_op *so = &sp->ops[o];
  const char *name = sp->m->ops[o].name;
  for (int32_t i = 0; i < n; i++) {
    if (!in_stage(sp, so->stage, devices[i]))
      return psim_error(PSIM_EINPUT, "op %s: device %d is not in the op's pipeline stage", name,
                        devices[i]);
    for (int32_t j = 0; j < i; j++)
      if (devices[j] == devices[i])
        return psim_error(PSIM_EINPUT, "op %s: device %d is listed twice", name, devices[i]);
  }
  int32_t *d = psim_malloc(sizeof *d * (size_t)(n > 0 ? n : 1));
  if (!d)
    return psim_error(PSIM_ENOMEM, "out of memory for the configuration space");
  memcpy(d, devices, sizeof *d * (size_t)n);
  psim_free(so->fixed_devices);
  so->fixed_devices = d;
  so->n_fixed_devices = n;
  int32_t keep = 0;
  for (int32_t k = 0; k < so->n_splits; k++)
    if (so->splits[k].n_devices == n)
      so->splits[keep++] = so->splits[k];
  so->n_splits = keep;
  index_configs(sp, so);
  if (so->n_splits == 0)
    return psim_error(PSIM_EINPUT, "op %s: no split of its dims has %d shards", name, n);
  return PSIM_OK;
}
