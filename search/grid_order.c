/* grid_order.c - the grid's best-first order (dense models, Megatron space): every
 * candidate gets an analytic iteration time and memory estimate before any is simulated,
 * and the grid simulates those estimated to fit, fastest estimate first.
 *
 * Why (issue 23): at 1,024 GPUs one simulation costs seconds of CPU, so a 60-s budget sees a
 * dozen of tens of thousands of candidates; in enumeration order (tp 1 first, the classic
 * knobs before ZeRO 2 and interleaving) Llama 3 405B's budget ended on tp 1-2 layouts whose
 * activations cannot fit, long before the published tp 8 pp 16 ZeRO 2 plan.
 *
 * The estimates order only; nothing is pruned by them, so the grid without a budget returns
 * the same best as before (tests/unit/test_grid.c checks it against brute force).
 *
 * Time: the first pipeline stage's compute, (forward + backward, 3x the forward; full
 * recomputation one more forward, block N of a chunk's L layers N / L of one, selective the
 * attention core's) at a nominal half of the
 * device's peak, stretched by the pipeline bubble (1 + (pp - 1) / (M vp), Narayanan et al.
 * 2021, section 2.2), plus the tensor-parallel all-reduces of the activations (two forward,
 * two backward per layer, Megatron-LM; two more under full recomputation) and the
 * context-parallel K/V exchange, unoverlapped, the data-parallel gradient sync once per
 * iteration (with --overlap-grad-reduce less the stage's last backward pass) and, under ZeRO 3, the
 * weights' all-gathers of every micro-batch (forward and backward), each a ring (2 (n - 1) / n of
 * the bytes) at the route's bandwidth: NVLink within a node, the network across. Memory: the static
 * lower bound (grid_space.c) on the fullest stage's layers, plus the activations of Korthikanti et
 * al. 2022 (Table 2: s b h (10 + 24 / t) + 5 a s^2 b / t bytes per layer, 34 s b h / t with
 * sequence parallelism, no 5 a s^2 b / t term under selective recomputation or flash attention, 2 s
 * b h (/ t with SP) under full recomputation; block N of L: N / L of the layers so, the others as
 * without), divided by cp, for the micro-batches the first stage holds (min(pp, M), times 1 + (pp -
 * 1) / (pp vp) interleaved: section 4.2.3). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "costdb/cost.h"
#include "search/grid_impl.h"
#include "sim/core/alloc.h"

/* A candidate whose memory estimate is over the device by more than this factor is simulated
 * after all others (the estimate's error on the cases of docs/search.md is within it). */
#define GRID_EST_MEM_SLACK 1.1

/* One layer's kernels for one (tp, cp, micro-batch, sequence parallelism): s per micro-batch. */
typedef struct layer_cost {
  int32_t tp, cp, mb;
  bool sp, fp8;                    /* fp8: the block linears as FP8 GEMMs (the candidate's "fp8") */
  double fwd_s, bwd_s, core_fwd_s; /* core: the attention core (selective recomputation) */
} layer_cost;

#define MAX_LAYER_COSTS 512

typedef struct est_ctx {
  const psim_model *m;
  const psim_cluster *c;
  const psim_costdb *db;
  double h, s, a, ffn, layers, batch, params, bytes; /* bytes: of the model's dtype */
  bool flash;                                        /* no s x s scores kept */
  double peak, bw_node, bw_net;                      /* FLOP/s, bytes/s */
  int32_t per_node, first_layer;
  layer_cost lc[MAX_LAYER_COSTS];
  int32_t n_lc;
} est_ctx;

static double dim_size(const psim_model *m, psim_role r, double fallback) {
  return m->role_dim[r] >= 0 ? (double)m->dims[m->role_dim[r]].size : fallback;
}

/* The bottleneck bandwidth from device a to b, bytes/s (0 when b is no device). */
static psim_status route_bw(psim_cluster *c, int32_t a, int32_t b, double *bw) {
  const int32_t *links;
  int32_t n;
  double lat;
  *bw = 0;
  if (b >= c->n_devices)
    return PSIM_OK;
  PSIM_CHECK(psim_cluster_route(c, a, b, &links, &n));
  psim_cluster_route_cost(c, links, n, bw, &lat);
  *bw = isfinite(*bw) ? *bw : 0;
  return PSIM_OK;
}

static psim_status ctx_init(est_ctx *x, const psim_model *m, psim_cluster *c, double params,
                            const psim_costdb *db) {
  x->m = m, x->c = c, x->db = db, x->n_lc = 0, x->first_layer = -1;
  for (int32_t i = 0; i < m->n_ops; i++)
    if (m->ops[i].block >= 0 && (x->first_layer < 0 || m->ops[i].layer < x->first_layer))
      x->first_layer = m->ops[i].layer;
  x->h = dim_size(m, PSIM_ROLE_HIDDEN, 1);
  x->s = dim_size(m, PSIM_ROLE_SEQUENCE, 1);
  x->a = dim_size(m, PSIM_ROLE_HEADS, 1);
  x->batch = dim_size(m, PSIM_ROLE_BATCH, 1);
  x->layers = m->n_layers > 0 ? m->n_layers : 1;
  x->params = params;
  x->bytes = (double)psim_dtype_bytes(m->dtype);
  x->flash = false;
  for (int32_t i = 0; i < m->n_ops; i++)
    x->flash = x->flash || m->ops[i].kind == PSIM_OP_ATTENTION;
  x->peak = psim_device_peak_flops(c, 0, m->dtype);
  x->per_node = c->devices_per_node > 0 ? c->devices_per_node : c->n_devices;
  PSIM_CHECK(route_bw(c, 0, 1, &x->bw_node));
  PSIM_CHECK(route_bw(c, 0, x->per_node, &x->bw_net));
  if (x->bw_net <= 0)
    x->bw_net = x->bw_node;
  return PSIM_OK;
}

/* The shard of op for (tp, cp, mb, sp), as the Megatron template splits it: the batch to the
 * micro-batch, heads and ffn tp ways, the sequence cp ways and, under sequence parallelism, tp
 * ways more in ops without heads or ffn (norms, dropout, residual adds). */
static void op_shard(const est_ctx *x, const psim_op *op, const layer_cost *k, int64_t *shard) {
  bool split = false;
  for (int32_t d = 0; d < op->n_dims; d++) {
    psim_role r = x->m->dims[op->dims[d].dim].role;
    split = split || r == PSIM_ROLE_HEADS || r == PSIM_ROLE_FFN;
  }
  for (int32_t d = 0; d < op->n_dims; d++) {
    int64_t n = x->m->dims[op->dims[d].dim].size;
    psim_role r = x->m->dims[op->dims[d].dim].role;
    int32_t by = r == PSIM_ROLE_HEADS || r == PSIM_ROLE_FFN ? k->tp
                 : r == PSIM_ROLE_SEQUENCE                  ? k->cp * (k->sp && !split ? k->tp : 1)
                                                            : 1;
    shard[d] = r == PSIM_ROLE_BATCH ? k->mb : (n + by - 1) / by;
  }
}

/* The kernels of the first transformer layer on device 0 (psim_cost_compute: the cost
 * database's times, else the device's roofline), memoised per (tp, cp, mb, sp, fp8). */
static const layer_cost *layer_kernels(est_ctx *x, const psim_megatron_opts *mo) {
  layer_cost key = {mo->tp,
                    mo->cp > 0 ? mo->cp : 1,
                    mo->micro_batch,
                    mo->sequence_parallel,
                    mo->fp8 == PSIM_FP8_ON,
                    0,
                    0,
                    0};
  for (int32_t i = 0; i < x->n_lc; i++)
    if (x->lc[i].tp == key.tp && x->lc[i].cp == key.cp && x->lc[i].mb == key.mb &&
        x->lc[i].sp == key.sp && x->lc[i].fp8 == key.fp8)
      return &x->lc[i];
  layer_cost *k = x->n_lc < MAX_LAYER_COSTS ? &x->lc[x->n_lc++] : &x->lc[MAX_LAYER_COSTS - 1];
  *k = key;
  int64_t shard[PSIM_MAX_OP_DIMS];
  psim_cost_origin origin;
  for (int32_t i = 0; i < x->m->n_ops; i++) {
    if (x->m->ops[i].block < 0 || x->m->ops[i].layer != x->first_layer)
      continue;
    psim_op run = x->m->ops[i]; /* with the candidate's FP8 linears (psim_strategy_op_fp8) */
    const psim_op *op = &run;
    if (mo->fp8 != PSIM_FP8_MODEL)
      run.attrs.fp8 = mo->fp8 == PSIM_FP8_ON && psim_op_is_block_linear(x->m, op);
    op_shard(x, op, k, shard);
    double f = psim_cost_compute(x->c, 0, x->m, op, shard, PSIM_PASS_FWD, x->db, &origin);
    k->fwd_s += f;
    k->bwd_s += psim_cost_compute(x->c, 0, x->m, op, shard, PSIM_PASS_BWD, x->db, &origin);
    if (op->kind == PSIM_OP_ATTENTION || (op->tag && strcmp(op->tag, "attn_core") == 0))
      k->core_fwd_s += f;
  }
  return k;
}

/* Seconds of an all-reduce of `bytes` over n ranks `stride` devices apart, as NCCL's
 * hierarchical rings run it on DGX nodes (one NIC per GPU): a ring among the g ranks of a node
 * on NVLink, then rings among the n / g nodes, each carrying 1 / g of the bytes on its own
 * NIC; a ring moves 2 (k - 1) / k of the bytes. */
static double ring_s(const est_ctx *x, double bytes, int32_t n, int32_t stride) {
  if (n <= 1 || x->bw_node <= 0)
    return 0;
  double g = fmax(1, fmin(n, (double)x->per_node / stride)), nodes = n / g;
  double t = 2.0 * (g - 1) / g * bytes / x->bw_node;
  return nodes > 1 ? t + 2.0 * (nodes - 1) / nodes * bytes / g / x->bw_net : t;
}

/* Layers of the fullest pipeline stage. */
static double stage_layers(const est_ctx *x, const psim_megatron_opts *mo) {
  double even = x->layers / mo->pp;
  return mo->first_stage_layers > 0 ? ceil(even) : even;
}

static double micro_batches(const est_ctx *x, const psim_megatron_opts *mo) {
  return fmax(1, x->batch / ((double)mo->dp * mo->micro_batch));
}

/* The share of the fullest chunk's layers that full recomputation recomputes: 1 (uniform),
 * N / the chunk's layers under block N (at most 1), 1 / N every N-th block, 0 without full
 * recomputation. */
static double full_share(const est_ctx *x, const psim_megatron_opts *mo) {
  if (mo->recompute != PSIM_RECOMPUTE_FULL)
    return 0;
  if (mo->recompute_every > 1)
    return 1.0 / mo->recompute_every;
  if (mo->recompute_method != PSIM_RCM_BLOCK)
    return 1;
  double vp = mo->virtual_stages > 0 ? mo->virtual_stages : 1;
  double chunk = ceil(stage_layers(x, mo) / vp);
  return chunk > 0 ? fmin(1, mo->recompute_layers / chunk) : 1;
}

static double time_estimate(est_ctx *x, const psim_megatron_opts *mo) {
  double mb = mo->micro_batch, cp = mo->cp > 0 ? mo->cp : 1, M = micro_batches(x, mo);
  const layer_cost *k = layer_kernels(x, mo);
  double f = full_share(x, mo); /* block N: the mean layer recomputes f of a forward */
  double rc = mo->recompute == PSIM_RECOMPUTE_FULL        ? f * k->fwd_s
              : mo->recompute == PSIM_RECOMPUTE_SELECTIVE ? k->core_fwd_s
                                                          : 0;
  double layer_s = k->fwd_s + k->bwd_s + rc;
  double act = mb * x->s * x->h * x->bytes / cp;
  double n_ar = 4 + 2 * f;
  layer_s += n_ar * ring_s(x, act, mo->tp, 1) / 2; /* all-reduces (SP: reduce-scatter + gather) */
  if (cp > 1)
    layer_s += 3 * (cp - 1) * act / (mo->tp * cp <= x->per_node ? x->bw_node : x->bw_net);
  double L = stage_layers(x, mo), vp = mo->virtual_stages > 0 ? mo->virtual_stages : 1;
  double pipe = M * L * layer_s * (1 + (mo->pp - 1) / (M * vp));
  if (mo->pp >
      1) /* each micro-batch's activations to the next stage and gradients back, per chunk */
    pipe += 2 * M * vp * act / (mo->sequence_parallel ? mo->tp : 1) /
            (mo->tp * (int32_t)cp * mo->dp < x->per_node ? x->bw_node : x->bw_net);
  double grads = x->params / ((double)mo->tp * mo->pp) * 4; /* fp32 main gradients */
  int32_t n_dp = mo->dp * (int32_t)cp;                      /* ranks tp apart */
  double sync = ring_s(x, grads, n_dp, mo->tp);
  if (mo->overlap_grad_reduce) /* hidden behind the last micro-batch's backward pass */
    sync = fmax(0, sync - L * (k->bwd_s + rc));
  double t = pipe + sync;
  double gather = mo->zero_stage >= 1 ? ring_s(x, grads / 2, n_dp, mo->tp) / 2 : 0;
  if (mo->overlap_param_gather && mo->zero_stage <= 2) /* behind the first forward pass */
    gather = fmax(0, gather - L * k->fwd_s);
  t += gather;             /* the updated bf16 weights all-gathered after the step */
  if (mo->zero_stage >= 3) /* the stage's weights gathered for each micro-batch, both ways */
    t += 2 * M * ring_s(x, grads / 2, n_dp, mo->tp) / 2;
  return t;
}

static double act_estimate(const est_ctx *x, const psim_megatron_opts *mo) {
  double t = mo->tp, cp = mo->cp > 0 ? mo->cp : 1, b = mo->micro_batch;
  double sbh = x->s * b * x->h, M = micro_batches(x, mo);
  double f = full_share(x, mo); /* block N: f of the layers as under full, the rest as none */
  double kept = mo->sequence_parallel ? 34 * sbh / t : sbh * (10 + 24 / t);
  if (mo->recompute != PSIM_RECOMPUTE_SELECTIVE && !x->flash)
    kept += 5 * x->a * x->s * x->s * b / t;
  double layer = f * 2 * sbh / (mo->sequence_parallel ? t : 1) + (1 - f) * kept;
  double vp = mo->virtual_stages > 0 ? mo->virtual_stages : 1;
  double in_flight = fmin(mo->pp, M) * (vp > 1 ? 1 + (mo->pp - 1) / (mo->pp * vp) : 1);
  double act = layer * stage_layers(x, mo) * in_flight;
  if (f > 0) /* one layer's activations while recomputed */
    act += sbh * 34 / t;
  return act / cp;
}

static int by_estimate(const void *pa, const void *pb) {
  const grid_cand *a = pa, *b = pb;
  bool pa_ = a->state == GRID_MEM_ESTIMATE, pb_ = b->state == GRID_MEM_ESTIMATE;
  if (pa_ != pb_)
    return pa_ - pb_;
  bool oa = a->est_mem_frac > GRID_EST_MEM_SLACK, ob = b->est_mem_frac > GRID_EST_MEM_SLACK;
  if (oa != ob)
    return oa - ob;
  if (a->est_s != b->est_s)
    return a->est_s < b->est_s ? -1 : 1;
  if (a->mo.zero_stage != b->mo.zero_stage) /* a ZeRO stage after its lower twin */
    return a->mo.zero_stage - b->mo.zero_stage;
  return a->order < b->order ? -1 : a->order > b->order;
}

static void estimate_all(grid_space *s, est_ctx *x) {
  double cap = s->capacity;
  for (int64_t i = 0; i < s->n; i++) {
    grid_cand *k = &s->c[i];
    double L = stage_layers(x, &k->mo), even = x->layers / k->mo.pp;
    k->est_s = time_estimate(x, &k->mo);
    k->est_mem_frac = k->static_frac * L / even + act_estimate(x, &k->mo) / cap;
  }
  qsort(s->c, (size_t)s->n, sizeof *s->c, by_estimate);
  for (int64_t i = 0; i < s->n; i++)
    s->c[i].order = i;
  s->best_first = true;
}

psim_status psim_grid_space_estimate(grid_space *s, const psim_model *m, psim_cluster *c,
                                     const psim_costdb *db) {
  if (s->n == 0 || m->role_dim[PSIM_ROLE_EXPERT] >= 0 || m->role_dim[PSIM_ROLE_HIDDEN] < 0)
    return PSIM_OK; /* MoE: grid_space.c's MoE order */
  est_ctx *x = psim_malloc(sizeof *x);
  if (!x)
    return psim_error(PSIM_ENOMEM, "out of memory ordering the grid");
  psim_status st = ctx_init(x, m, c, s->params, db);
  if (st == PSIM_OK && x->peak > 0)
    estimate_all(s, x);
  psim_free(x);
  return st;
}
