/* cmd_model.c - plansim model FAMILY [options] [-o FILE]: runs a generator. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "models/generators.h"
#include "sim/core/json.h"

typedef enum flag_type { F_INT, F_STR, F_BOOL, F_DBL } flag_type;

typedef struct flag {
  const char *name;
  flag_type type;
  size_t off;
  const char *families; /* space-separated families that take it */
} flag;

#define TF(f)  offsetof(psim_gen_tf_opts, f)
#define NET(f) offsetof(psim_gen_net_opts, f)
#define TFS    "gpt llama bert moe"

static const flag tf_flags[] = {{"layers", F_INT, TF(layers), TFS},
                                {"hidden", F_INT, TF(hidden), TFS},
                                {"heads", F_INT, TF(heads), TFS},
                                {"kv-heads", F_INT, TF(kv_heads), "llama"},
                                {"seq", F_INT, TF(seq), TFS},
                                {"vocab", F_INT, TF(vocab), TFS},
                                {"batch", F_INT, TF(batch), TFS},
                                {"ffn", F_INT, TF(ffn), TFS},
                                {"dtype", F_STR, TF(dtype), TFS},
                                {"name", F_STR, TF(name), TFS},
                                {"flash", F_BOOL, TF(flash), TFS},
                                {"experts", F_INT, TF(experts), "moe"},
                                {"top-k", F_INT, TF(top_k), "moe"},
                                {"capacity-factor", F_DBL, TF(capacity_factor), "moe"},
                                {NULL, F_INT, 0, NULL}};

static const flag net_flags[] = {{"batch", F_INT, NET(batch), "mlp alexnet resnet inception dlrm"},
                                 {"layers", F_INT, NET(layers), "mlp"},
                                 {"hidden", F_INT, NET(hidden), "mlp"},
                                 {"classes", F_INT, NET(classes), "mlp alexnet resnet inception"},
                                 {"depth", F_INT, NET(depth), "resnet"},
                                 {"tables", F_INT, NET(tables), "dlrm"},
                                 {"rows", F_INT, NET(rows), "dlrm"},
                                 {"emb-dim", F_INT, NET(emb_dim), "dlrm"},
                                 {"dtype", F_STR, NET(dtype), "mlp alexnet resnet inception dlrm"},
                                 {"name", F_STR, NET(name), "mlp alexnet resnet inception dlrm"},
                                 {NULL, F_INT, 0, NULL}};

static bool takes(const char *families, const char *fam) {
  size_t n = strlen(fam);
  for (const char *p = strstr(families, fam); p; p = strstr(p + 1, fam))
    if ((p == families || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
      return true;
  return false;
}

/* Every number a generator takes is a count or a factor that must be
 * positive: an explicit 0 would otherwise read as "the default" (--ffn 0 gave
 * 4*hidden, --kv-heads 0 the heads), so it is refused here. */
static psim_status set_flag(const flag *f, void *opts, const char *val) {
  char *at = (char *)opts + f->off, opt[64];
  snprintf(opt, sizeof opt, "--%s", f->name);
  if (f->type == F_STR) {
    *(const char **)at = val;
    return PSIM_OK;
  }
  if (f->type == F_INT)
    return psim_cli_parse_int("model", opt, val, 1, INT64_MAX, (int64_t *)at);
  char *end = NULL;
  errno = 0;
  double d = strtod(val, &end);
  if (errno || end == val || *end || !isfinite(d) || d <= 0)
    return psim_cli_usage("model", "%s wants a positive number, not '%s'", opt, val);
  *(double *)at = d;
  return PSIM_OK;
}

/* Parses argv[2..] into opts; *out gets the -o path. */
static psim_status parse_flags(int argc, char **argv, const char *fam, const flag *flags,
                               void *opts, const char **out) {
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
      PSIM_CHECK(psim_cli_need_value("model", argc, argv, i));
      *out = argv[++i];
      continue;
    }
    const flag *f = NULL;
    for (const flag *x = flags; a[0] == '-' && a[1] == '-' && x->name; x++)
      if (strcmp(a + 2, x->name) == 0 && takes(x->families, fam))
        f = x;
    if (!f)
      return psim_cli_usage("model", "unknown option '%s' for %s", a, fam);
    if (f->type == F_BOOL) {
      *(bool *)((char *)opts + f->off) = true;
      continue;
    }
    PSIM_CHECK(psim_cli_need_value("model", argc, argv, i));
    PSIM_CHECK(set_flag(f, opts, argv[++i]));
  }
  return PSIM_OK;
}

typedef psim_status (*tf_gen)(const psim_gen_tf_opts *, struct cJSON **);
typedef psim_status (*net_gen)(const psim_gen_net_opts *, struct cJSON **);

static const struct {
  const char *family;
  void (*tf_init)(psim_gen_tf_opts *);
  tf_gen tf;
  net_gen net;
} families[] = {
    {"gpt", psim_gen_gpt_opts_init, psim_gen_gpt, NULL},
    {"llama", psim_gen_llama_opts_init, psim_gen_llama, NULL},
    {"bert", psim_gen_bert_opts_init, psim_gen_bert, NULL},
    {"moe", psim_gen_moe_opts_init, psim_gen_moe, NULL},
    {"mlp", NULL, NULL, psim_gen_mlp},
    {"alexnet", NULL, NULL, psim_gen_alexnet},
    {"resnet", NULL, NULL, psim_gen_resnet},
    {"inception", NULL, NULL, psim_gen_inception},
    {"dlrm", NULL, NULL, psim_gen_dlrm},
};

static psim_status generate(int argc, char **argv, int k, const char **out, cJSON **doc) {
  const char *fam = families[k].family;
  if (families[k].tf) {
    psim_gen_tf_opts o;
    families[k].tf_init(&o);
    PSIM_CHECK(parse_flags(argc, argv, fam, tf_flags, &o, out));
    PSIM_CHECK(psim_file_check_output("-o", *out));
    return families[k].tf(&o, doc);
  }
  psim_gen_net_opts o;
  psim_gen_net_opts_init(&o, fam);
  PSIM_CHECK(parse_flags(argc, argv, fam, net_flags, &o, out));
  PSIM_CHECK(psim_file_check_output("-o", *out));
  return families[k].net(&o, doc);
}

psim_status psim_cmd_model(int argc, char **argv) {
  if (argc < 2)
    return psim_cli_usage("model", "missing FAMILY (gpt, llama, bert, moe, mlp, alexnet, "
                                   "resnet, inception, dlrm)");
  int k = -1;
  for (int i = 0; i < (int)(sizeof families / sizeof families[0]); i++)
    if (strcmp(argv[1], families[i].family) == 0)
      k = i;
  if (k < 0)
    return psim_cli_usage("model",
                          "unknown family '%s'; expected gpt, llama, bert, moe, mlp, "
                          "alexnet, resnet, inception or dlrm",
                          argv[1]);
  const char *out = "-";
  cJSON *doc = NULL;
  PSIM_CHECK(generate(argc, argv, k, &out, &doc));
  psim_status s = psim_json_write_file(out, doc);
  cJSON_Delete(doc);
  return s;
}
