/* grouped_gemm.c - the expert GEMMs of one device as one grouped GEMM (issue 21;
 * docs/simulator.md, "Mixture of experts"; docs/costdb.md, "Kernels").
 *
 * Megatron-Core runs a device's local experts as one grouped GEMM
 * (--moe-grouped-gemm: the grouped_gemm package's CUTLASS kernels, or
 * Transformer Engine's GroupedLinear), one problem per expert with M = the
 * tokens routed to it. Each problem is cut into output tiles of tile_m x tile_n
 * (the architecture's CUTLASS tile, costdb/kernels.c), so a problem of M
 * tokens computes ceil(M / tile_m) tile_m rows: with few tokens per expert
 * (many experts, fine-grained routing) the padding of the last tile is the
 * loss ("tile quantisation", NVIDIA Matrix Multiplication Background User's
 * Guide, "Tile Quantization"). The tiles of all problems then run in waves
 * over the SMs, as one GEMM's do (psim_kernels_wave_eff). */
#include <math.h>

#include "costdb/kernels.h"

/* The expert dim's index among op's dims (role expert, in the weight), or -1. */
static int32_t expert_index(const psim_model *m, const psim_op *op) {
  if (op->kind != PSIM_OP_MATMUL || op->n_in < 2)
    return -1;
  for (int32_t i = 0; i < op->n_dims; i++)
    if (m->dims[op->dims[i].dim].role == PSIM_ROLE_EXPERT)
      return i;
  return -1;
}

/* Extent of model dim d in the shard (its size when op does not iterate it). */
static double extent(const psim_model *m, const psim_op *op, const int64_t *shard, int32_t d) {
  int32_t i = psim_op_dim_index(op, d);
  return i >= 0 ? (double)shard[i] : (double)m->dims[d].size;
}

double psim_grouped_gemm_eff(const psim_gpu_arch *a, const psim_model *m, const psim_op *op,
                             const int64_t *shard) {
  int32_t ie = expert_index(m, op);
  if (ie < 0 || a->tile_m <= 0 || a->tile_n <= 0)
    return 0;
  const psim_tensor *out = &m->tensors[op->out[0]], *w = &m->tensors[op->in[1]];
  double groups = (double)shard[ie], rows = 1, cols = 1; /* per expert: M tokens x N */
  for (int32_t j = 0; j < out->rank; j++) {
    int32_t d = out->dims[j];
    if (d == op->dims[ie].dim)
      continue;
    bool in_w = false;
    for (int32_t k = 0; k < w->rank; k++)
      in_w = in_w || w->dims[k] == d;
    *(in_w ? &cols : &rows) *= extent(m, op, shard, d);
  }
  double padded = ceil(rows / a->tile_m) * a->tile_m;
  double tiles = groups * (padded / a->tile_m) * ceil(cols / a->tile_n);
  return rows / padded * psim_kernels_wave_eff(a, tiles * a->tile_m * a->tile_n);
}
