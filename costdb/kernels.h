/* kernels.h - kernels the modern stacks run, costed on their own published
 * efficiency (issue 20, docs/costdb.md "Kernels"): fused flash attention
 * (FlashAttention-2/3) and GEMM wave quantisation on the SM count. Used by
 * costdb/cost.c only when the cluster's software stack asks for them
 * (sim/ir/stack.h); megatron-lm-2021 never does. */
#ifndef PSIM_KERNELS_H
#define PSIM_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/ir/model.h"

/* What a device type's name says about its GPU: streaming multiprocessors and
 * the GEMM output tile cuBLAS/CUTLASS use on it. sm = 0 when unknown. */
typedef struct psim_gpu_arch {
  int32_t sm;             /* compute capability x10: 80, 90, 100 */
  int32_t n_sms;          /* streaming multiprocessors */
  int32_t tile_m, tile_n; /* GEMM output tile */
} psim_gpu_arch;

psim_gpu_arch psim_kernels_arch(const char *type_name);

/* Efficiency of a flash-attention kernel, as a fraction of the dense 16-bit
 * tensor peak, for pass and key/value sequence length seq_kv (tokens):
 *   eff = max[version, arch, pass] * seq_kv / (seq_kv + PSIM_FLASH_HALF_SEQ).
 * 0 when the table has no figure (unknown architecture, or version 0). */
double psim_kernels_flash_eff(int32_t version, const psim_gpu_arch *a, psim_pass pass,
                              double seq_kv);

/* Wave quantisation of a GEMM with out_elems output elements: tiles =
 * ceil(out_elems / (tile_m tile_n)), waves = ceil(tiles / n_sms); the share of
 * the SM-waves that does work, tiles / (waves n_sms), in (0, 1]. 1 when the
 * architecture is unknown or the GEMM fills less than one wave (cuBLAS splits K
 * there, and the GEMM curve's half_flops prices small kernels). */
double psim_kernels_wave_eff(const psim_gpu_arch *a, double out_elems);

/* The rate of a rowwise-scaled FP8 GEMM (torch._scaled_mm with per-row scales)
 * relative to the tensorwise-scaled one on the same shape, in (0, 1]; 1 when the
 * architecture is unknown (costdb/kernels.c: the published runs it comes from). */
double psim_kernels_fp8_rowwise_rate(const psim_gpu_arch *a);

/* The efficiency of an expert matmul shard (a weight with an expert dim) run as one grouped
 * GEMM of its experts (costdb/grouped_gemm.c): the share of the tiles' rows that hold tokens,
 * M / (ceil(M / tile_m) tile_m) for M tokens per expert, times the waves' use of the SMs over
 * all experts' tiles. 0 when op is not an expert matmul or the architecture is unknown. */
double psim_grouped_gemm_eff(const psim_gpu_arch *a, const psim_model *m, const psim_op *op,
                             const int64_t *shard);

#endif
