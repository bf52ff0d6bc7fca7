/* mcmc.c - MCMC search over the SOAP space (FlexFlow, SysML'19, section 6). */
#define _POSIX_C_SOURCE 200809L
#include "search/mcmc/mcmc.h"
#include "search/budget.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/clock.h"
#include "sim/core/json.h"
#include "sim/delta.h"

void psim_mcmc_options_init(psim_mcmc_options *o) {
  memset(o, 0, sizeof *o);
  o->beta = 50;
  o->propagate_p = 0.3;
  o->restart_after = 0;
  o->verify_every = 0;
  o->exhaustive_limit = 2000000;
  psim_space_options_init(&o->space);
}

/* ---- chains ---------------------------------------------------------------- */

typedef struct shared {
  const psim_model *m;
  psim_cluster *c;
  const psim_search_options *o;
  const psim_mcmc_options *mo;
  const psim_space *sp;
  const psim_strategy *start;
  int32_t *movable; /* ops with more than one configuration */
  int32_t n_movable;
  int32_t **nbr; /* per op: neighbour ops (producers and consumers) */
  int32_t *n_nbr;
  double t0;       /* wall clock at the start, s (progress, curve) */
  double deadline; /* on the budget clock (search/budget.h), s; 0 = none */
  double left_s;   /* budget left when the chains start: each chain's, s of its thread's CPU */
  atomic_llong total_evals, total_accepted;
  atomic_int stop;
  pthread_mutex_t mu; /* guards best_shown */
  double best_shown;
} shared;

typedef struct chain {
  shared *sh;
  int32_t idx;
  uint64_t rng;
  int64_t budget; /* evaluations; INT64_MAX with a time budget */
  psim_strategy cur, best;
  double cur_t, best_t;
  bool found;
  psim_delta *delta;
  double deadline; /* on this chain's thread CPU clock (a budget per thread), s; 0 = none */
  double eval_s;   /* CPU seconds of this chain's evaluations (the start's included) */
  int64_t evals, accepted, restarts, over_memory, propagated, since_best, invalid;
  char first_invalid[256];  /* message of the first strategy the simulator refused */
  psim_search_point *curve; /* evaluation = chain-local count */
  size_t n_curve, cap_curve;
  psim_status status;
  char msg[512]; /* the chain thread's error message */
} chain;

static double rand_unit(uint64_t *rng) {
  return (double)(psim_space_rand(rng) >> 11) * (1.0 / 9007199254740992.0);
}

/* Copies neighbour nb's configuration (degrees matched by model dim, its
 * devices) into cfg when it is a configuration of op o's space. */
static bool propagate(const shared *sh, const psim_strategy *s, int32_t o, int32_t nb,
                      psim_op_config *cfg) {
  const psim_model *m = sh->m;
  const psim_op_config *src = &s->ops[nb];
  if (src->stage != s->ops[o].stage || src->replicas != 1)
    return false;
  psim_op_config want = *cfg;
  int32_t p = 1;
  for (int32_t i = 0; i < PSIM_MAX_OP_DIMS; i++)
    want.degree[i] = 1;
  for (int32_t i = 0; i < m->ops[o].n_dims; i++) {
    int32_t j = psim_op_dim_index(&m->ops[nb], m->ops[o].dims[i].dim);
    want.degree[i] = j >= 0 ? src->degree[j] : 1;
    p *= want.degree[i];
  }
  if (p != src->n_devices)
    return false;
  want.devices = src->devices;
  want.n_devices = src->n_devices;
  want.replicas = 1;
  if (!psim_space_allows(sh->sp, o, &want))
    return false;
  return psim_space_config_copy(&want, cfg) == PSIM_OK;
}

static bool config_equal(const psim_op_config *a, const psim_op_config *b) {
  return a->n_devices == b->n_devices && a->replicas == b->replicas &&
         memcmp(a->degree, b->degree, sizeof a->degree) == 0 &&
         (a->devices == b->devices ||
          memcmp(a->devices, b->devices, sizeof(int32_t) * (size_t)a->n_devices) == 0);
}

/* Proposes a new configuration for a random op into *out; returns the op. */
static psim_status propose(chain *ch, psim_op_config *out, int32_t *op) {
  shared *sh = ch->sh;
  int32_t o = sh->movable[psim_space_rand_below(&ch->rng, (uint64_t)sh->n_movable)];
  *op = o;
  PSIM_CHECK(psim_space_config_copy(&ch->cur.ops[o], out));
  if (sh->n_nbr[o] > 0 && rand_unit(&ch->rng) < sh->mo->propagate_p) {
    int32_t nb = sh->nbr[o][psim_space_rand_below(&ch->rng, (uint64_t)sh->n_nbr[o])];
    if (propagate(sh, &ch->cur, o, nb, out)) {
      ch->propagated++;
      return PSIM_OK;
    }
  }
  return psim_space_sample(sh->sp, o, &ch->rng, out);
}

static psim_status record_best(chain *ch, double t) {
  ch->best_t = t;
  ch->found = true;
  ch->since_best = 0;
  psim_strategy_destroy(&ch->best);
  psim_strategy_init(&ch->best);
  PSIM_CHECK(psim_strategy_copy(&ch->cur, &ch->best));
  PSIM_CHECK(PSIM_VEC_RESERVE(ch->curve, ch->cap_curve, ch->n_curve + 1));
  ch->curve[ch->n_curve++] = (psim_search_point){ch->evals, psim_clock_now_s() - ch->sh->t0, t};
  pthread_mutex_lock(&ch->sh->mu);
  if (t < ch->sh->best_shown)
    ch->sh->best_shown = t;
  pthread_mutex_unlock(&ch->sh->mu);
  return PSIM_OK;
}

/* Metropolis: min(1, exp(-beta (new - cur) / cur)). */
static bool accept(chain *ch, double t, bool fits) {
  if (!fits)
    return false;
  if (!ch->found || t <= ch->cur_t)
    return true;
  double p = exp(-ch->sh->mo->beta * (t - ch->cur_t) / ch->cur_t);
  return rand_unit(&ch->rng) < p;
}

static int64_t restart_after(const chain *ch) {
  if (ch->sh->mo->restart_after > 0)
    return ch->sh->mo->restart_after;
  int64_t r = ch->budget == INT64_MAX ? 5000 : ch->budget / 10;
  return r > 500 ? r : 500;
}

/* Back to the chain's best after a long run without improvement. */
static psim_status maybe_restart(chain *ch) {
  if (!ch->found || ch->since_best < restart_after(ch))
    return PSIM_OK;
  psim_strategy_destroy(&ch->cur);
  psim_strategy_init(&ch->cur);
  PSIM_CHECK(psim_strategy_copy(&ch->best, &ch->cur));
  ch->cur_t = ch->best_t;
  ch->since_best = 0;
  ch->restarts++;
  return PSIM_OK;
}

/* Seconds the next evaluation is expected to take: the mean of this chain's
 * evaluations so far, the start's full evaluation counted as one. */
static double next_eval_s(const chain *ch) {
  return ch->eval_s / (double)(ch->evals + 1);
}

/* Seconds left: to the deadline, or (evaluation budget) the mean evaluation
 * cost times the evaluations left; NaN when unknown. */
static double seconds_left(const chain *ch) {
  double by_evals =
      ch->budget == INT64_MAX ? INFINITY : next_eval_s(ch) * (double)(ch->budget - ch->evals);
  double by_time = ch->deadline > 0 ? fmax(0, ch->deadline - psim_budget_thread_s()) : INFINITY;
  double left = fmin(by_evals, by_time);
  return isfinite(left) ? left : NAN;
}

/* "\rmcmc: 45/100 evaluations (3.7/s), 12.3 s, ~15 s left, best ..., acceptance
 * ..." from chain 0, at most twice a second. */
static void progress(chain *ch, double *last) {
  shared *sh = ch->sh;
  double t = psim_clock_now_s();
  if (ch->idx != 0 || !sh->o->progress || t - *last < 0.5)
    return;
  *last = t;
  long long n = atomic_load(&sh->total_evals), a = atomic_load(&sh->total_accepted);
  pthread_mutex_lock(&sh->mu);
  double best = sh->best_shown;
  pthread_mutex_unlock(&sh->mu);
  char budget[48] = "";
  if (sh->o->budget_evals > 0)
    snprintf(budget, sizeof budget, "/%lld", (long long)sh->o->budget_evals);
  fprintf(sh->o->progress,
          "\rmcmc: %lld%s evaluations (%.1f/s), %.1f s, ~%.0f s left, best %.6g s, acceptance "
          "%.1f%%   ",
          n, budget, n / fmax(1e-9, t - sh->t0), t - sh->t0, seconds_left(ch), best,
          n ? 100.0 * (double)a / (double)n : 0.0);
  fflush(sh->o->progress);
}

/* Stops on the budget, on interruption, or (time budget) before an
 * evaluation that is expected to end past the deadline. */
static bool should_stop(const chain *ch) {
  const shared *sh = ch->sh;
  if (ch->evals >= ch->budget || atomic_load(&sh->stop) || psim_interrupted())
    return true;
  return ch->deadline > 0 && psim_budget_thread_s() + next_eval_s(ch) > ch->deadline;
}

/* Costs the current strategy. A strategy the simulator refuses (PSIM_EINPUT,
 * PSIM_ELIMIT: a task graph over the limit, a layout the builder cannot
 * express) is rejected like one over memory, and counted; the first message
 * goes to the statistics. Other failures (memory, a delta/full mismatch under
 * verify_every, interruption) stop the chain. */
static psim_status eval_or_reject(chain *ch, int32_t o, double *t, bool *fits) {
  double t0 = psim_budget_thread_s();
  psim_status st = psim_delta_eval(ch->delta, &ch->cur, o, t, fits);
  ch->eval_s += psim_budget_thread_s() - t0;
  if (st != PSIM_EINPUT && st != PSIM_ELIMIT)
    return st;
  if (!ch->invalid++)
    snprintf(ch->first_invalid, sizeof ch->first_invalid, "%s", psim_error_message());
  psim_error_clear();
  *fits = false;
  *t = INFINITY;
  return PSIM_OK;
}

/* One proposal: change, cost, accept or undo. */
static psim_status step(chain *ch, psim_op_config *prop, psim_op_config *saved) {
  int32_t o;
  PSIM_CHECK(propose(ch, prop, &o));
  PSIM_CHECK(psim_space_config_copy(&ch->cur.ops[o], saved));
  bool same = config_equal(prop, saved);
  PSIM_CHECK(psim_space_config_copy(prop, &ch->cur.ops[o]));
  double t = ch->cur_t;
  bool fits = true;
  if (!same)
    PSIM_CHECK(eval_or_reject(ch, o, &t, &fits));
  ch->evals++;
  ch->since_best++;
  atomic_fetch_add(&ch->sh->total_evals, 1);
  ch->over_memory += !fits && isfinite(t);
  if (accept(ch, t, fits)) {
    ch->cur_t = t;
    ch->accepted++;
    atomic_fetch_add(&ch->sh->total_accepted, 1);
    if (t < ch->best_t)
      PSIM_CHECK(record_best(ch, t));
    return PSIM_OK;
  }
  return psim_space_config_copy(saved, &ch->cur.ops[o]);
}

static psim_status chain_start(chain *ch) {
  shared *sh = ch->sh;
  psim_delta_options dopt;
  psim_delta_options_init(&dopt);
  dopt.sim = sh->o->sim;
  dopt.verify_every = sh->mo->verify_every;
  PSIM_CHECK(psim_delta_create(sh->m, sh->c, &dopt, &ch->delta));
  PSIM_CHECK(psim_strategy_copy(sh->start, &ch->cur));
  bool fits;
  double t0 = psim_budget_thread_s();
  PSIM_CHECK(psim_delta_eval(ch->delta, &ch->cur, -1, &ch->cur_t, &fits));
  ch->eval_s = psim_budget_thread_s() - t0;
  ch->best_t = INFINITY;
  if (fits)
    PSIM_CHECK(record_best(ch, ch->cur_t));
  else
    ch->cur_t = INFINITY; /* any strategy that fits is accepted */
  return PSIM_OK;
}

static psim_status chain_loop(chain *ch) {
  ch->deadline = ch->sh->deadline > 0 ? psim_budget_thread_s() + ch->sh->left_s : 0;
  psim_status st0 = chain_start(ch);
  if (st0 == PSIM_EINTERRUPTED) {
    psim_error_clear();
    return PSIM_OK;
  }
  PSIM_CHECK(st0);
  psim_op_config prop = {0}, saved = {0};
  psim_status st = PSIM_OK;
  double last = ch->sh->t0;
  while (st == PSIM_OK && ch->sh->n_movable > 0 && !should_stop(ch)) {
    st = step(ch, &prop, &saved);
    if (st == PSIM_OK)
      st = maybe_restart(ch);
    progress(ch, &last);
  }
  psim_op_config_destroy(&prop);
  psim_op_config_destroy(&saved);
  if (st == PSIM_EINTERRUPTED) {
    psim_error_clear();
    st = PSIM_OK;
  }
  return st;
}

static void *chain_main(void *arg) {
  chain *ch = arg;
  ch->status = chain_loop(ch);
  if (ch->status != PSIM_OK) {
    snprintf(ch->msg, sizeof ch->msg, "%s", psim_error_message());
    atomic_store(&ch->sh->stop, 1);
  }
  return NULL;
}

/* ---- graph neighbours -------------------------------------------------------- */

static psim_status add_nbr(shared *sh, int32_t a, int32_t b, size_t *cap) {
  for (int32_t k = 0; k < sh->n_nbr[a]; k++)
    if (sh->nbr[a][k] == b)
      return PSIM_OK;
  PSIM_CHECK(PSIM_VEC_RESERVE(sh->nbr[a], cap[a], (size_t)sh->n_nbr[a] + 1));
  sh->nbr[a][sh->n_nbr[a]++] = b;
  return PSIM_OK;
}

static psim_status neighbours(shared *sh) {
  const psim_model *m = sh->m;
  size_t *cap = psim_calloc((size_t)m->n_ops, sizeof *cap);
  sh->nbr = psim_calloc((size_t)m->n_ops, sizeof *sh->nbr);
  sh->n_nbr = psim_calloc((size_t)m->n_ops, sizeof *sh->n_nbr);
  sh->movable = psim_calloc((size_t)m->n_ops, sizeof *sh->movable);
  psim_status st = cap && sh->nbr && sh->n_nbr && sh->movable
                       ? PSIM_OK
                       : psim_error(PSIM_ENOMEM, "out of memory");
  for (int32_t y = 0; y < m->n_ops && st == PSIM_OK; y++) {
    for (int32_t i = 0; i < m->ops[y].n_in && st == PSIM_OK; i++) {
      int32_t x = m->tensors[m->ops[y].in[i]].producer;
      if (x >= 0)
        st = add_nbr(sh, x, y, cap);
      if (x >= 0 && st == PSIM_OK)
        st = add_nbr(sh, y, x, cap);
    }
    if (psim_space_op_count(sh->sp, y) > 1)
      sh->movable[sh->n_movable++] = y;
  }
  psim_free(cap);
  return st;
}

static void shared_destroy(shared *sh) {
  for (int32_t o = 0; sh->nbr && o < sh->m->n_ops; o++)
    psim_free(sh->nbr[o]);
  psim_free(sh->nbr);
  psim_free(sh->n_nbr);
  psim_free(sh->movable);
  pthread_mutex_destroy(&sh->mu);
}

/* ---- merge ------------------------------------------------------------------ */

static int cmp_point(const void *a, const void *b) {
  const psim_search_point *x = a, *y = b;
  return (x->evaluation > y->evaluation) - (x->evaluation < y->evaluation);
}

/* The best-so-far curve over all chains, evaluations counted as if the
 * chains had taken turns (chain-local k of chain c -> k * chains + c). */
static psim_status merge_curve(chain *chs, int32_t n, psim_search_result *r) {
  size_t total = 0;
  for (int32_t c = 0; c < n; c++)
    total += chs[c].n_curve;
  psim_search_point *all = psim_malloc(sizeof *all * (total ? total : 1));
  if (!all)
    return psim_error(PSIM_ENOMEM, "out of memory");
  size_t k = 0;
  for (int32_t c = 0; c < n; c++)
    for (size_t i = 0; i < chs[c].n_curve; i++) {
      all[k] = chs[c].curve[i];
      all[k++].evaluation = chs[c].curve[i].evaluation * n + c;
    }
  qsort(all, total, sizeof *all, cmp_point);
  double best = INFINITY;
  psim_status st = PSIM_OK;
  for (size_t i = 0; i < total && st == PSIM_OK; i++)
    if (all[i].best_time_s < best) {
      best = all[i].best_time_s;
      st = psim_search_record(r, all[i].evaluation, all[i].wall_s, best);
    }
  psim_free(all);
  return st;
}

static psim_status add_stats(chain *chs, int32_t n, const shared *sh, psim_search_result *r) {
  int64_t ev = 0, acc = 0, rs = 0, mem = 0, prop = 0, sim = 0, hits = 0, ver = 0;
  int64_t copied = 0, built = 0, tasks = 0;
  double eval_s = 0, engine_s = 0, verify_s = 0;
  for (int32_t c = 0; c < n; c++) {
    ev += chs[c].evals;
    acc += chs[c].accepted;
    rs += chs[c].restarts;
    mem += chs[c].over_memory;
    prop += chs[c].propagated;
    const psim_delta_stats *ds = psim_delta_get_stats(chs[c].delta);
    sim += ds->simulated;
    hits += ds->memo_hits;
    ver += ds->verified;
    eval_s += ds->eval_s;
    engine_s += ds->engine_s;
    verify_s += ds->verify_s;
    copied += ds->segments_copied;
    built += ds->segments_built;
    tasks += ds->tasks_simulated;
  }
  cJSON *s = cJSON_CreateObject();
  if (!s)
    return psim_error(PSIM_ENOMEM, "out of memory");
  r->stats = s;
  PSIM_CHECK(psim_json_add_number(s, "chains", n));
  PSIM_CHECK(psim_json_add_number(s, "beta", sh->mo->beta));
  PSIM_CHECK(psim_json_add_number(s, "space_log10_strategies", psim_space_log10_size(sh->sp)));
  PSIM_CHECK(psim_json_add_number(s, "proposals", (double)ev));
  PSIM_CHECK(psim_json_add_number(s, "accepted", (double)acc));
  PSIM_CHECK(psim_json_add_number(s, "acceptance_rate", ev ? (double)acc / (double)ev : 0));
  PSIM_CHECK(psim_json_add_number(s, "restarts", (double)rs));
  PSIM_CHECK(psim_json_add_number(s, "rejected_over_memory", (double)mem));
  PSIM_CHECK(psim_json_add_number(s, "propagations", (double)prop));
  int64_t inv = 0;
  const char *first = NULL;
  for (int32_t c = 0; c < n; c++) {
    inv += chs[c].invalid;
    if (!first && chs[c].invalid)
      first = chs[c].first_invalid;
  }
  PSIM_CHECK(psim_json_add_number(s, "rejected_invalid", (double)inv));
  if (first)
    PSIM_CHECK(psim_json_add_string(s, "first_invalid", first));
  PSIM_CHECK(psim_json_add_number(s, "delta_simulations", (double)sim));
  PSIM_CHECK(psim_json_add_number(s, "memo_hits", (double)hits));
  PSIM_CHECK(psim_json_add_number(s, "full_verifications", (double)ver));
  /* wall seconds summed over chains: costing proposals (memo hits, builds,
   * the engine), the engine's part, the verifying full simulations' */
  PSIM_CHECK(psim_json_add_number(s, "delta_wall_s", eval_s - verify_s));
  PSIM_CHECK(psim_json_add_number(s, "engine_wall_s", engine_s));
  PSIM_CHECK(psim_json_add_number(s, "verify_wall_s", verify_s));
  PSIM_CHECK(psim_json_add_number(s, "segments_copied", (double)copied));
  PSIM_CHECK(psim_json_add_number(s, "segments_built", (double)built));
  PSIM_CHECK(psim_json_add_number(s, "tasks_simulated", (double)tasks));
  return psim_json_add_number(s, "proposals_per_s", eval_s > 0 ? (double)ev / (r->wall_s) : 0);
}

/* Best over chains by (time, chain index): independent of thread timing. */
static int32_t best_chain(const chain *chs, int32_t n) {
  int32_t b = -1;
  for (int32_t c = 0; c < n; c++)
    if (chs[c].found && (b < 0 || chs[c].best_t < chs[b].best_t))
      b = c;
  return b;
}

/* The full simulation of the best (the plan's figures), even after SIGINT. */
static psim_status finish(const shared *sh, chain *chs, int32_t n, psim_search_result *r) {
  int32_t b = best_chain(chs, n);
  if (b < 0 && !psim_interrupted())
    return psim_error(PSIM_EFAILED, "mcmc: no strategy explored fits in memory");
  int was = psim_interrupted();
  psim_set_interrupt(0); /* the plan's full simulation runs even after SIGINT */
  psim_status st = psim_strategy_copy(b >= 0 ? &chs[b].best : sh->start, &r->best);
  if (st == PSIM_OK)
    st = psim_simulate(sh->m, sh->c, &r->best, sh->o->sim, &r->best_sim);
  psim_set_interrupt(was);
  PSIM_CHECK(st);
  r->found = true;
  for (int32_t c = 0; c < n; c++)
    r->evaluations += chs[c].evals;
  r->wall_s = psim_clock_now_s() - sh->t0;
  PSIM_CHECK(merge_curve(chs, n, r));
  PSIM_CHECK(add_stats(chs, n, sh, r));
  psim_mcmc_describe(sh->m, &r->best, "mcmc", r->description, sizeof r->description);
  return PSIM_OK;
}

static void chains_init(shared *sh, chain *chs, int32_t n) {
  const psim_search_options *o = sh->o;
  int64_t each = o->budget_evals / n, extra = o->budget_evals % n;
  for (int32_t c = 0; c < n; c++) {
    chs[c].sh = sh;
    chs[c].idx = c;
    chs[c].rng = o->seed * 0x9e3779b97f4a7c15ULL + (uint64_t)c * 0xd1b54a32d192ed03ULL + 1;
    chs[c].budget = o->budget_evals > 0 ? each + (c < extra) : INT64_MAX;
    psim_strategy_init(&chs[c].cur);
    psim_strategy_init(&chs[c].best);
  }
}

static void chains_destroy(chain *chs, int32_t n) {
  for (int32_t c = 0; c < n; c++) {
    psim_strategy_destroy(&chs[c].cur);
    psim_strategy_destroy(&chs[c].best);
    psim_delta_free(chs[c].delta);
    psim_free(chs[c].curve);
  }
}

static psim_status run_chains(shared *sh, chain *chs, int32_t n) {
  pthread_t *th = psim_calloc((size_t)n, sizeof *th);
  if (!th)
    return psim_error(PSIM_ENOMEM, "out of memory");
  int32_t started = 0;
  sh->left_s = sh->deadline > 0 ? fmax(0, sh->deadline - psim_budget_clock_s()) : 0;
  for (int32_t c = 1; c < n; c++)
    if (pthread_create(&th[c], NULL, chain_main, &chs[c]) == 0)
      started = c;
    else
      break;
  chain_main(&chs[0]);
  for (int32_t c = 1; c <= started; c++)
    pthread_join(th[c], NULL);
  psim_free(th);
  if (started != n - 1)
    return psim_error(PSIM_EFAILED, "mcmc: could not start %d threads", n);
  if (sh->o->progress)
    fprintf(sh->o->progress, "\n");
  for (int32_t c = 0; c < n; c++)
    if (chs[c].status != PSIM_OK)
      return psim_error(chs[c].status, "mcmc chain %d: %s", c, chs[c].msg);
  return PSIM_OK;
}

psim_status psim_mcmc_run(const psim_model *m, psim_cluster *c, const psim_search_options *o,
                          const psim_mcmc_options *mo, psim_search_result *r) {
  shared sh = {.m = m, .c = c, .o = o, .mo = mo, .t0 = psim_clock_now_s(), .best_shown = INFINITY};
  pthread_mutex_init(&sh.mu, NULL);
  double budget_s = o->budget_s > 0 ? o->budget_s : (o->budget_evals > 0 ? 0 : 60);
  sh.deadline = budget_s > 0 ? psim_budget_clock_s() + budget_s : 0;
  int32_t n = o->threads > 0 ? o->threads : 1;
  psim_strategy start;
  psim_space sp;
  psim_strategy_init(&start);
  memset(&sp, 0, sizeof sp);
  chain *chs = psim_calloc((size_t)n, sizeof *chs);
  psim_status st =
      chs ? psim_mcmc_start(m, c, o, mo, &start, &sp) : psim_error(PSIM_ENOMEM, "out of memory");
  sh.sp = &sp;
  sh.start = &start;
  if (st == PSIM_OK)
    st = neighbours(&sh);
  if (st == PSIM_OK) {
    chains_init(&sh, chs, n);
    st = run_chains(&sh, chs, n);
  }
  if (st == PSIM_OK)
    st = finish(&sh, chs, n, r);
  if (chs)
    chains_destroy(chs, n);
  psim_free(chs);
  shared_destroy(&sh);
  psim_space_destroy(&sp);
  psim_strategy_destroy(&start);
  return st;
}

psim_status psim_search_mcmc(const psim_model *m, psim_cluster *c, const psim_search_options *o,
                             psim_search_result *r) {
  psim_mcmc_options mo;
  psim_mcmc_options_init(&mo);
  mo.verify_every = o->verify_every;
  return psim_mcmc_run(m, c, o, &mo, r);
}
