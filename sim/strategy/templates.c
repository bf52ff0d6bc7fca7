/* templates.c - strategy templates: Megatron-LM tp x pp x dp, data parallel
 * and ZeRO, expanded to the explicit form through a mesh + layout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/strategy/strategy.h"

void psim_megatron_opts_init(psim_megatron_opts *o) {
  memset(o, 0, sizeof *o);
  o->tp = o->pp = o->dp = 1;
  o->micro_batch = 1;
  o->virtual_stages = 1;
  o->ep = o->cp = 1;
  o->etp = 0; /* = tp */
  o->schedule = PSIM_SCHED_1F1B;
  o->recompute = PSIM_RECOMPUTE_NONE;
  o->recompute_method = PSIM_RCM_UNIFORM;
  o->recompute_layers = 1;
}

/* Range [lo, hi] of the layers that hold ops of repeated blocks. */
static void block_layers(const psim_model *m, int32_t *lo, int32_t *hi) {
  *lo = -1;
  *hi = -1;
  for (int32_t i = 0; i < m->n_ops; i++) {
    if (m->ops[i].block < 0)
      continue;
    if (*lo < 0 || m->ops[i].layer < *lo)
      *lo = m->ops[i].layer;
    if (m->ops[i].layer > *hi)
      *hi = m->ops[i].layer;
  }
  if (*lo < 0) {
    *lo = 0;
    *hi = m->n_layers - 1;
  }
}

/* Writes first_layer/last_layer of stages[0..n-1] from the block-layer counts sizes[]
 * (summing to the count of block layers from lo): chunk 0 also takes the layers before
 * the first block, chunk n-1 those after the last. */
static void assign_layers(const psim_model *m, int32_t lo, int32_t n, const int32_t *sizes,
                          psim_stage *stages) {
  int32_t next = lo;
  for (int32_t c = 0; c < n; c++) {
    stages[c].first_layer = c == 0 ? 0 : next;
    stages[c].last_layer = c == n - 1 ? m->n_layers - 1 : next + sizes[c] - 1;
    next += sizes[c];
  }
}

void psim_strategy_block_range(const psim_model *m, int32_t *lo, int32_t *hi) {
  block_layers(m, lo, hi);
}

psim_status psim_strategy_split_sizes(const psim_model *m, int32_t n, const int32_t *sizes,
                                      psim_stage *stages) {
  int32_t lo, hi, sum = 0;
  block_layers(m, &lo, &hi);
  for (int32_t c = 0; c < n; c++) {
    if (sizes[c] < 1)
      return psim_error(PSIM_EINPUT, "pipeline chunk %d has no transformer layer", (int)c);
    sum += sizes[c];
  }
  if (sum != hi - lo + 1)
    return psim_error(PSIM_EINPUT, "the pipeline chunks hold %d layers but the model has %d",
                      (int)sum, (int)(hi - lo + 1));
  assign_layers(m, lo, n, sizes, stages);
  return PSIM_OK;
}

psim_status psim_strategy_split_layers(const psim_model *m, int32_t n, bool require_even,
                                       psim_stage *stages) {
  int32_t lo, hi;
  block_layers(m, &lo, &hi);
  int32_t count = hi - lo + 1;
  if (n < 1 || n > count)
    return psim_error(PSIM_EINPUT, "%d pipeline chunks but the model has %d layers to split",
                      (int)n, (int)count);
  if (require_even && count % n != 0)
    return psim_error(PSIM_EINPUT,
                      "the model's %d layers do not divide into %d chunks (interleaving needs "
                      "an even split)",
                      (int)count, (int)n);
  int32_t *sizes = psim_malloc((size_t)n * sizeof *sizes);
  if (!sizes)
    return psim_error(PSIM_ENOMEM, "out of memory splitting layers");
  for (int32_t c = 0; c < n; c++)
    sizes[c] = count / n + (c < count % n ? 1 : 0);
  assign_layers(m, lo, n, sizes, stages);
  psim_free(sizes);
  return PSIM_OK;
}

psim_status psim_strategy_apply_mesh(psim_strategy *s, const psim_model *m) {
  s->ops = psim_calloc((size_t)(m->n_ops > 0 ? m->n_ops : 1), sizeof *s->ops);
  if (!s->ops)
    return psim_error(PSIM_ENOMEM, "out of memory expanding a strategy");
  s->n_ops = m->n_ops;
  /* the splits met: a layer's ops repeat a few, whose device lists are shared rather than
   * computed again (issue 19: 16,384 devices a stage at 131,072 GPUs) */
  int32_t n_st = s->n_stages * (s->virtual_stages > 0 ? s->virtual_stages : 1);
  psim_mesh_memo *memo = psim_calloc(1, sizeof *memo);
  psim_status rc = memo ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory expanding a strategy");
  for (int32_t i = 0; rc == PSIM_OK && i < m->n_ops; i++) {
    int32_t st = psim_strategy_layer_stage(s, psim_strategy_op_layer(s, m, i));
    if (st < 0 || st >= n_st) {
      rc = psim_error(PSIM_EINPUT, "pipeline: layer %d of op '%s' is in no stage",
                      (int)psim_strategy_op_layer(s, m, i), m->ops[i].name);
      break;
    }
    rc = psim_mesh_op_config_like(&s->mesh, m, i, s->stages[st].devices, s->stages[st].n_devices,
                                  memo, &s->ops[i]);
    s->ops[i].stage = st;
  }
  if (memo)
    psim_mesh_memo_destroy(memo);
  psim_free(memo);
  return rc;
}

/* pp * v stages in pipeline order; chunk c runs on physical stage r = c % pp (a V under
 * zbv: psim_schedule_chunk_rank) whose devices are r * per_stage + [0, per_stage). sizes:
 * the block layers of each chunk, NULL for the even split. */
static psim_status make_stages(psim_strategy *s, const psim_model *m, int32_t pp, int32_t v,
                               int32_t per_stage, const int32_t *sizes) {
  int32_t n = pp * v;
  s->stages = psim_calloc((size_t)n, sizeof *s->stages);
  if (!s->stages)
    return psim_error(PSIM_ENOMEM, "out of memory expanding a strategy");
  s->n_stages = pp;
  s->virtual_stages = v;
  if (sizes)
    PSIM_CHECK(psim_strategy_split_sizes(m, n, sizes, s->stages));
  else
    PSIM_CHECK(psim_strategy_split_layers(m, n, v > 1, s->stages));
  for (int32_t c = 0; c < n; c++) {
    psim_stage *st = &s->stages[c];
    st->devices = psim_malloc((size_t)per_stage * sizeof *st->devices);
    if (!st->devices)
      return psim_error(PSIM_ENOMEM, "out of memory expanding a strategy");
    st->n_devices = per_stage;
    for (int32_t d = 0; d < per_stage; d++)
      st->devices[d] = psim_schedule_chunk_rank(s->schedule, pp, c) * per_stage + d;
  }
  return PSIM_OK;
}

static void mesh_axis(psim_mesh *mesh, const char *name, int32_t size) {
  snprintf(mesh->axis[mesh->n_axes], PSIM_MESH_NAME, "%s", name);
  mesh->size[mesh->n_axes++] = size;
}

static void mesh_layout(psim_mesh *mesh, const char *key, int32_t axis) {
  snprintf(mesh->layout_key[mesh->n_layout], PSIM_MESH_NAME, "%s", key);
  mesh->layout_axis[mesh->n_layout++] = axis;
}

/* ---- Megatron-LM ---- */

static psim_status check_megatron_opts(const psim_megatron_opts *o, const psim_cluster *c) {
  if (o->tp < 1 || o->pp < 1 || o->dp < 1)
    return psim_error(PSIM_EINPUT, "tp, pp and dp must be >= 1 (got %d, %d, %d)", (int)o->tp,
                      (int)o->pp, (int)o->dp);
  if (o->ep < 0 || o->etp < 0 || o->cp < 0)
    return psim_error(PSIM_EINPUT, "ep, etp and cp must be >= 1 (got %d, %d, %d)", (int)o->ep,
                      (int)o->etp, (int)o->cp);
  int64_t n = (int64_t)o->tp * o->pp * o->dp * (o->cp > 0 ? o->cp : 1);
  if (n > c->n_devices)
    return psim_error(PSIM_EINPUT, "tp*pp*cp*dp = %lld devices but the cluster has %d",
                      (long long)n, (int)c->n_devices);
  if (o->micro_batch < 1 || o->virtual_stages < 1)
    return psim_error(PSIM_EINPUT, "micro_batch and virtual_stages must be >= 1");
  if (o->zero_stage < 0 || o->zero_stage > 3)
    return psim_error(PSIM_EINPUT, "zero: stage %d; expected 0, 1, 2 or 3", (int)o->zero_stage);
  if (o->dp_shard < 0 || (o->dp_shard > 0 && o->dp % o->dp_shard != 0))
    return psim_error(PSIM_EINPUT, "dp_shard: %d does not divide dp = %d", (int)o->dp_shard,
                      (int)o->dp);
  if (o->dp_shard > 0 && o->dp_shard < o->dp && o->zero_stage < 1)
    return psim_error(PSIM_EINPUT,
                      "dp_shard: %d < dp = %d shards nothing at ZeRO 0 (HSDP needs zero >= 1)",
                      (int)o->dp_shard, (int)o->dp);
  const char *why = psim_schedule_chunks_rule(o->schedule, o->virtual_stages);
  if (why)
    return psim_error(PSIM_EINPUT, "schedule: %s with virtual_stages = %d: it %s",
                      psim_schedule_name(o->schedule), (int)o->virtual_stages, why);
  if (psim_schedule_v_shaped(o->schedule) &&
      (o->first_stage_layers > 0 || o->last_stage_layers > 0 || o->pipeline_layout[0]))
    return psim_error(PSIM_EINPUT,
                      "schedule: %s places its chunks in a V; uneven stages and "
                      "pipeline_layout are Megatron-LM's, for chunks in a loop",
                      psim_schedule_name(o->schedule));
  return PSIM_OK;
}

/* Megatron-LM's rules for ep, etp and cp (megatron/training/arguments.py of
 * core_v0.15.0: num_experts % expert_model_parallel_size == 0; seq_length %
 * (2 * context_parallel_size) == 0; parallel_state.py: the world size divisible
 * by etp * ep * pp). o has ep, etp, cp resolved. */
static psim_status check_moe_cp(const psim_model *m, const psim_megatron_opts *o) {
  int32_t e = m->role_dim[PSIM_ROLE_EXPERT], sq = m->role_dim[PSIM_ROLE_SEQUENCE];
  if (o->ep > 1 && e < 0)
    return psim_error(PSIM_EINPUT, "ep: %d but the model has no dim with role 'expert'",
                      (int)o->ep);
  if (e >= 0 && m->dims[e].size % o->ep != 0)
    return psim_error(PSIM_EINPUT, "ep: %d does not divide the %lld experts of dim '%s'",
                      (int)o->ep, (long long)m->dims[e].size, m->dims[e].name);
  int64_t n = (int64_t)o->tp * o->cp * o->dp;
  if (e >= 0 && n % ((int64_t)o->etp * o->ep) != 0)
    return psim_error(PSIM_EINPUT,
                      "etp: etp*ep = %lld does not divide the stage's tp*cp*dp = %lld devices (the "
                      "expert layers regroup them as etp x ep x expert-dp)",
                      (long long)o->etp * o->ep, (long long)n);
  if (o->cp > 1 && sq < 0)
    return psim_error(PSIM_EINPUT, "cp: %d but the model has no dim with role 'sequence'",
                      (int)o->cp);
  if (o->cp > 1 && m->dims[sq].size % (2 * (int64_t)o->cp) != 0)
    return psim_error(PSIM_EINPUT,
                      "cp: the sequence of %lld tokens (dim '%s') is not a multiple of 2*cp = %lld "
                      "(causal load balancing cuts it in 2 cp chunks)",
                      (long long)m->dims[sq].size, m->dims[sq].name, 2 * (long long)o->cp);
  for (int32_t i = 0; e >= 0 && o->etp > 1 && i < m->n_ops; i++)
    for (int32_t k = 0; k < m->ops[i].n_dims && psim_mesh_expert_op(m, i); k++) {
      const psim_dim *d = &m->dims[m->ops[i].dims[k].dim];
      if (d->role == PSIM_ROLE_FFN && d->size % o->etp != 0)
        return psim_error(PSIM_EINPUT, "etp: %d does not divide the %lld ffn of dim '%s'",
                          (int)o->etp, (long long)d->size, d->name);
    }
  return PSIM_OK;
}

/* Whether a dense (not expert) op iterates over dim d. */
static bool dense_dim(const psim_model *m, int32_t d) {
  for (int32_t i = 0; i < m->n_ops; i++)
    for (int32_t k = 0; k < m->ops[i].n_dims; k++)
      if (m->ops[i].dims[k].dim == d && !psim_mesh_expert_op(m, i))
        return true;
  return false;
}

/* tp must divide every heads-role dim (Megatron asserts num_attention_heads
 * and num_query_groups % tp == 0) and every ffn-role dim of the dense layers
 * (ColumnParallelLinear divides the output size; an ffn only the experts use
 * is split etp ways, check_moe_cp); the vocab is padded by Megatron, so uneven
 * is allowed there. */
static psim_status check_tp_divides(const psim_model *m, int32_t tp) {
  for (int32_t d = 0; d < m->n_dims; d++) {
    psim_role r = m->dims[d].role;
    if ((r == PSIM_ROLE_HEADS || r == PSIM_ROLE_FFN) && m->dims[d].size % tp != 0 &&
        (r == PSIM_ROLE_HEADS || dense_dim(m, d)))
      return psim_error(PSIM_EINPUT, "tp: %d does not divide the %lld %s of dim '%s'", (int)tp,
                        (long long)m->dims[d].size, psim_role_name(r), m->dims[d].name);
  }
  return PSIM_OK;
}

static psim_status megatron_micro(const psim_model *m, const psim_megatron_opts *o,
                                  int32_t *n_micro) {
  int32_t b = m->role_dim[PSIM_ROLE_BATCH];
  if (b < 0)
    return psim_error(PSIM_EINPUT, "the model has no dim with role 'batch' to split dp ways");
  int64_t batch = m->dims[b].size, per = (int64_t)o->micro_batch * o->dp;
  if (batch % per != 0)
    return psim_error(PSIM_EINPUT,
                      "micro_batch: the global batch %lld is not a multiple of micro_batch * dp "
                      "= %lld",
                      (long long)batch, (long long)per);
  if (batch / per > INT32_MAX)
    return psim_error(PSIM_EINPUT, "micro_batch: too many micro-batches");
  *n_micro = (int32_t)(batch / per);
  const char *why = psim_schedule_micro_rule(o->schedule, *n_micro, o->pp);
  if (why)
    return psim_error(PSIM_EINPUT, "schedule: %d micro-batches on pp = %d: %s", (int)*n_micro,
                      (int)o->pp, why);
  return PSIM_OK;
}

/* Megatron-Core's rank orders within a stage (megatron/core/parallel_state.py
 * of core_v0.15.0, initialize_model_parallel: two RankGenerators with order
 * "tp-cp-ep-dp-pp", tp fastest): dense layers rank = tp_i + tp (cp_i + cp dp_i),
 * expert layers (cp = 1, tp = etp) rank = etp_i + etp (ep_i + ep edp_i). One
 * mesh holds both: its axes are the intervals between the strides {1, tp,
 * tp cp, etp, etp ep, n} (each must divide the next), each axis belonging to
 * one dense group and one expert group. */
enum { G_TP = 0, G_CP, G_DP };
enum { X_ETP = 0, X_EP, X_EDP };
static const char *const dense_names[] = {"tp", "cp", "dp"};
static const char *const expert_names[] = {"etp", "ep", "edp"};

typedef struct mega_axes {
  int32_t n;
  int64_t lo[PSIM_MESH_MAX_AXES], size[PSIM_MESH_MAX_AXES]; /* fastest first */
  int32_t dense[PSIM_MESH_MAX_AXES], expert[PSIM_MESH_MAX_AXES];
} mega_axes;

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static psim_status mega_axes_make(const psim_megatron_opts *o, int32_t etp, bool moe,
                                  mega_axes *ax) {
  int64_t n = (int64_t)o->tp * o->cp * o->dp;
  int64_t b[6] = {1, o->tp, (int64_t)o->tp * o->cp, moe ? etp : 1, moe ? (int64_t)etp * o->ep : 1,
                  n};
  qsort(b, 6, sizeof b[0], cmp_i64);
  memset(ax, 0, sizeof *ax);
  for (int i = 0; i + 1 < 6; i++) {
    if (b[i + 1] == b[i])
      continue;
    if (b[i + 1] % b[i] != 0)
      return psim_error(PSIM_EINPUT,
                        "etp: the expert groups (etp %d x ep %d) and the dense groups (tp %d x cp "
                        "%d) do not nest on one mesh: %lld does not divide %lld",
                        (int)etp, (int)o->ep, (int)o->tp, (int)o->cp, (long long)b[i],
                        (long long)b[i + 1]);
    if (ax->n == PSIM_MESH_MAX_AXES)
      return psim_error(PSIM_EINPUT, "etp: too many mesh axes");
    int32_t k = ax->n++;
    ax->lo[k] = b[i];
    ax->size[k] = b[i + 1] / b[i];
    ax->dense[k] = b[i] < o->tp ? G_TP : b[i] < (int64_t)o->tp * o->cp ? G_CP : G_DP;
    ax->expert[k] = b[i] < etp ? X_ETP : b[i] < (int64_t)etp * o->ep ? X_EP : X_EDP;
  }
  return PSIM_OK;
}

/* Adds the mesh axis of ax entry k, named by its dense group when it is the
 * group's only axis, else dense_expert ("dp_ep"); *index: its mesh index. */
static void mega_add_axis(psim_mesh *mesh, const mega_axes *ax, int32_t k, int32_t *index) {
  int32_t same = 0;
  for (int32_t j = 0; j < ax->n; j++)
    same += ax->dense[j] == ax->dense[k];
  char name[PSIM_MESH_NAME];
  if (same == 1)
    snprintf(name, sizeof name, "%s", dense_names[ax->dense[k]]);
  else
    snprintf(name, sizeof name, "%s_%s", dense_names[ax->dense[k]], expert_names[ax->expert[k]]);
  *index = mesh->n_axes;
  mesh_axis(mesh, name, (int32_t)ax->size[k]);
}

/* The dim of the model's first dispatch output that holds the routed tokens:
 * neither batch nor expert, nor its last (model) dim; -1 when none. */
static int32_t capacity_dim(const psim_model *m) {
  for (int32_t i = 0; i < m->n_ops; i++) {
    if (m->ops[i].kind != PSIM_OP_DISPATCH)
      continue;
    const psim_tensor *t = &m->tensors[m->ops[i].out[0]];
    for (int32_t k = 0; k + 1 < t->rank; k++) {
      psim_role r = m->dims[t->dims[k]].role;
      if (r != PSIM_ROLE_BATCH && r != PSIM_ROLE_EXPERT)
        return t->dims[k];
    }
  }
  return -1;
}

static void expert_entry(psim_mesh *mesh, const char *key, int32_t axis) {
  snprintf(mesh->expert_layout_key[mesh->n_expert_layout], PSIM_MESH_NAME, "%s", key);
  mesh->expert_layout_axis[mesh->n_expert_layout++] = axis;
}

/* The expert layout: expert over the ep axes, ffn over the etp axes, the
 * tokens over the expert-dp axes (batch where the dense layers split the
 * batch, the capacity dim where they split the sequence). */
static void megatron_expert_layout(psim_mesh *mesh, const psim_model *m, const mega_axes *ax,
                                   const int32_t *index) {
  int32_t cap = capacity_dim(m);
  for (int g = 0; g < 4; g++)
    for (int32_t k = ax->n - 1; k >= 0; k--) {
      bool edp = ax->expert[k] == X_EDP, dense_dp = ax->dense[k] == G_DP;
      bool want = g == 0   ? ax->expert[k] == X_EP
                  : g == 1 ? ax->expert[k] == X_ETP
                  : g == 2 ? edp && dense_dp
                           : edp && !dense_dp && cap >= 0;
      if (want)
        expert_entry(mesh,
                     g == 0   ? "expert"
                     : g == 1 ? "ffn"
                     : g == 2 ? "batch"
                              : m->dims[cap].name,
                     index[k]);
    }
}

static psim_status megatron_mesh(psim_mesh *mesh, const psim_model *m, const psim_megatron_opts *o,
                                 int32_t etp) {
  bool moe = m->role_dim[PSIM_ROLE_EXPERT] >= 0;
  mega_axes ax;
  PSIM_CHECK(mega_axes_make(o, etp, moe, &ax));
  memset(mesh, 0, sizeof *mesh);
  int32_t index[PSIM_MESH_MAX_AXES];
  if (o->dp == 1) /* dp and tp axes even of size 1: tp fastest, Megatron-LM's rank order */
    mesh_axis(mesh, "dp", 1);
  for (int32_t k = ax.n - 1; k >= 0; k--)
    mega_add_axis(mesh, &ax, k, &index[k]);
  if (o->tp == 1)
    mesh_axis(mesh, "tp", 1);
  static const char *const keys[] = {"batch", "sequence", "heads", "ffn", "vocab"};
  static const int32_t groups[] = {G_DP, G_CP, G_TP, G_TP, G_TP};
  for (int i = 0; i < 5; i++) {
    if (groups[i] == G_DP && o->dp == 1)
      mesh_layout(mesh, keys[i], 0);
    for (int32_t k = ax.n - 1; k >= 0; k--)
      if (ax.dense[k] == groups[i])
        mesh_layout(mesh, keys[i], index[k]);
    if (groups[i] == G_TP && o->tp == 1)
      mesh_layout(mesh, keys[i], mesh->n_axes - 1);
  }
  for (int32_t k = 0; o->sequence_parallel && k < ax.n; k++)
    if (ax.dense[k] == G_TP)
      snprintf(mesh->fallback[index[k]], PSIM_MESH_NAME, "sequence");
  if (o->sequence_parallel && o->tp == 1)
    snprintf(mesh->fallback[mesh->n_axes - 1], PSIM_MESH_NAME, "sequence");
  if (moe && (o->ep > 1 || etp != o->tp || o->cp > 1))
    megatron_expert_layout(mesh, m, &ax, index);
  return PSIM_OK;
}

static psim_status megatron_fill(const psim_model *m, const psim_megatron_opts *o, int32_t n_micro,
                                 psim_strategy *s) {
  PSIM_CHECK(megatron_mesh(&s->mesh, m, o, o->etp));
  s->n_micro = n_micro;
  s->micro_batch = (int64_t)o->micro_batch * o->dp;
  s->schedule = o->schedule;
  s->recompute = o->recompute;
  s->recompute_method = o->recompute_method;
  s->recompute_layers = o->recompute_layers;
  s->recompute_every = o->recompute_every;
  s->sequence_parallel = o->sequence_parallel;
  s->zero_stage = o->zero_stage;
  s->dp_replicate = o->dp_shard > 0 ? o->dp / o->dp_shard : 1;
  s->async_tp = o->async_tp;
  s->fp8 = o->fp8;
  s->overlap_grad_reduce = o->overlap_grad_reduce;
  s->overlap_param_gather = o->overlap_param_gather;
  snprintf(s->tmpl.name, sizeof s->tmpl.name, "megatron");
  s->tmpl.tp = o->tp;
  s->tmpl.pp = o->pp;
  s->tmpl.dp = o->dp;
  s->tmpl.micro_batch = o->micro_batch;
  s->tmpl.virtual_stages = o->virtual_stages;
  s->tmpl.ep = o->ep;
  s->tmpl.etp = o->etp;
  s->tmpl.cp = o->cp;
  s->tmpl.first_stage_layers = o->first_stage_layers;
  s->tmpl.last_stage_layers = o->last_stage_layers;
  memcpy(s->tmpl.pipeline_layout, o->pipeline_layout, sizeof s->tmpl.pipeline_layout);
  int32_t *sizes = NULL;
  psim_status st = psim_megatron_stage_sizes(m, o, &sizes);
  if (st == PSIM_OK)
    st = make_stages(s, m, o->pp, o->virtual_stages, o->dp * o->cp * o->tp, sizes);
  psim_free(sizes);
  return st == PSIM_OK ? psim_strategy_apply_mesh(s, m) : st;
}

psim_status psim_strategy_megatron(const psim_model *m, psim_cluster *c,
                                   const psim_megatron_opts *opts, psim_strategy *s) {
  psim_strategy_init(s);
  psim_megatron_opts o = *opts; /* 0 = the default: ep 1, cp 1, etp = tp */
  PSIM_CHECK(psim_megatron_resolve_layout(&o));
  if (o.virtual_stages > 1 && o.schedule == PSIM_SCHED_1F1B) /* the default with chunks */
    o.schedule = PSIM_SCHED_INTERLEAVED;
  PSIM_CHECK(check_megatron_opts(&o, c));
  o.ep = o.ep > 0 ? o.ep : 1;
  o.cp = o.cp > 0 ? o.cp : 1;
  o.etp = o.etp > 0 ? o.etp : o.tp;
  PSIM_CHECK(check_tp_divides(m, o.tp));
  PSIM_CHECK(check_moe_cp(m, &o));
  int32_t n_micro = 0;
  PSIM_CHECK(megatron_micro(m, &o, &n_micro));
  psim_status st = megatron_fill(m, &o, n_micro, s);
  if (st == PSIM_OK)
    st = psim_strategy_validate(s, m, c, "megatron");
  if (st != PSIM_OK)
    psim_strategy_destroy(s);
  return st;
}

/* ---- data parallel and ZeRO ---- */

static psim_status dp_check(const psim_model *m, const psim_cluster *c, int32_t n,
                            int32_t micro_batches) {
  if (n < 1 || n > c->n_devices)
    return psim_error(PSIM_EINPUT, "dp: %d devices; expected 1..%d (the cluster's devices)", (int)n,
                      (int)c->n_devices);
  int32_t b = m->role_dim[PSIM_ROLE_BATCH];
  if (b < 0)
    return psim_error(PSIM_EINPUT, "the model has no dim with role 'batch' to split dp ways");
  if (micro_batches < 1 || m->dims[b].size % micro_batches != 0)
    return psim_error(PSIM_EINPUT,
                      "micro_batches: %d does not divide the global batch of %lld samples",
                      (int)micro_batches, (long long)m->dims[b].size);
  if (m->dims[b].size / micro_batches < n)
    return psim_error(PSIM_EINPUT, "dp: %d ranks but a micro-batch has only %lld samples", (int)n,
                      (long long)(m->dims[b].size / micro_batches));
  return PSIM_OK;
}

static psim_status dp_fill(const psim_model *m, int32_t n, int32_t micro_batches,
                           psim_strategy *s) {
  mesh_axis(&s->mesh, "dp", n);
  mesh_layout(&s->mesh, "batch", 0);
  s->n_micro = micro_batches;
  s->micro_batch = m->dims[m->role_dim[PSIM_ROLE_BATCH]].size / micro_batches;
  snprintf(s->tmpl.name, sizeof s->tmpl.name, "data_parallel");
  s->tmpl.tp = s->tmpl.pp = s->tmpl.virtual_stages = 1;
  s->tmpl.ep = s->tmpl.etp = s->tmpl.cp = 1;
  s->tmpl.dp = n;
  s->tmpl.micro_batch = (int32_t)(s->micro_batch / n);
  PSIM_CHECK(make_stages(s, m, 1, 1, n, NULL));
  return psim_strategy_apply_mesh(s, m);
}

psim_status psim_strategy_data_parallel(const psim_model *m, psim_cluster *c, int32_t n,
                                        int32_t micro_batches, psim_strategy *s) {
  psim_strategy_init(s);
  if (n <= 0)
    n = c->n_devices;
  PSIM_CHECK(dp_check(m, c, n, micro_batches));
  psim_status st = dp_fill(m, n, micro_batches, s);
  if (st == PSIM_OK)
    st = psim_strategy_validate(s, m, c, "data_parallel");
  if (st != PSIM_OK)
    psim_strategy_destroy(s);
  return st;
}

psim_status psim_strategy_zero(const psim_model *m, psim_cluster *c, int32_t n, int32_t stage,
                               psim_strategy *s) {
  if (stage < 0 || stage > 3)
    return psim_error(PSIM_EINPUT, "stage: %d; expected a ZeRO stage 0, 1, 2 or 3", (int)stage);
  PSIM_CHECK(psim_strategy_data_parallel(m, c, n, 1, s));
  s->zero_stage = stage;
  snprintf(s->tmpl.name, sizeof s->tmpl.name, "zero");
  return PSIM_OK;
}
