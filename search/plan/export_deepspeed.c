/* export_deepspeed.c - a DeepSpeed config JSON and, for pipelines, the PipelineModule
 * arguments (docs/export.md).
 *
 * Keys and rules from deepspeedai/DeepSpeed at commit edaa722126 (0.19.6, 2026-08-22):
 * deepspeed/runtime/config.py (train_batch_size = micro x accumulation x dp,
 * data_types.grad_accum_dtype, bf16/fp16), deepspeed/runtime/zero/config.py (stage,
 * overlap_comm, reduce_bucket_size and allgather_bucket_size in elements,
 * stage3_prefetch_bucket_size), deepspeed/runtime/pipe/module.py (PipelineModule's num_stages,
 * partition_method, activation_checkpoint_interval: the config's "pipeline" section holds no
 * stage count or partition, so none is written there). */
#include <cjson/cJSON.h>
#include <string.h>

#include "search/plan/export_facts.h"
#include "search/plan/export_impl.h"
#include "sim/core/json.h"
#include "sim/core/strbuf.h"

static psim_status deepspeed_sync_refusals(const psim_export_facts *f);

static psim_status deepspeed_refusals(const psim_export_facts *f) {
  const psim_strategy *s = f->s;
  const psim_megatron_opts *o = &f->lay;
  if (o->tp > 1)
    return psim_export_refuse("tensor parallelism (tp %d): a DeepSpeed config holds data and "
                              "pipeline parallelism; tensor parallelism comes from "
                              "Megatron-DeepSpeed's --tensor-model-parallel-size (export --format "
                              "megatron)",
                              o->tp);
  if (o->pp > 1 && s->zero_stage >= 2)
    return psim_export_refuse("ZeRO stage %d with pipeline parallelism: DeepSpeed's pipeline "
                              "engine supports ZeRO stages 0-1",
                              s->zero_stage);
  if (o->pp > 1 && s->schedule != PSIM_SCHED_1F1B)
    return psim_export_refuse("the %s schedule: DeepSpeed's pipeline engine runs 1F1B only",
                              psim_schedule_name(s->schedule));
  if (o->pp > 1 && f->layers == 0)
    return psim_export_refuse("a pipeline of a model without repeated layers: PipelineModule's "
                              "type: partition balances the layers of one class over the "
                              "stages, and the model has no repeated block to name");
  if (o->pp > 1 && (f->layers % o->pp != 0 || o->first_stage_layers || o->last_stage_layers))
    return psim_export_refuse("%d layers over %d stages as %d first, %d last: PipelineModule's "
                              "type: partition balances the layers, not plansim's uneven split",
                              f->layers, o->pp, f->stage_layers_first, f->stage_layers_last);
  if (o->pp > 1 && f->mtp_layers > 0)
    return psim_export_refuse("%d multi-token prediction modules on the last stage: "
                              "PipelineModule's type: partition places only layers of one class",
                              f->mtp_layers);
  if (s->recompute == PSIM_RECOMPUTE_FULL && s->recompute_every > 1)
    return psim_export_refuse("full recomputation of every %d-th layer only has no DeepSpeed "
                              "setting",
                              (int)s->recompute_every);
  if (s->recompute == PSIM_RECOMPUTE_OP)
    return psim_export_refuse("torchtitan's op-level selective recomputation has no DeepSpeed "
                              "setting");
  if (s->recompute == PSIM_RECOMPUTE_SELECTIVE)
    return psim_export_refuse("selective recomputation (attention core only) has no DeepSpeed "
                              "setting; full recomputation has");
  if (psim_strategy_partial_recompute(s))
    return psim_export_refuse("full recomputation by method %s of %d layers: the export "
                              "checkpoints every layer (use the megatron format)",
                              psim_recompute_method_name(s->recompute_method),
                              (int)s->recompute_layers);
  if (s->sequence_parallel && o->tp > 1)
    return psim_export_refuse("sequence parallelism needs tensor parallelism, which a DeepSpeed "
                              "config does not hold");
  return deepspeed_sync_refusals(f);
}

/* The refusals of the gradient sync, the optimizer step and the precision. */
static psim_status deepspeed_sync_refusals(const psim_export_facts *f) {
  const psim_strategy *s = f->s;
  if (s->allreduce != PSIM_AR_AUTO)
    return psim_export_refuse("all-reduce algorithm '%s': DeepSpeed leaves the algorithm to NCCL "
                              "(use 'auto')",
                              psim_allreduce_algo_name(s->allreduce));
  /* deepspeed/runtime/zero/stage_1_and_2.py (edaa722126) step(): the updated weights are
   * all-gathered inside the optimizer step (all_gather_dp_groups), before it returns;
   * zero/config.py overlap_comm overlaps the gradient reduction with the backward pass only */
  if (f->param_gather_overlap)
    return psim_export_refuse("ZeRO %d with the parameter all-gathers overlapped with the next "
                              "forward: DeepSpeed gathers the updated weights inside the "
                              "optimizer step (stage_1_and_2.py); overlap_comm overlaps the "
                              "gradient reduction only",
                              s->zero_stage);
  if (f->fp8)
    return psim_export_refuse("FP8 GEMMs: a DeepSpeed config has no FP8 training setting "
                              "(Transformer Engine's is in the model code)");
  return PSIM_OK;
}

static psim_status deepspeed_zero(cJSON *root, const psim_export_facts *f) {
  const psim_strategy *s = f->s;
  cJSON *z;
  PSIM_CHECK(psim_json_add_object(root, "zero_optimization", &z));
  PSIM_CHECK(psim_json_add_number(z, "stage", s->zero_stage));
  PSIM_CHECK(psim_json_add_bool(z, "overlap_comm", s->overlap_grad_reduce));
  PSIM_CHECK(psim_json_add_number(z, "reduce_bucket_size", s->bucket_bytes / f->grad_bytes));
  if (psim_zero_gathers_after_step(s->zero_stage))
    PSIM_CHECK(psim_json_add_number(z, "allgather_bucket_size", s->bucket_bytes / f->grad_bytes));
  if (s->zero_stage == 3)
    PSIM_CHECK(psim_json_add_number(z, "stage3_prefetch_bucket_size", s->zero_prefetch));
  return PSIM_OK;
}

/* bf16 / fp16, and the dtype gradients are accumulated and reduced in: what plansim
 * simulated (fp32 main gradients for bf16, memory.h's table). */
static psim_status deepspeed_precision(cJSON *root, const psim_export_facts *f) {
  cJSON *x;
  if (f->dtype == PSIM_DTYPE_BF16 || f->dtype == PSIM_DTYPE_FP16) {
    PSIM_CHECK(psim_json_add_object(root, f->dtype == PSIM_DTYPE_BF16 ? "bf16" : "fp16", &x));
    PSIM_CHECK(psim_json_add_bool(x, "enabled", true));
  }
  const char *acc = f->grad_bytes >= 4 ? "fp32" : f->dtype == PSIM_DTYPE_BF16 ? "bf16" : "fp16";
  PSIM_CHECK(psim_json_add_object(root, "data_types", &x));
  return psim_json_add_string(x, "grad_accum_dtype", acc);
}

static psim_status deepspeed_doc(const psim_export_facts *f, cJSON *root) {
  const psim_strategy *s = f->s;
  PSIM_CHECK(psim_json_add_number(root, "train_batch_size", (double)f->batch));
  PSIM_CHECK(psim_json_add_number(root, "train_micro_batch_size_per_gpu", f->lay.micro_batch));
  PSIM_CHECK(psim_json_add_number(root, "gradient_accumulation_steps", s->n_micro));
  PSIM_CHECK(deepspeed_zero(root, f));
  PSIM_CHECK(deepspeed_precision(root, f));
  if (f->lay.pp == 1 && s->recompute == PSIM_RECOMPUTE_FULL) {
    cJSON *x; /* the model calls deepspeed.checkpointing.checkpoint per layer */
    PSIM_CHECK(psim_json_add_object(root, "activation_checkpointing", &x));
    PSIM_CHECK(psim_json_add_bool(x, "partition_activations", false));
    PSIM_CHECK(psim_json_add_bool(x, "contiguous_memory_optimization", false));
    PSIM_CHECK(psim_json_add_bool(x, "cpu_checkpointing", false));
  }
  return PSIM_OK;
}

static psim_status deepspeed_check(const psim_plan_doc *d, const psim_export_facts *f) {
  (void)d;
  PSIM_CHECK(psim_export_need_layout(f, "DeepSpeed"));
  /* DeepSpeed 0.19.6: the expert-parallel degree is deepspeed.moe.layer.MoE(ep_size=...) in
   * the model code, and its sequence parallelism is Ulysses (all-to-all of heads), not
   * Megatron's context parallelism (ring attention over sequence chunks). */
  PSIM_CHECK(psim_export_no_ep_cp(f, "DeepSpeed's config",
                                  "DeepSpeed sets ep_size in the model code's "
                                  "deepspeed.moe.layer.MoE and splits sequences with Ulysses "
                                  "all-to-all, not ring attention"));
  return deepspeed_refusals(f);
}

psim_status psim_export_deepspeed(const psim_plan_doc *d, const psim_export_facts *f, char **text,
                                  size_t *len) {
  PSIM_CHECK(deepspeed_check(d, f));
  cJSON *root = cJSON_CreateObject();
  if (!root)
    return psim_error(PSIM_ENOMEM, "export: out of memory");
  psim_status st = deepspeed_doc(f, root);
  if (st == PSIM_OK)
    st = psim_export_json_text(root, text, len);
  cJSON_Delete(root);
  return st;
}

psim_status psim_export_deepspeed_pipeline(const psim_plan_doc *d, const psim_export_facts *f,
                                           char **text, size_t *len) {
  PSIM_CHECK(deepspeed_check(d, f));
  if (f->lay.pp == 1)
    return psim_export_refuse("the plan has no pipeline (one stage): use the DeepSpeed config "
                              "(--format deepspeed) without a PipelineModule");
  psim_sb b = {0};
  psim_sb_printf(&b,
                 "# DeepSpeed PipelineModule arguments (plansim export; DeepSpeed 0.19.6,\n"
                 "# deepspeed/runtime/pipe/module.py). Replace TransformerLayer with the class "
                 "name\n# of the model's transformer layer: the embedding goes to the first "
                 "stage,\n# the head to the last, and each stage gets %d transformer layers.\n"
                 "PIPELINE_MODULE_KWARGS = dict(\n    num_stages=%d,\n"
                 "    partition_method=\"type:TransformerLayer\",\n"
                 "    activation_checkpoint_interval=%d,\n)\n",
                 f->layers / f->lay.pp, f->lay.pp, f->s->recompute == PSIM_RECOMPUTE_FULL ? 1 : 0);
  return psim_sb_finish(&b, "export", text, len);
}
