/* export_facts.h - what a plan says, in the terms every exporter needs (private to
 * search/plan/export*.c; docs/export.md).
 *
 * psim_export_facts_of reads the model and the strategy once: the model's architecture (the
 * facts a runtime's flags decide: norm, activation, position encoding, tied embeddings,
 * biases, dropout, grouped-query attention, experts, precision) and the plan's layout as a
 * Megatron-LM tp x pp x dp expansion (or the reason it is none), with its schedule,
 * recomputation, ZeRO stage and overlap settings. Each exporter compares what its runtime
 * would build from its output with these facts and refuses (psim_export_refuse) on the first
 * difference; none approximates in silence. */
#ifndef PSIM_EXPORT_FACTS_H
#define PSIM_EXPORT_FACTS_H

#include <stdbool.h>
#include <stdint.h>

#include "search/plan/export.h"

#define PSIM_EXPORT_WHY 512

typedef struct psim_export_facts {
  /* ---- the model ---- */
  bool transformer;          /* a heads-role and a hidden-role dim */
  bool encoder;              /* BERT: an LM-head transform (dense, GeLU, norm) before logits */
  bool embedding_norm;       /* a norm between the embedding and the first layer (BERT) */
  int32_t layers;            /* transformer layers (the repeated blocks' layers) */
  int32_t first_block_layer; /* the model layer of the first transformer layer */
  int64_t hidden, heads, kv_heads, ffn, seq, vocab, batch; /* kv_heads == heads without GQA */
  bool rmsnorm, swiglu;     /* RMSNorm (else LayerNorm); SwiGLU MLP (else GeLU) */
  bool learned_positions;   /* a [seq, hidden] table added to the embedding (else rotary) */
  bool tied_embeddings;     /* the logits read the embedding table */
  bool bias_linear;         /* linear layers carry bias weights */
  double hidden_dropout;    /* p of the dropout ops outside the attention core (0: none) */
  double attention_dropout; /* p of the dropout ops of the attention core (tag attn_core) */
  bool dropout_mixed;       /* one of the two groups holds different probabilities */
  int32_t experts, top_k;   /* MoE: experts per layer and top-k routing; 0 when dense */
  double capacity_factor;   /* MoE: capacity * experts / (top_k * seq); 0 when dropless */
  bool dropless;            /* MoE: the dispatch drops no token (op attribute dropless) */
  int32_t moe_layers;       /* MoE: blocks' layers with a dispatch (the rest are dense) */
  bool moe_dense_ffn;       /* MoE: an FFN matmul outside the experts (shared experts) */
  int64_t moe_ffn;          /* MoE: the experts' FFN width (the ffn-role dim of their weights) */
  int64_t shared_ffn;       /* MoE: the FFN width beside the experts in a MoE layer (0: none) */
  int32_t dense_first;      /* MoE: leading dense layers (DeepSeek-V3's first 3) */
  bool moe_irregular;       /* MoE: a dense layer after a MoE layer (no leading-run pattern) */
  bool sigmoid_router;      /* MoE: the gates are a sigmoid of the router (else a softmax) */
  int32_t mtp_layers;       /* multi-token prediction modules: blocks with their own loss */
  /* Multi-head latent attention (DeepSeek-V2/V3): the dims models/gen_decoder.c names
   * (docs/model.md): q_lora (0: no query compression), kv_lora, nope (qk head), rope (qk
   * rotary part), kv_b (nope + v head). mla false when the model has no kv_lora dim. */
  bool mla;
  int64_t q_lora, kv_lora, qk_head, qk_rope, v_head;
  bool qk_norm;      /* a norm of the queries/keys per head (Qwen3's q_norm/k_norm) */
  int64_t head_dim;  /* the head_dim-role dim (hidden / heads unless given) */
  psim_dtype dtype;  /* the model's precision */
  bool fp8;          /* FP8 GEMMs: the model's dtype fp8, or a linear FP8 under the plan's strategy
                        (its "fp8" or the model's matmul flags: psim_strategy_op_fp8) */
  double grad_bytes; /* bytes per gradient element plansim reduces (memory.h's table) */
  /* ---- the plan ---- */
  const psim_strategy *s; /* schedule, recompute, sequence_parallel, zero, overlap, ... */
  bool megatron;          /* the strategy is a Megatron tp x pp x dp expansion ... */
  psim_megatron_opts lay; /* ... with these parameters */
  char megatron_why[PSIM_EXPORT_WHY]; /* else why not (the first difference) */
  int32_t stage_layers_first, stage_layers_mid, stage_layers_last; /* transformer layers */
  bool stages_uneven; /* the middle stages differ among themselves (no runtime splits so) */
  bool mtp_split;     /* a multi-token prediction module lies before the last stage */
  int32_t n_micro;    /* micro-batches per iteration */
  /* the strategy's overlap_param_gather where plansim simulates it: ZeRO 1-2, whose updated
   * parameters are all-gathered after the step (sim/builder/gradsync.c param_gathers); at
   * ZeRO 0 and 3 the key changes nothing */
  bool param_gather_overlap;
} psim_export_facts;

/* Fills f from the plan: model facts always, the layout when the strategy is a Megatron
 * expansion (f->megatron; else f->megatron_why). PSIM_ENOMEM only. O(ops * devices * tp
 * candidates). */
psim_status psim_export_facts_of(const psim_plan_doc *d, psim_export_facts *f);

/* The Megatron-Core uneven split of s's stages into o->first_stage_layers /
 * last_stage_layers (transformer layers; 0 where the stage holds the even share, both 0 for
 * an even split or a virtual pipeline): the --decoder-first/last-pipeline-num-layers that
 * rebuild those stages (a first count alone when pp is 2, as arguments.py takes it). */
void psim_export_uneven_stages(const psim_model *m, const psim_strategy *s, psim_megatron_opts *o);

/* Records "RUNTIME would ...: reason" as a refusal: PSIM_EFAILED with the message (the CLI
 * prefixes the plan and format and exits 2). */
psim_status psim_export_refuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The layout's expert tensor-parallel degree (lay.etp, 0 meaning tp: Megatron-LM
 * arguments.py) and world size tp x cp x pp x dp. */
int32_t psim_export_etp(const psim_export_facts *f);
int32_t psim_export_world(const psim_export_facts *f);

/* Refusals that exporters without expert or context parallelism share: "RUNTIME has no
 * ...: reason" when the layout has ep > 1 or cp > 1 (how stands in the message). */
psim_status psim_export_no_ep_cp(const psim_export_facts *f, const char *runtime, const char *how);

/* Refusals shared by the exporters that need a Megatron tp x pp x dp layout. */
psim_status psim_export_need_layout(const psim_export_facts *f, const char *runtime);

#endif
