/* opkind_space.c - the iteration space of each op kind: the dims an op loops
 * over and how each is used, and the checks on its tensors' dims and its
 * kind-specific keys (docs/model.md). The kind table in opkind.c points here. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/model_impl.h"

#define IN(i)  (&m->tensors[op->in[i]])
#define OUT(i) (&m->tensors[op->out[i]])

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

void psim_opspace_mark_weight_dims(const psim_model *m, psim_op *op) {
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

psim_status psim_opspace_matmul(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  PSIM_CHECK(psim_json_bool(c, j, "fp8", false, &op->attrs.fp8));
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

psim_status psim_opspace_elementwise(psim_jctx *c, const psim_model *m, psim_op *op,
                                     const cJSON *j) {
  const char *fn = NULL;
  PSIM_CHECK(psim_json_string(c, j, "fn", true, &fn));
  const psim_ew_fn *f = psim_ew_find(fn);
  if (!f) {
    char list[400];
    psim_ew_list(list, sizeof list);
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

psim_status psim_opspace_dropout(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  op->attrs.dropout_p = 0.1;
  PSIM_CHECK(psim_json_number(c, j, "p", false, 0.0, 0.999999, &op->attrs.dropout_p));
  PSIM_CHECK(same_dims(c, m, op, 0));
  return add_dims(c, op, OUT(0), PSIM_USE_OUTPUT);
}

/* softmax, layernorm, rmsnorm: out = in[0] dims; axis dims NORMALIZED. */
psim_status psim_opspace_norm(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
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
psim_status psim_opspace_attention(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  PSIM_CHECK(psim_json_bool(c, j, "causal", false, &op->attrs.causal));
  PSIM_CHECK(psim_json_bool(c, j, "flash", false, &op->attrs.flash));
  PSIM_CHECK(psim_json_int(c, j, "window", false, 1, (int64_t)1 << 40, &op->attrs.window));
  if (op->attrs.window && !op->attrs.causal) {
    size_t sv = psim_jctx_key(c, "window");
    psim_status s = psim_jerr(c, "a sliding window needs \"causal\": true");
    psim_jctx_pop(c, sv);
    return s;
  }
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
psim_status psim_opspace_embedding(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
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
psim_status psim_opspace_cross_entropy(psim_jctx *c, const psim_model *m, psim_op *op,
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
psim_status psim_opspace_conv2d(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
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

psim_status psim_opspace_pool2d(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
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
psim_status psim_opspace_concat_split(psim_jctx *c, const psim_model *m, psim_op *op,
                                      const cJSON *j) {
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

psim_status psim_opspace_reshape(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
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

psim_status psim_opspace_transpose(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
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
psim_status psim_opspace_moe(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  int64_t k = 1;
  PSIM_CHECK(psim_json_int(c, j, "top_k", false, 1, 1024, &k));
  op->attrs.top_k = (int32_t)k;
  PSIM_CHECK(psim_json_bool(c, j, "dropless", false, &op->attrs.dropless));
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
