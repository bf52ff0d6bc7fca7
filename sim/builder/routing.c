/* routing.c - routed tokens per expert (routing.h): the routings, and the
 * builder's hooks that make an expert-split op's kernels and its all-to-all
 * transfers follow the tokens its experts receive. */
#include "sim/builder/routing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/builder/build_impl.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"

/* ---- routings --------------------------------------------------------------- */

static psim_status parse_number(const char *spec, const char *s, double lo, double hi,
                                double *out) {
  char *end = NULL;
  double v = strtod(s, &end);
  if (end == s || *end != '\0' || !(v >= lo && v < hi))
    return psim_error(PSIM_EINPUT, "--routing '%s': the parameter must be a number in [%g, %g)",
                      spec, lo, hi);
  *out = v;
  return PSIM_OK;
}

static psim_status parse_counts(const char *file, psim_routing *r) {
  cJSON *root = NULL;
  PSIM_CHECK(psim_json_load_file(file, &root));
  psim_jctx c;
  psim_jctx_init(&c, file);
  psim_status st = psim_json_expect_array(&c, root);
  int32_t n = st == PSIM_OK ? cJSON_GetArraySize(root) : 0;
  if (st == PSIM_OK && (n < 1 || n > (1 << 20)))
    st = psim_jerr(&c, "expected 1 to %d per-expert token counts, found %d", 1 << 20, n);
  r->counts = st == PSIM_OK ? psim_calloc((size_t)n, sizeof *r->counts) : NULL;
  if (st == PSIM_OK && !r->counts)
    st = psim_error(PSIM_ENOMEM, "out of memory for %s", file);
  double sum = 0;
  for (int32_t i = 0; i < n && st == PSIM_OK; i++) {
    const cJSON *v = cJSON_GetArrayItem(root, i);
    size_t saved = psim_jctx_index(&c, (size_t)i);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || !isfinite(v->valuedouble))
      st = psim_jerr(&c, "a token count must be a finite number >= 0");
    else
      sum += r->counts[i] = v->valuedouble;
    psim_jctx_pop(&c, saved);
  }
  if (st == PSIM_OK && !(sum > 0))
    st = psim_jerr(&c, "the token counts are all zero");
  cJSON_Delete(root);
  r->n_counts = n;
  return st;
}

psim_status psim_routing_parse(const char *spec, psim_routing *r) {
  memset(r, 0, sizeof *r);
  if (strcmp(spec, "uniform") == 0) {
    r->kind = PSIM_ROUTING_UNIFORM;
    return PSIM_OK;
  }
  if (strncmp(spec, "zipf:", 5) == 0) {
    r->kind = PSIM_ROUTING_ZIPF;
    return parse_number(spec, spec + 5, 0, 64, &r->param);
  }
  if (strncmp(spec, "maxvio:", 7) == 0) {
    r->kind = PSIM_ROUTING_MAXVIO;
    return parse_number(spec, spec + 7, 0, 1, &r->param);
  }
  if (strncmp(spec, "counts:", 7) == 0 && spec[7]) {
    r->kind = PSIM_ROUTING_COUNTS;
    psim_status st = parse_counts(spec + 7, r);
    if (st != PSIM_OK)
      psim_routing_destroy(r);
    return st;
  }
  return psim_error(PSIM_EINPUT, "--routing is uniform, zipf:S, maxvio:V or counts:FILE, not '%s'",
                    spec);
}

void psim_routing_destroy(psim_routing *r) {
  psim_free(r->counts);
  memset(r, 0, sizeof *r);
}

/* The expert dim of a dispatch's output (role expert), or -1. */
static int32_t dispatch_expert_dim(const psim_model *m, const psim_op *op) {
  const psim_tensor *t = &m->tensors[op->out[0]];
  for (int32_t j = 0; j < t->rank; j++)
    if (m->dims[t->dims[j]].role == PSIM_ROLE_EXPERT)
      return t->dims[j];
  return -1;
}

psim_status psim_routing_check_model(const psim_routing *r, const psim_model *m) {
  if (!r || r->kind != PSIM_ROUTING_COUNTS)
    return PSIM_OK;
  for (int32_t o = 0; o < m->n_ops; o++) {
    const psim_op *op = &m->ops[o];
    int32_t d = op->kind == PSIM_OP_DISPATCH ? dispatch_expert_dim(m, op) : -1;
    if (d >= 0 && m->dims[d].size != r->n_counts)
      return psim_error(PSIM_EINPUT,
                        "--routing counts: %d token counts, but op '%s' routes to %lld experts",
                        r->n_counts, op->name, (long long)m->dims[d].size);
  }
  return PSIM_OK;
}

/* Unnormalised popularity of expert e of n (the share is it over the sum). */
static double weight(const psim_routing *r, int32_t e, int32_t n) {
  switch (r->kind) {
  case PSIM_ROUTING_ZIPF: return pow((double)e + 1, -r->param);
  case PSIM_ROUTING_MAXVIO: return n > 1 ? 1 + r->param * (1 - 2.0 * e / (n - 1)) : 1;
  case PSIM_ROUTING_COUNTS: /* checked to be n long (check_model); else resampled */
    return r->counts[(int64_t)e * r->n_counts / n];
  default: return 1;
  }
}

double psim_routing_load(const psim_routing *r, int32_t n, int32_t lo, int32_t hi, double mean,
                         double cap) {
  if (r->kind == PSIM_ROUTING_UNIFORM) { /* exact: no rounding of n (1 / n) */
    double per = cap > 0 && cap < mean ? cap : mean;
    return per * (hi - lo);
  }
  double sum = 0, load = 0;
  for (int32_t e = 0; e < n; e++)
    sum += weight(r, e, n);
  for (int32_t e = lo; e < hi; e++) {
    double count = n * weight(r, e, n) / sum * mean;
    load += cap > 0 && count > cap ? cap : count;
  }
  return load;
}

double psim_routing_share(const psim_routing *r, int32_t n, int32_t lo, int32_t hi) {
  if (!r || r->kind == PSIM_ROUTING_UNIFORM || n < 1)
    return n > 0 ? (double)(hi - lo) / n : 0;
  double sum = 0, part = 0;
  for (int32_t e = 0; e < n; e++) {
    double w = weight(r, e, n);
    sum += w;
    part += e >= lo && e < hi ? w : 0;
  }
  return sum > 0 ? part / sum : 0;
}

double psim_routing_hit_prob(int32_t n, int32_t top_k, int32_t m, double share) {
  if (m <= 0 || share <= 0)
    return 0;
  if (m >= n || share >= 1)
    return 1;
  double a = (1 - share) / (n - m), miss = 1;
  for (int32_t i = 0; i < top_k && miss > 0; i++) {
    double rest = 1 - i * a; /* what the draws so far left */
    miss *= rest > 0 ? fmax(0, 1 - share - i * a) / rest : 0;
  }
  return 1 - miss;
}

/* ---- the builder's hooks ------------------------------------------------------ */

/* A mixture-of-experts layer as its dispatch defines it. */
typedef struct moe_layer {
  const psim_routing *r;    /* NULL: inactive (the default for capacity dispatches) */
  int32_t expert, capacity; /* model dims */
  int32_t n_experts;
  double mean, cap; /* tokens per expert per sample; cap 0 = dropless */
  double cdim;      /* the capacity dim's size */
} moe_layer;

static const psim_routing default_routing = {PSIM_ROUTING_MAXVIO, PSIM_ROUTING_DEFAULT_MAXVIO, NULL,
                                             0};

/* The capacity dim of a dispatch: the output's dim that no input has. */
static int32_t capacity_dim(const psim_model *m, const psim_op *op) {
  const psim_tensor *t = &m->tensors[op->out[0]];
  for (int32_t j = 0; j < t->rank; j++) {
    bool in = false;
    for (int32_t i = 0; i < op->n_in && !in; i++)
      in = psim_build_dim_in_tensor(&m->tensors[op->in[i]], t->dims[j]);
    if (!in)
      return t->dims[j];
  }
  return -1;
}

/* The layer of op o (its dispatch: o or the last one before it in o's layer);
 * false when there is none or routing leaves it alone. */
static bool find_layer(const psim_build *b, int32_t o, moe_layer *ml) {
  const psim_model *m = b->m;
  int32_t q = o;
  while (q >= 0 && m->ops[q].layer == m->ops[o].layer && m->ops[q].kind != PSIM_OP_DISPATCH)
    q--;
  if (q < 0 || m->ops[q].layer != m->ops[o].layer)
    return false;
  const psim_op *d = &m->ops[q];
  ml->r = b->o->routing ? b->o->routing : d->attrs.dropless ? &default_routing : NULL;
  ml->expert = dispatch_expert_dim(m, d);
  ml->capacity = capacity_dim(m, d);
  if (!ml->r || ml->expert < 0 || ml->capacity < 0)
    return false;
  double tokens = 1; /* per sample: the input's dims the output lacks (the sequence) */
  const psim_tensor *x = &m->tensors[d->in[0]];
  for (int32_t j = 0; j < x->rank; j++)
    if (!psim_build_dim_in_tensor(&m->tensors[d->out[0]], x->dims[j]))
      tokens *= (double)psim_build_dim_size(b, x->dims[j]);
  ml->n_experts = (int32_t)m->dims[ml->expert].size;
  ml->cdim = (double)psim_build_dim_size(b, ml->capacity);
  ml->mean = d->attrs.dropless ? ml->cdim : d->attrs.top_k * tokens / ml->n_experts;
  ml->cap = d->attrs.dropless ? 0 : ml->cdim;
  return true;
}

/* Routed tokens of experts [lo, hi) over what the capacity dim holds for them. */
static double load_ratio(const moe_layer *ml, int64_t lo, int64_t hi) {
  if (hi <= lo)
    return 1;
  double load =
      psim_routing_load(ml->r, ml->n_experts, (int32_t)lo, (int32_t)hi, ml->mean, ml->cap);
  return load / ((double)(hi - lo) * ml->cdim);
}

/* Whether op has a dim with role expert (the cheap test before find_layer). */
static bool has_expert_dim(const psim_model *m, const psim_op *op) {
  for (int32_t i = 0; i < op->n_dims; i++)
    if (m->dims[op->dims[i].dim].role == PSIM_ROLE_EXPERT)
      return true;
  return false;
}

void psim_routing_shard_extents(const psim_build *b, int32_t o, int32_t shard, int64_t *ext) {
  const psim_op *op = &b->m->ops[o];
  moe_layer ml;
  if (!has_expert_dim(b->m, op) || !find_layer(b, o, &ml))
    return;
  int32_t ie = psim_op_dim_index(op, ml.expert), ic = psim_op_dim_index(op, ml.capacity);
  if (ie < 0 || ic < 0)
    return;
  const psim_op_config *cfg = &b->s->ops[o];
  int32_t coord[PSIM_MAX_OP_DIMS];
  psim_build_shard_coords(op, cfg, shard, coord);
  int64_t lo = psim_build_shard_offset(ml.n_experts, cfg->degree[ie], coord[ie]);
  double tokens = ceil((double)ext[ic] * load_ratio(&ml, lo, lo + ext[ie]) - 1e-9);
  ext[ic] = tokens >= 1 ? (int64_t)tokens : 1;
}

double psim_routing_bytes_scale(const psim_build *b, int32_t t, const psim_region *a,
                                const psim_region *c) {
  const psim_tensor *ten = &b->m->tensors[t];
  int32_t je = -1;
  for (int32_t j = 0; j < ten->rank; j++)
    if (b->m->dims[ten->dims[j]].role == PSIM_ROLE_EXPERT)
      je = j;
  moe_layer ml;
  if (je < 0 || ten->producer < 0 || !find_layer(b, ten->producer, &ml) ||
      !psim_build_dim_in_tensor(ten, ml.capacity))
    return 1;
  int64_t lo = a->lo[je] > c->lo[je] ? a->lo[je] : c->lo[je];
  int64_t hi = a->hi[je] < c->hi[je] ? a->hi[je] : c->hi[je];
  return load_ratio(&ml, lo, hi);
}

/* The routed tensor of a dispatch or combine (its [batch, expert, capacity,
 * ...] side), its token tensor, or -1 when op is neither. */
static int32_t routed_tensor(const psim_op *op, int32_t *tok) {
  bool disp = op->kind == PSIM_OP_DISPATCH;
  if (!disp && op->kind != PSIM_OP_COMBINE)
    return -1;
  *tok = disp ? op->in[0] : op->out[0];
  return disp ? op->out[0] : op->in[0];
}

bool psim_routing_token_dim(const psim_model *m, const psim_op *op, int32_t t, int32_t d) {
  int32_t tok = -1;
  return routed_tensor(op, &tok) == t && psim_build_dim_in_tensor(&m->tensors[tok], d) &&
         !psim_build_dim_in_tensor(&m->tensors[t], d);
}

void psim_routing_token_region(const psim_build *b, int32_t o, const int32_t *coord, int32_t t,
                               psim_region *r) {
  const psim_op *op = &b->m->ops[o];
  const psim_op_config *cfg = &b->s->ops[o];
  const psim_tensor *ten = &b->m->tensors[t];
  int32_t tok = -1, jc = -1;
  if (routed_tensor(op, &tok) != t)
    return;
  for (int32_t j = 0; j < ten->rank; j++) /* the capacity dim: neither a token's nor an expert */
    if (!psim_build_dim_in_tensor(&b->m->tensors[tok], ten->dims[j]) &&
        b->m->dims[ten->dims[j]].role != PSIM_ROLE_EXPERT)
      jc = j;
  for (int32_t i = 0; i < op->n_dims && jc >= 0; i++) {
    if (cfg->degree[i] == 1 || !psim_routing_token_dim(b->m, op, t, op->dims[i].dim))
      continue;
    int64_t n = r->hi[jc] - r->lo[jc];
    r->lo[jc] += psim_build_shard_offset(n, cfg->degree[i], coord[i]);
    r->hi[jc] = r->lo[jc] + psim_shard_size(n, cfg->degree[i], coord[i]);
  }
}

bool psim_routing_expert_tensor(const psim_model *m, int32_t t) {
  const psim_tensor *ten = &m->tensors[t];
  for (int32_t j = 0; j < ten->rank; j++)
    if (m->dims[ten->dims[j]].role == PSIM_ROLE_EXPERT)
      return true;
  return false;
}

bool psim_routing_layer_shape(const psim_build *b, int32_t t, int32_t *n_experts, int32_t *top_k,
                              const psim_routing **r) {
  static const psim_routing uniform = {PSIM_ROUTING_UNIFORM, 0, NULL, 0};
  const psim_model *m = b->m;
  int32_t q = m->tensors[t].producer;
  if (q < 0 || !psim_routing_expert_tensor(m, t))
    return false;
  int32_t layer = m->ops[q].layer;
  while (q >= 0 && m->ops[q].layer == layer && m->ops[q].kind != PSIM_OP_DISPATCH)
    q--;
  if (q < 0 || m->ops[q].layer != layer)
    return false;
  int32_t d = dispatch_expert_dim(m, &m->ops[q]);
  if (d < 0 || m->ops[q].attrs.top_k < 1)
    return false;
  moe_layer ml;
  *n_experts = (int32_t)m->dims[d].size;
  *top_k = m->ops[q].attrs.top_k;
  *r = find_layer(b, q, &ml) ? ml.r : &uniform;
  return true;
}

bool psim_routing_symmetric(const psim_build *b) {
  if (b->o->routing && b->o->routing->kind == PSIM_ROUTING_UNIFORM)
    return true;
  for (int32_t o = 0; o < b->m->n_ops; o++) {
    const psim_op *op = &b->m->ops[o];
    moe_layer ml;
    if (!has_expert_dim(b->m, op) || !find_layer(b, o, &ml))
      continue;
    int32_t ie = psim_op_dim_index(op, ml.expert);
    if (ie >= 0 && b->s->ops[o].degree[ie] > 1)
      return false;
  }
  return true;
}
