/* mcmc_start.c - the start strategy of MCMC and exhaustive search, and the
 * --fix constraints (semi-automatic mode, Mesh-TensorFlow/GSPMD style) that
 * restrict the space around it. */
#define _POSIX_C_SOURCE 200809L
#include "search/mcmc/mcmc.h"

#include <assert.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/strategy/constraints.h"

/* ---- start strategy and --fix ---------------------------------------------- */

/* Data parallel over as many devices as the batch allows (all when it can). */
static psim_status start_data_parallel(const psim_model *m, psim_cluster *c, psim_strategy *s) {
  for (int32_t n = c->n_devices; n >= 1; n--) {
    psim_strategy_destroy(s);
    psim_strategy_init(s);
    if (psim_strategy_data_parallel(m, c, n, 1, s) == PSIM_OK)
      return PSIM_OK;
  }
  return psim_error(PSIM_EINPUT, "no data-parallel start strategy for model %s", m->name);
}

/* The faster of data parallel and the Megatron grid's best (models with roles). */
static psim_status start_default(const psim_model *m, psim_cluster *c, const psim_search_options *o,
                                 psim_strategy *s) {
  PSIM_CHECK(start_data_parallel(m, c, s));
  if (m->role_dim[PSIM_ROLE_HEADS] < 0 || m->role_dim[PSIM_ROLE_FFN] < 0)
    return PSIM_OK;
  psim_sim_result dp;
  if (psim_simulate(m, c, s, o->sim, &dp) != PSIM_OK) {
    psim_error_clear();
    dp.iteration_time_s = INFINITY;
    dp.fits = false;
  } else {
    psim_sim_result_destroy(&dp);
  }
  psim_search_options go = *o;
  go.progress = NULL;
  psim_search_result gr;
  psim_search_result_init(&gr);
  if (psim_search_grid(m, c, &go, &gr) == PSIM_OK && gr.found &&
      (!dp.fits || gr.best_sim.iteration_time_s < dp.iteration_time_s)) {
    psim_strategy_destroy(s);
    psim_strategy_init(s);
    psim_status st = psim_strategy_copy(&gr.best, s);
    psim_search_result_destroy(&gr);
    return st;
  }
  psim_error_clear();
  psim_search_result_destroy(&gr);
  return PSIM_OK;
}

/* Op dim of op o named by a dim name or a role name; -1 when none. */
static int32_t op_dim_named(const psim_model *m, int32_t o, const char *name) {
  const psim_op *op = &m->ops[o];
  for (int32_t i = 0; i < op->n_dims; i++)
    if (strcmp(m->dims[op->dims[i].dim].name, name) == 0)
      return i;
  psim_role r;
  if (psim_role_parse(name, &r) != PSIM_OK) {
    psim_error_clear();
    return -1;
  }
  for (int32_t i = 0; i < op->n_dims; i++)
    if (m->dims[op->dims[i].dim].role == r)
      return i;
  return -1;
}

static psim_status fix_error(const psim_search_options *o, const char *path, const char *what) {
  return psim_error(PSIM_EINPUT, "%s: %s: %s", o->fix && o->fix->file ? o->fix->file : "--fix",
                    path, what);
}

/* What a --fix file may hold (docs/search.md). Anything else (op replicas,
 * pipeline stages, ZeRO, a mesh's devices...) is refused with its JSON path,
 * so that no constraint is silently dropped. */
static const char *const fix_keys[] = {"format", "name", "description", "ops", "split",
                                       "layout", "mesh", "recompute",   NULL};
static const char *const fix_op_keys[] = {"split", "devices", NULL};
static const char *const fix_mesh_keys[] = {"axes", NULL};
#define FIX_KEPT                                                                                   \
  "not a constraint MCMC and exhaustive search keep (they read ops.NAME.split, "                   \
  "ops.NAME.devices, split, layout with mesh.axes, recompute)"

static psim_status fix_check_keys(const psim_search_options *o, const cJSON *obj,
                                  const char *const *keys, const char *path) {
  char p[256];
  if (!cJSON_IsObject(obj))
    return fix_error(o, *path ? path : "(top level)", "expected an object");
  const cJSON *it;
  cJSON_ArrayForEach(it, obj) {
    const char *const *k = keys;
    while (*k && strcmp(*k, it->string) != 0)
      k++;
    snprintf(p, sizeof p, "%s%s%s", path, *path ? "." : "", it->string);
    if (!*k)
      return fix_error(o, p, FIX_KEPT);
  }
  return PSIM_OK;
}

/* The structure of the whole file, before anything is applied. */
static psim_status fix_check(const psim_search_options *o, const psim_constraints *k) {
  PSIM_CHECK(fix_check_keys(o, k->root, fix_keys, ""));
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(k->root, "format");
  if (fmt && !(cJSON_IsString(fmt) && strcmp(fmt->valuestring, "plansim.strategy/1") == 0))
    return fix_error(o, "format", "expected \"plansim.strategy/1\"");
  if (k->ops_json && !cJSON_IsObject(k->ops_json))
    return fix_error(o, "ops", "expected an object of op name or glob -> constraints");
  for (int32_t e = 0; e < k->n_ops; e++) {
    char p[256];
    snprintf(p, sizeof p, "ops.%s", k->ops[e].pattern);
    PSIM_CHECK(fix_check_keys(o, k->ops[e].json, fix_op_keys, p));
  }
  if (k->mesh)
    PSIM_CHECK(fix_check_keys(o, k->mesh, fix_mesh_keys, "mesh"));
  if (k->mesh && !k->layout.json)
    return fix_error(o, "mesh", "is read only for the axis sizes of a layout; add \"layout\"");
  return PSIM_OK;
}

/* Keeps op o's start configuration when the restricted space allows it, else
 * takes the space's first configuration. */
static psim_status fix_start_config(psim_space *sp, int32_t o, psim_strategy *s) {
  if (psim_space_allows(sp, o, &s->ops[o]))
    return PSIM_OK;
  return psim_space_op_config(sp, o, 0, &s->ops[o]);
}

/* A degree: an integer >= 1 (at most a million). */
static psim_status fix_degree(const psim_search_options *o, const psim_constraint_entry *v,
                              const char *path, int32_t *out) {
  if (!v->is_number || v->number < 1 || v->number > 1e6 || v->number != (double)(int32_t)v->number)
    return fix_error(o, path, "expected a degree (an integer >= 1)");
  *out = (int32_t)v->number;
  return PSIM_OK;
}

/* Degrees of op o's "split" object into degree[] (dims not listed: 1). */
static psim_status fix_split(const psim_model *m, int32_t o, const psim_constraint_map *split,
                             const psim_search_options *so, const char *path,
                             int32_t degree[PSIM_MAX_OP_DIMS]) {
  char p[512];
  for (int32_t i = 0; i < PSIM_MAX_OP_DIMS; i++)
    degree[i] = 1;
  if (!cJSON_IsObject(split->json))
    return fix_error(so, path, "expected an object of dim or role -> degree");
  for (int32_t e = 0; e < split->n; e++) {
    snprintf(p, sizeof p, "%s.%s", path, split->entry[e].key);
    int32_t i = op_dim_named(m, o, split->entry[e].key);
    if (i < 0)
      return fix_error(so, p, "not a dim or role of this op");
    assert(i < PSIM_MAX_OP_DIMS);
    PSIM_CHECK(fix_degree(so, &split->entry[e], p, &degree[i]));
  }
  return PSIM_OK;
}

/* The op's "devices" as indices into *out (n entries, malloc'd). */
static psim_status fix_devices(const psim_search_options *so, const psim_constraint_op *e,
                               const char *path, int32_t **out, int32_t *n) {
  if (!cJSON_IsArray(e->devices) || cJSON_GetArraySize(e->devices) < 1)
    return fix_error(so, path, "expected a non-empty array of device indices");
  if (!e->indices)
    return fix_error(so, path, "expected device indices (integers >= 0)");
  *n = e->n_indices;
  *out = psim_malloc(sizeof **out * (size_t)*n);
  if (!*out)
    return psim_error(PSIM_ENOMEM, "out of memory");
  memcpy(*out, e->indices, sizeof **out * (size_t)*n);
  return PSIM_OK;
}

/* An op given split and devices: fixed whole (replicas = devices / shards). */
static psim_status fix_whole(const psim_model *m, int32_t o, const psim_constraint_op *e,
                             const char *path, const psim_search_options *so, psim_strategy *s,
                             psim_space *sp) {
  char p[512];
  int32_t degree[PSIM_MAX_OP_DIMS], *d, n, shards = 1;
  snprintf(p, sizeof p, "%s.split", path);
  PSIM_CHECK(fix_split(m, o, &e->split, so, p, degree));
  snprintf(p, sizeof p, "%s.devices", path);
  PSIM_CHECK(fix_devices(so, e, p, &d, &n));
  for (int32_t i = 0; i < m->ops[o].n_dims; i++)
    shards *= degree[i];
  if (n % shards != 0) {
    psim_free(d);
    return fix_error(so, p, "the device count is not a multiple of the split's shards");
  }
  psim_op_config *cfg = &s->ops[o];
  const int32_t *list = psim_devlist_from(d, n);
  psim_free(d);
  if (!list)
    return psim_error(PSIM_ENOMEM, "out of memory");
  psim_devlist_release(cfg->devices);
  memcpy(cfg->degree, degree, sizeof cfg->degree);
  cfg->devices = list;
  cfg->n_devices = n;
  cfg->replicas = n / shards;
  psim_space_fix_op(sp, o);
  return PSIM_OK;
}

/* An op given devices alone: its placement is fixed, its split searched. */
static psim_status fix_placement(int32_t o, const psim_constraint_op *e, const char *path,
                                 const psim_search_options *so, psim_strategy *s, psim_space *sp) {
  int32_t *d, n;
  PSIM_CHECK(fix_devices(so, e, path, &d, &n));
  psim_status st = psim_space_fix_devices(sp, o, d, n);
  psim_free(d);
  if (st != PSIM_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", psim_error_message());
    return fix_error(so, path, why);
  }
  return fix_start_config(sp, o, s);
}

/* Fixes one dim's degree in op o (an op split, the top-level split, a layout). */
static psim_status fix_dim(int32_t o, int32_t i, int32_t degree, const char *path,
                           const psim_search_options *so, psim_strategy *s, psim_space *sp) {
  if (psim_space_fix_dim(sp, o, i, degree) != PSIM_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", psim_error_message());
    return fix_error(so, path, why);
  }
  return fix_start_config(sp, o, s);
}

/* An op given split alone: those dims' degrees fixed, the rest searched. */
static psim_status fix_op_dims(const psim_model *m, int32_t o, const psim_constraint_map *split,
                               const char *path, const psim_search_options *so, psim_strategy *s,
                               psim_space *sp) {
  char p[512];
  int32_t degree[PSIM_MAX_OP_DIMS];
  snprintf(p, sizeof p, "%s.split", path);
  PSIM_CHECK(fix_split(m, o, split, so, p, degree));
  for (int32_t e = 0; e < split->n; e++) {
    int32_t i = op_dim_named(m, o, split->entry[e].key);
    assert(i >= 0); /* fix_split checked every key */
    PSIM_CHECK(fix_dim(o, i, degree[i], p, so, s, sp));
  }
  return PSIM_OK;
}

static psim_status fix_ops(const psim_model *m, const psim_search_options *o,
                           const psim_constraints *k, psim_strategy *s, psim_space *sp) {
  for (int32_t e = 0; e < k->n_ops; e++) {
    const psim_constraint_op *c = &k->ops[e];
    char path[256], dpath[300];
    snprintf(path, sizeof path, "ops.%s", c->pattern);
    snprintf(dpath, sizeof dpath, "%s.devices", path);
    int32_t hits = 0;
    for (int32_t i = 0; i < m->n_ops; i++) {
      if (!psim_constraint_op_matches(c, m->ops[i].name))
        continue;
      hits++;
      if (c->devices && c->split.json)
        PSIM_CHECK(fix_whole(m, i, c, path, o, s, sp));
      else if (c->devices)
        PSIM_CHECK(fix_placement(i, c, dpath, o, s, sp));
      else if (c->split.json)
        PSIM_CHECK(fix_op_dims(m, i, &c->split, path, o, s, sp));
    }
    if (!hits)
      return fix_error(o, path, "matches no op of the model");
  }
  return PSIM_OK;
}

/* True when name is a dim or a role name of model m. */
static bool model_dim_or_role(const psim_model *m, const char *name) {
  for (int32_t d = 0; d < m->n_dims; d++)
    if (strcmp(m->dims[d].name, name) == 0)
      return true;
  psim_role r;
  bool role = psim_role_parse(name, &r) == PSIM_OK;
  psim_error_clear();
  return role;
}

/* Top-level split: the dim (or role) keeps its degree in every op that has it. */
static psim_status fix_global_split(const psim_model *m, const psim_search_options *o,
                                    const psim_constraints *k, psim_strategy *s, psim_space *sp) {
  if (k->split.json && !cJSON_IsObject(k->split.json))
    return fix_error(o, "split", "expected an object of dim or role -> degree");
  for (int32_t e = 0; e < k->split.n; e++) {
    const psim_constraint_entry *v = &k->split.entry[e];
    char path[256];
    snprintf(path, sizeof path, "split.%s", v->key);
    int32_t degree = 1;
    PSIM_CHECK(fix_degree(o, v, path, &degree));
    if (!model_dim_or_role(m, v->key))
      return fix_error(o, path, "not a dim or role name of the model");
    for (int32_t i = 0; i < m->n_ops; i++) {
      int32_t d = op_dim_named(m, i, v->key);
      if (d >= 0 && !sp->ops[i].fixed)
        PSIM_CHECK(fix_dim(i, d, degree, path, o, s, sp));
    }
  }
  return PSIM_OK;
}

/* Index of axis `name` in mesh.axes (fix_layout checked that it is there). */
static int32_t axis_index(const psim_constraints *k, const char *name) {
  int32_t a = 0;
  while (strcmp(k->mesh_axes.entry[a].key, name) != 0)
    a++;
  assert(a < k->mesh_axes.n);
  return a;
}

/* The layout's degrees for op o's dims. */
static psim_status fix_layout_op(const psim_model *m, int32_t o, const psim_constraints *k,
                                 const psim_search_options *so, psim_strategy *s, psim_space *sp) {
  uint32_t used = 0; /* axes already given to a dim of this op */
  const psim_op *op = &m->ops[o];
  for (int32_t i = 0; i < op->n_dims; i++) {
    const psim_dim *d = &m->dims[op->dims[i].dim];
    const psim_constraint_entry *key = psim_constraint_map_find(&k->layout, d->name);
    if (!key && d->role != PSIM_ROLE_NONE)
      key = psim_constraint_map_find(&k->layout, psim_role_name(d->role));
    if (!key)
      continue;
    int32_t a = axis_index(k, key->string);
    if (used >> a & 1u)
      continue;
    used |= 1u << a;
    char path[256];
    snprintf(path, sizeof path, "layout.%s", key->key);
    PSIM_CHECK(fix_dim(o, i, (int32_t)k->mesh_axes.entry[a].number, path, so, s, sp));
  }
  return PSIM_OK;
}

/* The layout's structure: axes of up to 32 sizes, keys naming dims or roles
 * of the model and values naming axes. */
static psim_status fix_layout_check(const psim_model *m, const psim_search_options *o,
                                    const psim_constraints *k) {
  if (!cJSON_IsObject(k->layout.json))
    return fix_error(o, "layout", "expected an object of dim or role -> mesh axis");
  if (!cJSON_IsObject(k->mesh_axes.json) || k->mesh_axes.n > 32)
    return fix_error(o, "layout", "needs mesh.axes: an object of up to 32 axis name -> size");
  for (int32_t a = 0; a < k->mesh_axes.n; a++) {
    char path[256];
    int32_t size = 1;
    snprintf(path, sizeof path, "mesh.axes.%s", k->mesh_axes.entry[a].key);
    PSIM_CHECK(fix_degree(o, &k->mesh_axes.entry[a], path, &size));
  }
  for (int32_t e = 0; e < k->layout.n; e++) {
    const psim_constraint_entry *v = &k->layout.entry[e];
    char path[256];
    snprintf(path, sizeof path, "layout.%s", v->key);
    if (!model_dim_or_role(m, v->key))
      return fix_error(o, path, "not a dim or role name of the model");
    if (!v->string || !psim_constraint_map_find(&k->mesh_axes, v->string))
      return fix_error(o, path, "expected the name of an axis of mesh.axes");
  }
  return PSIM_OK;
}

/* Layout (Mesh-TensorFlow): every op dim whose name, or else whose role, is
 * a layout key gets the size of that key's mesh axis as its degree; only an
 * op's first dim mapped to an axis takes it (docs/strategy.md). */
static psim_status fix_layout(const psim_model *m, const psim_search_options *o,
                              const psim_constraints *k, psim_strategy *s, psim_space *sp) {
  if (!k->layout.json)
    return PSIM_OK;
  PSIM_CHECK(fix_layout_check(m, o, k));
  for (int32_t i = 0; i < m->n_ops; i++)
    if (!sp->ops[i].fixed)
      PSIM_CHECK(fix_layout_op(m, i, k, o, s, sp));
  return PSIM_OK;
}

static psim_status fix_recompute(const psim_search_options *o, const psim_constraints *k,
                                 psim_strategy *s) {
  const cJSON *r = k->recompute;
  if (!r)
    return PSIM_OK;
  if (!cJSON_IsString(r) || psim_recompute_parse(r->valuestring, &s->recompute) != PSIM_OK) {
    psim_error_clear();
    return fix_error(o, "recompute", "expected \"none\", \"selective\" or \"full\"");
  }
  return PSIM_OK;
}

/* --fix read once (sim/strategy/constraints.h), then kept by MCMC's rules. */
static psim_status apply_fix(const psim_model *m, const psim_search_options *o, psim_strategy *s,
                             psim_space *sp) {
  if (!o->fix)
    return PSIM_OK;
  const psim_constraints *k = o->fix;
  PSIM_CHECK(fix_check(o, k));
  PSIM_CHECK(fix_recompute(o, k, s));
  PSIM_CHECK(fix_ops(m, o, k, s, sp));
  PSIM_CHECK(fix_global_split(m, o, k, s, sp));
  return fix_layout(m, o, k, s, sp);
}

/* Bytes of op o's weight inputs. */
static double weight_bytes(const psim_model *m, int32_t o) {
  double b = 0;
  for (int32_t i = 0; i < m->ops[o].n_in; i++) {
    const psim_tensor *t = &m->tensors[m->ops[o].in[i]];
    if (t->kind == PSIM_TENSOR_WEIGHT)
      b += psim_tensor_bytes(m, t);
  }
  return b;
}

/* Splits op o's largest splittable weight dim over the devices its
 * constraints leave (a Parameter split: the weight is sharded, not
 * replicated): the whole stage, or the fixed devices, shared with the dims
 * whose degree --fix gives. Leaves cfg alone when that is not in the space. */
static psim_status shard_weights(const psim_model *m, const psim_strategy *s, const psim_space *sp,
                                 int32_t o, psim_op_config *cfg) {
  const psim_op *op = &m->ops[o];
  const psim_space_op *so = &sp->ops[o];
  int32_t best = -1;
  for (int32_t i = 0; i < op->n_dims; i++)
    if (op->dims[i].in_weight &&
        (op->dims[i].use == PSIM_USE_OUTPUT || op->dims[i].use == PSIM_USE_CONTRACTED) &&
        (best < 0 || m->dims[op->dims[i].dim].size > m->dims[op->dims[best].dim].size))
      best = i;
  if (best < 0 || so->fixed_degree[best] > 0)
    return PSIM_OK;
  psim_op_config want = *cfg;
  int32_t fixed = 1;
  for (int32_t i = 0; i < PSIM_MAX_OP_DIMS; i++) {
    want.degree[i] = so->fixed_degree[i] > 0 ? so->fixed_degree[i] : 1;
    fixed *= want.degree[i];
  }
  const psim_stage *st = &s->stages[cfg->stage];
  int32_t n = so->fixed_devices ? so->n_fixed_devices : st->n_devices;
  int64_t ext = psim_strategy_dim_extent(s, m, op->dims[best].dim);
  int32_t p = ext < n / fixed ? (int32_t)ext : n / fixed;
  want.degree[best] = p > 0 ? p : 1;
  want.devices = so->fixed_devices ? so->fixed_devices : st->devices;
  want.n_devices = want.degree[best] * fixed;
  want.replicas = 1;
  if (!psim_space_allows(sp, o, &want))
    return PSIM_OK;
  return psim_space_config_set(&want, cfg); /* want.devices: the stage's or the fixed list */
}

/* When the start does not fit in memory (replicated embedding tables, say),
 * shards the weights of the ops holding the most weight bytes (each over 1%
 * of the model's) so that the chain starts from a strategy that fits; one
 * change at a time could take long to get there. Ops fixed whole are left
 * alone; the others keep what --fix gives them. */
static psim_status fit_start(const psim_model *m, psim_cluster *c, const psim_search_options *o,
                             psim_strategy *s, const psim_space *sp) {
  psim_sim_result r;
  psim_status st = psim_simulate(m, c, s, o->sim, &r);
  if (st != PSIM_OK) {
    psim_error_clear();
    return PSIM_OK;
  }
  bool fits = r.fits;
  psim_sim_result_destroy(&r);
  if (fits)
    return PSIM_OK;
  double total = 0;
  for (int32_t k = 0; k < m->n_ops; k++)
    total += weight_bytes(m, k);
  for (int32_t k = 0; k < m->n_ops; k++)
    if (!sp->ops[k].fixed && weight_bytes(m, k) > 0.01 * total)
      PSIM_CHECK(shard_weights(m, s, sp, k, &s->ops[k]));
  return PSIM_OK;
}

psim_status psim_mcmc_start(const psim_model *m, psim_cluster *c, const psim_search_options *o,
                            const psim_mcmc_options *mo, psim_strategy *start, psim_space *sp) {
  if (o->init)
    PSIM_CHECK(psim_strategy_copy(o->init, start));
  else
    PSIM_CHECK(start_default(m, c, o, start));
  psim_space_options so = mo->space;
  if (!so.cluster)
    so.cluster = c; /* blocks aligned with its nodes */
  PSIM_CHECK(psim_space_init(sp, m, start, &so));
  PSIM_CHECK(apply_fix(m, o, start, sp));
  if (!o->init)
    PSIM_CHECK(fit_start(m, c, o, start, sp));
  return psim_strategy_validate(start, m, c,
                                o->fix && o->fix->file ? o->fix->file : "the start strategy");
}

void psim_mcmc_describe(const psim_model *m, const psim_strategy *s, const char *searcher,
                        char *buf, size_t n) {
  int32_t bd = m->role_dim[PSIM_ROLE_BATCH], changed = 0, first = -1;
  for (int32_t o = 0; o < s->n_ops; o++) {
    const psim_op_config *cfg = &s->ops[o];
    bool dp = cfg->replicas == 1;
    for (int32_t i = 0; i < m->ops[o].n_dims && dp; i++)
      dp = cfg->degree[i] == 1 || m->ops[o].dims[i].dim == bd;
    dp = dp && cfg->n_devices == s->stages[cfg->stage].n_devices;
    if (!dp) {
      changed++;
      first = first < 0 ? o : first;
    }
  }
  if (!changed)
    snprintf(buf, n, "%s: data parallel on every op", searcher);
  else
    snprintf(buf, n, "%s: %d of %d ops leave data parallelism (first: %s on %d devices)", searcher,
             changed, s->n_ops, m->ops[first].name, s->ops[first].n_devices);
}
