/* cost.h - the time of one compute task: measured or interpolated from the
 * cost database passed in (psim_sim_options.costdb; costdb/costdb.h), else
 * the calibrated roofline of DESIGN.md 5, the one roofline of the project:
 *   t = max(flops / (peak * eff(flops)), bytes / (mem_bw * eff_mem)) + launch
 * where, for GEMM-like kernels (matmul, attention, conv2d), peak is the
 * dtype's tensor peak and eff the device type's GEMM efficiency curve
 * eff(f) = gemm_max f / (f + gemm_half_flops); for the others the vector
 * (fp32) peak applies at full efficiency. */
#ifndef PSIM_COST_H
#define PSIM_COST_H

#include "costdb/costdb.h"
#include "sim/ir/cluster.h"
#include "sim/ir/model.h"

/* True for kinds whose kernels are GEMMs (tensor cores). */
bool psim_cost_is_gemm(psim_op_kind k);

/* Peak FLOP/s of device type t for a kernel of dtype dt: the dtype's peak
 * (fp32's when the type lists none) for GEMMs, the fp32 vector peak for
 * other kernels (tensor cores do not help element-wise ones). */
double psim_cost_peak_flops(const psim_device_type *t, psim_dtype dt, bool gemm);

/* Roofline time of a kernel on one device of type t, in s, with efficiency
 * curves eff (NULL: the type's own, t->eff; a fitted set from
 * psim_costdb_fit_efficiency otherwise). */
double psim_cost_roofline(const psim_device_type *t, const psim_efficiency *eff, psim_dtype dt,
                          bool gemm, double flops, double bytes);

/* Time of one shard of op for a pass on device dev, in s: db's measured or
 * interpolated time when it has one (db may be NULL), else the roofline;
 * *origin says which. shard[i] is the extent of op->dims[i]. */
double psim_cost_compute(const psim_cluster *c, int32_t dev, const psim_model *m, const psim_op *op,
                         const int64_t *shard, psim_pass pass, const psim_costdb *db,
                         psim_cost_origin *origin);

/* The part of psim_cost_compute's time that casts an FP8 matmul's operands
 * (0 when db prices the shard, the stack casts nothing or op is not an FP8
 * matmul), in s: async TP's chunked GEMMs (sim/builder/context.c) pay it once
 * for the whole shard, not per chunk. */
double psim_cost_fp8_cast_s(const psim_cluster *c, int32_t dev, const psim_model *m,
                            const psim_op *op, const int64_t *shard, psim_pass pass,
                            const psim_costdb *db);

/* The time of casting n 16-bit elements to FP8 on device dev under the cluster's
 * stack (its fp8_cast_bytes per element at the device's memory rate), in s,
 * without launches; 0 when the stack casts nothing. */
double psim_cost_fp8_cast_elems_s(const psim_cluster *c, int32_t dev, double n);

/* True when st changes any compute cost (every field of megatron-lm-2021 is
 * zero: then every cost is the calibrated roofline's, unchanged). */
bool psim_cost_stack_active(const psim_stack *st);

/* Kernels a pass of op launches: one forward; a GEMM-like backward one per
 * matrix operand that needs a gradient (a linear layer's dX and dW are two
 * GEMMs; bias gradients fuse), other backwards one. */
int32_t psim_cost_kernels(const psim_model *m, const psim_op *op, psim_pass pass);

/* Time of the optimizer update of n_params parameters on device dev, in s
 * (mixed-precision Adam: a memory-bound pass over weights, fp32 master
 * weights, gradients and both moments); db's measurement when it has one. */
double psim_cost_optimizer(const psim_cluster *c, int32_t dev, double n_params,
                           const psim_costdb *db);

#endif
