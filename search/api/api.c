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

PSIM_API psim_status psim_open_model(const char *path, psim_model **out) {
  assert(out);
  *out = NULL;
  psim_model *m = psim_calloc(1, sizeof *m);
  if (!m)
    return psim_error(PSIM_ENOMEM, "out of memory opening %s", path);
  psim_model_init(m);
  psim_status s = psim_model_load(path, m);
  if (s != PSIM_OK) {
    psim_close_model(m);
    return s;
  }
  *out = m;
  return PSIM_OK;
}

PSIM_API void psim_close_model(psim_model *m) {
  if (!m)
    return;
  psim_model_destroy(m);
  psim_free(m);
}

PSIM_API psim_status psim_open_cluster(const char *path, psim_cluster **out) {
  assert(out);
  *out = NULL;
  psim_cluster *c = psim_calloc(1, sizeof *c);
  if (!c)
    return psim_error(PSIM_ENOMEM, "out of memory opening %s", path);
  psim_cluster_init(c);
  psim_status s = psim_cluster_load(path, c);
  if (s != PSIM_OK) {
    psim_close_cluster(c);
    return s;
  }
  *out = c;
  return PSIM_OK;
}

PSIM_API void psim_close_cluster(psim_cluster *c) {
  if (!c)
    return;
  psim_cluster_destroy(c);
  psim_free(c);
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
