/* sweep.c - plansim.sweep/1: loading, running one case, results files
 * (sweep.h, docs/sweep.md). */
#include "search/sweep/sweep.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/generators.h"
#include "search/plan/plan.h"
#include "search/policy/searchers.h"
#include "search/search.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "topologies/presets.h"

/* ---- loading ---- */

void psim_sweep_init(psim_sweep *s) {
  memset(s, 0, sizeof *s);
}

static void free_strings(char **a, int32_t n) {
  for (int32_t i = 0; a && i < n; i++)
    psim_free(a[i]);
  psim_free(a);
}

void psim_sweep_destroy(psim_sweep *s) {
  for (int32_t i = 0; s->models && i < s->n_models; i++) {
    psim_free(s->models[i].label);
    psim_free(s->models[i].file);
    psim_free(s->models[i].family);
    cJSON_Delete(s->models[i].gen);
  }
  for (int32_t i = 0; s->clusters && i < s->n_clusters; i++) {
    psim_free(s->clusters[i].label);
    psim_free(s->clusters[i].file);
    psim_free(s->clusters[i].preset);
  }
  psim_free(s->models);
  psim_free(s->clusters);
  free_strings(s->searchers, s->n_searchers);
  free_strings(s->budgets, s->n_budgets);
  psim_free(s->seeds);
  psim_free(s->cases);
  psim_free(s->file);
  psim_free(s->name);
  psim_sweep_init(s);
}

static char *dup_or_null(const char *s) {
  return s ? psim_strdup(s) : NULL;
}

/* path relative to the sweep file's folder (absolute paths kept). */
static char *resolve(const char *sweep_file, const char *path) {
  const char *slash = strrchr(sweep_file, '/');
  size_t dir = slash && path[0] != '/' ? (size_t)(slash - sweep_file) + 1 : 0;
  size_t n = dir + strlen(path) + 1;
  char *out = psim_malloc(n);
  if (out)
    snprintf(out, n, "%.*s%s", (int)dir, sweep_file, path);
  return out;
}

/* "models/gpt-1.3b.json" -> "gpt-1.3b". */
static char *basename_label(const char *path) {
  const char *b = strrchr(path, '/');
  b = b ? b + 1 : path;
  size_t n = strlen(b);
  if (n > 5 && strcmp(b + n - 5, ".json") == 0)
    n -= 5;
  char *out = psim_malloc(n + 1);
  if (out)
    snprintf(out, n + 1, "%.*s", (int)n, b);
  return out;
}

static const char *const gen_families[] = {"gpt",     "llama",  "bert",      "moe",  "mlp",
                                           "alexnet", "resnet", "inception", "dlrm", NULL};

static psim_status load_model(psim_jctx *c, const psim_sweep *s, const cJSON *v,
                              psim_sweep_model *out) {
  static const char *const keys[] = {"name", "file", "generator", "options", NULL};
  const char *file = NULL, *name = NULL, *gen = NULL;
  if (cJSON_IsString(v)) {
    file = v->valuestring;
  } else {
    PSIM_CHECK(psim_json_check_keys(c, v, keys));
    PSIM_CHECK(psim_json_string(c, v, "name", false, &name));
    PSIM_CHECK(psim_json_string(c, v, "file", false, &file));
    PSIM_CHECK(psim_json_string(c, v, "generator", false, &gen));
    if (!file == !gen)
      return psim_jerr(c, "give either \"file\" or \"generator\"");
  }
  if (gen) {
    bool known = false;
    for (const char *const *f = gen_families; *f; f++)
      known = known || strcmp(*f, gen) == 0;
    if (!known)
      return psim_jerr(c,
                       "generator: unknown family '%s' (gpt, llama, bert, moe, mlp, alexnet, "
                       "resnet, inception, dlrm)",
                       gen);
    const cJSON *opts = cJSON_GetObjectItemCaseSensitive(v, "options");
    if (opts && !cJSON_IsObject(opts))
      return psim_jerr(c, "options: expected an object of generator options");
    out->family = psim_strdup(gen);
    out->gen = opts ? cJSON_Duplicate(opts, 1) : cJSON_CreateObject();
    out->label = psim_strdup(name ? name : gen);
  } else {
    out->file = resolve(s->file, file);
    out->label = name ? psim_strdup(name) : basename_label(file);
  }
  if (!out->label || (gen && (!out->family || !out->gen)) || (!gen && !out->file))
    return psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
  return PSIM_OK;
}

static psim_status add_cluster(psim_sweep *s, const char *label, const char *file,
                               const char *preset, int32_t nodes) {
  psim_sweep_cluster *c = &s->clusters[s->n_clusters++];
  memset(c, 0, sizeof *c);
  c->nodes = nodes;
  c->file = file ? resolve(s->file, file) : NULL;
  c->preset = dup_or_null(preset);
  char buf[160];
  if (!label && preset)
    snprintf(buf, sizeof buf, "%s-x%d", preset, nodes);
  c->label = label ? psim_strdup(label) : preset ? psim_strdup(buf) : basename_label(file);
  if (!c->label || (file && !c->file) || (preset && !c->preset))
    return psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
  return PSIM_OK;
}

static psim_status load_preset(psim_jctx *c, psim_sweep *s, const cJSON *v, const char *name,
                               const char *preset) {
  bool known = false;
  for (const char *const *p = psim_preset_names(); *p; p++)
    known = known || strcmp(*p, preset) == 0;
  if (!known)
    return psim_jerr(c, "preset: unknown preset '%s' (see 'plansim help cluster')", preset);
  const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(v, "nodes");
  int32_t n = cJSON_IsArray(nodes) ? cJSON_GetArraySize(nodes) : 1;
  if (n < 1)
    return psim_jerr(c, "nodes: expected a node count or a non-empty list of them");
  if (cJSON_IsArray(nodes) && n > 1 && name)
    return psim_jerr(c, "name: a preset with several node counts takes no single name");
  for (int32_t k = 0; k < n; k++) {
    int64_t count = 1;
    size_t saved = psim_jctx_key(c, "nodes");
    psim_status st = PSIM_OK;
    if (cJSON_IsArray(nodes)) {
      size_t at = psim_jctx_index(c, (size_t)k);
      st = psim_json_value_int(c, cJSON_GetArrayItem(nodes, k), 1, 65536, &count);
      psim_jctx_pop(c, at);
    } else if (nodes) {
      st = psim_json_value_int(c, nodes, 1, 65536, &count);
    }
    psim_jctx_pop(c, saved);
    PSIM_CHECK(st);
    PSIM_CHECK(add_cluster(s, name, NULL, preset, (int32_t)count));
  }
  return PSIM_OK;
}

static psim_status load_cluster(psim_jctx *c, psim_sweep *s, const cJSON *v) {
  static const char *const keys[] = {"name", "file", "preset", "nodes", NULL};
  const char *file = NULL, *name = NULL, *preset = NULL;
  if (cJSON_IsString(v)) {
    file = v->valuestring;
  } else {
    PSIM_CHECK(psim_json_check_keys(c, v, keys));
    PSIM_CHECK(psim_json_string(c, v, "name", false, &name));
    PSIM_CHECK(psim_json_string(c, v, "file", false, &file));
    PSIM_CHECK(psim_json_string(c, v, "preset", false, &preset));
    if (!file == !preset)
      return psim_jerr(c, "give either \"file\" or \"preset\"");
    if (preset)
      return load_preset(c, s, v, name, preset);
  }
  return add_cluster(s, name, file, NULL, 0);
}

/* "60s", "2m", "1.5h" -> seconds; "20000" -> evaluations; "" -> none. */
static psim_status parse_budget(const char *text, double *seconds, int64_t *evals) {
  *seconds = 0;
  *evals = 0;
  if (!*text)
    return PSIM_OK;
  const char *why = psim_search_budget_problem(text, seconds, evals);
  return why ? psim_error(PSIM_EINPUT, "budget '%s': %s", text, why) : PSIM_OK;
}

/* Every budget of the list, with its JSON path in errors. */
static psim_status check_budgets(psim_jctx *c, const psim_sweep *s) {
  for (int32_t i = 0; i < s->n_budgets; i++) {
    double sec;
    int64_t ev;
    const char *why = *s->budgets[i] ? psim_search_budget_problem(s->budgets[i], &sec, &ev) : NULL;
    if (why) {
      size_t saved = psim_jctx_key(c, "budgets");
      psim_jctx_index(c, (size_t)i);
      psim_status st = psim_jerr(c, "'%s': %s", s->budgets[i], why);
      psim_jctx_pop(c, saved);
      return st;
    }
  }
  return PSIM_OK;
}

/* An array member of strings (numbers allowed when numbers_ok); default when absent. */
static psim_status string_list(psim_jctx *c, const cJSON *root, const char *key, const char *def,
                               bool numbers_ok, char ***out, int32_t *n) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  size_t saved = psim_jctx_key(c, key);
  psim_status st = v ? psim_json_expect_array(c, v) : PSIM_OK;
  int32_t count = v ? cJSON_GetArraySize(v) : 1;
  if (st == PSIM_OK && count < 1)
    st = psim_jerr(c, "expected a non-empty list");
  if (st == PSIM_OK && !(*out = psim_calloc((size_t)count, sizeof **out)))
    st = psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
  for (int32_t i = 0; st == PSIM_OK && i < count; i++) {
    const cJSON *x = v ? cJSON_GetArrayItem(v, i) : NULL;
    char num[64];
    const char *text = def;
    if (x && cJSON_IsString(x)) {
      text = x->valuestring;
    } else if (x && numbers_ok && cJSON_IsNumber(x)) {
      snprintf(num, sizeof num, "%.17g", x->valuedouble);
      text = num;
    } else if (x) {
      size_t at = psim_jctx_index(c, (size_t)i);
      st = psim_jerr(c, "expected a string");
      psim_jctx_pop(c, at);
    }
    if (st == PSIM_OK && !((*out)[(*n)++] = psim_strdup(text)))
      st = psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
  }
  psim_jctx_pop(c, saved);
  return st;
}

static psim_status load_lists(psim_jctx *c, psim_sweep *s, const cJSON *root) {
  PSIM_CHECK(string_list(c, root, "searchers", "grid", false, &s->searchers, &s->n_searchers));
  for (int32_t i = 0; i < s->n_searchers; i++)
    if (strcmp(s->searchers[i], "auto") != 0 && !psim_searcher_find(s->searchers[i]))
      return psim_jerr(c,
                       "searchers[%d]: unknown searcher '%s' (auto, alpa, mcmc, grid, "
                       "exhaustive)",
                       i, s->searchers[i]);
  PSIM_CHECK(string_list(c, root, "budgets", "", true, &s->budgets, &s->n_budgets));
  PSIM_CHECK(check_budgets(c, s));
  const cJSON *seeds = cJSON_GetObjectItemCaseSensitive(root, "seeds");
  int32_t n = seeds ? cJSON_GetArraySize(seeds) : 1;
  size_t saved = psim_jctx_key(c, "seeds");
  if (seeds && (!cJSON_IsArray(seeds) || n < 1))
    return psim_jerr(c, "expected a non-empty list of seeds");
  if (!(s->seeds = psim_calloc((size_t)n, sizeof *s->seeds)))
    return psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
  for (int32_t i = 0; i < n; i++) {
    int64_t v = 1;
    size_t at = psim_jctx_index(c, (size_t)i);
    if (seeds)
      PSIM_CHECK(psim_json_value_int(c, cJSON_GetArrayItem(seeds, i), 0, INT64_MAX, &v));
    psim_jctx_pop(c, at);
    s->seeds[s->n_seeds++] = (uint64_t)v;
  }
  psim_jctx_pop(c, saved);
  return PSIM_OK;
}

static psim_status load_inputs(psim_jctx *c, psim_sweep *s, const cJSON *root) {
  const cJSON *models = cJSON_GetObjectItemCaseSensitive(root, "models");
  const cJSON *clusters = cJSON_GetObjectItemCaseSensitive(root, "clusters");
  size_t saved = psim_jctx_key(c, "models");
  if (!cJSON_IsArray(models) || cJSON_GetArraySize(models) < 1)
    return psim_jerr(c, "expected a non-empty list of model files or generators");
  s->models = psim_calloc((size_t)cJSON_GetArraySize(models), sizeof *s->models);
  if (!s->models)
    return psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
  for (int32_t i = 0; i < cJSON_GetArraySize(models); i++) {
    size_t at = psim_jctx_index(c, (size_t)i);
    PSIM_CHECK(load_model(c, s, cJSON_GetArrayItem(models, i), &s->models[s->n_models++]));
    psim_jctx_pop(c, at);
  }
  psim_jctx_pop(c, saved);
  saved = psim_jctx_key(c, "clusters");
  if (!cJSON_IsArray(clusters) || cJSON_GetArraySize(clusters) < 1)
    return psim_jerr(c, "expected a non-empty list of cluster files or presets");
  size_t slots = 0; /* a preset with a list of node counts is one cluster per count */
  for (const cJSON *x = clusters->child; x; x = x->next) {
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(x, "nodes");
    slots += cJSON_IsArray(nodes) && cJSON_GetArraySize(nodes) > 1
                 ? (size_t)cJSON_GetArraySize(nodes)
                 : 1;
  }
  if (!(s->clusters = psim_calloc(slots, sizeof *s->clusters)))
    return psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
  for (int32_t i = 0; i < cJSON_GetArraySize(clusters); i++) {
    size_t at = psim_jctx_index(c, (size_t)i);
    PSIM_CHECK(load_cluster(c, s, cJSON_GetArrayItem(clusters, i)));
    psim_jctx_pop(c, at);
  }
  psim_jctx_pop(c, saved);
  return PSIM_OK;
}

static psim_status make_cases(psim_sweep *s) {
  int64_t n = (int64_t)s->n_models * s->n_clusters * s->n_searchers * s->n_seeds * s->n_budgets;
  if (n > 1000000)
    return psim_error(PSIM_EINPUT, "%s: %lld cases (more than 1,000,000)", s->file, (long long)n);
  s->cases = psim_calloc((size_t)n, sizeof *s->cases);
  if (!s->cases)
    return psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
  for (int32_t a = 0; a < s->n_models; a++)
    for (int32_t b = 0; b < s->n_clusters; b++)
      for (int32_t c = 0; c < s->n_searchers; c++)
        for (int32_t d = 0; d < s->n_seeds; d++)
          for (int32_t e = 0; e < s->n_budgets; e++) {
            psim_sweep_case *k = &s->cases[s->n_cases++];
            *k = (psim_sweep_case){a, b, c, d, e, ""};
            snprintf(k->key, sizeof k->key, "model=%s cluster=%s search=%s seed=%llu budget=%s",
                     s->models[a].label, s->clusters[b].label, s->searchers[c],
                     (unsigned long long)s->seeds[d], *s->budgets[e] ? s->budgets[e] : "default");
          }
  for (int32_t i = 0; i < s->n_cases; i++)
    for (int32_t j = 0; j < i; j++)
      if (strcmp(s->cases[i].key, s->cases[j].key) == 0)
        return psim_error(PSIM_EINPUT,
                          "%s: two cases have the key '%s' (give the models or "
                          "clusters distinct names)",
                          s->file, s->cases[i].key);
  return PSIM_OK;
}

static psim_status load_doc(psim_sweep *s, const cJSON *root) {
  static const char *const keys[] = {"format",    "name",  "description", "models", "clusters",
                                     "searchers", "seeds", "budgets",     NULL};
  psim_jctx c;
  psim_jctx_init(&c, s->file);
  const char *format = NULL, *name = NULL, *desc = NULL;
  PSIM_CHECK(psim_json_expect_object(&c, root));
  PSIM_CHECK(psim_json_string(&c, root, "format", true, &format));
  if (strcmp(format, "plansim.sweep/1") != 0)
    return psim_jerr(&c, "format: expected \"plansim.sweep/1\", not \"%s\"", format);
  PSIM_CHECK(psim_json_check_keys(&c, root, keys));
  PSIM_CHECK(psim_json_string(&c, root, "name", false, &name));
  PSIM_CHECK(psim_json_string(&c, root, "description", false, &desc));
  if (!(s->name = psim_strdup(name ? name : "sweep")))
    return psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
  PSIM_CHECK(load_inputs(&c, s, root));
  PSIM_CHECK(load_lists(&c, s, root));
  return make_cases(s);
}

psim_status psim_sweep_load(const char *file, psim_sweep *s) {
  psim_sweep_init(s);
  if (!(s->file = psim_strdup(file)))
    return psim_error(PSIM_ENOMEM, "out of memory");
  cJSON *root = NULL;
  PSIM_CHECK(psim_json_load_file(file, &root));
  psim_status st = load_doc(s, root);
  cJSON_Delete(root);
  return st;
}

/* ---- generated inputs ---- */

typedef struct gen_field {
  const char *key;
  size_t offset;
  char type; /* 'i' int64, 's' string, 'b' bool, 'd' double */
} gen_field;

#define TF(f, t)                                                                                   \
  { #f, offsetof(psim_gen_tf_opts, f), t }
#define NET(f, t)                                                                                  \
  { #f, offsetof(psim_gen_net_opts, f), t }
static const gen_field tf_fields[] = {TF(name, 's'),  TF(layers, 'i'),          TF(hidden, 'i'),
                                      TF(heads, 'i'), TF(kv_heads, 'i'),        TF(seq, 'i'),
                                      TF(vocab, 'i'), TF(batch, 'i'),           TF(ffn, 'i'),
                                      TF(dtype, 's'), TF(flash, 'b'),           TF(experts, 'i'),
                                      TF(top_k, 'i'), TF(capacity_factor, 'd'), {NULL, 0, 0}};
static const gen_field net_fields[] = {NET(name, 's'),   NET(batch, 'i'),   NET(layers, 'i'),
                                       NET(hidden, 'i'), NET(classes, 'i'), NET(depth, 'i'),
                                       NET(tables, 'i'), NET(rows, 'i'),    NET(emb_dim, 'i'),
                                       NET(dtype, 's'),  {NULL, 0, 0}};

/* Generator numbers are counts and factors: 0 would read as "the default"
 * (ffn, kv_heads), so only positive numbers pass. */
static psim_status set_field(const gen_field *f, const cJSON *v, void *opts, const char *what) {
  char *p = (char *)opts + f->offset;
  if ((f->type == 'i' || f->type == 'd') && cJSON_IsNumber(v) && !(v->valuedouble > 0))
    return psim_error(PSIM_EINPUT, "%s: option '%s' must be positive, not %g", what, f->key,
                      v->valuedouble);
  if (f->type == 's' && cJSON_IsString(v))
    *(const char **)p = v->valuestring;
  else if (f->type == 'b' && cJSON_IsBool(v))
    *(bool *)p = cJSON_IsTrue(v);
  else if (f->type == 'd' && cJSON_IsNumber(v))
    *(double *)p = v->valuedouble;
  else if (f->type == 'i' && cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) &&
           fabs(v->valuedouble) < 9e15)
    *(int64_t *)p = (int64_t)v->valuedouble;
  else
    return psim_error(PSIM_EINPUT, "%s: option '%s' has the wrong type", what, f->key);
  return PSIM_OK;
}

static psim_status set_fields(const gen_field *fields, const cJSON *gen, void *opts,
                              const char *what) {
  for (const cJSON *v = gen ? gen->child : NULL; v; v = v->next) {
    const gen_field *f = fields;
    while (f->key && strcmp(f->key, v->string) != 0)
      f++;
    if (!f->key)
      return psim_error(PSIM_EINPUT, "%s: unknown generator option '%s'", what, v->string);
    PSIM_CHECK(set_field(f, v, opts, what));
  }
  return PSIM_OK;
}

static psim_status generate(const psim_sweep_model *sm, cJSON **doc) {
  const char *f = sm->family;
  if (!strcmp(f, "gpt") || !strcmp(f, "llama") || !strcmp(f, "bert") || !strcmp(f, "moe")) {
    psim_gen_tf_opts o;
    (!strcmp(f, "gpt")     ? psim_gen_gpt_opts_init
     : !strcmp(f, "llama") ? psim_gen_llama_opts_init
     : !strcmp(f, "bert")  ? psim_gen_bert_opts_init
                           : psim_gen_moe_opts_init)(&o);
    if (!o.name)
      o.name = sm->label;
    PSIM_CHECK(set_fields(tf_fields, sm->gen, &o, sm->label));
    return (!strcmp(f, "gpt")     ? psim_gen_gpt
            : !strcmp(f, "llama") ? psim_gen_llama
            : !strcmp(f, "bert")  ? psim_gen_bert
                                  : psim_gen_moe)(&o, doc);
  }
  psim_gen_net_opts o;
  psim_gen_net_opts_init(&o, f);
  o.name = sm->label;
  PSIM_CHECK(set_fields(net_fields, sm->gen, &o, sm->label));
  return (!strcmp(f, "mlp")         ? psim_gen_mlp
          : !strcmp(f, "alexnet")   ? psim_gen_alexnet
          : !strcmp(f, "resnet")    ? psim_gen_resnet
          : !strcmp(f, "inception") ? psim_gen_inception
                                    : psim_gen_dlrm)(&o, doc);
}

static void make_dir(const char *path) {
  if (mkdir(path, 0777) != 0 && errno != EEXIST)
    errno = 0; /* reported when the file inside fails to write */
}

/* dir/sub/label.json ('/' and spaces in labels become '_'). */
static void generated_path(const char *dir, const char *sub, const char *label, char *buf,
                           size_t size) {
  snprintf(buf, size, "%s/%s", dir, sub);
  make_dir(buf);
  size_t n = strlen(buf);
  snprintf(buf + n, size - n, "/%s.json", label);
  for (char *p = buf + n + 1; *p; p++)
    if (*p == '/' || *p == ' ')
      *p = '_';
}

static psim_status case_model(const psim_sweep_model *sm, const char *dir, psim_model *m) {
  if (sm->file)
    return psim_model_load(sm->file, m);
  char path[1024];
  cJSON *doc = NULL;
  generated_path(dir, "models", sm->label, path, sizeof path);
  psim_status st = generate(sm, &doc);
  if (st == PSIM_OK)
    st = psim_json_write_file(path, doc);
  cJSON_Delete(doc);
  return st == PSIM_OK ? psim_model_load(path, m) : st;
}

static psim_status case_cluster(const psim_sweep_cluster *sc, const char *dir, psim_cluster *c) {
  if (sc->file)
    return psim_cluster_load(sc->file, c);
  psim_preset_opts o;
  psim_preset_opts_init(&o);
  o.preset = sc->preset;
  o.nodes = sc->nodes;
  o.name = sc->label;
  char path[1024];
  cJSON *doc = NULL;
  generated_path(dir, "clusters", sc->label, path, sizeof path);
  psim_status st = psim_preset_cluster(&o, &doc);
  if (st == PSIM_OK)
    st = psim_json_write_file(path, doc);
  cJSON_Delete(doc);
  return st == PSIM_OK ? psim_cluster_load(path, c) : st;
}

/* ---- running a case ---- */

void psim_sweep_row_for_case(const psim_sweep *s, int32_t i, psim_sweep_row *row) {
  const psim_sweep_case *k = &s->cases[i];
  memset(row, 0, sizeof *row);
  row->index = i;
  snprintf(row->key, sizeof row->key, "%s", k->key);
  snprintf(row->model, sizeof row->model, "%s", s->models[k->model].label);
  snprintf(row->cluster, sizeof row->cluster, "%s", s->clusters[k->cluster].label);
  snprintf(row->searcher, sizeof row->searcher, "%s", s->searchers[k->searcher]);
  snprintf(row->budget, sizeof row->budget, "%s", s->budgets[k->budget]);
  row->seed = s->seeds[k->seed];
  snprintf(row->status, sizeof row->status, "failed");
  row->iteration_time_s = row->samples_per_s = row->tokens_per_s = NAN; /* empty until it runs */
  row->mfu = row->peak_memory_bytes = row->search_wall_s = NAN;
}

static const char *searcher_name(const char *name) {
  if (strcmp(name, "auto") != 0)
    return name;
  const psim_searcher *a = psim_searcher_find("alpa");
  return a && a->run ? "alpa" : "grid";
}

static psim_status write_plan(const psim_model *m, const psim_cluster *c,
                              const psim_search_result *r, const psim_sweep_row *row,
                              const char *dir, const char *name) {
  psim_plan_info info = {name,           row->seed,      *row->budget ? row->budget : NULL,
                         r->evaluations, r->wall_s,      r->curve,
                         r->n_curve,     NULL,           NULL,
                         r->stats,       r->description, NULL};
  cJSON *doc = NULL;
  char path[1024];
  snprintf(path, sizeof path, "%s/plans", dir);
  make_dir(path);
  snprintf(path, sizeof path, "%s/%s", dir, row->plan);
  psim_status st = psim_plan_to_json(m, c, &r->best, &r->best_sim, &info, &doc);
  if (st == PSIM_OK)
    st = psim_json_write_file(path, doc);
  cJSON_Delete(doc);
  return st;
}

static psim_status search_case(const psim_sweep *s, int32_t i, const char *dir, psim_model *m,
                               psim_cluster *c, psim_sweep_row *row) {
  const psim_sweep_case *k = &s->cases[i];
  PSIM_CHECK(case_model(&s->models[k->model], dir, m));
  PSIM_CHECK(case_cluster(&s->clusters[k->cluster], dir, c));
  row->devices = c->n_devices;
  const char *name = searcher_name(s->searchers[k->searcher]);
  const psim_searcher *se = psim_searcher_find(name);
  if (!se || !se->run)
    return psim_error(PSIM_EUNIMPLEMENTED, "searcher '%s' is not built yet", name);
  psim_search_options o;
  psim_search_options_init(&o);
  o.seed = row->seed;
  PSIM_CHECK(parse_budget(row->budget, &o.budget_s, &o.budget_evals));
  psim_search_result r;
  psim_search_result_init(&r);
  psim_status st = se->run(m, c, &o, &r);
  if (st == PSIM_OK && !r.found)
    st = psim_error(PSIM_EFAILED, "no strategy found");
  if (st == PSIM_OK) {
    snprintf(row->plan, sizeof row->plan, "plans/case%04d.json", i);
    st = write_plan(m, c, &r, row, dir, name);
  }
  if (st == PSIM_OK) {
    const psim_sim_result *b = &r.best_sim;
    row->iteration_time_s = b->iteration_time_s;
    row->samples_per_s = b->samples_per_s;
    row->tokens_per_s = b->tokens_per_s;
    row->mfu = b->mfu;
    row->peak_memory_bytes = b->peak_memory_bytes;
    row->fits = b->fits;
    row->evaluations = r.evaluations;
    row->search_wall_s = r.wall_s;
  }
  psim_search_result_destroy(&r);
  return st;
}

psim_status psim_sweep_run_case(const psim_sweep *s, int32_t i, const char *dir,
                                psim_sweep_row *row) {
  psim_sweep_row_for_case(s, i, row);
  psim_model m;
  psim_cluster c;
  psim_model_init(&m);
  psim_cluster_init(&c);
  psim_error_clear();
  psim_status st = search_case(s, i, dir, &m, &c, row);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
  if (st == PSIM_EINTERRUPTED)
    return st;
  if (st == PSIM_OK) {
    snprintf(row->status, sizeof row->status, "ok");
  } else {
    snprintf(row->error, sizeof row->error, "%s",
             *psim_error_message() ? psim_error_message() : psim_status_name(st));
    row->plan[0] = '\0';
  }
  psim_error_clear();
  return PSIM_OK;
}

/* ---- rows as text ---- */

static const char *const columns[] = {"case",
                                      "key",
                                      "model",
                                      "cluster",
                                      "devices",
                                      "searcher",
                                      "seed",
                                      "budget",
                                      "status",
                                      "error",
                                      "iteration_time_s",
                                      "samples_per_s",
                                      "tokens_per_s",
                                      "mfu",
                                      "peak_memory_bytes",
                                      "fits",
                                      "evaluations",
                                      "plan",
                                      "search_wall_s",
                                      NULL};

const char *psim_sweep_csv_header(void) {
  static char header[512];
  if (!header[0]) {
    size_t n = 0;
    for (const char *const *c = columns; *c; c++)
      n += (size_t)snprintf(header + n, sizeof header - n, "%s%s", c == columns ? "" : ",", *c);
    snprintf(header + n, sizeof header - n, "\n");
  }
  return header;
}

typedef struct tbuf {
  char *p;
  size_t n, size;
} tbuf;

static void put(tbuf *b, const char *s, size_t len) {
  for (size_t i = 0; i < len && b->n + 1 < b->size; i++)
    b->p[b->n++] = s[i];
  b->p[b->n] = '\0';
}

static void puts_(tbuf *b, const char *s) {
  put(b, s, strlen(s));
}

static void put_json_string(tbuf *b, const char *s) {
  puts_(b, "\"");
  for (; *s; s++) {
    char esc[8];
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') {
      esc[0] = '\\';
      esc[1] = (char)ch;
      put(b, esc, 2);
    } else if (ch < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", ch);
      puts_(b, esc);
    } else {
      put(b, s, 1);
    }
  }
  puts_(b, "\"");
}

/* Whole numbers exactly, others with 9 significant digits; null (JSON) or empty (CSV)
 * when not finite. */
static void put_number(tbuf *b, double v, bool json) {
  char num[40];
  if (isfinite(v) && v == floor(v) && fabs(v) < 9e15)
    snprintf(num, sizeof num, "%.0f", v); /* counts, seeds, bytes: exact */
  else if (isfinite(v))
    snprintf(num, sizeof num, "%.9g", v);
  else
    snprintf(num, sizeof num, "%s", json ? "null" : "");
  puts_(b, num);
}

typedef struct row_value {
  const char *text; /* string column, or NULL for a number */
  double number;
  bool is_bool;
} row_value;

static void row_values(const psim_sweep_row *r, row_value *v) {
  row_value vals[] = {{NULL, r->index, false},
                      {r->key, 0, false},
                      {r->model, 0, false},
                      {r->cluster, 0, false},
                      {NULL, r->devices, false},
                      {r->searcher, 0, false},
                      {NULL, (double)r->seed, false},
                      {r->budget, 0, false},
                      {r->status, 0, false},
                      {r->error, 0, false},
                      {NULL, r->iteration_time_s, false},
                      {NULL, r->samples_per_s, false},
                      {NULL, r->tokens_per_s, false},
                      {NULL, r->mfu, false},
                      {NULL, r->peak_memory_bytes, false},
                      {NULL, r->fits, true},
                      {NULL, (double)r->evaluations, false},
                      {r->plan, 0, false},
                      {NULL, r->search_wall_s, false}};
  memcpy(v, vals, sizeof vals);
}

enum { N_COLUMNS = 19 };

psim_status psim_sweep_row_jsonl(const psim_sweep_row *row, char *buf, size_t size) {
  row_value v[N_COLUMNS];
  row_values(row, v);
  tbuf b = {buf, 0, size};
  buf[0] = '\0';
  puts_(&b, "{");
  for (int i = 0; i < N_COLUMNS; i++) {
    if (i)
      puts_(&b, ",");
    put_json_string(&b, columns[i]);
    puts_(&b, ":");
    if (v[i].text)
      put_json_string(&b, v[i].text);
    else if (v[i].is_bool)
      puts_(&b, v[i].number != 0 ? "true" : "false");
    else
      put_number(&b, v[i].number, true);
  }
  puts_(&b, "}\n");
  if (b.n + 1 >= size)
    return psim_error(PSIM_ELIMIT, "sweep: a row is longer than %zu bytes", size);
  return PSIM_OK;
}

static void put_csv_field(tbuf *b, const char *s) {
  if (!strpbrk(s, ",\"\n\r")) {
    puts_(b, s);
    return;
  }
  puts_(b, "\"");
  for (; *s; s++)
    put(b, *s == '"' ? "\"\"" : s, *s == '"' ? 2 : 1);
  puts_(b, "\"");
}

void psim_sweep_row_csv(const psim_sweep_row *row, char *buf, size_t size) {
  row_value v[N_COLUMNS];
  row_values(row, v);
  tbuf b = {buf, 0, size};
  buf[0] = '\0';
  for (int i = 0; i < N_COLUMNS; i++) {
    if (i)
      puts_(&b, ",");
    if (v[i].text)
      put_csv_field(&b, v[i].text);
    else if (v[i].is_bool)
      puts_(&b, v[i].number != 0 ? "true" : "false");
    else
      put_number(&b, v[i].number, false);
  }
  puts_(&b, "\n");
}

static psim_status get_text(const cJSON *o, const char *key, char *out, size_t size) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsString(v))
    return psim_error(PSIM_EINPUT, "row: '%s' is missing or not a string", key);
  snprintf(out, size, "%s", v->valuestring);
  return PSIM_OK;
}

/* A number column (null reads as NaN); *bad names the first column that is
 * missing or not a number. */
static double get_number(const cJSON *o, const char *key, const char **bad) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (cJSON_IsNull(v))
    return NAN;
  if (!cJSON_IsNumber(v) && !*bad)
    *bad = key;
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* An integer column in [lo, hi]: anything else (null, NaN, 2e47; a fraction
 * is truncated) is a bad column rather than a cast that C leaves undefined
 * (fuzz_sweep found "evaluations": 2e47). */
static double get_integer(const cJSON *o, const char *key, double lo, double hi, const char **bad) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
  if (d >= lo && d <= hi)
    return d;
  if (!*bad)
    *bad = key;
  return 0;
}

static psim_status parse_row(const cJSON *o, psim_sweep_row *r) {
  if (!cJSON_IsObject(o))
    return psim_error(PSIM_EINPUT, "row: not an object");
  memset(r, 0, sizeof *r);
  const char *bad = NULL;
  r->index = (int32_t)get_integer(o, "case", -1, INT32_MAX, &bad);
  r->devices = (int32_t)get_integer(o, "devices", 0, INT32_MAX, &bad);
  /* the largest double below 2^64 */
  r->seed = (uint64_t)get_integer(o, "seed", 0, 18446744073709549568.0, &bad);
  r->iteration_time_s = get_number(o, "iteration_time_s", &bad);
  r->samples_per_s = get_number(o, "samples_per_s", &bad);
  r->tokens_per_s = get_number(o, "tokens_per_s", &bad);
  r->mfu = get_number(o, "mfu", &bad);
  r->peak_memory_bytes = get_number(o, "peak_memory_bytes", &bad);
  r->evaluations = (int64_t)get_integer(o, "evaluations", 0, 9.2e18, &bad);
  r->search_wall_s = get_number(o, "search_wall_s", &bad);
  r->fits = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "fits"));
  if (bad)
    return psim_error(PSIM_EINPUT, "row: column \"%s\" is missing, not a number or out of range",
                      bad);
  PSIM_CHECK(get_text(o, "key", r->key, sizeof r->key));
  PSIM_CHECK(get_text(o, "model", r->model, sizeof r->model));
  PSIM_CHECK(get_text(o, "cluster", r->cluster, sizeof r->cluster));
  PSIM_CHECK(get_text(o, "searcher", r->searcher, sizeof r->searcher));
  PSIM_CHECK(get_text(o, "budget", r->budget, sizeof r->budget));
  PSIM_CHECK(get_text(o, "status", r->status, sizeof r->status));
  PSIM_CHECK(get_text(o, "error", r->error, sizeof r->error));
  return get_text(o, "plan", r->plan, sizeof r->plan);
}

psim_status psim_sweep_row_parse(const char *line, psim_sweep_row *row) {
  cJSON *o = cJSON_Parse(line);
  if (!o)
    return psim_error(PSIM_EINPUT, "row: not valid JSON");
  psim_status st = parse_row(o, row);
  cJSON_Delete(o);
  return st;
}

/* ---- results files ---- */

static psim_status add_row(psim_sweep_results *r, const psim_sweep_row *row) {
  PSIM_CHECK(PSIM_VEC_RESERVE(r->rows, r->cap_rows, (size_t)r->n_rows + 1));
  r->rows[r->n_rows++] = *row;
  if (row->index >= 0 && row->index < r->n_cases)
    r->done[row->index] = true;
  return PSIM_OK;
}

/* Complete lines of the log whose case exists with the same key, once each. */
static psim_status read_log(psim_sweep_results *r, const psim_sweep *s) {
  if (access(r->jsonl_path, F_OK) != 0)
    return PSIM_OK;
  char *text = NULL;
  size_t len = 0;
  PSIM_CHECK(psim_file_read(r->jsonl_path, PSIM_JSON_MAX_BYTES, &text, &len));
  psim_status st = PSIM_OK;
  for (char *line = text, *nl; st == PSIM_OK && (nl = strchr(line, '\n')); line = nl + 1) {
    *nl = '\0'; /* a last line without '\n' was cut by a kill: dropped */
    psim_sweep_row row;
    if (psim_sweep_row_parse(line, &row) != PSIM_OK) {
      psim_error_clear();
      continue;
    }
    if (row.index < 0 || row.index >= s->n_cases || strcmp(row.key, s->cases[row.index].key) ||
        r->done[row.index])
      continue;
    st = add_row(r, &row);
    r->n_resumed++;
  }
  psim_free(text);
  return st;
}

static int cmp_row(const void *a, const void *b) {
  const psim_sweep_row *x = a, *y = b;
  return (x->index > y->index) - (x->index < y->index);
}

/* Both files from r->rows (sorted), written atomically. */
static psim_status rewrite(psim_sweep_results *r) {
  if (r->n_rows > 1)
    qsort(r->rows, (size_t)r->n_rows, sizeof *r->rows, cmp_row);
  size_t line = 4 * sizeof(psim_sweep_row), cap = line * ((size_t)r->n_rows + 1);
  char *j = psim_malloc(cap), *c = psim_malloc(cap);
  psim_status st = j && c ? PSIM_OK : psim_error(PSIM_ENOMEM, "sweep: out of memory");
  size_t nj = 0, nc = 0;
  if (st == PSIM_OK)
    nc = (size_t)snprintf(c, cap, "%s", psim_sweep_csv_header());
  for (int32_t i = 0; st == PSIM_OK && i < r->n_rows; i++) {
    st = psim_sweep_row_jsonl(&r->rows[i], j + nj, cap - nj);
    nj += strlen(j + nj);
    psim_sweep_row_csv(&r->rows[i], c + nc, cap - nc);
    nc += strlen(c + nc);
  }
  if (st == PSIM_OK)
    st = psim_file_write_atomic(r->jsonl_path, j, nj);
  if (st == PSIM_OK)
    st = psim_file_write_atomic(r->csv_path, c, nc);
  psim_free(j);
  psim_free(c);
  return st;
}

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = psim_malloc(n);
  if (p)
    snprintf(p, n, "%s/%s", dir, name);
  return p;
}

static psim_status open_append(const char *path, int *fd) {
  *fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
  if (*fd < 0)
    return psim_error(PSIM_EIO, "%s: cannot open for appending: %s", path, strerror(errno));
  return PSIM_OK;
}

psim_status psim_sweep_results_open(psim_sweep_results *r, const char *dir, const psim_sweep *s,
                                    bool resume) {
  memset(r, 0, sizeof *r);
  r->jsonl_fd = r->csv_fd = -1;
  r->n_cases = s->n_cases;
  r->dir = psim_strdup(dir);
  r->jsonl_path = join(dir, "results.jsonl");
  r->csv_path = join(dir, "results.csv");
  r->done = psim_calloc((size_t)s->n_cases + 1, sizeof *r->done);
  if (!r->dir || !r->jsonl_path || !r->csv_path || !r->done)
    return psim_error(PSIM_ENOMEM, "sweep: out of memory");
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return psim_error(PSIM_EIO, "%s: cannot create the results folder: %s", dir, strerror(errno));
  if (resume)
    PSIM_CHECK(read_log(r, s));
  PSIM_CHECK(rewrite(r));
  PSIM_CHECK(open_append(r->jsonl_path, &r->jsonl_fd));
  return open_append(r->csv_path, &r->csv_fd);
}

static psim_status write_all(int fd, const char *path, const char *text) {
  size_t len = strlen(text), done = 0;
  while (done < len) {
    ssize_t w = write(fd, text + done, len - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return psim_error(PSIM_EIO, "%s: write failed: %s", path, strerror(errno));
    done += (size_t)w;
  }
  if (fsync(fd) != 0)
    return psim_error(PSIM_EIO, "%s: fsync failed: %s", path, strerror(errno));
  return PSIM_OK;
}

psim_status psim_sweep_results_append(psim_sweep_results *r, const psim_sweep_row *row) {
  char line[4 * sizeof(psim_sweep_row)];
  PSIM_CHECK(psim_sweep_row_jsonl(row, line, sizeof line));
  PSIM_CHECK(write_all(r->jsonl_fd, r->jsonl_path, line)); /* the log first: it is the truth */
  psim_sweep_row_csv(row, line, sizeof line);
  PSIM_CHECK(write_all(r->csv_fd, r->csv_path, line));
  return add_row(r, row);
}

psim_status psim_sweep_results_finish(psim_sweep_results *r) {
  return rewrite(r);
}

void psim_sweep_results_close(psim_sweep_results *r) {
  if (r->jsonl_fd >= 0)
    close(r->jsonl_fd);
  if (r->csv_fd >= 0)
    close(r->csv_fd);
  psim_free(r->rows);
  psim_free(r->done);
  psim_free(r->dir);
  psim_free(r->jsonl_path);
  psim_free(r->csv_path);
  memset(r, 0, sizeof *r);
  r->jsonl_fd = r->csv_fd = -1;
}

/* ---- checking against a baseline ---- */

static const psim_sweep_row *find_row(const psim_sweep_row *rows, int32_t n, const char *key) {
  for (int32_t i = 0; i < n; i++)
    if (strcmp(rows[i].key, key) == 0)
      return &rows[i];
  return NULL;
}

static int32_t compare_row(const psim_sweep_row *b, const psim_sweep_row *now, double tol,
                           FILE *out) {
  if (strcmp(b->status, "ok") != 0)
    return 0;
  if (!now) {
    fprintf(out, "regression: %s: missing from the results\n", b->key);
    return 1;
  }
  if (strcmp(now->status, "ok") != 0) {
    fprintf(out, "regression: %s: failed: %s\n", b->key, now->error);
    return 1;
  }
  int32_t n = 0;
  if (b->fits && !now->fits)
    n++, fprintf(out, "regression: %s: the plan no longer fits in memory\n", b->key);
  if (now->iteration_time_s > b->iteration_time_s * (1 + tol))
    n++, fprintf(out, "regression: %s: iteration time %.6g s, baseline %.6g s (+%.2f%%)\n", b->key,
                 now->iteration_time_s, b->iteration_time_s,
                 100 * (now->iteration_time_s / b->iteration_time_s - 1));
  if (now->mfu < b->mfu * (1 - tol))
    n++, fprintf(out, "regression: %s: MFU %.4g, baseline %.4g\n", b->key, now->mfu, b->mfu);
  return n;
}

psim_status psim_sweep_check(const char *baseline, const psim_sweep_row *rows, int32_t n_rows,
                             double tolerance, FILE *out, int32_t *regressions) {
  struct stat st_;
  char *path = stat(baseline, &st_) == 0 && S_ISDIR(st_.st_mode) ? join(baseline, "results.jsonl")
                                                                 : psim_strdup(baseline);
  if (!path)
    return psim_error(PSIM_ENOMEM, "out of memory");
  char *text = NULL;
  size_t len = 0;
  psim_status st = psim_file_read(path, PSIM_JSON_MAX_BYTES, &text, &len);
  int32_t compared = 0;
  *regressions = 0;
  for (char *line = text, *nl; st == PSIM_OK && line && *line; line = nl ? nl + 1 : NULL) {
    nl = strchr(line, '\n');
    if (nl)
      *nl = '\0';
    psim_sweep_row b;
    if (!*line)
      continue;
    if (psim_sweep_row_parse(line, &b) != PSIM_OK) {
      st = psim_error(PSIM_EINPUT, "%s: line %d is not a results row", path, compared + 1);
      break;
    }
    compared++;
    *regressions += compare_row(&b, find_row(rows, n_rows, b.key), tolerance, out);
  }
  if (st == PSIM_OK)
    fprintf(out, "check: %d baseline cases compared with tolerance %.3g: %d regressions\n",
            compared, tolerance, *regressions);
  psim_free(text);
  psim_free(path);
  return st;
}
