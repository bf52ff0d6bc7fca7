/* exhaustive.c - every strategy of a tiny graph's SOAP space (ground truth).
 *
 * The space is the one MCMC searches (space.h) around the same start
 * strategy, so MCMC's result can be checked against the true optimum. The
 * strategies are enumerated in odometer order (the last movable op fastest),
 * so consecutive strategies differ in one op, as MCMC's proposals do; each is
 * costed by delta simulation. Ties keep the first strategy found. */
#define _POSIX_C_SOURCE 200809L
#include "search/mcmc/mcmc.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/clock.h"
#include "sim/core/json.h"
#include "sim/delta.h"

typedef struct exh {
  const psim_model *m;
  psim_cluster *c;
  const psim_search_options *o;
  psim_space sp;
  psim_strategy cur;
  int32_t *movable;
  int64_t *idx;
  int32_t n_movable;
  psim_delta *delta;
  double t0, best_t;
  int64_t evals, over_memory, invalid;
  psim_search_result *r;
} exh;

/* Number of strategies, or -1 when over limit (log10 in *log10_size). */
static int64_t space_size(const exh *e, int64_t limit, double *log10_size) {
  *log10_size = psim_space_log10_size(&e->sp);
  double n = 1;
  for (int32_t k = 0; k < e->n_movable; k++)
    n *= (double)psim_space_op_count(&e->sp, e->movable[k]);
  return n > (double)limit ? -1 : (int64_t)n;
}

static psim_status consider(exh *e, int32_t changed) {
  double t;
  bool fits;
  psim_status st = psim_delta_eval(e->delta, &e->cur, changed, &t, &fits);
  if (st == PSIM_EINPUT || st == PSIM_ELIMIT) { /* refused by the simulator: skipped */
    psim_error_clear();
    e->invalid++;
    e->evals++;
    return PSIM_OK;
  }
  PSIM_CHECK(st);
  e->evals++;
  e->over_memory += !fits;
  if (!fits || t >= e->best_t)
    return PSIM_OK;
  e->best_t = t;
  psim_strategy_destroy(&e->r->best);
  psim_strategy_init(&e->r->best);
  PSIM_CHECK(psim_strategy_copy(&e->cur, &e->r->best));
  e->r->found = true;
  return psim_search_record(e->r, e->evals, psim_clock_now_s() - e->t0, t);
}

/* Odometer: advances the last digit, carrying left; false when done. */
static psim_status advance(exh *e, bool *more, int32_t *changed) {
  for (int32_t k = e->n_movable - 1; k >= 0; k--) {
    int32_t o = e->movable[k];
    e->idx[k]++;
    bool wrap = e->idx[k] == psim_space_op_count(&e->sp, o);
    if (wrap)
      e->idx[k] = 0;
    PSIM_CHECK(psim_space_op_config(&e->sp, o, e->idx[k], &e->cur.ops[o]));
    *changed = o;
    if (!wrap) {
      *more = true;
      return PSIM_OK;
    }
  }
  *more = false;
  return PSIM_OK;
}

static psim_status enumerate(exh *e) {
  for (int32_t k = 0; k < e->n_movable; k++)
    PSIM_CHECK(psim_space_op_config(&e->sp, e->movable[k], 0, &e->cur.ops[e->movable[k]]));
  bool more = true;
  int32_t changed = -1;
  while (more) {
    psim_status st = consider(e, changed);
    if (st == PSIM_EINTERRUPTED || (st == PSIM_OK && psim_interrupted())) {
      psim_error_clear(); /* SIGINT, maybe inside a build: the best so far */
      return PSIM_OK;
    }
    PSIM_CHECK(st);
    PSIM_CHECK(advance(e, &more, &changed));
  }
  return PSIM_OK;
}

static psim_status prepare(exh *e, const psim_mcmc_options *mo) {
  PSIM_CHECK(psim_mcmc_start(e->m, e->c, e->o, mo, &e->cur, &e->sp));
  e->movable = psim_calloc((size_t)e->m->n_ops + 1, sizeof *e->movable);
  e->idx = psim_calloc((size_t)e->m->n_ops + 1, sizeof *e->idx);
  if (!e->movable || !e->idx)
    return psim_error(PSIM_ENOMEM, "out of memory");
  for (int32_t o = 0; o < e->m->n_ops; o++)
    if (psim_space_op_count(&e->sp, o) > 1)
      e->movable[e->n_movable++] = o;
  int64_t limit = e->o->budget_evals > 0 ? e->o->budget_evals : mo->exhaustive_limit;
  double l10;
  if (space_size(e, limit, &l10) < 0)
    return psim_error(
        PSIM_ELIMIT,
        "exhaustive search: the space holds about 10^%.1f strategies (%d ops, %d with "
        "a choice), over the limit of %lld; use --search mcmc",
        l10, e->m->n_ops, e->n_movable, (long long)limit);
  psim_delta_options dopt;
  psim_delta_options_init(&dopt);
  dopt.sim = e->o->sim;
  dopt.memo_entries = 0; /* every strategy is new */
  dopt.verify_every = mo->verify_every;
  return psim_delta_create(e->m, e->c, &dopt, &e->delta);
}

static psim_status result(exh *e) {
  psim_search_result *r = e->r;
  if (!r->found && psim_interrupted())
    return psim_error(PSIM_EINTERRUPTED,
                      "exhaustive search interrupted after %lld strategies, "
                      "before one that fits",
                      (long long)e->evals);
  if (!r->found)
    return psim_error(PSIM_EFAILED, "exhaustive search: no strategy fits in memory");
  int was = psim_interrupted();
  psim_set_interrupt(0);
  psim_status st = psim_simulate(e->m, e->c, &r->best, e->o->sim, &r->best_sim);
  psim_set_interrupt(was);
  PSIM_CHECK(st);
  r->evaluations = e->evals;
  r->wall_s = psim_clock_now_s() - e->t0;
  psim_mcmc_describe(e->m, &r->best, "exhaustive", r->description, sizeof r->description);
  cJSON *s = cJSON_CreateObject();
  if (!s)
    return psim_error(PSIM_ENOMEM, "out of memory");
  r->stats = s;
  PSIM_CHECK(psim_json_add_number(s, "strategies", (double)e->evals));
  PSIM_CHECK(psim_json_add_number(s, "rejected_over_memory", (double)e->over_memory));
  PSIM_CHECK(psim_json_add_number(s, "rejected_invalid", (double)e->invalid));
  return psim_json_add_number(s, "complete", psim_interrupted() ? 0 : 1);
}

psim_status psim_exhaustive_run(const psim_model *m, psim_cluster *c, const psim_search_options *o,
                                const psim_mcmc_options *mo, psim_search_result *r) {
  exh e = {.m = m, .c = c, .o = o, .r = r, .t0 = psim_clock_now_s(), .best_t = INFINITY};
  psim_strategy_init(&e.cur);
  psim_status st = prepare(&e, mo);
  if (st == PSIM_OK)
    st = enumerate(&e);
  if (st == PSIM_OK)
    st = result(&e);
  psim_delta_free(e.delta);
  psim_free(e.movable);
  psim_free(e.idx);
  psim_space_destroy(&e.sp);
  psim_strategy_destroy(&e.cur);
  return st;
}

psim_status psim_search_exhaustive(const psim_model *m, psim_cluster *c,
                                   const psim_search_options *o, psim_search_result *r) {
  psim_mcmc_options mo;
  psim_mcmc_options_init(&mo);
  mo.verify_every = o->verify_every;
  return psim_exhaustive_run(m, c, o, &mo, r);
}
