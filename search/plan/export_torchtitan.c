/* export_torchtitan.c - a torchtitan job config (TOML) (docs/export.md).
 *
 * Keys and rules from pytorch/torchtitan v0.2.2 (2026-02-20, the last release read from a TOML
 * file; main replaced TOML with Python configs in #2386): torchtitan/config/job_config.py (the
 * sections and keys), torchtitan/models/llama3/__init__.py (the flavors), model/model.py
 * (FeedForward's hidden size: int(8 dim / 3), times ffn_dim_multiplier, rounded up to
 * multiple_of), infra/parallelize.py (TP applies SequenceParallel to the norms; DDP only as
 * the sole parallelism) and train.py (gradient accumulation = global batch / (local batch x
 * dp)). */
#include <stdio.h>
#include <string.h>

#include "search/plan/export_facts.h"
#include "search/plan/export_impl.h"
#include "sim/core/strbuf.h"

#define TT "torchtitan v0.2.2"

/* The first fact of the model that torchtitan's llama3 Transformer does not build, or NULL. */
static const char *llama_difference(const psim_export_facts *f) {
  if (!f->transformer)
    return "it has no heads-role or hidden-role dim (not a transformer)";
  if (f->encoder || f->embedding_norm)
    return "it is an encoder (BERT: LM-head transform, embedding norm)";
  if (f->learned_positions)
    return "it has learned position embeddings (llama3 uses rotary ones)";
  if (!f->rmsnorm || !f->swiglu)
    return "it uses LayerNorm or a GeLU MLP (llama3: RMSNorm and SwiGLU)";
  if (f->bias_linear)
    return "its linear layers have biases (llama3's have none)";
  if (f->tied_embeddings)
    return "its output layer reuses the embedding table (llama3's is separate)";
  if (f->hidden_dropout > 0 || f->attention_dropout > 0)
    return "it has dropout (llama3 has none)";
  return NULL;
}

/* torchtitan v0.2.2's MoE layer (torchtitan/models/moe/moe.py, MoE and MoEArgs): no capacity
 * (every routed token is computed: dropless grouped GEMMs) and SwiGLU experts
 * (w2(silu(w1 x) * w3 x)). Of the models that use it, qwen3 (torchtitan/models/qwen3:
 * model/model.py, a MoE in every layer when moe_enabled, moe_inter_dim wide, RMSNorm, rotary
 * positions, no biases, head_dim given, q/k norms when qk_norm) builds a LLaMA-shaped MoE;
 * llama4 interleaves dense layers and scales the experts' width, deepseek_v3 has latent
 * attention. qwen3's TrainSpec (__init__.py) has pipelining_fn=None: no pipeline
 * parallelism. */
static psim_status moe_refusals(const psim_plan_doc *d, const psim_export_facts *f) {
  if (!f->dropless)
    return psim_export_refuse(
        "MoE with a fixed expert capacity (model '%s', %d experts, top-%d, capacity factor %g; "
        "tokens beyond it are dropped): " TT "'s MoE (torchtitan/models/moe/moe.py, MoEArgs) "
        "has no capacity and computes every routed token (dropless)",
        d->model.name, f->experts, f->top_k, f->capacity_factor);
  if (!f->swiglu)
    return psim_export_refuse(TT "'s MoE experts are SwiGLU (torchtitan/models/moe/moe.py); "
                                 "model '%s' has GeLU experts",
                              d->model.name);
  if (f->moe_layers != f->layers || f->moe_dense_ffn)
    return psim_export_refuse(TT "'s qwen3 model has a MoE without shared experts in every "
                                 "layer (num_shared_experts=0); model '%s' has %s",
                              d->model.name,
                              f->moe_dense_ffn ? "a dense FFN beside its experts"
                                               : "dense layers between its MoE layers");
  if (f->lay.pp > 1)
    return psim_export_refuse("pipeline parallelism %d: " TT "'s qwen3 model has no pipeline "
                              "function (torchtitan/models/qwen3/__init__.py: "
                              "pipelining_fn=None)",
                              f->lay.pp);
  return PSIM_OK;
}

static psim_status torchtitan_refusals(const psim_export_facts *f) {
  const psim_strategy *s = f->s;
  const psim_megatron_opts *o = &f->lay;
  if (f->dtype == PSIM_DTYPE_FP16 || f->dtype == PSIM_DTYPE_FP64)
    return psim_export_refuse("%s precision: " TT " trains in bfloat16 or float32",
                              psim_dtype_name(f->dtype));
  if (psim_zero_gathers_after_step(s->zero_stage))
    return psim_export_refuse("ZeRO stage %d: " TT " shards with FSDP2 (stage 3, "
                              "data_parallel_shard_degree) or replicates with DDP (stage 0)",
                              s->zero_stage);
  if (o->dp > 1 && s->zero_stage == 0 && (o->tp > 1 || o->pp > 1))
    return psim_export_refuse("data parallelism without sharding alongside tensor or pipeline "
                              "parallelism: " TT "'s DDP runs only as the sole parallelism "
                              "(parallelize.py: 'DDP has not supported > 1D parallelism')");
  if (o->dp > 1 && s->zero_stage == 0 &&
      (!s->overlap_grad_reduce || s->bucket_bytes != 25.0 * 1024 * 1024))
    return psim_export_refuse("DDP always overlaps its all-reduce with the backward pass in "
                              "25 MiB buckets; the plan does not");
  if (o->dp > 1 && s->zero_stage == 3 && !s->overlap_grad_reduce)
    return psim_export_refuse("FSDP2 always overlaps its reduce-scatter with the backward pass; "
                              "the plan does not");
  if (o->tp > 1 && !s->sequence_parallel)
    return psim_export_refuse("tensor parallelism without sequence parallelism: " TT " "
                              "shards the norms along the sequence (SequenceParallel)");
  if (s->recompute == PSIM_RECOMPUTE_SELECTIVE)
    return psim_export_refuse("selective recomputation of the attention core: " TT "'s "
                              "selective modes recompute per layer or per op kind");
  if (psim_strategy_partial_recompute(s))
    return psim_export_refuse("full recomputation by method %s of %d layers: " TT "'s full "
                              "mode checkpoints every layer (use the megatron format)",
                              psim_recompute_method_name(s->recompute_method),
                              (int)s->recompute_layers);
  if (f->seq % (2 * o->tp) != 0) /* parallel_dims.py seq_len_divisor: tp x 2 cp */
    return psim_export_refuse("sequence length %lld: " TT " needs it divisible by tensor "
                              "parallelism %d x 2 x context parallelism 1 (parallelize.py, "
                              "ParallelDims.seq_len_divisor)",
                              (long long)f->seq, o->tp);
  if (o->cp > 1)
    return psim_export_refuse("context parallelism %d: " TT " shards the parameters with FSDP "
                              "over dp_shard x cp (parallel_dims.py, the fsdp mesh) and the "
                              "export does not yet check that plansim's ZeRO group is that",
                              o->cp);
  if (o->ep > 1 && (s->zero_stage != 3 || (o->etp != 0 && o->etp != 1 && o->etp != o->tp)))
    return psim_export_refuse("expert parallelism %d with %s: " TT " runs ep > 1 under FSDP "
                              "(the sparse mesh efsdp x ep x etp) with etp = tp or 1 "
                              "(parallel_dims.py _validate)",
                              o->ep, s->zero_stage != 3 ? "no FSDP (ZeRO 3)" : "etp not tp or 1");
  if (s->allreduce != PSIM_AR_AUTO)
    return psim_export_refuse("all-reduce algorithm '%s': " TT " leaves it to NCCL",
                              psim_allreduce_algo_name(s->allreduce));
  return PSIM_OK;
}

typedef struct flavor {
  const char *name;
  int64_t dim, layers, heads, kv_heads, ffn, vocab;
} flavor;

/* torchtitan/models/llama3/__init__.py (v0.2.2), ffn from model.py's rule, vocab 128256. */
static const flavor flavors[] = {
    {"8B", 4096, 32, 32, 8, 14336, 128256},
    {"70B", 8192, 80, 64, 8, 28672, 128256},
    {"405B", 16384, 126, 128, 8, 53248, 128256},
};

/* ffn_dim_multiplier (0: None) and multiple_of that give f->ffn by model.py's rule. */
static bool ffn_rule(const psim_export_facts *f, double *mult, int64_t *multiple_of) {
  static const double mults[] = {0, 1.3, 1.2, 1.5}; /* None and the shipped flavors' */
  int64_t base = 8 * f->hidden / 3;
  for (size_t i = 0; i < sizeof mults / sizeof *mults; i++)
    for (int64_t m = 4096; m >= 1; m /= 2) {
      int64_t h = mults[i] > 0 ? (int64_t)(mults[i] * (double)base) : base;
      if (h > 0 && m * ((h + m - 1) / m) == f->ffn) {
        *mult = mults[i], *multiple_of = m;
        return true;
      }
    }
  return false;
}

static void flavor_args(psim_sb *b, const psim_export_facts *f) {
  double mult = 0;
  int64_t m = 0;
  psim_sb_printf(b, "#   \"plansim\": TransformerModelArgs(dim=%lld, n_layers=%d, n_heads=%lld,\n",
                 (long long)f->hidden, f->layers, (long long)f->heads);
  psim_sb_printf(b, "#       ");
  if (f->kv_heads != f->heads)
    psim_sb_printf(b, "n_kv_heads=%lld, ", (long long)f->kv_heads);
  if (!ffn_rule(f, &mult, &m)) /* int(mult * base) <= ffn, rounded up to ffn: ffn */
    mult = (double)f->ffn / (double)(8 * f->hidden / 3), m = f->ffn;
  if (mult > 0)
    psim_sb_printf(b, "ffn_dim_multiplier=%.17g, ", mult);
  psim_sb_printf(b, "multiple_of=%lld, vocab_size=%lld),\n", (long long)m, (long long)f->vocab);
}

/* torchtitan/models/qwen3/__init__.py (v0.2.2): the Qwen3-MoE flavors (qk_norm, untied,
 * vocab 151936, head_dim 128, 128 experts, top-8, no shared expert). */
static const flavor moe_flavors[] = {
    {"30B-A3B", 2048, 48, 32, 4, 768, 151936},
    {"235B-A22B", 4096, 94, 64, 4, 1536, 151936},
};

static const char *moe_flavor_of(const psim_export_facts *f) {
  for (size_t i = 0; i < sizeof moe_flavors / sizeof *moe_flavors; i++) {
    const flavor *x = &moe_flavors[i];
    if (x->dim == f->hidden && x->layers == f->layers && x->heads == f->heads &&
        x->kv_heads == f->kv_heads && x->ffn == f->ffn && x->vocab == f->vocab &&
        f->head_dim == 128 && f->qk_norm && f->experts == 128 && f->top_k == 8)
      return x->name;
  }
  return NULL;
}

/* The Qwen3ModelArgs to add to qwen3_args (a comment): MoE in every layer, no shared expert,
 * the model's shape (hidden_dim, the dense FFN width, is unused with moe_enabled). */
static void moe_flavor_args(psim_sb *b, const psim_export_facts *f) {
  psim_sb_printf(b,
                 "#   \"plansim\": Qwen3ModelArgs(vocab_size=%lld, max_seq_len=%lld, "
                 "head_dim=%lld,\n#       dim=%lld, n_layers=%d, n_heads=%lld, n_kv_heads=%lld, "
                 "qk_norm=%s,\n#       hidden_dim=%lld, moe_enabled=True, moe_inter_dim=%lld,\n",
                 (long long)f->vocab, (long long)f->seq, (long long)f->head_dim,
                 (long long)f->hidden, f->layers, (long long)f->heads, (long long)f->kv_heads,
                 f->qk_norm ? "True" : "False", (long long)f->ffn, (long long)f->ffn);
  psim_sb_printf(b,
                 "#       moe_args=MoEArgs(num_experts=%d, num_shared_experts=0, top_k=%d,\n"
                 "#           score_func=\"softmax\", route_norm=True)),\n",
                 f->experts, f->top_k);
}

static const char *flavor_of(const psim_export_facts *f) {
  for (size_t i = 0; i < sizeof flavors / sizeof *flavors; i++) {
    const flavor *x = &flavors[i];
    if (x->dim == f->hidden && x->layers == f->layers && x->heads == f->heads &&
        x->kv_heads == f->kv_heads && x->ffn == f->ffn && x->vocab == f->vocab)
      return x->name;
  }
  return NULL;
}

static void model_section(psim_sb *b, const psim_plan_doc *d, const psim_export_facts *f) {
  bool moe = f->experts > 0;
  const char *fl = moe ? moe_flavor_of(f) : flavor_of(f), *name = moe ? "qwen3" : "llama3";
  psim_sb_printf(b, "# torchtitan job config for model ");
  psim_export_toml_quote(b, d->model.name);
  psim_sb_printf(b, " (plansim export; keys of " TT ").\n");
  if (!fl) {
    psim_sb_printf(b,
                   "# No %s flavor of " TT " has this shape (torchtitan fails with a\n"
                   "# KeyError until it has): add to %s_args in\n"
                   "# torchtitan/models/%s/__init__.py\n",
                   name, name, name);
    if (moe)
      moe_flavor_args(b, f);
    else
      flavor_args(b, f);
  }
  psim_sb_printf(b, "[model]\nname = \"%s\"\nflavor = \"%s\"\n", name, fl ? fl : "plansim");
  if (f->fp8)
    psim_sb_printf(b, "converters = [\"quantize.linear.float8\"]\n");
}

static void training_section(psim_sb *b, const psim_export_facts *f) {
  const psim_megatron_opts *o = &f->lay;
  int64_t local = o->pp > 1 ? f->batch / o->dp : o->micro_batch;
  psim_sb_printf(b,
                 "\n[training]\nlocal_batch_size = %lld\nglobal_batch_size = %lld\n"
                 "seq_len = %lld\nmixed_precision_param = \"%s\"\n"
                 "mixed_precision_reduce = \"float32\"\n",
                 (long long)local, (long long)f->batch, (long long)f->seq,
                 f->dtype == PSIM_DTYPE_FP32 ? "float32" : "bfloat16");
}

static void item(psim_sb *b, bool *first, const char *fmt, int32_t v) {
  psim_sb_printf(b, *first ? "" : ", ");
  psim_sb_printf(b, fmt, v);
  *first = false;
}

/* Each pipeline chunk's modules: the embedding first, the norm and output layer last. */
static void fqns(psim_sb *b, const psim_export_facts *f) {
  const psim_strategy *s = f->s;
  int32_t n = s->n_stages * s->virtual_stages, lo = f->first_block_layer;
  psim_sb_printf(b, "module_fqns_per_model_part = [\n");
  for (int32_t c = 0; c < n; c++) {
    const psim_stage *st = &s->stages[c];
    bool first = true;
    psim_sb_printf(b, "  [");
    if (c == 0)
      item(b, &first, "\"tok_embeddings\"", 0);
    for (int32_t l = st->first_layer; l <= st->last_layer; l++)
      if (l >= lo && l < lo + f->layers)
        item(b, &first, "\"layers.%d\"", l - lo);
    if (c == n - 1)
      item(b, &first, "\"norm\", \"output\"", 0);
    psim_sb_printf(b, "],\n");
  }
  psim_sb_printf(b, "]\n");
}

static void parallelism_section(psim_sb *b, const psim_export_facts *f) {
  const psim_megatron_opts *o = &f->lay;
  bool shard = f->s->zero_stage == 3;
  /* HSDP: FSDP2 on the 2-D mesh (dp_replicate, dp_shard), dp_replicate outer (parallel_dims.py:
   * the mesh pp, dp_replicate, dp_shard, cp, tp), as plansim's shard groups of consecutive
   * data-parallel ranks (sim/builder/zero.c) */
  int32_t rep = shard && f->s->dp_replicate > 1 ? f->s->dp_replicate : 1;
  psim_sb_printf(b,
                 "\n[parallelism]\ndata_parallel_replicate_degree = %d\n"
                 "data_parallel_shard_degree = %d\ntensor_parallel_degree = %d\n"
                 "disable_loss_parallel = false\ncontext_parallel_degree = %d\n"
                 "expert_parallel_degree = %d\nexpert_tensor_parallel_degree = %d\n"
                 "pipeline_parallel_degree = %d\n",
                 shard ? rep : o->dp, shard ? o->dp / rep : 1, o->tp, o->cp, o->ep,
                 f->experts > 0 && o->ep > 1 ? psim_export_etp(f) : 1, o->pp);
  if (o->pp > 1) {
    /* torchtitan's pipeline_parallel_schedule names torch.distributed.pipelining's classes
     * without "Schedule" (get_schedule_class, schedules.py at pytorch 00722e648b) */
    static const char *const names[] = {
        "GPipe",         "1F1B",     "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble",
        "ZBVZeroBubble", "DualPipeV"};
    _Static_assert(sizeof names / sizeof *names == PSIM_SCHED_DUALPIPEV + 1,
                   "a schedule has no name");
    const char *sched = names[f->s->schedule];
    psim_sb_printf(b,
                   "pipeline_parallel_schedule = \"%s\"\npipeline_parallel_microbatch_size = %d\n",
                   sched, o->micro_batch);
    fqns(b, f);
  }
}

psim_status psim_export_torchtitan(const psim_plan_doc *d, const psim_export_facts *f, char **text,
                                   size_t *len) {
  if (f->mla) /* models/deepseek_v3 has MLA, but its args are not a flavor plansim writes */
    return psim_export_refuse("model '%s' has multi-head latent attention (kv_lora %lld): the "
                              "export writes " TT "'s llama3 and qwen3 models, whose attention "
                              "is grouped-query, not its deepseek_v3 model",
                              d->model.name, (long long)f->kv_lora);
  if (f->mtp_layers > 0)
    return psim_export_refuse("model '%s' has %d multi-token prediction modules: " TT "'s llama3 "
                              "and qwen3 models have none",
                              d->model.name, f->mtp_layers);
  if (f->transformer && f->experts > 0)
    PSIM_CHECK(moe_refusals(d, f));
  const char *why = llama_difference(f);
  if (why)
    return psim_export_refuse(TT " builds llama3 transformers (torchtitan/models/llama3; "
                                 "MoE: qwen3): model '%s' differs: %s",
                              d->model.name, why);
  PSIM_CHECK(psim_export_need_layout(f, TT));
  PSIM_CHECK(torchtitan_refusals(f));
  psim_sb b = {0};
  model_section(&b, d, f);
  training_section(&b, f);
  parallelism_section(&b, f);
  /* async TP (the plan's own async_tp): enable_async_tensor_parallel, which needs the model
   * compiled (parallelize.py: "Async TP requires torch.compile", compile.enable and "model" in
   * compile.components) */
  bool async_tp = f->s->async_tp == PSIM_ASYNC_TP_ON && f->lay.tp > 1;
  if (async_tp)
    psim_sb_printf(&b, "enable_async_tensor_parallel = true\n");
  bool op_sac = f->s->recompute == PSIM_RECOMPUTE_OP; /* torchtitan's op-level policy */
  int32_t every = f->s->recompute == PSIM_RECOMPUTE_FULL ? f->s->recompute_every : 0;
  char option[48] = ""; /* selective_ac_option: "op", or every N-th layer */
  if (op_sac)
    snprintf(option, sizeof option, "selective_ac_option = \"op\"\n");
  else if (every > 1)
    snprintf(option, sizeof option, "selective_ac_option = \"%d\"\n", (int)every);
  psim_sb_printf(&b, "\n[activation_checkpoint]\nmode = \"%s\"\n%s\n[compile]\nenable = %s\n%s",
                 op_sac || every > 1                      ? "selective"
                 : f->s->recompute == PSIM_RECOMPUTE_FULL ? "full"
                                                          : "none",
                 option, async_tp ? "true" : "false",
                 async_tp ? "components = [\"model\", \"loss\"]\n" : "");
  return psim_sb_finish(&b, "export", text, len);
}
