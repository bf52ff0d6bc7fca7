/* grid.c - the Megatron grid baseline. */
#define _POSIX_C_SOURCE 200809L
#include "search/grid.h"
#include "search/search.h"

#include <math.h>
#include <string.h>
#include <time.h>

#include "sim/core/alloc.h"

void psim_grid_options_init(psim_grid_options *o) {
  memset(o, 0, sizeof *o);
  o->max_tp = 0;
  int32_t mbs[] = {1, 2, 4, 8};
  memcpy(o->micro_batches, mbs, sizeof mbs);
  o->n_micro_batches = 4;
  o->try_recompute = true;
  o->max_evaluations = 10000;
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

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct grid_state {
  const psim_model *m;
  psim_cluster *c;
  const psim_grid_options *o;
  psim_grid_result *r;
  double t0, last_shown;
  size_t cap_curve;
  int32_t max_tp;
  double last_s;    /* wall seconds of the last configuration simulated */
  bool static_over; /* the last configuration is over memory on static memory alone */
} grid_state;

/* The estimated seconds left: the mean cost of the configurations simulated
 * so far times those not yet visited, at most what the budget leaves. */
static double seconds_left(const grid_state *g, double now) {
  const psim_grid_result *r = g->r;
  if (r->evaluations == 0)
    return NAN;
  double left = (now - g->t0) / (double)r->evaluations * (double)(r->total - g->r->visited);
  if (g->o->budget_s > 0 && left > g->t0 + g->o->budget_s - now)
    left = fmax(0, g->t0 + g->o->budget_s - now);
  return left;
}

/* "\rgrid: 12/288 configurations (40 pruned: over memory), 3.2 s, ~20 s left,
 * best ..." at most twice a second, and on every new best. */
static void show(grid_state *g, bool force) {
  double now = now_s();
  if (!g->o->progress || (!force && now - g->last_shown < 0.5))
    return;
  g->last_shown = now;
  const psim_grid_result *r = g->r;
  const psim_megatron_opts *b = &r->best;
  fprintf(g->o->progress,
          "\rgrid: %lld/%lld configurations (%lld pruned: over memory), %.1f s, ~%.0f s left",
          (long long)g->r->visited, (long long)r->total, (long long)r->pruned, now - g->t0,
          seconds_left(g, now));
  if (r->found)
    fprintf(g->o->progress, ", best %.4f s (tp %d pp %d dp %d mb %d %s)",
            r->best_sim.iteration_time_s, b->tp, b->pp, b->dp, b->micro_batch,
            psim_recompute_name(b->recompute));
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
      (psim_search_point){r->evaluations, now_s() - g->t0, sim->iteration_time_s};
  show(g, true);
  return PSIM_OK;
}

/* Weights, gradients and optimizer state of the peak device exceed its
 * memory: no micro-batch or recompute mode of this (tp, pp) can fit. */
static bool over_on_static(const psim_sim_result *sim) {
  const psim_mem_breakdown *b = &sim->memory;
  return !sim->fits && b->weights + b->gradients + b->optimizer > sim->capacity_bytes;
}

/* Evaluates one configuration; expansion failures (does not fit the model)
 * are skipped quietly, other failures propagate. */
static psim_status evaluate(grid_state *g, const psim_megatron_opts *mo) {
  psim_strategy s;
  psim_strategy_init(&s);
  psim_status st = psim_strategy_megatron(g->m, g->c, mo, &s);
  if (st == PSIM_EINPUT) {
    psim_strategy_destroy(&s);
    psim_error_clear();
    return PSIM_OK;
  }
  psim_sim_result sim;
  psim_sim_result_init(&sim);
  g->r->evaluations++;
  double t = now_s();
  if (st == PSIM_OK)
    st = psim_simulate(g->m, g->c, &s, g->o->sim, &sim);
  g->last_s = now_s() - t;
  psim_strategy_destroy(&s);
  show(g, false);
  if (st == PSIM_ELIMIT) {
    psim_error_clear();
    return PSIM_OK;
  }
  if (st != PSIM_OK)
    return st;
  if (!sim.fits) {
    g->static_over = over_on_static(&sim);
    psim_sim_result_destroy(&sim);
    return PSIM_OK;
  }
  return record(g, mo, &sim);
}

static int32_t divides_layers(const psim_model *m, int32_t pp) {
  return pp <= m->n_layers && m->n_layers % pp == 0;
}

/* The next (tp, pp) pair of the grid after *tp, *pp (start with pp = 0, tp
 * = 1): tp a power of two up to max_tp, pp dividing the layers, tp * pp
 * dividing the devices. False when there is none. */
static bool next_pair(const grid_state *g, int32_t *tp, int32_t *pp) {
  int32_t n = g->c->n_devices;
  for (; *tp <= g->max_tp && *tp <= n; *tp *= 2, *pp = 0)
    while (++*pp * *tp <= n)
      if (n % (*tp * *pp) == 0 && divides_layers(g->m, *pp))
        return true;
  return false;
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
  double now = now_s(), mean = (now - g->t0) / (double)r->evaluations;
  r->stopped_by_time = now + fmax(mean, g->last_s) > g->t0 + g->o->budget_s;
  return !r->stopped_by_time;
}

static const psim_recompute modes[] = {PSIM_RECOMPUTE_NONE, PSIM_RECOMPUTE_SELECTIVE,
                                       PSIM_RECOMPUTE_FULL};

/* Every micro-batch and recompute mode of one (tp, pp) pair. *more is false
 * once the grid must stop (budget, interruption). */
static psim_status visit_pair(grid_state *g, int32_t tp, int32_t pp, int n_modes, bool *more) {
  int64_t per_pair = (int64_t)g->o->n_micro_batches * n_modes, k = 0;
  g->static_over = false;
  for (int32_t i = 0; i < g->o->n_micro_batches; i++)
    for (int j = 0; j < n_modes; j++, k++) {
      if (g->static_over) {
        g->r->pruned += per_pair - k;
        g->r->visited += per_pair - k;
        return PSIM_OK;
      }
      if (!(*more = may_start(g)))
        return PSIM_OK;
      g->r->visited++;
      psim_megatron_opts mo;
      psim_megatron_opts_init(&mo);
      mo.tp = tp;
      mo.pp = pp;
      mo.dp = g->c->n_devices / (tp * pp);
      mo.micro_batch = g->o->micro_batches[i];
      mo.recompute = modes[j];
      mo.sequence_parallel = tp > 1 && modes[j] == PSIM_RECOMPUTE_SELECTIVE;
      psim_status es = evaluate(g, &mo);
      if (es == PSIM_EINTERRUPTED) /* issue 9: keep the best so far */
        return (*more = false), PSIM_OK;
      PSIM_CHECK(es);
    }
  return PSIM_OK;
}

psim_status psim_grid_search(const psim_model *m, psim_cluster *c, const psim_grid_options *o,
                             psim_grid_result *r) {
  psim_grid_result_init(r);
  if (m->role_dim[PSIM_ROLE_BATCH] < 0)
    return psim_error(PSIM_EINPUT, "%s: the grid search needs a dim with role 'batch'",
                      m->file ? m->file : m->name);
  grid_state g = {m, c, o, r, now_s(), 0, 0, 0, 0, false};
  g.max_tp = o->max_tp > 0 ? o->max_tp : (c->devices_per_node > 0 ? c->devices_per_node : 8);
  int n_modes = o->try_recompute ? 3 : 1;
  int32_t tp = 1, pp = 0;
  while (next_pair(&g, &tp, &pp))
    r->total += (int64_t)o->n_micro_batches * n_modes;
  bool more = true;
  psim_status st = PSIM_OK;
  for (tp = 1, pp = 0; more && st == PSIM_OK && next_pair(&g, &tp, &pp);)
    st = visit_pair(&g, tp, pp, n_modes, &more);
  r->wall_s = now_s() - g.t0;
  show(&g, true);
  if (o->progress)
    fprintf(o->progress, "\n");
  PSIM_CHECK(st);
  if (!r->found && psim_interrupted() && r->evaluations == 0)
    return psim_error(PSIM_EINTERRUPTED, "interrupted before a configuration was evaluated");
  if (!r->found && psim_interrupted()) /* issue 24: evaluated, none fits so far */
    return psim_error(PSIM_EINTERRUPTED,
                      "interrupted after %lld of %lld configurations were evaluated, none of "
                      "which fits %s",
                      (long long)r->evaluations, (long long)r->total, c->name);
  if (!r->found)
    return psim_error(PSIM_EFAILED, "no Megatron configuration of %s fits on %s (%lld evaluated%s)",
                      m->name, c->name, (long long)r->evaluations,
                      r->stopped_by_time ? ", stopped by the time budget" : "");
  return PSIM_OK;
}

psim_status psim_search_grid(const psim_model *m, psim_cluster *c, const psim_search_options *o,
                             psim_search_result *r) {
  psim_grid_options go;
  psim_grid_options_init(&go);
  go.sim = o->sim;
  go.progress = o->progress;
  go.budget_s = o->budget_s;
  if (o->budget_evals > 0)
    go.max_evaluations = o->budget_evals;
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
    snprintf(r->description, sizeof r->description,
             "Megatron tp %d, pp %d, dp %d, micro-batch %d, recompute %s%s", g.best.tp, g.best.pp,
             g.best.dp, g.best.micro_batch, psim_recompute_name(g.best.recompute),
             g.best.sequence_parallel ? ", sequence parallel" : "");
    if (g.stopped_by_time) {
      size_t used = strlen(r->description);
      snprintf(r->description + used, sizeof r->description - used,
               " (time budget: %lld of %lld configurations)", (long long)(g.visited),
               (long long)g.total);
    }
    for (int32_t i = 0; i < g.n_curve && st == PSIM_OK; i++)
      st = psim_search_record(r, g.curve[i].evaluation, g.curve[i].wall_s, g.curve[i].best_time_s);
  }
  psim_grid_result_destroy(&g);
  return st;
}
