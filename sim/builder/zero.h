/* zero.h - ZeRO's parameter all-gathers (zero.c), private to sim/builder/.
 *
 * ZeRO-1/2 (and Megatron-LM's distributed optimizer) keep full parameters:
 * gradients are reduce-scattered, each rank updates its shard, and the
 * updated parameters are all-gathered after the step: the same volume as an
 * all-reduce (Rajbhandari et al. 2020, section 7.2.1). ZeRO-3 (PyTorch
 * FSDP's FULL_SHARD) keeps 1/dp of the parameters: each unit's parameters
 * are all-gathered before its forward and again before its backward, and
 * freed after use, and gradients are reduce-scattered: 1.5x an all-reduce's
 * volume (section 7.2.2). */
#ifndef PSIM_BUILD_ZERO_H
#define PSIM_BUILD_ZERO_H

#include "sim/builder/build_impl.h"

/* Calls fn once per data-parallel group of op o's weight (the op dims in
 * mask split it): once per group when every device is simulated, once per
 * simulated representative (with the folded groups' stride) when folded. */
typedef psim_status (*psim_zero_group_fn)(psim_build *b, psim_group *g, void *ctx);
/* Which groups: the whole data-parallel group, or under HSDP (s->dp_replicate r > 1) its
 * shard groups (n / r consecutive members: ZeRO's reduce-scatter and gathers) or replicate
 * groups (the r members at one place of every shard group: the all-reduce across replicas;
 * none when r is 1). With r 1 a shard group is the whole group. */
typedef enum psim_zero_part {
  PSIM_ZERO_WHOLE = 0,
  PSIM_ZERO_SHARD,
  PSIM_ZERO_REPLICATE
} psim_zero_part;
psim_status psim_zero_each_group(psim_build *b, int32_t o, uint32_t mask, psim_zero_part part,
                                 psim_zero_group_fn fn, void *ctx);

/* ZeRO-3: the all-gathers of every unit's parameters before its forward and
 * its backward in every micro-batch, prefetched within s->zero_prefetch
 * parameters. Adds b->dp_bytes. */
psim_status psim_zero_gathers(psim_build *b);

/* ZeRO-3: adds to each device's weights (b->static_mem) the parameters
 * gathered at once: the unit computing and those prefetched ahead of it. */
psim_status psim_zero_gathered_memory(psim_build *b);

/* Share of a 16-bit parameter's bytes that op o's weights gather (ZeRO-3's unit gathers and
 * ZeRO-1/2's gathers after the step): FP8 matmul weights gathered in FP8 under a stack with
 * fp8_all_gather (torchtitan's enable_fsdp_float8_all_gather; NeMo's FP8_PARAMS, Megatron-Core's
 * fp8_param_gather: 1 byte per parameter), else 1. wbytes: bytes per 16-bit parameter. */
double psim_zero_gather_share(const psim_build *b, int32_t o, double wbytes);

/* Bytes a collective of `bytes` (full size) over n ranks sends, summed over
 * the ranks (ring volume: all-reduce 2(n-1)/n, all-gather and reduce-scatter
 * (n-1)/n of the buffer per rank). */
double psim_zero_coll_volume(psim_coll_kind kind, double bytes, int32_t n, int32_t groups);

#endif
