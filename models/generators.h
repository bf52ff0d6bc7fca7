/* generators.h - model generators behind `plansim model FAMILY`.
 *
 * Each generator writes a plansim.model/1 document (docs/model.md) from a few
 * numbers, with the repeated layers written once as a block with "repeat".
 * The caller owns *out (cJSON_Delete). Options structs have an _init that
 * sets the documented defaults; generators validate them (PSIM_EINPUT with
 * the option's name) and never return a document that fails to load. */
#ifndef PSIM_GENERATORS_H
#define PSIM_GENERATORS_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/core/status.h"

struct cJSON;

/* Transformers: gpt, mpt, llama, llama3, bert, moe. */
typedef struct psim_gen_tf_opts {
  const char *name;         /* model name; NULL = family-based default */
  int64_t layers;           /* transformer layers */
  int64_t hidden;           /* model width h */
  int64_t heads;            /* attention heads (query heads for llama) */
  int64_t kv_heads;         /* llama: key/value heads (grouped-query attention); 0 = heads */
  int64_t seq;              /* sequence length (tokens) */
  int64_t vocab;            /* vocabulary size */
  int64_t batch;            /* global batch (sequences per iteration) */
  int64_t ffn;              /* feed-forward width; 0 = 4h (gpt, bert, moe), 11008-style for llama */
  const char *dtype;        /* tensor dtype: bf16 by default */
  const char *linear_dtype; /* dtype of the linear layers' outputs (their GEMMs run at its
                               rate); fp8: FP8 GEMMs ("fp8": true) whose outputs keep dtype,
                               as FP8 recipes write them; NULL = dtype */
  bool flash;             /* one fused attention op (FlashAttention) instead of the separate core */
  int64_t experts;        /* moe: experts per MoE layer */
  int64_t top_k;          /* moe: experts per token */
  double capacity_factor; /* moe: expert capacity = ceil(cf * top_k * seq / experts) per sample;
                             decoder families: 0 = dropless (the recipes' default) */
  bool dropless;          /* dropless routing (Megatron-Core alltoall dispatcher without capacity,
                             torchtitan): capacity = ceil(top_k * seq / experts), the mean routed
                             tokens per expert; dispatch/combine carry "dropless": true */
  /* decoder families (qwen3, qwen3-moe, mixtral, deepseek-v3, gpt-oss; gen_decoder.c) */
  int64_t head_dim;      /* attention head width; 0 = hidden / heads */
  bool qk_norm;          /* RMSNorm of q and k over head_dim (Qwen3) */
  bool bias;             /* biases on q, k, v, o and the experts (GPT-OSS) */
  int64_t moe_ffn;       /* routed expert width; 0 = a dense model (no experts) */
  int64_t shared_ffn;    /* width of the shared expert(s) beside the routed ones; 0 = none */
  int64_t dense_layers;  /* the first layers keep a dense FFN of width ffn (DeepSeek-V3: 3) */
  bool sigmoid_router;   /* sigmoid gate scores (DeepSeek-V3) instead of softmax */
  int64_t q_lora;        /* MLA: query down-projection rank; 0 = q projected directly */
  int64_t kv_lora;       /* MLA: key/value latent rank; 0 = no MLA (GQA or MHA) */
  int64_t qk_rope;       /* MLA: rotary part of the q/k head (head_dim is the non-rotary part) */
  int64_t mtp;           /* DeepSeek multi-token prediction modules; 0 = none */
  int64_t window;        /* causal sliding window (tokens) of the first window_layers layers after
                            the dense ones (GPT-OSS: 128 on 18 of 36); 0 = none */
  int64_t window_layers; /* how many layers use the window (their own block) */
} psim_gen_tf_opts;

/* Defaults: GPT-3 1.3B (Brown et al. 2020, Table 2.1): 24 layers, h 2048, 16
 * heads, seq 2048, vocab 51200 (GPT-2's 50257 padded as Megatron-LM does),
 * batch 512, bf16. */
void psim_gen_gpt_opts_init(psim_gen_tf_opts *o);
/* Defaults: LLaMA-2 7B (Touvron et al. 2023): 32 layers, 4096, 32 heads, 32
 * kv heads, ffn 11008, seq 4096, vocab 32000, batch 1024 (4M tokens), flash. */
void psim_gen_llama_opts_init(psim_gen_tf_opts *o);
/* Defaults: Llama-3-8B (Meta, Llama 3 model card and params.json): 32 layers,
 * 4096, 32 heads, 8 kv heads, ffn 14336, vocab 128256 (untied), seq 8192,
 * batch 512 (4M tokens), flash. 70B: 80 layers, 8192, 64 heads, 8 kv, ffn
 * 28672; 405B: 126 layers, 16384, 128 heads, 8 kv, ffn 53248. */
void psim_gen_llama3_opts_init(psim_gen_tf_opts *o);
/* Defaults: MPT-7B (llm-foundry scripts/train/yamls/pretrain/mpt-7b.yaml):
 * 32 layers, 4096, 32 heads, seq 2048, vocab 50368, batch 1024, flash. */
void psim_gen_mpt_opts_init(psim_gen_tf_opts *o);
/* Defaults: BERT-large (Devlin et al. 2019): 24 layers, 1024, 16 heads, seq
 * 512, vocab 30522, batch 256. */
void psim_gen_bert_opts_init(psim_gen_tf_opts *o);
/* Defaults: the GPT 1.3B shape with 8 experts, top-2, capacity factor 1.0. */
void psim_gen_moe_opts_init(psim_gen_tf_opts *o);

psim_status psim_gen_gpt(const psim_gen_tf_opts *o, struct cJSON **out);
psim_status psim_gen_llama(const psim_gen_tf_opts *o, struct cJSON **out);
psim_status psim_gen_bert(const psim_gen_tf_opts *o, struct cJSON **out);
/* MPT (llm-foundry): gpt's layer (LayerNorm, GELU MLP of 4h, biases, learned
 * positions, tied embedding) without dropout (MPT's pdrop 0). */
psim_status psim_gen_mpt(const psim_gen_tf_opts *o, struct cJSON **out);
psim_status psim_gen_moe(const psim_gen_tf_opts *o, struct cJSON **out);

/* Decoder families (gen_decoder.c): RMSNorm, no dropout, rotary positions (no parameters, not
 * modelled), SwiGLU FFNs, untied output matrix, fused causal attention; grouped-query or
 * multi-head latent attention; optional qk-norm; dense or mixture-of-experts FFNs with shared
 * experts and leading dense layers. Defaults, each from the model's published config
 * (docs/model.md lists the files): */
void psim_gen_qwen3_opts_init(psim_gen_tf_opts *o);     /* Qwen3-8B */
void psim_gen_qwen3_moe_opts_init(psim_gen_tf_opts *o); /* Qwen3-30B-A3B */
void psim_gen_mixtral_opts_init(psim_gen_tf_opts *o);   /* Mixtral 8x7B */
void psim_gen_deepseek_v3_opts_init(psim_gen_tf_opts *o);
void psim_gen_gpt_oss_opts_init(psim_gen_tf_opts *o); /* GPT-OSS-120B */
/* GPT-3 175B as MLPerf Training runs it: the mpt structure (gpt without dropout). */
void psim_gen_gpt3_mlperf_opts_init(psim_gen_tf_opts *o);
psim_status psim_gen_decoder(const psim_gen_tf_opts *o, struct cJSON **out);

/* Vision, MLP and recommendation models. */
typedef struct psim_gen_net_opts {
  const char *name;  /* NULL = family-based default */
  int64_t batch;     /* samples per iteration */
  int64_t layers;    /* mlp: hidden layers */
  int64_t hidden;    /* mlp: width */
  int64_t classes;   /* mlp, alexnet, resnet, inception: output classes */
  int64_t depth;     /* resnet: 50 or 101 */
  int64_t tables;    /* dlrm: embedding tables */
  int64_t rows;      /* dlrm: rows per table */
  int64_t emb_dim;   /* dlrm: embedding width */
  const char *dtype; /* fp32 by default */
} psim_gen_net_opts;

/* Defaults: mlp 4 layers x 1024, batch 64, 10 classes; alexnet batch 128;
 * resnet depth 50, batch 256; inception batch 256; dlrm 26 tables x 1e6 rows
 * x 128, batch 2048 (MLPerf DLRM layer widths); all fp32. */
void psim_gen_net_opts_init(psim_gen_net_opts *o, const char *family);

psim_status psim_gen_mlp(const psim_gen_net_opts *o, struct cJSON **out);
psim_status psim_gen_alexnet(const psim_gen_net_opts *o, struct cJSON **out);
psim_status psim_gen_resnet(const psim_gen_net_opts *o, struct cJSON **out);
psim_status psim_gen_inception(const psim_gen_net_opts *o, struct cJSON **out);
psim_status psim_gen_dlrm(const psim_gen_net_opts *o, struct cJSON **out);

#endif
