/* key.c - the kernel-shape key of a model op shard (costdb.h explains the
 * signatures). Uses only the model structs, so it runs at simulator speed:
 * O(dims * rank) per call, no allocation. */
#include <stdio.h>
#include <string.h>

#include "costdb/costdb.h"

typedef struct shard_view {
  const psim_model *m;
  const psim_op *op;
  const int64_t *sizes;
} shard_view;

/* Extent of model dim d in the shard (full size when not in the op). */
static int64_t dim_size(const shard_view *v, int32_t d) {
  for (int32_t i = 0; i < v->op->n_dims; i++)
    if (v->op->dims[i].dim == d)
      return v->sizes[i];
  return v->m->dims[d].size;
}

static bool tensor_has(const psim_model *m, int32_t t, int32_t d) {
  if (t < 0 || t >= m->n_tensors)
    return false;
  for (int32_t r = 0; r < m->tensors[t].rank; r++)
    if (m->tensors[t].dims[r] == d)
      return true;
  return false;
}

static int64_t tensor_elems(const shard_view *v, int32_t t) {
  int64_t n = 1;
  for (int32_t r = 0; r < v->m->tensors[t].rank; r++)
    n *= dim_size(v, v->m->tensors[t].dims[r]);
  return n;
}

static void shape_init(psim_cost_key *k, int32_t n) {
  k->n = n;
  for (int32_t i = 0; i < n; i++)
    k->shape[i] = 1;
}

static void key_matmul(const shard_view *v, psim_cost_key *k) {
  const psim_op *op = v->op;
  int32_t a = op->in[0], b = op->n_in > 1 ? op->in[1] : -1;
  if (b >= 0 && v->m->tensors[a].kind == PSIM_TENSOR_WEIGHT &&
      v->m->tensors[b].kind != PSIM_TENSOR_WEIGHT) {
    int32_t t = a; /* keep the weight second: its output dims are N */
    a = b;
    b = t;
  }
  shape_init(k, 4);
  for (int32_t i = 0; i < op->n_dims; i++) {
    int32_t d = op->dims[i].dim;
    bool in_a = tensor_has(v->m, a, d), in_b = tensor_has(v->m, b, d);
    int slot = op->dims[i].use == PSIM_USE_CONTRACTED ? 3 : in_a && in_b ? 0 : in_b ? 2 : 1;
    k->shape[slot] *= v->sizes[i];
  }
}

static void key_attention(const shard_view *v, psim_cost_key *k) {
  const psim_op *op = v->op;
  int32_t q = op->in[0], kk = op->n_in > 1 ? op->in[1] : -1;
  bool kv_dim = false;
  shape_init(k, 4);
  for (int32_t i = 0; i < op->n_dims; i++) {
    int32_t d = op->dims[i].dim;
    bool in_q = tensor_has(v->m, q, d), in_k = tensor_has(v->m, kk, d);
    int slot = 0;
    if (v->m->dims[d].role == PSIM_ROLE_HEAD_DIM)
      slot = 3;
    else if (in_k && !in_q)
      slot = 2, kv_dim = true;
    else if ((in_q && !in_k) || v->m->dims[d].role == PSIM_ROLE_SEQUENCE)
      slot = 1;
    k->shape[slot] *= v->sizes[i];
  }
  if (!kv_dim)
    k->shape[2] = k->shape[1]; /* self-attention over one sequence dim */
  const char *fn = op->attrs.causal ? (op->attrs.flash ? "causal,flash" : "causal")
                                    : (op->attrs.flash ? "flash" : "");
  snprintf(k->fn, sizeof k->fn, "%s", fn);
}

static bool in_axis(const psim_op *op, int32_t i) {
  if (op->dims[i].use == PSIM_USE_NORMALIZED)
    return true;
  for (int32_t a = 0; a < op->attrs.n_axis_dims; a++)
    if (op->attrs.axis_dims[a] == op->dims[i].dim)
      return true;
  return false;
}

static void key_rows(const shard_view *v, psim_cost_key *k) {
  shape_init(k, 2);
  for (int32_t i = 0; i < v->op->n_dims; i++) {
    bool axis = in_axis(v->op, i) || (v->op->kind == PSIM_OP_CROSS_ENTROPY &&
                                      v->m->dims[v->op->dims[i].dim].role == PSIM_ROLE_VOCAB);
    k->shape[axis ? 1 : 0] *= v->sizes[i];
  }
}

static void key_embedding(const shard_view *v, psim_cost_key *k) {
  const psim_op *op = v->op;
  int32_t table = op->in[op->n_in > 1 ? 1 : 0], out = op->out[0];
  if (op->n_in > 1 && v->m->tensors[op->in[0]].kind == PSIM_TENSOR_WEIGHT)
    table = op->in[0];
  shape_init(k, 3);
  for (int32_t i = 0; i < op->n_dims; i++) {
    int32_t d = op->dims[i].dim;
    bool in_t = tensor_has(v->m, table, d), in_o = tensor_has(v->m, out, d);
    int slot = in_t && in_o ? 1 : (in_t || op->dims[i].use == PSIM_USE_CONTRACTED) ? 2 : 0;
    k->shape[slot] *= v->sizes[i];
  }
}

static psim_status key_conv(const shard_view *v, psim_cost_key *k) {
  const psim_tensor *w = &v->m->tensors[v->op->in[v->op->n_in > 1 ? 1 : 0]];
  const psim_tensor *o = &v->m->tensors[v->op->out[0]];
  if (w->rank != 4 || o->rank != 4)
    return psim_error(PSIM_EINPUT, "op '%s': conv2d expects 4-d weight and output tensors",
                      v->op->name);
  int64_t s[8] = {dim_size(v, o->dims[0]), dim_size(v, w->dims[1]),
                  dim_size(v, o->dims[2]), dim_size(v, o->dims[3]),
                  dim_size(v, o->dims[1]), dim_size(v, w->dims[2]),
                  dim_size(v, w->dims[3]), v->op->attrs.stride[0] > 0 ? v->op->attrs.stride[0] : 1};
  k->n = 8;
  memcpy(k->shape, s, sizeof s);
  return PSIM_OK;
}

static void key_io(const shard_view *v, psim_cost_key *k) {
  shape_init(k, 2);
  k->shape[0] = k->shape[1] = 0;
  for (int32_t i = 0; i < v->op->n_in; i++)
    k->shape[0] += tensor_elems(v, v->op->in[i]);
  for (int32_t i = 0; i < v->op->n_out; i++)
    k->shape[1] += tensor_elems(v, v->op->out[i]);
}

static void key_elementwise(const shard_view *v, psim_cost_key *k) {
  shape_init(k, 2);
  k->shape[0] = tensor_elems(v, v->op->out[0]);
  k->shape[1] = v->op->n_in > 1 ? tensor_elems(v, v->op->in[1]) : 0;
  snprintf(k->fn, sizeof k->fn, "%s", v->op->fn ? v->op->fn : "");
}

psim_status psim_costdb_key_from_op(const psim_model *m, const psim_op *op,
                                    const int64_t *shard_sizes, psim_pass pass,
                                    psim_cost_key *key) {
  shard_view v = {m, op, shard_sizes};
  memset(key, 0, sizeof *key);
  key->kind = op->kind;
  key->pass = pass;
  key->dtype = op->n_out > 0 ? m->tensors[op->out[0]].dtype : m->dtype;
  if (op->kind == PSIM_OP_MATMUL || op->kind == PSIM_OP_ATTENTION || op->kind == PSIM_OP_CONV2D)
    key->dtype = m->tensors[op->in[0]].dtype;
  switch (op->kind) {
  case PSIM_OP_MATMUL: key_matmul(&v, key); break;
  case PSIM_OP_ATTENTION: key_attention(&v, key); break;
  case PSIM_OP_SOFTMAX:
  case PSIM_OP_LAYERNORM:
  case PSIM_OP_RMSNORM:
  case PSIM_OP_CROSS_ENTROPY: key_rows(&v, key); break;
  case PSIM_OP_ELEMENTWISE: key_elementwise(&v, key); break;
  case PSIM_OP_DROPOUT:
    key_elementwise(&v, key);
    key->n = 1;
    key->fn[0] = '\0';
    break;
  case PSIM_OP_EMBEDDING: key_embedding(&v, key); break;
  case PSIM_OP_CONV2D: return key_conv(&v, key);
  default: key_io(&v, key); break;
  }
  return PSIM_OK;
}
