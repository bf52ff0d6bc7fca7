/* generators.c - plansim.model/1 documents for common model families.
 *
 * A small builder with a sticky status writes dims, tensors and ops; lists of
 * names are written as space-separated strings ("batch seq hidden").
 * Parameter counts are checked by tests/unit/test_model.c against the
 * published formulas (Narayanan et al. 2021, eq. 2; LLaMA-2 7B = 6.74e9). */
#include "models/generators.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sim/core/json.h"
#include "sim/ir/model.h"

typedef struct gb {
  cJSON *root, *dims, *ops;
  cJSON *inputs, *weights, *tensors;
  psim_status st;
} gb;

typedef struct blk {
  cJSON *weights, *tensors, *ops;
} blk;

/* Appends a space (unless buf is empty) and word to buf of capacity cap. */
static void append(char *buf, size_t cap, const char *word) {
  size_t n = strlen(buf), w = strlen(word);
  if (n && n + 1 < cap)
    buf[n++] = ' ';
  if (n + w >= cap)
    w = n < cap ? cap - 1 - n : 0;
  memcpy(buf + n, word, w);
  buf[n + w] = '\0';
}

static void nomem(gb *g) {
  if (g->st == PSIM_OK)
    g->st = psim_error(PSIM_ENOMEM, "out of memory building a model");
}

static cJSON *obj_in(gb *g, cJSON *parent, const char *key, bool array) {
  cJSON *o = array ? cJSON_AddArrayToObject(parent, key) : cJSON_AddObjectToObject(parent, key);
  if (!o)
    nomem(g);
  return o;
}

static void put_str(gb *g, cJSON *o, const char *k, const char *v) {
  if (o && !cJSON_AddStringToObject(o, k, v))
    nomem(g);
}
static void put_num(gb *g, cJSON *o, const char *k, double v) {
  if (o && !cJSON_AddNumberToObject(o, k, v))
    nomem(g);
}
static void put_bool(gb *g, cJSON *o, const char *k, bool v) {
  if (o && !cJSON_AddBoolToObject(o, k, v))
    nomem(g);
}

/* Array of the space-separated names in list. */
static cJSON *names(gb *g, cJSON *o, const char *key, const char *list) {
  cJSON *a = o ? obj_in(g, o, key, true) : NULL;
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *save = NULL, *t = strtok_r(buf, " ", &save); a && t; t = strtok_r(NULL, " ", &save))
    if (!cJSON_AddItemToArray(a, cJSON_CreateString(t)))
      nomem(g);
  return a;
}

static void pair(gb *g, cJSON *o, const char *key, int64_t h, int64_t w) {
  cJSON *a = o ? obj_in(g, o, key, true) : NULL;
  if (a && (!cJSON_AddItemToArray(a, cJSON_CreateNumber((double)h)) ||
            !cJSON_AddItemToArray(a, cJSON_CreateNumber((double)w))))
    nomem(g);
}

/* Declares dim name (once). */
static void dim(gb *g, const char *name, int64_t size, const char *role) {
  if (!g->dims || cJSON_GetObjectItemCaseSensitive(g->dims, name))
    return;
  cJSON *d = obj_in(g, g->dims, name, false);
  put_num(g, d, "size", (double)size);
  if (role)
    put_str(g, d, "role", role);
}

static void tensor(gb *g, cJSON *group, const char *name, const char *dims, const char *dtype) {
  cJSON *t = group ? obj_in(g, group, name, false) : NULL;
  names(g, t, "dims", dims);
  if (dtype)
    put_str(g, t, "dtype", dtype);
}

static cJSON *op(gb *g, cJSON *ops, const char *name, const char *kind, const char *in,
                 const char *out) {
  cJSON *o = cJSON_CreateObject();
  if (!o || !ops || !cJSON_AddItemToArray(ops, o)) {
    cJSON_Delete(o);
    nomem(g);
    return NULL;
  }
  put_str(g, o, "name", name);
  put_str(g, o, "kind", kind);
  names(g, o, "in", in);
  names(g, o, "out", out);
  return o;
}

static cJSON *ew(gb *g, cJSON *ops, const char *name, const char *fn, const char *in,
                 const char *out) {
  cJSON *o = op(g, ops, name, "elementwise", in, out);
  put_str(g, o, "fn", fn);
  return o;
}

static blk block(gb *g, const char *name, int64_t repeat, const char *inputs, const char *outputs,
                 const char *in, const char *out) {
  blk b = {0};
  cJSON *o = cJSON_CreateObject();
  if (!o || !g->ops || !cJSON_AddItemToArray(g->ops, o)) {
    cJSON_Delete(o);
    nomem(g);
    return b;
  }
  put_str(g, o, "block", name);
  put_num(g, o, "repeat", (double)repeat);
  names(g, o, "inputs", inputs);
  names(g, o, "outputs", outputs);
  names(g, o, "in", in);
  names(g, o, "out", out);
  b.weights = obj_in(g, o, "weights", false);
  b.tensors = obj_in(g, o, "tensors", false);
  b.ops = obj_in(g, o, "ops", true);
  return b;
}

static void gb_start(gb *g, const char *name, const char *dtype) {
  memset(g, 0, sizeof *g);
  g->root = cJSON_CreateObject();
  if (!g->root) {
    nomem(g);
    return;
  }
  put_str(g, g->root, "format", "plansim.model/1");
  put_str(g, g->root, "name", name);
  put_str(g, g->root, "dtype", dtype);
  g->dims = obj_in(g, g->root, "dims", false);
  g->inputs = obj_in(g, g->root, "inputs", false);
  g->weights = obj_in(g, g->root, "weights", false);
  g->tensors = obj_in(g, g->root, "tensors", false);
  g->ops = obj_in(g, g->root, "ops", true);
}

/* Hands the document out only when the model loader takes it: options each
 * in range can still combine into a model it refuses (a tensor of more than
 * 2^64 elements), and a generator must not write a file `check` rejects. */
static psim_status gb_finish(gb *g, struct cJSON **out) {
  if (g->st == PSIM_OK) {
    psim_model m;
    psim_model_init(&m);
    if (psim_model_from_json("generated model", g->root, &m) != PSIM_OK) {
      char why[512];
      snprintf(why, sizeof why, "%s", psim_error_message());
      g->st = psim_error(PSIM_EINPUT, "these options give a model plansim cannot load: %s", why);
    }
    psim_model_destroy(&m);
  }
  if (g->st != PSIM_OK) {
    cJSON_Delete(g->root);
    return g->st;
  }
  *out = g->root;
  return PSIM_OK;
}

static psim_status check_dtype(const char *dt) {
  psim_dtype t;
  if (psim_dtype_parse(dt, &t) != PSIM_OK)
    return psim_error(PSIM_EINPUT,
                      "--dtype: unknown dtype '%.40s'; expected fp32, fp16, bf16, "
                      "fp8 or fp64",
                      dt);
  return PSIM_OK;
}

static psim_status positive(const char *flag, int64_t v, int64_t max) {
  if (v < 1 || v > max)
    return psim_error(PSIM_EINPUT, "--%s: %lld out of range [1, %lld]", flag, (long long)v,
                      (long long)max);
  return PSIM_OK;
}

/* ============================================================ transformers */

typedef enum tf_family { TF_GPT, TF_LLAMA, TF_BERT, TF_MOE } tf_family;

typedef struct tf {
  gb *g;
  const psim_gen_tf_opts *o;
  tf_family fam;
  blk b;
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

void psim_gen_bert_opts_init(psim_gen_tf_opts *o) {
  tf_defaults(o);
  o->hidden = 1024;
  o->seq = 512;
  o->vocab = 30522;
  o->batch = 256;
}

static psim_status tf_check(const psim_gen_tf_opts *o, tf_family fam) {
  const int64_t big = (int64_t)1 << 40;
  PSIM_CHECK(positive("layers", o->layers, 1000000));
  PSIM_CHECK(positive("hidden", o->hidden, big));
  PSIM_CHECK(positive("heads", o->heads, big));
  PSIM_CHECK(positive("seq", o->seq, big));
  PSIM_CHECK(positive("vocab", o->vocab, big));
  PSIM_CHECK(positive("batch", o->batch, big));
  if (o->ffn)
    PSIM_CHECK(positive("ffn", o->ffn, big));
  PSIM_CHECK(check_dtype(o->dtype));
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
    PSIM_CHECK(positive("experts", o->experts, 1 << 20));
    PSIM_CHECK(positive("top-k", o->top_k, o->experts));
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
  gb *g = t->g;
  const psim_gen_tf_opts *o = t->o;
  dim(g, "batch", o->batch, "batch");
  dim(g, "seq", o->seq, "sequence");
  dim(g, "hidden", o->hidden, "hidden");
  dim(g, "heads", o->heads, "heads");
  dim(g, "head_dim", o->hidden / o->heads, "head_dim");
  dim(g, "ffn", tf_ffn(t), "ffn");
  dim(g, "vocab", o->vocab, "vocab");
  t->kvh = "heads";
  if (o->kv_heads && o->kv_heads != o->heads) {
    dim(g, "kv_heads", o->kv_heads, "heads");
    t->kvh = "kv_heads";
  }
  if (!o->flash) {
    dim(g, "seq_kv", o->seq, NULL);
    dim(g, "qkv", 3, NULL);
  }
}

/* Layer norm (gpt, bert, moe) or RMSNorm (llama) of x into y, with weights prefix. */
static void tf_norm(tf *t, cJSON *ws, cJSON *ops, const char *w, const char *x, const char *y) {
  gb *g = t->g;
  char g_[64], b_[64], in[256];
  snprintf(g_, sizeof g_, "%s_g", w);
  snprintf(b_, sizeof b_, "%s_b", w);
  tensor(g, ws, g_, "hidden", NULL);
  if (t->fam == TF_LLAMA) {
    snprintf(in, sizeof in, "%s %s", x, g_);
    op(g, ops, w, "rmsnorm", in, y);
    return;
  }
  tensor(g, ws, b_, "hidden", NULL);
  snprintf(in, sizeof in, "%s %s %s", x, g_, b_);
  op(g, ops, w, "layernorm", in, y);
}

static void act(gb *g, cJSON *ts, const char *name, const char *dims) {
  tensor(g, ts, name, dims, NULL);
}

/* Linear layer name: y = x W (+ b). */
static void linear(tf *t, const char *name, const char *x, const char *wdims, const char *bdims,
                   const char *y, const char *ydims) {
  gb *g = t->g;
  char w[64], b[64], in[256];
  snprintf(w, sizeof w, "w_%s", name);
  snprintf(b, sizeof b, "b_%s", name);
  tensor(g, t->b.weights, w, wdims, NULL);
  act(g, t->b.tensors, y, ydims);
  snprintf(in, sizeof in, "%s %s", x, w);
  if (bdims) {
    tensor(g, t->b.weights, b, bdims, NULL);
    snprintf(in, sizeof in, "%s %s %s", x, w, b);
  }
  op(g, t->b.ops, name, "matmul", in, y);
}

static cJSON *tagged(tf *t, cJSON *o) {
  put_str(t->g, o, "tag", "attn_core");
  return o;
}

/* QKV projection and attention core of x into ctx [batch seq heads head_dim]. */
static void tf_qkv_core(tf *t, const char *x) {
  gb *g = t->g;
  blk *b = &t->b;
  const char *bhsd = "batch seq heads head_dim";
  bool bias = t->fam != TF_LLAMA, causal = t->fam != TF_BERT;
  act(g, b->tensors, "ctx", bhsd);
  if (t->o->flash) {
    char kd[96];
    snprintf(kd, sizeof kd, "hidden %s head_dim", t->kvh);
    linear(t, "q", x, "hidden heads head_dim", bias ? "heads head_dim" : NULL, "q", bhsd);
    char kvd[96], bk[64];
    snprintf(kvd, sizeof kvd, "batch seq %s head_dim", t->kvh);
    snprintf(bk, sizeof bk, "%s head_dim", t->kvh);
    linear(t, "k", x, kd, bias ? bk : NULL, "k", kvd);
    linear(t, "v", x, kd, bias ? bk : NULL, "v", kvd);
    cJSON *a = tagged(t, op(g, b->ops, "attention", "attention", "q k v", "ctx"));
    put_bool(g, a, "causal", causal);
    put_bool(g, a, "flash", true);
    return;
  }
  linear(t, "qkv", x, "hidden qkv heads head_dim", bias ? "qkv heads head_dim" : NULL, "qkv",
         "batch seq qkv heads head_dim");
  const char *loc[] = {"q", "k0", "v0", "k", "v"};
  for (int i = 0; i < 5; i++)
    act(g, b->tensors, loc[i], i < 3 ? bhsd : "batch seq_kv heads head_dim");
  put_str(g, op(g, b->ops, "qkv_split", "split", "qkv", "q k0 v0"), "axis", "qkv");
  op(g, b->ops, "k_view", "reshape", "k0", "k");
  op(g, b->ops, "v_view", "reshape", "v0", "v");
  act(g, b->tensors, "scores", "batch heads seq seq_kv");
  act(g, b->tensors, "probs", "batch heads seq seq_kv");
  act(g, b->tensors, "probs_d", "batch heads seq seq_kv");
  tagged(t, op(g, b->ops, "scores", "matmul", "q k", "scores"));
  put_str(g, tagged(t, op(g, b->ops, "softmax", "softmax", "scores", "probs")), "axis", "seq_kv");
  tagged(t, op(g, b->ops, "attn_dropout", "dropout", "probs", "probs_d"));
  tagged(t, op(g, b->ops, "context", "matmul", "probs_d v", "ctx"));
}

/* Feed-forward of x into y: gelu MLP, SwiGLU (llama) or experts (moe). */
static void tf_ffn_part(tf *t, const char *x, const char *y) {
  gb *g = t->g;
  blk *b = &t->b;
  const char *bsh = "batch seq hidden", *bsf = "batch seq ffn";
  if (t->fam == TF_LLAMA) {
    linear(t, "gate", x, "hidden ffn", NULL, "gate", bsf);
    linear(t, "up", x, "hidden ffn", NULL, "up", bsf);
    act(g, b->tensors, "act", bsf);
    ew(g, b->ops, "swiglu", "swiglu", "gate up", "act");
    linear(t, "down", "act", "ffn hidden", NULL, y, bsh);
    return;
  }
  if (t->fam == TF_MOE) {
    const char *becf = "batch expert capacity ffn", *bech = "batch expert capacity hidden";
    linear(t, "router", x, "hidden expert", NULL, "router", "batch seq expert");
    act(g, b->tensors, "gates", "batch seq expert");
    put_str(g, op(g, b->ops, "gates", "softmax", "router", "gates"), "axis", "expert");
    act(g, b->tensors, "xe", bech);
    put_num(g, op(g, b->ops, "dispatch", "dispatch", "ln2 gates", "xe"), "top_k",
            (double)t->o->top_k);
    linear(t, "fc1", "xe", "expert hidden ffn", "expert ffn", "he", becf);
    act(g, b->tensors, "ge", becf);
    ew(g, b->ops, "gelu", "gelu", "he", "ge");
    linear(t, "fc2", "ge", "expert ffn hidden", "expert hidden", "ye", bech);
    act(g, b->tensors, y, bsh);
    put_num(g, op(g, b->ops, "combine", "combine", "ye gates", y), "top_k", (double)t->o->top_k);
    return;
  }
  linear(t, "fc1", x, "hidden ffn", "ffn", "h1", bsf);
  act(g, b->tensors, "h2", bsf);
  ew(g, b->ops, "gelu", "gelu", "h1", "h2");
  linear(t, "fc2", "h2", "ffn hidden", "hidden", y, bsh);
}

/* One pre-LN transformer layer x -> y (Megatron-LM's GPT/BERT layer; LLaMA
 * with RMSNorm, SwiGLU, no biases or dropout). */
static void tf_layer(tf *t) {
  gb *g = t->g;
  blk *b = &t->b;
  const char *bsh = "batch seq hidden";
  bool drop = t->fam != TF_LLAMA;
  const char *names_[] = {"ln1", "res1", "ln2", "y"};
  for (int i = 0; i < 4; i++)
    act(g, b->tensors, names_[i], bsh);
  tf_norm(t, b->weights, b->ops, "ln1", "x", "ln1");
  tf_qkv_core(t, "ln1");
  linear(t, "proj", "ctx", "heads head_dim hidden", drop ? "hidden" : NULL, "attn", bsh);
  if (drop) {
    act(g, b->tensors, "attn_d", bsh);
    op(g, b->ops, "attn_out_dropout", "dropout", "attn", "attn_d");
  }
  ew(g, b->ops, "residual1", "add", drop ? "x attn_d" : "x attn", "res1");
  tf_norm(t, b->weights, b->ops, "ln2", "res1", "ln2");
  tf_ffn_part(t, "ln2", "h3");
  if (drop) {
    act(g, b->tensors, "h3_d", bsh);
    op(g, b->ops, "ffn_dropout", "dropout", "h3", "h3_d");
  }
  ew(g, b->ops, "residual2", "add", drop ? "res1 h3_d" : "res1 h3", "y");
}

/* Embeddings: word (+ learned positions, dropout, BERT's layer norm). */
static void tf_embed(tf *t) {
  gb *g = t->g;
  const char *bsh = "batch seq hidden";
  tensor(g, g->inputs, "tokens", "batch seq", "int32");
  tensor(g, g->weights, "wte", "vocab hidden", NULL);
  act(g, g->tensors, "emb_tok", bsh);
  op(g, g->ops, "embed", "embedding", "tokens wte", "emb_tok");
  if (t->fam == TF_LLAMA)
    return;
  tensor(g, g->weights, "wpe", "seq hidden", NULL);
  act(g, g->tensors, "emb_pos", bsh);
  act(g, g->tensors, "emb", bsh);
  ew(g, g->ops, "position", "add", "emb_tok wpe", "emb_pos");
  if (t->fam == TF_BERT) {
    act(g, g->tensors, "emb_ln", bsh);
    tf_norm(t, g->weights, g->ops, "emb_norm", "emb_pos", "emb_ln");
  }
  op(g, g->ops, "embed_dropout", "dropout", t->fam == TF_BERT ? "emb_ln" : "emb_pos", "emb");
}

/* Final norm, (BERT: MLM transform), logits against the tied or separate
 * output matrix, cross entropy. */
static void tf_head(tf *t) {
  gb *g = t->g;
  const char *bsh = "batch seq hidden";
  act(g, g->tensors, "final", bsh);
  tf_norm(t, g->weights, g->ops, "final_norm", "x_out", "final");
  const char *h = "final";
  if (t->fam == TF_BERT) { /* BERT's MLM head: dense, gelu, layer norm (Devlin et al. 2019) */
    dim(g, "hidden_t", t->o->hidden, NULL);
    tensor(g, g->weights, "w_mlm", "hidden hidden_t", NULL);
    tensor(g, g->weights, "b_mlm", "hidden_t", NULL);
    act(g, g->tensors, "mlm_d", "batch seq hidden_t");
    act(g, g->tensors, "mlm_a", "batch seq hidden_t");
    act(g, g->tensors, "mlm_v", bsh);
    act(g, g->tensors, "mlm", bsh);
    op(g, g->ops, "mlm_dense", "matmul", "final w_mlm b_mlm", "mlm_d");
    ew(g, g->ops, "mlm_gelu", "gelu", "mlm_d", "mlm_a");
    op(g, g->ops, "mlm_view", "reshape", "mlm_a", "mlm_v");
    tf_norm(t, g->weights, g->ops, "mlm_norm", "mlm_v", "mlm");
    h = "mlm";
  }
  const char *wout = "wte";
  if (t->fam == TF_LLAMA) {
    tensor(g, g->weights, "w_out", "vocab hidden", NULL);
    wout = "w_out";
  }
  char in[128];
  snprintf(in, sizeof in, "%s %s", h, wout);
  act(g, g->tensors, "logits", "batch seq vocab");
  op(g, g->ops, "logits", "matmul", in, "logits");
  tensor(g, g->inputs, "labels", "batch seq", "int32");
  tensor(g, g->tensors, "loss", "batch seq", "fp32");
  op(g, g->ops, "loss", "cross_entropy", "logits labels", "loss");
}

static psim_status gen_tf(const psim_gen_tf_opts *o, tf_family fam, const char *defname,
                          struct cJSON **out) {
  PSIM_CHECK(tf_check(o, fam));
  gb g;
  tf t = {.g = &g, .o = o, .fam = fam};
  gb_start(&g, o->name ? o->name : defname, o->dtype);
  tf_dims(&t);
  if (fam == TF_MOE) {
    double cap = ceil(o->capacity_factor * (double)o->top_k * (double)o->seq / (double)o->experts);
    dim(&g, "expert", o->experts, "expert");
    dim(&g, "capacity", (int64_t)cap, NULL);
  }
  tf_embed(&t);
  act(&g, g.tensors, "x_out", "batch seq hidden");
  t.b = block(&g, "layer", o->layers, "x", "y", fam == TF_LLAMA ? "emb_tok" : "emb", "x_out");
  tf_layer(&t);
  tf_head(&t);
  return gb_finish(&g, out);
}

psim_status psim_gen_gpt(const psim_gen_tf_opts *o, struct cJSON **out) {
  return gen_tf(o, TF_GPT, "gpt", out);
}
psim_status psim_gen_llama(const psim_gen_tf_opts *o, struct cJSON **out) {
  return gen_tf(o, TF_LLAMA, "llama", out);
}
psim_status psim_gen_bert(const psim_gen_tf_opts *o, struct cJSON **out) {
  return gen_tf(o, TF_BERT, "bert", out);
}
psim_status psim_gen_moe(const psim_gen_tf_opts *o, struct cJSON **out) {
  return gen_tf(o, TF_MOE, "moe", out);
}

/* ================================================================ networks */

void psim_gen_net_opts_init(psim_gen_net_opts *o, const char *family) {
  memset(o, 0, sizeof *o);
  o->dtype = "fp32";
  o->classes = 1000;
  o->batch = 256;
  o->depth = 50;
  o->layers = 4;
  o->hidden = 1024;
  o->tables = 26;
  o->rows = 1000000;
  o->emb_dim = 128;
  if (family && strcmp(family, "mlp") == 0) {
    o->batch = 64;
    o->classes = 10;
  } else if (family && strcmp(family, "alexnet") == 0) {
    o->batch = 128;
  } else if (family && strcmp(family, "dlrm") == 0) {
    o->batch = 2048;
  }
}

static psim_status net_check(const psim_gen_net_opts *o) {
  const int64_t big = (int64_t)1 << 40;
  PSIM_CHECK(positive("batch", o->batch, big));
  PSIM_CHECK(positive("classes", o->classes, big));
  return check_dtype(o->dtype);
}

/* ---- mlp */

psim_status psim_gen_mlp(const psim_gen_net_opts *o, struct cJSON **out) {
  PSIM_CHECK(net_check(o));
  PSIM_CHECK(positive("layers", o->layers, 1000000));
  PSIM_CHECK(positive("hidden", o->hidden, (int64_t)1 << 40));
  gb g;
  gb_start(&g, o->name ? o->name : "mlp", o->dtype);
  dim(&g, "batch", o->batch, "batch");
  dim(&g, "hidden", o->hidden, "hidden");
  dim(&g, "hidden_out", o->hidden, "ffn");
  dim(&g, "classes", o->classes, NULL);
  tensor(&g, g.inputs, "x", "batch hidden", NULL);
  tensor(&g, g.inputs, "labels", "batch", "int32");
  tensor(&g, g.tensors, "h", "batch hidden", NULL);
  /* Each layer: relu(x W + b); the reshape renames hidden_out back to hidden (a view). */
  blk b = block(&g, "layer", o->layers, "x", "y", "x", "h");
  tensor(&g, b.weights, "w", "hidden hidden_out", NULL);
  tensor(&g, b.weights, "b", "hidden_out", NULL);
  tensor(&g, b.tensors, "z", "batch hidden_out", NULL);
  tensor(&g, b.tensors, "a", "batch hidden_out", NULL);
  tensor(&g, b.tensors, "y", "batch hidden", NULL);
  op(&g, b.ops, "fc", "matmul", "x w b", "z");
  ew(&g, b.ops, "relu", "relu", "z", "a");
  op(&g, b.ops, "view", "reshape", "a", "y");
  tensor(&g, g.weights, "w_cls", "hidden classes", NULL);
  tensor(&g, g.tensors, "logits", "batch classes", NULL);
  tensor(&g, g.tensors, "loss", "batch", NULL);
  op(&g, g.ops, "classifier", "matmul", "h w_cls", "logits");
  op(&g, g.ops, "loss", "cross_entropy", "logits labels", "loss");
  return gb_finish(&g, out);
}

/* ---- convolutional networks: a cursor over the current activation */

typedef struct cnn {
  gb *g;
  cJSON *ws, *ts, *ops;     /* where declarations go (top level or a block) */
  char x[64];               /* current activation */
  char c[32], h[32], w[32]; /* its channel and spatial dim names */
  int64_t cs, hs, ws_;      /* their sizes */
  int n;                    /* op counter for unique names */
  int layer;                /* explicit layer for top-level ops; -1 = none */
} cnn;

static void cnn_at(cnn *k, const char *x, const char *c, int64_t cs, const char *h, int64_t hs,
                   const char *w) {
  snprintf(k->x, sizeof k->x, "%s", x);
  snprintf(k->c, sizeof k->c, "%s", c);
  snprintf(k->h, sizeof k->h, "%s", h);
  snprintf(k->w, sizeof k->w, "%s", w);
  k->cs = cs;
  k->hs = k->ws_ = hs;
}

/* Channel dim of size n distinct from avoid. */
static void chan(cnn *k, int64_t n, const char *avoid, char *out) {
  snprintf(out, 32, "c%lld", (long long)n);
  if (strcmp(out, avoid) == 0)
    snprintf(out, 32, "c%lld_b", (long long)n);
  dim(k->g, out, n, "channel");
}

static cJSON *cnn_op(cnn *k, const char *kind, const char *in, const char *out) {
  char name[48];
  snprintf(name, sizeof name, "%s%d", kind, ++k->n);
  cJSON *o = op(k->g, k->ops, name, kind, in, out);
  if (k->layer >= 0)
    put_num(k->g, o, "layer", k->layer);
  return o;
}

/* New activation named after the op counter with the given dims. */
static void cnn_new(cnn *k, char *name, const char *dims) {
  snprintf(name, 64, "t%d", k->n + 1);
  tensor(k->g, k->ts, name, dims, NULL);
}

/* conv kh x kw (stride s, pad ph/pw) to cout channels, then relu (BatchNorm
 * folded into the conv: its 2 parameters per channel are omitted). */
static void conv(cnn *k, int64_t cout, int64_t kh, int64_t kw, int64_t s, int64_t ph, int64_t pw,
                 bool relu) {
  gb *g = k->g;
  char c2[32], hd[32], wd[32], khd[32], kwd[32], wt[64], y[64], dims[160], in[160];
  chan(k, cout, k->c, c2);
  int64_t h2 = (k->hs + 2 * ph - kh) / s + 1, w2 = (k->ws_ + 2 * pw - kw) / s + 1;
  snprintf(hd, sizeof hd, "h%lld", (long long)h2);
  snprintf(wd, sizeof wd, "w%lld", (long long)w2);
  snprintf(khd, sizeof khd, "kh%lld", (long long)kh);
  snprintf(kwd, sizeof kwd, "kw%lld", (long long)kw);
  dim(g, hd, h2, "spatial");
  dim(g, wd, w2, "spatial");
  dim(g, khd, kh, NULL);
  dim(g, kwd, kw, NULL);
  snprintf(wt, sizeof wt, "w%d", k->n + 1);
  snprintf(dims, sizeof dims, "%s %s %s %s", c2, k->c, khd, kwd);
  tensor(g, k->ws, wt, dims, NULL);
  snprintf(dims, sizeof dims, "batch %s %s %s", c2, hd, wd);
  cnn_new(k, y, dims);
  snprintf(in, sizeof in, "%s %s", k->x, wt);
  cJSON *o = cnn_op(k, "conv2d", in, y);
  pair(g, o, "stride", s, s);
  pair(g, o, "pad", ph, pw);
  cnn_at(k, y, c2, cout, hd, h2, wd);
  k->ws_ = w2;
  if (relu) {
    cnn_new(k, y, dims);
    put_str(g, cnn_op(k, "elementwise", k->x, y), "fn", "relu");
    snprintf(k->x, sizeof k->x, "%s", y);
  }
}

static void pool(cnn *k, const char *fn, int64_t kk, int64_t s, int64_t p) {
  gb *g = k->g;
  char hd[32], wd[32], y[64], dims[160];
  int64_t h2 = (k->hs + 2 * p - kk) / s + 1, w2 = (k->ws_ + 2 * p - kk) / s + 1;
  snprintf(hd, sizeof hd, "h%lld", (long long)h2);
  snprintf(wd, sizeof wd, "w%lld", (long long)w2);
  dim(g, hd, h2, "spatial");
  dim(g, wd, w2, "spatial");
  snprintf(dims, sizeof dims, "batch %s %s %s", k->c, hd, wd);
  cnn_new(k, y, dims);
  cJSON *o = cnn_op(k, "pool2d", k->x, y);
  put_str(g, o, "fn", fn);
  pair(g, o, "kernel", kk, kk);
  pair(g, o, "stride", s, s);
  pair(g, o, "pad", p, p);
  snprintf(k->x, sizeof k->x, "%s", y);
  snprintf(k->h, sizeof k->h, "%s", hd);
  snprintf(k->w, sizeof k->w, "%s", wd);
  k->hs = h2;
  k->ws_ = w2;
}

/* Flatten [batch c h w] to [batch feat] (a view). */
static void flatten(cnn *k) {
  char f[32], y[64], dims[96];
  int64_t n = k->cs * k->hs * k->ws_;
  snprintf(f, sizeof f, "f%lld", (long long)n);
  dim(k->g, f, n, "hidden");
  snprintf(dims, sizeof dims, "batch %s", f);
  cnn_new(k, y, dims);
  cnn_op(k, "reshape", k->x, y);
  cnn_at(k, y, f, n, "", 1, "");
}

/* Fully connected layer from the current [batch feat] to n (bias, optional relu, dropout). */
static void fc(cnn *k, int64_t n, bool relu, bool drop) {
  gb *g = k->g;
  char f[32], wt[64], bt[64], y[64], dims[96], in[192];
  chan(k, n, k->c, f);
  snprintf(wt, sizeof wt, "w%d", k->n + 1);
  snprintf(bt, sizeof bt, "b%d", k->n + 1);
  snprintf(dims, sizeof dims, "%s %s", k->c, f);
  tensor(g, k->ws, wt, dims, NULL);
  tensor(g, k->ws, bt, f, NULL);
  snprintf(dims, sizeof dims, "batch %s", f);
  cnn_new(k, y, dims);
  snprintf(in, sizeof in, "%s %s %s", k->x, wt, bt);
  cnn_op(k, "matmul", in, y);
  cnn_at(k, y, f, n, "", 1, "");
  if (relu) {
    cnn_new(k, y, dims);
    put_str(g, cnn_op(k, "elementwise", k->x, y), "fn", "relu");
    snprintf(k->x, sizeof k->x, "%s", y);
  }
  if (drop) {
    cnn_new(k, y, dims);
    cnn_op(k, "dropout", k->x, y);
    snprintf(k->x, sizeof k->x, "%s", y);
  }
}

static void cnn_input(cnn *k, gb *g, int64_t size) {
  memset(k, 0, sizeof *k);
  k->g = g;
  k->ws = g->weights;
  k->ts = g->tensors;
  k->ops = g->ops;
  k->layer = 0;
  char hd[32], wd[32], dims[128];
  snprintf(hd, sizeof hd, "h%lld", (long long)size);
  snprintf(wd, sizeof wd, "w%lld", (long long)size);
  dim(g, "c3", 3, "channel");
  dim(g, hd, size, "spatial");
  dim(g, wd, size, "spatial");
  snprintf(dims, sizeof dims, "batch c3 %s %s", hd, wd);
  tensor(g, g->inputs, "image", dims, NULL);
  cnn_at(k, "image", "c3", 3, hd, size, wd);
}

static void cnn_loss(cnn *k, int64_t classes) {
  gb *g = k->g;
  char in[96];
  fc(k, classes, false, false);
  tensor(g, g->inputs, "labels", "batch", "int32");
  tensor(g, g->tensors, "loss", "batch", NULL);
  snprintf(in, sizeof in, "%s labels", k->x);
  cJSON *o = op(g, g->ops, "loss", "cross_entropy", in, "loss");
  if (k->layer >= 0)
    put_num(g, o, "layer", k->layer);
}

/* AlexNet as in torchvision (Krizhevsky 2014, "one weird trick": 64-192-384-256-256). */
psim_status psim_gen_alexnet(const psim_gen_net_opts *o, struct cJSON **out) {
  PSIM_CHECK(net_check(o));
  gb g;
  cnn k;
  gb_start(&g, o->name ? o->name : "alexnet", o->dtype);
  dim(&g, "batch", o->batch, "batch");
  cnn_input(&k, &g, 224);
  conv(&k, 64, 11, 11, 4, 2, 2, true);
  pool(&k, "max", 3, 2, 0);
  k.layer++;
  conv(&k, 192, 5, 5, 1, 2, 2, true);
  pool(&k, "max", 3, 2, 0);
  static const int64_t c3[] = {384, 256, 256};
  for (int i = 0; i < 3; i++) {
    k.layer++;
    conv(&k, c3[i], 3, 3, 1, 1, 1, true);
  }
  pool(&k, "max", 3, 2, 0);
  flatten(&k);
  k.layer++;
  fc(&k, 4096, true, true);
  k.layer++;
  fc(&k, 4096, true, true);
  k.layer++;
  cnn_loss(&k, o->classes);
  return gb_finish(&g, out);
}

/* One bottleneck (He et al. 2016; stride on the 3x3 as in torchvision v1.5),
 * written into the block's groups; in and out names are the block's. */
static void bottleneck(cnn *k, int64_t mid, int64_t stride, bool project, const char *yname) {
  gb *g = k->g;
  char x0[64], c0[32], h0[32], w0[32], in[160], dims[160];
  int64_t cs0 = k->cs, hs0 = k->hs;
  snprintf(x0, sizeof x0, "%s", k->x);
  snprintf(c0, sizeof c0, "%s", k->c);
  snprintf(h0, sizeof h0, "%s", k->h);
  snprintf(w0, sizeof w0, "%s", k->w);
  conv(k, mid, 1, 1, 1, 0, 0, true);
  conv(k, mid, 3, 3, stride, 1, 1, true);
  conv(k, 4 * mid, 1, 1, 1, 0, 0, false);
  char main_[64], sc[64];
  snprintf(main_, sizeof main_, "%s", k->x);
  snprintf(sc, sizeof sc, "%s", x0);
  if (project) {
    char c2[32], h2[32], w2[32];
    snprintf(c2, sizeof c2, "%s", k->c);
    snprintf(h2, sizeof h2, "%s", k->h);
    snprintf(w2, sizeof w2, "%s", k->w);
    cnn_at(k, x0, c0, cs0, h0, hs0, w0);
    conv(k, 4 * mid, 1, 1, stride, 0, 0, false);
    snprintf(sc, sizeof sc, "%s", k->x);
    (void)c2, (void)h2, (void)w2;
  }
  snprintf(dims, sizeof dims, "batch %s %s %s", k->c, k->h, k->w);
  char sum[64];
  cnn_new(k, sum, dims);
  snprintf(in, sizeof in, "%s %s", main_, sc);
  put_str(g, cnn_op(k, "elementwise", in, sum), "fn", "add");
  tensor(g, k->ts, yname, dims, NULL);
  put_str(g, cnn_op(k, "elementwise", sum, yname), "fn", "relu");
  snprintf(k->x, sizeof k->x, "%s", yname);
}

/* A stage: its first bottleneck (projection, stride) as a block of repeat 1,
 * the others as one block with repeat n - 1. */
static void res_stage(cnn *k, int si, int64_t mid, int64_t stride, int64_t n) {
  gb *g = k->g;
  char bname[32], outer[64], save_c[32];
  for (int part = 0; part < 2 && (part == 0 || n > 1); part++) {
    snprintf(bname, sizeof bname, "stage%d%s", si, part ? "" : "_first");
    snprintf(outer, sizeof outer, "s%d_%s", si, part ? "out" : "first");
    blk b = block(g, bname, part ? n - 1 : 1, "x", "y", k->x, outer);
    cnn inner = *k;
    inner.ws = b.weights;
    inner.ts = b.tensors;
    inner.ops = b.ops;
    inner.layer = -1;
    inner.n = 0;
    snprintf(inner.x, sizeof inner.x, "x");
    bottleneck(&inner, mid, part ? 1 : stride, !part, "y");
    snprintf(save_c, sizeof save_c, "%s", inner.c);
    char dims[160];
    snprintf(dims, sizeof dims, "batch %s %s %s", inner.c, inner.h, inner.w);
    tensor(g, g->tensors, outer, dims, NULL);
    cnn_at(k, outer, save_c, inner.cs, inner.h, inner.hs, inner.w);
  }
}

psim_status psim_gen_resnet(const psim_gen_net_opts *o, struct cJSON **out) {
  PSIM_CHECK(net_check(o));
  if (o->depth != 50 && o->depth != 101 && o->depth != 152)
    return psim_error(PSIM_EINPUT, "--depth: %lld; expected 50, 101 or 152", (long long)o->depth);
  static const int64_t n50[] = {3, 4, 6, 3}, n101[] = {3, 4, 23, 3}, n152[] = {3, 8, 36, 3};
  const int64_t *n = o->depth == 50 ? n50 : o->depth == 101 ? n101 : n152;
  char name[32];
  snprintf(name, sizeof name, "resnet%lld", (long long)o->depth);
  gb g;
  cnn k;
  gb_start(&g, o->name ? o->name : name, o->dtype);
  dim(&g, "batch", o->batch, "batch");
  cnn_input(&k, &g, 224);
  conv(&k, 64, 7, 7, 2, 3, 3, true);
  pool(&k, "max", 3, 2, 1);
  for (int s = 0; s < 4; s++)
    res_stage(&k, s + 1, 64 << s, s ? 2 : 1, n[s]);
  k.layer = -1;
  pool(&k, "avg", k.hs, 1, 0);
  flatten(&k);
  cnn_loss(&k, o->classes);
  return gb_finish(&g, out);
}

/* ---- inception v3 (Szegedy et al. 2016; torchvision layout, no auxiliary head) */

typedef struct branch_end {
  char x[64], c[32];
  int64_t cs;
} branch_end;

/* Runs a chain of convs from the module input; each conv is {cout, kh, kw, stride, pad_h,
 * pad_w}; a chain starting with cout 0 is an avg pool 3x3 s1 p1 (and max pool 3x3 s2 when
 * the pad is -1). */
static void chain(cnn *k, const cnn *start, const int64_t (*convs)[6], int n, branch_end *e) {
  *k = *start;
  for (int i = 0; i < n; i++) {
    const int64_t *c = convs[i];
    if (c[0] == 0 && c[4] < 0)
      pool(k, "max", 3, 2, 0);
    else if (c[0] == 0)
      pool(k, "avg", 3, 1, 1);
    else
      conv(k, c[0], c[1], c[2], c[3], c[4], c[5], true);
  }
  snprintf(e->x, sizeof e->x, "%s", k->x);
  snprintf(e->c, sizeof e->c, "%s", k->c);
  e->cs = k->cs;
}

/* Concatenates branch ends along channels into the cursor. */
static void concat_branches(cnn *k, const branch_end *e, int n) {
  gb *g = k->g;
  int64_t total = 0;
  char in[400] = "", cname[32], y[64], dims[160];
  for (int i = 0; i < n; i++) {
    total += e[i].cs;
    append(in, sizeof in, e[i].x);
  }
  snprintf(cname, sizeof cname, "cat%lld", (long long)total);
  dim(g, cname, total, "channel");
  snprintf(dims, sizeof dims, "batch %s %s %s", cname, k->h, k->w);
  cnn_new(k, y, dims);
  put_str(g, cnn_op(k, "concat", in, y), "axis", cname);
  snprintf(k->x, sizeof k->x, "%s", y);
  snprintf(k->c, sizeof k->c, "%s", cname);
  k->cs = total;
}

/* Runs nb branches (conv lists in spec, lengths in len) and concatenates them. */
static void module(cnn *k, const int64_t (*spec)[6], const int *len, int nb) {
  cnn start = *k, cur;
  branch_end e[8];
  int off = 0;
  for (int b = 0; b < nb; b++) {
    start.n = k->n;
    chain(&cur, &start, spec + off, len[b], &e[b]);
    k->n = cur.n;
    off += len[b];
  }
  snprintf(k->h, sizeof k->h, "%s", cur.h);
  snprintf(k->w, sizeof k->w, "%s", cur.w);
  k->hs = cur.hs;
  k->ws_ = cur.ws_;
  concat_branches(k, e, nb);
}

static void inception_a(cnn *k, int64_t pool_c) {
  const int64_t s[][6] = {{64, 1, 1, 1, 0, 0}, {48, 1, 1, 1, 0, 0},    {64, 5, 5, 1, 2, 2},
                          {64, 1, 1, 1, 0, 0}, {96, 3, 3, 1, 1, 1},    {96, 3, 3, 1, 1, 1},
                          {0, 3, 3, 1, 1, 1},  {pool_c, 1, 1, 1, 0, 0}};
  static const int len[] = {1, 2, 3, 2};
  module(k, s, len, 4);
}

static void inception_b(cnn *k) {
  const int64_t s[][6] = {{384, 3, 3, 2, 0, 0},
                          {64, 1, 1, 1, 0, 0},
                          {96, 3, 3, 1, 1, 1},
                          {96, 3, 3, 2, 0, 0},
                          {0, 3, 3, 2, -1, 0}};
  static const int len[] = {1, 3, 1};
  module(k, s, len, 3);
}

static void inception_c(cnn *k, int64_t c7) {
  const int64_t s[][6] = {{192, 1, 1, 1, 0, 0}, {c7, 1, 1, 1, 0, 0}, {c7, 1, 7, 1, 0, 3},
                          {192, 7, 1, 1, 3, 0}, {c7, 1, 1, 1, 0, 0}, {c7, 7, 1, 1, 3, 0},
                          {c7, 1, 7, 1, 0, 3},  {c7, 7, 1, 1, 3, 0}, {192, 1, 7, 1, 0, 3},
                          {0, 3, 3, 1, 1, 1},   {192, 1, 1, 1, 0, 0}};
  static const int len[] = {1, 3, 5, 2};
  module(k, s, len, 4);
}

static void inception_d(cnn *k) {
  const int64_t s[][6] = {{192, 1, 1, 1, 0, 0}, {320, 3, 3, 2, 0, 0}, {192, 1, 1, 1, 0, 0},
                          {192, 1, 7, 1, 0, 3}, {192, 7, 1, 1, 3, 0}, {192, 3, 3, 2, 0, 0},
                          {0, 3, 3, 2, -1, 0}};
  static const int len[] = {2, 4, 1};
  module(k, s, len, 3);
}

/* Runs convs from *from into *to, keeping the op counter of k in step. */
static void branch_from(cnn *k, cnn *to, cnn *from, const int64_t (*convs)[6], int n,
                        branch_end *e) {
  from->n = k->n;
  chain(to, from, convs, n, e);
  k->n = to->n;
}

/* InceptionE: the 1x3 and 3x1 convs of branches 2 and 3 both read the
 * branch's shared conv (320 + 2 * 384 + 2 * 384 + 192 = 2048 channels). */
static void inception_e(cnn *k) {
  static const int64_t b1[][6] = {{320, 1, 1, 1, 0, 0}}, s2[][6] = {{384, 1, 1, 1, 0, 0}};
  static const int64_t s3[][6] = {{448, 1, 1, 1, 0, 0}, {384, 3, 3, 1, 1, 1}};
  static const int64_t a[][6] = {{384, 1, 3, 1, 0, 1}}, b[][6] = {{384, 3, 1, 1, 1, 0}};
  static const int64_t p[][6] = {{0, 3, 3, 1, 1, 1}, {192, 1, 1, 1, 0, 0}};
  cnn start = *k, cur, mid;
  branch_end e[6], tmp;
  branch_from(k, &cur, &start, b1, 1, &e[0]);
  branch_from(k, &mid, &start, s2, 1, &tmp);
  branch_from(k, &cur, &mid, a, 1, &e[1]);
  branch_from(k, &cur, &mid, b, 1, &e[2]);
  branch_from(k, &mid, &start, s3, 2, &tmp);
  branch_from(k, &cur, &mid, a, 1, &e[3]);
  branch_from(k, &cur, &mid, b, 1, &e[4]);
  branch_from(k, &cur, &start, p, 2, &e[5]);
  concat_branches(k, e, 6);
}

psim_status psim_gen_inception(const psim_gen_net_opts *o, struct cJSON **out) {
  PSIM_CHECK(net_check(o));
  gb g;
  cnn k;
  gb_start(&g, o->name ? o->name : "inception-v3", o->dtype);
  dim(&g, "batch", o->batch, "batch");
  cnn_input(&k, &g, 299);
  conv(&k, 32, 3, 3, 2, 0, 0, true);
  conv(&k, 32, 3, 3, 1, 0, 0, true);
  conv(&k, 64, 3, 3, 1, 1, 1, true);
  pool(&k, "max", 3, 2, 0);
  k.layer++;
  conv(&k, 80, 1, 1, 1, 0, 0, true);
  conv(&k, 192, 3, 3, 1, 0, 0, true);
  pool(&k, "max", 3, 2, 0);
  static const int64_t pa[] = {32, 64, 64}, c7[] = {128, 160, 160, 192};
  for (int i = 0; i < 3; i++, k.layer++)
    inception_a(&k, pa[i]);
  inception_b(&k);
  for (int i = 0; i < 4; i++) {
    k.layer++;
    inception_c(&k, c7[i]);
  }
  k.layer++;
  inception_d(&k);
  for (int i = 0; i < 2; i++) {
    k.layer++;
    inception_e(&k);
  }
  pool(&k, "avg", k.hs, 1, 0);
  flatten(&k);
  cnn_loss(&k, o->classes);
  return gb_finish(&g, out);
}

/* ---- DLRM (Naumov et al. 2019; MLPerf widths: bottom 13-512-256-E, top
 * 1024-1024-512-256-1), one id per sample per table (no multi-hot pooling). */

static void mlp_chain(cnn *k, const int64_t *w, int n, bool last_relu) {
  for (int i = 0; i < n; i++) {
    fc(k, w[i], i < n - 1 || last_relu, false);
    k->layer++;
  }
}

/* Concatenates the [batch one E] pieces in into out (<= 8 at a time). */
static void dlrm_concat(gb *g, char (*in)[64], int n, const char *out, const char *fdim) {
  char list[600] = "", dims[96];
  for (int i = 0; i < n; i++)
    append(list, sizeof list, in[i]);
  snprintf(dims, sizeof dims, "batch %s emb", fdim);
  tensor(g, g->tensors, out, dims, NULL);
  put_str(g, op(g, g->ops, out, "concat", list, out), "axis", fdim);
}

/* Builds the interaction features [batch feat emb] from the bottom output
 * and the tables, concatenating in groups of at most 8. */
static void dlrm_features(gb *g, const char *bottom, int64_t tables) {
  char pieces[8][64], group[8][64], fdim[32];
  int np = 0, ng = 0;
  int64_t total = tables + 1, gsize = 0;
  snprintf(pieces[np++], 64, "%s", bottom);
  for (int64_t t = 0; t <= tables; t++) {
    if (np == 8 || (t == tables && np)) {
      snprintf(fdim, sizeof fdim, "f%d", np);
      dim(g, fdim, np, NULL);
      snprintf(group[ng], 64, "group%d", ng);
      dlrm_concat(g, pieces, np, group[ng++], fdim);
      gsize += np;
      np = 0;
    }
    if (t == tables)
      break;
    snprintf(pieces[np++], 64, "emb%lld", (long long)t);
  }
  snprintf(fdim, sizeof fdim, "f%lld", (long long)total);
  dim(g, fdim, total, NULL);
  dlrm_concat(g, group, ng, "features", fdim);
  (void)gsize;
}

psim_status psim_gen_dlrm(const psim_gen_net_opts *o, struct cJSON **out) {
  PSIM_CHECK(net_check(o));
  PSIM_CHECK(positive("tables", o->tables, 56)); /* 7 groups of 8 in one concat */
  PSIM_CHECK(positive("rows", o->rows, (int64_t)1 << 40));
  PSIM_CHECK(positive("emb-dim", o->emb_dim, 1 << 20));
  gb g;
  cnn k;
  gb_start(&g, o->name ? o->name : "dlrm", o->dtype);
  dim(&g, "batch", o->batch, "batch");
  dim(&g, "one", 1, NULL);
  dim(&g, "dense", 13, "hidden");
  dim(&g, "emb", o->emb_dim, "hidden");
  dim(&g, "rows", o->rows, "vocab");
  memset(&k, 0, sizeof k);
  k.g = &g, k.ws = g.weights, k.ts = g.tensors, k.ops = g.ops;
  tensor(&g, g.inputs, "dense_x", "batch dense", NULL);
  cnn_at(&k, "dense_x", "dense", 13, "", 1, "");
  const int64_t bottom[] = {512, 256};
  mlp_chain(&k, bottom, 2, true);
  /* last bottom layer maps onto the embedding width, viewed as one feature */
  char in[160];
  tensor(&g, g.weights, "w_bot", "c256 emb", NULL);
  tensor(&g, g.tensors, "bot", "batch one emb", NULL);
  tensor(&g, g.tensors, "bot_flat", "batch emb", NULL);
  snprintf(in, sizeof in, "%s w_bot", k.x);
  op(&g, g.ops, "bottom_out", "matmul", in, "bot_flat");
  op(&g, g.ops, "bottom_view", "reshape", "bot_flat", "bot");
  for (int64_t t = 0; t < o->tables; t++) {
    char ids[32], tab[32], e[32];
    snprintf(ids, sizeof ids, "ids%lld", (long long)t);
    snprintf(tab, sizeof tab, "table%lld", (long long)t);
    snprintf(e, sizeof e, "emb%lld", (long long)t);
    tensor(&g, g.inputs, ids, "batch one", "int32");
    tensor(&g, g.weights, tab, "rows emb", NULL);
    tensor(&g, g.tensors, e, "batch one emb", NULL);
    snprintf(in, sizeof in, "%s %s", ids, tab);
    op(&g, g.ops, e, "embedding", in, e);
  }
  dlrm_features(&g, "bot", o->tables);
  /* pairwise dot products Z = F F^T (Naumov et al. 2019, "dot" interaction) */
  char fd[32], fd2[32], dims[96];
  snprintf(fd, sizeof fd, "f%lld", (long long)(o->tables + 1));
  snprintf(fd2, sizeof fd2, "g%lld", (long long)(o->tables + 1));
  dim(&g, fd2, o->tables + 1, NULL);
  snprintf(dims, sizeof dims, "batch %s emb", fd2);
  tensor(&g, g.tensors, "features_t", dims, NULL);
  op(&g, g.ops, "features_view", "reshape", "features", "features_t");
  snprintf(dims, sizeof dims, "batch %s %s", fd, fd2);
  tensor(&g, g.tensors, "interact", dims, NULL);
  op(&g, g.ops, "interact", "matmul", "features features_t", "interact");
  int64_t nz = (o->tables + 1) * (o->tables + 1);
  char zd[32], td[32];
  snprintf(zd, sizeof zd, "z%lld", (long long)nz);
  snprintf(td, sizeof td, "top%lld", (long long)(nz + o->emb_dim));
  dim(&g, zd, nz, NULL);
  dim(&g, td, nz + o->emb_dim, "hidden");
  snprintf(dims, sizeof dims, "batch %s", zd);
  tensor(&g, g.tensors, "interact_flat", dims, NULL);
  op(&g, g.ops, "interact_view", "reshape", "interact", "interact_flat");
  snprintf(dims, sizeof dims, "batch %s", td);
  dim(&g, "one_e", 1, NULL);
  tensor(&g, g.tensors, "top_in", dims, NULL);
  tensor(&g, g.tensors, "bot_e", "batch emb", NULL);
  op(&g, g.ops, "bottom_copy", "reshape", "bot", "bot_e");
  put_str(&g, op(&g, g.ops, "top_in", "concat", "interact_flat bot_e", "top_in"), "axis", td);
  cnn_at(&k, "top_in", td, nz + o->emb_dim, "", 1, "");
  k.n = 100;
  const int64_t top[] = {1024, 1024, 512, 256};
  mlp_chain(&k, top, 4, true);
  fc(&k, 1, false, false);
  tensor(&g, g.inputs, "labels", "batch", "int32");
  tensor(&g, g.tensors, "loss", "batch", NULL);
  snprintf(in, sizeof in, "%s labels", k.x);
  op(&g, g.ops, "loss", "cross_entropy", in, "loss");
  return gb_finish(&g, out);
}
