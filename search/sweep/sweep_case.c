/* sweep_case.c - running one case of a sweep: its generated inputs, the search,
 * the plan file and the row (sweep.h). */
#include "search/sweep/sweep.h"

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

#include "models/registry.h"
#include "search/plan/plan.h"
#include "search/policy/policy.h"
#include "search/search.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "topologies/presets.h"

static psim_status parse_budget(const char *text, double *seconds, int64_t *evals) {
  *seconds = 0;
  *evals = 0;
  if (!*text)
    return PSIM_OK;
  const char *why = psim_search_budget_problem(text, seconds, evals);
  return why ? psim_error(PSIM_EINPUT, "budget '%s': %s", text, why) : PSIM_OK;
}

/* ---- generated inputs ---- */

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
  assert(sm->def); /* a generated model's family was found at load */
  char path[1024];
  cJSON *doc = NULL;
  generated_path(dir, "models", sm->label, path, sizeof path);
  psim_status st = psim_gen_generate(sm->def, &sm->opts, &doc);
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
  assert(i >= 0 && i < s->n_cases);
  const psim_sweep_case *k = &s->cases[i];
  assert(k->model < s->n_models && k->cluster < s->n_clusters && k->searcher < s->n_searchers &&
         k->seed < s->n_seeds && k->budget < s->n_budgets);
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

static psim_status write_plan(const psim_model *m, const psim_cluster *c,
                              const psim_search_result *r, const psim_sweep_row *row,
                              const char *dir, const char *name) {
  psim_plan_info info = {name,
                         row->seed,
                         *row->budget ? row->budget : NULL,
                         r->evaluations,
                         r->wall_s,
                         r->curve,
                         r->n_curve,
                         NULL,
                         NULL,
                         r->stats,
                         r->description,
                         NULL,
                         NULL};
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

/* The row's figures from a search's plan. */
static void fill_row(const psim_search_result *r, psim_sweep_row *row) {
  const psim_sim_result *b = &r->best_sim;
  row->iteration_time_s = b->iteration_time_s;
  row->samples_per_s = b->samples_per_s;
  row->tokens_per_s = b->tokens_per_s;
  row->mfu = b->mfu;
  row->peak_memory_bytes = b->peak_memory_bytes;
  row->fits = b->fits;
  row->evaluations = r->evaluations;
  row->search_wall_s = r->wall_s;
}

/* The case's search: the search policy that `plansim plan` runs (`auto` is
 * Alpa then MCMC refinement there and here), without the baselines. */
static psim_status search_case(const psim_sweep *s, int32_t i, const char *dir, psim_model *m,
                               psim_cluster *c, psim_sweep_row *row) {
  const psim_sweep_case *k = &s->cases[i];
  PSIM_CHECK(case_model(&s->models[k->model], dir, m));
  PSIM_CHECK(case_cluster(&s->clusters[k->cluster], dir, c));
  row->devices = c->n_devices;
  psim_search_options o;
  psim_search_options_init(&o);
  o.seed = row->seed;
  PSIM_CHECK(parse_budget(row->budget, &o.budget_s, &o.budget_evals));
  psim_policy_result pol;
  psim_policy_result_init(&pol);
  psim_status st = psim_policy_plan(m, c, s->searchers[k->searcher], &o, false, &pol);
  if (st == PSIM_OK && pol.stopped) /* not the case's result: a resumed sweep reruns it */
    st = psim_error(PSIM_EINTERRUPTED, "interrupted");
  if (st == PSIM_OK && !pol.result.found)
    st = psim_error(PSIM_EFAILED, "no strategy found");
  if (st == PSIM_OK) {
    snprintf(row->plan, sizeof row->plan, "plans/case%04d.json", i);
    st = write_plan(m, c, &pol.result, row, dir, pol.searcher);
  }
  if (st == PSIM_OK)
    fill_row(&pol.result, row);
  psim_policy_result_destroy(&pol);
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
