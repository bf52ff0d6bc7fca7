/* opkind.c - what each op kind means: its keys, dim rules, iteration space,
 * FLOPs and bytes (docs/model.md has the same table in prose).
 *
 * FLOP counts of memory-bound kinds are the operation counts of the textbook
 * expression (one FLOP per add, multiply, divide, exp, tanh, max); they are
 * small next to matmuls and only matter for roofline estimates of these
 * bandwidth-bound kernels. Matmul, attention and conv counts are the standard
 * 2 FLOPs per multiply-accumulate (Narayanan et al. 2021, eq. 3; Korthikanti
 * et al. 2022, section 4). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/model_priv.h"

#define IN(i)  (&m->tensors[op->in[i]])
#define OUT(i) (&m->tensors[op->out[i]])

/* ---------------------------------------------------------------- names */

static const char *const dtype_names[PSIM_DTYPE_COUNT] = {"fp32", "fp16",  "bf16",  "fp8",
                                                          "fp64", "int32", "int64", "bool"};
static const size_t dtype_sizes[PSIM_DTYPE_COUNT] = {4, 2, 2, 1, 8, 4, 8, 1};
static const char *const role_names[PSIM_ROLE_COUNT] = {"none",   "batch",    "sequence", "hidden",
                                                        "heads",  "head_dim", "ffn",      "vocab",
                                                        "expert", "channel",  "spatial"};
static const char *const kind_names[PSIM_OP_KIND_COUNT] = {
    "matmul",    "elementwise", "dropout",       "softmax",  "layernorm", "rmsnorm",
    "attention", "embedding",   "cross_entropy", "conv2d",   "pool2d",    "concat",
    "split",     "reshape",     "transpose",     "dispatch", "combine"};

size_t psim_dtype_bytes(psim_dtype t) {
  return t < PSIM_DTYPE_COUNT ? dtype_sizes[t] : 0;
}
const char *psim_dtype_name(psim_dtype t) {
  return t < PSIM_DTYPE_COUNT ? dtype_names[t] : "?";
}
const char *psim_role_name(psim_role r) {
  return r < PSIM_ROLE_COUNT ? role_names[r] : "?";
}
const char *psim_op_kind_name(psim_op_kind k) {
  return k < PSIM_OP_KIND_COUNT ? kind_names[k] : "?";
}

static int find_name(const char *const *names, int n, const char *s) {
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], s) == 0)
      return i;
  return -1;
}

psim_status psim_dtype_parse(const char *s, psim_dtype *out) {
  int i = find_name(dtype_names, PSIM_DTYPE_COUNT, s);
  if (i < 0)
    return psim_error(PSIM_EINPUT,
                      "unknown dtype '%.60s'; expected one of: fp32, fp16, bf16, "
                      "fp8, fp64, int32, int64, bool",
                      s);
  *out = (psim_dtype)i;
  return PSIM_OK;
}

psim_status psim_role_parse(const char *s, psim_role *out) {
  int i = find_name(role_names, PSIM_ROLE_COUNT, s);
  if (i < 0)
    return psim_error(PSIM_EINPUT,
                      "unknown role '%.60s'; expected one of: batch, sequence, "
                      "hidden, heads, head_dim, ffn, vocab, expert, channel, "
                      "spatial, none",
                      s);
  *out = (psim_role)i;
  return PSIM_OK;
}

psim_status psim_op_kind_parse(const char *s, psim_op_kind *out) {
  int i = strcmp(s, "einsum") == 0 ? PSIM_OP_MATMUL : find_name(kind_names, PSIM_OP_KIND_COUNT, s);
  if (i < 0)
    return psim_error(PSIM_EINPUT,
                      "unknown op kind '%.60s'; expected one of: matmul, einsum, "
                      "elementwise, dropout, softmax, layernorm, rmsnorm, "
                      "attention, embedding, cross_entropy, conv2d, pool2d, concat, "
                      "split, reshape, transpose, dispatch, combine",
                      s);
  *out = (psim_op_kind)i;
  return PSIM_OK;
}

/* ------------------------------------------------------- elementwise fns */

typedef struct ew_fn {
  const char *name;
  int min_in, max_in;
  double fwd, bwd; /* FLOPs per output element (operation count of the expression) */
} ew_fn;

static const ew_fn ew_fns[] = {
    {"add", 2, 4, 1, 1},     {"sub", 2, 2, 1, 1},  {"mul", 2, 4, 1, 2},    {"div", 2, 2, 1, 3},
    {"max", 2, 2, 1, 1},     {"min", 2, 2, 1, 1},  {"scale", 1, 1, 1, 1},  {"mask", 1, 2, 1, 1},
    {"neg", 1, 1, 1, 1},     {"exp", 1, 1, 1, 1},  {"square", 1, 1, 1, 2}, {"sqrt", 1, 1, 1, 2},
    {"rsqrt", 1, 1, 1, 3},   {"relu", 1, 1, 1, 1}, {"gelu", 1, 1, 8, 13},  {"silu", 1, 1, 4, 6},
    {"sigmoid", 1, 1, 3, 3}, {"tanh", 1, 1, 1, 3}, {"swiglu", 2, 2, 5, 8}, {"copy", 1, 1, 0, 0},
    {"cast", 1, 1, 0, 0},
};
enum { N_EW_FNS = sizeof ew_fns / sizeof ew_fns[0] };

static const ew_fn *ew_find(const char *name) {
  for (int i = 0; i < N_EW_FNS; i++)
    if (strcmp(ew_fns[i].name, name) == 0)
      return &ew_fns[i];
  return NULL;
}

/* --------------------------------------------------------------- helpers */

static int tpos(const psim_tensor *t, int32_t d) {
  for (int k = 0; k < t->rank; k++)
    if (t->dims[k] == d)
      return k;
  return -1;
}

static const char *dn(const psim_model *m, int32_t d) {
  return m->dims[d].name;
}

static psim_status io_err(psim_jctx *c, const char *key, int i, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static psim_status io_err(psim_jctx *c, const char *key, int i, const char *fmt, ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  size_t sv = psim_jctx_key(c, key);
  if (i >= 0)
    psim_jctx_index(c, (size_t)i);
  psim_status s = psim_jerr(c, "%s", msg);
  psim_jctx_pop(c, sv);
  return s;
}

static psim_status add_iter(psim_jctx *c, psim_op *op, int32_t d, psim_dim_use use) {
  if (psim_op_dim_index(op, d) >= 0)
    return PSIM_OK;
  if (op->n_dims >= PSIM_MAX_OP_DIMS)
    return psim_jerr(c, "the op loops over more than %d dims (PSIM_MAX_OP_DIMS)", PSIM_MAX_OP_DIMS);
  op->dims[op->n_dims].dim = d;
  op->dims[op->n_dims].use = use;
  op->dims[op->n_dims].in_weight = false;
  op->n_dims++;
  return PSIM_OK;
}

static psim_status add_dims(psim_jctx *c, psim_op *op, const psim_tensor *t, psim_dim_use use) {
  for (int k = 0; k < t->rank; k++)
    PSIM_CHECK(add_iter(c, op, t->dims[k], use));
  return PSIM_OK;
}

/* Fails unless every dim of in[i] is a dim of o. */
static psim_status subset_of(psim_jctx *c, const psim_model *m, const psim_op *op, int i,
                             const psim_tensor *o, const char *why) {
  const psim_tensor *t = IN(i);
  for (int k = 0; k < t->rank; k++)
    if (tpos(o, t->dims[k]) < 0)
      return io_err(c, "in", i, "dim '%s' of '%s' is not a dim of '%s'; %s", dn(m, t->dims[k]),
                    t->name, o->name, why);
  return PSIM_OK;
}

/* Fails unless in[i] and out[0] have the same dims (as a set). */
static psim_status same_dims(psim_jctx *c, const psim_model *m, const psim_op *op, int i) {
  const psim_tensor *t = IN(i), *o = OUT(0);
  if (t->rank != o->rank)
    return io_err(c, "out", 0, "'%s' has %d dims but input '%s' has %d; expected the same dims",
                  o->name, o->rank, t->name, t->rank);
  return subset_of(c, m, op, i, o, "expected the same dims as the output");
}

static bool is_weight(const psim_model *m, int32_t t) {
  return m->tensors[t].kind == PSIM_TENSOR_WEIGHT;
}

/* Reads "axis": a dim name or an array of dim names, each a dim of t. */
static psim_status parse_axis(psim_jctx *c, const psim_model *m, const cJSON *j, bool required,
                              const psim_tensor *t, psim_op *op) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "axis");
  if (!a)
    return required ? psim_jerr(c, "missing required key 'axis' (a dim name or a list)") : PSIM_OK;
  size_t sv = psim_jctx_key(c, "axis");
  psim_status s = PSIM_OK;
  int n = cJSON_IsString(a) ? 1 : cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
  if (n < 1 || n > PSIM_MAX_RANK)
    s = psim_jerr(c, "expected a dim name or a list of 1 to %d dim names", PSIM_MAX_RANK);
  for (int i = 0; s == PSIM_OK && i < n; i++) {
    const cJSON *e = cJSON_IsString(a) ? a : cJSON_GetArrayItem(a, i);
    int32_t d = cJSON_IsString(e) ? psim_model_find_dim(m, e->valuestring) : -2;
    if (d == -2)
      s = psim_jerr(c, "expected dim names (strings)");
    else if (d < 0 || tpos(t, d) < 0)
      s = psim_jerr(c, "'%.80s' is not a dim of '%s'", e->valuestring, t->name);
    else
      op->attrs.axis_dims[op->attrs.n_axis_dims++] = d;
  }
  psim_jctx_pop(c, sv);
  return s;
}

/* Reads an [h, w] pair (or one integer for both) into out; def when absent. */
static psim_status parse_pair(psim_jctx *c, const cJSON *j, const char *key, int64_t def,
                              int64_t min, int64_t out[2]) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
  out[0] = out[1] = def;
  if (!v)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, key);
  psim_status s = PSIM_OK;
  if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2) {
    for (int i = 0; i < 2 && s == PSIM_OK; i++) {
      size_t si = psim_jctx_index(c, (size_t)i);
      s = psim_json_value_int(c, cJSON_GetArrayItem(v, i), min, 1 << 20, &out[i]);
      psim_jctx_pop(c, si);
    }
  } else if (cJSON_IsNumber(v)) {
    s = psim_json_value_int(c, v, min, 1 << 20, &out[0]);
    out[1] = out[0];
  } else {
    s = psim_jerr(c, "expected an integer or a list [h, w] of two integers");
  }
  psim_jctx_pop(c, sv);
  return s;
}

static void mark_weight_dims(const psim_model *m, psim_op *op) {
  for (int i = 0; i < op->n_in; i++) {
    if (!is_weight(m, op->in[i]))
      continue;
    const psim_tensor *t = IN(i);
    for (int k = 0; k < t->rank; k++) {
      int x = psim_op_dim_index(op, t->dims[k]);
      if (x >= 0)
        op->dims[x].in_weight = true;
    }
  }
}

/* ------------------------------------------------------------- analysers */

static psim_status an_matmul(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  (void)j;
  const psim_tensor *a = IN(0), *b = IN(1), *o = OUT(0);
  for (int k = 0; k < o->rank; k++) {
    int32_t d = o->dims[k];
    if (tpos(a, d) < 0 && tpos(b, d) < 0)
      return io_err(c, "out", 0,
                    "dim '%s' of '%s' is in neither input ('%s', '%s'); a "
                    "matmul's output dims must come from its inputs",
                    dn(m, d), o->name, a->name, b->name);
    PSIM_CHECK(add_iter(c, op, d, PSIM_USE_OUTPUT));
  }
  PSIM_CHECK(add_dims(c, op, a, PSIM_USE_CONTRACTED));
  PSIM_CHECK(add_dims(c, op, b, PSIM_USE_CONTRACTED));
  if (op->n_in == 3)
    PSIM_CHECK(subset_of(c, m, op, 2, o, "a matmul's third input is a bias added to the output"));
  return PSIM_OK;
}

static psim_status an_elementwise(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  const char *fn = NULL;
  PSIM_CHECK(psim_json_string(c, j, "fn", true, &fn));
  const ew_fn *f = ew_find(fn);
  if (!f) {
    char list[400] = "";
    for (int i = 0; i < N_EW_FNS; i++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
               ew_fns[i].name);
    size_t sv = psim_jctx_key(c, "fn");
    psim_status s = psim_jerr(c, "unknown function '%.60s'; expected one of: %s", fn, list);
    psim_jctx_pop(c, sv);
    return s;
  }
  if (op->n_in < f->min_in || op->n_in > f->max_in)
    return io_err(c, "in", -1, "'%s' takes %d to %d inputs, found %d", f->name, f->min_in,
                  f->max_in, op->n_in);
  for (int i = 0; i < op->n_in; i++)
    PSIM_CHECK(subset_of(c, m, op, i, OUT(0), "elementwise inputs must broadcast to the output"));
  return add_dims(c, op, OUT(0), PSIM_USE_OUTPUT);
}

static psim_status an_dropout(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  op->attrs.dropout_p = 0.1;
  PSIM_CHECK(psim_json_number(c, j, "p", false, 0.0, 0.999999, &op->attrs.dropout_p));
  PSIM_CHECK(same_dims(c, m, op, 0));
  return add_dims(c, op, OUT(0), PSIM_USE_OUTPUT);
}

/* softmax, layernorm, rmsnorm: out = in[0] dims; axis dims NORMALIZED. */
static psim_status an_norm(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  const psim_tensor *x = IN(0);
  PSIM_CHECK(same_dims(c, m, op, 0));
  PSIM_CHECK(parse_axis(c, m, j, op->kind == PSIM_OP_SOFTMAX, x, op));
  if (op->attrs.n_axis_dims == 0) {
    if (x->rank == 0)
      return io_err(c, "in", 0, "'%s' has no dims to normalise", x->name);
    op->attrs.axis_dims[op->attrs.n_axis_dims++] = x->dims[x->rank - 1];
  }
  for (int k = 0; k < op->attrs.n_axis_dims; k++)
    PSIM_CHECK(add_iter(c, op, op->attrs.axis_dims[k], PSIM_USE_NORMALIZED));
  for (int i = 1; i < op->n_in; i++) { /* gamma, beta: over the axis dims */
    const psim_tensor *g = IN(i);
    for (int k = 0; k < g->rank; k++)
      if (psim_op_dim_index(op, g->dims[k]) < 0 ||
          op->dims[psim_op_dim_index(op, g->dims[k])].use != PSIM_USE_NORMALIZED)
        return io_err(c, "in", i, "dim '%s' of '%s' is not a normalised (axis) dim",
                      dn(m, g->dims[k]), g->name);
  }
  return add_dims(c, op, OUT(0), PSIM_USE_OUTPUT);
}

/* q [b, s, h, d], k and v [b, s_kv, h_kv, d] -> o [b, s, h, d]. */
static psim_status an_attention(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  PSIM_CHECK(psim_json_bool(c, j, "causal", false, &op->attrs.causal));
  PSIM_CHECK(psim_json_bool(c, j, "flash", false, &op->attrs.flash));
  const psim_tensor *q = IN(0), *k = IN(1), *v = IN(2), *o = OUT(0);
  for (int i = 0; i < 3; i++)
    if (IN(i)->rank != 4)
      return io_err(c, "in", i,
                    "'%s' has %d dims; attention expects [batch, seq, heads, "
                    "head_dim]",
                    IN(i)->name, IN(i)->rank);
  if (o->rank != 4 || memcmp(o->dims, q->dims, sizeof q->dims[0] * 4) != 0)
    return io_err(c, "out", 0, "'%s' must have the dims of the query '%s'", o->name, q->name);
  if (memcmp(k->dims, v->dims, sizeof k->dims[0] * 4) != 0)
    return io_err(c, "in", 2, "'%s' must have the dims of the key '%s'", v->name, k->name);
  if (k->dims[0] != q->dims[0] || k->dims[3] != q->dims[3])
    return io_err(c, "in", 1,
                  "'%s' must share the batch dim (first) and head_dim (last) of "
                  "the query '%s'",
                  k->name, q->name);
  int64_t h = m->dims[q->dims[2]].size, hkv = m->dims[k->dims[2]].size;
  if (h % hkv != 0)
    return io_err(c, "in", 1, "key heads (%lld) must divide query heads (%lld)", (long long)hkv,
                  (long long)h);
  PSIM_CHECK(add_iter(c, op, q->dims[0], PSIM_USE_OUTPUT));
  PSIM_CHECK(add_iter(c, op, q->dims[1], PSIM_USE_OUTPUT));
  PSIM_CHECK(add_iter(c, op, q->dims[2], PSIM_USE_OUTPUT));
  PSIM_CHECK(add_iter(c, op, q->dims[3], PSIM_USE_FIXED));
  PSIM_CHECK(add_iter(c, op, k->dims[1], PSIM_USE_FIXED));
  return add_iter(c, op, k->dims[2], PSIM_USE_OUTPUT);
}

/* ids [..], table [vocab, hidden] -> out [.., hidden]. */
static psim_status an_embedding(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  (void)j;
  const psim_tensor *ids = IN(0), *tab = IN(1), *o = OUT(0);
  if (tab->rank != 2)
    return io_err(c, "in", 1, "the table '%s' must have 2 dims [vocab, hidden], found %d",
                  tab->name, tab->rank);
  if (tpos(ids, tab->dims[0]) >= 0 || tpos(ids, tab->dims[1]) >= 0)
    return io_err(c, "in", 0, "the ids '%s' must not carry the table's dims", ids->name);
  bool ok = o->rank == ids->rank + 1 && o->dims[ids->rank] == tab->dims[1];
  for (int k = 0; ok && k < ids->rank; k++)
    ok = o->dims[k] == ids->dims[k];
  if (!ok)
    return io_err(c, "out", 0, "'%s' must have the dims of the ids '%s' followed by '%s'", o->name,
                  ids->name, dn(m, tab->dims[1]));
  PSIM_CHECK(add_dims(c, op, o, PSIM_USE_OUTPUT));
  return add_iter(c, op, tab->dims[0], PSIM_USE_CONTRACTED);
}

/* logits [.., vocab], labels [..] -> loss (dims a subset of the labels'). */
static psim_status an_cross_entropy(psim_jctx *c, const psim_model *m, psim_op *op,
                                    const cJSON *j) {
  (void)j;
  const psim_tensor *lg = IN(0), *lb = IN(1), *o = OUT(0);
  int32_t vocab = -1;
  for (int k = 0; k < lg->rank; k++) {
    if (tpos(lb, lg->dims[k]) >= 0)
      continue;
    if (vocab >= 0)
      return io_err(c, "in", 1,
                    "the logits '%s' must have exactly one dim (the classes) that "
                    "the labels '%s' lack; found '%s' and '%s'",
                    lg->name, lb->name, dn(m, vocab), dn(m, lg->dims[k]));
    vocab = lg->dims[k];
  }
  if (vocab < 0)
    return io_err(c, "in", 0, "the logits '%s' need a class dim that the labels lack", lg->name);
  PSIM_CHECK(subset_of(c, m, op, 1, lg, "labels carry the logits' dims without the classes"));
  for (int k = 0; k < o->rank; k++)
    if (tpos(lb, o->dims[k]) < 0)
      return io_err(c, "out", 0, "dim '%s' of the loss '%s' is not a dim of the labels",
                    dn(m, o->dims[k]), o->name);
  PSIM_CHECK(add_dims(c, op, lb, PSIM_USE_OUTPUT));
  return add_iter(c, op, vocab, PSIM_USE_NORMALIZED);
}

/* Checks out = floor((in + 2 pad - kernel) / stride) + 1 for both window dims
 * and records the input dims that differ from the output's. */
static psim_status window_sizes(psim_jctx *c, const psim_model *m, psim_op *op) {
  const psim_tensor *x = IN(0), *o = OUT(0);
  for (int k = 0; k < 2; k++) {
    int64_t in = m->dims[x->dims[2 + k]].size, got = m->dims[o->dims[2 + k]].size;
    int64_t kk = op->attrs.kernel[k], p = op->attrs.pad[k], st = op->attrs.stride[k];
    if (in + 2 * p < kk)
      return io_err(c, "in", 0, "window %lld is larger than the padded input %lld", (long long)kk,
                    (long long)(in + 2 * p));
    int64_t want = (in + 2 * p - kk) / st + 1;
    if (got != want)
      return io_err(c, "out", 0,
                    "dim '%s' of '%s' has size %lld; (%lld + 2*%lld - %lld) / %lld "
                    "+ 1 = %lld",
                    dn(m, o->dims[2 + k]), o->name, (long long)got, (long long)in, (long long)p,
                    (long long)kk, (long long)st, (long long)want);
    op->attrs.window_in[k] = x->dims[2 + k] != o->dims[2 + k] ? x->dims[2 + k] : -1;
  }
  return PSIM_OK;
}

static psim_status rank4(psim_jctx *c, const psim_model *m, const psim_op *op) {
  for (int i = 0; i < op->n_in && i < 2; i++)
    if (IN(i)->rank != 4)
      return io_err(c, "in", i, "'%s' has %d dims; expected 4 (%s)", IN(i)->name, IN(i)->rank,
                    i ? "[cout, cin, kh, kw]" : "[batch, channels, height, width]");
  if (OUT(0)->rank != 4)
    return io_err(c, "out", 0, "'%s' has %d dims; expected 4 [batch, channels, height, width]",
                  OUT(0)->name, OUT(0)->rank);
  return PSIM_OK;
}

/* x [b, cin, h, w], w [cout, cin, kh, kw], bias [cout] -> out [b, cout, h2, w2]. */
static psim_status an_conv2d(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  PSIM_CHECK(rank4(c, m, op));
  const psim_tensor *x = IN(0), *w = IN(1), *o = OUT(0);
  if (o->dims[0] != x->dims[0])
    return io_err(c, "out", 0, "'%s' must start with the batch dim '%s' of '%s'", o->name,
                  dn(m, x->dims[0]), x->name);
  if (w->dims[0] != o->dims[1] || w->dims[1] != x->dims[1])
    return io_err(c, "in", 1, "the weight '%s' must be [cout, cin, kh, kw] = [%s, %s, ..]", w->name,
                  dn(m, o->dims[1]), dn(m, x->dims[1]));
  PSIM_CHECK(parse_pair(c, j, "kernel", 0, 1, op->attrs.kernel));
  for (int k = 0; k < 2; k++) {
    int64_t ks = m->dims[w->dims[2 + k]].size;
    if (op->attrs.kernel[k] && op->attrs.kernel[k] != ks)
      return io_err(c, "kernel", k, "%lld differs from the weight's window dim '%s' (%lld)",
                    (long long)op->attrs.kernel[k], dn(m, w->dims[2 + k]), (long long)ks);
    op->attrs.kernel[k] = ks;
  }
  PSIM_CHECK(parse_pair(c, j, "stride", 1, 1, op->attrs.stride));
  PSIM_CHECK(parse_pair(c, j, "pad", 0, 0, op->attrs.pad));
  PSIM_CHECK(window_sizes(c, m, op));
  if (op->n_in == 3 && (IN(2)->rank != 1 || IN(2)->dims[0] != o->dims[1]))
    return io_err(c, "in", 2, "the bias '%s' must be [%s]", IN(2)->name, dn(m, o->dims[1]));
  PSIM_CHECK(add_iter(c, op, o->dims[0], PSIM_USE_OUTPUT));
  PSIM_CHECK(add_iter(c, op, o->dims[1], PSIM_USE_OUTPUT));
  PSIM_CHECK(add_iter(c, op, o->dims[2], PSIM_USE_WINDOW));
  PSIM_CHECK(add_iter(c, op, o->dims[3], PSIM_USE_WINDOW));
  PSIM_CHECK(add_iter(c, op, x->dims[1], PSIM_USE_CONTRACTED));
  PSIM_CHECK(add_iter(c, op, w->dims[2], PSIM_USE_FIXED));
  return add_iter(c, op, w->dims[3], PSIM_USE_FIXED);
}

static psim_status an_pool2d(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  PSIM_CHECK(rank4(c, m, op));
  const psim_tensor *x = IN(0), *o = OUT(0);
  if (o->dims[0] != x->dims[0] || o->dims[1] != x->dims[1])
    return io_err(c, "out", 0, "'%s' must keep the batch and channel dims of '%s'", o->name,
                  x->name);
  const char *fn = "max";
  PSIM_CHECK(psim_json_string(c, j, "fn", false, &fn));
  if (strcmp(fn, "max") != 0 && strcmp(fn, "avg") != 0)
    return io_err(c, "fn", -1, "unknown pooling '%.40s'; expected max or avg", fn);
  op->fn = psim_strdup(fn);
  if (!op->fn)
    return psim_error(PSIM_ENOMEM, "out of memory");
  if (!cJSON_GetObjectItemCaseSensitive(j, "kernel"))
    return psim_jerr(c, "missing required key 'kernel' ([h, w])");
  PSIM_CHECK(parse_pair(c, j, "kernel", 1, 1, op->attrs.kernel));
  int64_t st[2];
  PSIM_CHECK(parse_pair(c, j, "stride", 0, 1, st));
  for (int k = 0; k < 2; k++)
    op->attrs.stride[k] = st[k] ? st[k] : op->attrs.kernel[k];
  PSIM_CHECK(parse_pair(c, j, "pad", 0, 0, op->attrs.pad));
  PSIM_CHECK(window_sizes(c, m, op));
  PSIM_CHECK(add_iter(c, op, o->dims[0], PSIM_USE_OUTPUT));
  PSIM_CHECK(add_iter(c, op, o->dims[1], PSIM_USE_OUTPUT));
  PSIM_CHECK(add_iter(c, op, o->dims[2], PSIM_USE_WINDOW));
  return add_iter(c, op, o->dims[3], PSIM_USE_WINDOW);
}

/* Checks that the pieces (same rank as whole, equal but at position p, or
 * one rank less with position p removed) add up to whole along p. */
static psim_status pieces_add_up(psim_jctx *c, const psim_model *m, const psim_tensor *whole, int p,
                                 const int32_t *pieces, int n, const char *key) {
  int64_t sum = 0;
  for (int i = 0; i < n; i++) {
    const psim_tensor *t = &m->tensors[pieces[i]];
    bool dropped = t->rank == whole->rank - 1, ok = dropped || t->rank == whole->rank;
    for (int k = 0, q = 0; ok && k < whole->rank; k++) {
      if (k == p && dropped)
        continue;
      ok = k == p || t->dims[q] == whole->dims[k];
      q++;
    }
    if (!ok)
      return io_err(c, key, i, "'%s' must have the dims of '%s' except along '%s'", t->name,
                    whole->name, dn(m, whole->dims[p]));
    sum += dropped ? 1 : m->dims[t->dims[p]].size;
  }
  if (sum != m->dims[whole->dims[p]].size)
    return io_err(c, key, -1, "the pieces add up to %lld along '%s', which has size %lld",
                  (long long)sum, dn(m, whole->dims[p]), (long long)m->dims[whole->dims[p]].size);
  return PSIM_OK;
}

/* concat (pieces = inputs, whole = out) and split (whole = input, pieces = outputs). */
static psim_status an_concat_split(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  bool cat = op->kind == PSIM_OP_CONCAT;
  const psim_tensor *whole = cat ? OUT(0) : IN(0);
  PSIM_CHECK(parse_axis(c, m, j, true, whole, op));
  if (op->attrs.n_axis_dims != 1)
    return psim_jerr(c, "'axis' must name exactly one dim of '%s'", whole->name);
  int p = tpos(whole, op->attrs.axis_dims[0]);
  PSIM_CHECK(pieces_add_up(c, m, whole, p, cat ? op->in : op->out, cat ? op->n_in : op->n_out,
                           cat ? "in" : "out"));
  PSIM_CHECK(add_iter(c, op, whole->dims[p], PSIM_USE_FIXED));
  return add_dims(c, op, whole, PSIM_USE_OUTPUT);
}

static psim_status an_reshape(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  (void)j;
  const psim_tensor *x = IN(0), *o = OUT(0);
  if (psim_tensor_elems(m, x) != psim_tensor_elems(m, o))
    return io_err(c, "out", 0,
                  "'%s' has %.17g elements but '%s' has %.17g; a reshape keeps "
                  "the element count",
                  o->name, psim_tensor_elems(m, o), x->name, psim_tensor_elems(m, x));
  for (int k = 0; k < o->rank; k++)
    PSIM_CHECK(
        add_iter(c, op, o->dims[k], tpos(x, o->dims[k]) >= 0 ? PSIM_USE_OUTPUT : PSIM_USE_FIXED));
  return PSIM_OK;
}

static psim_status an_transpose(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  (void)j;
  PSIM_CHECK(same_dims(c, m, op, 0));
  return add_dims(c, op, OUT(0), PSIM_USE_OUTPUT);
}

static int32_t expert_dim(const psim_model *m, const psim_tensor *t) {
  for (int k = 0; k < t->rank; k++)
    if (m->dims[t->dims[k]].role == PSIM_ROLE_EXPERT)
      return t->dims[k];
  return -1;
}

/* dispatch: x [b, s, h] (+ router [b, s, e]) -> [b, e, capacity, h];
 * combine: y [b, e, capacity, h] (+ gates [b, s, e]) -> [b, s, h]. */
static psim_status an_moe(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  int64_t k = 1;
  PSIM_CHECK(psim_json_int(c, j, "top_k", false, 1, 1024, &k));
  op->attrs.top_k = (int32_t)k;
  bool disp = op->kind == PSIM_OP_DISPATCH;
  const psim_tensor *routed = disp ? OUT(0) : IN(0), *tok = disp ? IN(0) : OUT(0);
  int32_t e = expert_dim(m, routed);
  if (e < 0)
    return io_err(c, disp ? "out" : "in", 0, "'%s' needs a dim with role 'expert'", routed->name);
  if (k > m->dims[e].size)
    return psim_jerr(c, "top_k %lld exceeds the %lld experts", (long long)k,
                     (long long)m->dims[e].size);
  if (tok->rank < 1 || tpos(routed, tok->dims[tok->rank - 1]) < 0)
    return io_err(c, disp ? "in" : "out", 0,
                  "the last (model) dim of '%s' must be a dim of "
                  "'%s'",
                  tok->name, routed->name);
  const psim_tensor *o = OUT(0), *x = IN(0);
  PSIM_CHECK(add_dims(c, op, o, PSIM_USE_OUTPUT));
  for (int q = 0; q < x->rank; q++)
    PSIM_CHECK(add_iter(c, op, x->dims[q], x->dims[q] == e ? PSIM_USE_CONTRACTED : PSIM_USE_FIXED));
  return PSIM_OK;
}

/* ------------------------------------------------------------ kind table */

typedef psim_status (*an_fn)(psim_jctx *, const psim_model *, psim_op *, const cJSON *);

typedef struct kind_info {
  int min_in, max_in, min_out, max_out;
  const char *keys[5];
  an_fn analyse;
} kind_info;

static const kind_info kinds[PSIM_OP_KIND_COUNT] = {
    [PSIM_OP_MATMUL] = {2, 3, 1, 1, {NULL}, an_matmul},
    [PSIM_OP_ELEMENTWISE] = {1, 4, 1, 1, {"fn", NULL}, an_elementwise},
    [PSIM_OP_DROPOUT] = {1, 1, 1, 1, {"p", NULL}, an_dropout},
    [PSIM_OP_SOFTMAX] = {1, 1, 1, 1, {"axis", NULL}, an_norm},
    [PSIM_OP_LAYERNORM] = {1, 3, 1, 1, {"axis", NULL}, an_norm},
    [PSIM_OP_RMSNORM] = {1, 2, 1, 1, {"axis", NULL}, an_norm},
    [PSIM_OP_ATTENTION] = {3, 3, 1, 1, {"causal", "flash", NULL}, an_attention},
    [PSIM_OP_EMBEDDING] = {2, 2, 1, 1, {NULL}, an_embedding},
    [PSIM_OP_CROSS_ENTROPY] = {2, 2, 1, 1, {NULL}, an_cross_entropy},
    [PSIM_OP_CONV2D] = {2, 3, 1, 1, {"kernel", "stride", "pad", NULL}, an_conv2d},
    [PSIM_OP_POOL2D] = {1, 1, 1, 1, {"kernel", "stride", "pad", "fn", NULL}, an_pool2d},
    [PSIM_OP_CONCAT] = {1, PSIM_MAX_OP_IO, 1, 1, {"axis", NULL}, an_concat_split},
    [PSIM_OP_SPLIT] = {1, 1, 1, PSIM_MAX_OP_IO, {"axis", NULL}, an_concat_split},
    [PSIM_OP_RESHAPE] = {1, 1, 1, 1, {NULL}, an_reshape},
    [PSIM_OP_TRANSPOSE] = {1, 1, 1, 1, {NULL}, an_transpose},
    [PSIM_OP_DISPATCH] = {1, 2, 1, 1, {"top_k", NULL}, an_moe},
    [PSIM_OP_COMBINE] = {1, 2, 1, 1, {"top_k", NULL}, an_moe},
};

const char *const *psim_opkind_keys(psim_op_kind k) {
  return kinds[k].keys;
}

void psim_opkind_arity(psim_op_kind k, int *min_in, int *max_in, int *min_out, int *max_out) {
  *min_in = kinds[k].min_in;
  *max_in = kinds[k].max_in;
  *min_out = kinds[k].min_out;
  *max_out = kinds[k].max_out;
}

psim_status psim_opkind_analyse(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  op->attrs.window_in[0] = op->attrs.window_in[1] = -1;
  PSIM_CHECK(kinds[op->kind].analyse(c, m, op, j));
  mark_weight_dims(m, op);
  return PSIM_OK;
}

/* ------------------------------------------------------------------ work */

typedef struct wctx {
  psim_model *m;
  psim_op *op;
  size_t *cap;
  bool grad[PSIM_MAX_OP_IO]; /* input i needs a gradient */
  int n_grad;
} wctx;

static int op_dim_of(const psim_model *m, const psim_op *op, int32_t d) {
  int x = psim_op_dim_index(op, d);
  for (int k = 0; x < 0 && k < 2; k++)
    if (op->attrs.window_in[k] == d && d >= 0)
      x = psim_op_dim_index(op, m->tensors[op->out[0]].dims[2 + k]);
  return x;
}

static uint16_t tmask(const psim_model *m, const psim_op *op, const psim_tensor *t) {
  uint16_t mask = 0;
  for (int k = 0; k < t->rank; k++) {
    int x = op_dim_of(m, op, t->dims[k]);
    if (x >= 0)
      mask |= (uint16_t)(1u << x);
  }
  return mask;
}

static uint16_t all_mask(const psim_op *op) {
  return (uint16_t)((1u << op->n_dims) - 1);
}

static double mask_size(const psim_model *m, const psim_op *op, uint16_t mask) {
  double p = 1;
  for (int i = 0; i < op->n_dims; i++)
    if (mask & (1u << i))
      p *= (double)m->dims[op->dims[i].dim].size;
  return p;
}

static psim_status term(wctx *w, uint16_t mask, bool is_flops, double fwd, double bwd) {
  psim_model *m = w->m;
  PSIM_CHECK(psim_grow((void **)&m->terms, w->cap, (size_t)m->n_terms + 1, sizeof *m->terms));
  psim_op_term *t = &m->terms[m->n_terms++];
  t->mask = mask;
  t->is_flops = is_flops;
  t->value[PSIM_PASS_FWD] = fwd;
  t->value[PSIM_PASS_BWD] = w->n_grad ? bwd : 0;
  w->op->n_terms++;
  return PSIM_OK;
}

/* FLOPs proportional to the elements of the op dims in mask. */
static psim_status flops(wctx *w, uint16_t mask, double fwd_per, double bwd_per) {
  double n = mask_size(w->m, w->op, mask);
  return term(w, mask, true, fwd_per * n, bwd_per * n);
}

/* Bytes of memory traffic: forward reads inputs and writes outputs; backward
 * reads output gradients and saved inputs and writes input gradients.
 * Inputs whose bit is set in skip are not counted. */
static psim_status io_bytes(wctx *w, unsigned skip) {
  const psim_model *m = w->m;
  const psim_op *op = w->op;
  for (int i = 0; i < op->n_in; i++) {
    if (skip & (1u << i))
      continue;
    double b = psim_tensor_bytes(m, IN(i));
    PSIM_CHECK(term(w, tmask(m, op, IN(i)), false, b, b * (1 + w->grad[i])));
  }
  for (int i = 0; i < op->n_out; i++) {
    double b = psim_tensor_bytes(m, OUT(i));
    PSIM_CHECK(term(w, tmask(m, op, OUT(i)), false, b, b));
  }
  return PSIM_OK;
}

static psim_status wk_matmul(wctx *w) {
  const psim_model *m = w->m;
  const psim_op *op = w->op;
  int ng = w->grad[0] + w->grad[1];
  PSIM_CHECK(flops(w, all_mask(op), 2, 2.0 * ng));
  if (op->n_in == 3)
    PSIM_CHECK(flops(w, tmask(m, op, OUT(0)), 1, w->grad[2]));
  return io_bytes(w, 0);
}

static psim_status wk_elementwise(wctx *w) {
  const ew_fn *f = ew_find(w->op->fn);
  PSIM_CHECK(flops(w, all_mask(w->op), f->fwd, f->bwd));
  return io_bytes(w, 0);
}

/* Dropout keeps a 1-byte mask per element (PyTorch's fused dropout). */
static psim_status wk_dropout(wctx *w) {
  uint16_t mk = all_mask(w->op);
  double n = mask_size(w->m, w->op, mk);
  PSIM_CHECK(flops(w, mk, 2, 1)); /* fwd: compare a random number, scale; bwd: mask-multiply */
  PSIM_CHECK(term(w, mk, false, n, n));
  return io_bytes(w, 0);
}

static psim_status wk_norm(wctx *w) {
  /* Per element. softmax: max, subtract, exp, sum, divide (5); backward y*dy,
   * sum, subtract, multiply (4). layernorm: mean, subtract, square, sum,
   * normalise (2), gamma, beta (8); backward about twice (16). rmsnorm:
   * square, sum, normalise, gamma (4); backward 8. */
  static const double f[3][2] = {{5, 4}, {8, 16}, {4, 8}};
  int k = w->op->kind - PSIM_OP_SOFTMAX;
  PSIM_CHECK(flops(w, all_mask(w->op), f[k][0], f[k][1]));
  return io_bytes(w, 0);
}

/* 4 b s s_kv h d forward (QK^T and PV, 2 FLOPs per MAC; Korthikanti et al.
 * 2022 sec. 4); causal halves it only when flash skips masked tiles (Dao
 * 2022); backward 2x, plus the forward again when flash recomputes scores.
 * Without flash the scores and probabilities [b, h, s, s_kv] are written and
 * read back once each (4 passes over them). */
static psim_status wk_attention(wctx *w) {
  const psim_model *m = w->m;
  psim_op *op = w->op;
  const psim_tensor *q = IN(0), *k = IN(1);
  uint16_t fm = (uint16_t)(tmask(m, op, q) | (1u << psim_op_dim_index(op, k->dims[1])));
  double c = op->attrs.causal && op->attrs.flash ? 0.5 : 1.0;
  /* Keys on the query's own sequence dim: s_kv = s enters the product twice,
   * but a shard splitting s still sees every key (linear in its query rows). */
  if (k->dims[1] == q->dims[1])
    c *= (double)m->dims[q->dims[1]].size;
  PSIM_CHECK(flops(w, fm, 4 * c, (op->attrs.flash ? 12 : 8) * c));
  if (!op->attrs.flash) {
    uint16_t sm = (uint16_t)(fm & ~(1u << psim_op_dim_index(op, q->dims[3])));
    double sb = mask_size(m, op, sm) * (double)psim_dtype_bytes(q->dtype) *
                (k->dims[1] == q->dims[1] ? (double)m->dims[q->dims[1]].size : 1.0);
    PSIM_CHECK(term(w, sm, false, 4 * sb, 4 * sb));
  }
  return io_bytes(w, 0);
}

/* Gather: the ids, the rows read and the output written; the table is not
 * streamed. Backward scatter-adds the output gradient into the table's. */
static psim_status wk_embedding(wctx *w) {
  const psim_model *m = w->m;
  const psim_op *op = w->op;
  uint16_t om = tmask(m, op, OUT(0));
  double ob = psim_tensor_bytes(m, OUT(0));
  PSIM_CHECK(flops(w, om, 1, 1));
  PSIM_CHECK(term(w, om, false, ob, 2 * ob));
  return io_bytes(w, 1u << 1);
}

/* Per logit: max, subtract, exp, sum, log-and-pick (5); backward softmax
 * minus one-hot, scaled (3). */
static psim_status wk_cross_entropy(wctx *w) {
  PSIM_CHECK(flops(w, all_mask(w->op), 5, 3));
  return io_bytes(w, 0);
}

static psim_status wk_conv2d(wctx *w) {
  const psim_model *m = w->m;
  const psim_op *op = w->op;
  PSIM_CHECK(flops(w, all_mask(op), 2, 2.0 * (w->grad[0] + w->grad[1])));
  if (op->n_in == 3)
    PSIM_CHECK(flops(w, tmask(m, op, OUT(0)), 1, w->grad[2]));
  return io_bytes(w, 0);
}

static psim_status wk_pool2d(wctx *w) {
  double win = (double)(w->op->attrs.kernel[0] * w->op->attrs.kernel[1]);
  PSIM_CHECK(flops(w, all_mask(w->op), win, win));
  return io_bytes(w, 0);
}

static psim_status wk_copy(wctx *w) {
  return io_bytes(w, 0);
}

/* A reshape is a view: no FLOPs, no traffic. */
static psim_status wk_reshape(wctx *w) {
  return flops(w, 0, 0, 0);
}

/* dispatch copies each routed token once per expert slot; combine takes a
 * gate-weighted sum of top_k expert outputs per token (2 FLOPs each). */
static psim_status wk_moe(wctx *w) {
  const psim_model *m = w->m;
  const psim_op *op = w->op;
  uint16_t om = tmask(m, op, OUT(0));
  double per = op->kind == PSIM_OP_DISPATCH ? 1 : 2.0 * op->attrs.top_k;
  PSIM_CHECK(flops(w, om, per, per));
  return io_bytes(w, 0);
}

typedef psim_status (*wk_fn)(wctx *);
static const wk_fn works[PSIM_OP_KIND_COUNT] = {
    [PSIM_OP_MATMUL] = wk_matmul,
    [PSIM_OP_ELEMENTWISE] = wk_elementwise,
    [PSIM_OP_DROPOUT] = wk_dropout,
    [PSIM_OP_SOFTMAX] = wk_norm,
    [PSIM_OP_LAYERNORM] = wk_norm,
    [PSIM_OP_RMSNORM] = wk_norm,
    [PSIM_OP_ATTENTION] = wk_attention,
    [PSIM_OP_EMBEDDING] = wk_embedding,
    [PSIM_OP_CROSS_ENTROPY] = wk_cross_entropy,
    [PSIM_OP_CONV2D] = wk_conv2d,
    [PSIM_OP_POOL2D] = wk_pool2d,
    [PSIM_OP_CONCAT] = wk_copy,
    [PSIM_OP_SPLIT] = wk_copy,
    [PSIM_OP_RESHAPE] = wk_reshape,
    [PSIM_OP_TRANSPOSE] = wk_copy,
    [PSIM_OP_DISPATCH] = wk_moe,
    [PSIM_OP_COMBINE] = wk_moe,
};

psim_status psim_opkind_work(psim_model *m, psim_op *op, size_t *cap) {
  wctx w = {.m = m, .op = op, .cap = cap};
  for (int i = 0; i < op->n_in; i++) {
    w.grad[i] = m->tensors[op->in[i]].requires_grad;
    w.n_grad += w.grad[i];
  }
  op->term0 = m->n_terms;
  op->n_terms = 0;
  PSIM_CHECK(works[op->kind](&w));
  for (int p = 0; p < PSIM_PASS_COUNT; p++) {
    op->flops[p] = op->bytes[p] = 0;
    for (int64_t t = op->term0; t < m->n_terms; t++)
      *(m->terms[t].is_flops ? &op->flops[p] : &op->bytes[p]) += m->terms[t].value[p];
  }
  return PSIM_OK;
}

/* ------------------------------------------------------------ public API */

int32_t psim_op_dim_index(const psim_op *op, int32_t d) {
  for (int32_t i = 0; i < op->n_dims; i++)
    if (op->dims[i].dim == d)
      return i;
  return -1;
}

void psim_op_shard_work(const psim_model *m, const psim_op *op, const int64_t *shard_sizes,
                        psim_pass pass, double *flops_out, double *bytes_out) {
  double ratio[PSIM_MAX_OP_DIMS];
  for (int i = 0; i < op->n_dims; i++)
    ratio[i] = (double)shard_sizes[i] / (double)m->dims[op->dims[i].dim].size;
  double f = 0, b = 0;
  const psim_op_term *t = m->terms + op->term0;
  for (int32_t k = 0; k < op->n_terms; k++, t++) {
    double v = t->value[pass];
    for (unsigned mm = t->mask; mm && v != 0; mm &= mm - 1)
      v *= ratio[__builtin_ctz(mm)];
    *(t->is_flops ? &f : &b) += v;
  }
  *flops_out = f;
  *bytes_out = b;
}

double psim_tensor_elems(const psim_model *m, const psim_tensor *t) {
  double e = 1;
  for (int k = 0; k < t->rank; k++)
    e *= (double)m->dims[t->dims[k]].size;
  return e;
}

double psim_tensor_bytes(const psim_model *m, const psim_tensor *t) {
  return psim_tensor_elems(m, t) * (double)psim_dtype_bytes(t->dtype);
}

/* --------------------------------------------------------------- to_json */

static psim_status pair_json(cJSON *o, const char *key, const int64_t v[2]) {
  cJSON *a = NULL;
  PSIM_CHECK(psim_json_add_array(o, key, &a));
  for (int k = 0; k < 2; k++)
    if (!cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[k])))
      return psim_error(PSIM_ENOMEM, "out of memory building JSON");
  return PSIM_OK;
}

static psim_status axis_json(const psim_model *m, const psim_op *op, cJSON *o) {
  cJSON *a = NULL;
  PSIM_CHECK(psim_json_add_array(o, "axis", &a));
  for (int k = 0; k < op->attrs.n_axis_dims; k++)
    if (!cJSON_AddItemToArray(a, cJSON_CreateString(dn(m, op->attrs.axis_dims[k]))))
      return psim_error(PSIM_ENOMEM, "out of memory building JSON");
  return PSIM_OK;
}

psim_status psim_opkind_to_json(const psim_model *m, const psim_op *op, cJSON *o) {
  const psim_op_attrs *a = &op->attrs;
  switch (op->kind) {
  case PSIM_OP_ELEMENTWISE: return psim_json_add_string(o, "fn", op->fn);
  case PSIM_OP_DROPOUT: return psim_json_add_number(o, "p", a->dropout_p);
  case PSIM_OP_SOFTMAX:
  case PSIM_OP_LAYERNORM:
  case PSIM_OP_RMSNORM:
  case PSIM_OP_CONCAT:
  case PSIM_OP_SPLIT: return axis_json(m, op, o);
  case PSIM_OP_ATTENTION:
    PSIM_CHECK(psim_json_add_bool(o, "causal", a->causal));
    return psim_json_add_bool(o, "flash", a->flash);
  case PSIM_OP_POOL2D: PSIM_CHECK(psim_json_add_string(o, "fn", op->fn)); /* fall through */
  case PSIM_OP_CONV2D:
    PSIM_CHECK(pair_json(o, "kernel", a->kernel));
    PSIM_CHECK(pair_json(o, "stride", a->stride));
    return pair_json(o, "pad", a->pad);
  case PSIM_OP_DISPATCH:
  case PSIM_OP_COMBINE: return psim_json_add_number(o, "top_k", a->top_k);
  default: return PSIM_OK;
  }
}
