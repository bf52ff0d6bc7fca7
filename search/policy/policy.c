/* policy.c - search policy (policy.h): `auto` resolved and refined, and the
 * baselines as candidates of the plan, for `plansim plan` and sweeps alike. */
#define _POSIX_C_SOURCE 200809L
#include "search/policy/policy.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "search/budget.h"
#include "search/policy/searchers.h"
#include "sim/core/units.h"
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
  psim_search_result_init(&r->dp);
  r->searcher_time_s = INFINITY;
}

void psim_policy_result_destroy(psim_policy_result *r) {
  psim_search_result_destroy(&r->dp);
  psim_search_result_destroy(&r->grid);
  psim_search_result_destroy(&r->result);
  psim_policy_result_init(r);
}

typedef struct policy_run {
  const psim_model *m;
  psim_cluster *c;
  const psim_search_options *o;
  double t0;      /* start of the policy, s (the budget clock, search/budget.h) */
  double wall_s;  /* the plan's time budget (CPU s): o's time budget, else PSIM_POLICY_WALL_S */
  bool refines;   /* `auto`: the MCMC refinement follows the baselines */
  char note[256]; /* the refinement's note for the plan's description, or "" */
} policy_run;

/* One line per phase on o->progress: "plan [8.1 s of 40 s]: baselines ...". */
static void phase(const policy_run *p, const char *fmt, ...) {
  FILE *f = p->o->progress;
  if (!f)
    return;
  fprintf(f, "plan [%.1f s of %.0f s]: ", psim_budget_clock_s() - p->t0, p->wall_s);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fprintf(f, "\n");
  fflush(f);
}

/* Formats r's description (append: after what it holds), cut to its size. */
static void describe(psim_search_result *r, bool append, const char *fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  size_t used = append ? strlen(r->description) : 0;
  assert(used < sizeof r->description);
  memcpy(r->description + used, text, fmin(strlen(text) + 1, sizeof r->description - used));
  r->description[sizeof r->description - 1] = '\0';
}

/* x's plan replaces r's (r keeps its statistics, curve and evaluations). */
static void move_plan(psim_search_result *r, psim_search_result *x) {
  psim_strategy_destroy(&r->best);
  psim_sim_result_destroy(&r->best_sim);
  r->best = x->best;
  r->best_sim = x->best_sim;
  psim_strategy_init(&x->best);
  psim_sim_result_init(&x->best_sim);
}

/* ---- candidates ------------------------------------------------------------ */

enum { CAND_SEARCH, CAND_DP, CAND_GRID, N_CAND };
static const char *const cand_name[N_CAND] = {NULL, "data_parallel", "megatron_grid"};

static psim_search_result *candidate(psim_policy_result *r, int k) {
  psim_search_result *x = k == CAND_SEARCH ? &r->result : k == CAND_DP ? &r->dp : &r->grid;
  return x->found && x->best_sim.fits ? x : NULL;
}

/* The fastest candidate that fits (the search's on ties, then data parallel);
 * -1 when none. Baselines are candidates unless --fix constrains the plan
 * (they do not honour it). */
static int fastest(const policy_run *p, psim_policy_result *r) {
  int b = -1;
  for (int k = 0; k < (p->o->fix ? 1 : N_CAND); k++) {
    const psim_search_result *x = candidate(r, k);
    if (x && (b < 0 || x->best_sim.iteration_time_s < candidate(r, b)->best_sim.iteration_time_s))
      b = k;
  }
  return b;
}

/* ---- baselines ----------------------------------------------------------------- */

/* The data-parallel baseline over every device; not found when it does not
 * apply (e.g. the batch does not split that many ways). */
static void data_parallel(const policy_run *p, psim_search_result *out) {
  psim_status st = psim_strategy_data_parallel(p->m, p->c, p->c->n_devices, 1, &out->best);
  if (st == PSIM_OK)
    st = psim_simulate(p->m, p->c, &out->best, p->o->sim, &out->best_sim);
  psim_error_clear();
  out->found = st == PSIM_OK;
  describe(out, false, "data parallel over %d devices", p->c->n_devices);
}

static double eval_estimate_s(const policy_run *p, const psim_sim_result *s);

double psim_policy_grid_share_s(double left_s, double eval_s) {
  double share = fmin(PSIM_POLICY_GRID_BASELINE_S, left_s);
  if (eval_s >= 0 && left_s - share < eval_s * (2 + PSIM_POLICY_MIN_PROPOSALS))
    share = left_s;
  return fmax(share, PSIM_POLICY_GRID_MIN_S);
}

/* The grid baseline's CPU budget, s (psim_policy_grid_share_s under `auto` with a time
 * budget, the given one or PSIM_POLICY_WALL_S). Other searchers run past the plan's budget (Alpa to
 * completion), so their baseline keeps PSIM_POLICY_GRID_BASELINE_S, as under an evaluation budget.
 */
static double grid_share_s(const policy_run *p, const psim_search_result *search) {
  if (!p->refines || (p->o->budget_evals > 0 && p->o->budget_s <= 0))
    return PSIM_POLICY_GRID_BASELINE_S;
  double eval_s = search->found ? eval_estimate_s(p, &search->best_sim) : -1;
  return psim_policy_grid_share_s(p->t0 + p->wall_s - psim_budget_clock_s(), eval_s);
}

/* The best Megatron grid plan within budget_s (grid_share_s). */
static void grid_baseline(const policy_run *p, double budget_s, psim_search_result *out) {
  psim_search_options o;
  psim_search_options_init(&o);
  o.sim = p->o->sim;
  o.progress = p->o->progress;
  o.budget_s = budget_s;
  o.fp8 = p->o->fp8; /* plan --fp8 */
  if (psim_search_grid(p->m, p->c, &o, out) != PSIM_OK)
    out->found = false;
  psim_error_clear();
}

static void baselines(const policy_run *p, psim_policy_result *r) {
  bool grid = strcmp(r->searcher, "grid") != 0;
  if (grid)
    phase(p, "baselines: data parallel over %d devices, the Megatron grid", p->c->n_devices);
  else
    phase(p, "baseline: data parallel over %d devices", p->c->n_devices);
  data_parallel(p, &r->dp);
  if (r->dp.found)
    r->dp_sim = &r->dp.best_sim;
  if (grid) {
    double share_s = grid_share_s(p, &r->result); /* after data parallel's simulation */
    phase(p, "the Megatron grid baseline (at most %.0f s)", share_s);
    grid_baseline(p, share_s, &r->grid);
  }
  if (r->grid.found)
    r->grid_sim = &r->grid.best_sim;
}

/* ---- MCMC refinement (auto) --------------------------------------------------- */

/* Seconds one MCMC evaluation of strategy s is expected to take: its full
 * simulation's build and engine time, unfolded (delta simulation simulates
 * every device: a plan folded to 32 of 1,024 devices costs 32 times more). */
static double eval_estimate_s(const policy_run *p, const psim_sim_result *s) {
  int32_t sim = s->simulated_devices > 0 ? s->simulated_devices : p->c->n_devices;
  return (s->build_s + s->simulate_s) * (double)p->c->n_devices / (double)sim;
}

/* The refinement's budget in *o: an evaluation budget as given (exact and
 * reproducible); else what is left of the time budget, less one evaluation
 * for the full simulation of a new best and PSIM_POLICY_FINISH_S, and (no budget given) at most
 * PSIM_POLICY_AUTO_REFINE_EVALS evaluations. False, with why, when the time
 * left does not hold the start and PSIM_POLICY_MIN_PROPOSALS proposals. */
static bool refine_budget(const policy_run *p, const psim_sim_result *start, psim_search_options *o,
                          char *why, size_t n) {
  if (p->o->budget_evals > 0 && p->o->budget_s <= 0)
    return true;
  double est = eval_estimate_s(p, start), now = psim_budget_clock_s();
  double left = p->t0 + p->wall_s - now - est - PSIM_POLICY_FINISH_S;
  if (left < est * (1 + PSIM_POLICY_MIN_PROPOSALS)) {
    snprintf(why, n, " (no MCMC refinement: ~%.2g s per evaluation, %.0f s of %.0f s left)", est,
             fmax(0, p->t0 + p->wall_s - now), p->wall_s);
    return false;
  }
  o->budget_s = left;
  if (p->o->budget_s <= 0)
    o->budget_evals = PSIM_POLICY_AUTO_REFINE_EVALS;
  return true;
}

/* The refinement's outcome: a faster plan replaces r->result (its
 * description the start's, "refined by MCMC"); else a note. */
static void refine_outcome(policy_run *p, psim_policy_result *r, psim_search_result *start,
                           int from, psim_search_result *x) {
  if (x->found && x->best_sim.fits &&
      x->best_sim.iteration_time_s < start->best_sim.iteration_time_s) {
    char was[sizeof start->description];
    memcpy(was, start->description, sizeof was);
    describe(&r->result, false, "%s, refined by MCMC", was);
    move_plan(&r->result, x);
    r->plan_from = "mcmc";
    return;
  }
  snprintf(p->note, sizeof p->note, " (MCMC refinement%s: %lld evaluations, no faster plan)",
           from == CAND_SEARCH ? "" : " of the baseline", (long long)x->evaluations);
}

/* `auto`: MCMC started from the fastest candidate (the Alpa plan or a
 * baseline: single-op moves from a tensor-parallel plan do not reach data
 * parallelism, which differs on every op). Optional: any failure but
 * running out of memory keeps the candidates. */
static psim_status refine(policy_run *p, psim_policy_result *r) {
  const psim_searcher *mc = psim_searcher_find("mcmc");
  int from = fastest(p, r);
  if (!mc || !mc->run || from < 0 || strcmp(r->searcher, "alpa") != 0)
    return PSIM_OK;
  psim_search_result *start = candidate(r, from);
  psim_search_options o = *p->o;
  o.init = &start->best;
  o.fix = NULL; /* the Alpa plan honours it; baselines are candidates only without it */
  if (!refine_budget(p, &start->best_sim, &o, p->note, sizeof p->note)) {
    phase(p, "%.*s", (int)strlen(p->note) - 3, p->note + 2); /* without " (" and ")" */
    return PSIM_OK;
  }
  phase(p, "MCMC refinement of %s (%.0f s left)", start->description,
        p->t0 + p->wall_s - psim_budget_clock_s());
  psim_search_result x;
  psim_search_result_init(&x);
  psim_status st = mc->run(p->m, p->c, &o, &x);
  if (st == PSIM_OK) {
    r->result.evaluations += x.evaluations;
    refine_outcome(p, r, start, from, &x);
  }
  psim_search_result_destroy(&x);
  if (st != PSIM_OK && st != PSIM_ENOMEM)
    psim_error_clear();
  return st == PSIM_ENOMEM ? st : PSIM_OK;
}

/* The fastest baseline becomes the plan when it beats the search's (issue
 * 18, defect 6: a plan is never slower than a baseline it evaluated). */
static void adopt_fastest(const policy_run *p, psim_policy_result *r) {
  int b = fastest(p, r);
  if (b <= CAND_SEARCH)
    return;
  psim_search_result *x = candidate(r, b);
  char was[sizeof x->description];
  memcpy(was, x->description, sizeof was);
  char t[32];
  psim_units_format(r->result.best_sim.iteration_time_s, PSIM_UNIT_TIME, t, sizeof t);
  describe(&r->result, false, "%s: the %s baseline, faster than the %s plan (%s)", was,
           cand_name[b], r->searcher, t);
  move_plan(&r->result, x);
  if (b == CAND_DP)
    r->dp_sim = &r->result.best_sim;
  else
    r->grid_sim = &r->result.best_sim;
  r->plan_from = cand_name[b];
}

/* auto's search step: the plan's time budget less the grid baseline's, at least a quarter
 * of it. The Alpa optimizer skips candidate simulations that would end later, with a note
 * (on DeepSeek-V3 or Qwen3-235B on 256 GPUs one takes ~10 s). 0 (none) under an evaluation
 * budget, which makes the plan reproducible. */
static double search_share_s(const policy_run *p, bool with_baselines) {
  if (p->o->budget_evals > 0 && p->o->budget_s <= 0)
    return 0;
  return fmax(p->wall_s / 4, p->wall_s - (with_baselines ? PSIM_POLICY_GRID_BASELINE_S : 0));
}

psim_status psim_policy_plan(const psim_model *m, psim_cluster *c, const char *name,
                             const psim_search_options *o, bool with_baselines,
                             psim_policy_result *r) {
  assert(m && c && name && o && r);
  policy_run p = {m,
                  c,
                  o,
                  o->budget_from_start ? 0 : psim_budget_clock_s(),
                  o->budget_s > 0 ? o->budget_s : PSIM_POLICY_WALL_S,
                  is_auto(name),
                  ""};
  r->searcher = r->plan_from = psim_policy_searcher(name);
  const psim_searcher *s = psim_searcher_find(r->searcher);
  if (!s || !s->run)
    return psim_error(PSIM_EUNIMPLEMENTED, "searcher '%s' is not built yet", r->searcher);
  phase(&p, "%s search", r->searcher);
  psim_search_options so = *o;
  so.quick = so.quick || (is_auto(name) && c->n_devices > PSIM_POLICY_WHOLE_ALPA_DEVICES);
  if (is_auto(name))
    so.budget_s = search_share_s(&p, with_baselines);
  if (so.budget_s > 0) /* less what came before it (loading the inputs, budget_from_start) */
    so.budget_s = fmax(PSIM_POLICY_GRID_MIN_S, so.budget_s - (psim_budget_clock_s() - p.t0));
  psim_status st = s->run(m, c, &so, &r->result);
  if (r->result.found)
    r->searcher_time_s = r->result.best_sim.iteration_time_s;
  /* Interrupted (SIGINT/SIGTERM, issue 9): a search that found a strategy
   * still yields it (its figures are a full simulation), with no baselines. */
  r->stopped = psim_interrupted() && (st == PSIM_OK || st == PSIM_EINTERRUPTED) && r->result.found;
  if (r->stopped || st != PSIM_OK)
    return r->stopped ? PSIM_OK : st;
  if (with_baselines)
    baselines(&p, r);
  if (is_auto(name))
    PSIM_CHECK(refine(&p, r));
  if (with_baselines)
    adopt_fastest(&p, r);
  describe(&r->result, true, "%s", p.note);
  r->stopped = psim_interrupted();
  return PSIM_OK;
}
