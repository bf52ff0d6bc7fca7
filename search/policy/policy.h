/* policy.h - search policy: what `--search auto` means and the baselines a plan
 * is compared with. `plansim plan` and sweeps both call psim_policy_plan, so a
 * searcher name means the same search in both.
 *
 * The baselines are candidates (issue 18, defect 6): a plan is never slower
 * than a baseline it evaluated. When a baseline is faster than the
 * searcher's plan, the plan is that baseline, and plan_from says so. */
#ifndef PSIM_POLICY_H
#define PSIM_POLICY_H

#include <stdbool.h>

#include "search/search.h"
#include "sim/engine/simulation.h"

/* Most evaluations of the MCMC refinement `auto` runs after the Alpa
 * optimizer when no budget is given: enough for local moves around the best
 * candidate, short enough for an interactive first plan (reproducible
 * whenever they end within the wall budget below). */
#define PSIM_POLICY_AUTO_REFINE_EVALS 100
/* Time budget of a plan when none is given, s of CPU (search/budget.h: budgets count CPU
 * time, so a loaded machine does not change the plan): issue 18 asks a
 * 1,000-GPU plan in under a minute on one core; 40 s leaves room for loading
 * the inputs, the plan's full simulation and writing it. The Alpa optimizer
 * runs to completion; the MCMC refinement ends by this time. */
#define PSIM_POLICY_WALL_S 40.0
/* Budget of the Megatron grid baseline, s of CPU (PSIM_GRID: it stops before a
 * configuration expected to end past it; the plan's description says so). Under `auto`
 * at most what the plan's budget has left, and all of that where the MCMC refinement
 * could not use it (policy.c grid_share_s). */
#define PSIM_POLICY_GRID_BASELINE_S 20.0
/* The least budget the grid baseline gets, s of CPU: the grid then simulates its first,
 * best-estimated candidate only (search/grid_order.c). */
#define PSIM_POLICY_GRID_MIN_S 0.01
/* `auto` runs the whole Alpa optimizer (stages of different sizes, interleaved variants) on
 * clusters of at most this many devices and its quick form (equal stages) above: the whole
 * search took 7.9 s of CPU for GPT-3 13B and 15.0 s for Qwen3-30B-A3B on 64 GPUs, where its
 * 7-stage 8x6+16 plan is 3.4% faster than the quick one; 33.6 s on 256 H100s (Llama 3 70B)
 * and 44-60 s on 1,024 (docs/search.md peer table, session 15), over auto's share. */
#define PSIM_POLICY_WHOLE_ALPA_DEVICES 64
/* The refinement runs only when the time left holds its start's evaluation
 * and this many proposals, each estimated as one unfolded simulation of the
 * start (delta simulation does not fold symmetric devices). */
#define PSIM_POLICY_MIN_PROPOSALS 10
/* CPU seconds of the plan's budget the MCMC refinement leaves for what comes after it: its
 * last evaluation may run past the chain's mean, then the chains' teardown and the plan's
 * output. Measured 2026-12-04 at 456ce0e, Qwen3-30B-A3B on 64 H100 at --budget 60s: the
 * whole process took 60.17-60.31 s of CPU (user + system) without it. */
#define PSIM_POLICY_FINISH_S 0.5

/* The grid baseline's CPU budget under `auto` with a time budget, s: given left_s, what
 * the plan's budget has left, and eval_s, the expected seconds of one MCMC evaluation of the
 * search's plan (< 0: the search found none), PSIM_POLICY_GRID_BASELINE_S or left_s if less,
 * and all of left_s where the refinement could not use what the grid leaves (the start's
 * evaluation and PSIM_POLICY_MIN_PROPOSALS would not fit in it, next to one evaluation for
 * the new best: on 1,024 GPUs an evaluation takes 10-95 s, and that time would go unspent);
 * never under PSIM_POLICY_GRID_MIN_S. */
double psim_policy_grid_share_s(double left_s, double eval_s);

/* The searcher NAME runs: "auto" is Alpa (then MCMC refinement) when Alpa is
 * built, the Megatron grid when it is not; any other name is itself. */
const char *psim_policy_searcher(const char *name);
/* True when NAME ("auto" included) names a searcher that is built. */
bool psim_policy_available(const char *name);

typedef struct psim_policy_result {
  const char *searcher;      /* the searcher that ran (auto resolved); static */
  psim_search_result result; /* the plan: the best of the search, its refinement and the
                                baselines; statistics and curve are the search's */
  const char *plan_from;     /* where the plan came from: the searcher's name, "mcmc" (the
                                refinement), "data_parallel" or "megatron_grid"; static */
  double searcher_time_s;    /* iteration time of the searcher's own plan, s (INFINITY: none) */
  psim_search_result grid;   /* the Megatron grid baseline (strategy and figures) */
  psim_search_result dp;     /* the data-parallel baseline (strategy and figures) */
  /* the baselines' figures, NULL when not run or not applicable; a baseline
   * that became the plan points at result.best_sim */
  const psim_sim_result *grid_sim, *dp_sim;
  bool stopped; /* interrupted after a strategy was found: result holds it, no baselines */
} psim_policy_result;

void psim_policy_result_init(psim_policy_result *r);
void psim_policy_result_destroy(psim_policy_result *r);

/* Runs searcher NAME with options o; then, when baselines and the search was
 * not interrupted, the data-parallel strategy over every device and (unless
 * the searcher is the grid) the best Megatron grid plan within
 * PSIM_POLICY_GRID_BASELINE_S, simulated with o->sim. "auto" then refines the
 * fastest candidate (search or baseline) with MCMC: o's budget when given (a
 * time budget is the whole plan's), else at most
 * PSIM_POLICY_AUTO_REFINE_EVALS evaluations ending within
 * PSIM_POLICY_WALL_S of the start. The plan is the fastest candidate that
 * fits. Phase lines go to o->progress. An interrupted search that found a
 * strategy is PSIM_OK with stopped set. PSIM_EUNIMPLEMENTED when the
 * searcher is not built. */
psim_status psim_policy_plan(const psim_model *m, psim_cluster *c, const char *name,
                             const psim_search_options *o, bool baselines, psim_policy_result *r);

#endif
