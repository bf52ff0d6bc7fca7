/* registry.c - the model families and their options (registry.h). */
#include "models/registry.h"

#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define TF(f)   offsetof(psim_gen_tf_opts, f)
#define NET(f)  offsetof(psim_gen_net_opts, f)
#define DEC     "qwen3 qwen3-moe mixtral deepseek-v3 gpt-oss" /* gen_decoder.c */
#define TFS     "gpt mpt llama llama3 bert moe gpt3-mlperf " DEC
#define NETS    "mlp alexnet resnet inception dlrm"
#define COUNT   1, (double)INT64_MAX /* counts and sizes: whole numbers from 1 */
#define COUNT0  0, (double)INT64_MAX /* counts where 0 means none (layers, experts, ranks) */
#define FACTOR0 -1, 1e3              /* factors where 0 is a setting: [0, 1000] */
#define FACTOR  0, HUGE_VAL          /* factors: positive numbers */
#define NONE    0, 0

/* Every number is a count or a factor that must be positive: an explicit 0
 * would otherwise read as "the default" (ffn 0 gave 4*hidden, kv_heads 0 the
 * heads), so it is out of range; except where 0 is itself a setting that no
 * default hides (COUNT0, FACTOR0: no shared expert, no latent attention, dropless). */
static const psim_gen_option tf_options[] = {
    {"layers", PSIM_GEN_INT, TF(layers), TFS, COUNT, NULL, "transformer layers"},
    {"hidden", PSIM_GEN_INT, TF(hidden), TFS, COUNT, NULL, "model width"},
    {"heads", PSIM_GEN_INT, TF(heads), TFS, COUNT, NULL, "attention heads"},
    {"kv_heads", PSIM_GEN_INT, TF(kv_heads), "llama llama3 " DEC, COUNT, "heads",
     "key/value heads (llama: fewer than heads needs --flash)"},
    {"seq", PSIM_GEN_INT, TF(seq), TFS, COUNT, NULL, "sequence length (tokens)"},
    {"vocab", PSIM_GEN_INT, TF(vocab), TFS, COUNT, NULL, "vocabulary size"},
    {"batch", PSIM_GEN_INT, TF(batch), TFS, COUNT, NULL, "global batch (sequences)"},
    {"ffn", PSIM_GEN_INT, TF(ffn), TFS, COUNT, "4*hidden", "feed-forward width"},
    {"dtype", PSIM_GEN_STR, TF(dtype), TFS, NONE, NULL, "fp32, fp16, bf16, fp8 or fp64"},
    {"linear_dtype", PSIM_GEN_STR, TF(linear_dtype), TFS, NONE, "dtype",
     "dtype of the linear layers' outputs (fp8: FP8 GEMMs)"},
    {"name", PSIM_GEN_STR, TF(name), TFS, NONE, "the family's", "model name"},
    {"flash", PSIM_GEN_BOOL, TF(flash), "gpt mpt llama llama3 bert moe gpt3-mlperf", NONE, NULL,
     "one fused attention op"},
    {"experts", PSIM_GEN_INT, TF(experts), "moe " DEC, COUNT, NULL, "experts per MoE layer"},
    {"top_k", PSIM_GEN_INT, TF(top_k), "moe " DEC, COUNT, NULL, "experts per token"},
    {"capacity_factor", PSIM_GEN_DBL, TF(capacity_factor), "moe", FACTOR, NULL,
     "expert capacity = ceil(cf * top_k * seq / experts)"},
    {"capacity_factor", PSIM_GEN_DBL, TF(capacity_factor), DEC, FACTOR0, NULL,
     "expert capacity = ceil(cf * top_k * seq / experts); 0: dropless"},
    {"dropless", PSIM_GEN_BOOL, TF(dropless), "moe " DEC, NONE, NULL,
     "dropless routing: capacity = the mean top_k * seq / experts"},
    {"head_dim", PSIM_GEN_INT, TF(head_dim), DEC, COUNT, "hidden/heads",
     "attention head width (MLA: its non-rotary part)"},
    {"qk_norm", PSIM_GEN_BOOL, TF(qk_norm), DEC, NONE, NULL, "RMSNorm of q and k (Qwen3)"},
    {"bias", PSIM_GEN_BOOL, TF(bias), DEC, NONE, NULL, "biases on q, k, v, o, router, experts"},
    {"moe_ffn", PSIM_GEN_INT, TF(moe_ffn), DEC, COUNT0, "0", "routed expert width; 0: dense"},
    {"shared_ffn", PSIM_GEN_INT, TF(shared_ffn), DEC, COUNT0, "0", "shared expert width; 0: none"},
    {"dense_layers", PSIM_GEN_INT, TF(dense_layers), DEC, COUNT0, "0",
     "leading layers with a dense FFN of width --ffn"},
    {"sigmoid_router", PSIM_GEN_BOOL, TF(sigmoid_router), DEC, NONE, NULL,
     "sigmoid gate scores instead of softmax"},
    {"q_lora", PSIM_GEN_INT, TF(q_lora), DEC, COUNT0, "0", "MLA query rank; 0: none"},
    {"kv_lora", PSIM_GEN_INT, TF(kv_lora), DEC, COUNT0, "0",
     "MLA key/value latent rank; 0: grouped-query attention"},
    {"qk_rope", PSIM_GEN_INT, TF(qk_rope), DEC, COUNT0, "0", "MLA rotary head part"},
    {"mtp", PSIM_GEN_INT, TF(mtp), DEC, COUNT0, "0", "multi-token prediction modules"},
    {NULL, PSIM_GEN_INT, 0, NULL, NONE, NULL, NULL}};

static const psim_gen_option net_options[] = {
    {"batch", PSIM_GEN_INT, NET(batch), NETS, COUNT, NULL, "samples per iteration"},
    {"layers", PSIM_GEN_INT, NET(layers), "mlp", COUNT, NULL, "hidden layers"},
    {"hidden", PSIM_GEN_INT, NET(hidden), "mlp", COUNT, NULL, "width"},
    {"classes", PSIM_GEN_INT, NET(classes), "mlp alexnet resnet inception", COUNT, NULL,
     "output classes"},
    {"depth", PSIM_GEN_INT, NET(depth), "resnet", COUNT, NULL, "50, 101 or 152"},
    {"tables", PSIM_GEN_INT, NET(tables), "dlrm", COUNT, NULL, "embedding tables"},
    {"rows", PSIM_GEN_INT, NET(rows), "dlrm", COUNT, NULL, "rows per table"},
    {"emb_dim", PSIM_GEN_INT, NET(emb_dim), "dlrm", COUNT, NULL, "embedding width"},
    {"dtype", PSIM_GEN_STR, NET(dtype), NETS, NONE, NULL, "fp32, fp16, bf16, fp8 or fp64"},
    {"name", PSIM_GEN_STR, NET(name), NETS, NONE, "the family's", "model name"},
    {NULL, PSIM_GEN_INT, 0, NULL, NONE, NULL, NULL}};

static const psim_gen_family families[] = {
    {"gpt", "GPT-3 1.3B by default (Brown et al. 2020)", psim_gen_gpt_opts_init, psim_gen_gpt,
     NULL},
    {"mpt", "MPT-7B by default (llm-foundry): gpt without dropout, vocab 50368",
     psim_gen_mpt_opts_init, psim_gen_mpt, NULL},
    {"llama", "LLaMA-2 7B by default: RMSNorm, SwiGLU, rotary positions (not modelled)",
     psim_gen_llama_opts_init, psim_gen_llama, NULL},
    {"llama3", "Llama-3-8B by default: llama with 8 kv heads, ffn 14336, vocab 128256",
     psim_gen_llama3_opts_init, psim_gen_llama, NULL},
    {"bert", "BERT-large by default", psim_gen_bert_opts_init, psim_gen_bert, NULL},
    {"moe", "gpt with every FFN a mixture of experts", psim_gen_moe_opts_init, psim_gen_moe, NULL},
    {"gpt3-mlperf", "GPT-3 175B as MLPerf Training runs it: mpt's structure, seq 2048, batch 1536",
     psim_gen_gpt3_mlperf_opts_init, psim_gen_mpt, NULL},
    {"qwen3", "Qwen3-8B by default: GQA, qk-norm, SwiGLU, untied", psim_gen_qwen3_opts_init,
     psim_gen_decoder, NULL},
    {"qwen3-moe", "Qwen3-30B-A3B by default: 128 experts top-8, dropless",
     psim_gen_qwen3_moe_opts_init, psim_gen_decoder, NULL},
    {"mixtral", "Mixtral 8x7B by default: 8 SwiGLU experts top-2, GQA 32/8",
     psim_gen_mixtral_opts_init, psim_gen_decoder, NULL},
    {"deepseek-v3", "DeepSeek-V3 by default: MLA, 3 dense + 58 MoE layers, 1 shared + 256 experts",
     psim_gen_deepseek_v3_opts_init, psim_gen_decoder, NULL},
    {"gpt-oss", "GPT-OSS-120B by default: 128 experts top-4, GQA 64/8, biases",
     psim_gen_gpt_oss_opts_init, psim_gen_decoder, NULL},
    {"mlp", "a multi-layer perceptron", NULL, NULL, psim_gen_mlp},
    {"alexnet", "AlexNet", NULL, NULL, psim_gen_alexnet},
    {"resnet", "ResNet", NULL, NULL, psim_gen_resnet},
    {"inception", "Inception-v3", NULL, NULL, psim_gen_inception},
    {"dlrm", "DLRM with MLPerf widths", NULL, NULL, psim_gen_dlrm},
    {NULL, NULL, NULL, NULL, NULL}};

const psim_gen_family *psim_gen_families(void) {
  return families;
}

const psim_gen_family *psim_gen_family_find(const char *name) {
  for (const psim_gen_family *f = families; f->name; f++)
    if (strcmp(f->name, name) == 0)
      return f;
  return NULL;
}

const char *psim_gen_family_list(void) {
  return "gpt, mpt, llama, llama3, bert, moe, gpt3-mlperf, qwen3, qwen3-moe, mixtral, deepseek-v3, "
         "gpt-oss, mlp, alexnet, resnet, inception, dlrm";
}

void psim_gen_opts_init(const psim_gen_family *f, psim_gen_opts *o) {
  memset(o, 0, sizeof *o);
  if (f->tf_init)
    f->tf_init(&o->tf);
  else
    psim_gen_net_opts_init(&o->net, f->name);
}

static const psim_gen_option *options_of(const psim_gen_family *f) {
  return f->tf_gen ? tf_options : net_options;
}

/* Whether the space-separated list holds the word fam. */
static bool takes(const char *list, const char *fam) {
  size_t n = strlen(fam);
  for (const char *p = strstr(list, fam); p; p = strstr(p + 1, fam))
    if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
      return true;
  return false;
}

const psim_gen_option *psim_gen_option_find(const psim_gen_family *f, const char *key) {
  for (const psim_gen_option *x = options_of(f); x->key; x++)
    if (strcmp(x->key, key) == 0 && takes(x->families, f->name))
      return x;
  return NULL;
}

bool psim_gen_in_range(const psim_gen_option *x, double v) {
  if (x->type == PSIM_GEN_INT)
    return v == floor(v) && v >= x->min && v <= x->max;
  /* a negative min stands for [0, max] (FACTOR0) */
  return x->type == PSIM_GEN_DBL && isfinite(v) && (x->min < 0 ? v >= 0 : v > x->min) &&
         v <= x->max;
}

const char *psim_gen_range_text(const psim_gen_option *x) {
  if (x->min <= 0 && x->type != PSIM_GEN_DBL)
    return "a non-negative integer";
  if (x->min < 0)
    return "a number in [0, 1000]";
  return x->type == PSIM_GEN_INT ? "a positive integer" : "a positive number";
}

/* Where x lives in o (the family's options struct), checked against its type. */
static void *field(psim_gen_opts *o, const psim_gen_family *f, const psim_gen_option *x,
                   psim_gen_type type) {
  assert(x && x->type == type && takes(x->families, f->name));
  return (char *)(f->tf_gen ? (void *)&o->tf : (void *)&o->net) + x->offset;
}

void psim_gen_set_int(psim_gen_opts *o, const psim_gen_family *f, const psim_gen_option *x,
                      int64_t v) {
  assert(v >= x->min);
  *(int64_t *)field(o, f, x, PSIM_GEN_INT) = v;
}

void psim_gen_set_double(psim_gen_opts *o, const psim_gen_family *f, const psim_gen_option *x,
                         double v) {
  assert(psim_gen_in_range(x, v));
  *(double *)field(o, f, x, PSIM_GEN_DBL) = v;
}

void psim_gen_set_string(psim_gen_opts *o, const psim_gen_family *f, const psim_gen_option *x,
                         const char *v) {
  *(const char **)field(o, f, x, PSIM_GEN_STR) = v;
}

void psim_gen_set_bool(psim_gen_opts *o, const psim_gen_family *f, const psim_gen_option *x,
                       bool v) {
  *(bool *)field(o, f, x, PSIM_GEN_BOOL) = v;
}

psim_status psim_gen_generate(const psim_gen_family *f, const psim_gen_opts *o,
                              struct cJSON **out) {
  assert(f && (f->tf_gen != NULL) != (f->net_gen != NULL));
  return f->tf_gen ? f->tf_gen(&o->tf, out) : f->net_gen(&o->net, out);
}

/* " --flag [default]" for option x of family f (defaults from f's init). */
static void print_option(FILE *out, const psim_gen_family *f, const psim_gen_opts *d,
                         const psim_gen_option *x) {
  char flag[32];
  snprintf(flag, sizeof flag, "%s", x->key);
  for (char *p = flag; *p; p++)
    *p = *p == '_' ? '-' : *p;
  const char *at =
      (const char *)(f->tf_gen ? (const void *)&d->tf : (const void *)&d->net) + x->offset;
  char def[48] = "";
  if (x->type == PSIM_GEN_INT && *(const int64_t *)at)
    snprintf(def, sizeof def, "%lld", (long long)*(const int64_t *)at);
  else if (x->type == PSIM_GEN_DBL)
    snprintf(def, sizeof def, "%g", *(const double *)at);
  else if (x->type == PSIM_GEN_STR && *(const char *const *)at)
    snprintf(def, sizeof def, "%s", *(const char *const *)at);
  else if (x->type == PSIM_GEN_BOOL)
    snprintf(def, sizeof def, "%s", *(const bool *)at ? "on" : "off");
  else if (x->unset)
    snprintf(def, sizeof def, "%s", x->unset);
  fprintf(out, "    --%-16s [%s] %s\n", flag, def, x->help);
}

void psim_gen_print_help(FILE *out) {
  fprintf(out, "families and options (defaults in brackets; numbers are positive; sweeps take\n"
               "the same options as JSON keys with '_' for '-': \"kv_heads\": 8):\n");
  for (const psim_gen_family *f = families; f->name; f++) {
    psim_gen_opts d;
    psim_gen_opts_init(f, &d);
    fprintf(out, "  %s: %s\n", f->name, f->help);
    for (const psim_gen_option *x = options_of(f); x->key; x++)
      if (takes(x->families, f->name))
        print_option(out, f, &d, x);
  }
}
