/* search.c - the searcher interface's shared helpers: options, results, budgets. */
#include "search/search.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"

void psim_search_options_init(psim_search_options *o) {
  memset(o, 0, sizeof *o);
  o->seed = 1;
  o->threads = 1;
}

void psim_search_result_init(psim_search_result *r) {
  memset(r, 0, sizeof *r);
  psim_strategy_init(&r->best);
  psim_sim_result_init(&r->best_sim);
}

void psim_search_result_destroy(psim_search_result *r) {
  psim_strategy_destroy(&r->best);
  psim_sim_result_destroy(&r->best_sim);
  psim_free(r->curve);
  cJSON_Delete(r->stats);
  memset(r, 0, sizeof *r);
}

psim_status psim_search_record(psim_search_result *r, int64_t evaluation, double wall_s,
                               double best_time_s) {
  PSIM_CHECK(PSIM_VEC_RESERVE(r->curve, r->cap_curve, (size_t)r->n_curve + 1));
  r->curve[r->n_curve++] = (psim_search_point){evaluation, wall_s, best_time_s};
  return PSIM_OK;
}

/* Seconds per unit of a time budget, 0 for an unknown unit. */
static double budget_unit(const char *u) {
  if (strcmp(u, "s") == 0)
    return 1;
  if (strcmp(u, "m") == 0 || strcmp(u, "min") == 0)
    return 60;
  return strcmp(u, "h") == 0 ? 3600 : 0;
}

const char *psim_search_budget_problem(const char *text, double *seconds, int64_t *evals) {
  char *end;
  double v = strtod(text, &end);
  size_t digits = strspn(text, "0123456789.eE+-");
  if (end == text || (size_t)(end - text) > digits ||
      !(text[0] == '.' || isdigit((unsigned char)text[0])) || !isfinite(v))
    return "expected evaluations (\"20000\") or a time with a unit (\"60s\", \"2m\", \"1.5h\")";
  if (*end == '\0' && v != floor(v))
    return "evaluations must be a whole number; a time needs a unit (\"0.5s\")";
  if (*end == '\0' && !(v >= 1 && v <= PSIM_SEARCH_BUDGET_MAX_EVALS))
    return "evaluations out of range; expected 1 to 1e12";
  if (*end == '\0') {
    *evals = (int64_t)v;
    return NULL;
  }
  double unit = budget_unit(end);
  if (unit == 0)
    return "unknown unit; expected s, m, min or h (\"60s\")";
  if (!(v * unit > 0 && v * unit <= PSIM_SEARCH_BUDGET_MAX_S))
    return "time out of range; expected more than 0 s and at most 30 days";
  *seconds = v * unit;
  return NULL;
}
