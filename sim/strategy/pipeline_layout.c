/* pipeline_layout.c - Megatron-Core's uneven pipeline splits: the first/last stage
 * layer counts (--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers)
 * and the general --pipeline-model-parallel-layout string. Rules from Megatron-LM at
 * core_v0.15.0: megatron/core/transformer/transformer_config.py (__post_init__, "Uneven
 * PP" and "PP layout"), transformer_block.py (get_num_layers_to_build),
 * transformer_layer.py (get_transformer_layer_offset) and
 * pipeline_parallel_layer_layout.py (PipelineParallelLayerLayout). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/strategy/strategy.h"

/* ---- first / last stage layer counts ---- */

static psim_status check_end(const char *key, int32_t n, int32_t v) {
  if (n < 0)
    return psim_error(PSIM_EINPUT, "%s: %d; expected >= 1 (0 = an even split)", key, (int)n);
  if (n > 0 && n % v != 0) /* transformer_config.py: "must be divisible by virtual ..." */
    return psim_error(PSIM_EINPUT,
                      "%s: %d layers do not divide into the %d virtual stages of the stage "
                      "(Megatron-Core's rule)",
                      key, (int)n, (int)v);
  return PSIM_OK;
}

/* The middle stages' layers: count - first - last over the stages left, each a
 * multiple of v (transformer_config.py: "number of layers at middle stage ... must be
 * divisible by the middle pipeline model parallel size", then "... by virtual pipeline
 * parallel degree"); *per: layers per middle stage. */
static psim_status middle_layers(int32_t count, int32_t pp, int32_t v, int32_t first, int32_t last,
                                 int32_t *per) {
  int32_t mid_stages = pp - (first > 0) - (last > 0);
  int64_t mid = (int64_t)count - first - last;
  const char *key = first > 0 ? "first_stage_layers" : "last_stage_layers";
  if (mid < 0 || (mid_stages == 0 && mid != 0))
    return psim_error(PSIM_EINPUT,
                      "%s: first_stage_layers %d + last_stage_layers %d leave %lld of the "
                      "model's %d transformer layers for %d middle stages",
                      key, (int)first, (int)last, (long long)mid, (int)count, (int)mid_stages);
  *per = 0;
  if (mid_stages == 0)
    return PSIM_OK;
  if (mid % mid_stages != 0 || (mid / mid_stages) % v != 0)
    return psim_error(PSIM_EINPUT,
                      "%s: the %lld layers left for the %d middle stages do not divide evenly "
                      "(x %d virtual stages), Megatron-Core's rule",
                      key, (long long)mid, (int)mid_stages, (int)v);
  *per = (int32_t)(mid / mid_stages);
  if (*per < v)
    return psim_error(PSIM_EINPUT,
                      "%s: the middle stages get %d layers each, fewer than their %d virtual "
                      "stages (a chunk without layers cannot be expressed)",
                      key, (int)*per, (int)v);
  return PSIM_OK;
}

psim_status psim_megatron_chunk_layers(int32_t count, int32_t pp, int32_t v, int32_t first,
                                       int32_t last, int32_t *sizes) {
  PSIM_CHECK(check_end("first_stage_layers", first, v));
  PSIM_CHECK(check_end("last_stage_layers", last, v));
  if (pp < 2 && (first > 0 || last > 0))
    return psim_error(PSIM_EINPUT, "%s: uneven first/last stages need pp > 1 (pp = %d)",
                      first > 0 ? "first_stage_layers" : "last_stage_layers", (int)pp);
  int32_t per = 0;
  PSIM_CHECK(middle_layers(count, pp, v, first, last, &per));
  /* get_num_layers_to_build: every virtual stage of a physical stage gets 1/v of its
   * layers; pipeline order is chunk c on physical stage c % pp (offsets in
   * get_transformer_layer_offset follow that order) */
  for (int32_t c = 0; c < pp * v; c++) {
    int32_t r = c % pp;
    int32_t n = r == 0 && first > 0 ? first : r == pp - 1 && last > 0 ? last : per;
    sizes[c] = n / v;
  }
  return PSIM_OK;
}
