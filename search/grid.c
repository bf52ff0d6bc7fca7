/* grid.c - the Megatron grid: the driver (candidates and pruning rules: grid_space.c). */
#define _POSIX_C_SOURCE 200809L
#include "search/grid.h"
#include "search/budget.h"
#include "search/grid_impl.h"
#include "search/search.h"

#include <math.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "sim/core/alloc.h"
#include "sim/core/clock.h"
#include "sim/core/json.h"

void psim_grid_options_init(psim_grid_options *o) {
  memset(o, 0, sizeof *o);
  o->max_tp = 0;
  int32_t mbs[] = {1, 2, 4, 8};
  memcpy(o->micro_batches, mbs, sizeof mbs);
  o->n_micro_batches = 4;
  o->try_recompute = true;
  o->try_pp_schedules = true;
  o->try_recompute_block = true;
  o->try_overlap_grad_reduce = true;
  o->try_overlap_param_gather = true;
  o->max_virtual_stages = 8;
  o->max_zero = 3;
  o->try_sequence_parallel_off = false;
  o->prune_by_estimate = true;
  o->max_evaluations = 10000;
  o->best_first = true;
}

void psim_grid_result_init(psim_grid_result *r) {
  memset(r, 0, sizeof *r);
  psim_sim_result_init(&r->best_sim);
}

void psim_grid_result_destroy(psim_grid_result *r) {
  psim_sim_result_destroy(&r->best_sim);
  psim_free(r->curve);
  memset(r, 0, sizeof *r);
}

typedef struct grid_state {
  const psim_model *m;
  psim_cluster *c;
  const psim_grid_options *o;
  psim_grid_result *r;
  grid_space sp;
  double t0, last_shown;
  double b0; /* the budget clock at the start, s (search/budget.h: CPU time) */
  size_t cap_curve;
  double last_s; /* budget-clock seconds of the last configuration simulated */
} grid_state;

/* The estimated seconds left: the mean cost of the configurations simulated so far times
 * the candidates not yet visited that no rule pruned so far, at most what the budget
 * leaves. */
static double seconds_left(const grid_state *g) {
  const psim_grid_result *r = g->r;
  double now = psim_budget_clock_s();
  if (r->evaluations == 0)
    return NAN;
  int64_t left_n = 0;
  for (int64_t i = r->visited; i < g->sp.n; i++)
    left_n += g->sp.c[i].state == GRID_PENDING && g->sp.c[i].mo.zero_stage < 2; /* fallbacks */
  double left = (now - g->b0) / (double)r->evaluations * (double)left_n;
  if (g->o->budget_s > 0 && left > g->b0 + g->o->budget_s - now)
    left = fmax(0, g->b0 + g->o->budget_s - now);
  return left;
}

/* "\rgrid: 120/2304 candidates (1800 pruned: 900 divisibility, 700 memory, 150 dominated,
 * 50 bound), 64 simulated, 3.2 s, ~20 s left, best ..." at most twice a second, and on every
 * new best. */
static void show(grid_state *g, bool force) {
  double now = psim_clock_now_s();
  if (!g->o->progress || (!force && now - g->last_shown < 0.5))
    return;
  g->last_shown = now;
  const psim_grid_result *r = g->r;
  const psim_megatron_opts *b = &r->best;
  fprintf(g->o->progress,
          "\rgrid: %lld/%lld candidates (%lld pruned: %lld divisibility, %lld memory, %lld "
          "dominated, %lld bound), %lld simulated, %.1f s, ~%.0f s left",
          (long long)(r->visited + r->pruned_divisibility), (long long)r->total,
          (long long)r->pruned, (long long)r->pruned_divisibility,
          (long long)(r->pruned_memory_estimate + r->pruned_memory_implied),
          (long long)r->pruned_dominated, (long long)r->pruned_bound, (long long)r->evaluations,
          now - g->t0, seconds_left(g));
  if (r->found)
    fprintf(g->o->progress,
            ", best %.4f s (tp %d pp %d dp %d cp %d ep %d etp %d vp %d mb %d %s%s%.0d zero %d%s)",
            r->best_sim.iteration_time_s, b->tp, b->pp, b->dp, b->cp > 0 ? b->cp : 1,
            b->ep > 0 ? b->ep : 1, b->etp > 0 ? b->etp : b->tp, b->virtual_stages, b->micro_batch,
            psim_recompute_name(b->recompute),
            b->recompute != PSIM_RECOMPUTE_FULL     ? ""
            : b->recompute_method == PSIM_RCM_BLOCK ? "-block"
            : b->recompute_every > 1                ? "-every"
                                                    : "",
            /* "%.0d" prints nothing for 0: the N of every-N only */
            b->recompute == PSIM_RECOMPUTE_FULL && b->recompute_every > 1 ? (int)b->recompute_every
                                                                          : 0,
            b->zero_stage, b->sequence_parallel ? " sp" : "");
  fprintf(g->o->progress, "   ");
  fflush(g->o->progress);
}

static psim_status record(grid_state *g, const psim_megatron_opts *mo, psim_sim_result *sim) {
  psim_grid_result *r = g->r;
  r->feasible++;
  if (r->found && sim->iteration_time_s >= r->best_sim.iteration_time_s) {
    psim_sim_result_destroy(sim);
    return PSIM_OK;
  }
  psim_sim_result_destroy(&r->best_sim);
  r->best_sim = *sim;
  r->best = *mo;
  r->found = true;
  PSIM_CHECK(PSIM_VEC_RESERVE(r->curve, g->cap_curve, (size_t)r->n_curve + 1));
  r->curve[r->n_curve++] =
      (psim_search_point){r->evaluations, psim_clock_now_s() - g->t0, sim->iteration_time_s};
  show(g, true);
  return PSIM_OK;
}

/* Weights, gradients and optimizer state of the peak device exceed its memory. */
static bool over_on_static(const psim_sim_result *sim) {
  const psim_mem_breakdown *b = &sim->memory;
  return !sim->fits && b->weights + b->gradients + b->optimizer > sim->capacity_bytes;
}

/* Simulates candidate k and records what became of it; expansion failures (does not fit
 * the model) and the simulator's limits mark it refused, other failures propagate. */
static psim_status evaluate(grid_state *g, grid_cand *k) {
  psim_strategy s;
  psim_strategy_init(&s);
  psim_status st = psim_strategy_megatron(g->m, g->c, &k->mo, &s);
  if (st == PSIM_EINPUT) {
    psim_strategy_destroy(&s);
    psim_error_clear();
    k->state = GRID_REFUSED;
    return PSIM_OK;
  }
  psim_sim_result sim;
  psim_sim_result_init(&sim);
  g->r->evaluations++;
  double t = psim_budget_clock_s();
  if (st == PSIM_OK)
    st = psim_simulate(g->m, g->c, &s, g->o->sim, &sim);
  g->last_s = psim_budget_clock_s() - t;
  psim_strategy_destroy(&s);
  show(g, false);
  if (st == PSIM_ELIMIT) {
    psim_error_clear();
    k->state = GRID_REFUSED;
    return PSIM_OK;
  }
  if (st != PSIM_OK)
    return st;
  k->compute_s = sim.compute_s;
  k->time_s = sim.iteration_time_s;
  k->state = sim.fits ? GRID_FITS : over_on_static(&sim) ? GRID_STATIC_OVER : GRID_OVER;
  if (!sim.fits) {
    psim_sim_result_destroy(&sim);
    return PSIM_OK;
  }
  return record(g, &k->mo, &sim);
}

/* Whether the next configuration may start: evaluations and time left. A
 * time budget stops the grid before a configuration expected to end past it:
 * expected to cost the mean so far or the last one, whichever is more (the
 * cost grows with pp and the micro-batches, along the grid's order). */
static bool may_start(grid_state *g) {
  psim_grid_result *r = g->r;
  if (r->evaluations >= g->o->max_evaluations || psim_interrupted())
    return false;
  if (g->o->budget_s <= 0 || r->evaluations == 0)
    return true;
  double now = psim_budget_clock_s(), mean = (now - g->b0) / (double)r->evaluations;
  r->stopped_by_time = now + fmax(mean, g->last_s) > g->b0 + g->o->budget_s;
  return !r->stopped_by_time;
}

static void count_pruned(psim_grid_result *r, grid_state_kind k) {
  r->pruned_memory_estimate += k == GRID_MEM_ESTIMATE;
  r->pruned_memory_implied += k == GRID_MEM_IMPLIED;
  r->pruned_dominated += k == GRID_DOMINATED;
  r->pruned_bound += k == GRID_BOUND;
  r->pruned_zero_lower += k == GRID_ZERO_LOWER;
  r->pruned = r->pruned_divisibility + r->pruned_memory_estimate + r->pruned_memory_implied +
              r->pruned_dominated + r->pruned_bound + r->pruned_zero_lower;
}

/* Visits candidates [from, to): pruned by a rule or simulated. *more is false once the
 * grid must stop (budget, interruption). */
static psim_status visit(grid_state *g, int64_t from, int64_t to, bool *more) {
  psim_grid_result *r = g->r;
  for (int64_t i = from; i < to && *more; i++) {
    grid_cand *k = &g->sp.c[i];
    if (k->state == GRID_PENDING)
      k->state = (int8_t)psim_grid_prune(&g->sp, i, r->found, r->best_sim.iteration_time_s);
    if (k->state != GRID_PENDING) {
      count_pruned(r, (grid_state_kind)k->state);
      r->visited++;
      continue;
    }
    if (!(*more = may_start(g)))
      return PSIM_OK;
    r->visited++;
    psim_status es = evaluate(g, k);
    if (es == PSIM_EINTERRUPTED) /* issue 9: keep the best so far */
      return (*more = false), PSIM_OK;
    PSIM_CHECK(es);
    r->refused += k->state == GRID_REFUSED;
  }
  return PSIM_OK;
}

/* The classic candidates, then the others ordered by their pair's best classic time. */
static psim_status run_grid(grid_state *g) {
  bool more = true;
  if (g->sp.best_first)
    return visit(g, 0, g->sp.n, &more);
  int64_t n_classic = 0;
  while (n_classic < g->sp.n && g->sp.c[n_classic].classic)
    n_classic++;
  PSIM_CHECK(visit(g, 0, n_classic, &more));
  if (!more)
    return PSIM_OK;
  double *pair_best = psim_malloc((size_t)(g->sp.n_pairs + 1) * sizeof *pair_best);
  if (!pair_best)
    return psim_error(PSIM_ENOMEM, "out of memory ordering the grid");
  for (int32_t p = 0; p <= g->sp.n_pairs; p++)
    pair_best[p] = INFINITY;
  for (int64_t i = 0; i < n_classic; i++)
    if (g->sp.c[i].state == GRID_FITS)
      pair_best[g->sp.c[i].pair] = fmin(pair_best[g->sp.c[i].pair], g->sp.c[i].time_s);
  psim_grid_space_order(&g->sp, pair_best);
  psim_free(pair_best);
  return visit(g, n_classic, g->sp.n, &more);
}

static psim_status finish(const psim_model *m, psim_cluster *c, psim_grid_result *r) {
  if (!r->found && psim_interrupted() && r->evaluations == 0)
    return psim_error(PSIM_EINTERRUPTED, "interrupted before a configuration was evaluated");
  if (!r->found && psim_interrupted()) /* issue 24: evaluated, none fits so far */
    return psim_error(PSIM_EINTERRUPTED,
                      "interrupted after %lld of %lld configurations were evaluated, none of "
                      "which fits %s",
                      (long long)r->evaluations, (long long)r->total, c->name);
  if (!r->found)
    return psim_error(PSIM_EFAILED,
                      "no Megatron configuration of %s fits on %s (%lld of %lld candidates "
                      "simulated, %lld over memory by the static estimate%s)",
                      m->name, c->name, (long long)r->evaluations, (long long)r->total,
                      (long long)r->pruned_memory_estimate,
                      r->stopped_by_time ? ", stopped by the time budget" : "");
  return PSIM_OK;
}

psim_status psim_grid_search(const psim_model *m, psim_cluster *c, const psim_grid_options *o,
                             psim_grid_result *r) {
  psim_grid_result_init(r);
  if (m->role_dim[PSIM_ROLE_BATCH] < 0)
    return psim_error(PSIM_EINPUT, "%s: the grid search needs a dim with role 'batch'",
                      m->file ? m->file : m->name);
  grid_state g = {
      .m = m, .c = c, .o = o, .r = r, .t0 = psim_clock_now_s(), .b0 = psim_budget_clock_s()};
  int32_t max_tp = o->max_tp > 0 ? o->max_tp : (c->devices_per_node > 0 ? c->devices_per_node : 8);
  psim_status st = psim_grid_space_build(m, c, o, max_tp, &g.sp);
  if (st == PSIM_OK && o->space == PSIM_GRID_MEGATRON && o->best_first)
    st = psim_grid_space_estimate(&g.sp, m, c, o->sim ? o->sim->costdb : NULL);
  r->total = g.sp.n + g.sp.pruned_divisibility;
  r->hsdp = g.sp.n_hsdp;
  r->pruned_divisibility = g.sp.pruned_divisibility;
  if (st == PSIM_OK)
    st = run_grid(&g);
  r->pruned = r->pruned_divisibility + r->pruned_memory_estimate + r->pruned_memory_implied +
              r->pruned_dominated + r->pruned_bound + r->pruned_zero_lower;
  r->wall_s = psim_clock_now_s() - g.t0;
  show(&g, true);
  if (o->progress)
    fprintf(o->progress, "\n");
  psim_grid_space_destroy(&g.sp);
  PSIM_CHECK(st);
  return finish(m, c, r);
}

static void describe(const psim_grid_result *g, char *out, size_t size) {
  const psim_megatron_opts *b = &g->best;
  int n = snprintf(out, size, "Megatron tp %d, pp %d, dp %d", b->tp, b->pp, b->dp);
  if (b->cp > 1)
    n += snprintf(out + n, size - (size_t)n, ", cp %d", b->cp);
  if (b->ep > 1 || b->etp > 0)
    n += snprintf(out + n, size - (size_t)n, ", ep %d, etp %d", b->ep > 0 ? b->ep : 1,
                  b->etp > 0 ? b->etp : b->tp);
  if (b->virtual_stages > 1)
    n += snprintf(out + n, size - (size_t)n, ", %d virtual stages", b->virtual_stages);
  n += snprintf(out + n, size - (size_t)n, ", micro-batch %d, recompute %s", b->micro_batch,
                psim_recompute_name(b->recompute));
  if (b->recompute == PSIM_RECOMPUTE_FULL && b->recompute_method == PSIM_RCM_BLOCK)
    n += snprintf(out + n, size - (size_t)n, " (block: %d layers of each chunk)",
                  (int)b->recompute_layers);
  if (b->recompute == PSIM_RECOMPUTE_FULL && b->recompute_every > 1)
    n += snprintf(out + n, size - (size_t)n, " (one layer in %d)", (int)b->recompute_every);
  n += snprintf(out + n, size - (size_t)n, "%s", b->sequence_parallel ? ", sequence parallel" : "");
  if (b->fp8 == PSIM_FP8_ON)
    n += snprintf(out + n, size - (size_t)n, ", FP8 linears");
  if (b->async_tp != PSIM_ASYNC_TP_STACK)
    n += snprintf(out + n, size - (size_t)n, ", async TP %s",
                  b->async_tp == PSIM_ASYNC_TP_ON ? "on" : "off");
  if (b->pp > 1 && b->schedule != psim_schedule_default(b->virtual_stages) &&
      (b->schedule != PSIM_SCHED_1F1B || b->virtual_stages == 1)) /* 1f1b: the default too */
    n += snprintf(out + n, size - (size_t)n, ", %s schedule", psim_schedule_name(b->schedule));
  if (b->overlap_grad_reduce && b->zero_stage != 3) /* FSDP says so below */
    n += snprintf(out + n, size - (size_t)n, ", gradient reduce overlapped");
  if (b->overlap_param_gather && psim_zero_gathers_after_step(b->zero_stage))
    n += snprintf(out + n, size - (size_t)n, ", parameter gather overlapped");
  if (b->zero_stage == 1)
    snprintf(out + n, size - (size_t)n, ", distributed optimizer");
  else if (b->zero_stage == 3 && b->overlap_grad_reduce && b->dp_shard > 0)
    snprintf(out + n, size - (size_t)n, ", HSDP (ZeRO-3 over %d ranks, %d replicas, overlapped)",
             b->dp_shard, b->dp / b->dp_shard);
  else if (b->zero_stage == 3 && b->overlap_grad_reduce)
    snprintf(out + n, size - (size_t)n, ", FSDP (ZeRO-3, overlapped)");
  else if (b->zero_stage > 1)
    snprintf(out + n, size - (size_t)n, ", ZeRO-%d", b->zero_stage);
}

/* search.stats: the candidates, what pruned them, how many were simulated. */
static psim_status stats_json(const psim_grid_result *g, psim_search_result *r) {
  cJSON *s = cJSON_CreateObject();
  if (!s)
    return psim_error(PSIM_ENOMEM, "out of memory (stats)");
  r->stats = s;
  const char *names[] = {"candidates",
                         "pruned",
                         "pruned_divisibility",
                         "pruned_memory_estimate",
                         "pruned_memory_implied",
                         "pruned_dominated",
                         "pruned_bound",
                         "pruned_zero_lower",
                         "simulated",
                         "feasible",
                         "refused",
                         "visited"};
  int64_t v[] = {g->total,
                 g->pruned,
                 g->pruned_divisibility,
                 g->pruned_memory_estimate,
                 g->pruned_memory_implied,
                 g->pruned_dominated,
                 g->pruned_bound,
                 g->pruned_zero_lower,
                 g->evaluations,
                 g->feasible,
                 g->refused,
                 g->visited};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    PSIM_CHECK(psim_json_add_number(s, names[i], (double)v[i]));
  if (g->hsdp > 0) /* the FSDP space's HSDP candidates (other plans' stats as they were) */
    PSIM_CHECK(psim_json_add_number(s, "candidates_hsdp", (double)g->hsdp));
  return PSIM_OK;
}

psim_status psim_search_grid(const psim_model *m, psim_cluster *c, const psim_search_options *o,
                             psim_search_result *r) {
  psim_grid_options go;
  psim_grid_options_init(&go);
  go.sim = o->sim;
  go.progress = o->progress;
  go.budget_s = o->budget_s;
  go.try_fp8 = o->fp8;
  if (o->budget_evals > 0)
    go.max_evaluations = o->budget_evals;
  const char *stack = psim_stack_name(&c->stack);
  if (strcmp(stack, "pytorch-fsdp2") == 0 || strcmp(stack, "llm-foundry-fsdp") == 0)
    go.space = PSIM_GRID_FSDP; /* docs/stacks.md: FSDP stacks run torchtitan's knobs */
  psim_grid_result g;
  psim_status st = psim_grid_search(m, c, &go, &g);
  if (st == PSIM_OK)
    st = psim_strategy_megatron(m, c, &g.best, &r->best);
  if (st == PSIM_OK) {
    r->found = true;
    r->best_sim = g.best_sim; /* moved */
    psim_sim_result_init(&g.best_sim);
    r->evaluations = g.evaluations;
    r->wall_s = g.wall_s;
    describe(&g, r->description, sizeof r->description);
    st = stats_json(&g, r);
    if (g.stopped_by_time) {
      size_t used = strlen(r->description);
      snprintf(r->description + used, sizeof r->description - used,
               " (time budget: %lld of %lld configurations)",
               (long long)(g.visited + g.pruned_divisibility), (long long)g.total);
    }
    for (int32_t i = 0; i < g.n_curve && st == PSIM_OK; i++)
      st = psim_search_record(r, g.curve[i].evaluation, g.curve[i].wall_s, g.curve[i].best_time_s);
  }
  psim_grid_result_destroy(&g);
  return st;
}
