/* cost.c - compute-task times: cost database first, else calibrated roofline. */
#include "costdb/cost.h"

#include <math.h>

#include "costdb/costdb_hook.h"

bool psim_cost_is_gemm(psim_op_kind k) {
  return k == PSIM_OP_MATMUL || k == PSIM_OP_ATTENTION || k == PSIM_OP_CONV2D;
}

/* GEMM efficiency curve eff(f) = gemm_max * f / (f + half_flops): small
 * kernels cannot fill the device (tile quantisation, wave tails). */
static double gemm_efficiency(const psim_efficiency *e, double flops) {
  double max = e->gemm_max > 0 ? e->gemm_max : 1.0;
  if (e->gemm_half_flops <= 0)
    return max;
  return max * flops / (flops + e->gemm_half_flops);
}

double psim_cost_roofline(const psim_device_type *t, psim_dtype dt, bool gemm, double flops,
                          double bytes) {
  double peak = t->peak_flops[dt] > 0 ? t->peak_flops[dt] : t->peak_flops[PSIM_DTYPE_FP32];
  if (!gemm) /* vector units: tensor cores do not help element-wise kernels */
    peak = t->peak_flops[PSIM_DTYPE_FP32] > 0 ? t->peak_flops[PSIM_DTYPE_FP32] : peak;
  double eff = gemm ? gemm_efficiency(&t->eff, flops) : 1.0;
  double mem_eff = t->eff.mem > 0 ? t->eff.mem : 1.0;
  double t_flops = peak > 0 && flops > 0 ? flops / (peak * eff) : 0;
  double t_bytes = t->mem_bw > 0 ? bytes / (t->mem_bw * mem_eff) : 0;
  return fmax(t_flops, t_bytes) + t->launch_s;
}

static psim_dtype op_dtype(const psim_model *m, const psim_op *op) {
  return op->n_out > 0 ? m->tensors[op->out[0]].dtype : m->dtype;
}

int32_t psim_cost_kernels(const psim_model *m, const psim_op *op, psim_pass pass) {
  if (pass == PSIM_PASS_FWD || !psim_cost_is_gemm(op->kind))
    return 1; /* element-wise backwards are one fused kernel */
  int32_t n = 0;
  for (int32_t i = 0; i < op->n_in; i++) /* one GEMM per gradient; bias grads fuse */
    n += m->tensors[op->in[i]].requires_grad && m->tensors[op->in[i]].rank >= 2;
  return n > 0 ? n : 1;
}

double psim_cost_compute(const psim_cluster *c, int32_t dev, const psim_model *m, const psim_op *op,
                         const int64_t *shard, psim_pass pass, const struct psim_costdb *db,
                         psim_cost_origin *origin) {
  const psim_device *d = &c->devices[dev];
  const psim_device_type *t = &c->types[d->type];
  double slow = d->slowdown > 0 ? d->slowdown : 1.0;
  double seconds;
  if (op->kind == PSIM_OP_RESHAPE || op->kind == PSIM_OP_SPLIT) {
    *origin = PSIM_ORIGIN_ESTIMATED; /* views: no kernel, no data movement */
    return 0;
  }
  if (db &&
      psim_costdb_hook_lookup_model(db, m, op, shard, pass, op_dtype(m, op), &seconds, origin))
    return seconds * slow;
  double flops = 0, bytes = 0;
  psim_op_shard_work(m, op, shard, pass, &flops, &bytes);
  *origin = PSIM_ORIGIN_ESTIMATED;
  /* the roofline includes one launch; a backward of k kernels pays k */
  double extra = (psim_cost_kernels(m, op, pass) - 1) * t->launch_s;
  return (psim_cost_roofline(t, op_dtype(m, op), psim_cost_is_gemm(op->kind), flops, bytes) +
          extra) *
         slow;
}

/* Optimizer step traffic per parameter, mixed-precision Adam as Megatron-LM
 * runs it: unscale and inf check (read 4, write 4), gradient norm (read 4),
 * Adam (read gradient, master, m, v: 16; write master, m, v: 12; write the
 * 16-bit weight: 2), zero the main gradient (write 4) = 46 bytes
 * (tests/calibration/prototype/FINDINGS.md 3.8). */
#define PSIM_ADAM_BYTES_PER_PARAM 46.0

double psim_cost_optimizer(const psim_cluster *c, int32_t dev, double n_params,
                           const struct psim_costdb *db) {
  const psim_device *d = &c->devices[dev];
  const psim_device_type *t = &c->types[d->type];
  double slow = d->slowdown > 0 ? d->slowdown : 1.0;
  if (n_params <= 0)
    return t->rt.iteration_s;
  double measured;
  if (psim_costdb_hook_optimizer(db, n_params, &measured))
    return measured * slow + t->rt.iteration_s;
  return psim_cost_roofline(t, PSIM_DTYPE_FP32, false, 10.0 * n_params,
                            PSIM_ADAM_BYTES_PER_PARAM * n_params) *
             slow +
         t->rt.iteration_s;
}
