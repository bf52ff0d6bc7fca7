/* memory.c - memory per device from the simulated timeline.
 *
 * Static memory (weights, gradients, optimizer state) follows from each
 * device's weight shards and the ZeRO stage; activations are events on the
 * timeline (allocated when a forward or recompute task ends, freed when the
 * backward task ends), so the in-flight micro-batches of each pipeline
 * schedule are simulated rather than assumed.
 *
 * Bytes per parameter: psim_memory_param_bytes (memory.h: Megatron-Core's
 * distributed-optimizer table). ZeRO stage 1 shards the optimizer state over
 * the data-parallel group, stage 2 also the gradients, stage 3 also the
 * weights, plus the parameters gathered at once (zero.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/builder/build_impl.h"
#include "sim/builder/memory.h"
#include "sim/builder/zero.h"
#include "sim/core/alloc.h"

void psim_memory_param_bytes(psim_dtype dtype, double out[3]) {
  switch (dtype) {
  case PSIM_DTYPE_FP16: out[0] = 2, out[1] = 2, out[2] = 16; return;
  case PSIM_DTYPE_BF16:
  case PSIM_DTYPE_FP8: out[0] = 2, out[1] = 4, out[2] = 12; return;
  default: out[0] = 4, out[1] = 4, out[2] = 8; return;
  }
}

static double shard_elems_of(const psim_model *m, const psim_op *op, const int64_t *ext,
                             int32_t t) {
  const psim_tensor *ten = &m->tensors[t];
  double v = 1;
  for (int32_t j = 0; j < ten->rank; j++) {
    int32_t i = psim_op_dim_index(op, ten->dims[j]);
    v *= i >= 0 ? (double)ext[i] : (double)m->dims[ten->dims[j]].size;
  }
  return v;
}

static double tensor_shard_bytes(const psim_model *m, const psim_op *op, const int64_t *ext,
                                 int32_t t) {
  return shard_elems_of(m, op, ext, t) * (double)psim_dtype_bytes(m->tensors[t].dtype);
}

bool psim_memory_saves_inputs(const psim_op *op) {
  switch (op->kind) {
  case PSIM_OP_MATMUL:
  case PSIM_OP_LAYERNORM:
  case PSIM_OP_RMSNORM:
  case PSIM_OP_CONV2D:
  case PSIM_OP_POOL2D:
  case PSIM_OP_CROSS_ENTROPY:
  case PSIM_OP_ATTENTION:
  case PSIM_OP_DISPATCH:
  case PSIM_OP_COMBINE: return true;
  case PSIM_OP_ELEMENTWISE:
    return op->fn && strcmp(op->fn, "add") != 0 && strcmp(op->fn, "sub") != 0 &&
           strcmp(op->fn, "scale") != 0 && strcmp(op->fn, "mask") != 0 &&
           strcmp(op->fn, "bias") != 0;
  default: return false;
  }
}

static double kept_outputs(const psim_model *m, const psim_op *op, const int64_t *ext) {
  double v = 0;
  for (int32_t i = 0; i < op->n_out; i++) {
    if (op->kind == PSIM_OP_DROPOUT) /* 1-byte mask per element */
      v += shard_elems_of(m, op, ext, op->out[i]);
    else if (op->kind == PSIM_OP_SOFTMAX)
      v += tensor_shard_bytes(m, op, ext, op->out[i]);
    else if (op->kind == PSIM_OP_ATTENTION && !op->attrs.flash) /* probabilities + mask */
      v += 0;
  }
  return v;
}

/* Elements of the largest shard of tensor t as its producer p holds it, per
 * micro-batch. */
double psim_memory_producer_shard_elems(const psim_build *b, int32_t p, int32_t t) {
  const psim_model *m = b->m;
  while (psim_build_is_view(&m->ops[p]) && m->ops[p].n_in == 1 && m->ops[p].n_out == 1 &&
         m->tensors[m->ops[p].in[0]].producer >= 0) { /* a view holds no copy: its source's */
    t = m->ops[p].in[0];
    p = m->tensors[t].producer;
  }
  const psim_op *op = &m->ops[p];
  const psim_tensor *ten = &m->tensors[t];
  double v = 1;
  for (int32_t j = 0; j < ten->rank; j++) {
    int64_t n = m->dims[ten->dims[j]].size;
    if (m->dims[ten->dims[j]].role == PSIM_ROLE_BATCH && b->n_micro > 1)
      n /= b->n_micro;
    int32_t i = psim_op_dim_index(op, ten->dims[j]);
    v *= (double)psim_shard_max(n, i >= 0 ? b->s->ops[p].degree[i] : 1);
  }
  return v;
}

double psim_memory_saved_bytes(const psim_build *b, int32_t o, const int64_t *ext,
                               bool recomputed) {
  const psim_model *m = b->m;
  const psim_op *op = &m->ops[o];
  double v = 0;
  for (int32_t i = 0; i < op->n_in; i++) {
    int32_t t = op->in[i];
    if (!(b->save_slots[o] & (1u << i)))
      continue;
    int32_t p = m->tensors[t].producer;
    /* a recomputed op keeps only inputs that the recompute cannot rebuild */
    bool kept = p < 0 || psim_build_rc_unit(b, p) != psim_build_rc_unit(b, o) ||
                !psim_build_recomputed(b, p);
    if (recomputed && !kept)
      continue;
    /* an input gathered from smaller shards is kept as its producer's shard
     * and gathered again in backward (Megatron-LM's sequence parallelism,
     * Korthikanti et al. 2022, section 4.2.2) */
    double elems = shard_elems_of(m, op, ext, t);
    if (p >= 0)
      elems = fmin(elems, psim_memory_producer_shard_elems(b, p, t));
    v += elems * (double)psim_dtype_bytes(m->tensors[t].dtype);
  }
  if (!recomputed)
    v += kept_outputs(m, op, ext);
  return v;
}

/* Marks, per op, the activation inputs it saves; a tensor is saved once (by
 * its first saving consumer). Under recomputation every layer keeps its
 * inputs, which are saved by their first consumer. */
static psim_status mark_saves(psim_build *b) {
  const psim_model *m = b->m;
  b->save_slots = psim_calloc((size_t)m->n_ops + 1, sizeof *b->save_slots);
  uint8_t *done = psim_calloc((size_t)m->n_tensors + 1, 1);
  if (!b->save_slots || !done) {
    psim_free(done);
    return psim_error(PSIM_ENOMEM, "out of memory in the memory model");
  }
  for (int32_t o = 0; o < m->n_ops; o++) {
    const psim_op *op = &m->ops[o];
    for (int32_t i = 0; i < op->n_in; i++) {
      int32_t t = op->in[i];
      if (m->tensors[t].kind == PSIM_TENSOR_WEIGHT || done[t])
        continue;
      int32_t p = m->tensors[t].producer;
      bool boundary = p < 0 || psim_build_rc_unit(b, p) != psim_build_rc_unit(b, o);
      bool must = psim_memory_saves_inputs(op) || (b->s->recompute == PSIM_RECOMPUTE_FULL &&
                                                   boundary && psim_build_recomputed(b, o));
      if (!must || m->tensors[t].dtype == PSIM_DTYPE_INT32 ||
          m->tensors[t].dtype == PSIM_DTYPE_INT64)
        continue;
      b->save_slots[o] |= 1u << i;
      done[t] = 1;
    }
  }
  psim_free(done);
  return PSIM_OK;
}

/* Data-parallel degree of a weight in op o: shards that differ only off its dims. */
static double weight_dp(const psim_build *b, int32_t o, int32_t t) {
  const psim_op *op = &b->m->ops[o];
  double k = 1;
  for (int32_t i = 0; i < op->n_dims; i++) {
    bool in = false;
    for (int32_t j = 0; j < b->m->tensors[t].rank; j++)
      in = in || b->m->tensors[t].dims[j] == op->dims[i].dim;
    if (!in)
      k *= b->s->ops[o].degree[i];
  }
  return k;
}

/* Adds share w to its device's static memory: a weight tensor counts once per device where
 * shares of it follow each other on that device (a weight read by consecutive ops). */
static void count_share(psim_build *b, int32_t *counted, const psim_weight_share *w) {
  if (counted[w->device] == w->tensor)
    return;
  counted[w->device] = w->tensor;
  for (int k = 0; k < 3; k++)
    b->static_mem[3 * w->device + k] += w->bytes[k];
}

/* Weight t's shares of op o (data-parallel degree dp) counted for the simulated devices of
 * a folded build, each shard's size once (a shard's replicas follow each other), the same
 * figures in the same order per device as op_weight_shares. The op's locals (locals.c
 * psim_build_make_locals) are its entries on simulated devices in list order, so walking
 * them counts the same shares in the same order as a scan of every entry that skips the
 * devices not simulated (16,384 entries an op at 131,072 GPUs, 8 of them simulated). */
static psim_status simulated_shares(psim_build *b, int32_t o, int32_t t, double dp,
                                    int32_t *counted) {
  const psim_model *m = b->m;
  const psim_op *op = &m->ops[o];
  const psim_op_config *cfg = &b->s->ops[o];
  double pb[3];
  psim_memory_param_bytes(m->dtype, pb);
  int zs = b->s->zero_stage;
  double n = -1;
  for (int32_t k = b->loc_first[o], last = -1; k < b->loc_first[o + 1]; k++) {
    const psim_op_local *loc = &b->locals[k];
    if (loc->shard != last) {
      int64_t ext[PSIM_MAX_OP_DIMS];
      for (int32_t i = op->n_dims - 1, rem = loc->shard; i >= 0; i--) {
        ext[i] =
            psim_shard_size(m->dims[op->dims[i].dim].size, cfg->degree[i], rem % cfg->degree[i]);
        rem /= cfg->degree[i];
      }
      n = shard_elems_of(m, op, ext, t);
      last = loc->shard;
    }
    psim_weight_share w = {loc->device,
                           t,
                           {n * pb[0] / (zs >= 3 ? dp : 1), n * pb[1] / (zs >= 2 ? dp : 1),
                            n * pb[2] / (zs >= 1 ? dp : 1)}};
    count_share(b, counted, &w);
  }
  return PSIM_OK;
}

/* A folded build's devices that are not simulated: their static memory is their
 * representative's (rep_of). Exact: folding needs every op of a stage over all of the
 * stage's devices, split evenly (locals.c can_fold), so a device and its representative
 * hold shares of the same sizes of the same weights in the same order, and sum them alike. */
static void fill_folded(psim_build *b) {
  for (int32_t d = 0; d < b->c->n_devices; d++)
    if (!b->simulated[d] && b->rep_of[d] != d)
      memcpy(&b->static_mem[3 * (size_t)d], &b->static_mem[3 * (size_t)b->rep_of[d]],
             3 * sizeof *b->static_mem);
}

/* Op o's weight shares (one per weight input and device of o, in that order): appended to
 * b->wshares, or with counted (a build no later one reuses) counted at once, in the same
 * order, instead of kept: 537 MB of shares at 65,536 GPUs (issue 19). */
static psim_status op_weight_shares(psim_build *b, int32_t o, int32_t *counted) {
  const psim_model *m = b->m;
  const psim_op *op = &m->ops[o];
  const psim_op_config *cfg = &b->s->ops[o];
  double pb[3];
  psim_memory_param_bytes(m->dtype, pb);
  double wb = pb[0], gb = pb[1], ob = pb[2];
  int zs = b->s->zero_stage;
  for (int32_t i = 0; i < op->n_in; i++) {
    int32_t t = op->in[i];
    if (m->tensors[t].kind != PSIM_TENSOR_WEIGHT)
      continue;
    double dp = weight_dp(b, o, t), n = 0;
    if (b->s->dp_replicate > 1) /* HSDP: ZeRO shards over a shard group (zero.h) */
      dp /= b->s->dp_replicate;
    if (counted && b->folded) { /* the simulated devices' shares only (fill_folded) */
      PSIM_CHECK(simulated_shares(b, o, t, dp, counted));
      continue;
    }
    if (!counted)
      PSIM_CHECK(
          PSIM_VEC_RESERVE(b->wshares, b->cap_wshares, b->n_wshares + (size_t)cfg->n_devices));
    for (int32_t e = 0; e < cfg->n_devices; e++) {
      int64_t ext[PSIM_MAX_OP_DIMS];
      int32_t shard = e / cfg->replicas, rem = shard;
      for (int32_t k = op->n_dims - 1; k >= 0 && e % cfg->replicas == 0; k--) {
        int32_t c = rem % cfg->degree[k]; /* a shard's replicas follow each other */
        rem /= cfg->degree[k];
        ext[k] = psim_shard_size(m->dims[op->dims[k].dim].size, cfg->degree[k], c);
      }
      n = e % cfg->replicas == 0 ? shard_elems_of(m, op, ext, t) : n;
      psim_weight_share w = {
          cfg->devices[e],
          t,
          {n * wb / (zs >= 3 ? dp : 1), n * gb / (zs >= 2 ? dp : 1), n * ob / (zs >= 1 ? dp : 1)}};
      if (counted)
        count_share(b, counted, &w);
      else
        b->wshares[b->n_wshares++] = w;
    }
  }
  return PSIM_OK;
}

/* Every op's weight shares; an incremental build (b->inc.prev) copies those of
 * the ops whose configuration is prev's (the ZeRO stage and dtype are
 * global, equal in both). */
static psim_status weight_shares(psim_build *b, int32_t *counted) {
  const psim_build *p = b->inc.prev;
  int32_t n_ops = b->m->n_ops;
  if (!b->inc.record && !p) { /* no build reads them later: counted, not kept */
    for (int32_t o = 0; o < n_ops; o++)
      PSIM_CHECK(op_weight_shares(b, o, counted));
    return PSIM_OK;
  }
  b->wshare_first = psim_malloc(sizeof *b->wshare_first * ((size_t)n_ops + 1));
  if (!b->wshare_first)
    return psim_error(PSIM_ENOMEM, "out of memory in the memory model");
  b->n_wshares = 0;
  for (int32_t o = 0; o < n_ops; o++) {
    b->wshare_first[o] = b->n_wshares;
    if (!p || !p->wshare_first || b->inc.changed[o]) {
      PSIM_CHECK(op_weight_shares(b, o, NULL));
      continue;
    }
    size_t a = p->wshare_first[o], n = p->wshare_first[o + 1] - a;
    if (n == 0) /* no weights (b->wshares may still be NULL) */
      continue;
    PSIM_CHECK(PSIM_VEC_RESERVE(b->wshares, b->cap_wshares, b->n_wshares + n));
    memcpy(b->wshares + b->n_wshares, p->wshares + a, n * sizeof *b->wshares);
    b->n_wshares += n;
  }
  b->wshare_first[n_ops] = b->n_wshares;
  return PSIM_OK;
}

psim_status psim_memory_static(psim_build *b) {
  int32_t nd = b->c->n_devices;
  b->static_mem = psim_calloc((size_t)nd * 3 + 1, sizeof *b->static_mem);
  int32_t *counted = psim_malloc(sizeof *counted * ((size_t)nd + 1));
  if (!b->static_mem || !counted) {
    psim_free(counted);
    return psim_error(PSIM_ENOMEM, "out of memory in the memory model");
  }
  memset(counted, 0xff, sizeof *counted * (size_t)nd);
  psim_status st = weight_shares(b, counted);
  for (size_t i = 0; st == PSIM_OK && i < b->n_wshares; i++)
    count_share(b, counted, &b->wshares[i]);
  psim_free(counted);
  PSIM_CHECK(st);
  if (b->folded && !b->inc.record && !b->inc.prev) /* simulated_shares counted */
    fill_folded(b);
  PSIM_CHECK(psim_zero_gathered_memory(b));
  return mark_saves(b);
}

/* Peak activations per device from the events, then the device with the
 * largest total. Workspace: cuBLAS/cuDNN scratch and the allocator's
 * fragmentation are taken as a fixed fraction (see PSIM_WORKSPACE_FRACTION). */
psim_status psim_memory_peak(const psim_build *b, const psim_schedule_result *r,
                             psim_sim_result *out) {
  /* Events are recorded in issue order, and a device's kernels end in issue
   * order (its stream is a chain), so each device's events are already in
   * time order: one pass, no sort. */
  int32_t nd = b->c->n_devices;
  double *cur = psim_calloc((size_t)nd, sizeof *cur), *peak = psim_calloc((size_t)nd, sizeof *peak);
  if (!cur || !peak) {
    psim_free(cur);
    psim_free(peak);
    return psim_error(PSIM_ENOMEM, "out of memory in the memory model");
  }
  if (b->o->keep_graph) {
    out->mem_samples = psim_malloc(sizeof *out->mem_samples * (b->n_mem ? b->n_mem : 1));
    /* Per-device static memory for the plan report (issue 7). */
    out->static_bytes = psim_malloc(sizeof *out->static_bytes * 3 * (size_t)(nd > 0 ? nd : 1));
    if (out->static_bytes)
      memcpy(out->static_bytes, b->static_mem, sizeof *out->static_bytes * 3 * (size_t)nd);
    if (!out->mem_samples || !out->static_bytes) {
      psim_free(cur);
      psim_free(peak);
      return psim_error(PSIM_ENOMEM, "out of memory in the memory model");
    }
  }
  for (size_t i = 0; i < b->n_mem; i++) {
    const psim_mem_event *ev = &b->mem[i];
    int32_t d = ev->device;
    cur[d] += ev->bytes;
    if (cur[d] > peak[d])
      peak[d] = cur[d];
    if (out->mem_samples) {
      const double *sm = &b->static_mem[3 * d];
      out->mem_samples[out->n_mem_samples++] =
          (psim_trace_counter){d, r->end_s[ev->task], sm[0] + sm[1] + sm[2] + cur[d]};
    }
  }
  out->peak_memory_bytes = -1;
  for (int32_t d = 0; d < nd; d++) {
    const double *sm = &b->static_mem[3 * d];
    double total = sm[0] + sm[1] + sm[2] + peak[d];
    if (total <= out->peak_memory_bytes)
      continue;
    out->peak_memory_bytes = total;
    out->peak_device = d;
    out->memory = (psim_mem_breakdown){sm[0], sm[1], sm[2], peak[d], 0, total};
  }
  psim_free(cur);
  out->activation_peak = peak;
  out->n_devices = nd;
  const psim_device *dev = &b->c->devices[out->peak_device];
  out->capacity_bytes = b->c->types[dev->type].mem_bytes;
  out->fits = out->peak_memory_bytes <= out->capacity_bytes;
  return PSIM_OK;
}
