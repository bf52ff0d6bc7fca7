/* memory.h - the public part of the memory model (sim/build/memory.c). */
#ifndef PSIM_MEMORY_H
#define PSIM_MEMORY_H

#include <stdbool.h>

#include "sim/ir/model.h"

/* Whether an op of this kind keeps its activation inputs for its backward
 * (Korthikanti et al. 2022, section 4.1: matmuls, norms and non-linear
 * activations do; adds, scaling and masking do not; dropout keeps a 1-byte
 * mask and softmax its output instead). */
bool psim_memory_saves_inputs(const psim_op *op);

#endif
