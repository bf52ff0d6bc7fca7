/* gen_transformer.c - the transformer families: gpt, mpt, llama, llama3, bert, moe. */
#include "models/generators.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/gen_impl.h"
#include "sim/core/json.h"
#include "sim/ir/model.h"

/* ============================================================ transformers */

typedef enum tf_family { TF_GPT, TF_MPT, TF_LLAMA, TF_BERT, TF_MOE } tf_family;

typedef struct tf {
  psim_gb *g;
  const psim_gen_tf_opts *o;
  tf_family fam;
  psim_gb_blk b;
  const char *kvh; /* the key/value heads dim */
} tf;

static void tf_defaults(psim_gen_tf_opts *o) {
  memset(o, 0, sizeof *o);
  o->layers = 24;
  o->hidden = 2048;
  o->heads = 16;
  o->seq = 2048;
  o->vocab = 51200;
  o->batch = 512;
  o->dtype = "bf16";
  o->experts = 8;
  o->top_k = 2;
  o->capacity_factor = 1.0;
}

void psim_gen_gpt_opts_init(psim_gen_tf_opts *o) {
  tf_defaults(o);
}

void psim_gen_moe_opts_init(psim_gen_tf_opts *o) {
  tf_defaults(o);
}

void psim_gen_llama_opts_init(psim_gen_tf_opts *o) {
  tf_defaults(o);
  o->layers = 32;
  o->hidden = 4096;
  o->heads = 32;
  o->seq = 4096;
  o->vocab = 32000;
  o->batch = 1024;
  o->ffn = 11008;
  o->flash = true;
}

void psim_gen_llama3_opts_init(psim_gen_tf_opts *o) {
  psim_gen_llama_opts_init(o);
  o->kv_heads = 8;
  o->ffn = 14336;
  o->seq = 8192;
  o->vocab = 128256;
  o->batch = 512;
}

void psim_gen_mpt_opts_init(psim_gen_tf_opts *o) {
  tf_defaults(o);
  o->layers = 32;
  o->hidden = 4096;
  o->heads = 32;
  o->vocab = 50368;
  o->batch = 1024;
  o->flash = true;
}

void psim_gen_bert_opts_init(psim_gen_tf_opts *o) {
  tf_defaults(o);
  o->hidden = 1024;
  o->seq = 512;
  o->vocab = 30522;
  o->batch = 256;
}

static psim_status tf_check(const psim_gen_tf_opts *o, tf_family fam) {
  const int64_t big = (int64_t)1 << 40;
  PSIM_CHECK(psim_gb_positive("layers", o->layers, 1000000));
  PSIM_CHECK(psim_gb_positive("hidden", o->hidden, big));
  PSIM_CHECK(psim_gb_positive("heads", o->heads, big));
  PSIM_CHECK(psim_gb_positive("seq", o->seq, big));
  PSIM_CHECK(psim_gb_positive("vocab", o->vocab, big));
  PSIM_CHECK(psim_gb_positive("batch", o->batch, big));
  if (o->ffn)
    PSIM_CHECK(psim_gb_positive("ffn", o->ffn, big));
  PSIM_CHECK(psim_gb_check_dtype(o->dtype));
  if (o->linear_dtype)
    PSIM_CHECK(psim_gb_check_dtype(o->linear_dtype));
  if (o->hidden % o->heads)
    return psim_error(PSIM_EINPUT, "--hidden %lld is not a multiple of --heads %lld",
                      (long long)o->hidden, (long long)o->heads);
  if (o->kv_heads && (o->kv_heads < 1 || o->heads % o->kv_heads))
    return psim_error(PSIM_EINPUT, "--kv-heads %lld must divide --heads %lld",
                      (long long)o->kv_heads, (long long)o->heads);
  if (o->kv_heads && o->kv_heads != o->heads && !o->flash)
    return psim_error(PSIM_EINPUT,
                      "--kv-heads %lld differs from --heads: grouped-query "
                      "attention needs --flash (the fused attention op)",
                      (long long)o->kv_heads);
  if (fam == TF_MOE) {
    PSIM_CHECK(psim_gb_positive("experts", o->experts, 1 << 20));
    PSIM_CHECK(psim_gb_positive("top-k", o->top_k, o->experts));
    if (!(o->capacity_factor > 0 && o->capacity_factor <= 1e3))
      return psim_error(PSIM_EINPUT, "--capacity-factor must be in (0, 1000]");
  }
  return PSIM_OK;
}

static int64_t tf_ffn(const tf *t) {
  if (t->o->ffn)
    return t->o->ffn;
  if (t->fam != TF_LLAMA)
    return 4 * t->o->hidden;
  /* LLaMA: 2/3 of 4h rounded up to a multiple of 256 (Touvron et al. 2023; 11008 at 4096). */
  int64_t f = 8 * t->o->hidden / 3;
  return (f + 255) / 256 * 256;
}

static void tf_dims(tf *t) {
  psim_gb *g = t->g;
  const psim_gen_tf_opts *o = t->o;
  psim_gb_dim(g, "batch", o->batch, "batch");
  psim_gb_dim(g, "seq", o->seq, "sequence");
  psim_gb_dim(g, "hidden", o->hidden, "hidden");
  psim_gb_dim(g, "heads", o->heads, "heads");
  psim_gb_dim(g, "head_dim", o->hidden / o->heads, "head_dim");
  psim_gb_dim(g, "ffn", tf_ffn(t), "ffn");
  psim_gb_dim(g, "vocab", o->vocab, "vocab");
  t->kvh = "heads";
  if (o->kv_heads && o->kv_heads != o->heads) {
    psim_gb_dim(g, "kv_heads", o->kv_heads, "heads");
    t->kvh = "kv_heads";
  }
  /* Keys and values on their own sequence dim: every query row attends to
   * every key, so a split of the query sequence (context parallelism) must
   * not split the keys for free; a view renames k, v's seq to it. */
  psim_gb_dim(g, "seq_kv", o->seq, NULL);
  if (!o->flash)
    psim_gb_dim(g, "qkv", 3, NULL);
}

/* Layer norm (gpt, bert, moe) or RMSNorm (llama) of x into y, with weights prefix. */
static void tf_norm(tf *t, cJSON *ws, cJSON *ops, const char *w, const char *x, const char *y) {
  psim_gb *g = t->g;
  char g_[64], b_[64], in[256];
  snprintf(g_, sizeof g_, "%s_g", w);
  snprintf(b_, sizeof b_, "%s_b", w);
  psim_gb_tensor(g, ws, g_, "hidden", NULL);
  if (t->fam == TF_LLAMA) {
    snprintf(in, sizeof in, "%s %s", x, g_);
    psim_gb_op(g, ops, w, "rmsnorm", in, y);
    return;
  }
  psim_gb_tensor(g, ws, b_, "hidden", NULL);
  snprintf(in, sizeof in, "%s %s %s", x, g_, b_);
  psim_gb_op(g, ops, w, "layernorm", in, y);
}

static void act(psim_gb *g, cJSON *ts, const char *name, const char *dims) {
  psim_gb_tensor(g, ts, name, dims, NULL);
}

/* Linear layer name: y = x W (+ b). */
static void linear(tf *t, const char *name, const char *x, const char *wdims, const char *bdims,
                   const char *y, const char *ydims) {
  psim_gb_linear(t->g, &t->b, name, x, wdims, bdims, y, ydims, t->o->linear_dtype);
}

static cJSON *tagged(tf *t, cJSON *o) {
  psim_gb_str(t->g, o, "tag", "attn_core");
  return o;
}

/* QKV projection and attention core of x into ctx [batch seq heads head_dim]. */
static void tf_qkv_core(tf *t, const char *x) {
  psim_gb *g = t->g;
  psim_gb_blk *b = &t->b;
  const char *bhsd = "batch seq heads head_dim";
  bool bias = t->fam != TF_LLAMA, causal = t->fam != TF_BERT;
  act(g, b->tensors, "ctx", bhsd);
  if (t->o->flash) {
    char kd[96];
    snprintf(kd, sizeof kd, "hidden %s head_dim", t->kvh);
    linear(t, "q", x, "hidden heads head_dim", bias ? "heads head_dim" : NULL, "q", bhsd);
    char kvd[96], kvv[96], bk[64];
    snprintf(kvd, sizeof kvd, "batch seq %s head_dim", t->kvh);
    snprintf(kvv, sizeof kvv, "batch seq_kv %s head_dim", t->kvh);
    snprintf(bk, sizeof bk, "%s head_dim", t->kvh);
    /* each view right after its projection, so that a gather of k overlaps
     * the v projection on the stream */
    linear(t, "k", x, kd, bias ? bk : NULL, "k0", kvd);
    act(g, b->tensors, "k", kvv);
    psim_gb_op(g, b->ops, "k_view", "reshape", "k0", "k");
    linear(t, "v", x, kd, bias ? bk : NULL, "v0", kvd);
    act(g, b->tensors, "v", kvv);
    psim_gb_op(g, b->ops, "v_view", "reshape", "v0", "v");
    cJSON *a = tagged(t, psim_gb_op(g, b->ops, "attention", "attention", "q k v", "ctx"));
    psim_gb_bool(g, a, "causal", causal);
    psim_gb_bool(g, a, "flash", true);
    return;
  }
  linear(t, "qkv", x, "hidden qkv heads head_dim", bias ? "qkv heads head_dim" : NULL, "qkv",
         "batch seq qkv heads head_dim");
  const char *loc[] = {"q", "k0", "v0", "k", "v"};
  for (int i = 0; i < 5; i++)
    act(g, b->tensors, loc[i], i < 3 ? bhsd : "batch seq_kv heads head_dim");
  psim_gb_str(g, psim_gb_op(g, b->ops, "qkv_split", "split", "qkv", "q k0 v0"), "axis", "qkv");
  psim_gb_op(g, b->ops, "k_view", "reshape", "k0", "k");
  psim_gb_op(g, b->ops, "v_view", "reshape", "v0", "v");
  act(g, b->tensors, "scores", "batch heads seq seq_kv");
  act(g, b->tensors, "probs", "batch heads seq seq_kv");
  act(g, b->tensors, "probs_d", "batch heads seq seq_kv");
  tagged(t, psim_gb_op(g, b->ops, "scores", "matmul", "q k", "scores"));
  psim_gb_str(g, tagged(t, psim_gb_op(g, b->ops, "softmax", "softmax", "scores", "probs")), "axis",
              "seq_kv");
  tagged(t, psim_gb_op(g, b->ops, "attn_dropout", "dropout", "probs", "probs_d"));
  tagged(t, psim_gb_op(g, b->ops, "context", "matmul", "probs_d v", "ctx"));
}

/* Feed-forward of x into y: gelu MLP, SwiGLU (llama) or experts (moe). */
static void tf_ffn_part(tf *t, const char *x, const char *y) {
  psim_gb *g = t->g;
  psim_gb_blk *b = &t->b;
  const char *bsh = "batch seq hidden", *bsf = "batch seq ffn";
  if (t->fam == TF_LLAMA) {
    linear(t, "gate", x, "hidden ffn", NULL, "gate", bsf);
    linear(t, "up", x, "hidden ffn", NULL, "up", bsf);
    act(g, b->tensors, "act", bsf);
    psim_gb_ew(g, b->ops, "swiglu", "swiglu", "gate up", "act");
    linear(t, "down", "act", "ffn hidden", NULL, y, bsh);
    return;
  }
  if (t->fam == TF_MOE) {
    const char *becf = "batch expert capacity ffn", *bech = "batch expert capacity hidden";
    linear(t, "router", x, "hidden expert", NULL, "router", "batch seq expert");
    act(g, b->tensors, "gates", "batch seq expert");
    psim_gb_str(g, psim_gb_op(g, b->ops, "gates", "softmax", "router", "gates"), "axis", "expert");
    act(g, b->tensors, "xe", bech);
    cJSON *d = psim_gb_op(g, b->ops, "dispatch", "dispatch", "ln2 gates", "xe");
    psim_gb_num(g, d, "top_k", (double)t->o->top_k);
    linear(t, "fc1", "xe", "expert hidden ffn", "expert ffn", "he", becf);
    act(g, b->tensors, "ge", becf);
    psim_gb_ew(g, b->ops, "gelu", "gelu", "he", "ge");
    linear(t, "fc2", "ge", "expert ffn hidden", "expert hidden", "ye", bech);
    act(g, b->tensors, y, bsh);
    cJSON *c = psim_gb_op(g, b->ops, "combine", "combine", "ye gates", y);
    psim_gb_num(g, c, "top_k", (double)t->o->top_k);
    if (t->o->dropless) {
      psim_gb_bool(g, d, "dropless", true);
      psim_gb_bool(g, c, "dropless", true);
    }
    return;
  }
  linear(t, "fc1", x, "hidden ffn", "ffn", "h1", bsf);
  act(g, b->tensors, "h2", bsf);
  psim_gb_ew(g, b->ops, "gelu", "gelu", "h1", "h2");
  linear(t, "fc2", "h2", "ffn hidden", "hidden", y, bsh);
}

/* One pre-LN transformer layer x -> y (Megatron-LM's GPT/BERT layer; LLaMA
 * with RMSNorm, SwiGLU, no biases or dropout). */
static void tf_layer(tf *t) {
  psim_gb *g = t->g;
  psim_gb_blk *b = &t->b;
  const char *bsh = "batch seq hidden";
  bool drop = t->fam != TF_LLAMA && t->fam != TF_MPT;
  const char *names_[] = {"ln1", "res1", "ln2", "y"};
  for (int i = 0; i < 4; i++)
    act(g, b->tensors, names_[i], bsh);
  tf_norm(t, b->weights, b->ops, "ln1", "x", "ln1");
  tf_qkv_core(t, "ln1");
  linear(t, "proj", "ctx", "heads head_dim hidden", t->fam != TF_LLAMA ? "hidden" : NULL, "attn",
         bsh);
  if (drop) {
    act(g, b->tensors, "attn_d", bsh);
    psim_gb_op(g, b->ops, "attn_out_dropout", "dropout", "attn", "attn_d");
  }
  psim_gb_ew(g, b->ops, "residual1", "add", drop ? "x attn_d" : "x attn", "res1");
  tf_norm(t, b->weights, b->ops, "ln2", "res1", "ln2");
  tf_ffn_part(t, "ln2", "h3");
  if (drop) {
    act(g, b->tensors, "h3_d", bsh);
    psim_gb_op(g, b->ops, "ffn_dropout", "dropout", "h3", "h3_d");
  }
  psim_gb_ew(g, b->ops, "residual2", "add", drop ? "res1 h3_d" : "res1 h3", "y");
}

/* Embeddings: word (+ learned positions, dropout, BERT's layer norm). */
static void tf_embed(tf *t) {
  psim_gb *g = t->g;
  const char *bsh = "batch seq hidden";
  psim_gb_tensor(g, g->inputs, "tokens", "batch seq", "int32");
  psim_gb_tensor(g, g->weights, "wte", "vocab hidden", NULL);
  act(g, g->tensors, "emb_tok", bsh);
  psim_gb_op(g, g->ops, "embed", "embedding", "tokens wte", "emb_tok");
  if (t->fam == TF_LLAMA)
    return;
  psim_gb_tensor(g, g->weights, "wpe", "seq hidden", NULL);
  act(g, g->tensors, "emb_pos", bsh);
  psim_gb_ew(g, g->ops, "position", "add", "emb_tok wpe", "emb_pos");
  if (t->fam == TF_MPT)
    return;
  act(g, g->tensors, "emb", bsh);
  if (t->fam == TF_BERT) {
    act(g, g->tensors, "emb_ln", bsh);
    tf_norm(t, g->weights, g->ops, "emb_norm", "emb_pos", "emb_ln");
  }
  psim_gb_op(g, g->ops, "embed_dropout", "dropout", t->fam == TF_BERT ? "emb_ln" : "emb_pos",
             "emb");
}

/* Final norm, (BERT: MLM transform), logits against the tied or separate
 * output matrix, cross entropy. */
static void tf_head(tf *t) {
  psim_gb *g = t->g;
  const char *bsh = "batch seq hidden";
  act(g, g->tensors, "final", bsh);
  tf_norm(t, g->weights, g->ops, "final_norm", "x_out", "final");
  const char *h = "final";
  if (t->fam == TF_BERT) { /* BERT's MLM head: dense, gelu, layer norm (Devlin et al. 2019) */
    psim_gb_dim(g, "hidden_t", t->o->hidden, NULL);
    psim_gb_tensor(g, g->weights, "w_mlm", "hidden hidden_t", NULL);
    psim_gb_tensor(g, g->weights, "b_mlm", "hidden_t", NULL);
    act(g, g->tensors, "mlm_d", "batch seq hidden_t");
    act(g, g->tensors, "mlm_a", "batch seq hidden_t");
    act(g, g->tensors, "mlm_v", bsh);
    act(g, g->tensors, "mlm", bsh);
    psim_gb_op(g, g->ops, "mlm_dense", "matmul", "final w_mlm b_mlm", "mlm_d");
    psim_gb_ew(g, g->ops, "mlm_gelu", "gelu", "mlm_d", "mlm_a");
    psim_gb_op(g, g->ops, "mlm_view", "reshape", "mlm_a", "mlm_v");
    tf_norm(t, g->weights, g->ops, "mlm_norm", "mlm_v", "mlm");
    h = "mlm";
  }
  const char *wout = "wte";
  if (t->fam == TF_LLAMA) {
    psim_gb_tensor(g, g->weights, "w_out", "vocab hidden", NULL);
    wout = "w_out";
  }
  char in[128];
  snprintf(in, sizeof in, "%s %s", h, wout);
  act(g, g->tensors, "logits", "batch seq vocab");
  psim_gb_op(g, g->ops, "logits", "matmul", in, "logits");
  psim_gb_tensor(g, g->inputs, "labels", "batch seq", "int32");
  psim_gb_tensor(g, g->tensors, "loss", "batch seq", "fp32");
  psim_gb_op(g, g->ops, "loss", "cross_entropy", "logits labels", "loss");
}

static psim_status gen_tf(const psim_gen_tf_opts *o, tf_family fam, const char *defname,
                          struct cJSON **out) {
  PSIM_CHECK(tf_check(o, fam));
  psim_gb g;
  tf t = {.g = &g, .o = o, .fam = fam};
  psim_gb_start(&g, o->name ? o->name : defname, o->dtype);
  tf_dims(&t);
  if (fam == TF_MOE) {
    /* dropless: the mean routed tokens per expert (the capacity factor does not apply) */
    double cf = o->dropless ? 1.0 : o->capacity_factor;
    double cap = ceil(cf * (double)o->top_k * (double)o->seq / (double)o->experts);
    psim_gb_dim(&g, "expert", o->experts, "expert");
    psim_gb_dim(&g, "capacity", (int64_t)cap, NULL);
  }
  tf_embed(&t);
  act(&g, g.tensors, "x_out", "batch seq hidden");
  const char *in = fam == TF_LLAMA ? "emb_tok" : fam == TF_MPT ? "emb_pos" : "emb";
  t.b = psim_gb_block(&g, "layer", o->layers, "x", "y", in, "x_out");
  tf_layer(&t);
  tf_head(&t);
  return psim_gb_finish(&g, out);
}

psim_status psim_gen_gpt(const psim_gen_tf_opts *o, struct cJSON **out) {
  return gen_tf(o, TF_GPT, "gpt", out);
}
psim_status psim_gen_llama(const psim_gen_tf_opts *o, struct cJSON **out) {
  return gen_tf(o, TF_LLAMA, "llama", out);
}
psim_status psim_gen_mpt(const psim_gen_tf_opts *o, struct cJSON **out) {
  return gen_tf(o, TF_MPT, "mpt", out);
}
psim_status psim_gen_bert(const psim_gen_tf_opts *o, struct cJSON **out) {
  return gen_tf(o, TF_BERT, "bert", out);
}
psim_status psim_gen_moe(const psim_gen_tf_opts *o, struct cJSON **out) {
  return gen_tf(o, TF_MOE, "moe", out);
}
