/* opkind_work.c - the work of each op kind: FLOPs and bytes of memory
 * traffic per pass, as terms over the op's dims so that a shard's work is a
 * product of ratios (docs/model.md). The kind table in opkind.c points here.
 *
 * FLOP counts of memory-bound kinds are the operation counts of the textbook
 * expression (one FLOP per add, multiply, divide, exp, tanh, max); they are
 * small next to matmuls and only matter for roofline estimates of these
 * bandwidth-bound kernels. Matmul, attention and conv counts are the standard
 * 2 FLOPs per multiply-accumulate (Narayanan et al. 2021, eq. 3; Korthikanti
 * et al. 2022, section 4). */
#include <math.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/model_impl.h"

#define IN(i)  (&m->tensors[op->in[i]])
#define OUT(i) (&m->tensors[op->out[i]])

/* ------------------------------------------------------------------ work */

struct psim_opwork {
  psim_model *m;
  psim_op *op;
  size_t *cap;
  bool grad[PSIM_MAX_OP_IO]; /* input i needs a gradient */
  int n_grad;
};

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

static psim_status term(psim_opwork *w, uint16_t mask, bool is_flops, double fwd, double bwd) {
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
static psim_status flops(psim_opwork *w, uint16_t mask, double fwd_per, double bwd_per) {
  double n = mask_size(w->m, w->op, mask);
  return term(w, mask, true, fwd_per * n, bwd_per * n);
}

/* Bytes of memory traffic: forward reads inputs and writes outputs; backward
 * reads output gradients and saved inputs and writes input gradients.
 * Inputs whose bit is set in skip are not counted. */
static psim_status io_bytes(psim_opwork *w, unsigned skip) {
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

psim_status psim_opwork_matmul(psim_opwork *w) {
  const psim_model *m = w->m;
  const psim_op *op = w->op;
  int ng = w->grad[0] + w->grad[1];
  PSIM_CHECK(flops(w, all_mask(op), 2, 2.0 * ng));
  if (op->n_in == 3)
    PSIM_CHECK(flops(w, tmask(m, op, OUT(0)), 1, w->grad[2]));
  return io_bytes(w, 0);
}

psim_status psim_opwork_elementwise(psim_opwork *w) {
  const psim_ew_fn *f = psim_ew_find(w->op->fn);
  PSIM_CHECK(flops(w, all_mask(w->op), f->fwd, f->bwd));
  return io_bytes(w, 0);
}

/* Dropout keeps a 1-byte mask per element (PyTorch's fused dropout). */
psim_status psim_opwork_dropout(psim_opwork *w) {
  uint16_t mk = all_mask(w->op);
  double n = mask_size(w->m, w->op, mk);
  PSIM_CHECK(flops(w, mk, 2, 1)); /* fwd: compare a random number, scale; bwd: mask-multiply */
  PSIM_CHECK(term(w, mk, false, n, n));
  return io_bytes(w, 0);
}

psim_status psim_opwork_norm(psim_opwork *w) {
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
 * 2022), a causal sliding window of w keys keeps w / s_kv (1 - w / (2 s_kv))
 * of it; backward 2x, plus the forward again when flash recomputes scores.
 * Without flash the scores and probabilities [b, h, s, s_kv] are written and
 * read back once each (4 passes over them). */
psim_status psim_opwork_attention(psim_opwork *w) {
  const psim_model *m = w->m;
  psim_op *op = w->op;
  const psim_tensor *q = IN(0), *k = IN(1);
  uint16_t fm = (uint16_t)(tmask(m, op, q) | (1u << psim_op_dim_index(op, k->dims[1])));
  double c = op->attrs.causal && op->attrs.flash ? 0.5 : 1.0;
  /* A causal sliding window of w keys: sum over queries of min(i + 1, w), about
   * s_kv w - w^2 / 2 of the s_kv^2 pairs (w = s_kv gives the causal half); only flash
   * skips the tiles outside it. */
  double skv = (double)m->dims[k->dims[1]].size, win = (double)op->attrs.window;
  if (op->attrs.window && op->attrs.flash && win < skv)
    c = win / skv * (1 - win / (2 * skv));
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
psim_status psim_opwork_embedding(psim_opwork *w) {
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
psim_status psim_opwork_cross_entropy(psim_opwork *w) {
  PSIM_CHECK(flops(w, all_mask(w->op), 5, 3));
  return io_bytes(w, 0);
}

psim_status psim_opwork_conv2d(psim_opwork *w) {
  const psim_model *m = w->m;
  const psim_op *op = w->op;
  PSIM_CHECK(flops(w, all_mask(op), 2, 2.0 * (w->grad[0] + w->grad[1])));
  if (op->n_in == 3)
    PSIM_CHECK(flops(w, tmask(m, op, OUT(0)), 1, w->grad[2]));
  return io_bytes(w, 0);
}

psim_status psim_opwork_pool2d(psim_opwork *w) {
  double win = (double)(w->op->attrs.kernel[0] * w->op->attrs.kernel[1]);
  PSIM_CHECK(flops(w, all_mask(w->op), win, win));
  return io_bytes(w, 0);
}

psim_status psim_opwork_copy(psim_opwork *w) {
  return io_bytes(w, 0);
}

/* A reshape is a view: no FLOPs, no traffic. */
psim_status psim_opwork_reshape(psim_opwork *w) {
  return flops(w, 0, 0, 0);
}

/* dispatch copies each routed token once per expert slot; combine takes a
 * gate-weighted sum of top_k expert outputs per token (2 FLOPs each). */
psim_status psim_opwork_moe(psim_opwork *w) {
  const psim_model *m = w->m;
  const psim_op *op = w->op;
  uint16_t om = tmask(m, op, OUT(0));
  double per = op->kind == PSIM_OP_DISPATCH ? 1 : 2.0 * op->attrs.top_k;
  PSIM_CHECK(flops(w, om, per, per));
  return io_bytes(w, 0);
}

psim_status psim_opwork_run(psim_model *m, psim_op *op, size_t *cap, psim_opwork_fn fn) {
  psim_opwork w = {.m = m, .op = op, .cap = cap};
  for (int i = 0; i < op->n_in; i++) {
    w.grad[i] = m->tensors[op->in[i]].requires_grad;
    w.n_grad += w.grad[i];
  }
  op->term0 = m->n_terms;
  op->n_terms = 0;
  PSIM_CHECK(fn(&w));
  for (int p = 0; p < PSIM_PASS_COUNT; p++) {
    op->flops[p] = op->bytes[p] = 0;
    for (int64_t t = op->term0; t < m->n_terms; t++)
      *(m->terms[t].is_flops ? &op->flops[p] : &op->bytes[p]) += m->terms[t].value[p];
  }
  return PSIM_OK;
}
