/* export_megatron.c - Megatron-LM arguments (docs/export.md).
 *
 * Flag names and the rules they obey come from NVIDIA/Megatron-LM at commit d98e8a64dd
 * (Megatron-Core 0.20.0, 2026-08-22): megatron/training/arguments.py (validate_args and the
 * flags it declares), megatron/core/transformer/transformer_config.py and
 * megatron/core/model_parallel_config.py (dataclass fields that ArgumentGroupFactory,
 * megatron/training/argument_utils.py, turns into --field-name flags), and
 * megatron/core/transformer/moe/moe_layer.py. Each flag is written explicitly, even where it
 * is the default, so that the script states the model it runs. */
#include <stdio.h>
#include <string.h>

#include "search/plan/export_facts.h"
#include "search/plan/export_impl.h"
#include "sim/core/strbuf.h"

/* The plan-level refusals (export_impl.h). */
psim_status psim_export_megatron_plan_refusals(const psim_export_facts *f) {
  const psim_strategy *s = f->s;
  if (s->zero_stage > 3)
    return psim_export_refuse("ZeRO stage %d: Megatron-LM shards at most the optimizer state, "
                              "gradients and weights (Megatron-FSDP optim_grads_params)",
                              s->zero_stage);
  if (s->recompute == PSIM_RECOMPUTE_FULL && s->recompute_every > 1)
    return psim_export_refuse(
        "full recomputation of every %d-th layer (torchtitan's layer-level "
        "selective AC): Megatron-LM's methods recompute uniform groups or the "
        "first layers of a stage",
        (int)s->recompute_every);
  if (s->recompute == PSIM_RECOMPUTE_OP)
    return psim_export_refuse("torchtitan's op-level selective recomputation (every second "
                              "matmul): Megatron-LM recomputes full layers or the attention core");
  if (f->lay.pp > 1 && s->schedule != PSIM_SCHED_1F1B && s->schedule != PSIM_SCHED_INTERLEAVED)
    return psim_export_refuse("the %s schedule: Megatron-LM runs 1F1B (or interleaved 1F1B) "
                              "pipelines only",
                              psim_schedule_name(s->schedule));
  if (s->allreduce == PSIM_AR_HALVING_DOUBLING || s->allreduce == PSIM_AR_HIERARCHICAL)
    return psim_export_refuse("all-reduce algorithm '%s' has no NCCL_ALGO equivalent (NCCL offers "
                              "Ring and Tree; 'auto' lets NCCL choose)",
                              psim_allreduce_algo_name(s->allreduce));
  /* arguments.py validate_args (d98e8a64dd, lines 1024-1029): --overlap-param-gather needs
   * --use-distributed-optimizer or --use-megatron-fsdp (ZeRO 1-2 here: where plansim simulates
   * it) and --overlap-grad-reduce */
  if (f->param_gather_overlap && !s->overlap_grad_reduce)
    return psim_export_refuse("the parameter all-gathers overlapped without the gradient reduce "
                              "overlapped: Megatron-LM asserts 'Must use --overlap-param-gather "
                              "with --overlap-grad-reduce' (arguments.py)");
  if (f->lay.virtual_stages == 1 && f->stages_uneven)
    return psim_export_refuse("the middle pipeline stages hold different numbers of layers; "
                              "Megatron-LM splits the layers between the first and last stage "
                              "evenly (transformer_config.py, uneven PP)");
  return PSIM_OK;
}

/* The model-level refusals: what no Megatron-LM flag builds (export_impl.h). */
psim_status psim_export_megatron_model_refusals(const psim_export_facts *f) {
  if (f->dropout_mixed)
    return psim_export_refuse("the model's dropout ops use different probabilities; Megatron-LM "
                              "has one --hidden-dropout and one --attention-dropout");
  if (f->embedding_norm && !f->encoder)
    return psim_export_refuse("a norm between the embedding and the first layer: Megatron-LM's "
                              "GPTModel has none");
  if (f->experts > 0 && f->lay.tp > 1 && !f->s->sequence_parallel)
    return psim_export_refuse("MoE with tensor parallelism %d and no sequence parallelism: "
                              "Megatron-LM's MoELayer refuses to train so (moe_layer.py)",
                              f->lay.tp);
  if (f->experts > 0 && f->bias_linear && psim_export_etp(f) > 1)
    return psim_export_refuse("MoE experts with biases split %d ways: Megatron-LM supports expert "
                              "biases with expert tensor parallelism 1 only "
                              "(transformer_config.py)",
                              psim_export_etp(f));
  if (f->experts > 0 && f->moe_irregular)
    return psim_export_refuse("MoE with dense layers after MoE layers: the export writes "
                              "--moe-layer-freq for leading dense layers only (DeepSeek-V3's "
                              "first 3)");
  if (f->mtp_split)
    return psim_export_refuse("multi-token prediction modules on a pipeline stage before the "
                              "last: Megatron-LM builds them on the last stage "
                              "(transformer_config.py mtp_num_layers)");
  if (f->experts > 0 && (f->top_k < 1 || (!f->dropless && f->capacity_factor <= 0)))
    return psim_export_refuse("the MoE dispatch has no top-k or capacity Megatron-LM can take");
  return PSIM_OK;
}

static void pipeline_args(psim_sb *b, const psim_export_facts *f) {
  const psim_megatron_opts *o = &f->lay;
  psim_sb_printf(b, "  --tensor-model-parallel-size %d\n", o->tp);
  psim_sb_printf(b, "  --pipeline-model-parallel-size %d\n", o->pp);
  if (o->virtual_stages > 1)
    psim_sb_printf(b, "  --num-layers-per-virtual-pipeline-stage %d\n",
                   f->layers / (o->pp * o->virtual_stages));
  /* validate_args: layers % pp == 0 unless the first/last stage counts are given; the plan's
   * uneven stages (psim_export_uneven_stages), whatever the remainder */
  if (o->first_stage_layers > 0)
    psim_sb_printf(b, "  --decoder-first-pipeline-num-layers %d\n", o->first_stage_layers);
  if (o->last_stage_layers > 0)
    psim_sb_printf(b, "  --decoder-last-pipeline-num-layers %d\n", o->last_stage_layers);
  if (o->tp > 1 && f->s->sequence_parallel) /* validate_args turns it off at tp 1 */
    psim_sb_printf(b, "  --sequence-parallel\n");
  /* arguments.py: seq_length % (2 cp) == 0 when cp > 1 (the template's rule too) */
  psim_sb_printf(b, "  --context-parallel-size %d\n", o->cp);
  if (f->experts > 0) /* arguments.py: expert_tensor_parallel_size None means tp */
    psim_sb_printf(b, "  --expert-model-parallel-size %d\n  --expert-tensor-parallel-size %d\n",
                   o->ep, psim_export_etp(f));
}

/* ZeRO 2 and 3 as Megatron-FSDP (arguments.py at d98e8a64dd: --use-megatron-fsdp, a field of
 * DistributedInitConfig, megatron/training/config/common_config.py, made a flag by
 * ArgumentGroupFactory; --data-parallel-sharding-strategy {no_shard, optim, optim_grads,
 * optim_grads_params}, _add_distributed_args). validate_args (lines ~1118-1188): Megatron-FSDP
 * v1 (the default --megatron-fsdp-version) runs with the distributed optimizer (turned on with
 * a warning when missing: written here), asserts --ckpt-format fsdp_dtensor (and
 * fsdp_dtensor asserts --use-megatron-fsdp) and CUDA_DEVICE_MAX_CONNECTIONS != 1 (the
 * header unsets it), and warns on gradient accumulation fusion with optim_grads and
 * optim_grads_params, which docs/discussions/megatron-fsdp-user-guide lists as required off
 * (--no-gradient-accumulation-fusion). optim_grads shards the optimizer state and the
 * gradients (ZeRO 2), optim_grads_params the weights too (ZeRO 3). */
static void fsdp_args(psim_sb *b, int32_t zero_stage) {
  psim_sb_printf(b,
                 "  --use-megatron-fsdp\n  --data-parallel-sharding-strategy %s\n"
                 "  --use-distributed-optimizer\n  --no-gradient-accumulation-fusion\n"
                 "  --ckpt-format fsdp_dtensor\n",
                 zero_stage >= 3 ? "optim_grads_params" : "optim_grads");
}

static void training_args(psim_sb *b, const psim_export_facts *f) {
  const psim_strategy *s = f->s;
  psim_sb_printf(b, "  --micro-batch-size %d\n", f->lay.micro_batch);
  psim_sb_printf(b, "  --global-batch-size %lld\n", (long long)f->batch);
  if (s->recompute == PSIM_RECOMPUTE_FULL) /* transformer_config.py: a method and a count */
    psim_sb_printf(b,
                   "  --recompute-granularity full\n  --recompute-method %s\n"
                   "  --recompute-num-layers %d\n",
                   psim_recompute_method_name(s->recompute_method),
                   s->recompute_method == PSIM_RCM_UNIFORM && s->recompute_layers < 1
                       ? 1
                       : (int)s->recompute_layers);
  else if (s->recompute == PSIM_RECOMPUTE_SELECTIVE) /* no method: validate_args */
    psim_sb_printf(b, "  --recompute-granularity selective\n");
  if (s->zero_stage == 1)
    psim_sb_printf(b, "  --use-distributed-optimizer\n");
  else if (s->zero_stage >= 2)
    fsdp_args(b, s->zero_stage);
  if (s->overlap_grad_reduce) /* buckets count gradient elements (fp32 main grads for bf16) */
    psim_sb_printf(b, "  --overlap-grad-reduce\n  --ddp-bucket-size %.0f\n",
                   s->bucket_bytes / f->grad_bytes);
  /* the gathers before each bucket's first forward use; under interleaving Megatron-LM's
   * default --align-param-gather (no flag: --no-align-param-gather turns it off; validate_args
   * turns it off without interleaving) dispatches each model chunk's gathers ahead of its
   * first forward, across the pipeline ranks */
  if (f->param_gather_overlap)
    psim_sb_printf(b, "  --overlap-param-gather\n");
  if (f->dtype == PSIM_DTYPE_BF16 || f->dtype == PSIM_DTYPE_FP8)
    psim_sb_printf(b, "  --bf16\n");
  else if (f->dtype == PSIM_DTYPE_FP16)
    psim_sb_printf(b, "  --fp16\n");
  if (f->fp8) /* TE's FP8 GEMMs over the BF16 model (transformer_config.py fp8) */
    psim_sb_printf(b, "  --fp8-format hybrid\n");
}

/* Multi-head latent attention (MLATransformerConfig of transformer_config.py; arguments.py
 * _add_mla_args: --q-lora-rank defaults to None, no query compression). validate_args: MLA
 * excludes --group-query-attention (MLA has a key/value head per query head). */
static void mla_args(psim_sb *b, const psim_export_facts *f) {
  psim_sb_printf(b, "  --multi-latent-attention\n");
  if (f->q_lora > 0)
    psim_sb_printf(b, "  --q-lora-rank %lld\n", (long long)f->q_lora);
  psim_sb_printf(b,
                 "  --kv-lora-rank %lld\n  --qk-head-dim %lld\n  --qk-pos-emb-head-dim %lld\n"
                 "  --v-head-dim %lld\n",
                 (long long)f->kv_lora, (long long)f->qk_head, (long long)f->qk_rope,
                 (long long)f->v_head);
}

/* MoE flags (transformer_config.py fields as flags; arguments.py _add_moe_args). The dense
 * layers are leading (refused otherwise): --moe-layer-freq as arguments.py's Python list
 * expression, one entry per layer (gpt_layer_specs.py asserts the length), quoted for bash. */
static void moe_args(psim_sb *b, const psim_export_facts *f) {
  psim_sb_printf(b, "  --num-experts %d\n  --moe-router-topk %d\n  --moe-ffn-hidden-size %lld\n",
                 f->experts, f->top_k, (long long)f->moe_ffn);
  if (f->dense_first > 0)
    psim_sb_printf(b, "  --moe-layer-freq '([0]*%d+[1]*%d)'\n", f->dense_first,
                   f->layers - f->dense_first);
  if (f->shared_ffn > 0) /* num_shared_experts x each one's width (transformer_config.py) */
    psim_sb_printf(b, "  --moe-shared-expert-intermediate-size %lld\n", (long long)f->shared_ffn);
  psim_sb_printf(b, "  --moe-router-score-function %s\n",
                 f->sigmoid_router ? "sigmoid" : "softmax");
  psim_sb_printf(b, "  --moe-grouped-gemm\n  --moe-token-dispatcher-type alltoall\n");
}

static void model_args(psim_sb *b, const psim_export_facts *f) {
  psim_sb_printf(b, "  --num-layers %d\n  --hidden-size %lld\n  --num-attention-heads %lld\n",
                 f->layers, (long long)f->hidden, (long long)f->heads);
  if (f->kv_heads != f->heads)
    psim_sb_printf(b, "  --group-query-attention\n  --num-query-groups %lld\n",
                   (long long)f->kv_heads);
  if (f->mla)
    mla_args(b, f);
  else if (f->head_dim > 0 && f->head_dim * f->heads != f->hidden) /* default hidden / heads */
    psim_sb_printf(b, "  --kv-channels %lld\n", (long long)f->head_dim);
  if (f->qk_norm) /* transformer_config.py qk_layernorm: a norm of q and k per head */
    psim_sb_printf(b, "  --qk-layernorm\n");
  psim_sb_printf(b, "  --ffn-hidden-size %lld\n", (long long)f->ffn);
  psim_sb_printf(b, "  --seq-length %lld\n  --max-position-embeddings %lld\n", (long long)f->seq,
                 (long long)f->seq);
  psim_sb_printf(b, "  --make-vocab-size-divisible-by 1\n");
  /* The IR has no rotary op: a model without a position table is rotary when it is
   * LLaMA-shaped (RMSNorm), else it has no position encoding. */
  psim_sb_printf(b, "  --position-embedding-type %s\n",
                 f->learned_positions ? "learned_absolute"
                 : f->rmsnorm         ? "rope"
                                      : "none");
  if (f->mla) /* argument_utils.py: MLA takes YaRN unless --rope-type; the IR has no YaRN */
    psim_sb_printf(b, "  --rope-type rope\n");
  psim_sb_printf(b, "  --normalization %s\n", f->rmsnorm ? "RMSNorm" : "LayerNorm");
  if (f->swiglu)
    psim_sb_printf(b, "  --swiglu\n");
  if (!f->bias_linear)
    psim_sb_printf(b, "  --disable-bias-linear\n");
  if (!f->tied_embeddings)
    psim_sb_printf(b, "  --untie-embeddings-and-output-weights\n");
  psim_sb_printf(b, "  --hidden-dropout %g\n  --attention-dropout %g\n", f->hidden_dropout,
                 f->attention_dropout);
  if (f->encoder)
    psim_sb_printf(b, "  --bert-no-binary-head\n");
  if (f->experts > 0)
    moe_args(b, f);
  if (f->mtp_layers > 0) /* transformer_config.py mtp_num_layers: modules after the last layer */
    psim_sb_printf(b, "  --mtp-num-layers %d\n", f->mtp_layers);
  /* Dropless: no capacity factor (transformer_config.py: None means no token is dropped;
   * --moe-pad-expert-input-to-capacity needs one). A fixed capacity: the factor, padded. */
  if (f->experts > 0 && !f->dropless)
    psim_sb_printf(b, "  --moe-expert-capacity-factor %g\n  --moe-pad-expert-input-to-capacity\n",
                   f->capacity_factor);
}

static void megatron_header(psim_sb *b, const psim_plan_doc *d, const psim_export_facts *f) {
  const psim_megatron_opts *o = &f->lay;
  psim_sb_printf(b, "# Megatron-LM arguments for model ");
  psim_export_shell_quote(b, d->model.name); /* names are shell words even in a comment */
  psim_sb_printf(b, " on cluster ");
  psim_export_shell_quote(b, d->cluster.name);
  psim_sb_printf(b,
                 "\n# (plansim export; flags of Megatron-LM d98e8a64dd, Megatron-Core 0.20.0).\n"
                 "# World size %d = tensor %d x context %d x pipeline %d x data %d;\n"
                 "# ranks in Megatron-LM's default order (tensor fastest, then context, then "
                 "data, then\n# pipeline). The tokenizer must have %lld tokens.\n",
                 psim_export_world(f), o->tp, o->cp, o->pp, o->dp, (long long)f->vocab);
  if (!f->s->overlap_grad_reduce)
    psim_sb_printf(b, "# Gradients are reduced after the backward pass in one bucket (Megatron "
                      "ignores the bucket\n# size without --overlap-grad-reduce); plansim "
                      "simulated buckets of the plan's size.\n");
  if (f->s->overlap_param_gather && !f->param_gather_overlap)
    psim_sb_printf(b,
                   "# The plan's overlap_param_gather is not written: at ZeRO %d plansim "
                   "simulates no\n# all-gather after the step (Megatron-LM takes "
                   "--overlap-param-gather only with\n# --use-distributed-optimizer or "
                   "Megatron-FSDP, which overlaps its gathers at ZeRO 3).\n",
                   f->s->zero_stage);
  if (f->embedding_norm)
    psim_sb_printf(b, "# Not built by Megatron-LM: the model's embedding LayerNorm (BertModel "
                      "has none).\n");
  if (f->s->zero_stage >= 2) /* validate_args asserts it is not 1 under Megatron-FSDP */
    psim_sb_printf(b,
                   "# Megatron-FSDP (ZeRO %d) needs CUDA_DEVICE_MAX_CONNECTIONS unset or > 1.\n"
                   "unset CUDA_DEVICE_MAX_CONNECTIONS\n",
                   f->s->zero_stage);
  if (f->s->allreduce == PSIM_AR_RING || f->s->allreduce == PSIM_AR_TREE)
    psim_sb_printf(b, "export NCCL_ALGO=%s\n", f->s->allreduce == PSIM_AR_RING ? "Ring" : "Tree");
}

psim_status psim_export_megatron(const psim_plan_doc *d, const psim_export_facts *f, char **text,
                                 size_t *len) {
  if (!f->transformer)
    return psim_export_refuse("Megatron-LM trains transformers: model '%s' has no heads-role or "
                              "hidden-role dim",
                              d->model.name);
  PSIM_CHECK(psim_export_need_layout(f, "Megatron-LM"));
  PSIM_CHECK(psim_export_megatron_plan_refusals(f));
  PSIM_CHECK(psim_export_megatron_model_refusals(f));
  psim_sb b = {0};
  megatron_header(&b, d, f);
  psim_sb_printf(&b, "MEGATRON_ARGS=(\n");
  pipeline_args(&b, f);
  training_args(&b, f);
  model_args(&b, f);
  int32_t world = psim_export_world(f), per = d->cluster.devices_per_node;
  psim_sb_printf(&b,
                 ")\n# torchrun --nproc-per-node %d --nnodes %d %s \"${MEGATRON_ARGS[@]}\" ...\n",
                 per > 0 && per < world ? per : world, per > 0 ? (world + per - 1) / per : 1,
                 f->encoder ? "examples/bert/pretrain_bert.py" : "pretrain_gpt.py");
  return psim_sb_finish(&b, "export", text, len);
}
