/* precision.c - the run's FP8 linear layers (psim_strategy.fp8) over the model's own: where the
 * strategy's setting changes any matmul's "fp8", the build reads a copy of the model whose ops
 * carry the run's flags (build_impl.h own_model). Every cost, cast and gather rule then reads
 * op->attrs.fp8 as it would on a model generated with those linears (linear_dtype "fp8"), so
 * the two simulate to the same figure (tests/unit/test_precision.c). */
#include <string.h>

#include "sim/builder/build_impl.h"
#include "sim/core/alloc.h"

static bool changes_any(const psim_model *m, const psim_strategy *s) {
  for (int32_t o = 0; o < m->n_ops; o++)
    if (psim_strategy_op_fp8(s, m, o) != m->ops[o].attrs.fp8)
      return true;
  return false;
}

psim_status psim_build_apply_precision(psim_build *b) {
  const psim_model *m = b->m;
  if (b->s->fp8 == PSIM_FP8_MODEL || !changes_any(m, b->s))
    return PSIM_OK;
  /* a shallow copy: names, tensors and terms stay the model's; only the ops are copied */
  b->own_model = psim_malloc(sizeof *b->own_model);
  b->own_ops = psim_malloc(sizeof *b->own_ops * (size_t)(m->n_ops > 0 ? m->n_ops : 1));
  if (!b->own_model || !b->own_ops)
    return psim_error(PSIM_ENOMEM, "out of memory for the run's FP8 linears");
  *b->own_model = *m;
  memcpy(b->own_ops, m->ops, sizeof *b->own_ops * (size_t)m->n_ops);
  for (int32_t o = 0; o < m->n_ops; o++)
    b->own_ops[o].attrs.fp8 = psim_strategy_op_fp8(b->s, m, o);
  b->own_model->ops = b->own_ops;
  b->m = b->own_model;
  return PSIM_OK;
}
