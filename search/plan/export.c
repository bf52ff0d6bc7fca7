/* export.c - plans into runtime configurations (export.h, docs/export.md).
 *
 * Every exporter first proves that the target can express the plan exactly
 * (Megatron and DeepSpeed: the strategy equals a Megatron tp x pp x dp
 * expansion op for op; GSPMD: every op's shards lie along the axes of one
 * mesh, the plan's or one inferred from the per-op configurations;
 * FlexFlow: every split is a partition of the op's output) and refuses with
 * the reason otherwise. */
#include "search/plan/export.h"
#include "search/plan/export_facts.h"
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

static const char *const format_names[PSIM_EXPORT_COUNT] = {
    "plansim", "megatron",   "deepspeed", "deepspeed-pipeline",
    "gspmd",   "torchtitan", "flexflow",  "megatron-bridge"};

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
                    "unknown export format '%s' (plansim, megatron, megatron-bridge, deepspeed, "
                    "deepspeed-pipeline, gspmd, torchtitan)",
                    name);
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

/* The template's expert and context degrees (ep, etp, cp; 1, 0 = tp, 1 when not a
 * template): a Megatron layout with ep or cp is matched with the degrees it was made with. */
static void megatron_opts_of(const psim_strategy *s, int32_t tp, int32_t per_stage,
                             psim_megatron_opts *o) {
  psim_megatron_opts_init(o);
  o->tp = tp;
  o->pp = s->n_stages;
  o->ep = s->tmpl.ep > 0 ? s->tmpl.ep : 1;
  o->cp = s->tmpl.cp > 0 ? s->tmpl.cp : 1;
  o->etp = s->tmpl.etp > 0 && s->tmpl.etp != s->tmpl.tp ? s->tmpl.etp : 0;
  o->dp = per_stage / (tp * o->cp);
  o->virtual_stages = s->virtual_stages;
  o->micro_batch = (int32_t)(s->micro_batch / o->dp);
  o->schedule = s->schedule;
  o->recompute = s->recompute;
  o->recompute_method = s->recompute_method;
  o->recompute_layers = s->recompute_layers;
  o->sequence_parallel = s->sequence_parallel;
  o->zero_stage = s->zero_stage;
  o->overlap_grad_reduce = s->overlap_grad_reduce;
  o->overlap_param_gather = s->overlap_param_gather;
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
    psim_export_uneven_stages(m, s, o); /* the template's first/last stage layers */
    if (per_stage % (tp * o->cp) != 0 || o->micro_batch < 1 || s->micro_batch % o->dp != 0)
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

/* ---- entry point ---- */

/* HSDP (dp_replicate > 1) outside torchtitan: Megatron-LM's --num-distributed-optimizer-instances
 * (megatron/training/arguments.py; Megatron-FSDP's outer data-parallel groups) replicates the
 * distributed optimizer over instances, but the export does not yet check that its groups
 * (megatron/core/parallel_state.py) are the shard groups plansim simulated; DeepSpeed's hpZ /
 * MiCS shard sizes likewise. Refused with that reason rather than written wrong. */
static psim_status hsdp_refusal(psim_export_format f, int32_t replicas) {
  bool mcore = f == PSIM_EXPORT_MEGATRON || f == PSIM_EXPORT_MEGATRON_BRIDGE;
  return psim_export_refuse(
      "HSDP (ZeRO sharded over groups of dp / %d ranks, replicated %d ways): %s", (int)replicas,
      (int)replicas,
      mcore ? "Megatron-LM's --num-distributed-optimizer-instances replicates the distributed "
              "optimizer, but the export does not yet check that its groups "
              "(megatron/core/parallel_state.py) are the shard groups plansim simulated"
            : "DeepSpeed's partial sharding (hpZ zero_hpz_partition_size, MiCS mics_shard_size) "
              "is not written by this export; the torchtitan export writes HSDP");
}

psim_status psim_export(const psim_plan_doc *d, psim_export_format f, char **text, size_t *len) {
  *text = NULL;
  *len = 0;
  PSIM_CHECK(psim_export_check_names(&d->model, &d->cluster)); /* before any format */
  switch (f) {
  case PSIM_EXPORT_PLANSIM: return psim_export_json_text(d->root, text, len);
  case PSIM_EXPORT_GSPMD: return psim_export_gspmd(d, text, len);
  case PSIM_EXPORT_FLEXFLOW:
    return psim_export_refuse(
        "no current FlexFlow release reads a strategy file (strategy.proto was removed in "
        "January 2021 and flexflow-train's strategy import is disabled); see docs/export.md");
  default: break;
  }
  psim_export_facts facts;
  PSIM_CHECK(psim_export_facts_of(d, &facts));
  if (facts.s->dp_replicate > 1 && f != PSIM_EXPORT_TORCHTITAN)
    return hsdp_refusal(f, facts.s->dp_replicate);
  if (facts.s->async_tp == PSIM_ASYNC_TP_ON && f != PSIM_EXPORT_TORCHTITAN)
    return psim_export_refuse(
        "async tensor parallelism (torch's micro-pipeline TP, torchtitan's "
        "enable_async_tensor_parallel): Megatron-LM's --tp-comm-overlap is Transformer Engine's "
        "userbuffers overlap, which plansim does not model as this; DeepSpeed has no tensor "
        "parallelism to overlap");
  switch (f) {
  case PSIM_EXPORT_MEGATRON: return psim_export_megatron(d, &facts, text, len);
  case PSIM_EXPORT_MEGATRON_BRIDGE: return psim_export_bridge(d, &facts, text, len);
  case PSIM_EXPORT_DEEPSPEED: return psim_export_deepspeed(d, &facts, text, len);
  case PSIM_EXPORT_DEEPSPEED_PIPELINE: return psim_export_deepspeed_pipeline(d, &facts, text, len);
  case PSIM_EXPORT_TORCHTITAN: return psim_export_torchtitan(d, &facts, text, len);
  default: return psim_error(PSIM_EINPUT, "unknown export format %d", (int)f);
  }
}
