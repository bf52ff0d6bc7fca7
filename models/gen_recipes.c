/* gen_recipes.c - the defaults of the decoder families (gen_decoder.c) and of gpt3-mlperf:
 * each figure from the model's published configuration (the file is named at each recipe;
 * docs/model.md repeats the sources). Sequence lengths are the pre-training ones the
 * Megatron-Bridge performance recipes run (4096; ../shared/calibration/modern/
 * megatron_bridge_perf_summary.csv); the global batches, where no source gives one, are
 * chosen as round token counts and said so. */
#include "models/generators.h"

#include <string.h>

/* What every decoder recipe shares: bf16, flash attention, dropless routing (the
 * Megatron-Core alltoall dispatcher without capacity and torchtitan run MoE dropless; the
 * Megatron-Bridge MoE rows say "all benchmarks are token-dropless"). */
static void decoder_base(psim_gen_tf_opts *o) {
  memset(o, 0, sizeof *o);
  o->dtype = "bf16";
  o->flash = true;
  o->seq = 4096;
  o->experts = 8;
  o->top_k = 2;
  o->capacity_factor = 0;
}

/* Qwen3-8B (huggingface.co/Qwen/Qwen3-8B config.json; Qwen3 technical report,
 * arXiv:2505.09388, Table 1): 36 layers, hidden 4096, 32 q / 8 kv heads, head_dim 128,
 * intermediate 12288, vocab 151936, untied, qk-norm. 32B: 64 layers, 5120, 64/8 heads,
 * ffn 25600. Batch 1024 x 4096 = 4M tokens (a choice). */
void psim_gen_qwen3_opts_init(psim_gen_tf_opts *o) {
  decoder_base(o);
  o->name = "qwen3";
  o->layers = 36;
  o->hidden = 4096;
  o->heads = 32;
  o->kv_heads = 8;
  o->head_dim = 128;
  o->ffn = 12288;
  o->vocab = 151936;
  o->batch = 1024;
  o->qk_norm = true;
}

/* Qwen3-30B-A3B (huggingface.co/Qwen/Qwen3-30B-A3B config.json; Megatron-Bridge
 * Qwen3MoEModelProvider30B_A3B): 48 layers, hidden 2048, 32 q / 4 kv heads, head_dim 128,
 * 128 experts top-8 of width 768, no shared expert, qk-norm, vocab 151936, untied; batch 512
 * (Megatron-Bridge's Qwen3-30B-A3B pre-training rows). 235B-A22B: 94 layers, 4096, 64/4 heads,
 * moe-ffn 1536. */
void psim_gen_qwen3_moe_opts_init(psim_gen_tf_opts *o) {
  decoder_base(o);
  o->name = "qwen3-moe";
  o->layers = 48;
  o->hidden = 2048;
  o->heads = 32;
  o->kv_heads = 4;
  o->head_dim = 128;
  o->vocab = 151936;
  o->batch = 512;
  o->qk_norm = true;
  o->experts = 128;
  o->top_k = 8;
  o->moe_ffn = 768;
}

/* Mixtral 8x7B (huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json; Jiang et al. 2024,
 * arXiv:2401.04088, Table 1): 32 layers, hidden 4096, 32 q / 8 kv heads (head_dim 128),
 * 8 experts top-2 of width 14336, vocab 32000, untied. Batch 512 x 4096 = 2M tokens (a
 * choice). */
void psim_gen_mixtral_opts_init(psim_gen_tf_opts *o) {
  decoder_base(o);
  o->name = "mixtral";
  o->layers = 32;
  o->hidden = 4096;
  o->heads = 32;
  o->kv_heads = 8;
  o->vocab = 32000;
  o->batch = 512;
  o->experts = 8;
  o->top_k = 2;
  o->moe_ffn = 14336;
}

/* DeepSeek-V3 (huggingface.co/deepseek-ai/DeepSeek-V3 config.json; arXiv:2412.19437 sec. 4.2;
 * Megatron-Bridge DeepSeekV3ModelProvider): 61 layers, hidden 7168, 128 heads, MLA with
 * q_lora 1536, kv_lora 512, qk_nope 128 + qk_rope 64, v_head 128; the first 3 layers dense
 * (ffn 18432), then 1 shared expert (2048) + 256 routed experts (2048) top-8, sigmoid gate;
 * vocab 129280, untied; multi-token prediction off (--mtp 1 adds the released module);
 * batch 4096 (Megatron-Bridge's DeepSeek-V3 pre-training rows). */
void psim_gen_deepseek_v3_opts_init(psim_gen_tf_opts *o) {
  decoder_base(o);
  o->name = "deepseek-v3";
  o->layers = 61;
  o->hidden = 7168;
  o->heads = 128;
  o->head_dim = 128;
  o->q_lora = 1536;
  o->kv_lora = 512;
  o->qk_rope = 64;
  o->ffn = 18432;
  o->dense_layers = 3;
  o->experts = 256;
  o->top_k = 8;
  o->moe_ffn = 2048;
  o->shared_ffn = 2048;
  o->sigmoid_router = true;
  o->vocab = 129280;
  o->batch = 4096;
}

/* GPT-OSS-120B (huggingface.co/openai/gpt-oss-120b config.json; OpenAI gpt-oss model card,
 * 2025): 36 layers, hidden 2880, 64 q / 8 kv heads, head_dim 64, attention biases, 128
 * experts top-4 of width 2880 with biases, router bias, vocab 201088, untied, context 4096 in
 * pre-training (initial_context_length). Batch 512 x 4096 (a choice). Not modelled: the
 * 128-token sliding window of every other layer (those layers cost full attention here), the
 * attention sinks (64 parameters a layer), the clamp of the SwiGLU. */
void psim_gen_gpt_oss_opts_init(psim_gen_tf_opts *o) {
  decoder_base(o);
  o->name = "gpt-oss";
  o->layers = 36;
  o->hidden = 2880;
  o->heads = 64;
  o->kv_heads = 8;
  o->head_dim = 64;
  o->bias = true;
  o->experts = 128;
  o->top_k = 4;
  o->moe_ffn = 2880;
  o->vocab = 201088;
  o->batch = 512;
}

/* GPT-3 175B as MLPerf Training runs it (mlcommons/training
 * large_language_model/megatron-lm/run_gpt3.sh @ 52b7253: 96 layers, hidden 12288, 96 heads,
 * seq 2048, global batch 1536, attention and hidden dropout 0.0): the mpt structure (gpt
 * without dropout ops), fused attention as the NeMo submissions run it, vocab 51200 (the GPT-2
 * BPE's 50257 padded by Megatron-LM to a multiple of 128 x tp 8). */
void psim_gen_gpt3_mlperf_opts_init(psim_gen_tf_opts *o) {
  psim_gen_mpt_opts_init(o);
  o->name = "gpt3-mlperf";
  o->layers = 96;
  o->hidden = 12288;
  o->heads = 96;
  o->seq = 2048;
  o->vocab = 51200;
  o->batch = 1536;
  o->flash = true;
}
