/* export.c - plans into runtime configurations (export.h, docs/export.md).
 *
 * Every exporter first proves that the target can express the plan exactly
 * (Megatron and DeepSpeed: the strategy equals a Megatron tp x pp x dp
 * expansion op for op; GSPMD: every op's shards lie along the axes of one
 * mesh, the plan's or one inferred from the per-op configurations;
 * FlexFlow: every split is a partition of the op's output) and refuses with
 * the reason otherwise. */
#include "search/plan/export.h"
#include "search/plan/export_impl.h"
#include "sim/core/strbuf.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "search/plan/plan.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"

static const char *const format_names[PSIM_EXPORT_COUNT] = {"plansim", "megatron", "deepspeed",
                                                            "gspmd", "flexflow"};

const char *psim_export_format_name(psim_export_format f) {
  return f >= 0 && f < PSIM_EXPORT_COUNT ? format_names[f] : "unknown";
}

psim_status psim_export_format_parse(const char *name, psim_export_format *out) {
  for (int f = 0; f < PSIM_EXPORT_COUNT; f++)
    if (strcmp(name, format_names[f]) == 0) {
      *out = (psim_export_format)f;
      return PSIM_OK;
    }
  return psim_error(PSIM_EINPUT,
                    "unknown export format '%s' (plansim, megatron, deepspeed, gspmd, flexflow)",
                    name);
}

/* ---- a growing text buffer ---- */

typedef psim_sb sbuf;
#define sb_printf psim_sb_printf

static psim_status sb_finish(sbuf *b, char **text, size_t *len) {
  return psim_sb_finish(b, "export", text, len);
}

/* ---- loading a plan with its model and cluster ---- */

void psim_plan_doc_init(psim_plan_doc *d) {
  memset(d, 0, sizeof *d);
  psim_model_init(&d->model);
  psim_cluster_init(&d->cluster);
  psim_strategy_init(&d->strategy);
}

void psim_plan_doc_destroy(psim_plan_doc *d) {
  cJSON_Delete(d->root);
  psim_strategy_destroy(&d->strategy);
  psim_cluster_destroy(&d->cluster);
  psim_model_destroy(&d->model);
  psim_free(d->model_file);
  psim_free(d->cluster_file);
  psim_plan_doc_init(d);
}

/* The file named by the plan's key: as written, else beside the plan. */
static psim_status plan_relative(const char *plan_file, const cJSON *root, const char *key,
                                 const char *given, char **out) {
  if (given) {
    *out = psim_strdup(given);
    return *out ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory");
  }
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!cJSON_IsString(v))
    return psim_error(PSIM_EINPUT, "%s: the plan records no \"%s\"; give --%.*s FILE", plan_file,
                      key, (int)(strchr(key, '_') - key), key);
  const char *slash = strrchr(plan_file, '/');
  size_t dir = slash ? (size_t)(slash - plan_file) + 1 : 0;
  size_t n = dir + strlen(v->valuestring) + 1;
  *out = psim_malloc(n);
  if (!*out)
    return psim_error(PSIM_ENOMEM, "out of memory");
  if (access(v->valuestring, R_OK) == 0 || v->valuestring[0] == '/' || dir == 0)
    snprintf(*out, n, "%s", v->valuestring);
  else
    snprintf(*out, n, "%.*s%s", (int)dir, plan_file, v->valuestring);
  return PSIM_OK;
}

psim_status psim_plan_doc_load(const char *plan_file, const char *model_file,
                               const char *cluster_file, psim_plan_doc *d) {
  psim_plan_doc_init(d);
  PSIM_CHECK(psim_json_load_file(plan_file, &d->root));
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(d->root, "format");
  if (!cJSON_IsString(f) || strcmp(f->valuestring, "plansim.plan/1") != 0)
    return psim_error(PSIM_EINPUT,
                      "%s: format: expected \"plansim.plan/1\" (a plan from "
                      "'plansim plan -o PLAN')",
                      plan_file);
  PSIM_CHECK(psim_plan_check(d->root, plan_file));
  PSIM_CHECK(plan_relative(plan_file, d->root, "model_file", model_file, &d->model_file));
  PSIM_CHECK(plan_relative(plan_file, d->root, "cluster_file", cluster_file, &d->cluster_file));
  PSIM_CHECK(psim_model_load(d->model_file, &d->model));
  PSIM_CHECK(psim_plan_check_model(plan_file, d->root, &d->model));
  PSIM_CHECK(psim_cluster_load(d->cluster_file, &d->cluster));
  return psim_strategy_from_json(plan_file, psim_plan_strategy_json(d->root), &d->model,
                                 &d->cluster, &d->strategy);
}

/* ---- Megatron matching ---- */

/* The first difference between s and the Megatron expansion t, as a reason;
 * *agree is how many ops agree before it (-1 when the stages differ). */
static bool megatron_differs(const psim_model *m, const psim_strategy *s, const psim_strategy *t,
                             char *why, size_t size, int32_t *agree) {
  *agree = -1;
  if (s->n_micro != t->n_micro || s->micro_batch != t->micro_batch) {
    snprintf(why, size, "%d micro-batches where Megatron would run %d", s->n_micro, t->n_micro);
    return true;
  }
  for (int32_t i = 0; i < s->n_stages * s->virtual_stages; i++) {
    const psim_stage *x = &s->stages[i], *y = &t->stages[i];
    if (x->first_layer != y->first_layer || x->last_layer != y->last_layer ||
        x->n_devices != y->n_devices ||
        memcmp(x->devices, y->devices, (size_t)x->n_devices * sizeof *x->devices) != 0) {
      snprintf(why, size,
               "pipeline stage %d holds layers %d-%d on %d devices from %d, where Megatron "
               "would place layers %d-%d on %d devices from %d",
               i, x->first_layer, x->last_layer, x->n_devices, x->devices[0], y->first_layer,
               y->last_layer, y->n_devices, y->devices[0]);
      return true;
    }
  }
  for (int32_t o = 0; o < s->n_ops; o++)
    if (!psim_export_config_equal(&s->ops[o], &t->ops[o])) {
      char a[160], b[160];
      psim_export_fmt_config(m, o, &s->ops[o], a, sizeof a);
      psim_export_fmt_config(m, o, &t->ops[o], b, sizeof b);
      snprintf(why, size, "op '%s' has a per-op placement (%s) where Megatron would use (%s)",
               m->ops[o].name, a, b);
      *agree = o;
      return true;
    }
  return false;
}

/* Tries one (tp, micro_batch) candidate; *match set when it equals s. */
static psim_status try_megatron(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                                const psim_megatron_opts *o, bool *match, int32_t *agree, char *why,
                                size_t size) {
  psim_strategy t;
  psim_status st = psim_strategy_megatron(m, c, o, &t);
  if (st != PSIM_OK) {
    psim_strategy_destroy(&t);
    if (st == PSIM_ENOMEM)
      return st;
    snprintf(why, size, "Megatron tp %d, pp %d, dp %d does not apply: %s", o->tp, o->pp, o->dp,
             psim_error_message());
    *agree = -2;
    psim_error_clear();
    return PSIM_OK;
  }
  *match = !megatron_differs(m, s, &t, why, size, agree);
  psim_strategy_destroy(&t);
  return PSIM_OK;
}

static void megatron_opts_of(const psim_strategy *s, int32_t tp, int32_t per_stage,
                             psim_megatron_opts *o) {
  psim_megatron_opts_init(o);
  o->tp = tp;
  o->pp = s->n_stages;
  o->dp = per_stage / tp;
  o->virtual_stages = s->virtual_stages;
  o->micro_batch = (int32_t)(s->micro_batch / o->dp);
  o->schedule = s->schedule;
  o->recompute = s->recompute;
  o->sequence_parallel = s->sequence_parallel;
  o->zero_stage = s->zero_stage;
  o->overlap_grad_reduce = s->overlap_grad_reduce;
}

psim_status psim_export_match_megatron(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                                       psim_megatron_opts *o) {
  if (s->sync == PSIM_SYNC_PS)
    return psim_error(PSIM_EFAILED, "the plan synchronises gradients with parameter servers; "
                                    "Megatron-LM all-reduces them");
  if (s->n_stages < 1 || !s->stages)
    return psim_error(PSIM_EFAILED, "the plan has no pipeline stages");
  int32_t per_stage = s->stages[0].n_devices;
  char why[512] = "", first_why[512] = "";
  int32_t best = -3; /* the reason kept is the closest candidate's (most ops agreeing) */
  /* The template's own tp first (its reason is the one reported), then every divisor. */
  int32_t hint = s->tmpl.tp > 0 && per_stage % s->tmpl.tp == 0 ? s->tmpl.tp : 0;
  for (int32_t k = 0; k <= per_stage; k++) {
    int32_t tp = k == 0 ? hint : k;
    if (tp <= 0 || per_stage % tp != 0 || (k > 0 && tp == hint))
      continue;
    megatron_opts_of(s, tp, per_stage, o);
    if (o->micro_batch < 1 || s->micro_batch % (per_stage / tp) != 0)
      continue;
    bool match = false;
    int32_t agree = -2;
    PSIM_CHECK(try_megatron(m, c, s, o, &match, &agree, why, sizeof why));
    if (match)
      return PSIM_OK;
    if (agree > best) {
      best = agree;
      snprintf(first_why, sizeof first_why, "%s", why);
    }
  }
  return psim_error(PSIM_EFAILED,
                    "the plan is not a Megatron-LM tensor x pipeline x data layout: %s",
                    first_why[0] ? first_why : "no tensor-parallel degree divides the stages");
}

/* ---- model facts Megatron and DeepSpeed want ---- */

static int64_t role_size(const psim_model *m, psim_role r) {
  return m->role_dim[r] >= 0 ? m->dims[m->role_dim[r]].size : 0;
}

/* Layers of the repeated blocks (the transformer layers). */
static int32_t block_layers(const psim_model *m) {
  int32_t lo = -1, hi = -2;
  for (int32_t o = 0; o < m->n_ops; o++)
    if (m->ops[o].block >= 0) {
      if (lo < 0 || m->ops[o].layer < lo)
        lo = m->ops[o].layer;
      if (m->ops[o].layer > hi)
        hi = m->ops[o].layer;
    }
  return hi - lo + 1;
}

/* Key/value heads when a second heads-role dim differs (grouped-query attention). */
static int64_t kv_heads(const psim_model *m) {
  int64_t h = role_size(m, PSIM_ROLE_HEADS);
  for (int32_t d = 0; d < m->n_dims; d++)
    if (m->dims[d].role == PSIM_ROLE_HEADS && m->dims[d].size != h)
      return m->dims[d].size;
  return 0;
}

static bool has_op(const psim_model *m, psim_op_kind k, const char *fn) {
  for (int32_t o = 0; o < m->n_ops; o++)
    if (m->ops[o].kind == k && (!fn || (m->ops[o].fn && strcmp(m->ops[o].fn, fn) == 0)))
      return true;
  return false;
}

/* ---- megatron ---- */

static psim_status megatron_refusals(const psim_model *m, const psim_strategy *s,
                                     const psim_megatron_opts *o) {
  if (m->role_dim[PSIM_ROLE_HEADS] < 0 || m->role_dim[PSIM_ROLE_HIDDEN] < 0)
    return psim_error(PSIM_EFAILED,
                      "Megatron-LM trains transformers: model '%s' has no "
                      "heads-role or hidden-role dim",
                      m->name);
  if (s->zero_stage >= 2)
    return psim_error(PSIM_EFAILED,
                      "ZeRO stage %d: Megatron-LM's distributed optimizer shards the optimizer "
                      "state (stage 1) only",
                      s->zero_stage);
  if (o->pp > 1 && s->schedule == PSIM_SCHED_GPIPE)
    return psim_error(PSIM_EFAILED, "the GPipe schedule: Megatron-LM runs 1F1B (or interleaved "
                                    "1F1B) pipelines only");
  if (s->allreduce == PSIM_AR_HALVING_DOUBLING || s->allreduce == PSIM_AR_HIERARCHICAL)
    return psim_error(PSIM_EFAILED,
                      "all-reduce algorithm '%s' has no NCCL_ALGO equivalent (NCCL offers Ring "
                      "and Tree; 'auto' lets NCCL choose)",
                      psim_allreduce_algo_name(s->allreduce));
  return PSIM_OK;
}

static void megatron_model_args(sbuf *b, const psim_model *m) {
  sb_printf(b, "  --num-layers %d\n", block_layers(m));
  sb_printf(b, "  --hidden-size %lld\n", (long long)role_size(m, PSIM_ROLE_HIDDEN));
  sb_printf(b, "  --num-attention-heads %lld\n", (long long)role_size(m, PSIM_ROLE_HEADS));
  if (kv_heads(m) > 0)
    sb_printf(b, "  --group-query-attention\n  --num-query-groups %lld\n", (long long)kv_heads(m));
  if (role_size(m, PSIM_ROLE_FFN) > 0)
    sb_printf(b, "  --ffn-hidden-size %lld\n", (long long)role_size(m, PSIM_ROLE_FFN));
  if (role_size(m, PSIM_ROLE_SEQUENCE) > 0)
    sb_printf(b, "  --seq-length %lld\n  --max-position-embeddings %lld\n",
              (long long)role_size(m, PSIM_ROLE_SEQUENCE),
              (long long)role_size(m, PSIM_ROLE_SEQUENCE));
  if (has_op(m, PSIM_OP_RMSNORM, NULL))
    sb_printf(b, "  --normalization RMSNorm\n");
  if (has_op(m, PSIM_OP_ELEMENTWISE, "swiglu"))
    sb_printf(b, "  --swiglu\n");
  if (m->dtype == PSIM_DTYPE_BF16)
    sb_printf(b, "  --bf16\n");
  else if (m->dtype == PSIM_DTYPE_FP16)
    sb_printf(b, "  --fp16\n");
}

static void megatron_parallel_args(sbuf *b, const psim_model *m, const psim_strategy *s,
                                   const psim_megatron_opts *o) {
  sb_printf(b, "  --tensor-model-parallel-size %d\n", o->tp);
  sb_printf(b, "  --pipeline-model-parallel-size %d\n", o->pp);
  if (o->virtual_stages > 1)
    sb_printf(b, "  --num-layers-per-virtual-pipeline-stage %d\n",
              block_layers(m) / (o->pp * o->virtual_stages));
  sb_printf(b, "  --micro-batch-size %d\n", o->micro_batch);
  sb_printf(b, "  --global-batch-size %lld\n", (long long)role_size(m, PSIM_ROLE_BATCH));
  if (s->sequence_parallel)
    sb_printf(b, "  --sequence-parallel\n");
  if (s->recompute == PSIM_RECOMPUTE_FULL)
    sb_printf(b, "  --recompute-granularity full\n  --recompute-method uniform\n"
                 "  --recompute-num-layers 1\n");
  else if (s->recompute == PSIM_RECOMPUTE_SELECTIVE)
    sb_printf(b, "  --recompute-granularity selective\n");
  if (s->zero_stage == 1)
    sb_printf(b, "  --use-distributed-optimizer\n");
  if (s->overlap_grad_reduce)
    sb_printf(b, "  --overlap-grad-reduce\n");
  /* Megatron's gradient buckets count fp32 main-gradient elements (4 bytes). */
  sb_printf(b, "  --ddp-bucket-size %.0f\n", s->bucket_bytes / 4);
}

static psim_status export_megatron(const psim_plan_doc *d, char **text, size_t *len) {
  psim_megatron_opts o;
  PSIM_CHECK(psim_export_match_megatron(&d->model, (psim_cluster *)&d->cluster, &d->strategy, &o));
  PSIM_CHECK(megatron_refusals(&d->model, &d->strategy, &o));
  sbuf b = {0};
  sb_printf(&b, "# Megatron-LM arguments for model ");
  psim_export_shell_quote(&b, d->model.name); /* names are shell words even in a comment */
  sb_printf(&b, " on cluster ");
  psim_export_shell_quote(&b, d->cluster.name);
  sb_printf(&b, " (plansim export).\n");
  sb_printf(&b,
            "# World size %d = tensor %d x pipeline %d x data %d; one process per device,\n"
            "# ranks in Megatron-LM's default order (tensor fastest, then data, then "
            "pipeline).\n",
            o.tp * o.pp * o.dp, o.tp, o.pp, o.dp);
  if (d->strategy.allreduce == PSIM_AR_RING || d->strategy.allreduce == PSIM_AR_TREE)
    sb_printf(&b, "export NCCL_ALGO=%s\n", d->strategy.allreduce == PSIM_AR_RING ? "Ring" : "Tree");
  sb_printf(&b, "MEGATRON_ARGS=(\n");
  megatron_parallel_args(&b, &d->model, &d->strategy, &o);
  megatron_model_args(&b, &d->model);
  sb_printf(&b,
            ")\n# torchrun --nproc-per-node %d --nnodes %d pretrain_gpt.py "
            "\"${MEGATRON_ARGS[@]}\" ...\n",
            d->cluster.devices_per_node > 0 ? d->cluster.devices_per_node : o.tp * o.pp * o.dp,
            d->cluster.devices_per_node > 0
                ? (o.tp * o.pp * o.dp + d->cluster.devices_per_node - 1) /
                      d->cluster.devices_per_node
                : 1);
  return sb_finish(&b, text, len);
}

/* ---- deepspeed ---- */

static psim_status deepspeed_refusals(const psim_strategy *s, const psim_megatron_opts *o) {
  if (o->tp > 1)
    return psim_error(PSIM_EFAILED,
                      "tensor parallelism (tp %d): a DeepSpeed config holds data and pipeline "
                      "parallelism; tensor parallelism comes from Megatron-DeepSpeed's "
                      "--tensor-model-parallel-size (export --format megatron)",
                      o->tp);
  if (o->pp > 1 && s->zero_stage >= 2)
    return psim_error(PSIM_EFAILED,
                      "ZeRO stage %d with pipeline parallelism: DeepSpeed "
                      "supports ZeRO stages 0-1 with pipelines",
                      s->zero_stage);
  if (o->pp > 1 && s->schedule != PSIM_SCHED_1F1B)
    return psim_error(PSIM_EFAILED, "the %s schedule: DeepSpeed's pipeline engine runs 1F1B only",
                      psim_schedule_name(s->schedule));
  if (s->recompute == PSIM_RECOMPUTE_SELECTIVE)
    return psim_error(PSIM_EFAILED, "selective recomputation (attention core only) has no "
                                    "DeepSpeed setting; full recomputation has");
  if (s->sequence_parallel)
    return psim_error(PSIM_EFAILED, "sequence parallelism needs tensor parallelism, which a "
                                    "DeepSpeed config does not hold");
  if (s->allreduce != PSIM_AR_AUTO)
    return psim_error(PSIM_EFAILED,
                      "all-reduce algorithm '%s': DeepSpeed leaves the algorithm to NCCL (use "
                      "'auto')",
                      psim_allreduce_algo_name(s->allreduce));
  return PSIM_OK;
}

static psim_status deepspeed_zero(cJSON *root, const psim_strategy *s, double elem_bytes) {
  cJSON *z;
  PSIM_CHECK(psim_json_add_object(root, "zero_optimization", &z));
  PSIM_CHECK(psim_json_add_number(z, "stage", s->zero_stage));
  PSIM_CHECK(psim_json_add_bool(z, "overlap_comm", s->overlap_grad_reduce));
  PSIM_CHECK(psim_json_add_number(z, "reduce_bucket_size", s->bucket_bytes / elem_bytes));
  if (s->zero_stage >= 1 && s->zero_stage <= 2)
    PSIM_CHECK(psim_json_add_number(z, "allgather_bucket_size", s->bucket_bytes / elem_bytes));
  return PSIM_OK;
}

static psim_status deepspeed_doc(const psim_plan_doc *d, const psim_megatron_opts *o, cJSON *root) {
  const psim_strategy *s = &d->strategy;
  const psim_model *m = &d->model;
  cJSON *x;
  PSIM_CHECK(psim_json_add_number(root, "train_batch_size", (double)role_size(m, PSIM_ROLE_BATCH)));
  PSIM_CHECK(psim_json_add_number(root, "train_micro_batch_size_per_gpu", o->micro_batch));
  PSIM_CHECK(psim_json_add_number(root, "gradient_accumulation_steps", s->n_micro));
  PSIM_CHECK(deepspeed_zero(root, s, (double)psim_dtype_bytes(m->dtype)));
  if (m->dtype == PSIM_DTYPE_BF16 || m->dtype == PSIM_DTYPE_FP16) {
    PSIM_CHECK(psim_json_add_object(root, m->dtype == PSIM_DTYPE_BF16 ? "bf16" : "fp16", &x));
    PSIM_CHECK(psim_json_add_bool(x, "enabled", true));
  }
  if (o->pp > 1) {
    PSIM_CHECK(psim_json_add_object(root, "pipeline", &x));
    PSIM_CHECK(psim_json_add_number(x, "stages", o->pp));
    PSIM_CHECK(psim_json_add_string(x, "partition", "uniform"));
    PSIM_CHECK(psim_json_add_number(x, "activation_checkpoint_interval",
                                    s->recompute == PSIM_RECOMPUTE_FULL ? 1 : 0));
  } else if (s->recompute == PSIM_RECOMPUTE_FULL) {
    PSIM_CHECK(psim_json_add_object(root, "activation_checkpointing", &x));
    PSIM_CHECK(psim_json_add_bool(x, "partition_activations", false));
    PSIM_CHECK(psim_json_add_bool(x, "contiguous_memory_optimization", false));
    PSIM_CHECK(psim_json_add_bool(x, "cpu_checkpointing", false));
  }
  return PSIM_OK;
}

static psim_status export_deepspeed(const psim_plan_doc *d, char **text, size_t *len) {
  psim_megatron_opts o;
  PSIM_CHECK(psim_export_match_megatron(&d->model, (psim_cluster *)&d->cluster, &d->strategy, &o));
  PSIM_CHECK(deepspeed_refusals(&d->strategy, &o));
  cJSON *root = cJSON_CreateObject();
  if (!root)
    return psim_error(PSIM_ENOMEM, "export: out of memory");
  psim_status st = deepspeed_doc(d, &o, root);
  if (st == PSIM_OK)
    st = psim_export_json_text(root, text, len);
  cJSON_Delete(root);
  return st;
}

/* ---- flexflow ---- */

static psim_status flexflow_refusals(const psim_strategy *s) {
  if (s->n_micro > 1)
    return psim_error(PSIM_EFAILED,
                      "%d micro-batches: FlexFlow's per-op strategy runs one "
                      "batch per iteration (no pipelining or accumulation)",
                      s->n_micro);
  if (s->zero_stage > 0)
    return psim_error(PSIM_EFAILED, "ZeRO stage %d has no FlexFlow equivalent", s->zero_stage);
  if (s->recompute != PSIM_RECOMPUTE_NONE)
    return psim_error(PSIM_EFAILED, "%s recomputation has no FlexFlow equivalent",
                      psim_recompute_name(s->recompute));
  if (s->sync == PSIM_SYNC_PS)
    return psim_error(PSIM_EFAILED, "parameter servers are not part of a FlexFlow per-op strategy");
  return PSIM_OK;
}

/* Checks op o: every split dim is a dim of its first output, no replicas. */
static psim_status flexflow_check_op(const psim_model *m, const psim_op_config *c, int32_t o) {
  const psim_op *op = &m->ops[o];
  if (c->replicas > 1)
    return psim_error(PSIM_EFAILED,
                      "op '%s' is computed by %d replicas per shard: FlexFlow places each "
                      "partition on one device",
                      op->name, c->replicas);
  const psim_tensor *out = &m->tensors[op->out[0]];
  for (int32_t i = 0; i < op->n_dims; i++) {
    if (c->degree[i] <= 1)
      continue;
    bool in_out = false;
    for (int32_t k = 0; k < out->rank; k++)
      in_out = in_out || out->dims[k] == op->dims[i].dim;
    if (!in_out)
      return psim_error(PSIM_EFAILED,
                        "op '%s' splits dim '%s' %d ways, which is not a dim of its output "
                        "'%s': FlexFlow partitions an op's output only",
                        op->name, m->dims[op->dims[i].dim].name, c->degree[i], out->name);
  }
  return PSIM_OK;
}

/* Plansim shard index of the FlexFlow partition with row-major index k over
 * the output dims. */
static int32_t flexflow_shard(const psim_model *m, const psim_op *op, const psim_op_config *c,
                              int32_t k) {
  const psim_tensor *out = &m->tensors[op->out[0]];
  int32_t coord[PSIM_MAX_OP_DIMS] = {0};
  for (int32_t r = out->rank - 1; r >= 0; r--) {
    int32_t i = psim_op_dim_index(op, out->dims[r]);
    int32_t deg = i >= 0 ? c->degree[i] : 1;
    if (i >= 0)
      coord[i] = k % deg;
    k /= deg;
  }
  int32_t s = 0;
  for (int32_t i = 0; i < op->n_dims; i++)
    s = s * c->degree[i] + coord[i];
  return s;
}

static void flexflow_op(sbuf *b, const psim_model *m, const psim_cluster *cl,
                        const psim_op_config *c, int32_t o) {
  const psim_op *op = &m->ops[o];
  const psim_tensor *out = &m->tensors[op->out[0]];
  const char *type = cl->types[cl->devices[c->devices[0]].type].name;
  sb_printf(b, "ops {\n  name: ");
  psim_export_proto_quote(b, op->name);
  sb_printf(b, "\n  device_type: %s\n", strstr(type, "cpu") ? "CPU" : "GPU");
  for (int32_t r = out->rank - 1; r >= 0; r--) { /* FlexFlow lists the innermost dim first */
    int32_t i = psim_op_dim_index(op, out->dims[r]);
    sb_printf(b, "  dims: %d\n", i >= 0 ? c->degree[i] : 1);
  }
  for (int32_t k = 0; k < c->n_devices; k++)
    sb_printf(b, "  device_ids: %d\n", c->devices[flexflow_shard(m, op, c, k)]);
  sb_printf(b, "}\n");
}

static psim_status export_flexflow(const psim_plan_doc *d, char **text, size_t *len) {
  const psim_strategy *s = &d->strategy;
  PSIM_CHECK(flexflow_refusals(s));
  for (int32_t o = 0; o < d->model.n_ops; o++)
    PSIM_CHECK(flexflow_check_op(&d->model, &s->ops[o], o));
  sbuf b = {0};
  sb_printf(&b,
            "# FlexFlow strategy (strategy.proto, text format) for model %s on cluster %s\n"
            "# (plansim export). dims: partition degrees of each op's output, innermost dim\n"
            "# first; device_ids: one device per partition, the innermost dim fastest.\n",
            d->model.name, d->cluster.name);
  for (int32_t o = 0; o < d->model.n_ops; o++)
    flexflow_op(&b, &d->model, &d->cluster, &s->ops[o], o);
  return sb_finish(&b, text, len);
}

/* ---- entry point ---- */

psim_status psim_export(const psim_plan_doc *d, psim_export_format f, char **text, size_t *len) {
  *text = NULL;
  *len = 0;
  PSIM_CHECK(psim_export_check_names(&d->model, &d->cluster)); /* before any format */
  switch (f) {
  case PSIM_EXPORT_PLANSIM: return psim_export_json_text(d->root, text, len);
  case PSIM_EXPORT_MEGATRON: return export_megatron(d, text, len);
  case PSIM_EXPORT_DEEPSPEED: return export_deepspeed(d, text, len);
  case PSIM_EXPORT_GSPMD: return psim_export_gspmd(d, text, len);
  case PSIM_EXPORT_FLEXFLOW: return export_flexflow(d, text, len);
  default: return psim_error(PSIM_EINPUT, "unknown export format %d", (int)f);
  }
}
