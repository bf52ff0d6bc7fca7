/* modern_sim.c - one modern row through the generic simulator: the model from
 * a generator (models/), the cluster from a preset (topologies/), the strategy
 * from the Megatron template or, with context parallelism, an explicit mesh.
 * What plansim cannot express is reported in row->unsupported, never dropped. */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "models/generators.h"
#include "modern.h"
#include "sim/builder/routing.h"
#include "sim/core/json.h"
#include "sim/simulate.h"
#include "topologies/presets.h"

static psim_status build_model(const modern_row *r, psim_model *m) {
  psim_gen_tf_opts o;
  if (r->family == MF_LLAMA)
    psim_gen_llama_opts_init(&o);
  else if (r->family == MF_MPT)
    psim_gen_mpt_opts_init(&o);
  else
    psim_gen_gpt_opts_init(&o);
  o.layers = r->layers;
  o.hidden = r->hidden;
  o.heads = r->heads;
  o.kv_heads = r->family == MF_LLAMA ? r->kv_heads : 0;
  o.ffn = r->ffn;
  o.seq = r->seq;
  o.vocab = r->vocab;
  o.batch = r->batch;
  o.flash = true; /* every modern stack runs a fused attention kernel */
  o.linear_dtype = r->fp8 ? "fp8" : NULL;
  cJSON *doc = NULL;
  PSIM_CHECK(r->moe.experts > 0      ? modern_moe_model(r, &doc)
             : r->family == MF_LLAMA ? psim_gen_llama(&o, &doc)
             : r->family == MF_MPT   ? psim_gen_mpt(&o, &doc)
                                     : psim_gen_gpt(&o, &doc));
  psim_status s = psim_model_from_json("generated", doc, m);
  cJSON_Delete(doc);
  return s;
}

/* The preset's devices per node (an NVLink domain for NVL72). */
static int32_t preset_dpn(const char *preset) {
  psim_preset_opts o;
  psim_preset_opts_init(&o);
  o.preset = preset;
  cJSON *doc = NULL;
  if (psim_preset_cluster(&o, &doc) != PSIM_OK)
    return 0;
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(doc, "devices_per_node");
  int32_t n = cJSON_IsNumber(d) ? (int32_t)d->valuedouble : 0;
  cJSON_Delete(doc);
  return n;
}

/* The row's software stack (megatron-lm-2021 with o->base), the scales of o
 * over the profile's fit when given. */
static psim_status set_stack(const modern_row *r, const modern_stack_opts *o, psim_cluster *c) {
  PSIM_CHECK(psim_stack_builtin(o->base ? "megatron-lm-2021" : r->stack, &c->stack));
  if (o->base)
    return PSIM_OK;
  if (o->gemm_scale > 0 || o->attn_scale > 0)
    c->stack.n_fit = 0;
  if (o->gemm_scale > 0)
    c->stack.gemm_scale = o->gemm_scale;
  if (o->attn_scale > 0)
    c->stack.attn_scale = o->attn_scale;
  if (o->launch_s > 0)
    c->stack.launch_s = o->launch_s;
  /* the row's own software settings (torchtitan's columns) */
  c->stack.compile = c->stack.compile && !r->eager;
  c->stack.tp_overlap = c->stack.tp_overlap || r->async_tp;
  c->stack.fp8_rowwise = c->stack.fp8_rowwise || r->fp8_rowwise;
  c->stack.fp8_all_gather = c->stack.fp8_all_gather || r->fp8_all_gather;
  c->stack.moe_dispatch_sync = c->stack.moe_dispatch_sync && !r->moe.graphed;
  /* a replayed full-iteration graph issues no GroupedLinear call from the host */
  c->stack.moe_grouped_host_calls = c->stack.moe_grouped_host_calls && !r->moe.graphed;
  if (r->moe.experts > 0) /* the row's dispatcher (modern_moe.c) */
    c->stack.moe_dispatcher = (psim_moe_dispatcher)r->moe.dispatcher;
  c->stack.moe_a2a_overlap = c->stack.moe_a2a_overlap || r->moe.a2a_overlap;
  c->stack.moe_multihot_sync =
      c->stack.moe_multihot_sync && !r->moe.graphed && !r->moe.experimental;
  /* NeMo's MLPerf GPT-3 (mlcommons/training_results_v4.0 NVIDIA/benchmarks/gpt3/
   * implementations/nemo): distributed_fused_adam with grad_sync_dtype bf16
   * (conf/optim/distributed_fused_adam.yaml) and FP8_PARAMS=True (config_common.sh: the
   * distributed optimizer all-gathers the FP8 weights) */
  if (strcmp(r->source, "mlperf-gpt3") == 0)
    c->stack.grad_reduce_bf16 = c->stack.fp8_all_gather = true;
  return PSIM_OK;
}

#define PSIM_GRAND_TETON_PEAK (0.5 * (1.0 + 835.0 / 989.0))

static psim_status build_cluster(const modern_row *r, const char *preset, psim_cluster *c) {
  psim_preset_opts o;
  psim_preset_opts_init(&o);
  o.preset = preset;
  int32_t dpn = preset_dpn(preset);
  o.nodes = dpn > 0 ? (r->gpus + dpn - 1) / dpn : 1;
  cJSON *doc = NULL;
  PSIM_CHECK(psim_preset_cluster(&o, &doc));
  psim_status s = psim_cluster_from_json(preset, doc, c);
  cJSON_Delete(doc);
  /* torchtitan's H100s (Meta Grand Teton): 96 GB HBM2e at 2.4 TB/s per GPU, power
   * capped at 500 W, as the benchmark files state; "the actual peak TFLOPs number is
   * between SXM and NVL": the midpoint of the H100 SXM (989 TFLOP/s dense BF16,
   * 1979 FP8) and H100 NVL (835 / 1670: data sheet, 1671 / 3341 with sparsity)
   * tensor peaks, 0.922 of SXM. */
  for (int32_t i = 0; s == PSIM_OK && r->hbm2e_96g && i < c->n_types; i++) {
    c->types[i].mem_bytes = 96e9;
    c->types[i].mem_bw = 2.4e12;
    for (int d = 0; d < PSIM_DTYPE_COUNT; d++) /* a clock cap: every unit's rate */
      c->types[i].peak_flops[d] *= PSIM_GRAND_TETON_PEAK;
  }
  return s;
}

static psim_status megatron(const modern_row *r, const psim_model *m, psim_cluster *c,
                            psim_strategy *s) {
  psim_megatron_opts o;
  psim_megatron_opts_init(&o);
  o.tp = r->tp;
  o.pp = r->pp;
  o.dp = r->dp;
  o.micro_batch = r->micro_batch;
  o.virtual_stages = r->vp;
  o.schedule = r->vp > 1 ? PSIM_SCHED_INTERLEAVED : PSIM_SCHED_1F1B;
  o.recompute = r->recompute;
  o.sequence_parallel = r->sp;
  o.zero_stage = r->zero;
  o.overlap_grad_reduce = true; /* FSDP, FSDP2 and Megatron-Core all overlap it */
  o.ep = r->moe.ep;             /* 0 (dense rows): 1 */
  o.etp = r->moe.etp;
  /* DeepSeek-V3's recipe layouts (modern_moe.c) */
  modern_moe_layout(r, o.pipeline_layout, sizeof o.pipeline_layout);
  PSIM_CHECK(psim_strategy_megatron(m, c, &o, s));
  s->recompute_every = r->recompute_every;
  return PSIM_OK;
}

/* Context parallelism (pp 1): mesh dp x cp x tp, the query sequence on cp. */
static psim_status context_parallel(const modern_row *r, const psim_model *m, psim_cluster *c,
                                    psim_strategy *s) {
  char text[1024];
  int64_t n_micro = r->batch / ((int64_t)r->micro_batch * r->dp);
  snprintf(text, sizeof text,
           "{\"format\":\"plansim.strategy/1\",\"mesh\":{\"axes\":{\"dp\":%d,\"cp\":%d,\"tp\":%d}"
           "%s},\"layout\":{\"batch\":\"dp\",\"sequence\":\"cp\",\"heads\":\"tp\",\"ffn\":\"tp\","
           "\"vocab\":\"tp\"},\"pipeline\":{\"micro_batches\":%lld},\"zero\":%d,"
           "\"recompute\":\"%s\",\"sequence_parallel\":%s,\"overlap_grad_reduce\":true}",
           (int)r->dp, (int)r->cp, (int)r->tp, r->sp ? ",\"fallback\":{\"tp\":\"sequence\"}" : "",
           (long long)n_micro, (int)r->zero, psim_recompute_name(r->recompute),
           r->sp ? "true" : "false");
  cJSON *doc = NULL;
  PSIM_CHECK(psim_json_parse("cp-strategy", text, strlen(text), &doc));
  psim_status st = psim_strategy_from_json("cp-strategy", doc, m, c, s);
  cJSON_Delete(doc);
  return st;
}

/* What the row needs that plansim or this reader lacks; false when none. */
static bool precheck(modern_row *r, const char **preset) {
  if (r->unsupported[0])
    return true;
  *preset = modern_preset_of(r->gpu);
  if (!*preset || preset_dpn(*preset) == 0)
    snprintf(r->unsupported, sizeof r->unsupported, "no device type / cluster preset for %s%s%s",
             r->gpu, *preset ? " (preset " : "", *preset ? *preset : "");
  else if (r->cp > 1 && r->pp > 1)
    snprintf(r->unsupported, sizeof r->unsupported,
             "context parallelism with pipeline parallelism in this reader");
  else if (r->micro_batch < 1 || r->dp < 1 || r->batch % ((int64_t)r->micro_batch * r->dp))
    snprintf(r->unsupported, sizeof r->unsupported,
             "global batch %lld not a multiple of dp %d x micro-batch %d", (long long)r->batch,
             (int)r->dp, (int)r->micro_batch);
  else if (!(r->measured > 0))
    snprintf(r->unsupported, sizeof r->unsupported, "no measured throughput");
  return r->unsupported[0] != '\0';
}

void modern_simulate(modern_row *r, const modern_stack_opts *o) {
  const char *preset = NULL;
  if (precheck(r, &preset))
    return;
  psim_model m;
  psim_cluster c;
  psim_strategy s;
  psim_sim_result res;
  psim_model_init(&m);
  psim_cluster_init(&c);
  psim_strategy_init(&s);
  psim_sim_result_init(&res);
  psim_status st = build_model(r, &m);
  if (st == PSIM_OK)
    st = build_cluster(r, preset, &c);
  if (st == PSIM_OK)
    st = set_stack(r, o, &c);
  if (st == PSIM_OK && c.n_types > 0)
    snprintf(r->type, sizeof r->type, "%s", c.types[0].name);
  if (st == PSIM_OK)
    st = r->cp > 1 ? context_parallel(r, &m, &c, &s) : megatron(r, &m, &c, &s);
  /* Megatron-Bridge recipes and the MLPerf submissions run Megatron-Core's distributed
   * optimizer with --overlap-param-gather (with overlap_grad_reduce: the recipes'
   * comm_overlap settings) */
  if (st == PSIM_OK && r->zero >= 1 && strcmp(r->stack, "megatron-core") == 0)
    s.overlap_param_gather = true;
  psim_sim_options so; /* forced-balance MoE benchmarks: uniform routing (modern_moe.c) */
  psim_sim_options_init(&so);
  psim_routing uniform = {.kind = PSIM_ROUTING_UNIFORM};
  so.routing = r->moe.balanced ? &uniform : NULL;
  if (st == PSIM_OK)
    st = psim_simulate(&m, &c, &s, &so, &res);
  if (st == PSIM_OK && res.iteration_time_s > 0) {
    r->predicted = (double)r->batch * (double)r->seq / res.iteration_time_s / r->gpus;
    r->fits = res.fits;
    double t = res.iteration_time_s / 100;
    snprintf(r->breakdown, sizeof r->breakdown, "c%.0f t%.0f p%.0f d%.0f b%.0f h%.0f",
             res.compute_s / t, res.exposed_comm_s[0] / t, res.exposed_comm_s[1] / t,
             res.exposed_comm_s[2] / t, res.bubble_s / t, res.wait_s[PSIM_WAIT_HOST] / t);
  } else {
    snprintf(r->unsupported, sizeof r->unsupported, "simulation refused: %.120s",
             psim_error_message());
  }
  psim_sim_result_destroy(&res);
  psim_strategy_destroy(&s);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
