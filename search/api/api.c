/* api.c - the public C API (include/plansim/plansim.h) over the library's internals.
 *
 * Each handle owns one internal object allocated here; the functions translate between the
 * public, opaque view and the internal structs and add nothing of their own, so the API
 * predicts exactly what `plansim simulate` does with default options. */
#include <assert.h>
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "psim_config.h"
#include "search/plan/plan.h"
#include "sim/core/alloc.h"
#include "sim/simulate.h"

PSIM_API const char *psim_version(void) {
  return PSIM_VERSION;
}

/* How to make, fill and release one kind of handle loaded from a file. */
typedef struct handle_kind {
  size_t size;
  void (*init)(void *obj);
  psim_status (*load)(const char *path, void *obj);
  void (*destroy)(void *obj);
} handle_kind;

static void model_init(void *m) {
  psim_model_init(m);
}
static psim_status model_load(const char *path, void *m) {
  return psim_model_load(path, m);
}
static void model_destroy(void *m) {
  psim_model_destroy(m);
}
static void cluster_init(void *c) {
  psim_cluster_init(c);
}
static psim_status cluster_load(const char *path, void *c) {
  return psim_cluster_load(path, c);
}
static void cluster_destroy(void *c) {
  psim_cluster_destroy(c);
}

static const handle_kind model_kind = {sizeof(psim_model), model_init, model_load, model_destroy};
static const handle_kind cluster_kind = {sizeof(psim_cluster), cluster_init, cluster_load,
                                         cluster_destroy};

/* Releases a handle of kind k (NULL is a no-op). */
static void close_handle(const handle_kind *k, void *obj) {
  if (!obj)
    return;
  k->destroy(obj);
  psim_free(obj);
}

/* Allocates a handle of kind k, loads path into it; *out is NULL on failure. */
static psim_status open_handle(const handle_kind *k, const char *path, void **out) {
  *out = NULL;
  void *obj = psim_calloc(1, k->size);
  if (!obj)
    return psim_error(PSIM_ENOMEM, "out of memory opening %s", path);
  k->init(obj);
  psim_status s = k->load(path, obj);
  if (s != PSIM_OK) {
    close_handle(k, obj);
    return s;
  }
  *out = obj;
  return PSIM_OK;
}

PSIM_API psim_status psim_open_model(const char *path, psim_model **out) {
  assert(out);
  void *h;
  psim_status s = open_handle(&model_kind, path, &h);
  *out = h;
  return s;
}

PSIM_API void psim_close_model(psim_model *m) {
  close_handle(&model_kind, m);
}

PSIM_API psim_status psim_open_cluster(const char *path, psim_cluster **out) {
  assert(out);
  void *h;
  psim_status s = open_handle(&cluster_kind, path, &h);
  *out = h;
  return s;
}

PSIM_API void psim_close_cluster(psim_cluster *c) {
  close_handle(&cluster_kind, c);
}

PSIM_API psim_status psim_open_strategy(const char *path, const psim_model *m, psim_cluster *c,
                                        psim_strategy **out) {
  assert(out && m && c);
  *out = NULL;
  psim_strategy *st = psim_calloc(1, sizeof *st);
  if (!st)
    return psim_error(PSIM_ENOMEM, "out of memory opening %s", path);
  psim_strategy_init(st);
  psim_status s = psim_plan_load_strategy(path, m, c, st);
  if (s != PSIM_OK) {
    psim_close_strategy(st);
    return s;
  }
  *out = st;
  return PSIM_OK;
}

PSIM_API void psim_close_strategy(psim_strategy *s) {
  if (!s)
    return;
  psim_strategy_destroy(s);
  psim_free(s);
}

/* Runs the default simulation into *r (initialised here; the caller destroys it). */
static psim_status simulate_default(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                                    psim_sim_result *r) {
  psim_sim_options o;
  psim_sim_options_init(&o);
  psim_sim_result_init(r);
  return psim_simulate(m, c, s, &o, r);
}

PSIM_API psim_status psim_predict(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                                  psim_prediction *out) {
  assert(m && c && s && out);
  psim_sim_result r;
  psim_status st = simulate_default(m, c, s, &r);
  if (st == PSIM_OK)
    *out = (psim_prediction){.iteration_time_s = r.iteration_time_s,
                             .samples_per_s = r.samples_per_s,
                             .tokens_per_s = r.tokens_per_s,
                             .mfu = r.mfu,
                             .peak_memory_bytes = r.peak_memory_bytes,
                             .capacity_bytes = r.capacity_bytes,
                             .fits = r.fits};
  psim_sim_result_destroy(&r);
  return st;
}

PSIM_API psim_status psim_predict_json(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                                       char **json) {
  assert(m && c && s && json);
  *json = NULL;
  psim_sim_result r;
  psim_status st = simulate_default(m, c, s, &r);
  cJSON *root = st == PSIM_OK ? cJSON_CreateObject() : NULL;
  if (st == PSIM_OK && !root)
    st = psim_error(PSIM_ENOMEM, "out of memory writing a prediction");
  if (st == PSIM_OK)
    st = psim_sim_result_to_json(&r, root);
  if (st == PSIM_OK && !(*json = cJSON_Print(root)))
    st = psim_error(PSIM_ENOMEM, "out of memory writing a prediction");
  cJSON_Delete(root);
  psim_sim_result_destroy(&r);
  return st;
}

PSIM_API void psim_free_string(char *s) {
  cJSON_free(s);
}
