/* cost.h - the time of one compute task: measured (cost database), else the
 * calibrated roofline of DESIGN.md 5:
 *   t = max(flops / (peak * eff(flops)), bytes / (mem_bw * eff_mem)) + launch
 * where eff is the device type's GEMM efficiency curve for GEMM-like kernels
 * (matmul, attention, conv2d) and the vector peak applies to the others. */
#ifndef PSIM_COST_H
#define PSIM_COST_H

#include "sim/ir/cluster.h"
#include "sim/ir/model.h"

struct psim_costdb;

typedef enum psim_cost_origin {
  PSIM_ORIGIN_MEASURED = 0,
  PSIM_ORIGIN_INTERPOLATED,
  PSIM_ORIGIN_ESTIMATED,
  PSIM_ORIGIN_COUNT
} psim_cost_origin;

/* True for kinds whose kernels are GEMMs (tensor cores). */
bool psim_cost_is_gemm(psim_op_kind k);

/* Roofline time of a kernel on one device of type t, in s. */
double psim_cost_roofline(const psim_device_type *t, psim_dtype dt, bool gemm, double flops,
                          double bytes);

/* Time of one shard of op for a pass on device dev, in s; *origin says where
 * the figure came from. shard[i] is the extent of op->dims[i]. */
double psim_cost_compute(const psim_cluster *c, int32_t dev, const psim_model *m, const psim_op *op,
                         const int64_t *shard, psim_pass pass, const struct psim_costdb *db,
                         psim_cost_origin *origin);

/* Kernels a pass of op launches: one forward; a GEMM-like backward one per
 * matrix operand that needs a gradient (a linear layer's dX and dW are two
 * GEMMs; bias gradients fuse), other backwards one. */
int32_t psim_cost_kernels(const psim_model *m, const psim_op *op, psim_pass pass);

/* Time of the optimizer update of n_params parameters on device dev, in s
 * (mixed-precision Adam: a memory-bound pass over weights, fp32 master
 * weights, gradients and both moments). */
double psim_cost_optimizer(const psim_cluster *c, int32_t dev, double n_params,
                           const struct psim_costdb *db);

#endif
