/* export_bridge.c - a Megatron-Bridge recipe override file (YAML) (docs/export.md).
 *
 * Keys from NVIDIA-NeMo/Megatron-Bridge 0.7.0 at commit 067f987df0 (2026-08-22):
 * src/megatron/bridge/training/config.py (ConfigContainer: model, train, ddp, optimizer, dataset,
 * mixed_precision, env_vars; validate: model.seq_length == dataset.seq_length), training/setup.py
 * (_validate_and_set_vocab_size: model.vocab_size is kept, unpadded, unless
 * tokenizer.use_tokenizer_vocab_size), the llama3 recipes (recipes/llama/h100/llama3.py: context
 * parallelism 2, overlap_param_gather and distributed optimizer on, so all are set here),
 * src/megatron/bridge/models/gpt_provider.py (GPTModelProvider:
 * share_embeddings_and_output_weights, position_embedding_type learned_absolute|rope|yarn,
 * seq_length, vocab_size, make_vocab_size_divisible_by, normalization; the rest are Megatron-Core
 * TransformerConfig and ModelParallelConfig fields, Megatron-LM d98e8a64dd),
 * src/megatron/bridge/training/ mixed_precision.py (the registered presets bf16_mixed, fp16_mixed,
 * bf16_with_fp8_delayed_scaling_mixed) and training/utils/omegaconf_utils.py
 * (process_config_with_overrides merges the YAML over a recipe; callables such as
 * activation_func are not YAML values: the header names the recipe, vanilla_gpt_pretrain_config,
 * bare GPTModelProvider defaults with GeLU, and for SwiGLU models the override
 * model.activation_func=silu that recipes/gpt/h100/vanilla_gpt.py documents). The file is
 * Megatron-Core's run, so every Megatron-LM refusal applies (export_megatron.c). */
#include <stdio.h>
#include <string.h>

#include "search/plan/export_facts.h"
#include "search/plan/export_impl.h"
#include "sim/core/strbuf.h"

#define MB "Megatron-Bridge 0.7.0"
/* The MLA recipe: recipes/deepseek/deepseek_v3.py (h100/deepseek_v3.py builds the model with
 * AutoBridge from deepseek-ai/DeepSeek-V3: an MLAModelProvider, SwiGLU, RMSNorm). */
#define MLA_RECIPE "deepseek_v3_pretrain_config"

static psim_status bridge_refusals(const psim_plan_doc *d, const psim_export_facts *f) {
  if (!f->transformer)
    return psim_export_refuse(MB " trains transformers: model '%s' has no heads-role or "
                                 "hidden-role dim",
                              d->model.name);
  if (f->encoder || f->embedding_norm)
    return psim_export_refuse(MB " has no BERT model provider (models/: GPT, T5, hybrid): model "
                                 "'%s' is an encoder",
                              d->model.name);
  if (!f->learned_positions && !f->rmsnorm)
    return psim_export_refuse("model '%s' has no position encoding: GPTModelProvider's "
                              "position_embedding_type is learned_absolute, rope or yarn",
                              d->model.name);
  PSIM_CHECK(psim_export_need_layout(f, MB));
  PSIM_CHECK(psim_export_megatron_plan_refusals(f));
  PSIM_CHECK(psim_export_megatron_model_refusals(f));
  if (f->fp8 && f->s->zero_stage >= 1)
    return psim_export_refuse("FP8 with a sharded optimizer: " MB "'s FP8 preset "
                              "(bf16_with_fp8_delayed_scaling_mixed) gathers FP8 parameters "
                              "(fp8_param_gather), plansim gathers bf16 ones");
  if (f->dtype == PSIM_DTYPE_FP64)
    return psim_export_refuse("fp64: " MB " trains in fp32, bf16, fp16 or FP8");
  return PSIM_OK;
}

static void parallel_keys(psim_sb *b, const psim_export_facts *f) {
  const psim_megatron_opts *o = &f->lay;
  psim_sb_printf(b, "  tensor_model_parallel_size: %d\n  pipeline_model_parallel_size: %d\n", o->tp,
                 o->pp);
  if (o->virtual_stages > 1)
    psim_sb_printf(b, "  virtual_pipeline_model_parallel_size: %d\n", o->virtual_stages);
  else
    psim_sb_printf(b, "  virtual_pipeline_model_parallel_size: null\n");
  if (o->first_stage_layers > 0) /* the plan's uneven stages (psim_export_uneven_stages) */
    psim_sb_printf(b, "  num_layers_in_first_pipeline_stage: %d\n", o->first_stage_layers);
  else
    psim_sb_printf(b, "  num_layers_in_first_pipeline_stage: null\n");
  if (o->last_stage_layers > 0)
    psim_sb_printf(b, "  num_layers_in_last_pipeline_stage: %d\n", o->last_stage_layers);
  else
    psim_sb_printf(b, "  num_layers_in_last_pipeline_stage: null\n");
  psim_sb_printf(b, "  sequence_parallel: %s\n  context_parallel_size: %d\n",
                 o->tp > 1 && f->s->sequence_parallel ? "true" : "false", o->cp);
  const char *gran = f->s->recompute == PSIM_RECOMPUTE_FULL        ? "full"
                     : f->s->recompute == PSIM_RECOMPUTE_SELECTIVE ? "selective"
                                                                   : "null";
  bool full = f->s->recompute == PSIM_RECOMPUTE_FULL;
  char n[16] = "null";
  if (full)
    snprintf(n, sizeof n, "%d", /* uniform counts at least 1 layer (strategy.h) */
             f->s->recompute_method == PSIM_RCM_UNIFORM && f->s->recompute_layers < 1
                 ? 1
                 : (int)f->s->recompute_layers);
  psim_sb_printf(b,
                 "  recompute_granularity: %s\n  recompute_method: %s\n"
                 "  recompute_num_layers: %s\n",
                 gran, full ? psim_recompute_method_name(f->s->recompute_method) : "null", n);
  if (f->s->zero_stage >= 2) /* Megatron-FSDP: export_megatron.c fsdp_args */
    psim_sb_printf(b, "  gradient_accumulation_fusion: false\n");
}

/* The MoE layer pattern (transformer_config.py moe_layer_freq: 1, every layer, or a list of
 * 0 dense / 1 MoE per layer), the shared expert and the router's score function. */
static void moe_keys(psim_sb *b, const psim_export_facts *f) {
  psim_sb_printf(b, "  moe_layer_freq: ");
  if (f->dense_first == 0)
    psim_sb_printf(b, "1\n");
  for (int32_t l = 0; f->dense_first > 0 && l < f->layers; l++)
    psim_sb_printf(b, "%s%d%s", l ? ", " : "[", l >= f->dense_first,
                   l + 1 < f->layers ? "" : "]\n");
  psim_sb_printf(b,
                 f->shared_ffn > 0 ? "  moe_shared_expert_intermediate_size: %lld\n"
                                   : "  moe_shared_expert_intermediate_size: null\n",
                 (long long)f->shared_ffn);
  psim_sb_printf(b, "  moe_router_score_function: %s\n", f->sigmoid_router ? "sigmoid" : "softmax");
}

static void model_keys(psim_sb *b, const psim_export_facts *f) {
  psim_sb_printf(b,
                 "  num_layers: %d\n  hidden_size: %lld\n  num_attention_heads: %lld\n"
                 "  num_query_groups: %lld\n  ffn_hidden_size: %lld\n  seq_length: %lld\n"
                 "  vocab_size: %lld\n  make_vocab_size_divisible_by: 1\n",
                 f->layers, (long long)f->hidden, (long long)f->heads, (long long)f->kv_heads,
                 (long long)f->ffn, (long long)f->seq, (long long)f->vocab);
  /* MLA: kv_channels as Megatron-LM's arguments.py sets it, hidden / heads (MLA reads its own
   * head dims) */
  psim_sb_printf(b, "  kv_channels: %lld\n  qk_layernorm: %s\n",
                 (long long)(f->head_dim > 0 && !f->mla ? f->head_dim : f->hidden / f->heads),
                 f->qk_norm ? "true" : "false");
  psim_sb_printf(b, "  multi_latent_attention: %s\n  mtp_num_layers: ", f->mla ? "true" : "false");
  psim_sb_printf(b, f->mtp_layers > 0 ? "%d\n" : "null\n", f->mtp_layers);
  if (f->mla) /* MLATransformerConfig fields (the recipe's MLAModelProvider has them) */
    psim_sb_printf(b,
                   "  q_lora_rank: %s%.0lld\n  kv_lora_rank: %lld\n  qk_head_dim: %lld\n"
                   "  qk_pos_emb_head_dim: %lld\n  v_head_dim: %lld\n  rope_type: rope\n"
                   "  pipeline_model_parallel_layout: null\n",
                   f->q_lora > 0 ? "" : "null", (long long)f->q_lora, (long long)f->kv_lora,
                   (long long)f->qk_head, (long long)f->qk_rope, (long long)f->v_head);
  psim_sb_printf(b,
                 "  position_embedding_type: %s\n  normalization: %s\n  gated_linear_unit: %s\n"
                 "  add_bias_linear: %s\n  share_embeddings_and_output_weights: %s\n"
                 "  hidden_dropout: %g\n  attention_dropout: %g\n",
                 f->learned_positions ? "learned_absolute" : "rope",
                 f->rmsnorm ? "RMSNorm" : "LayerNorm", f->swiglu ? "true" : "false",
                 f->bias_linear ? "true" : "false", f->tied_embeddings ? "true" : "false",
                 f->hidden_dropout, f->attention_dropout);
  char cf[32] = "null"; /* dropless: no capacity factor (Megatron-Core: None) */
  if (!f->dropless)
    snprintf(cf, sizeof cf, "%g", f->capacity_factor);
  if (f->experts > 0) {
    psim_sb_printf(b,
                   "  num_moe_experts: %d\n  moe_router_topk: %d\n  moe_ffn_hidden_size: %lld\n"
                   "  expert_model_parallel_size: %d\n  expert_tensor_parallel_size: %d\n"
                   "  moe_grouped_gemm: true\n  moe_token_dispatcher_type: alltoall\n"
                   "  moe_expert_capacity_factor: %s\n  moe_pad_expert_input_to_capacity: %s\n",
                   f->experts, f->top_k, (long long)f->moe_ffn, f->lay.ep, psim_export_etp(f), cf,
                   f->dropless ? "false" : "true");
    moe_keys(b, f);
  } else
    psim_sb_printf(b, "  num_moe_experts: null\n");
}

static const char *precision_preset(const psim_export_facts *f) {
  if (f->fp8) /* BF16 with FP8 GEMMs (the model's dtype fp8 or its linears') */
    return "bf16_with_fp8_delayed_scaling_mixed";
  switch (f->dtype) {
  case PSIM_DTYPE_BF16: return "bf16_mixed";
  case PSIM_DTYPE_FP16: return "fp16_mixed";
  case PSIM_DTYPE_FP8: return "bf16_with_fp8_delayed_scaling_mixed";
  default: return "null";
  }
}

/* ZeRO 2 and 3 as Megatron-FSDP (the ddp section's keys; the dist and checkpoint sections
 * follow it). training/config.py at 067f987df0, _validate_and_apply_megatron_fsdp_v1_configs:
 * dist.use_megatron_fsdp (it sets ddp.use_megatron_fsdp too), the distributed optimizer on in
 * ddp and optimizer (activated when off), checkpoint.ckpt_format fsdp_dtensor (asserted when
 * saving or loading), CUDA_DEVICE_MAX_CONNECTIONS not 1 (asserted); the sharding strategy as
 * Megatron-LM's (optim_grads: ZeRO 2, optim_grads_params: ZeRO 3). */
static void fsdp_keys(psim_sb *b, int32_t zero_stage) {
  psim_sb_printf(b,
                 "  use_megatron_fsdp: true\n  data_parallel_sharding_strategy: %s\n"
                 "\ndist:\n  use_megatron_fsdp: true\n\ncheckpoint:\n  ckpt_format: fsdp_dtensor\n",
                 zero_stage >= 3 ? "optim_grads_params" : "optim_grads");
}

static void training_keys(psim_sb *b, const psim_export_facts *f) {
  const psim_strategy *s = f->s;
  bool half = f->dtype == PSIM_DTYPE_BF16 || f->dtype == PSIM_DTYPE_FP8;
  psim_sb_printf(b, "\ntrain:\n  micro_batch_size: %d\n  global_batch_size: %lld\n",
                 f->lay.micro_batch, (long long)f->batch);
  psim_sb_printf(b, "\ndataset:\n  seq_length: %lld\n", (long long)f->seq);
  /* setup.py _validate_and_set_vocab_size: model.vocab_size counts unless this is true */
  psim_sb_printf(b, "\ntokenizer:\n  use_tokenizer_vocab_size: false\n");
  /* overlap_param_gather as the plan's (the llama3 recipes turn it on, the vanilla recipe and
   * Megatron-LM's default leave it off); gradients are reduced in fp32 except for fp16
   * (memory.h's gradient bytes) */
  psim_sb_printf(b,
                 "\nddp:\n  use_distributed_optimizer: %s\n  overlap_grad_reduce: %s\n"
                 "  overlap_param_gather: %s\n  grad_reduce_in_fp32: %s\n",
                 s->zero_stage >= 1 ? "true" : "false", s->overlap_grad_reduce ? "true" : "false",
                 f->param_gather_overlap ? "true" : "false",
                 f->dtype == PSIM_DTYPE_FP16 ? "false" : "true");
  /* Megatron-Core's DistributedDataParallelConfig.align_param_gather defaults to false, where
   * Megatron-LM's flag defaults to true under interleaving (export_megatron.c): set as
   * Megatron-LM runs it, as Bridge's comm_overlap.py does for pp > 1 with virtual stages */
  if (f->param_gather_overlap)
    psim_sb_printf(b, "  align_param_gather: %s\n", f->lay.virtual_stages > 1 ? "true" : "false");
  if (s->overlap_grad_reduce) /* gradient elements: fp32 main grads for bf16 and fp8 */
    psim_sb_printf(b, "  bucket_size: %.0f\n", s->bucket_bytes / f->grad_bytes);
  else
    psim_sb_printf(b, "  bucket_size: null\n");
  if (s->zero_stage >= 2)
    fsdp_keys(b, s->zero_stage);
  psim_sb_printf(b, "\noptimizer:\n  use_distributed_optimizer: %s\n  bf16: %s\n  fp16: %s\n",
                 s->zero_stage >= 1 ? "true" : "false", half ? "true" : "false",
                 f->dtype == PSIM_DTYPE_FP16 ? "true" : "false");
  /* training/config.py keeps ddp's and optimizer's overlap_param_gather in sync (turning
   * both on when one is, with a warning): written in both */
  if (f->param_gather_overlap)
    psim_sb_printf(b, "  overlap_param_gather: true\n");
  psim_sb_printf(b, "\nmixed_precision: %s\n", precision_preset(f));
  if (s->allreduce == PSIM_AR_RING || s->allreduce == PSIM_AR_TREE)
    psim_sb_printf(b, "\nenv_vars:\n  NCCL_ALGO: %s\n",
                   s->allreduce == PSIM_AR_RING ? "Ring" : "Tree");
}

static void bridge_header(psim_sb *b, const psim_plan_doc *d, const psim_export_facts *f) {
  const psim_megatron_opts *o = &f->lay;
  psim_sb_printf(b, "# Megatron-Bridge recipe overrides for model ");
  /* names hold no control characters (psim_export_check_names): safe in a comment */
  psim_sb_printf(b, "'%s' on cluster '%s'", d->model.name, d->cluster.name);
  psim_sb_printf(
      b,
      "\n# (plansim export; ConfigContainer keys of " MB ", commit 067f987df0).\n"
      "# Merge over the recipe %s with\n"
      "# process_config_with_overrides(cfg, config_filepath=THIS_FILE%s)\n"
      "# (megatron.bridge.training.utils.omegaconf_utils), then pretrain(cfg, ...); or "
      "give each\n# key as a KEY=VALUE override of scripts/training/run_recipe.py "
      "--recipe %s.\n"
      "# World size %d = tensor %d x context %d x pipeline %d x data %d. The tokenizer "
      "must have "
      "at most %lld tokens.\n",
      f->mla ? MLA_RECIPE
          " (recipes/deepseek/deepseek_v3.py: an MLAModelProvider\n# from "
          "DeepSeek-V3's config; its routing, expert bias and group-limited top-k, stays)"
             : "vanilla_gpt_pretrain_config (recipes/gpt/h100/vanilla_gpt.py:\n# Megatron-LM "
               "pretrain_gpt.py defaults, GeLU)",
      f->swiglu && !f->mla ? ",\n#     cli_overrides=[\"model.activation_func=silu\"])  (SwiGLU: a "
                             "callable, not a YAML value"
                           : "",
      f->mla ? MLA_RECIPE : "vanilla_gpt_pretrain_config", psim_export_world(f), o->tp, o->cp,
      o->pp, o->dp, (long long)f->vocab);
  if (!f->s->overlap_grad_reduce)
    psim_sb_printf(b, "# Gradients are reduced after the backward pass in one bucket; plansim "
                      "simulated buckets\n# of the plan's size.\n");
  if (f->s->overlap_param_gather && !f->param_gather_overlap)
    psim_sb_printf(b,
                   "# The plan's overlap_param_gather is not set: at ZeRO %d plansim "
                   "simulates no all-gather\n# after the step.\n",
                   f->s->zero_stage);
}

psim_status psim_export_bridge(const psim_plan_doc *d, const psim_export_facts *f, char **text,
                               size_t *len) {
  PSIM_CHECK(bridge_refusals(d, f));
  psim_sb b = {0};
  bridge_header(&b, d, f);
  psim_sb_printf(&b, "model:\n");
  parallel_keys(&b, f);
  model_keys(&b, f);
  training_keys(&b, f);
  return psim_sb_finish(&b, "export", text, len);
}
