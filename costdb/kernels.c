/* kernels.c - published efficiency of the kernels modern stacks run. */
#include "costdb/kernels.h"

#include <math.h>
#include <string.h>

/* SM counts: NVIDIA A100 Tensor Core GPU Architecture whitepaper (108 SMs),
 * H100 Tensor Core GPU Architecture whitepaper (SXM5: 132 SMs; H200 is the same
 * GH100 die), Blackwell Architecture Technical Brief (B200 / GB200: 148 SMs;
 * B300 / GB300: 160 SMs). Output tiles: the CUTLASS 2.x default 128x128
 * threadblock tile on Ampere; 128x256 warp-group tiles of the Hopper/Blackwell
 * CUTLASS 3.x GEMM kernels (cutlass/gemm/collective, sm90 defaults). */
typedef struct arch_row {
  const char *prefix;
  psim_gpu_arch a;
} arch_row;
static const arch_row arch_rows[] = {{"a100", {80, 108, 128, 128}},
                                     {"h100", {90, 132, 128, 256}},
                                     {"h200", {90, 132, 128, 256}},
                                     {"gh200", {90, 132, 128, 256}},
                                     {"b200", {100, 148, 128, 256}},
                                     {"gb200", {100, 148, 128, 256}},
                                     {"gb300", {100, 160, 128, 256}},
                                     {"b300", {100, 160, 128, 256}},
                                     {NULL, {0, 0, 0, 0}}};

psim_gpu_arch psim_kernels_arch(const char *type_name) {
  for (const arch_row *r = arch_rows; type_name && r->prefix; r++)
    if (strncmp(type_name, r->prefix, strlen(r->prefix)) == 0)
      return r->a;
  return (psim_gpu_arch){0, 0, 0, 0};
}

/* Sequence length at which a flash kernel reaches half its maximum: 240 tokens,
 * fitted to FlashAttention-3's head-dim-128 forward rates on H100 at 16k total
 * tokens (430 TFLOP/s at 512 to 621 TFLOP/s at 16k; pytorch/benchmark PR 2391,
 * commit ff65cb6) and consistent with FlashAttention-2's rise on A100 (Dao 2023,
 * arXiv 2307.08691, Fig. 4-5). */
#define PSIM_FLASH_HALF_SEQ 240.0

/* Maximum efficiency (fraction of the dense bf16 peak), forward / backward:
 * FA2 on Ampere: 73% forward (Dao 2023, abstract: "50-73% of the theoretical
 *   maximum FLOPs/s on A100"), backward 0.55 (ibid. Fig. 5-6: fwd+bwd 60% at
 *   head dim 128, the backward being 2.5x the forward's FLOPs).
 * FA2 on Hopper: "only 35% utilization on the H100" (Shah et al. 2024, arXiv
 *   2407.08608, abstract): 0.37 / 0.30.
 * FA3 on Hopper: forward 0.64 of 989 TFLOP/s at 16k (the PR above; up to 75%
 *   in the paper), backward 1.5-1.75x FA2's (paper, sec. 4.1): 0.50.
 * Blackwell: no published training-kernel figure in the sources here; the
 *   Hopper FA3 fractions are assumed (docs/costdb.md). FA3 needs Hopper, so a
 *   stack asking for version 3 on Ampere runs FA2 (flash-attn's hopper/ build). */
static double flash_max(int32_t version, int32_t sm, psim_pass pass) {
  bool fwd = pass == PSIM_PASS_FWD;
  if (sm == 80)
    return fwd ? 0.73 : 0.55;
  if (sm >= 90 && version >= 3)
    return fwd ? 0.64 : 0.50;
  if (sm >= 90)
    return fwd ? 0.37 : 0.30;
  return 0;
}

double psim_kernels_flash_eff(int32_t version, const psim_gpu_arch *a, psim_pass pass,
                              double seq_kv) {
  if (version < 2 || a->sm == 0 || !(seq_kv > 0))
    return 0;
  return flash_max(version, a->sm, pass) * seq_kv / (seq_kv + PSIM_FLASH_HALF_SEQ);
}

double psim_kernels_wave_eff(const psim_gpu_arch *a, double out_elems) {
  if (a->n_sms <= 0 || !(out_elems > 0))
    return 1.0;
  double tiles = ceil(out_elems / ((double)a->tile_m * a->tile_n));
  if (tiles < a->n_sms) /* one partial wave: cuBLAS splits K (split-K / stream-K), and the
                           FLOP curve's half_flops already prices small GEMMs */
    return 1.0;
  double waves = ceil(tiles / a->n_sms);
  return tiles / (waves * a->n_sms);
}

/* A rowwise-scaled FP8 GEMM's rate relative to the tensorwise one on the same
 * shape. torch._scaled_mm runs per-row scales in PyTorch's own CUTLASS kernel
 * (aten/src/ATen/native/cuda/RowwiseScaledMM.cu: a scale-broadcasting epilogue and
 * a short list of tile shapes) where tensorwise scales go to cuBLASLt. Derived from
 * torchao's published end-to-end runs of torchtitan Llama3-8B, 8 GPUs, FSDP2, batch
 * 1, sequence 8192, torch.compile, per-op SAC (torchao/float8/README.md, "Training
 * benchmarks"), the ratio of the rowwise and tensorwise tokens/s, with the
 * simulator's own casts and GEMMs on the same run (docs/stacks.md, fp8_scaling):
 * - H100 (torchao 0.10.0+git890e0ac8): rowwise 6768 vs tensorwise 7689.5 tokens/s
 *   (0.880) -> a GEMM rate of 0.81 under pytorch-fsdp2 on dgx-h100;
 * - B200 (torchao 0.13.0+gite4e681be6): 8640.5 vs 10417.0 (0.829) -> 0.69 on
 *   dgx-b200.
 * Other architectures (no FP8 GEMM, or no published run): 1. */
#define PSIM_FP8_ROWWISE_RATE_SM90  0.81
#define PSIM_FP8_ROWWISE_RATE_SM100 0.69

double psim_kernels_fp8_rowwise_rate(const psim_gpu_arch *a) {
  if (a->sm >= 100)
    return PSIM_FP8_ROWWISE_RATE_SM100;
  return a->sm >= 90 ? PSIM_FP8_ROWWISE_RATE_SM90 : 1.0;
}
