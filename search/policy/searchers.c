/* searchers.c - the table of searchers that `plan --search NAME` and sweeps choose from. */
#include "search/policy/searchers.h"

#include <string.h>

#include "search/alpa/alpa.h"
#include "search/mcmc/mcmc.h"

static const psim_searcher searchers[] = {
    {"grid", psim_search_grid, "the Megatron grid: every tp x pp x dp x micro-batch x recompute"},
    {"alpa", psim_search_alpa,
     "Alpa: stage DP over layer ranges and submeshes, GLPK ILP per stage"},
    {"mcmc", psim_search_mcmc, "FlexFlow's MCMC over the SOAP space with delta simulation"},
    {"exhaustive", psim_search_exhaustive, "every configuration of a tiny graph (ground truth)"},
    {NULL, NULL, NULL}};

const psim_searcher *psim_searchers(void) {
  return searchers;
}

const psim_searcher *psim_searcher_find(const char *name) {
  for (const psim_searcher *s = searchers; s->name; s++)
    if (strcmp(s->name, name) == 0)
      return s;
  return NULL;
}
