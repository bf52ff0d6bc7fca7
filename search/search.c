/* search.c - the searcher table and the shared result helpers. */
#include "search.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "alloc.h"
#include "alpa.h"
#include "mcmc.h"

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

static const psim_searcher searchers[] = {
    {"grid", psim_search_grid, "the Megatron grid: every tp x pp x dp x micro-batch x recompute"},
    {"alpa", psim_search_alpa, "Alpa: stage DP over layer ranges and submeshes, GLPK ILP per stage"},
    {"mcmc", psim_search_mcmc, "FlexFlow's MCMC over the SOAP space with delta simulation"},
    {"exhaustive", psim_search_exhaustive, "every configuration of a tiny graph (ground truth)"},
    {NULL, NULL, NULL}};

const psim_searcher *psim_searchers(void) { return searchers; }

const psim_searcher *psim_searcher_find(const char *name) {
  for (const psim_searcher *s = searchers; s->name; s++)
    if (strcmp(s->name, name) == 0)
      return s;
  return NULL;
}
