/* grid.c - the Megatron grid baseline. */
#define _POSIX_C_SOURCE 200809L
#include "search/grid.h"
#include "search/search.h"

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
  double t0;
  size_t cap_curve;
} grid_state;

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
  if (g->o->progress)
    fprintf(g->o->progress, "\rgrid: %lld evaluated, best %.4f s (tp %d pp %d dp %d mb %d %s)   ",
            (long long)r->evaluations, sim->iteration_time_s, mo->tp, mo->pp, mo->dp,
            mo->micro_batch, psim_recompute_name(mo->recompute));
  return PSIM_OK;
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
  if (st == PSIM_OK)
    st = psim_simulate(g->m, g->c, &s, g->o->sim, &sim);
  psim_strategy_destroy(&s);
  if (st == PSIM_ELIMIT) {
    psim_error_clear();
    return PSIM_OK;
  }
  if (st != PSIM_OK)
    return st;
  if (!sim.fits) {
    psim_sim_result_destroy(&sim);
    return PSIM_OK;
  }
  return record(g, mo, &sim);
}

static int32_t divides_layers(const psim_model *m, int32_t pp) {
  return pp <= m->n_layers && m->n_layers % pp == 0;
}

psim_status psim_grid_search(const psim_model *m, psim_cluster *c, const psim_grid_options *o,
                             psim_grid_result *r) {
  psim_grid_result_init(r);
  if (m->role_dim[PSIM_ROLE_BATCH] < 0)
    return psim_error(PSIM_EINPUT, "%s: the grid search needs a dim with role 'batch'",
                      m->file ? m->file : m->name);
  grid_state g = {m, c, o, r, now_s(), 0};
  int32_t n = c->n_devices;
  int32_t max_tp = o->max_tp > 0 ? o->max_tp : (c->devices_per_node > 0 ? c->devices_per_node : 8);
  psim_recompute modes[] = {PSIM_RECOMPUTE_NONE, PSIM_RECOMPUTE_SELECTIVE, PSIM_RECOMPUTE_FULL};
  int n_modes = o->try_recompute ? 3 : 1;
  for (int32_t tp = 1; tp <= max_tp && tp <= n; tp *= 2)
    for (int32_t pp = 1; pp * tp <= n; pp++) {
      if (n % (tp * pp) != 0 || !divides_layers(m, pp))
        continue;
      for (int32_t i = 0; i < o->n_micro_batches; i++)
        for (int k = 0; k < n_modes; k++) {
          if (r->evaluations >= o->max_evaluations || psim_interrupted())
            goto done;
          psim_megatron_opts mo;
          psim_megatron_opts_init(&mo);
          mo.tp = tp;
          mo.pp = pp;
          mo.dp = n / (tp * pp);
          mo.micro_batch = o->micro_batches[i];
          mo.recompute = modes[k];
          mo.sequence_parallel = tp > 1 && modes[k] == PSIM_RECOMPUTE_SELECTIVE;
          psim_status es = evaluate(&g, &mo);
          if (es == PSIM_EINTERRUPTED) /* issue 9: keep the best so far */
            goto done;
          PSIM_CHECK(es);
        }
    }
done:
  r->wall_s = now_s() - g.t0;
  if (o->progress)
    fprintf(o->progress, "\n");
  if (!r->found && psim_interrupted())
    return psim_error(PSIM_EINTERRUPTED, "interrupted before a configuration was evaluated");
  if (!r->found)
    return psim_error(PSIM_EFAILED, "no Megatron configuration of %s fits on %s (%lld evaluated)",
                      m->name, c->name, (long long)r->evaluations);
  return PSIM_OK;
}

psim_status psim_search_grid(const psim_model *m, psim_cluster *c, const psim_search_options *o,
                             psim_search_result *r) {
  psim_grid_options go;
  psim_grid_options_init(&go);
  go.sim = o->sim;
  go.progress = o->progress;
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
    for (int32_t i = 0; i < g.n_curve && st == PSIM_OK; i++)
      st = psim_search_record(r, g.curve[i].evaluation, g.curve[i].wall_s, g.curve[i].best_time_s);
  }
  psim_grid_result_destroy(&g);
  return st;
}
