/* regions.c - the regions of an op's shards of one tensor from a plan read once per
 * (op, tensor): folding's locality check pairs the regions of thousands of shards
 * (locals.c, issue 19). */
#include "sim/builder/build_impl.h"

#include "sim/core/alloc.h"

/* The intervals of every dim of p, per coordinate, in one block (none when out of memory:
 * psim_build_plan_region then computes them, the same arithmetic). */
static void plan_tables(psim_region_plan *p) {
  size_t total = 0;
  for (int32_t j = 0; j < p->rank; j++)
    total += p->i[j] >= 0 ? 2 * (size_t)p->cfg->degree[p->i[j]] : 0;
  p->table = total && !p->general ? psim_malloc(total * sizeof *p->table) : NULL;
  for (int32_t j = 0, at = 0; p->table && j < p->rank; j++) {
    if (p->i[j] < 0)
      continue;
    int32_t deg = p->cfg->degree[p->i[j]];
    p->lo[j] = p->table + at;
    p->hi[j] = p->lo[j] + deg;
    at += 2 * deg;
    for (int32_t c = 0; c < deg; c++) {
      p->lo[j][c] = psim_build_shard_offset(p->n[j], deg, c);
      p->hi[j][c] = p->lo[j][c] + psim_shard_size(p->n[j], deg, c);
    }
  }
}

void psim_build_region_plan_init(const psim_build *b, int32_t o, int32_t t, psim_region_plan *p) {
  const psim_tensor *ten = &b->m->tensors[t];
  *p = (psim_region_plan){0};
  p->op = &b->m->ops[o];
  p->cfg = &b->s->ops[o];
  p->rank = ten->rank;
  p->general = p->op->kind == PSIM_OP_DISPATCH || p->op->kind == PSIM_OP_COMBINE ||
               p->op->kind == PSIM_OP_ATTENTION;
  for (int32_t j = 0; j < ten->rank; j++) {
    p->n[j] = psim_build_dim_size(b, ten->dims[j]);
    int32_t i = psim_op_dim_index(p->op, ten->dims[j]);
    p->i[j] = i >= 0 && p->cfg->degree[i] != 1 ? i : -1;
    p->below[j] = 1;
    for (int32_t k = i + 1; i >= 0 && k < p->op->n_dims; k++)
      p->below[j] *= p->cfg->degree[k];
  }
  plan_tables(p);
}

void psim_build_region_plan_free(psim_region_plan *p) {
  psim_free(p->table);
}
