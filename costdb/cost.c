/* cost.c - compute-task times: the cost database first, else the roofline. */
#include "costdb/cost.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "costdb/kernels.h"

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
  if (op->attrs.fp8) /* an FP8 GEMM writing a high-precision output */
    return PSIM_DTYPE_FP8;
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

bool psim_cost_stack_active(const psim_stack *st) {
  return st->launch_s > 0 || st->flash_version > 0 || st->fp8_cast_bytes > 0 ||
         st->fp8_scale_s > 0 || st->wave_quant || st->attn_scale > 0 || st->gemm_scale > 0 ||
         st->n_fit > 0 || st->optimizer != PSIM_OPTIM_FUSED;
}

/* Elements of tensor ti in the shard (op dims at their shard extents, the others
 * whole). */
static double shard_elems(const psim_model *m, const psim_op *op, const int64_t *shard,
                          int32_t ti) {
  const psim_tensor *x = &m->tensors[ti];
  double e = 1;
  for (int32_t k = 0; k < x->rank; k++) {
    double n = (double)m->dims[x->dims[k]].size;
    for (int32_t i = 0; i < op->n_dims; i++)
      if (op->dims[i].dim == x->dims[k])
        n = (double)shard[i];
    e *= n;
  }
  return e;
}

/* The flash kernel's efficiency for an attention shard (key/value length from
 * the key's sequence dim); 0 when the stack or the table has none. */
static double flash_eff(const psim_gpu_arch *a, const psim_stack *st, const psim_model *m,
                        const psim_op *op, const int64_t *shard, psim_pass pass) {
  if (op->kind != PSIM_OP_ATTENTION || !op->attrs.flash || st->flash_version < 2)
    return 0;
  int32_t kv = m->tensors[op->in[1]].dims[1];
  double seq_kv = (double)m->dims[kv].size;
  for (int32_t i = 0; i < op->n_dims; i++)
    if (op->dims[i].dim == kv)
      seq_kv = (double)shard[i];
  return psim_kernels_flash_eff(st->flash_version, a, pass, seq_kv);
}

/* Wave quantisation of a matmul shard: the output's tiles forward, the mean over
 * the two gradient GEMMs (shaped like the inputs) backward. */
static double wave_eff(const psim_gpu_arch *a, const psim_model *m, const psim_op *op,
                       const int64_t *shard, psim_pass pass) {
  if (op->kind != PSIM_OP_MATMUL || op->n_in < 2)
    return 1.0;
  double grouped = psim_grouped_gemm_eff(a, m, op, shard); /* MoE experts: costdb/grouped_gemm.c */
  if (grouped > 0)
    return grouped;
  if (pass == PSIM_PASS_FWD)
    return psim_kernels_wave_eff(a, shard_elems(m, op, shard, op->out[0]));
  return 0.5 * (psim_kernels_wave_eff(a, shard_elems(m, op, shard, op->in[0])) +
                psim_kernels_wave_eff(a, shard_elems(m, op, shard, op->in[1])));
}

/* FP8 GEMMs: the casts of their operands to FP8 (memory-bound, one kernel each)
 * and the scaling kernels, s: the forward casts both inputs, the backward the
 * output gradient (the transposed copies come from the forward's
 * cast-transpose). Rowwise scaling (torchao Float8Linear's "rowwise" recipe;
 * torchao/float8/README.md) scales along each GEMM's reduction dim, so the
 * backward's GEMMs, which reduce along the other dims, need their own casts: the
 * output gradient for dgrad and again for wgrad, the input and the weight
 * column-wise (4 kernels, 2 out + in + weight elements). */
static double fp8_casts(const psim_device_type *t, const psim_stack *st, const psim_model *m,
                        const psim_op *op, const int64_t *shard, psim_pass pass, double launch) {
  if (st->fp8_cast_bytes <= 0 && st->fp8_scale_s <= 0)
    return 0;
  bool fwd = pass == PSIM_PASS_FWD;
  double in = shard_elems(m, op, shard, op->in[0]) + shard_elems(m, op, shard, op->in[1]);
  double out = shard_elems(m, op, shard, op->out[0]);
  double elems = fwd ? in : st->fp8_rowwise ? 2 * out + in : out;
  int32_t kernels = fwd ? 2 : st->fp8_rowwise ? 4 : 1;
  double mem_eff = t->eff.mem > 0 ? t->eff.mem : 1.0;
  double bytes_s = t->mem_bw > 0 ? elems * st->fp8_cast_bytes / (t->mem_bw * mem_eff) : 0;
  return bytes_s + st->fp8_scale_s + kernels * launch;
}

/* Eager PyTorch runs an RMSNorm or a SwiGLU written in Python as one kernel per
 * tensor op; torch.compile (Inductor) and the fused kernels of TE / Apex / Triton
 * run each as one kernel (the model file's op: read inputs, write outputs). Counted
 * from the code, per element of the output, 16-bit activations:
 * - RMSNorm, torchtitan/models/norms.py RMSNorm (pytorch/torchtitan, commit
 *   026e23a; torch.nn.RMSNorm's composite rms_norm is the same op sequence):
 *   forward x.float() (read 2, write 4), pow (4 + 4), mean (4), x * rsqrt (4 + 4),
 *   type_as (4 + 2), * weight (2 + 2) = 36 B in 6 kernels plus the per-row
 *   add-eps and rsqrt (8 kernels); backward, autograd through the same graph: the
 *   weight product (4) and its weight gradient (6 + 2), type_as (6), the rsqrt
 *   product's two gradients (8 + 12) and its row sum (4), mean's expand (4), pow's
 *   (12), the two paths summed (12), the cast back (6) = 76 B in 12 kernels.
 * - SwiGLU, torchtitan FeedForward w2(F.silu(w1(x)) * w3(x)): forward silu (2 + 2)
 *   and the product (4 + 2) = 10 B in 2 kernels; backward the product's two
 *   gradients (6 + 6) and silu_backward (6) = 18 B in 3 kernels.
 * LayerNorm and GELU are single native kernels in eager PyTorch: no change. Bytes
 * of the eager sequence (0 when the op runs fused), its kernels in *kernels. */
static double eager_traffic(const psim_stack *st, const psim_model *m, const psim_op *op,
                            const int64_t *shard, psim_pass pass, int32_t *kernels) {
  bool fwd = pass == PSIM_PASS_FWD;
  bool norm = op->kind == PSIM_OP_RMSNORM && !st->fused_norm;
  bool act =
      op->kind == PSIM_OP_ELEMENTWISE && !st->fused_act && op->fn && strcmp(op->fn, "swiglu") == 0;
  if (st->compile || !(norm || act) || op->n_out < 1)
    return 0;
  *kernels = norm ? (fwd ? 8 : 12) : (fwd ? 2 : 3);
  double per_elem = norm ? (fwd ? 36.0 : 76.0) : (fwd ? 10.0 : 18.0);
  return per_elem * shard_elems(m, op, shard, op->out[0]);
}

/* A compute shard under a software stack other than megatron-lm-2021's zero
 * value (sim/ir/stack.h): its launch overhead, the flash kernel for attention,
 * wave quantisation of GEMMs, FP8 casts, the fitted efficiency scales. */
static double stack_compute(const psim_device_type *t, const psim_stack *st, const psim_model *m,
                            const psim_op *op, const int64_t *shard, psim_pass pass, double flops,
                            double bytes) {
  psim_gpu_arch a = psim_kernels_arch(t->name);
  double attn_scale, gemm_scale;
  psim_stack_scales(st, t->name, &attn_scale, &gemm_scale);
  double launch = st->launch_s > 0 ? st->launch_s : t->launch_s;
  psim_dtype dt = op_dtype(m, op);
  bool gemm = psim_cost_is_gemm(op->kind);
  double mem_eff = t->eff.mem > 0 ? t->eff.mem : 1.0;
  double t_bytes = t->mem_bw > 0 ? bytes / (t->mem_bw * mem_eff) : 0;
  double fe = flash_eff(&a, st, m, op, shard, pass) * attn_scale;
  if (fe > 0) { /* one fused kernel forward; the backward's preprocessing and main kernel */
    double peak = psim_cost_peak_flops(t, dt, true);
    double t_flops = peak > 0 && flops > 0 ? flops / (peak * fmin(fe, 1.0)) : 0;
    return fmax(t_flops, t_bytes) + (pass == PSIM_PASS_FWD ? 1 : 2) * launch;
  }
  if (!gemm &&
      bytes > 0) { /* eager PyTorch's decomposition of norms / SwiGLU when nothing fuses them */
    int32_t kernels = 1;
    double eager_bytes = eager_traffic(st, m, op, shard, pass, &kernels);
    if (eager_bytes > 0) {
      double peak = psim_cost_peak_flops(t, dt, false);
      double t_eager = t->mem_bw > 0 ? eager_bytes / (t->mem_bw * mem_eff) : 0;
      return fmax(peak > 0 ? flops / peak : 0, t_eager) + kernels * launch;
    }
  }
  psim_efficiency eff = t->eff;
  eff.gemm_max = fmin(1.0, (eff.gemm_max > 0 ? eff.gemm_max : 1.0) * gemm_scale);
  if (gemm && st->wave_quant)
    eff.gemm_max *= wave_eff(&a, m, op, shard, pass);
  if (gemm && dt == PSIM_DTYPE_FP8 && st->fp8_rowwise)
    eff.gemm_max *= psim_kernels_fp8_rowwise_rate(&a);
  double roof = psim_cost_roofline(t, &eff, dt, gemm, flops, bytes) - t->launch_s;
  double time = roof + psim_cost_kernels(m, op, pass) * launch;
  if (gemm && dt == PSIM_DTYPE_FP8 && op->kind == PSIM_OP_MATMUL && op->n_in >= 2)
    time += fp8_casts(t, st, m, op, shard, pass, launch);
  return time;
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
  if (psim_cost_stack_active(&c->stack))
    return stack_compute(t, &c->stack, m, op, shard, pass, flops, bytes) * slow;
  /* the roofline includes one launch; a backward of k kernels pays k */
  double extra = (psim_cost_kernels(m, op, pass) - 1) * t->launch_s;
  bool gemm = psim_cost_is_gemm(op->kind);
  return (psim_cost_roofline(t, NULL, op_dtype(m, op), gemm, flops, bytes) + extra) * slow;
}

double psim_cost_fp8_cast_s(const psim_cluster *c, int32_t dev, const psim_model *m,
                            const psim_op *op, const int64_t *shard, psim_pass pass,
                            const psim_costdb *db) {
  const psim_device *d = &c->devices[dev];
  const psim_device_type *t = &c->types[d->type];
  const psim_stack *st = &c->stack;
  double seconds;
  psim_cost_origin origin;
  if (op->kind != PSIM_OP_MATMUL || op->n_in < 2 || op_dtype(m, op) != PSIM_DTYPE_FP8 ||
      !psim_cost_stack_active(st) || db_shard(db, m, op, shard, pass, &seconds, &origin))
    return 0;
  double launch = st->launch_s > 0 ? st->launch_s : t->launch_s;
  return fp8_casts(t, st, m, op, shard, pass, launch) * (d->slowdown > 0 ? d->slowdown : 1.0);
}

double psim_cost_fp8_cast_elems_s(const psim_cluster *c, int32_t dev, double n) {
  const psim_device *d = &c->devices[dev];
  const psim_device_type *t = &c->types[d->type];
  double mem_eff = t->eff.mem > 0 ? t->eff.mem : 1.0;
  if (c->stack.fp8_cast_bytes <= 0 || t->mem_bw <= 0 || n <= 0)
    return 0;
  return n * c->stack.fp8_cast_bytes / (t->mem_bw * mem_eff) *
         (d->slowdown > 0 ? d->slowdown : 1.0);
}

/* Optimizer step traffic per parameter, mixed-precision Adam as Megatron-LM
 * runs it: unscale and inf check (read 4, write 4), gradient norm (read 4),
 * Adam (read gradient, master, m, v: 16; write master, m, v: 12; write the
 * 16-bit weight: 2), zero the main gradient (write 4) = 46 bytes
 * (tests/calibration/prototype/FINDINGS.md 3.8). */
#define PSIM_ADAM_BYTES_PER_PARAM 46.0

/* Traffic per parameter of the other implementations (sim/ir/stack.h):
 * torch.optim.AdamW(fused=True) on fp32 shards (FSDP keeps fp32 parameters): one
 * kernel reads parameter, gradient and both moments and writes parameter and
 * moments (28) plus the gradient-norm read (4) = 32 bytes. foreach=True
 * (_multi_tensor_adamw, torch/optim/adamw.py, PyTorch 2.x): weight decay (read,
 * write p: 8), lerp of m (read m, g; write m: 12), mul and addcmul of v (8 + 12),
 * sqrt, division and eps of v's root into a temporary (8 + 8 + 8), addcdiv into p
 * (read p, m, temporary; write p: 16), plus the gradient-norm read (4) = 84
 * bytes. composer's DecoupledAdamW (composer/optim/decoupled_weight_decay.py) loops
 * over the tensors with the equivalent unfused ops (mul/add for m, mul/addcmul for v,
 * sqrt, div, add, addcdiv: 88 bytes); it is costed as foreach. torchtitan's
 * optimizer.implementation defaults to "fused" (torch fused AdamW). */
static double adam_bytes(psim_optim_impl impl) {
  return impl == PSIM_OPTIM_TORCH_FUSED ? 32.0
         : impl == PSIM_OPTIM_FOREACH   ? 84.0
                                        : PSIM_ADAM_BYTES_PER_PARAM;
}

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
                            adam_bytes(c->stack.optimizer) * n_params) *
             slow +
         t->rt.iteration_s;
}
