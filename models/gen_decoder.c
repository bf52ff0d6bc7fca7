/* gen_decoder.c - the decoder families of 2024-2026 (generators.h): qwen3, qwen3-moe, mixtral,
 * deepseek-v3, gpt-oss. One generator with options: grouped-query or multi-head latent
 * attention, qk-norm, dense or mixture-of-experts SwiGLU FFNs (router, auxiliary loss,
 * dispatch, grouped expert GEMMs over the expert dim, combine), shared experts, leading dense
 * layers and DeepSeek's multi-token prediction. The recipes' figures are in gen_recipes.c. */
#include "models/generators.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/gen_impl.h"

typedef struct dec {
  psim_gb *g;
  const psim_gen_tf_opts *o;
  psim_gb_blk b;
  const char *kvh; /* the key/value heads dim */
  const char *dt;  /* dtype of the linear layers' outputs (NULL: the model's) */
} dec;

static bool is_moe(const psim_gen_tf_opts *o) {
  return o->moe_ffn > 0;
}

static bool is_mla(const psim_gen_tf_opts *o) {
  return o->kv_lora > 0;
}

static psim_status dec_check_moe(const psim_gen_tf_opts *o) {
  const int64_t big = (int64_t)1 << 40;
  PSIM_CHECK(psim_gb_positive("experts", o->experts, 1 << 20));
  if (o->top_k < 1 || o->top_k > o->experts)
    return psim_error(PSIM_EINPUT, "--top-k %lld must be in [1, --experts %lld]",
                      (long long)o->top_k, (long long)o->experts);
  PSIM_CHECK(psim_gb_positive("moe-ffn", o->moe_ffn, big));
  if (o->shared_ffn)
    PSIM_CHECK(psim_gb_positive("shared-ffn", o->shared_ffn, big));
  if (!(o->capacity_factor >= 0 && o->capacity_factor <= 1e3))
    return psim_error(PSIM_EINPUT, "--capacity-factor must be in [0, 1000] (0: dropless)");
  if (o->dense_layers < 0 || o->dense_layers >= o->layers)
    return psim_error(PSIM_EINPUT, "--dense-layers %lld must be in [0, --layers %lld)",
                      (long long)o->dense_layers, (long long)o->layers);
  return PSIM_OK;
}

static psim_status dec_check_attention(const psim_gen_tf_opts *o) {
  const int64_t big = (int64_t)1 << 40;
  if (o->head_dim)
    PSIM_CHECK(psim_gb_positive("head-dim", o->head_dim, big));
  else if (o->hidden % o->heads)
    return psim_error(PSIM_EINPUT,
                      "--hidden %lld is not a multiple of --heads %lld (give --head-dim)",
                      (long long)o->hidden, (long long)o->heads);
  if (o->kv_heads && (o->kv_heads < 1 || o->heads % o->kv_heads))
    return psim_error(PSIM_EINPUT, "--kv-heads %lld must divide --heads %lld",
                      (long long)o->kv_heads, (long long)o->heads);
  if (!is_mla(o))
    return o->q_lora || o->qk_rope
               ? psim_error(PSIM_EINPUT, "--q-lora and --qk-rope need --kv-lora (latent attention)")
               : PSIM_OK;
  PSIM_CHECK(psim_gb_positive("kv-lora", o->kv_lora, big));
  PSIM_CHECK(psim_gb_positive("qk-rope", o->qk_rope, big));
  if (o->kv_heads && o->kv_heads != o->heads)
    return psim_error(PSIM_EINPUT, "--kv-heads: latent attention (--kv-lora) has as many key/value "
                                   "heads as query heads");
  if (o->qk_norm || o->bias)
    return psim_error(PSIM_EINPUT, "--qk-norm and --bias do not apply to latent attention");
  return PSIM_OK;
}

static psim_status dec_check(const psim_gen_tf_opts *o) {
  const int64_t big = (int64_t)1 << 40;
  PSIM_CHECK(psim_gb_positive("layers", o->layers, 1000000));
  PSIM_CHECK(psim_gb_positive("hidden", o->hidden, big));
  PSIM_CHECK(psim_gb_positive("heads", o->heads, big));
  PSIM_CHECK(psim_gb_positive("seq", o->seq, big));
  PSIM_CHECK(psim_gb_positive("vocab", o->vocab, big));
  PSIM_CHECK(psim_gb_positive("batch", o->batch, big));
  PSIM_CHECK(psim_gb_check_dtype(o->dtype));
  if (o->linear_dtype)
    PSIM_CHECK(psim_gb_check_dtype(o->linear_dtype));
  if (!is_moe(o) || o->dense_layers)
    PSIM_CHECK(psim_gb_positive("ffn", o->ffn, big));
  if (o->mtp < 0 || o->mtp > 64)
    return psim_error(PSIM_EINPUT, "--mtp %lld out of range [0, 64]", (long long)o->mtp);
  PSIM_CHECK(dec_check_attention(o));
  return is_moe(o) ? dec_check_moe(o) : PSIM_OK;
}

/* Tokens per expert slot per sequence: the mean routed tokens top_k * seq / experts when
 * dropless, else that times the capacity factor, rounded up (Fedus et al. 2021, eq. 3). */
static int64_t dec_capacity(const psim_gen_tf_opts *o) {
  double f = o->dropless || o->capacity_factor == 0 ? 1.0 : o->capacity_factor;
  return (int64_t)ceil(f * (double)o->top_k * (double)o->seq / (double)o->experts);
}

static void dec_dims(dec *t) {
  psim_gb *g = t->g;
  const psim_gen_tf_opts *o = t->o;
  int64_t hd = o->head_dim ? o->head_dim : o->hidden / o->heads;
  psim_gb_dim(g, "batch", o->batch, "batch");
  psim_gb_dim(g, "seq", o->seq, "sequence");
  psim_gb_dim(g, "hidden", o->hidden, "hidden");
  psim_gb_dim(g, "heads", o->heads, "heads");
  /* MLA: the attention head is the non-rotary part (nope) plus the rotary part */
  psim_gb_dim(g, "head_dim", hd + (is_mla(o) ? o->qk_rope : 0), "head_dim");
  psim_gb_dim(g, "vocab", o->vocab, "vocab");
  psim_gb_dim(g, "seq_kv", o->seq, NULL);
  if (o->ffn)
    psim_gb_dim(g, "ffn", o->ffn, "ffn");
  t->kvh = "heads";
  if (o->kv_heads && o->kv_heads != o->heads) {
    psim_gb_dim(g, "kv_heads", o->kv_heads, "heads");
    t->kvh = "kv_heads";
  }
  if (is_mla(o)) {
    psim_gb_dim(g, "nope", hd, NULL);
    psim_gb_dim(g, "rope", o->qk_rope, NULL);
    psim_gb_dim(g, "kv_lora", o->kv_lora, NULL);
    psim_gb_dim(g, "kv_a", o->kv_lora + o->qk_rope, NULL);
    psim_gb_dim(g, "kv_b", 2 * hd, NULL);
    if (o->q_lora)
      psim_gb_dim(g, "q_lora", o->q_lora, NULL);
  }
  if (is_moe(o)) {
    psim_gb_dim(g, "expert", o->experts, "expert");
    psim_gb_dim(g, "capacity", dec_capacity(o), NULL);
    psim_gb_dim(g, "moe_ffn", o->moe_ffn, "ffn");
    if (o->shared_ffn)
      psim_gb_dim(g, "shared_ffn", o->shared_ffn, "ffn");
  }
  if (o->mtp)
    psim_gb_dim(g, "mtp_cat", 2 * o->hidden, NULL);
}

static void act(dec *t, const char *name, const char *dims) {
  psim_gb_tensor(t->g, t->b.tensors, name, dims, NULL);
}

static void linear(dec *t, const char *name, const char *x, const char *wdims, const char *bdims,
                   const char *y, const char *ydims) {
  psim_gb_linear(t->g, &t->b, name, x, wdims, bdims, y, ydims, t->dt);
}

/* RMSNorm of x into y (declared with dims ydims) with the gain NAME_g over dim. */
static void norm(dec *t, const char *name, const char *x, const char *y, const char *ydims,
                 const char *dim) {
  char gn[96], in[256];
  snprintf(gn, sizeof gn, "%s_g", name);
  psim_gb_tensor(t->g, t->b.weights, gn, dim, NULL);
  if (ydims)
    act(t, y, ydims);
  snprintf(in, sizeof in, "%s %s", x, gn);
  cJSON *op = psim_gb_op(t->g, t->b.ops, name, "rmsnorm", in, y);
  if (strcmp(dim, "hidden") != 0)
    psim_gb_names(t->g, op, "axis", dim);
}

static void view(dec *t, const char *name, const char *x, const char *y, const char *ydims) {
  act(t, y, ydims);
  psim_gb_op(t->g, t->b.ops, name, "reshape", x, y);
}

static void split(dec *t, const char *name, const char *x, const char *axis, const char *outs) {
  psim_gb_str(t->g, psim_gb_op(t->g, t->b.ops, name, "split", x, outs), "axis", axis);
}

static void concat(dec *t, const char *name, const char *ins, const char *axis, const char *y) {
  psim_gb_str(t->g, psim_gb_op(t->g, t->b.ops, name, "concat", ins, y), "axis", axis);
}

/* Fused causal attention of q, k, v into ctx [batch seq heads head_dim]. */
static void attention(dec *t, const char *q) {
  char in[128];
  snprintf(in, sizeof in, "%s k v", q);
  act(t, "ctx", "batch seq heads head_dim");
  cJSON *a = psim_gb_op(t->g, t->b.ops, "attention", "attention", in, "ctx");
  psim_gb_str(t->g, a, "tag", "attn_core");
  psim_gb_bool(t->g, a, "causal", true);
  psim_gb_bool(t->g, a, "flash", true);
}

/* Grouped-query attention of x (Qwen3, Mixtral, GPT-OSS): q, k, v projections, qk-norm
 * over head_dim (Qwen3), k and v viewed onto seq_kv; output projection into attn. */
static void gqa(dec *t, const char *x) {
  const psim_gen_tf_opts *o = t->o;
  char kd[96], kvd[96], kvv[96], bk[64];
  snprintf(kd, sizeof kd, "hidden %s head_dim", t->kvh);
  snprintf(kvd, sizeof kvd, "batch seq %s head_dim", t->kvh);
  snprintf(kvv, sizeof kvv, "batch seq_kv %s head_dim", t->kvh);
  snprintf(bk, sizeof bk, "%s head_dim", t->kvh);
  const char *bshd = "batch seq heads head_dim";
  linear(t, "q", x, "hidden heads head_dim", o->bias ? "heads head_dim" : NULL, "q", bshd);
  linear(t, "k", x, kd, o->bias ? bk : NULL, "k0", kvd);
  if (o->qk_norm) {
    norm(t, "q_norm", "q", "qn", bshd, "head_dim");
    norm(t, "k_norm", "k0", "k0n", kvd, "head_dim");
  }
  view(t, "k_view", o->qk_norm ? "k0n" : "k0", "k", kvv);
  linear(t, "v", x, kd, o->bias ? bk : NULL, "v0", kvd);
  view(t, "v_view", "v0", "v", kvv);
  attention(t, o->qk_norm ? "qn" : "q");
  linear(t, "proj", "ctx", "heads head_dim hidden", o->bias ? "hidden" : NULL, "attn",
         "batch seq hidden");
}

/* Multi-head latent attention of x (DeepSeek-V2/V3, arXiv:2405.04434 sec. 2.1): q through
 * a low-rank q_a/q_b pair, keys and values from one latent (kv_a) expanded by kv_b, the
 * rotary key part shared by the heads. The attention runs on the q/k head (nope + rope) with
 * v padded to it, as HF's DeepSeek model does for FlashAttention-2 (its output is sliced
 * back); the padding costs attention FLOPs (v head 192, not 128), no parameters. */
static void mla(dec *t, const char *x) {
  const char *bshd = "batch seq heads head_dim", *bshn = "batch seq heads nope";
  const char *q = "q";
  if (t->o->q_lora) {
    linear(t, "q_a", x, "hidden q_lora", NULL, "qa", "batch seq q_lora");
    norm(t, "q_a_norm", "qa", "qan", "batch seq q_lora", "q_lora");
    linear(t, "q_b", "qan", "q_lora heads head_dim", NULL, q, bshd);
  } else {
    linear(t, "q", x, "hidden heads head_dim", NULL, q, bshd);
  }
  linear(t, "kv_a", x, "hidden kv_a", NULL, "kva", "batch seq kv_a");
  act(t, "ckv", "batch seq kv_lora");
  act(t, "kpe", "batch seq rope");
  split(t, "kv_a_split", "kva", "kv_a", "ckv kpe");
  norm(t, "kv_norm", "ckv", "ckvn", "batch seq kv_lora", "kv_lora");
  linear(t, "kv_b", "ckvn", "kv_lora heads kv_b", NULL, "kvb", "batch seq heads kv_b");
  act(t, "knope", bshn);
  act(t, "v0", bshn);
  split(t, "kv_b_split", "kvb", "kv_b", "knope v0");
  act(t, "kpe_h", "batch seq heads rope"); /* the rotary key, one for all heads */
  psim_gb_ew(t->g, t->b.ops, "rope_k", "copy", "kpe", "kpe_h");
  act(t, "k0", bshd);
  concat(t, "k_cat", "knope kpe_h", "head_dim", "k0");
  act(t, "v1", bshd);
  concat(t, "v_pad", "v0 kpe_h", "head_dim", "v1");
  view(t, "k_view", "k0", "k", "batch seq_kv heads head_dim");
  view(t, "v_view", "v1", "v", "batch seq_kv heads head_dim");
  attention(t, q);
  act(t, "ctx_v", bshn);
  act(t, "ctx_pad", "batch seq heads rope");
  split(t, "ctx_split", "ctx", "head_dim", "ctx_v ctx_pad");
  linear(t, "proj", "ctx_v", "heads nope hidden", NULL, "attn", "batch seq hidden");
}

/* SwiGLU FFN PREFIX over width dim f: y [lead hidden] = down(silu(gate x) * up x), with the
 * weights over wlead (the expert dim for the grouped expert GEMMs, "" for dense). */
static void swiglu(dec *t, const char *prefix, const char *x, const char *lead, const char *wlead,
                   const char *f, bool bias, const char *y) {
  char n[4][64], wd[3][96], bd[2][96], ad[128], yd[128];
  const char *parts[4] = {"gate", "up", "act", "down"};
  for (int i = 0; i < 4; i++)
    snprintf(n[i], sizeof n[i], "%s%s", prefix, parts[i]);
  snprintf(wd[0], sizeof wd[0], "%s%shidden %s", wlead, *wlead ? " " : "", f);
  snprintf(wd[1], sizeof wd[1], "%s%s%s hidden", wlead, *wlead ? " " : "", f);
  snprintf(bd[0], sizeof bd[0], "%s%s%s", wlead, *wlead ? " " : "", f);
  snprintf(bd[1], sizeof bd[1], "%s%shidden", wlead, *wlead ? " " : "");
  snprintf(ad, sizeof ad, "%s %s", lead, f);
  snprintf(yd, sizeof yd, "%s hidden", lead);
  linear(t, n[0], x, wd[0], bias ? bd[0] : NULL, n[0], ad);
  linear(t, n[1], x, wd[0], bias ? bd[0] : NULL, n[1], ad);
  char in[160];
  snprintf(in, sizeof in, "%s %s", n[0], n[1]);
  act(t, n[2], ad);
  psim_gb_ew(t->g, t->b.ops, n[2], "swiglu", in, n[2]);
  linear(t, n[3], n[2], wd[1], bias ? bd[1] : NULL, y, yd);
}

/* Mixture of experts of x into y: router, gate scores (softmax or sigmoid), the auxiliary
 * load-balancing loss term (Fedus et al. 2021 eq. 4: per-token, per-expert products), dispatch
 * to [batch expert capacity hidden], grouped expert SwiGLU GEMMs, combine; a shared expert
 * beside them (DeepSeek-V3) is added to the combined output. */
static void experts(dec *t, const char *x, const char *y) {
  psim_gb *g = t->g;
  const psim_gen_tf_opts *o = t->o;
  const char *bse = "batch seq expert", *bech = "batch expert capacity hidden";
  linear(t, "router", x, "hidden expert", o->bias ? "expert" : NULL, "router", bse);
  act(t, "gates", bse);
  if (o->sigmoid_router)
    psim_gb_ew(g, t->b.ops, "gates", "sigmoid", "router", "gates");
  else
    psim_gb_str(g, psim_gb_op(g, t->b.ops, "gates", "softmax", "router", "gates"), "axis",
                "expert");
  act(t, "aux", bse);
  psim_gb_ew(g, t->b.ops, "aux_loss", "mul", "gates router", "aux");
  bool dropless = o->dropless || o->capacity_factor == 0;
  char in[128];
  snprintf(in, sizeof in, "%s gates", x);
  act(t, "xe", bech);
  cJSON *d = psim_gb_op(g, t->b.ops, "dispatch", "dispatch", in, "xe");
  swiglu(t, "e_", "xe", "batch expert capacity", "expert", "moe_ffn", o->bias, "ye");
  const char *moe = o->shared_ffn ? "moe" : y;
  act(t, moe, "batch seq hidden");
  cJSON *c = psim_gb_op(g, t->b.ops, "combine", "combine", "ye gates", moe);
  for (int i = 0; i < 2; i++) {
    psim_gb_num(g, i ? c : d, "top_k", (double)o->top_k);
    if (dropless)
      psim_gb_bool(g, i ? c : d, "dropless", true);
  }
  if (!o->shared_ffn)
    return;
  swiglu(t, "shared_", x, "batch seq", "", "shared_ffn", false, "shared");
  act(t, y, "batch seq hidden");
  psim_gb_ew(g, t->b.ops, "shared_add", "add", "moe shared", y);
}

/* One pre-norm decoder layer x -> y, dense (SwiGLU of width ffn) or mixture of experts. */
static void layer(dec *t, bool moe) {
  const char *bsh = "batch seq hidden";
  norm(t, "ln1", "x", "ln1", bsh, "hidden");
  if (is_mla(t->o))
    mla(t, "ln1");
  else
    gqa(t, "ln1");
  act(t, "res1", bsh);
  psim_gb_ew(t->g, t->b.ops, "residual1", "add", "x attn", "res1");
  norm(t, "ln2", "res1", "ln2", bsh, "hidden");
  if (moe)
    experts(t, "ln2", "h3");
  else
    swiglu(t, "", "ln2", "batch seq", "", "ffn", false, "h3");
  act(t, "y", bsh);
  psim_gb_ew(t->g, t->b.ops, "residual2", "add", "res1 h3", "y");
}

/* Logits of x against the untied output matrix and the cross entropy, named PREFIX*. */
static void head(dec *t, const char *prefix, const char *x) {
  char n[3][64];
  snprintf(n[0], sizeof n[0], "%sfinal_norm", prefix);
  snprintf(n[1], sizeof n[1], "%slogits", prefix);
  snprintf(n[2], sizeof n[2], "%sloss", prefix);
  norm(t, n[0], x, n[0], "batch seq hidden", "hidden");
  char in[128];
  snprintf(in, sizeof in, "%s w_out", n[0]);
  act(t, n[1], "batch seq vocab");
  psim_gb_op(t->g, t->b.ops, n[1], "matmul", in, n[1]);
  psim_gb_tensor(t->g, t->b.tensors, n[2], "batch seq", "fp32");
  snprintf(in, sizeof in, "%s labels", n[1]);
  psim_gb_op(t->g, t->b.ops, n[2], "cross_entropy", in, n[2]);
}

/* DeepSeek-V3's multi-token prediction modules (arXiv:2412.19437 sec. 2.2): RMSNorm of the
 * previous depth's hidden state and of the (shared) embedding of the next token, their
 * concatenation projected back to hidden, one MoE layer, the shared output head. */
static void mtp(dec *t) {
  t->b = psim_gb_block(t->g, "mtp", t->o->mtp, "h", "y", "x_out", "mtp_out");
  const char *bsh = "batch seq hidden";
  norm(t, "hnorm", "h", "hn", bsh, "hidden");
  norm(t, "enorm", "emb_tok", "en", bsh, "hidden");
  act(t, "cat", "batch seq mtp_cat");
  concat(t, "mtp_cat", "en hn", "mtp_cat", "cat");
  linear(t, "eh_proj", "cat", "mtp_cat hidden", NULL, "x", bsh);
  layer(t, is_moe(t->o));
  head(t, "mtp_", "y");
}

psim_status psim_gen_decoder(const psim_gen_tf_opts *o, struct cJSON **out) {
  PSIM_CHECK(dec_check(o));
  psim_gb g;
  dec t = {.g = &g, .o = o, .dt = o->linear_dtype};
  psim_gb_start(&g, o->name ? o->name : "decoder", o->dtype);
  dec_dims(&t);
  psim_gb_tensor(&g, g.inputs, "tokens", "batch seq", "int32");
  psim_gb_tensor(&g, g.inputs, "labels", "batch seq", "int32");
  psim_gb_tensor(&g, g.weights, "wte", "vocab hidden", NULL);
  psim_gb_tensor(&g, g.weights, "w_out", "vocab hidden", NULL);
  psim_gb_tensor(&g, g.tensors, "emb_tok", "batch seq hidden", NULL);
  psim_gb_op(&g, g.ops, "embed", "embedding", "tokens wte", "emb_tok");
  const char *in = "emb_tok";
  int64_t dense = is_moe(o) ? o->dense_layers : o->layers;
  if (dense > 0 && is_moe(o)) {
    t.b = psim_gb_block(&g, "dense", dense, "x", "y", in, "x_dense");
    layer(&t, false);
    in = "x_dense";
  }
  psim_gb_tensor(&g, g.tensors, "x_out", "batch seq hidden", NULL);
  t.b = psim_gb_block(&g, "layer", o->layers - (is_moe(o) ? dense : 0), "x", "y", in, "x_out");
  layer(&t, is_moe(o));
  t.b = (psim_gb_blk){.weights = g.weights, .tensors = g.tensors, .ops = g.ops};
  head(&t, "", "x_out");
  if (o->mtp)
    mtp(&t);
  return psim_gb_finish(&g, out);
}
