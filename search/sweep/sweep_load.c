/* sweep_load.c - plansim.sweep/1: loading a sweep file into its lists and cases
 * (sweep.h, docs/sweep.md). */
#include "search/sweep/sweep.h"
#include "search/sweep/sweep_impl.h"

#include <assert.h>
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
  for (int32_t i = 0; s->cases && i < s->n_cases; i++)
    psim_free(s->cases[i].key);
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

/* A list member: a file path, or an object with "name" and either "file" or
 * the key alt (a generator, a preset) in *other. */
static psim_status file_or(psim_jctx *c, const cJSON *v, const char *const *keys, const char *alt,
                           const char **file, const char **name, const char **other) {
  if (cJSON_IsString(v)) {
    *file = v->valuestring;
    return PSIM_OK;
  }
  PSIM_CHECK(psim_json_check_keys(c, v, keys));
  PSIM_CHECK(psim_json_string(c, v, "name", false, name));
  PSIM_CHECK(psim_json_string(c, v, "file", false, file));
  PSIM_CHECK(psim_json_string(c, v, alt, false, other));
  if (!*file == !*other)
    return psim_jerr(c, "give either \"file\" or \"%s\"", alt);
  return PSIM_OK;
}

static psim_status load_model(psim_jctx *c, const psim_sweep *s, const cJSON *v,
                              psim_sweep_model *out) {
  static const char *const keys[] = {"name", "file", "generator", "options", NULL};
  const char *file = NULL, *name = NULL, *gen = NULL;
  PSIM_CHECK(file_or(c, v, keys, "generator", &file, &name, &gen));
  if (gen) {
    if (!(out->def = psim_gen_family_find(gen)))
      return psim_jerr(c, "generator: unknown family '%s' (%s)", gen, psim_gen_family_list());
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
  return gen ? psim_sweep_gen_options(c, out) : PSIM_OK;
}

static psim_status add_cluster(psim_sweep *s, const char *label, const char *file,
                               const char *preset, int32_t nodes) {
  psim_sweep_cluster *c = &s->clusters[s->n_clusters++]; /* slots counted by cluster_slots */
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

/* One node count of a preset (at index k of "nodes", or -1 for a single count
 * or none: 1 node). */
static psim_status preset_nodes(psim_jctx *c, psim_sweep *s, const cJSON *v, int32_t k,
                                const char *name, const char *preset) {
  int64_t count = 1;
  size_t saved = psim_jctx_key(c, "nodes");
  psim_status st = PSIM_OK;
  if (k >= 0) {
    size_t at = psim_jctx_index(c, (size_t)k);
    st = psim_json_value_int(c, v, 1, 65536, &count);
    psim_jctx_pop(c, at);
  } else if (v) {
    st = psim_json_value_int(c, v, 1, 65536, &count);
  }
  psim_jctx_pop(c, saved);
  PSIM_CHECK(st);
  return add_cluster(s, name, NULL, preset, (int32_t)count);
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
  if (!cJSON_IsArray(nodes))
    return preset_nodes(c, s, nodes, -1, name, preset);
  int32_t k = 0;
  const cJSON *x = NULL;
  cJSON_ArrayForEach(x, nodes) PSIM_CHECK(preset_nodes(c, s, x, k++, name, preset));
  return PSIM_OK;
}

static psim_status load_cluster(psim_jctx *c, psim_sweep *s, const cJSON *v) {
  static const char *const keys[] = {"name", "file", "preset", "nodes", NULL};
  const char *file = NULL, *name = NULL, *preset = NULL;
  PSIM_CHECK(file_or(c, v, keys, "preset", &file, &name, &preset));
  return preset ? load_preset(c, s, v, name, preset) : add_cluster(s, name, file, NULL, 0);
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

/* One member of a string list: strings, numbers too when numbers_ok. */
static psim_status list_text(psim_jctx *c, const cJSON *x, size_t i, bool numbers_ok, char **out) {
  char num[64];
  const char *text = NULL;
  if (cJSON_IsString(x)) {
    text = x->valuestring;
  } else if (numbers_ok && cJSON_IsNumber(x)) {
    snprintf(num, sizeof num, "%.17g", x->valuedouble);
    text = num;
  } else {
    size_t at = psim_jctx_index(c, i);
    psim_status st = psim_jerr(c, "expected a string");
    psim_jctx_pop(c, at);
    return st;
  }
  return (*out = psim_strdup(text)) ? PSIM_OK
                                    : psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
}

/* An array member of strings (numbers allowed when numbers_ok); def when absent.
 * O(n): the array is walked once (cJSON_GetArrayItem per index was quadratic). */
static psim_status string_list(psim_jctx *c, const cJSON *root, const char *key, const char *def,
                               bool numbers_ok, char ***out, int32_t *n) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  size_t saved = psim_jctx_key(c, key);
  psim_status st = v ? psim_json_expect_array(c, v) : PSIM_OK;
  int32_t count = v && st == PSIM_OK ? cJSON_GetArraySize(v) : 1;
  if (st == PSIM_OK && count < 1)
    st = psim_jerr(c, "expected a non-empty list");
  if (st == PSIM_OK && !(*out = psim_calloc((size_t)count, sizeof **out)))
    st = psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
  if (st == PSIM_OK && !v && !((*out)[(*n)++] = psim_strdup(def)))
    st = psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
  const cJSON *x = NULL;
  if (v && st == PSIM_OK)
    cJSON_ArrayForEach(x, v) {
      assert(*n < count);
      st = list_text(c, x, (size_t)*n, numbers_ok, &(*out)[*n]);
      if (st != PSIM_OK)
        break;
      (*n)++;
    }
  psim_jctx_pop(c, saved);
  return st;
}

/* The seeds (default: one seed, 1), each an integer >= 0. O(n). */
static psim_status load_seeds(psim_jctx *c, psim_sweep *s, const cJSON *root) {
  const cJSON *seeds = cJSON_GetObjectItemCaseSensitive(root, "seeds");
  int32_t n = cJSON_IsArray(seeds) ? cJSON_GetArraySize(seeds) : 1;
  size_t saved = psim_jctx_key(c, "seeds");
  if (seeds && (!cJSON_IsArray(seeds) || n < 1))
    return psim_jerr(c, "expected a non-empty list of seeds");
  if (!(s->seeds = psim_calloc((size_t)n, sizeof *s->seeds)))
    return psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
  if (!seeds)
    s->seeds[s->n_seeds++] = 1;
  const cJSON *x = NULL;
  cJSON_ArrayForEach(x, seeds) {
    int64_t v = 1;
    assert(s->n_seeds < n);
    size_t at = psim_jctx_index(c, (size_t)s->n_seeds);
    PSIM_CHECK(psim_json_value_int(c, x, 0, INT64_MAX, &v));
    psim_jctx_pop(c, at);
    s->seeds[s->n_seeds++] = (uint64_t)v;
  }
  psim_jctx_pop(c, saved);
  return PSIM_OK;
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
  return load_seeds(c, s, root);
}

static psim_status load_models(psim_jctx *c, psim_sweep *s, const cJSON *models) {
  size_t saved = psim_jctx_key(c, "models");
  int32_t n = cJSON_IsArray(models) ? cJSON_GetArraySize(models) : 0;
  if (n < 1)
    return psim_jerr(c, "expected a non-empty list of model files or generators");
  if (!(s->models = psim_calloc((size_t)n, sizeof *s->models)))
    return psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
  const cJSON *x = NULL;
  cJSON_ArrayForEach(x, models) {
    assert(s->n_models < n);
    size_t at = psim_jctx_index(c, (size_t)s->n_models);
    PSIM_CHECK(load_model(c, s, x, &s->models[s->n_models++]));
    psim_jctx_pop(c, at);
  }
  psim_jctx_pop(c, saved);
  return PSIM_OK;
}

/* Clusters a member of "clusters" stands for: a preset with a list of node
 * counts is one cluster per count. */
static size_t cluster_slots(const cJSON *x) {
  const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(x, "nodes");
  int32_t n = cJSON_IsArray(nodes) ? cJSON_GetArraySize(nodes) : 1;
  return n > 1 ? (size_t)n : 1;
}

static psim_status load_clusters(psim_jctx *c, psim_sweep *s, const cJSON *clusters) {
  size_t saved = psim_jctx_key(c, "clusters");
  if (!cJSON_IsArray(clusters) || !clusters->child)
    return psim_jerr(c, "expected a non-empty list of cluster files or presets");
  size_t slots = 0;
  const cJSON *x = NULL;
  cJSON_ArrayForEach(x, clusters) slots += cluster_slots(x);
  if (!(s->clusters = psim_calloc(slots, sizeof *s->clusters)))
    return psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
  size_t i = 0;
  cJSON_ArrayForEach(x, clusters) {
    size_t at = psim_jctx_index(c, i++);
    PSIM_CHECK(load_cluster(c, s, x));
    psim_jctx_pop(c, at);
  }
  assert((size_t)s->n_clusters <= slots);
  psim_jctx_pop(c, saved);
  return PSIM_OK;
}

static psim_status load_inputs(psim_jctx *c, psim_sweep *s, const cJSON *root) {
  PSIM_CHECK(load_models(c, s, cJSON_GetObjectItemCaseSensitive(root, "models")));
  return load_clusters(c, s, cJSON_GetObjectItemCaseSensitive(root, "clusters"));
}

/* The product of the list sizes in checked 64-bit arithmetic: refused (before
 * any allocation) once it passes PSIM_SWEEP_MAX_CASES, so it cannot overflow
 * (8,192 entries in each of five lists is 2^65 cases). */
static psim_status count_cases(const char *file, const int64_t sizes[5], int32_t *out) {
  uint64_t n = 1;
  bool over = false;
  for (int k = 0; k < 5; k++) {
    assert(sizes[k] >= 0);
    over = over || __builtin_mul_overflow(n, (uint64_t)sizes[k], &n) || n > PSIM_SWEEP_MAX_CASES;
  }
  if (over)
    return psim_error(PSIM_EINPUT,
                      "%s: models x clusters x searchers x seeds x budgets = %lld x %lld x %lld x "
                      "%lld x %lld cases, more than the limit of %d; split the sweep",
                      file, (long long)sizes[0], (long long)sizes[1], (long long)sizes[2],
                      (long long)sizes[3], (long long)sizes[4], PSIM_SWEEP_MAX_CASES);
  *out = (int32_t)n;
  return PSIM_OK;
}

static int cmp_case_key(const void *a, const void *b) {
  const psim_sweep_case *x = *(const psim_sweep_case *const *)a;
  const psim_sweep_case *y = *(const psim_sweep_case *const *)b;
  int d = strcmp(x->key, y->key);
  return d ? d : (x > y) - (x < y); /* equal keys in case order */
}

/* Refuses two cases with one key, naming the key the first repeat has (the
 * smallest case index whose key an earlier case has). O(n log n): sorted
 * pointers, not the all-pairs comparison that hung on 10^6 seeds. */
static psim_status check_unique_keys(const psim_sweep *s) {
  const psim_sweep_case **by_key = psim_calloc((size_t)s->n_cases + 1, sizeof *by_key);
  if (!by_key)
    return psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
  for (int32_t i = 0; i < s->n_cases; i++)
    by_key[i] = &s->cases[i];
  qsort(by_key, (size_t)s->n_cases, sizeof *by_key, cmp_case_key);
  const psim_sweep_case *repeat = NULL;
  for (int32_t i = 1; i < s->n_cases; i++)
    if (strcmp(by_key[i]->key, by_key[i - 1]->key) == 0 && (!repeat || by_key[i] < repeat) &&
        (i < 2 || strcmp(by_key[i]->key, by_key[i - 2]->key) != 0))
      repeat = by_key[i]; /* the second of its group: the first repeat of that key */
  psim_free(by_key);
  if (repeat)
    return psim_error(PSIM_EINPUT,
                      "%s: two cases have the key '%s' (give the models or "
                      "clusters distinct names)",
                      s->file, repeat->key);
  return PSIM_OK;
}

/* Case k's key, cut at PSIM_SWEEP_KEY_MAX - 1 bytes as rows keep it. */
static psim_status case_key(const psim_sweep *s, psim_sweep_case *k) {
  char key[PSIM_SWEEP_KEY_MAX];
  snprintf(key, sizeof key, "model=%s cluster=%s search=%s seed=%llu budget=%s",
           s->models[k->model].label, s->clusters[k->cluster].label, s->searchers[k->searcher],
           (unsigned long long)s->seeds[k->seed],
           *s->budgets[k->budget] ? s->budgets[k->budget] : "default");
  return (k->key = psim_strdup(key)) ? PSIM_OK
                                     : psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
}

/* The length of list KEY of a sweep document (def when absent or not a list). */
static int64_t json_list_size(const cJSON *root, const char *key, int64_t def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  return cJSON_IsArray(v) ? cJSON_GetArraySize(v) : def;
}

psim_status psim_sweep_check_size(const char *file, const cJSON *root) {
  const cJSON *clusters = cJSON_GetObjectItemCaseSensitive(root, "clusters");
  int64_t n_clusters = 0;
  const cJSON *x = NULL;
  if (cJSON_IsArray(clusters))
    cJSON_ArrayForEach(x, clusters) n_clusters += (int64_t)cluster_slots(x);
  const int64_t sizes[5] = {json_list_size(root, "models", 0), n_clusters,
                            json_list_size(root, "searchers", 1), json_list_size(root, "seeds", 1),
                            json_list_size(root, "budgets", 1)};
  int32_t n = 0;
  return count_cases(file, sizes, &n);
}

/* The product, models slowest and budgets fastest. */
static psim_status make_cases(psim_sweep *s) {
  const int64_t sizes[5] = {s->n_models, s->n_clusters, s->n_searchers, s->n_seeds, s->n_budgets};
  int32_t n = 0;
  PSIM_CHECK(count_cases(s->file, sizes, &n));
  if (!(s->cases = psim_calloc((size_t)n, sizeof *s->cases)))
    return psim_error(PSIM_ENOMEM, "out of memory loading a sweep");
  for (int32_t i = 0; i < n; i++) {
    psim_sweep_case *k = &s->cases[s->n_cases++];
    int32_t r = i;
    k->budget = r % s->n_budgets, r /= s->n_budgets;
    k->seed = r % s->n_seeds, r /= s->n_seeds;
    k->searcher = r % s->n_searchers, r /= s->n_searchers;
    k->cluster = r % s->n_clusters, r /= s->n_clusters;
    k->model = r;
    assert(k->model < s->n_models);
    PSIM_CHECK(case_key(s, k));
  }
  return check_unique_keys(s);
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
