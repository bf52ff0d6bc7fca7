/* sweep_load.c - plansim.sweep/1: loading a sweep file into its lists and cases
 * (sweep.h, docs/sweep.md). */
#include "search/sweep/sweep.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
