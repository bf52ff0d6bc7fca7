/* policy.c - search policy (policy.h): `auto` resolved and refined, and the
 * baselines, for `plansim plan` and sweeps alike. */
#include "search/policy/policy.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "search/policy/searchers.h"
#include "sim/engine/taskgraph.h"

static bool is_auto(const char *name) {
  return strcmp(name, "auto") == 0;
}

const char *psim_policy_searcher(const char *name) {
  if (!is_auto(name))
    return name;
  const psim_searcher *a = psim_searcher_find("alpa");
  return a && a->run ? "alpa" : "grid";
}

bool psim_policy_available(const char *name) {
  const psim_searcher *s = psim_searcher_find(psim_policy_searcher(name));
  return s && s->run;
}

void psim_policy_result_init(psim_policy_result *r) {
  memset(r, 0, sizeof *r);
  psim_search_result_init(&r->result);
  psim_search_result_init(&r->grid);
  psim_sim_result_init(&r->dp);
}

void psim_policy_result_destroy(psim_policy_result *r) {
  psim_sim_result_destroy(&r->dp);
  psim_search_result_destroy(&r->grid);
  psim_search_result_destroy(&r->result);
  psim_policy_result_init(r);
}

static void append(psim_search_result *r, const char *text) {
  size_t used = strlen(r->description);
  assert(used < sizeof r->description);
  snprintf(r->description + used, sizeof r->description - used, "%s", text);
}

/* m replaces r's plan (its statistics and description stay the Alpa search's). */
static void take_plan(psim_search_result *r, psim_search_result *m) {
  psim_strategy_destroy(&r->best);
  psim_sim_result_destroy(&r->best_sim);
  r->best = m->best;
  r->best_sim = m->best_sim;
  psim_strategy_init(&m->best);
  psim_sim_result_init(&m->best_sim);
  append(r, ", refined by MCMC");
}

/* Issue 6: `auto` refines the Alpa plan with MCMC started from it (when the
 * "mcmc" entry is built) and keeps the faster of the two. The refinement is
 * optional: any failure but running out of memory keeps the Alpa plan. */
static psim_status refine_mcmc(const psim_model *m, psim_cluster *c, const psim_search_options *so,
                               psim_search_result *r) {
  const psim_searcher *mc = psim_searcher_find("mcmc");
  if (!mc || !mc->run || !r->found || strcmp(psim_policy_searcher("auto"), "alpa") != 0)
    return PSIM_OK;
  psim_search_options o = *so;
  o.init = &r->best;
  o.fix = NULL; /* the Alpa plan already honours it */
  /* without a budget, a short refinement in evaluations (reproducible) */
  if (o.budget_s <= 0 && o.budget_evals <= 0)
    o.budget_evals = PSIM_POLICY_AUTO_REFINE_EVALS;
  psim_search_result x;
  psim_search_result_init(&x);
  psim_status st = mc->run(m, c, &o, &x);
  if (st == PSIM_OK && x.found && x.best_sim.fits &&
      x.best_sim.iteration_time_s < r->best_sim.iteration_time_s)
    take_plan(r, &x);
  else if (st == PSIM_OK) {
    char note[96];
    snprintf(note, sizeof note, " (MCMC refinement: %lld evaluations, no faster plan)",
             (long long)x.evaluations);
    append(r, note);
  }
  if (st == PSIM_OK)
    r->evaluations += x.evaluations;
  psim_search_result_destroy(&x);
  if (st != PSIM_OK && st != PSIM_ENOMEM)
    psim_error_clear();
  return st == PSIM_ENOMEM ? st : PSIM_OK;
}

/* The data-parallel baseline over every device; false when it does not
 * apply (e.g. the batch does not split that many ways). */
static bool data_parallel(const psim_model *m, psim_cluster *c, const psim_sim_options *so,
                          psim_sim_result *out) {
  psim_strategy s;
  psim_strategy_init(&s);
  psim_status st = psim_strategy_data_parallel(m, c, c->n_devices, 1, &s);
  if (st == PSIM_OK)
    st = psim_simulate(m, c, &s, so, out);
  psim_strategy_destroy(&s);
  psim_error_clear();
  return st == PSIM_OK;
}

/* The best Megatron grid plan as a baseline (when the searcher is another). */
static bool grid_baseline(const char *searcher, const psim_model *m, psim_cluster *c,
                          const psim_sim_options *sim, psim_search_result *out) {
  if (strcmp(searcher, "grid") == 0)
    return false;
  psim_search_options o;
  psim_search_options_init(&o);
  o.sim = sim;
  bool ok = psim_search_grid(m, c, &o, out) == PSIM_OK;
  psim_error_clear();
  return ok;
}

psim_status psim_policy_plan(const psim_model *m, psim_cluster *c, const char *name,
                             const psim_search_options *o, bool baselines, psim_policy_result *r) {
  assert(m && c && name && o && r);
  r->searcher = psim_policy_searcher(name);
  const psim_searcher *s = psim_searcher_find(r->searcher);
  if (!s || !s->run)
    return psim_error(PSIM_EUNIMPLEMENTED, "searcher '%s' is not built yet", r->searcher);
  psim_status st = s->run(m, c, o, &r->result);
  if (st == PSIM_OK && is_auto(name))
    st = refine_mcmc(m, c, o, &r->result);
  /* Interrupted (SIGINT/SIGTERM, issue 9): a search that found a strategy
   * still yields it (its figures are a full simulation), with no baselines. */
  r->stopped = psim_interrupted() && (st == PSIM_OK || st == PSIM_EINTERRUPTED) && r->result.found;
  if (r->stopped)
    return PSIM_OK;
  if (st == PSIM_OK && baselines) {
    r->have_dp = data_parallel(m, c, o->sim, &r->dp);
    r->have_grid = grid_baseline(r->searcher, m, c, o->sim, &r->grid);
  }
  return st;
}
