/* strategy.c - the explicit strategy: lifetime, copies, names and the invariants of the
 * explicit form (the mesh+layout expansion of one op is in mesh.c). */
#include "sim/strategy/strategy.h"

#include <stdio.h>
#include <string.h>

#include "sim/core/alloc.h"

/* PyTorch DistributedDataParallel's default bucket_cap_mb = 25 (MiB)
 * (torch.nn.parallel.DistributedDataParallel documentation). */
#define DEFAULT_BUCKET_BYTES (25.0 * 1048576.0)

void psim_strategy_init(psim_strategy *s) {
  memset(s, 0, sizeof *s);
  s->n_stages = 1;
  s->virtual_stages = 1;
  s->n_micro = 1;
  s->micro_batch = 1;
  s->schedule = PSIM_SCHED_1F1B;
  s->recompute_layers = 1;
  s->bucket_bytes = DEFAULT_BUCKET_BYTES;
  s->zero_prefetch = PSIM_ZERO_PREFETCH_DEFAULT;
  s->ps.replicas = 1;
  s->dp_replicate = 1;
}

void psim_op_config_destroy(psim_op_config *cfg) {
  psim_devlist_release(cfg->devices);
  cfg->devices = NULL;
  cfg->n_devices = 0;
}

void psim_op_config_copy(const psim_op_config *src, psim_op_config *dst) {
  const int32_t *d = psim_devlist_share(src->devices); /* before the release: src may be dst */
  psim_devlist_release(dst->devices);
  *dst = *src;
  dst->devices = d;
}

psim_status psim_op_config_writable(psim_op_config *cfg, int32_t cap, int32_t **out) {
  int32_t keep = cfg->devices ? (cfg->n_devices < cap ? cfg->n_devices : cap) : 0;
  return psim_devlist_writable(&cfg->devices, keep, cap, out);
}

void psim_strategy_destroy(psim_strategy *s) {
  for (int32_t i = 0; i < s->n_ops; i++)
    psim_op_config_destroy(&s->ops[i]);
  psim_free(s->ops);
  int32_t n = s->n_stages * s->virtual_stages;
  for (int32_t i = 0; s->stages && i < n; i++)
    psim_free(s->stages[i].devices);
  psim_free(s->stages);
  psim_free(s->ps.servers);
  psim_free(s->op_layer);
  psim_strategy_init(s);
}

bool psim_strategy_partial_recompute(const psim_strategy *s) {
  return s->recompute == PSIM_RECOMPUTE_FULL &&
         (s->recompute_method == PSIM_RCM_BLOCK || s->recompute_layers > 1);
}

bool psim_strategy_fp8_applies(const psim_model *m, const psim_cluster *c) {
  if (c->n_devices < 1 || !psim_device_has_fp8(c, 0) || c->stack.fp8_cast_bytes <= 0)
    return false;
  bool linears = false;
  for (int32_t i = 0; i < m->n_ops; i++) {
    if (m->ops[i].attrs.fp8)
      return false;
    linears = linears || psim_op_is_block_linear(m, &m->ops[i]);
  }
  return linears;
}

bool psim_zero_gathers_after_step(int32_t zero_stage) {
  return zero_stage == 1 || zero_stage == 2;
}

bool psim_strategy_param_gather_overlapped(const psim_strategy *s) {
  return s->overlap_param_gather && psim_zero_gathers_after_step(s->zero_stage);
}

bool psim_strategy_op_fp8(const psim_strategy *s, const psim_model *m, int32_t o) {
  const psim_op *op = &m->ops[o];
  switch (s->fp8) {
  case PSIM_FP8_OFF: return false;
  case PSIM_FP8_ON: return psim_op_is_block_linear(m, op);
  default: return op->attrs.fp8;
  }
}

bool psim_strategy_any_fp8(const psim_strategy *s, const psim_model *m) {
  for (int32_t o = 0; o < m->n_ops; o++)
    if (psim_strategy_op_fp8(s, m, o))
      return true;
  return false;
}

int64_t psim_shard_size(int64_t n, int32_t d, int32_t j) {
  if (d <= 1)
    return n;
  int64_t base = n / d, rest = n % d;
  return j < rest ? base + 1 : base;
}

int64_t psim_shard_max(int64_t n, int32_t d) {
  return d <= 1 ? n : (n + d - 1) / d;
}

static psim_status dup_ints(const int32_t *src, int32_t n, int32_t **out) {
  *out = NULL;
  if (n <= 0)
    return PSIM_OK;
  *out = psim_malloc((size_t)n * sizeof **out);
  if (!*out)
    return psim_error(PSIM_ENOMEM, "out of memory copying a strategy");
  memcpy(*out, src, (size_t)n * sizeof **out);
  return PSIM_OK;
}

static psim_status copy_ops(const psim_strategy *src, psim_strategy *dst) {
  if (src->n_ops == 0)
    return PSIM_OK;
  dst->ops = psim_calloc((size_t)src->n_ops, sizeof *dst->ops);
  if (!dst->ops)
    return psim_error(PSIM_ENOMEM, "out of memory copying a strategy");
  dst->n_ops = src->n_ops;
  for (int32_t i = 0; i < src->n_ops; i++) /* the lists shared, not copied (devlist.h) */
    psim_op_config_copy(&src->ops[i], &dst->ops[i]);
  return PSIM_OK;
}

static psim_status copy_stages(const psim_strategy *src, psim_strategy *dst) {
  int32_t n = src->n_stages * src->virtual_stages;
  if (!src->stages || n == 0)
    return PSIM_OK;
  dst->stages = psim_calloc((size_t)n, sizeof *dst->stages);
  if (!dst->stages)
    return psim_error(PSIM_ENOMEM, "out of memory copying a strategy");
  for (int32_t i = 0; i < n; i++) {
    dst->stages[i] = src->stages[i];
    dst->stages[i].devices = NULL;
    PSIM_CHECK(dup_ints(src->stages[i].devices, src->stages[i].n_devices, &dst->stages[i].devices));
  }
  return PSIM_OK;
}

psim_status psim_strategy_copy(const psim_strategy *src, psim_strategy *dst) {
  *dst = *src;
  dst->ops = NULL;
  dst->n_ops = 0;
  dst->stages = NULL;
  dst->ps.servers = NULL;
  dst->op_layer = NULL;
  psim_status s = copy_ops(src, dst);
  if (s == PSIM_OK)
    s = copy_stages(src, dst);
  if (s == PSIM_OK && src->op_layer)
    s = dup_ints(src->op_layer, src->n_ops, &dst->op_layer);
  if (s == PSIM_OK)
    s = dup_ints(src->ps.servers, src->ps.n_servers, &dst->ps.servers);
  if (s != PSIM_OK)
    psim_strategy_destroy(dst);
  return s;
}

/* ---- names ---- */

/* An enum's names in value order, and what it is called in messages. */
typedef struct enum_names {
  const char *what;
  const char *const *names;
  int n;
} enum_names;

#define N_NAMES(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *const schedule_names[] = {"gpipe",          "1f1b", "interleaved", "looped_bfs",
                                             "interleaved_zb", "zbv",  "dualpipev"};
static const char *const recompute_names[] = {"none", "selective", "full", "op"};
static const char *const rc_method_names[] = {"uniform", "block"};
static const char *const allreduce_names[] = {"auto", "ring", "tree", "halving_doubling",
                                              "hierarchical"};
static const char *const ps_mode_names[] = {"sync", "async", "backup"};
_Static_assert(N_NAMES(schedule_names) == PSIM_SCHED_DUALPIPEV + 1, "a schedule has no name");
_Static_assert(N_NAMES(recompute_names) == PSIM_RECOMPUTE_OP + 1, "a recompute mode has no name");
_Static_assert(N_NAMES(rc_method_names) == PSIM_RCM_BLOCK + 1, "a recompute method has no name");
_Static_assert(N_NAMES(allreduce_names) == PSIM_AR_HIERARCHICAL + 1, "an algorithm has no name");
_Static_assert(N_NAMES(ps_mode_names) == PSIM_PS_BACKUP + 1, "a PS mode has no name");

static const enum_names schedules = {"schedule", schedule_names, N_NAMES(schedule_names)};
static const enum_names recomputes = {"recompute mode", recompute_names, N_NAMES(recompute_names)};
static const enum_names rc_methods = {"recompute method", rc_method_names,
                                      N_NAMES(rc_method_names)};
static const enum_names allreduces = {"all-reduce algorithm", allreduce_names,
                                      N_NAMES(allreduce_names)};
static const enum_names ps_modes = {"parameter-server mode", ps_mode_names, N_NAMES(ps_mode_names)};

static const char *name_of(const enum_names *t, int v) {
  return v >= 0 && v < t->n ? t->names[v] : "?";
}

/* The value named `name` in t; else PSIM_EINPUT listing the names. */
static psim_status parse_name(const enum_names *t, const char *name, int *out) {
  char list[256] = "";
  for (int i = 0; i < t->n; i++) {
    if (name && strcmp(t->names[i], name) == 0) {
      *out = i;
      return PSIM_OK;
    }
    strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
    strncat(list, t->names[i], sizeof list - strlen(list) - 1);
  }
  return psim_error(PSIM_EINPUT, "unknown %s '%.80s'; expected one of: %s", t->what,
                    name ? name : "", list);
}

/* psim_X_name and psim_X_parse of one enum over its table (out is written only on success). */
#define ENUM_NAME_PARSE(type, name_fn, parse_fn, table)                                            \
  const char *name_fn(type v) {                                                                    \
    return name_of(&(table), (int)v);                                                              \
  }                                                                                                \
  psim_status parse_fn(const char *name, type *out) {                                              \
    int v = 0;                                                                                     \
    PSIM_CHECK(parse_name(&(table), name, &v));                                                    \
    *out = (type)v;                                                                                \
    return PSIM_OK;                                                                                \
  }

ENUM_NAME_PARSE(psim_schedule, psim_schedule_name, psim_schedule_parse, schedules)
ENUM_NAME_PARSE(psim_recompute, psim_recompute_name, psim_recompute_parse, recomputes)
ENUM_NAME_PARSE(psim_recompute_method, psim_recompute_method_name, psim_recompute_method_parse,
                rc_methods)
ENUM_NAME_PARSE(psim_allreduce_algo, psim_allreduce_algo_name, psim_allreduce_algo_parse,
                allreduces)
ENUM_NAME_PARSE(psim_ps_mode, psim_ps_mode_name, psim_ps_mode_parse, ps_modes)

/* ---- invariants ---- */

int64_t psim_strategy_dim_extent(const psim_strategy *s, const psim_model *m, int32_t dim) {
  int64_t n = m->dims[dim].size;
  if (m->dims[dim].role == PSIM_ROLE_BATCH && s->n_micro > 1)
    n /= s->n_micro;
  return n;
}

int32_t psim_strategy_layer_stage(const psim_strategy *s, int32_t layer) {
  int32_t n = s->n_stages * s->virtual_stages;
  for (int32_t i = 0; s->stages && i < n; i++)
    if (layer >= s->stages[i].first_layer && layer <= s->stages[i].last_layer)
      return i;
  return -1;
}

#define VALID_LISTS 8

/* Validation state: mark[d] == stamp when device d is already in the list
 * being checked, so duplicate checks are O(n) rather than O(n^2). */
typedef struct vctx {
  const psim_strategy *s;
  const psim_model *m;
  const psim_cluster *c;
  const char *file;
  int32_t *mark;
  int32_t stamp;
  /* the last VALID_LISTS op device lists that passed check_device_list, the newest first: a
   * list equal to one of them passes too, found by a memcmp instead of marking its devices
   * (a layer's ops repeat a few lists; issue 19) */
  const int32_t *passed[VALID_LISTS];
  int32_t n_passed_devs[VALID_LISTS], n_passed;
} vctx;

static psim_status check_device_list(vctx *v, const int32_t *devs, int32_t n, const char *where) {
  v->stamp++;
  for (int32_t i = 0; i < n; i++) {
    if (devs[i] < 0 || devs[i] >= v->c->n_devices)
      return psim_error(PSIM_EINPUT, "%s: %s: device %d out of range; the cluster has %d devices",
                        v->file, where, (int)devs[i], (int)v->c->n_devices);
    if (v->mark[devs[i]] == v->stamp)
      return psim_error(PSIM_EINPUT, "%s: %s: device %d listed twice", v->file, where,
                        (int)devs[i]);
    v->mark[devs[i]] = v->stamp;
  }
  return PSIM_OK;
}

static psim_status check_op_degrees(const vctx *v, int32_t i, int64_t *prod) {
  const psim_op *o = &v->m->ops[i];
  const psim_op_config *cfg = &v->s->ops[i];
  *prod = 1;
  for (int32_t d = 0; d < o->n_dims; d++) {
    int64_t ext = psim_strategy_dim_extent(v->s, v->m, o->dims[d].dim);
    if (cfg->degree[d] < 1 || cfg->degree[d] > ext)
      return psim_error(PSIM_EINPUT,
                        "%s: ops.%s.split.%s: dim split %d ways but it has %lld per "
                        "micro-batch (from the layout or an override)",
                        v->file, o->name, v->m->dims[o->dims[d].dim].name, (int)cfg->degree[d],
                        (long long)ext);
    *prod *= cfg->degree[d];
    if (*prod > INT32_MAX)
      return psim_error(PSIM_EINPUT, "%s: ops.%s.split: more than %d shards", v->file, o->name,
                        INT32_MAX);
  }
  return PSIM_OK;
}

static psim_status check_op(vctx *v, int32_t i) {
  const psim_op *o = &v->m->ops[i];
  const psim_op_config *cfg = &v->s->ops[i];
  int64_t prod = 1;
  PSIM_CHECK(check_op_degrees(v, i, &prod));
  if (cfg->replicas < 1 || prod * cfg->replicas != cfg->n_devices || !cfg->devices)
    return psim_error(PSIM_EINPUT,
                      "%s: ops.%s: %d devices but the split gives %lld shards x %d replicas",
                      v->file, o->name, (int)cfg->n_devices, (long long)prod, (int)cfg->replicas);
  char where[320];
  snprintf(where, sizeof where, "ops.%.200s.devices", o->name);
  bool passed = false;
  for (int32_t k = 0; k < v->n_passed && !passed; k++)
    passed =
        v->n_passed_devs[k] == cfg->n_devices &&
        (v->passed[k] == cfg->devices || /* a shared list (devlist.h) */
         memcmp(v->passed[k], cfg->devices, (size_t)cfg->n_devices * sizeof *cfg->devices) == 0);
  if (!passed) {
    PSIM_CHECK(check_device_list(v, cfg->devices, cfg->n_devices, where));
    int32_t n = v->n_passed < VALID_LISTS ? v->n_passed++ : VALID_LISTS - 1;
    memmove(&v->passed[1], &v->passed[0], (size_t)n * sizeof v->passed[0]);
    memmove(&v->n_passed_devs[1], &v->n_passed_devs[0], (size_t)n * sizeof v->n_passed_devs[0]);
    v->passed[0] = cfg->devices;
    v->n_passed_devs[0] = cfg->n_devices;
  }
  int32_t layer = psim_strategy_op_layer(v->s, v->m, i);
  int32_t want = psim_strategy_layer_stage(v->s, layer);
  if (cfg->stage != want)
    return psim_error(PSIM_EINPUT, "%s: ops.%s: stage %d, but its layer %d is in stage %d", v->file,
                      o->name, (int)cfg->stage, (int)layer, (int)want);
  return PSIM_OK;
}

static bool sets_equal(const psim_stage *a, const psim_stage *b) {
  return a->n_devices == b->n_devices &&
         memcmp(a->devices, b->devices, (size_t)a->n_devices * sizeof *a->devices) == 0;
}

/* Chunks of one physical stage share a device set; physical stages are
 * disjoint (mark[d] holds the physical stage owning d, + 1). O(devices). */
static psim_status check_stage_sets(vctx *v) {
  const psim_strategy *s = v->s;
  int32_t n = s->n_stages * s->virtual_stages;
  for (int32_t d = 0; d < v->c->n_devices; d++)
    v->mark[d] = 0;
  for (int32_t i = 0; i < n; i++) {
    int32_t phys = psim_schedule_chunk_rank(s->schedule, s->n_stages, i);
    if (i >= s->n_stages) {
      if (!sets_equal(&s->stages[i], &s->stages[phys]))
        return psim_error(PSIM_EINPUT,
                          "%s: pipeline.stages[%d]: chunks %d and %d run on the same physical "
                          "stage and need the same devices",
                          v->file, (int)i, (int)phys, (int)i);
      continue;
    }
    for (int32_t k = 0; k < s->stages[i].n_devices; k++) {
      int32_t d = s->stages[i].devices[k];
      if (v->mark[d] != 0)
        return psim_error(PSIM_EINPUT,
                          "%s: pipeline.stages[%d]: its devices overlap those of stage %d", v->file,
                          (int)i, (int)v->mark[d] - 1);
      v->mark[d] = phys + 1;
    }
  }
  v->stamp = 0;
  for (int32_t d = 0; d < v->c->n_devices; d++)
    v->mark[d] = 0;
  return PSIM_OK;
}

static psim_status check_stages(vctx *v) {
  const psim_strategy *s = v->s;
  int32_t n = s->n_stages * s->virtual_stages;
  if (n < 1 || !s->stages || s->virtual_stages < 1)
    return psim_error(PSIM_EINPUT, "%s: pipeline: no stages", v->file);
  int32_t next = 0;
  for (int32_t i = 0; i < n; i++) {
    const psim_stage *st = &s->stages[i];
    if (st->first_layer != next || st->last_layer < st->first_layer)
      return psim_error(PSIM_EINPUT,
                        "%s: pipeline.stages[%d].layers: [%d, %d] must start at layer %d (stages "
                        "cover the layers in order, each exactly once)",
                        v->file, (int)i, (int)st->first_layer, (int)st->last_layer, (int)next);
    next = st->last_layer + 1;
    char where[64];
    snprintf(where, sizeof where, "pipeline.stages[%d].devices", (int)i);
    if (st->n_devices < 1)
      return psim_error(PSIM_EINPUT, "%s: %s: empty device set", v->file, where);
    PSIM_CHECK(check_device_list(v, st->devices, st->n_devices, where));
  }
  int32_t n_layers = psim_strategy_n_layers(s, v->m);
  if (next != n_layers)
    return psim_error(PSIM_EINPUT, "%s: pipeline.stages: cover layers 0..%d but the %s has %d",
                      v->file, (int)next - 1, s->op_layer ? "layer_starts override" : "model",
                      (int)n_layers);
  return check_stage_sets(v);
}

/* The layer override: contiguous ranges in op order numbered 0..n_op_layers-1 (so
 * layers never decrease along the data flow), on a model without repeated blocks. */
static psim_status check_op_layers(vctx *v) {
  const psim_strategy *s = v->s;
  if (!s->op_layer)
    return PSIM_OK;
  if (v->m->n_blocks > 0)
    return psim_error(PSIM_EINPUT,
                      "%s: pipeline.layer_starts: the model has repeated blocks (its own layers "
                      "set the pipeline; the override is for graphs without them)",
                      v->file);
  for (int32_t i = 0; i < s->n_ops; i++) {
    int32_t prev = i > 0 ? s->op_layer[i - 1] : -1, l = s->op_layer[i];
    if (l != prev && l != prev + 1)
      return psim_error(PSIM_EINPUT,
                        "%s: pipeline.layer_starts: op '%s' is in layer %d after layer %d "
                        "(layers are contiguous ranges of ops in model order)",
                        v->file, v->m->ops[i].name, (int)l, (int)prev);
  }
  if (s->n_ops < 1 || s->op_layer[s->n_ops - 1] != s->n_op_layers - 1)
    return psim_error(PSIM_EINPUT, "%s: pipeline.layer_starts: %d layers but the ops span %d",
                      v->file, (int)s->n_op_layers,
                      s->n_ops > 0 ? (int)s->op_layer[s->n_ops - 1] + 1 : 0);
  return PSIM_OK;
}

static psim_status validate(vctx *v) {
  const psim_strategy *s = v->s;
  if (s->n_ops != v->m->n_ops)
    return psim_error(PSIM_EINPUT, "%s: the strategy has %d ops but the model has %d", v->file,
                      (int)s->n_ops, (int)v->m->n_ops);
  if (s->n_micro < 1 || s->micro_batch < 1 || s->zero_stage < 0 || s->zero_stage > 3)
    return psim_error(PSIM_EINPUT, "%s: micro-batches, micro-batch size or ZeRO stage invalid",
                      v->file);
  PSIM_CHECK(check_op_layers(v));
  PSIM_CHECK(check_stages(v));
  for (int32_t i = 0; i < s->n_ops; i++)
    PSIM_CHECK(check_op(v, i));
  if (s->sync == PSIM_SYNC_PS)
    PSIM_CHECK(check_device_list(v, s->ps.servers, s->ps.n_servers,
                                 "gradient_sync.parameter_server.servers"));
  return PSIM_OK;
}

psim_status psim_strategy_validate(const psim_strategy *s, const psim_model *m,
                                   const psim_cluster *c, const char *file) {
  vctx v = {s, m, c, file, NULL, 0, {NULL}, {0}, 0};
  v.mark = psim_calloc((size_t)(c->n_devices > 0 ? c->n_devices : 1), sizeof *v.mark);
  if (!v.mark)
    return psim_error(PSIM_ENOMEM, "out of memory validating a strategy");
  psim_status st = validate(&v);
  psim_free(v.mark);
  return st;
}

/* ---- equality ---- */

static bool ints_equal(const int32_t *a, const int32_t *b, int32_t n) {
  return n <= 0 || memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

static bool op_equal(const psim_op_config *a, const psim_op_config *b) {
  return memcmp(a->degree, b->degree, sizeof a->degree) == 0 && a->replicas == b->replicas &&
         a->n_devices == b->n_devices && a->stage == b->stage &&
         ints_equal(a->devices, b->devices, a->n_devices);
}

static bool scalars_equal(const psim_strategy *a, const psim_strategy *b) {
  return a->n_ops == b->n_ops && a->n_stages == b->n_stages &&
         a->virtual_stages == b->virtual_stages && a->n_micro == b->n_micro &&
         a->micro_batch == b->micro_batch && a->schedule == b->schedule &&
         a->recompute == b->recompute && a->recompute_every == b->recompute_every &&
         psim_strategy_partial_recompute(a) == psim_strategy_partial_recompute(b) &&
         (!psim_strategy_partial_recompute(a) || (a->recompute_method == b->recompute_method &&
                                                  a->recompute_layers == b->recompute_layers)) &&
         a->sequence_parallel == b->sequence_parallel && a->zero_stage == b->zero_stage &&
         a->dp_replicate == b->dp_replicate && a->async_tp == b->async_tp && a->fp8 == b->fp8 &&
         a->overlap_grad_reduce == b->overlap_grad_reduce &&
         a->overlap_param_gather == b->overlap_param_gather && a->bucket_bytes == b->bucket_bytes &&
         a->zero_prefetch == b->zero_prefetch && /* bucket_given not: see strategy.h */
         a->allreduce == b->allreduce && a->sync == b->sync &&
         strcmp(a->tmpl.name, b->tmpl.name) == 0 && a->tmpl.tp == b->tmpl.tp &&
         a->tmpl.pp == b->tmpl.pp && a->tmpl.dp == b->tmpl.dp &&
         a->tmpl.micro_batch == b->tmpl.micro_batch &&
         a->tmpl.virtual_stages == b->tmpl.virtual_stages && a->tmpl.ep == b->tmpl.ep &&
         a->tmpl.etp == b->tmpl.etp && a->tmpl.cp == b->tmpl.cp;
}

static bool ps_equal(const psim_ps_config *a, const psim_ps_config *b) {
  return a->n_servers == b->n_servers && a->mode == b->mode && a->backup_k == b->backup_k &&
         a->replicas == b->replicas && ints_equal(a->servers, b->servers, a->n_servers);
}

bool psim_strategy_equal(const psim_strategy *a, const psim_strategy *b) {
  if (!scalars_equal(a, b) || !ps_equal(&a->ps, &b->ps))
    return false;
  if ((a->op_layer != NULL) != (b->op_layer != NULL) || a->n_op_layers != b->n_op_layers ||
      (a->op_layer && !ints_equal(a->op_layer, b->op_layer, a->n_ops)))
    return false;
  for (int32_t i = 0; i < a->n_ops; i++)
    if (!op_equal(&a->ops[i], &b->ops[i]))
      return false;
  for (int32_t i = 0; i < a->n_stages * a->virtual_stages; i++) {
    const psim_stage *x = &a->stages[i], *y = &b->stages[i];
    if (x->first_layer != y->first_layer || x->last_layer != y->last_layer || !sets_equal(x, y))
      return false;
  }
  return true;
}
