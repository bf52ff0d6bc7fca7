/* cost.c - compute-task times: the cost database first, else the roofline. */
#include "costdb/cost.h"

#include <assert.h>
#include <math.h>

bool psim_cost_is_gemm(psim_op_kind k) {
  return k == PSIM_OP_MATMUL || k == PSIM_OP_ATTENTION || k == PSIM_OP_CONV2D;
}

double psim_cost_peak_flops(const psim_device_type *t, psim_dtype dt, bool gemm) {
  double fp32 = t->peak_flops[PSIM_DTYPE_FP32];
  double peak = dt < PSIM_DTYPE_COUNT && t->peak_flops[dt] > 0 ? t->peak_flops[dt] : fp32;
  if (!gemm) /* vector units: tensor cores do not help element-wise kernels */
    peak = fp32 > 0 ? fp32 : peak;
  return peak;
}

/* GEMM efficiency curve eff(f) = gemm_max * f / (f + half_flops): small
 * kernels cannot fill the device (tile quantisation, wave tails). */
static double gemm_efficiency(const psim_efficiency *e, double flops) {
  double max = e->gemm_max > 0 ? e->gemm_max : 1.0;
  if (e->gemm_half_flops <= 0)
    return max;
  return max * flops / (flops + e->gemm_half_flops);
}

double psim_cost_roofline(const psim_device_type *t, const psim_efficiency *eff, psim_dtype dt,
                          bool gemm, double flops, double bytes) {
  if (!eff)
    eff = &t->eff;
  double peak = psim_cost_peak_flops(t, dt, gemm);
  double e = gemm ? gemm_efficiency(eff, flops) : 1.0;
  double mem_eff = eff->mem > 0 ? eff->mem : 1.0;
  double t_flops = peak > 0 && flops > 0 ? flops / (peak * e) : 0;
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

/* db's time for the shard, keyed by its kernel shape (costdb/costdb.h) with
 * the dtype of the op's output; false when db has none. */
static bool db_shard(const psim_costdb *db, const psim_model *m, const psim_op *op,
                     const int64_t *shard, psim_pass pass, double *seconds,
                     psim_cost_origin *origin) {
  psim_cost_key key;
  if (!db || db->n_entries == 0 || (op->flops[pass] <= 0 && op->bytes[pass] <= 0))
    return false; /* free in the model (a view): the roofline gives it no time */
  if (psim_costdb_key_from_op(m, op, shard, pass, &key) != PSIM_OK)
    return false;
  key.dtype = op_dtype(m, op);
  return psim_costdb_lookup(db, &key, NULL, seconds, origin);
}

double psim_cost_compute(const psim_cluster *c, int32_t dev, const psim_model *m, const psim_op *op,
                         const int64_t *shard, psim_pass pass, const psim_costdb *db,
                         psim_cost_origin *origin) {
  assert(dev >= 0 && dev < c->n_devices && op && shard && origin);
  const psim_device *d = &c->devices[dev];
  const psim_device_type *t = &c->types[d->type];
  double slow = d->slowdown > 0 ? d->slowdown : 1.0;
  double seconds;
  if (op->kind == PSIM_OP_RESHAPE || op->kind == PSIM_OP_SPLIT) {
    *origin = PSIM_ORIGIN_ESTIMATED; /* views: no kernel, no data movement */
    return 0;
  }
  if (db_shard(db, m, op, shard, pass, &seconds, origin))
    return seconds * slow;
  double flops = 0, bytes = 0;
  psim_op_shard_work(m, op, shard, pass, &flops, &bytes);
  *origin = PSIM_ORIGIN_ESTIMATED;
  /* the roofline includes one launch; a backward of k kernels pays k */
  double extra = (psim_cost_kernels(m, op, pass) - 1) * t->launch_s;
  bool gemm = psim_cost_is_gemm(op->kind);
  return (psim_cost_roofline(t, NULL, op_dtype(m, op), gemm, flops, bytes) + extra) * slow;
}

/* Optimizer step traffic per parameter, mixed-precision Adam as Megatron-LM
 * runs it: unscale and inf check (read 4, write 4), gradient norm (read 4),
 * Adam (read gradient, master, m, v: 16; write master, m, v: 12; write the
 * 16-bit weight: 2), zero the main gradient (write 4) = 46 bytes
 * (tests/calibration/prototype/FINDINGS.md 3.8). */
#define PSIM_ADAM_BYTES_PER_PARAM 46.0

/* db's time for the update of n_params fp32 parameters; false when none. */
static bool db_optimizer(const psim_costdb *db, double n_params, double *seconds) {
  if (!db || db->n_entries == 0 || n_params < 1)
    return false;
  psim_cost_key key;
  psim_cost_origin origin;
  psim_costdb_key_adam((int64_t)n_params, PSIM_DTYPE_FP32, &key);
  return psim_costdb_lookup(db, &key, NULL, seconds, &origin);
}

double psim_cost_optimizer(const psim_cluster *c, int32_t dev, double n_params,
                           const psim_costdb *db) {
  assert(dev >= 0 && dev < c->n_devices);
  const psim_device *d = &c->devices[dev];
  const psim_device_type *t = &c->types[d->type];
  double slow = d->slowdown > 0 ? d->slowdown : 1.0;
  if (n_params <= 0)
    return t->rt.iteration_s;
  double measured;
  if (db_optimizer(db, n_params, &measured))
    return measured * slow + t->rt.iteration_s;
  return psim_cost_roofline(t, NULL, PSIM_DTYPE_FP32, false, 10.0 * n_params,
                            PSIM_ADAM_BYTES_PER_PARAM * n_params) *
             slow +
         t->rt.iteration_s;
}
