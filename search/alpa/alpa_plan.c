/* alpa_plan.c - the explicit strategy of an Alpa plan, and the best
 * candidates re-simulated by the full simulator. */
#define _POSIX_C_SOURCE 200809L
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "search/alpa/alpa_search_impl.h"
#include "sim/core/alloc.h"

/* ---- the explicit strategy ---- */

static psim_status op_config(alpa *A, const alpa_mesh *me, const int8_t dim[2], int32_t op,
                             const int32_t *devices, psim_op_config *cfg) {
  psim_mesh mesh;
  memset(&mesh, 0, sizeof mesh);
  mesh.n_axes = 2;
  snprintf(mesh.axis[0], PSIM_MESH_NAME, "x");
  snprintf(mesh.axis[1], PSIM_MESH_NAME, "y");
  mesh.size[0] = me->a0;
  mesh.size[1] = me->a1;
  for (int a = 0; a < 2; a++) {
    if (dim[a] < 0)
      continue;
    snprintf(mesh.layout_key[mesh.n_layout], PSIM_MESH_NAME, "%s",
             A->m->dims[A->m->ops[op].dims[dim[a]].dim].name);
    mesh.layout_axis[mesh.n_layout++] = a;
  }
  return psim_mesh_op_config(&mesh, A->m, op, devices, me->n, cfg);
}

static psim_status stage_ops(alpa *A, const alpa_cand *c, int32_t i, psim_strategy *s) {
  const psim_stage *st = &s->stages[i];
  const alpa_mesh *me = &A->meshes[c->ml[i] / LEVELS];
  int32_t local = 0, layer = -1;
  for (int32_t op = 0; op < A->m->n_ops; op++) {
    int32_t l = A->m->ops[op].layer;
    if (l < st->first_layer || l > st->last_layer)
      continue;
    local = l == layer ? local + 1 : 0;
    layer = l;
    const alpa_point *p =
        psim_alpa_memo_at(A, A->class_of[l], c->ml[i] / LEVELS, c->mb_id, c->ml[i] % LEVELS);
    PSIM_CHECK(op_config(A, me, p->op_dim[local], op, st->devices, &s->ops[op]));
    s->ops[op].stage = i;
    /* The flag only describes the plan (exporters pass --sequence-parallel);
     * the simulator follows the ops' sequence splits. */
    s->sequence_parallel = s->sequence_parallel || p->seq_parallel;
  }
  return PSIM_OK;
}

static psim_status build_strategy(alpa *A, const alpa_cand *c, psim_strategy *s) {
  assert(c->S >= 1 && (int64_t)c->S * c->n <= A->c->n_devices);
  psim_strategy_init(s);
  s->n_stages = c->S;
  s->virtual_stages = 1;
  s->n_micro = (int32_t)(A->batch / A->mbs[c->mb_id]);
  s->micro_batch = A->mbs[c->mb_id];
  s->schedule = PSIM_SCHED_1F1B;
  s->recompute = (psim_recompute)c->rc;
  s->zero_stage = c->zero;
  s->stages = psim_calloc((size_t)c->S, sizeof *s->stages);
  s->ops = psim_calloc((size_t)A->m->n_ops, sizeof *s->ops);
  if (!s->stages || !s->ops)
    return psim_error(PSIM_ENOMEM, "out of memory (alpa strategy)");
  s->n_ops = A->m->n_ops;
  for (int32_t i = 0; i < c->S; i++) {
    psim_stage *st = &s->stages[i];
    st->first_layer = i == 0 ? 0 : c->last[i - 1] + 1;
    st->last_layer = c->last[i];
    st->devices = psim_malloc((size_t)c->n * sizeof *st->devices);
    if (!st->devices)
      return psim_error(PSIM_ENOMEM, "out of memory (alpa strategy)");
    st->n_devices = c->n;
    for (int32_t d = 0; d < c->n; d++)
      st->devices[d] = i * c->n + d;
    PSIM_CHECK(stage_ops(A, c, i, s));
  }
  return psim_strategy_validate(s, A->m, A->c, "alpa");
}

static void describe(const alpa *A, const alpa_cand *c, psim_search_result *r) {
  const alpa_mesh *me = &A->meshes[c->ml[0] / LEVELS];
  snprintf(r->description, sizeof r->description,
           "Alpa: %d stage%s x %d devices (mesh %dx%d%s), %lld micro-batches of %lld, "
           "recompute %s%s%s",
           (int)c->S, c->S == 1 ? "" : "s", (int)c->n, (int)me->a0, (int)me->a1,
           c->S > 1 ? " first stage" : "", (long long)(A->batch / A->mbs[c->mb_id]),
           (long long)A->mbs[c->mb_id], psim_recompute_name((psim_recompute)c->rc),
           r->best.sequence_parallel ? ", sequence parallel" : "",
           c->zero ? ", distributed optimizer (ZeRO 1)" : "");
}

/* One candidate's explicit strategy and full simulation. */
typedef struct cand_eval {
  psim_strategy s;
  psim_sim_result sim;
  psim_status st;
  char err[512]; /* the failure's message (set on the thread that ran it) */
} cand_eval;

static void eval_candidate(alpa *A, int32_t i, cand_eval *ev) {
  psim_sim_result_init(&ev->sim);
  ev->st = build_strategy(A, &A->top[i], &ev->s);
  if (ev->st == PSIM_OK)
    ev->st = psim_simulate(A->m, A->c, &ev->s, A->o->sim, &ev->sim);
  if (ev->st != PSIM_OK)
    snprintf(ev->err, sizeof ev->err, "%s", psim_error_message());
  psim_error_clear();
}

typedef struct cand_pool {
  alpa *A;
  cand_eval *ev;
  int32_t next;
  pthread_mutex_t mu;
} cand_pool;

static void *cand_worker(void *arg) {
  cand_pool *P = arg;
  for (;;) {
    pthread_mutex_lock(&P->mu);
    int32_t i = P->next++;
    pthread_mutex_unlock(&P->mu);
    if (i >= P->A->n_top)
      return NULL;
    eval_candidate(P->A, i, &P->ev[i]);
  }
}

/* Every candidate simulated, on --threads threads (each simulation is
 * independent; the choice below runs in candidate order, so the plan does
 * not depend on the thread count). */
static void eval_candidates(alpa *A, cand_eval *ev) {
  cand_pool P = {.A = A, .ev = ev, .next = 0};
  int32_t want = A->o->threads < A->n_top ? A->o->threads : A->n_top;
  pthread_mutex_init(&P.mu, NULL);
  psim_alpa_run_workers(want > 1 ? want : 0, cand_worker, &P);
  pthread_mutex_destroy(&P.mu);
  for (int32_t i = P.next; i < A->n_top; i++) /* serial, or what no thread took */
    eval_candidate(A, i, &ev[i]);
}

psim_status psim_alpa_simulate_top(alpa *A, psim_search_result *r, double t0) {
  cand_eval ev[TOP_K];
  memset(ev, 0, sizeof ev);
  eval_candidates(A, ev);
  psim_status st = PSIM_OK;
  for (int32_t i = 0; i < A->n_top; i++) {
    r->evaluations++;
    bool better = ev[i].st == PSIM_OK && ev[i].sim.fits &&
                  (!r->found || ev[i].sim.iteration_time_s < r->best_sim.iteration_time_s);
    if (better && st == PSIM_OK) {
      psim_strategy_destroy(&r->best);
      psim_sim_result_destroy(&r->best_sim);
      r->best = ev[i].s;
      r->best_sim = ev[i].sim;
      r->found = true;
      describe(A, &A->top[i], r);
      st =
          psim_search_record(r, r->evaluations, psim_alpa_now_s() - t0, ev[i].sim.iteration_time_s);
    } else {
      psim_strategy_destroy(&ev[i].s);
      psim_sim_result_destroy(&ev[i].sim);
    }
    if (st == PSIM_OK && (ev[i].st == PSIM_ENOMEM || ev[i].st == PSIM_EINTERRUPTED))
      st = psim_error(ev[i].st, "%s", ev[i].err);
  }
  return st;
}
