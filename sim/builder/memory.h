/* memory.h - the public part of the memory model (sim/builder/memory.c). */
#ifndef PSIM_MEMORY_H
#define PSIM_MEMORY_H

#include <stdbool.h>

#include "sim/ir/model.h"

/* Whether an op of this kind keeps its activation inputs for its backward
 * (Korthikanti et al. 2022, section 4.1: matmuls, norms and non-linear
 * activations do; adds, scaling and masking do not; dropout keeps a 1-byte
 * mask and softmax its output instead). */
bool psim_memory_saves_inputs(const psim_op *op);

/* Bytes per parameter of a model of this dtype training with Adam: out[0]
 * weights, out[1] gradients (as accumulated and reduced), out[2] optimizer
 * state (fp32 master weights, fp32 moments, and for fp16 the fp32 main
 * gradients), after Megatron-Core's distributed-optimizer table
 * (docs/source/api-guide/dist_optimizer.md, "bytes per parameter"): fp16
 * params and grads 2 + 2 + 16 = 20, bf16 params with fp32 grads 2 + 4 + 12
 * = 18, fp32 4 + 4 + 8 = 16. FP8 training (Transformer Engine, Megatron's
 * --fp8-format) keeps bf16 params and fp32 main grads, casting to FP8 per
 * GEMM, so it is the bf16 row: 18. ZeRO-1 (the distributed optimizer)
 * shards out[2], ZeRO-2 also out[1], ZeRO-3 also out[0]. */
void psim_memory_param_bytes(psim_dtype dtype, double out[3]);

#endif
