/* plan.c - plan documents. */
#include "search/plan/plan.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <string.h>

#include "sim/core/json.h"

/* Keys of plan members that are measured wall-clock times or rates: they
 * differ from run to run of the same search (docs/plan.md). */
static const char *const timing_keys[] = {"wall_s",          "build_s",         "simulate_s",
                                          "delta_wall_s",    "engine_wall_s",   "verify_wall_s",
                                          "proposals_per_s", "ilp_time_s",      "dp_time_s",
                                          "mesh_fit_time_s", "simulate_time_s", NULL};

/* Counters of Alpa's stats (the object with "ilp_count") that depend on how its
 * threads interleave (issue 24): its memo cache is shared by the threads, so
 * tiny-gpt on one DGX A100 counts 234 hits of 312 lookups with --threads 1 and
 * 312 with 2. MCMC's "memo_hits" (one memo per chain) is a function of the seed
 * and stays. */
static const char *const thread_keys[] = {"memo_hits", "memo_hit_rate", NULL};

static bool in_list(const char *const *list, const char *k) {
  for (const char *const *t = list; *t; t++)
    if (strcmp(*t, k) == 0)
      return true;
  return false;
}

static bool is_run_dependent(const cJSON *parent, const cJSON *it) {
  if (!it->string || !cJSON_IsNumber(it))
    return false;
  return in_list(timing_keys, it->string) ||
         (in_list(thread_keys, it->string) &&
          cJSON_GetObjectItemCaseSensitive(parent, "ilp_count"));
}

void psim_plan_strip_timings(cJSON *root) {
  cJSON *it = root ? root->child : NULL;
  while (it) {
    cJSON *next = it->next;
    if (is_run_dependent(root, it))
      cJSON_Delete(cJSON_DetachItemViaPointer(root, it));
    else
      psim_plan_strip_timings(it);
    it = next;
  }
}

static const char *const plan_keys[] = {"format",       "model",    "cluster",    "model_file",
                                        "cluster_file", "strategy", "prediction", "search",
                                        "baselines",    NULL};

/* Member key of root, when present, must satisfy is(). */
static psim_status plan_member(const cJSON *root, const char *file, const char *key,
                               cJSON_bool (*is)(const cJSON *), const char *what,
                               const cJSON **out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (v && !is(v))
    return psim_error(PSIM_EINPUT, "%s: %s: expected %s", file, key, what);
  if (out)
    *out = v;
  return PSIM_OK;
}

/* baselines: data_parallel and megatron_grid, each an object with an
 * iteration time (s, >= 0) and fits, as the plan's prediction. */
static psim_status check_baselines(const cJSON *bl, const char *file) {
  const cJSON *it;
  cJSON_ArrayForEach(it, bl) {
    if (strcmp(it->string, "data_parallel") != 0 && strcmp(it->string, "megatron_grid") != 0)
      return psim_error(PSIM_EINPUT,
                        "%s: baselines.%s: not a baseline (data_parallel, megatron_grid)", file,
                        it->string);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(it, "iteration_time_s");
    if (!cJSON_IsObject(it) || !cJSON_IsNumber(t) || !(t->valuedouble >= 0) ||
        !cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(it, "fits")))
      return psim_error(PSIM_EINPUT,
                        "%s: baselines.%s: expected an object with iteration_time_s (s, >= 0) "
                        "and fits",
                        file, it->string);
  }
  return PSIM_OK;
}

psim_status psim_plan_check(const cJSON *root, const char *file) {
  const cJSON *it, *pred = NULL, *search = NULL, *v;
  if (!cJSON_IsObject(root))
    return psim_error(PSIM_EINPUT, "%s: expected a JSON object (a plan)", file);
  cJSON_ArrayForEach(it, root) {
    const char *const *k = plan_keys;
    while (*k && strcmp(*k, it->string) != 0)
      k++;
    if (!*k)
      return psim_error(PSIM_EINPUT, "%s: %s: not a member of a plan (docs/plan.md)", file,
                        it->string);
  }
  if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "strategy")))
    return psim_error(PSIM_EINPUT, "%s: strategy: missing (expected an object)", file);
  PSIM_CHECK(plan_member(root, file, "model", cJSON_IsString, "the model's name", NULL));
  PSIM_CHECK(plan_member(root, file, "cluster", cJSON_IsString, "the cluster's name", NULL));
  PSIM_CHECK(plan_member(root, file, "prediction", cJSON_IsObject, "an object", &pred));
  PSIM_CHECK(plan_member(root, file, "search", cJSON_IsObject, "an object", &search));
  PSIM_CHECK(plan_member(root, file, "baselines", cJSON_IsObject, "an object", NULL));
  v = cJSON_GetObjectItemCaseSensitive(pred, "iteration_time_s");
  if (pred && (!cJSON_IsNumber(v) || !(v->valuedouble >= 0)))
    return psim_error(PSIM_EINPUT, "%s: prediction.iteration_time_s: expected seconds (>= 0)",
                      file);
  if (pred && !cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(pred, "fits")))
    return psim_error(PSIM_EINPUT, "%s: prediction.fits: expected true or false", file);
  if (search && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(search, "searcher")))
    return psim_error(PSIM_EINPUT, "%s: search.searcher: expected a string", file);
  v = cJSON_GetObjectItemCaseSensitive(search, "plan_from");
  if (v && !cJSON_IsString(v))
    return psim_error(PSIM_EINPUT, "%s: search.plan_from: expected a string", file);
  return check_baselines(cJSON_GetObjectItemCaseSensitive(root, "baselines"), file);
}

static psim_status add_search(cJSON *root, const psim_plan_info *info) {
  cJSON *se, *curve;
  PSIM_CHECK(psim_json_add_object(root, "search", &se));
  PSIM_CHECK(psim_json_add_string(se, "searcher", info->searcher));
  if (info->plan_from && strcmp(info->plan_from, info->searcher) != 0)
    PSIM_CHECK(psim_json_add_string(se, "plan_from", info->plan_from));
  PSIM_CHECK(psim_json_add_number(se, "seed", (double)info->seed));
  if (info->budget)
    PSIM_CHECK(psim_json_add_string(se, "budget", info->budget));
  PSIM_CHECK(psim_json_add_number(se, "evaluations", (double)info->evaluations));
  PSIM_CHECK(psim_json_add_number(se, "wall_s", info->wall_s));
  if (info->description)
    PSIM_CHECK(psim_json_add_string(se, "plan", info->description));
  if (info->stats) {
    cJSON *copy = cJSON_Duplicate(info->stats, 1);
    if (!copy || !cJSON_AddItemToObject(se, "stats", copy)) {
      cJSON_Delete(copy);
      return psim_error(PSIM_ENOMEM, "out of memory");
    }
  }
  PSIM_CHECK(psim_json_add_array(se, "best_so_far", &curve));
  for (int32_t i = 0; i < info->n_curve; i++) {
    cJSON *pt = cJSON_CreateObject();
    if (!pt || !cJSON_AddItemToArray(curve, pt)) {
      cJSON_Delete(pt);
      return psim_error(PSIM_ENOMEM, "out of memory");
    }
    PSIM_CHECK(psim_json_add_number(pt, "evaluation", (double)info->curve[i].evaluation));
    PSIM_CHECK(psim_json_add_number(pt, "wall_s", info->curve[i].wall_s));
    PSIM_CHECK(psim_json_add_number(pt, "iteration_time_s", info->curve[i].best_time_s));
  }
  return PSIM_OK;
}

static psim_status add_baselines(cJSON *root, const psim_plan_info *info) {
  cJSON *bl, *x;
  PSIM_CHECK(psim_json_add_object(root, "baselines", &bl));
  if (info->data_parallel) {
    PSIM_CHECK(psim_json_add_object(bl, "data_parallel", &x));
    PSIM_CHECK(psim_sim_result_to_json(info->data_parallel, x));
  }
  if (info->grid) {
    PSIM_CHECK(psim_json_add_object(bl, "megatron_grid", &x));
    if (info->grid_description)
      PSIM_CHECK(psim_json_add_string(x, "description", info->grid_description));
    PSIM_CHECK(psim_sim_result_to_json(info->grid, x));
  }
  return PSIM_OK;
}

psim_status psim_plan_to_json(const psim_model *m, const psim_cluster *c, const psim_strategy *s,
                              const psim_sim_result *r, const psim_plan_info *info, cJSON **out) {
  cJSON *root = cJSON_CreateObject(), *strategy = NULL, *pred;
  if (!root)
    return psim_error(PSIM_ENOMEM, "out of memory");
  psim_status st = psim_json_add_string(root, "format", "plansim.plan/1");
  if (st == PSIM_OK)
    st = psim_json_add_string(root, "model", m->name);
  if (st == PSIM_OK)
    st = psim_json_add_string(root, "cluster", c->name);
  /* The files the plan was made from, as given (issue 7: exporters and the
   * report reload them; docs/plan.md). */
  if (st == PSIM_OK && m->file)
    st = psim_json_add_string(root, "model_file", m->file);
  if (st == PSIM_OK && c->file)
    st = psim_json_add_string(root, "cluster_file", c->file);
  if (st == PSIM_OK)
    st = psim_strategy_to_json(s, m, c, &strategy);
  if (st == PSIM_OK && !cJSON_AddItemToObject(root, "strategy", strategy)) {
    cJSON_Delete(strategy);
    st = psim_error(PSIM_ENOMEM, "out of memory");
  }
  if (st == PSIM_OK)
    st = psim_json_add_object(root, "prediction", &pred);
  if (st == PSIM_OK)
    st = psim_sim_result_to_json(r, pred);
  if (st == PSIM_OK)
    st = add_search(root, info);
  if (st == PSIM_OK)
    st = add_baselines(root, info);
  if (st != PSIM_OK) {
    cJSON_Delete(root);
    return st;
  }
  *out = root;
  return PSIM_OK;
}

const cJSON *psim_plan_strategy_json(const cJSON *root) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "format");
  if (cJSON_IsString(f) && strcmp(f->valuestring, "plansim.plan/1") == 0) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "strategy");
    return s ? s : root;
  }
  return root;
}

/* A plan without "strategy" would be read as a strategy itself and fail on its plan keys
 * with a confusing message; say what is missing instead. */
static psim_status plan_has_strategy(const char *file, const cJSON *root) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "format");
  if (!cJSON_IsString(f) || strcmp(f->valuestring, "plansim.plan/1") != 0 ||
      cJSON_GetObjectItemCaseSensitive(root, "strategy"))
    return PSIM_OK;
  return psim_error(PSIM_EINPUT,
                    "%s: strategy: missing (expected an object: a plan holds its "
                    "strategy under \"strategy\")",
                    file);
}

psim_status psim_plan_check_model(const char *file, const cJSON *root, const psim_model *m) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "format");
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "model");
  if (!cJSON_IsString(f) || strcmp(f->valuestring, "plansim.plan/1") != 0 ||
      !cJSON_IsString(name) || !m->name || strcmp(name->valuestring, m->name) == 0)
    return PSIM_OK;
  /* main escapes control bytes in every error line */
  return psim_error(PSIM_EINPUT,
                    "%s: model: the plan was made for model '%.80s', not for '%.80s'%s%s; give "
                    "the plan's model",
                    file, name->valuestring, m->name, m->file ? " from " : "",
                    m->file ? m->file : "");
}

psim_status psim_plan_load_strategy(const char *file, const psim_model *m, psim_cluster *c,
                                    psim_strategy *out) {
  cJSON *root = NULL;
  PSIM_CHECK(psim_json_load_file(file, &root));
  psim_status s = plan_has_strategy(file, root);
  if (s == PSIM_OK)
    s = psim_plan_check_model(file, root, m);
  if (s == PSIM_OK)
    s = psim_strategy_from_json(file, psim_plan_strategy_json(root), m, c, out);
  cJSON_Delete(root);
  return s;
}
