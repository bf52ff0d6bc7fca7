/* grid_space.c - the Megatron grid's candidates and the rules that prune them before
 * simulation.
 *
 * Megatron-Core's rules (NVIDIA/Megatron-LM d98e8a64dd, Core 0.20.0):
 * - megatron/training/arguments.py (validate_args, around lines 960-1010): the layers must
 *   divide by pp ("Number of layers should be divisible by the pipeline-model-parallel
 *   size"), and with interleaving the layers per pipeline stage by the layers per virtual
 *   stage, i.e. layers % (pp x vp) == 0; an interleaved schedule needs pp > 1 (with the
 *   default --overlap-p2p-communication; pp > 2 without it); sequence parallelism is turned
 *   off at tp 1.
 * - megatron/core/pipeline_parallel/schedules.py (interleaved forward-backward, around line
 *   1160): the micro-batch group of a virtual stage (default pp) must lie in [pp, M] and M
 *   modulo it must be 0 or at least pp: with the default group, M % pp == 0.
 * - tp divides the attention heads and the ffn size (the template's check_tp_divides).
 * - Expert and context parallelism (arguments.py: num_experts % ep == 0, seq_length %
 *   (2 cp) == 0 when cp > 1; parallel_state.py: etp x ep divides the stage's tp x cp x dp
 *   devices). The grid tries ep over the divisors of the experts with etp x ep dividing
 *   tp x cp x dp, etp = tp and, at tp > 1, etp = 1; cp over the divisors of the devices per
 *   stage with seq % (2 cp) == 0, cp > 1 only for sequences of PSIM_GRID_CP_MIN_SEQ tokens
 *   or more (shorter ones have too little attention work per rank to pay for the K/V
 *   exchange: Megatron-Core's published long-context recipes start cp at 8k tokens).
 * - --overlap-grad-reduce (megatron/core/distributed/distributed_data_parallel.py: the
 *   gradient buckets reduced during the backward pass) at dp > 1, both ways, outside the
 *   classic candidates. No rule prunes one by the other: simulated over the 8-layer GPTs of
 *   tests/unit/test_grid.c (1,020 candidates each at dp > 1) it is up to 13.6% faster and up
 *   to 2.2% slower (48 and 64 candidates: the bucketed all-reduces meet the pipeline's
 *   transfers on the links).
 * - --overlap-param-gather (distributed_data_parallel.py: the updated parameters' bucketed
 *   all-gathers overlap the next forward; arguments.py lines 1024-1029 assert it comes with
 *   the distributed optimizer or Megatron-FSDP and --overlap-grad-reduce): with the gradient
 *   reduce overlapped at ZeRO 1-2 (where plansim gathers after the step), both ways. No rule
 *   prunes one by the other: over test_grid.c's 8-layer GPT on 16 A100s of 1.2 GB (2,128
 *   candidates, 507 twin pairs that fit) it is faster in every pair, by up to 10.0%, but one
 *   case is no proof: the gathers meet the first forward's pipeline transfers on the links. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "search/grid_impl.h"
#include "sim/builder/memory.h"
#include "sim/core/alloc.h"

/* Transformer blocks' layer count (the layers a pipeline splits evenly), as the template. */
static int32_t block_layer_count(const psim_model *m) {
  int32_t lo = -1, hi = -1;
  for (int32_t i = 0; i < m->n_ops; i++) {
    if (m->ops[i].block < 0)
      continue;
    if (lo < 0 || m->ops[i].layer < lo)
      lo = m->ops[i].layer;
    if (m->ops[i].layer > hi)
      hi = m->ops[i].layer;
  }
  return lo < 0 ? m->n_layers : hi - lo + 1;
}

static bool tp_divides(const psim_model *m, int32_t tp) {
  for (int32_t d = 0; d < m->n_dims; d++) {
    psim_role r = m->dims[d].role;
    if ((r == PSIM_ROLE_HEADS || r == PSIM_ROLE_FFN) && m->dims[d].size % tp != 0)
      return false;
  }
  return true;
}

static bool has_expert_dim(const psim_model *m, const psim_tensor *t) {
  for (int32_t k = 0; k < t->rank; k++)
    if (m->dims[t->dims[k]].role == PSIM_ROLE_EXPERT)
      return true;
  return false;
}

/* Elements of the weights read by ops of repeated blocks (each tensor once); *expert of
 * them carry an expert-role dim (the experts' weights, split etp x ep ways). */
static double block_params(const psim_model *m, double *expert) {
  bool *seen = psim_calloc((size_t)(m->n_tensors > 0 ? m->n_tensors : 1), 1);
  double n = 0;
  *expert = 0;
  for (int32_t i = 0; seen && i < m->n_ops; i++)
    for (int32_t k = 0; m->ops[i].block >= 0 && k < m->ops[i].n_in; k++) {
      int32_t t = m->ops[i].in[k];
      if (m->tensors[t].kind == PSIM_TENSOR_WEIGHT && !seen[t]) {
        seen[t] = true;
        double e = psim_tensor_elems(m, &m->tensors[t]);
        n += e;
        *expert += has_expert_dim(m, &m->tensors[t]) ? e : 0;
      }
    }
  psim_free(seen);
  return n;
}

/* A lower bound of the static bytes of the fullest device: the blocks' weights spread
 * evenly over pp stages and tp shards (norms and biases are in fact replicated, the
 * embedding and head come on top), each byte class divided by dp from its ZeRO stage on
 * (psim_memory_param_bytes: ZeRO-1 shards the optimizer state, -2 the gradients, -3 the
 * weights). The fullest device holds at least the mean. */
static double per_param_bytes(psim_dtype dt, int32_t zero_stage, double shards) {
  double pb[3], per = 0;
  psim_memory_param_bytes(dt, pb);
  for (int k = 0; k < 3; k++)
    per += pb[k] / (zero_stage >= 3 - k ? shards : 1);
  return per;
}

/* The dense weights split tp ways, ZeRO over at most dp x cp ranks; the experts' weights
 * etp x ep ways, ZeRO over the expert data-parallel ranks tp cp dp / (etp ep) (Megatron-Core's
 * groups; a larger ZeRO group than plansim's only lowers the bound). */
static double static_lower_bound(double params, double expert, psim_dtype dt,
                                 const psim_megatron_opts *mo) {
  int32_t cp = mo->cp > 0 ? mo->cp : 1, ep = mo->ep > 0 ? mo->ep : 1;
  int32_t etp = mo->etp > 0 ? mo->etp : mo->tp;
  double stage = (double)mo->tp * cp * mo->dp;
  double rep = mo->dp_shard > 0 ? (double)mo->dp / mo->dp_shard : 1; /* HSDP's replicas */
  double dense = (params - expert) / ((double)mo->tp * mo->pp) *
                 per_param_bytes(dt, mo->zero_stage, (double)mo->dp * cp / rep);
  double exp = expert / ((double)etp * ep * mo->pp) *
               per_param_bytes(dt, mo->zero_stage, stage / ((double)etp * ep) / rep);
  return dense + exp;
}

static double max_capacity(const psim_cluster *c) {
  double cap = 0;
  for (int32_t t = 0; t < c->n_types; t++)
    cap = fmax(cap, c->types[t].mem_bytes);
  return cap;
}

typedef struct space_ctx {
  const psim_model *m;
  const psim_grid_options *o;
  grid_space *s;
  int64_t batch, seq;            /* seq: the sequence-role dim, 0 when none */
  int32_t layers, pair, experts; /* experts: the expert-role dim, 0 when dense */
  double params, expert_params, capacity;
  int32_t cp, ep, etp; /* the (cp, ep, etp) of the pairs being listed */
  int32_t node;        /* devices per node (the FSDP space's HSDP shard groups) */
  int8_t async_alt;    /* the FSDP space's async TP alternative to the stack's, or 0 (none) */
  int n_fp8;           /* 2: every candidate also with FP8 linears (try_fp8 where it applies) */
  int32_t first, last; /* uneven first/last stages' layers of the pairs being listed, 0: even */
} space_ctx;

/* Megatron-Core accepts this combination (rules above); vp 1 needs nothing more. */
static bool accepted(const space_ctx *x, const psim_megatron_opts *mo) {
  int64_t per = (int64_t)mo->micro_batch * mo->dp;
  if (x->batch % per != 0 || !tp_divides(x->m, mo->tp))
    return false;
  int64_t n_micro = x->batch / per;
  /* the Megatron space's chunks run interleaved 1F1B (its candidates keep the default 1f1b) */
  psim_schedule sched = mo->schedule == PSIM_SCHED_1F1B && mo->virtual_stages > 1
                            ? PSIM_SCHED_INTERLEAVED
                            : mo->schedule;
  if (mo->pp > 1 &&
      (n_micro > INT32_MAX || psim_schedule_micro_rule(sched, (int32_t)n_micro, mo->pp) != NULL))
    return false;
  if (mo->virtual_stages == 1)
    return true;
  if (mo->first_stage_layers > 0) /* uneven stages: tried without interleaving only */
    return false;
  return mo->pp > 1 && x->layers % (mo->pp * mo->virtual_stages) == 0;
}

/* torchtitan v0.2.2: every model's parallelize.py asserts seq_len % (tp x 2 cp) == 0
 * (distributed/parallel_dims.py seq_len_divisor); DDP only as the sole parallelism
 * (parallelize.py: "DDP has not supported > 1D parallelism"); MoE models without pipeline
 * parallelism. */
static bool fsdp_accepted(const space_ctx *x, const psim_megatron_opts *mo) {
  if (mo->zero_stage == 0 && mo->dp > 1 && (mo->tp > 1 || mo->pp > 1))
    return false;
  /* torchtitan's MoE model that plansim exports to (qwen3) has no pipeline function
   * (torchtitan/models/qwen3/__init__.py: pipelining_fn=None, v0.2.2) */
  if (mo->pp > 1 && x->m->role_dim[PSIM_ROLE_EXPERT] >= 0)
    return false;
  return x->seq <= 0 || x->seq % (2 * mo->tp) == 0;
}

static psim_status push(space_ctx *x, const psim_megatron_opts *mo, bool classic) {
  grid_space *s = x->s;
  if (!accepted(x, mo) || (x->o->space == PSIM_GRID_FSDP && !fsdp_accepted(x, mo))) {
    s->pruned_divisibility++;
    return PSIM_OK;
  }
  PSIM_CHECK(PSIM_VEC_RESERVE(s->c, s->cap, (size_t)s->n + 1));
  grid_cand *k = &s->c[s->n++];
  memset(k, 0, sizeof *k);
  k->mo = *mo;
  k->pair = x->pair;
  k->classic = classic;
  k->order = s->n - 1;
  s->n_hsdp += mo->dp_shard > 0;
  k->static_frac = static_lower_bound(x->params, x->expert_params, x->m->dtype, mo) / x->capacity;
  if (x->o->prune_by_estimate && k->static_frac > 1)
    k->state = GRID_MEM_ESTIMATE;
  return PSIM_OK;
}

/* Partial full recomputation (Megatron-Core --recompute-method block --recompute-num-layers N:
 * the first N layers of each model chunk recomputed, sim/strategy/strategy.h): N over the powers
 * of two below the fullest chunk's layers (N = 0 is none, N = the chunk's layers is full). Memory
 * falls and time rises with N (tests/unit/test_simulate.c), so the fastest block plan that fits
 * is the one with the smallest N that fits, and the memory and dominance rules below find it
 * without simulating the others: a block N over memory implies every smaller N over, one that
 * fits dominates every larger N. The count of values tried for vp virtual stages of pp. */
static int32_t n_block_values(const space_ctx *x, int32_t pp, int32_t vp) {
  if (!x->o->try_recompute_block)
    return 0;
  int32_t stage = (x->layers + pp - 1) / pp, chunk = (stage + vp - 1) / vp, n = 0;
  for (int32_t b = 1; b < chunk; b *= 2)
    n++;
  return n;
}

/* The j-th recomputation of a pair's list (nb block values): none, selective, block 1, 2, 4, ...,
 * full, the least recomputation first. */
static void set_recompute(psim_megatron_opts *mo, int j, int32_t nb) {
  mo->recompute = j == 0   ? PSIM_RECOMPUTE_NONE
                  : j == 1 ? PSIM_RECOMPUTE_SELECTIVE
                           : PSIM_RECOMPUTE_FULL;
  if (j >= 2 && j < 2 + nb) {
    mo->recompute_method = PSIM_RCM_BLOCK;
    mo->recompute_layers = 1 << (j - 2);
  }
}

/* One (tp, pp) pair's candidates at one precision (fp8: PSIM_FP8_MODEL, the model's own, or
 * _ON), classic ones only or the others: ZeRO stage, sequence parallelism (on first), virtual
 * stages, micro-batch, gradient-reduce overlap (off first), with it at ZeRO 1-2 the
 * parameter-gather overlap (off first), recompute (innermost, the least
 * recomputation first: the dominance rule reads the lighter modes). Classic ones have neither
 * the overlap, block recomputation nor FP8 linears: under a time budget the classic pass (MoE
 * models, models without a hidden dim) stays as it was. */
static psim_status push_pair_at(space_ctx *x, int32_t tp, int32_t pp, int32_t dp, bool classic,
                                int8_t fp8) {
  const psim_grid_options *o = x->o;
  int n_rc = o->try_recompute ? 3 : 1, n_sp = tp > 1 && o->try_sequence_parallel_off ? 2 : 1;
  int n_og = dp > 1 && o->try_overlap_grad_reduce ? 2 : 1;
  /* MoE models: the distributed optimizer is the classic one (Megatron-Core's MoE recipes
   * shard the optimizer state; the experts' alone outgrow a device without it) */
  int32_t z0 = x->experts > 0 && dp > 1 && o->max_zero >= 1 ? 1 : 0;
  for (int32_t z = 0; z <= (dp > 1 ? o->max_zero : 0); z++)
    for (int sp = 0; sp < n_sp; sp++)
      for (int32_t vp = 1; vp <= o->max_virtual_stages; vp++) {
        /* and no overlap, no block */
        bool is_classic = z == z0 && sp == 0 && vp == 1 && fp8 == PSIM_FP8_MODEL;
        if (classic && !is_classic)
          continue;
        int32_t nb = o->try_recompute ? n_block_values(x, pp, vp) : 0;
        /* --overlap-param-gather: with the gradient reduce overlapped, at ZeRO 1-2 */
        int n_pg = psim_zero_gathers_after_step(z) && o->try_overlap_param_gather ? 2 : 1;
        for (int32_t i = 0; i < o->n_micro_batches; i++)
          for (int og = 0; og < n_og; og++)
            for (int pg = 0; pg < (og == 1 ? n_pg : 1); pg++)
              for (int j = 0; j < n_rc + nb; j++) {
                if ((is_classic && og == 0 && (j < 2 || j >= 2 + nb)) != classic)
                  continue;
                psim_megatron_opts mo;
                psim_megatron_opts_init(&mo);
                mo.tp = tp;
                mo.pp = pp;
                mo.dp = dp;
                mo.cp = x->cp, mo.ep = x->ep, mo.etp = x->etp;
                mo.first_stage_layers = x->first, mo.last_stage_layers = x->last;
                mo.virtual_stages = vp;
                mo.zero_stage = z;
                mo.sequence_parallel = tp > 1 && sp == 0;
                mo.micro_batch = o->micro_batches[i];
                set_recompute(&mo, o->try_recompute ? j : 0, nb);
                mo.overlap_grad_reduce = og == 1;
                mo.overlap_param_gather = pg == 1;
                mo.fp8 = fp8;
                PSIM_CHECK(push(x, &mo, classic));
              }
      }
  return PSIM_OK;
}

/* Every candidate of one (tp, pp) pair (push_pair_at), at the model's precision and, with
 * try_fp8 where it applies (x->n_fp8 2), with FP8 linears after them. */
static psim_status push_pair(space_ctx *x, int32_t tp, int32_t pp, int32_t dp, bool classic) {
  for (int f8 = 0; f8 < x->n_fp8; f8++)
    PSIM_CHECK(push_pair_at(x, tp, pp, dp, classic, f8 ? PSIM_FP8_ON : PSIM_FP8_MODEL));
  return PSIM_OK;
}

/* HSDP's shard groups for a pair (torchtitan's data_parallel_shard_degree under FSDP, the
 * replicate degree dp / shard): 0 (shard over all of dp), then the data-parallel ranks of one
 * node and twice, four times ... as many, each dividing dp and below it (a shard group inside
 * a node keeps the gathers on NVLink; larger ones trade memory for fewer replicas). At most
 * 8 entries into shards; returns the count. */
static int32_t hsdp_shards(const space_ctx *x, int32_t tp, int32_t dp, int32_t *shards) {
  int32_t n = 0, per_node = x->node / (tp * x->cp);
  shards[n++] = 0;
  for (int32_t s = per_node > 1 ? per_node : 2; s < dp && n < 8; s *= 2)
    if (dp % s == 0)
      shards[n++] = s;
  return n;
}

/* torchtitan's activation checkpointing modes (v0.2.2 torchtitan/config/job_config.py
 * ActivationCheckpoint, torchtitan/distributed/activation_checkpoint.py), the least
 * recomputation first: none, op-level selective (selective_ac_option "op": recompute op,
 * sim/builder/kernels.c), layer-level selective (selective_ac_option "N": every N-th block
 * whole, recompute_every; N = 4 and 2, where the model has at least N blocks) and full. */
typedef struct fsdp_ac {
  psim_recompute rc;
  int32_t every; /* recompute_every: 0 = every block */
} fsdp_ac;
static const fsdp_ac fsdp_acs[] = {{PSIM_RECOMPUTE_NONE, 0},
                                   {PSIM_RECOMPUTE_OP, 0},
                                   {PSIM_RECOMPUTE_FULL, 4},
                                   {PSIM_RECOMPUTE_FULL, 2},
                                   {PSIM_RECOMPUTE_FULL, 0}};

/* The pipeline schedules torchtitan runs with vp chunks per rank (pp > 1): 1F1B and GPipe at
 * 1, Interleaved1F1B above; with try_pp_schedules also InterleavedZeroBubble, LoopedBFS at
 * vp > 1, ZBVZeroBubble and DualPipeV at vp = 2 (sim/strategy/schedule.c). The first is the
 * classic. */
static int32_t fsdp_schedules(const psim_grid_options *o, int32_t vp, psim_schedule *out) {
  int32_t n = 0;
  out[n++] = vp > 1 ? PSIM_SCHED_INTERLEAVED : PSIM_SCHED_1F1B;
  if (vp == 1)
    out[n++] = PSIM_SCHED_GPIPE;
  if (!o->try_pp_schedules)
    return n;
  out[n++] = PSIM_SCHED_INTERLEAVED_ZB;
  if (vp > 1)
    out[n++] = PSIM_SCHED_LOOPED_BFS;
  if (vp == 2) {
    out[n++] = PSIM_SCHED_ZBV;
    out[n++] = PSIM_SCHED_DUALPIPEV;
  }
  return n;
}

/* torchtitan's knobs for one (tp, pp) pair: FSDP (ZeRO 3, overlapped) over all of dp or as HSDP
 * (hsdp_shards), or, at dp 1 or as the sole parallelism, no sharding (DDP, overlapped);
 * sequence parallelism at tp > 1; schedule (fsdp_schedules), micro-batch, activation checkpointing
 * (fsdp_acs), and at tp > 1 async TP against the stack's setting (x->async_alt). Classic: 1F1B
 * without interleaving, FSDP over all of dp, async TP as the stack has it. */
static psim_status push_fsdp_at(space_ctx *x, int32_t tp, int32_t pp, int32_t dp, bool classic,
                                int8_t fp8) {
  const psim_grid_options *o = x->o;
  psim_schedule scheds[6];
  int n_rc = o->try_recompute ? (int)(sizeof fsdp_acs / sizeof *fsdp_acs) : 1,
      n_as = tp > 1 && x->async_alt ? 2 : 1;
  int32_t shards[8], n_sh = hsdp_shards(x, tp, dp, shards);
  for (int32_t z = 0; z <= 3; z += 3)
    for (int32_t h = 0; h < (z == 3 ? n_sh : 1); h++)
      for (int as = 0; as < n_as; as++)
        for (int32_t vp = 1; vp <= (pp > 1 ? o->max_virtual_stages : 1); vp++)
          for (int sc = 0, n_sc = pp > 1 ? fsdp_schedules(o, vp, scheds) : 1; sc < n_sc; sc++) {
            bool is_classic = vp == 1 && sc == 0 && h == 0 && as == 0 && fp8 == PSIM_FP8_MODEL;
            if (is_classic != classic || (z == 3 && dp == 1))
              continue;
            for (int32_t i = 0; i < o->n_micro_batches; i++)
              for (int j = 0; j < n_rc; j++) {
                if (fsdp_acs[j].every > x->layers)
                  continue;
                psim_megatron_opts mo;
                psim_megatron_opts_init(&mo);
                mo.tp = tp, mo.pp = pp, mo.dp = dp, mo.virtual_stages = vp;
                mo.cp = x->cp, mo.ep = x->ep, mo.etp = x->etp;
                mo.schedule = pp > 1 ? scheds[sc] : PSIM_SCHED_1F1B;
                mo.zero_stage = z;
                mo.dp_shard = shards[h];
                mo.async_tp = as ? x->async_alt : PSIM_ASYNC_TP_STACK;
                mo.sequence_parallel = tp > 1;
                mo.overlap_grad_reduce = dp > 1;
                mo.micro_batch = o->micro_batches[i];
                mo.recompute = fsdp_acs[j].rc;
                mo.recompute_every = fsdp_acs[j].every;
                mo.fp8 = fp8;
                PSIM_CHECK(push(x, &mo, classic));
              }
          }
  return PSIM_OK;
}

/* The FSDP space's candidates of one pair (push_fsdp_at), with torchtitan's Float8 linears
 * (model.converters float8) after the others where try_fp8 applies. */
static psim_status push_fsdp_pair(space_ctx *x, int32_t tp, int32_t pp, int32_t dp, bool classic) {
  for (int f8 = 0; f8 < x->n_fp8; f8++)
    PSIM_CHECK(push_fsdp_at(x, tp, pp, dp, classic, f8 ? PSIM_FP8_ON : PSIM_FP8_MODEL));
  return PSIM_OK;
}

/* One pair (tp, pp, cp, ep, etp): its candidates. */
static psim_status push_one(space_ctx *x, int32_t tp, int32_t pp, int32_t dp, bool classic) {
  PSIM_CHECK(x->o->space == PSIM_GRID_FSDP ? push_fsdp_pair(x, tp, pp, dp, classic)
                                           : push_pair(x, tp, pp, dp, classic));
  x->pair++;
  return PSIM_OK;
}

/* The expert layouts of one (tp, pp, cp): ep dividing the experts with etp x ep dividing
 * the stage's tp x cp x dp devices, etp = tp (0) and, at tp > 1, 1 (rules above). */
static psim_status push_experts(space_ctx *x, int32_t tp, int32_t pp, int32_t dp, bool classic) {
  int32_t stage = tp * x->cp * dp;
  for (int32_t ep = 1; ep <= (x->experts > 0 ? x->experts : 1); ep++)
    for (int e = 0; e < (x->experts > 0 && tp > 1 ? 2 : 1); e++) {
      int32_t etp = e == 0 ? tp : 1;
      if ((x->experts > 0 && x->experts % ep != 0) || stage % (etp * ep) != 0)
        continue;
      x->ep = ep, x->etp = e == 0 ? 0 : 1;
      PSIM_CHECK(push_one(x, tp, pp, dp, classic));
    }
  return PSIM_OK;
}

/* The stages' layers for pp (x->first, x->last): even when pp divides the layers; else, in the
 * Megatron space at pp >= 3, the middle stages take ceil(layers / pp) each and the first and
 * last the rest, halved (the last the larger half: it holds the head), as Megatron-Core's
 * --decoder-first/last-pipeline-num-layers allow (core_v0.15.0: the middle layers divide
 * evenly by pp - 2); false when neither applies. */
static bool uneven_split(space_ctx *x, int32_t pp) {
  int32_t layers = x->m->n_layers;
  x->first = x->last = 0;
  if (layers % pp == 0)
    return true;
  if (pp < 3 || x->o->space != PSIM_GRID_MEGATRON)
    return false;
  int32_t mid = (layers + pp - 1) / pp, rest = layers - mid * (pp - 2);
  x->first = rest / 2;
  x->last = rest - x->first;
  return x->first >= 1 && x->last <= mid;
}

/* The pairs: tp a power of two up to max_tp, pp dividing the layers, tp x pp dividing the
 * devices (the classic grid's pairs), each with its cp and expert layouts (rules above). */
static psim_status push_pairs(space_ctx *x, const psim_cluster *c, int32_t max_tp, bool classic) {
  int32_t n = c->n_devices;
  x->pair = 0;
  for (int32_t tp = 1; tp <= max_tp && tp <= n; tp *= 2)
    for (int32_t pp = 1; pp * tp <= n; pp++) {
      if (n % (tp * pp) != 0 || pp > x->m->n_layers || !uneven_split(x, pp))
        continue;
      for (int32_t cp = 1; cp <= n / (tp * pp); cp++) {
        bool cp_ok = cp == 1 || (x->seq >= PSIM_GRID_CP_MIN_SEQ && x->seq % (2 * cp) == 0 &&
                                 x->o->space == PSIM_GRID_MEGATRON);
        if ((n / (tp * pp)) % cp != 0 || !cp_ok)
          continue;
        x->cp = cp;
        PSIM_CHECK(push_experts(x, tp, pp, n / (tp * pp * cp), classic));
      }
    }
  x->s->n_pairs = x->pair;
  return PSIM_OK;
}

/* How much recomputation, for the orders: none 0, selective 1, block N 2 + N, full above
 * (more work, less memory). */
static int32_t rc_rank(const psim_megatron_opts *mo) {
  if (mo->recompute != PSIM_RECOMPUTE_FULL)
    return mo->recompute == PSIM_RECOMPUTE_NONE ? 0 : 1;
  if (mo->recompute_every > 1) /* every N-th block: 1 / N of them (FSDP space, no blocks) */
    return INT32_MAX - mo->recompute_every;
  return mo->recompute_method == PSIM_RCM_BLOCK ? 2 + mo->recompute_layers : INT32_MAX;
}

/* Full recomputation of only some layers: block N (Megatron) or every N-th block (torchtitan). */
static bool rc_partial(const psim_megatron_opts *mo) {
  return mo->recompute == PSIM_RECOMPUTE_FULL &&
         (mo->recompute_method == PSIM_RCM_BLOCK || mo->recompute_every > 1);
}

/* b recomputes every layer (and part of one) that x recomputes: none is in every mode,
 * selective (the attention core of every layer) in selective and full, block N in block M >= N
 * and full, every N-th block in every M-th where M divides N (sim/builder/kernels.c: block i
 * when (i + 1) % N == 0) and full. Then b needs no more activation memory than x and at least
 * its work. Selective or op-level and the partial modes are not ordered (these recompute some
 * layers whole, those a part of each). */
static bool rc_covers(const psim_megatron_opts *b, const psim_megatron_opts *x) {
  if (x->recompute == PSIM_RECOMPUTE_NONE ||
      (b->recompute == PSIM_RECOMPUTE_FULL && !rc_partial(b)))
    return true;
  if (x->recompute == PSIM_RECOMPUTE_SELECTIVE || x->recompute == PSIM_RECOMPUTE_OP)
    return b->recompute == x->recompute;
  if (!rc_partial(x) || !rc_partial(b))
    return false; /* x full, b not; or b none, selective or op-level */
  if (x->recompute_every > 1 || b->recompute_every > 1)
    return x->recompute_every > 1 && b->recompute_every > 1 &&
           x->recompute_every % b->recompute_every == 0;
  return b->recompute_layers >= x->recompute_layers;
}

static bool rc_same(const psim_megatron_opts *a, const psim_megatron_opts *b) {
  return rc_covers(a, b) && rc_covers(b, a);
}

/* The MoE order's keys of a classic candidate, most telling first: over memory by the
 * estimate (never simulated), ep 1 (the experts replicated: their weights and optimizer
 * state on every device of a stage), a static lower bound over PSIM_GRID_MOE_STATIC_FRAC of
 * the memory (little room left for activations), the all-to-all's group (the larger of tp
 * and etp x ep devices): inside one node's NVLink domain it is fastest, and it is the block
 * that folding simulates whole (sim/builder/fold_blocks.c), so the smaller the cheaper. */
static void moe_keys(const grid_cand *k, int *key) {
  int32_t ep = k->mo.ep > 0 ? k->mo.ep : 1, etp = k->mo.etp > 0 ? k->mo.etp : k->mo.tp;
  key[0] = k->state == GRID_MEM_ESTIMATE;
  key[1] = ep == 1;
  key[2] = k->static_frac > PSIM_GRID_MOE_STATIC_FRAC;
  key[3] = ep * etp > k->mo.tp ? ep * etp : k->mo.tp;
}

/* moe_keys, then the pair, the micro-batch, the most recomputation first (so that one over
 * memory implies the lighter ones over: psim_grid_prune), the enumeration order. */
static int by_moe_promise(const void *pa, const void *pb) {
  const grid_cand *a = pa, *b = pb;
  int ka[4], kb[4];
  moe_keys(a, ka);
  moe_keys(b, kb);
  for (int i = 0; i < 4; i++)
    if (ka[i] != kb[i])
      return ka[i] - kb[i];
  if (a->pair != b->pair)
    return a->pair - b->pair;
  if (a->mo.micro_batch != b->mo.micro_batch)
    return a->mo.micro_batch - b->mo.micro_batch;
  if (rc_rank(&a->mo) != rc_rank(&b->mo))
    return rc_rank(&b->mo) > rc_rank(&a->mo) ? 1 : -1;
  return a->order < b->order ? -1 : a->order > b->order;
}

/* Mixture-of-experts models: the classic candidates most likely to fit and pay first (a
 * simulation of hundreds of devices takes seconds, so a time budget sees a few of them). */
static void order_moe(grid_space *s) {
  qsort(s->c, (size_t)s->n, sizeof *s->c, by_moe_promise);
  for (int64_t i = 0; i < s->n; i++)
    s->c[i].order = i;
}

psim_status psim_grid_space_build(const psim_model *m, const psim_cluster *c,
                                  const psim_grid_options *o, int32_t max_tp, grid_space *s) {
  memset(s, 0, sizeof *s);
  space_ctx x = {0};
  x.m = m, x.o = o, x.s = s;
  x.batch = m->dims[m->role_dim[PSIM_ROLE_BATCH]].size;
  x.seq = m->role_dim[PSIM_ROLE_SEQUENCE] >= 0 ? m->dims[m->role_dim[PSIM_ROLE_SEQUENCE]].size : 0;
  x.layers = block_layer_count(m);
  /* torchtitan's space keeps ep 1 (its MoE export needs FSDP and etp = tp or 1: not yet
   * searched) */
  x.experts = m->role_dim[PSIM_ROLE_EXPERT] >= 0 && o->space == PSIM_GRID_MEGATRON
                  ? (int32_t)m->dims[m->role_dim[PSIM_ROLE_EXPERT]].size
                  : 0;
  x.params = block_params(m, &x.expert_params);
  x.capacity = max_capacity(c);
  x.node = c->devices_per_node > 0 ? c->devices_per_node : 8;
  /* torchtitan's async TP needs torch.compile (parallelize.py: "Async TP requires
   * torch.compile"): tried on under a compiling stack that leaves it off, off under one that
   * has it on */
  x.async_alt = (int8_t)(c->stack.tp_overlap ? PSIM_ASYNC_TP_OFF
                         : c->stack.compile  ? PSIM_ASYNC_TP_ON
                                             : PSIM_ASYNC_TP_STACK);
  x.n_fp8 = o->try_fp8 && psim_strategy_fp8_applies(m, c) ? 2 : 1;
  s->params = x.params, s->capacity = x.capacity;
  PSIM_CHECK(push_pairs(&x, c, max_tp, true));
  if (x.experts > 0)
    order_moe(s);
  return push_pairs(&x, c, max_tp, false);
}

void psim_grid_space_destroy(grid_space *s) {
  psim_free(s->c);
  memset(s, 0, sizeof *s);
}

static const double *sort_pair_best;

/* (HSDP after the rest: an HSDP candidate with tp > 1 simulates unfolded, docs/simulator.md;
 * best time of the pair among the classic candidates, pair, enumeration order). */
static int by_pair_best(const void *pa, const void *pb) {
  const grid_cand *a = pa, *b = pb;
  if ((a->mo.dp_shard > 0) != (b->mo.dp_shard > 0))
    return a->mo.dp_shard > 0 ? 1 : -1;
  double x = sort_pair_best[a->pair], y = sort_pair_best[b->pair];
  if (x != y)
    return x < y ? -1 : 1;
  return a->order < b->order ? -1 : a->order > b->order;
}

void psim_grid_space_order(grid_space *s, const double *pair_best) {
  int64_t first = 0;
  while (first < s->n && s->c[first].classic)
    first++;
  sort_pair_best = pair_best;
  qsort(s->c + first, (size_t)(s->n - first), sizeof *s->c, by_pair_best);
}

/* The same pair and precision: FP8 linears change every kernel (and cast), so no rule compares
 * candidates of different precisions. */
static bool same_pair(const psim_megatron_opts *a, const psim_megatron_opts *b) {
  return a->tp == b->tp && a->pp == b->pp && a->cp == b->cp && a->ep == b->ep && a->etp == b->etp &&
         a->fp8 == b->fp8;
}

/* The ranks ZeRO shards over: HSDP's shard group, else all of dp (the FSDP space). */
static int32_t zero_shard(const psim_megatron_opts *a) {
  return a->dp_shard > 0 ? a->dp_shard : a->dp;
}

/* The same pair and gradient-reduce overlap: the memory, dominance and ZeRO rules compare only
 * such candidates (overlap is no dominance rule: grid_space.c's header). */
static bool same_pair_overlap(const psim_megatron_opts *a, const psim_megatron_opts *b) {
  return same_pair(a, b) && a->overlap_grad_reduce == b->overlap_grad_reduce &&
         a->overlap_param_gather == b->overlap_param_gather;
}

/* y, over memory, needs no more memory than x: x is over too. Static memory does not
 * depend on the micro-batch, recomputation, sequence parallelism or the interleaving (every
 * device holds layers / pp layers either way, the embedding and head on the same devices),
 * and shrinks with the ZeRO stage. Activations grow with the micro-batch (the samples in
 * flight, min(pp x mb, batch / dp), do not fall with mb), with less recomputation and
 * without sequence parallelism, and with interleaving: the first stage of the interleaved
 * schedule holds (1 + (pp - 1) / (pp vp)) times the activations of 1F1B in its warm-up
 * (Korthikanti et al. 2022, section 4.2.3), so over without interleaving is over with it; two
 * interleaved candidates are compared only at the same vp. */
static bool implies_over(const grid_cand *y, const psim_megatron_opts *x) {
  const psim_megatron_opts *b = &y->mo;
  if (!same_pair_overlap(b, x) || b->zero_stage < x->zero_stage || zero_shard(b) < zero_shard(x) ||
      b->async_tp != x->async_tp)
    return false; /* memory shrinks with the stage and the shard group */
  if (y->state == GRID_STATIC_OVER)
    return true;
  bool vp_ok = b->virtual_stages == x->virtual_stages || b->virtual_stages == 1;
  /* GPipe keeps every micro-batch's activations until the backward pass, 1F1B at most pp */
  bool sched_ok = b->schedule == x->schedule ||
                  (b->schedule == PSIM_SCHED_1F1B && x->schedule == PSIM_SCHED_GPIPE);
  return y->state == GRID_OVER && vp_ok && sched_ok && b->micro_batch <= x->micro_batch &&
         rc_covers(b, x) && (b->sequence_parallel || !x->sequence_parallel);
}

/* y fits with less recomputation and everything else equal: x does the same work and more. */
static bool dominates(const grid_cand *y, const psim_megatron_opts *x) {
  const psim_megatron_opts *b = &y->mo;
  return y->state == GRID_FITS && same_pair_overlap(b, x) &&
         b->virtual_stages == x->virtual_stages && b->micro_batch == x->micro_batch &&
         b->zero_stage == x->zero_stage && b->sequence_parallel == x->sequence_parallel &&
         b->schedule == x->schedule && zero_shard(b) == zero_shard(x) &&
         b->async_tp == x->async_tp && rc_covers(x, b) && !rc_same(b, x);
}

/* y was simulated with the same kernels on every device as x: same tp, pp, micro-batch,
 * recomputation, sequence parallelism and ZeRO stage (which shards the optimizer step), the
 * gradient-reduce overlap aside (it moves the data-parallel collectives, not the kernels);
 * the interleaving changes which layers a device holds, not how many nor their shapes.
 * An iteration lasts at least a device's compute. */
static bool same_kernels(const grid_cand *y, const psim_megatron_opts *x) {
  const psim_megatron_opts *b = &y->mo;
  return (y->state == GRID_FITS || y->state == GRID_OVER) && same_pair(b, x) &&
         b->micro_batch == x->micro_batch && rc_same(b, x) &&
         b->sequence_parallel == x->sequence_parallel && b->zero_stage == x->zero_stage &&
         zero_shard(b) == zero_shard(x) && b->async_tp == x->async_tp &&
         psim_schedule_v_shaped(b->schedule) == psim_schedule_v_shaped(x->schedule);
}

/* y is x one ZeRO stage lower and was not over memory (nor pruned as such). In plansim ZeRO
 * 2 syncs the gradients as ZeRO 1 does (a reduce-scatter, then an all-gather of the updated
 * weights: sim/builder/gradsync.c) and ZeRO 3 adds the weights' all-gathers before each
 * layer (sim/builder/zero.c), so a higher stage is never faster and pays only where the one
 * below does not fit. Every candidate's lower twin comes before it: the stage is the
 * enumeration's outermost knob of a pair, and the orders are stable within a pair. */
static bool lower_stage_not_over(const grid_cand *y, const psim_megatron_opts *x) {
  const psim_megatron_opts *b = &y->mo;
  bool twin = same_pair_overlap(b, x) && b->zero_stage == x->zero_stage - 1 &&
              b->virtual_stages == x->virtual_stages && b->micro_batch == x->micro_batch &&
              rc_same(b, x) && b->sequence_parallel == x->sequence_parallel &&
              b->schedule == x->schedule && zero_shard(b) == zero_shard(x) &&
              b->async_tp == x->async_tp;
  return twin && y->state != GRID_MEM_ESTIMATE && y->state != GRID_MEM_IMPLIED &&
         y->state != GRID_OVER && y->state != GRID_STATIC_OVER;
}

grid_state_kind psim_grid_prune(const grid_space *s, int64_t i, bool found, double best_s) {
  const psim_megatron_opts *x = &s->c[i].mo;
  grid_state_kind k = GRID_PENDING;
  for (int64_t j = 0; x->zero_stage >= 2 && j < i; j++)
    if (lower_stage_not_over(&s->c[j], x))
      return GRID_ZERO_LOWER;
  for (int64_t j = 0; j < i; j++) {
    const grid_cand *y = &s->c[j];
    if (y->state < GRID_FITS)
      continue;
    if (implies_over(y, x))
      return GRID_MEM_IMPLIED;
    if (dominates(y, x))
      k = GRID_DOMINATED;
    else if (k == GRID_PENDING && found && same_kernels(y, x) && y->compute_s >= best_s)
      k = GRID_BOUND;
  }
  return k;
}
