/* modern_moe.c - Megatron-Bridge's mixture-of-experts rows (DeepSeek-V3,
 * Qwen3-30B-A3B; issue 21 item 6): the architecture from the CSV's columns
 * (num_experts, topk, moe_ffn_hidden, shared_expert_ffn, head_dim and the
 * arch_family text: q_lora, kv_lora, rope, leading dense layers, qk-norm,
 * sigmoid router) through the decoder generator (models/gen_decoder.c), the
 * expert degrees from the row (ep; etp from recipe_preset_overrides'
 * expert_tensor_parallel_size, else Megatron-LM's default etp = tp). The rows
 * form their own source, megatron-bridge-moe, so the dense rows' figures stay
 * as they were. Nothing is fitted here. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "models/generators.h"
#include "modern.h"
#include "sim/ir/stack.h"

static int64_t col(const modern_csv *c, const char *k) {
  const char *v = modern_csv_get(c, k);
  char *end;
  long long x = strtoll(v, &end, 10);
  return end != v ? (int64_t)x : 0;
}

static const char *find(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (const char *p = hay; *p; p++)
    if (strncasecmp(p, needle, n) == 0)
      return p;
  return NULL;
}

/* The integer after key in text ("q_lora 1536" -> 1536); 0 when absent. */
static int64_t num_after(const char *text, const char *key) {
  const char *p = find(text, key);
  return p ? (int64_t)strtoll(p + strlen(key), NULL, 10) : 0;
}

/* The MoE fields of a Megatron-Bridge row; unsupported when plansim cannot
 * express the row (the reason is in r->unsupported). */
void modern_moe_read(const modern_csv *c, modern_row *r) {
  const char *arch = modern_csv_get(c, "arch_family");
  const char *ov = modern_csv_get(c, "recipe_preset_overrides");
  const char *variant = modern_csv_get(c, "model_variant_note");
  modern_moe *e = &r->moe;
  r->source = "megatron-bridge-moe";
  e->experts = col(c, "num_experts");
  e->top_k = col(c, "topk");
  e->moe_ffn = col(c, "moe_ffn_hidden");
  e->shared_ffn = col(c, "shared_expert_ffn");
  e->kv_lora = num_after(arch, "kv_lora ");
  e->q_lora = num_after(arch, "q_lora ");
  e->qk_rope = num_after(arch, "rope ");
  /* head_dim is the whole q/k head; the generator takes its non-rotary part */
  e->head_dim = col(c, "head_dim") - e->qk_rope;
  e->dense_layers = num_after(arch, "first ");
  e->qk_norm = find(arch, "qk_layernorm") != NULL;
  e->sigmoid = find(arch, "sigmoid router") != NULL;
  /* DeepSeekV3ModelProvider: mtp_num_layers 1 (the 26.x layouts end in "tmL": one MTP
   * layer); the 25.11 rows say w/ or w/o */
  e->mtp = e->kv_lora > 0 && !find(r->model, "w/o MTP") ? 1 : 0;
  e->tokendrop = find(variant, "tokendrop") != NULL;
  /* Megatron-Bridge's benchmarks force balanced routing on dropless MoE runs
   * (scripts/performance/utils/overrides.py, set_user_overrides: dropless ->
   * moe_router_force_load_balancing = True; token-drop -> False; the performance
   * recipes' _benchmark_common sets it for every MoE recipe). Megatron-Core's router
   * then routes on random logits (TransformerConfig.moe_router_force_load_balancing,
   * "for benchmarking purposes only"): every expert receives the mean up to sampling
   * noise (about 2% at Qwen3's 2,048 tokens per expert and micro-batch): uniform */
  e->balanced = !e->tokendrop;
  e->ep = (int32_t)col(c, "ep");
  /* Full-iteration CUDA graphs (the 26.06 recipes' cuda_graph_impl "full_iteration", with
   * HybridEP and a static per-rank token budget, moe_expert_rank_capacity_factor): a captured
   * iteration holds no host wait, and HybridEP's dispatch does not block when it is given
   * num_permuted_tokens (Megatron-LM megatron/core/transformer/moe/fused_a2a.py @ 02ad939b:
   * non_blocking = num_permuted_tokens is not None; DeepEP's blocking dispatch "is not
   * compatible with CUDA graph"). Off: the stack's moe_dispatch_sync (sim/builder/kernels.c). */
  e->graphed = find(ov, "\"full_iteration\"") != NULL;
  /* moe_a2a_overlap (Megatron-Bridge's alias of Megatron-Core's
   * overlap_moe_expert_parallel_comm): combined 1F1B, each all-to-all under the other
   * micro-batch's kernels (the stack's moe_a2a_overlap, sim/builder/schedules.c) */
  e->a2a_overlap = find(ov, "\"moe_a2a_overlap\": true") != NULL;
  /* The flex dispatcher's backend (the preset's moe_flex_dispatcher_backend; the CSV lists
   * the dispatcher among a preset's non-default fields): DeepEP and HybridEP send a token
   * once per destination rank and node (sim/builder/moe_a2a.c); rows without it run
   * Megatron-Core's alltoall dispatcher, as session 15 read them */
  e->dispatcher = find(ov, "\"moe_flex_dispatcher_backend\": \"hybridep\"") ? PSIM_MOE_HYBRIDEP
                  : find(ov, "\"moe_flex_dispatcher_backend\": \"deepep\"") ? PSIM_MOE_DEEPEP
                                                                            : PSIM_MOE_ALLTOALL;
  /* Megatron-Bridge's DeepSeek-V3 performance recipes set enable_megatron_core_experimental
   * (scripts/performance/configs/deepseek/deepseek_llm_pretrain.py @ v0.3.0; the Qwen3
   * ones do not): DeepEP's indices become a multi-hot map in one Triton kernel
   * (fused_indices_to_multihot), without the host waits of the stack's moe_multihot_sync */
  e->experimental = e->kv_lora > 0;
  const char *etp = find(ov, "\"expert_tensor_parallel_size\": ");
  e->etp = etp ? (int32_t)strtol(etp + strlen("\"expert_tensor_parallel_size\": "), NULL, 10) : 0;
  if (r->unsupported[0])
    return;
  char layout[64];
  if (find(r->precision, "FP4"))
    snprintf(r->unsupported, sizeof r->unsupported, "fp4 dtype (%s) in the model IR", r->precision);
  else if (r->vp > 1 && r->layers % ((int64_t)r->pp * r->vp) != 0 &&
           !modern_moe_layout(r, layout, sizeof layout))
    snprintf(r->unsupported, sizeof r->unsupported,
             "uneven interleaved pipeline layout (%lld layers in pp %d x vp %d chunks): "
             "no recipe layout for %d chunks",
             (long long)r->layers, (int)r->pp, (int)r->vp, (int)(r->pp * r->vp));
  else if (r->vp > 1 && r->layers % ((int64_t)r->pp * r->vp) != 0 &&
           !getenv("PSIM_MODERN_MOE_INTERLEAVED"))
    /* 256 GPUs x 16 chunks with wide expert parallelism: about 12 GB and 15 minutes for
     * the 19 rows on this machine; opt in (docs/accuracy-modern.md) */
    snprintf(r->unsupported, sizeof r->unsupported,
             "interleaved DeepSeek-V3 layout (%d chunks): not run by default (12 GB, 15 min; "
             "PSIM_MODERN_MOE_INTERLEAVED=1 runs it)",
             (int)(r->pp * r->vp));
  else if (find(ov, "cpu_offloading"))
    snprintf(r->unsupported, sizeof r->unsupported, "activation CPU offloading");
}

/* Megatron-Bridge's DeepSeek-V3 layouts (src/megatron/bridge/recipes/deepseek/deepseek_v3.py,
 * set_deepseek_v3_pipeline_model_parallel_layout; the 26.x overrides' pp_layout
 * "Et*4|(t*4|)*14tmL" is its 16-chunk entry): 16 chunks (pp x vp = 16 x 1, 8 x 2, 4 x 4;
 * 2 x 8 from the overrides) of 4 decoder layers, the last of 1 decoder layer + the MTP
 * layers + the loss; 8 chunks (8 x 1, 4 x 2; 2 x 4 assumed alike) of 8, the last of 5;
 * 4 x 1: 16, 16, 16, 13. Other chunk counts (pp 8 x vp 4): none known. */
bool modern_moe_layout(const modern_row *r, char *buf, size_t size) {
  int32_t n = r->pp * (r->vp > 1 ? r->vp : 1);
  const char *mtp = r->moe.mtp > 0 ? "m" : "";
  if (r->moe.kv_lora == 0 || r->pp < 2 || r->layers != 61)
    return false;
  if (n == 16)
    snprintf(buf, size, "Et*4|(t*4|)*14t%sL", mtp);
  else if (n == 8)
    snprintf(buf, size, "Et*8|(t*8|)*6t*5%sL", mtp);
  else if (n == 4)
    snprintf(buf, size, "Et*16|t*16|t*16|t*13%sL", mtp);
  else
    return false;
  return true;
}

/* The row's MoE model through psim_gen_decoder. */
psim_status modern_moe_model(const modern_row *r, struct cJSON **doc) {
  const modern_moe *e = &r->moe;
  psim_gen_tf_opts o;
  if (e->kv_lora > 0)
    psim_gen_deepseek_v3_opts_init(&o);
  else
    psim_gen_qwen3_moe_opts_init(&o);
  o.name = r->model;
  o.layers = r->layers;
  o.hidden = r->hidden;
  o.heads = r->heads;
  o.kv_heads = e->kv_lora > 0 ? 0 : r->kv_heads;
  o.head_dim = e->head_dim;
  o.ffn = e->dense_layers > 0 ? r->ffn : 0;
  o.vocab = r->vocab;
  o.seq = r->seq;
  o.batch = r->batch;
  o.experts = e->experts;
  o.top_k = e->top_k;
  o.moe_ffn = e->moe_ffn;
  o.shared_ffn = e->shared_ffn;
  o.dense_layers = e->dense_layers;
  o.q_lora = e->q_lora;
  o.kv_lora = e->kv_lora;
  o.qk_rope = e->qk_rope;
  o.qk_norm = e->qk_norm;
  o.sigmoid_router = e->sigmoid;
  o.mtp = e->mtp;
  /* tokendrop recipes: moe_expert_capacity_factor 1.0 (Megatron-Bridge's token-drop
   * variants); else dropless */
  o.capacity_factor = e->tokendrop ? 1.0 : 0;
  o.dropless = !e->tokendrop;
  o.linear_dtype = r->fp8 ? "fp8" : NULL;
  return psim_gen_decoder(&o, doc);
}
