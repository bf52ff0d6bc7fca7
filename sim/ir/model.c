/* model.c - model IR lifetime, lookups, and the sizes and work of tensors
 * and op shards. */
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/model.h"

void psim_model_init(psim_model *m) {
  memset(m, 0, sizeof *m);
  for (int r = 0; r < PSIM_ROLE_COUNT; r++)
    m->role_dim[r] = -1;
}

void psim_model_destroy(psim_model *m) {
  for (int32_t i = 0; i < m->n_dims; i++)
    psim_free(m->dims[i].name);
  for (int32_t i = 0; i < m->n_tensors; i++)
    psim_free(m->tensors[i].name);
  for (int32_t i = 0; i < m->n_ops; i++) {
    psim_free(m->ops[i].name);
    psim_free(m->ops[i].fn);
    psim_free(m->ops[i].tag);
  }
  psim_free(m->dims);
  psim_free(m->tensors);
  psim_free(m->ops);
  psim_free(m->terms);
  psim_free(m->name);
  psim_free(m->file);
  psim_model_init(m);
}

int32_t psim_model_find_dim(const psim_model *m, const char *name) {
  for (int32_t i = 0; i < m->n_dims; i++)
    if (strcmp(m->dims[i].name, name) == 0)
      return i;
  return -1;
}

int32_t psim_model_find_tensor(const psim_model *m, const char *name) {
  for (int32_t i = 0; i < m->n_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0)
      return i;
  return -1;
}

int32_t psim_model_find_op(const psim_model *m, const char *name) {
  for (int32_t i = 0; i < m->n_ops; i++)
    if (strcmp(m->ops[i].name, name) == 0)
      return i;
  return -1;
}

bool psim_op_is_block_linear(const psim_model *m, const psim_op *op) {
  if (op->kind != PSIM_OP_MATMUL || op->block < 0)
    return false;
  for (int32_t i = 0; i < op->n_in; i++)
    if (m->tensors[op->in[i]].kind == PSIM_TENSOR_WEIGHT)
      return true;
  return false;
}

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
