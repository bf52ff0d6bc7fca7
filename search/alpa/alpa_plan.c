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

/* The ops of stage (chunk) i, on the (mesh, level) ml of its physical stage. */
static psim_status stage_ops(alpa *A, const alpa_cand *c, int32_t i, int32_t ml, psim_strategy *s) {
  const psim_stage *st = &s->stages[i];
  const alpa_mesh *me = &A->meshes[ml / LEVELS];
  int32_t local = 0, layer = -1;
  for (int32_t op = 0; op < A->m->n_ops; op++) {
    int32_t l = A->m->ops[op].layer;
    if (l < st->first_layer || l > st->last_layer)
      continue;
    local = l == layer ? local + 1 : 0;
    layer = l;
    const alpa_point *p = psim_alpa_memo_at(A, A->class_of[l], ml / LEVELS, c->mb_id, ml % LEVELS);
    PSIM_CHECK(op_config(A, me, p->op_dim[local], op, st->devices, &s->ops[op]));
    s->ops[op].stage = i;
    /* The flag only describes the plan (exporters pass --sequence-parallel);
     * the simulator follows the ops' sequence splits. */
    s->sequence_parallel = s->sequence_parallel || p->seq_parallel;
  }
  return PSIM_OK;
}

/* First device of each stage: the stages in decreasing size (stable), one
 * block after another, so that every (1, 2^k) submesh sits aligned inside
 * a node and every whole-node submesh on whole nodes (Alpa, section 5.2:
 * the shapes cover the cluster); equal stages get blocks in order. */
static void place_stages(const alpa *A, const alpa_cand *c, int32_t *first) {
  int32_t next = 0;
  for (int32_t size = A->c->n_devices; size >= 1; size--)
    for (int32_t i = 0; i < c->S; i++)
      if (A->meshes[c->ml[i] / LEVELS].n == size) {
        first[i] = next;
        next += size;
      }
  assert(next <= A->c->n_devices);
}

/* Layers of chunk i: the DP's ranges, or with v virtual stages per stage
 * S v equal chunks in order, chunk i on physical stage i % S (Megatron-LM's
 * interleaved schedule). */
static void chunk_layers(const alpa *A, const alpa_cand *c, int32_t i, psim_stage *sg) {
  if (c->v == 1) {
    sg->first_layer = i == 0 ? 0 : c->last[i - 1] + 1;
    sg->last_layer = c->last[i];
    return;
  }
  int32_t per = A->m->n_layers / (c->S * c->v);
  sg->first_layer = i * per;
  sg->last_layer = (i + 1) * per - 1;
}

static psim_status build_stages(alpa *A, const alpa_cand *c, psim_strategy *s) {
  int32_t *first = psim_calloc((size_t)c->S, sizeof *first);
  if (!first)
    return psim_error(PSIM_ENOMEM, "out of memory (alpa strategy)");
  place_stages(A, c, first);
  psim_status st = PSIM_OK;
  for (int32_t i = 0; st == PSIM_OK && i < c->S * c->v; i++) {
    psim_stage *sg = &s->stages[i];
    int32_t phys = i % c->S, n = A->meshes[c->ml[phys] / LEVELS].n;
    chunk_layers(A, c, i, sg);
    sg->devices = psim_malloc((size_t)n * sizeof *sg->devices);
    if (!sg->devices) {
      st = psim_error(PSIM_ENOMEM, "out of memory (alpa strategy)");
      break;
    }
    sg->n_devices = n;
    for (int32_t d = 0; d < n; d++)
      sg->devices[d] = first[phys] + d;
    st = stage_ops(A, c, i, c->ml[phys], s);
  }
  psim_free(first);
  return st;
}

static psim_status build_strategy(alpa *A, const alpa_cand *c, psim_strategy *s) {
  assert(c->S >= 1 && c->S * c->v <= A->m->n_layers);
  psim_strategy_init(s);
  s->n_stages = c->S;
  s->virtual_stages = c->v;
  s->n_micro = (int32_t)(A->batch / A->mbs[c->mb_id]);
  s->micro_batch = A->mbs[c->mb_id];
  s->schedule = c->v > 1 ? PSIM_SCHED_INTERLEAVED : PSIM_SCHED_1F1B;
  s->recompute = (psim_recompute)c->rc;
  s->zero_stage = c->zero;
  s->stages = psim_calloc((size_t)(c->S * c->v), sizeof *s->stages);
  s->ops = psim_calloc((size_t)A->m->n_ops, sizeof *s->ops);
  if (!s->stages || !s->ops)
    return psim_error(PSIM_ENOMEM, "out of memory (alpa strategy)");
  s->n_ops = A->m->n_ops;
  PSIM_CHECK(build_stages(A, c, s));
  if (A->op_cluster) { /* the clusters as the layer override, for the caller's model */
    s->op_layer = psim_malloc((size_t)s->n_ops * sizeof *s->op_layer);
    if (!s->op_layer)
      return psim_error(PSIM_ENOMEM, "out of memory (alpa strategy)");
    memcpy(s->op_layer, A->op_cluster, (size_t)s->n_ops * sizeof *s->op_layer);
    s->n_op_layers = A->n_clusters;
  }
  return psim_strategy_validate(s, A->m0, A->c, "alpa");
}

/* Megatron-Core's rule for an interleaved schedule (NVIDIA/Megatron-LM
 * d98e8a64dd, Core 0.20.0, as search/grid_space.c reads it): pp > 1, the
 * layers divide by pp x v, the micro-batch count by pp. */
static bool interleavable(const alpa *A, const alpa_cand *c, int32_t v) {
  int64_t n_micro = A->batch / A->mbs[c->mb_id];
  return c->S > 1 && A->m->n_layers % (c->S * v) == 0 && n_micro % c->S == 0;
}

static bool same_cand(const alpa *A, const alpa_cand *a, const alpa_cand *b) {
  if (a->S != b->S || a->mb_id != b->mb_id || a->rc != b->rc || a->zero != b->zero)
    return false;
  (void)A;
  for (int32_t i = 0; i < a->S; i++)
    if (a->ml[i] != b->ml[i] || a->last[i] != b->last[i])
      return false;
  return true;
}

/* The next base of variants: the best estimate of pool 3 (one per
 * recomputation mode), then of pool 0; -1 when none is left. */
static int32_t next_base(const alpa *A, int32_t n_base, const bool *done) {
  for (int32_t pool = 3; pool >= 0; pool -= 3) {
    int32_t b = -1;
    for (int32_t i = 0; i < n_base; i++)
      if (!done[i] && A->top[i].pool == pool && (b < 0 || A->top[i].estimate < A->top[b].estimate))
        b = i;
    if (b >= 0)
      return b;
  }
  return -1;
}

static psim_status add_variant(alpa *A, int32_t b, int32_t v) {
  int32_t L = A->m->n_layers;
  assert(A->n_top < MAX_CANDS);
  alpa_cand *c = &A->top[A->n_top++];
  *c = A->top[b];
  c->pool = 2;
  c->v = v;
  c->last = psim_malloc((size_t)L * sizeof *c->last);
  c->ml = psim_malloc((size_t)L * sizeof *c->ml);
  if (!c->last || !c->ml)
    return psim_error(PSIM_ENOMEM, "out of memory (candidates)");
  memcpy(c->last, A->top[b].last, (size_t)L * sizeof *c->last);
  memcpy(c->ml, A->top[b].ml, (size_t)L * sizeof *c->ml);
  return PSIM_OK;
}

/* Drops the bases of pool 3 (they are simulated only as variants). */
static void drop_bases(alpa *A) {
  int32_t k = 0;
  for (int32_t i = 0; i < A->n_top; i++)
    if (A->top[i].pool == 3) {
      psim_free(A->top[i].last);
      psim_free(A->top[i].ml);
    } else {
      A->top[k++] = A->top[i];
    }
  A->n_top = k;
}

/* Interleaved variants of equal-stage plans: the best of each recomputation
 * mode first, then the best estimates, every valid v, at most TOP_VIRTUAL;
 * the simulator costs them like the others (the DP's objective does not
 * model the interleaved bubble nor its memory). */
psim_status psim_alpa_add_virtual(alpa *A) {
  int32_t n_base = A->n_top, added = 0;
  bool *done = psim_calloc((size_t)(n_base > 0 ? n_base : 1), sizeof *done);
  psim_status st = done ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory (candidates)");
  for (int32_t b; st == PSIM_OK && added < TOP_VIRTUAL && (b = next_base(A, n_base, done)) >= 0;) {
    done[b] = true;
    bool dup = false;
    for (int32_t i = 0; i < n_base; i++)
      dup = dup || (i != b && done[i] && same_cand(A, &A->top[i], &A->top[b]));
    for (int32_t v = 2; !dup && st == PSIM_OK && v <= A->m->n_layers && added < TOP_VIRTUAL; v++)
      if (interleavable(A, &A->top[b], v)) {
        st = add_variant(A, b, v);
        added++;
      }
  }
  psim_free(done);
  drop_bases(A);
  return st;
}

/* "S stages x n devices" or, for stages of different sizes, "S stages of
 * 16+8+...+16 devices". */
static void stage_sizes(const alpa *A, const alpa_cand *c, char *buf, size_t cap) {
  bool equal = true;
  for (int32_t i = 0; i < c->S; i++)
    equal = equal && A->meshes[c->ml[i] / LEVELS].n == A->meshes[c->ml[0] / LEVELS].n;
  if (equal) {
    snprintf(buf, cap, "%d stage%s x %d devices", (int)c->S, c->S == 1 ? "" : "s",
             (int)A->meshes[c->ml[0] / LEVELS].n);
    return;
  }
  size_t len = (size_t)snprintf(buf, cap, "%d stages of ", (int)c->S);
  for (int32_t i = 0; i < c->S && len < cap; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%d", i ? "+" : "",
                            (int)A->meshes[c->ml[i] / LEVELS].n);
  if (len < cap)
    snprintf(buf + len, cap - len, " devices");
}

static void describe(const alpa *A, const alpa_cand *c, psim_search_result *r) {
  const alpa_mesh *me = &A->meshes[c->ml[0] / LEVELS];
  char sizes[160], virt[32] = "", zero[48] = "";
  stage_sizes(A, c, sizes, sizeof sizes);
  if (c->v > 1)
    snprintf(virt, sizeof virt, ", %d virtual stages", (int)c->v);
  if (c->zero > 0)
    snprintf(zero, sizeof zero, c->zero < 3 ? ", distributed optimizer (ZeRO %d)" : ", ZeRO %d",
             (int)c->zero);
  int len = snprintf(r->description, sizeof r->description,
                     "Alpa: %s%s (mesh %dx%d%s), %lld micro-batches of %lld, "
                     "recompute %s%s%s",
                     sizes, virt, (int)me->a0, (int)me->a1, c->S > 1 ? " first stage" : "",
                     (long long)(A->batch / A->mbs[c->mb_id]), (long long)A->mbs[c->mb_id],
                     psim_recompute_name((psim_recompute)c->rc),
                     r->best.sequence_parallel ? ", sequence parallel" : "", zero);
  (void)len;
  assert(len > 0); /* a long list of stage sizes is cut at the buffer's end */
}

psim_status psim_alpa_cand_strategy(alpa *A, int32_t i, psim_strategy *s) {
  assert(i >= 0 && i < A->n_top);
  return build_strategy(A, &A->top[i], s);
}

/* One candidate's explicit strategy and full simulation. */
typedef struct cand_eval {
  psim_strategy s;
  psim_sim_result sim;
  psim_status st;
  bool simulated; /* false: skipped, the deadline would have passed (psim_alpa_simulate_top) */
  char err[512];  /* the failure's message (set on the thread that ran it) */
} cand_eval;

static void eval_candidate(alpa *A, int32_t i, cand_eval *ev) {
  psim_sim_result_init(&ev->sim);
  ev->simulated = true;
  ev->st = build_strategy(A, &A->top[i], &ev->s);
  if (ev->st == PSIM_OK)
    ev->st = psim_simulate(A->m0, A->c, &ev->s, A->o->sim, &ev->sim);
  if (ev->st != PSIM_OK)
    snprintf(ev->err, sizeof ev->err, "%s", psim_error_message());
  psim_error_clear();
}

typedef struct cand_pool {
  alpa *A;
  cand_eval *ev;
  int32_t order[MAX_CANDS]; /* candidates by estimate, the most promising first */
  int32_t next;
  double slowest_s; /* the slowest candidate simulation so far, s of its thread's CPU time */
  pthread_mutex_t mu;
} cand_pool;

/* The next candidate to simulate, -1 when none is left or (a deadline set) when the budget
 * left does not hold one more simulation as slow as the slowest so far; the first always runs.
 * The budget clock counts every simulating thread in full until the section ends
 * (search/budget.h), so with --threads the cut comes no later than on one thread. */
static int32_t next_cand(cand_pool *P) {
  alpa *A = P->A;
  if (P->next >= A->n_top)
    return -1;
  if (A->deadline_s > 0 && P->next > 0 && psim_budget_clock_s() + P->slowest_s > A->deadline_s) {
    A->n_skipped = A->n_top - P->next;
    P->next = A->n_top;
    return -1;
  }
  return P->order[P->next++];
}

static void *cand_worker(void *arg) {
  cand_pool *P = arg;
  for (;;) {
    pthread_mutex_lock(&P->mu);
    int32_t i = next_cand(P);
    pthread_mutex_unlock(&P->mu);
    if (i < 0)
      return NULL;
    double t = psim_budget_thread_s();
    eval_candidate(P->A, i, &P->ev[i]);
    t = psim_budget_thread_s() - t;
    pthread_mutex_lock(&P->mu);
    P->slowest_s = t > P->slowest_s ? t : P->slowest_s;
    pthread_mutex_unlock(&P->mu);
  }
}

/* Every candidate simulated, on --threads threads, the lowest estimates first (each
 * simulation is independent; the choice below runs in candidate order, so the plan does not
 * depend on the thread count). Under a deadline (auto's share of the plan's CPU budget),
 * the candidates left when the budget left would not hold another simulation are skipped.
 * The threads' section is charged its busiest thread (search/budget.h).
 * Returns the slowest simulation's CPU time, s. */
static double eval_candidates(alpa *A, cand_eval *ev) {
  cand_pool P = {.A = A, .ev = ev, .next = 0};
  for (int32_t i = 0; i < A->n_top; i++) { /* insertion sort: stable, at most MAX_CANDS */
    int32_t k = i;
    for (; k > 0 && A->top[P.order[k - 1]].estimate > A->top[i].estimate; k--)
      P.order[k] = P.order[k - 1];
    P.order[k] = i;
  }
  int32_t want = A->o->threads < A->n_top ? A->o->threads : A->n_top;
  pthread_mutex_init(&P.mu, NULL);
  psim_budget_run_threads(want > 1 ? want : 0, cand_worker, &P);
  cand_worker(&P); /* serial, or what no thread took */
  pthread_mutex_destroy(&P.mu);
  return P.slowest_s;
}

/* "(2 of 5 candidates simulated: ~9.8 s per simulation)" after the plan's description. */
static void note_skipped(const alpa *A, double slowest_s, psim_search_result *r) {
  size_t len = strlen(r->description);
  if (A->n_skipped > 0 && len < sizeof r->description)
    snprintf(r->description + len, sizeof r->description - len,
             " (%d of %d candidates simulated: ~%.2g s per simulation)",
             (int)(A->n_top - A->n_skipped), (int)A->n_top, slowest_s); /* CPU s */
}

/* What the final steps try on the chosen plan, in order (try_variant). */
typedef enum plan_variant {
  VARIANT_GRAD_OVERLAP, /* the gradient all-reduce overlapped with the backward pass
                         * (Megatron-Core --overlap-grad-reduce) */
  VARIANT_PARAM_GATHER, /* the distributed optimizer's parameter all-gathers overlapped with the
                         * next forward (--overlap-param-gather, which Megatron-LM accepts only
                         * with the former and ZeRO 1-2) */
  VARIANT_FP8,          /* FP8 linears (the strategy's "fp8"), under plan --fp8 where it applies */
} plan_variant;

static bool variant_applies(const alpa *A, const psim_strategy *s, plan_variant v) {
  switch (v) {
  case VARIANT_GRAD_OVERLAP: return !s->overlap_grad_reduce && !A->o->keep_overlap;
  case VARIANT_PARAM_GATHER:
    return s->overlap_grad_reduce && !s->overlap_param_gather && !A->o->keep_overlap &&
           psim_zero_gathers_after_step(s->zero_stage);
  case VARIANT_FP8:
    return A->o->fp8 && s->fp8 != PSIM_FP8_ON && psim_strategy_fp8_applies(A->m0, A->c);
  }
  return false;
}

static void variant_set(psim_strategy *s, plan_variant v) {
  if (v == VARIANT_GRAD_OVERLAP)
    s->overlap_grad_reduce = true;
  else if (v == VARIANT_PARAM_GATHER)
    s->overlap_param_gather = true;
  else
    s->fp8 = PSIM_FP8_ON;
}

static const char *const variant_note[] = {", gradient reduce overlapped",
                                           ", parameter gathers overlapped", ", FP8 linears"};

/* The chosen plan again as variant v, kept where it is faster and fits: the stage DP's
 * estimates take neither overlap nor FP8, and in plansim none is a dominance rule (the grid
 * tries each both ways, search/grid_space.c). One simulation more, skipped when the deadline
 * would not hold one as slow as the slowest candidate's. */
static psim_status try_variant(alpa *A, psim_search_result *r, double slowest_s, double t0,
                               plan_variant v) {
  if (!r->found || !variant_applies(A, &r->best, v) ||
      (A->deadline_s > 0 && psim_budget_clock_s() + slowest_s > A->deadline_s))
    return PSIM_OK;
  cand_eval ev;
  memset(&ev, 0, sizeof ev);
  psim_sim_result_init(&ev.sim);
  PSIM_CHECK(psim_strategy_copy(&r->best, &ev.s));
  variant_set(&ev.s, v);
  ev.st = psim_simulate(A->m0, A->c, &ev.s, A->o->sim, &ev.sim);
  if (ev.st == PSIM_OK)
    r->evaluations++;
  bool better =
      ev.st == PSIM_OK && ev.sim.fits && ev.sim.iteration_time_s < r->best_sim.iteration_time_s;
  psim_status st = ev.st == PSIM_ENOMEM || ev.st == PSIM_EINTERRUPTED ? ev.st : PSIM_OK;
  if (ev.st != PSIM_OK && st == PSIM_OK)
    psim_error_clear(); /* a variant that cannot be simulated leaves the plan as it was */
  if (!better) {
    psim_strategy_destroy(&ev.s);
    psim_sim_result_destroy(&ev.sim);
    return st;
  }
  psim_strategy_destroy(&r->best);
  psim_sim_result_destroy(&r->best_sim);
  r->best = ev.s;
  r->best_sim = ev.sim;
  size_t len = strlen(r->description);
  if (len < sizeof r->description)
    snprintf(r->description + len, sizeof r->description - len, "%s", variant_note[v]);
  return psim_search_record(r, r->evaluations, psim_alpa_now_s() - t0, ev.sim.iteration_time_s);
}

psim_status psim_alpa_simulate_top(alpa *A, psim_search_result *r, double t0) {
  cand_eval ev[MAX_CANDS];
  drop_bases(A);
  memset(ev, 0, sizeof ev);
  double slowest_s = eval_candidates(A, ev);
  psim_status st = PSIM_OK;
  for (int32_t i = 0; i < A->n_top; i++) {
    if (!ev[i].simulated)
      continue;
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
  /* in order: Megatron-Core's --overlap-param-gather needs the reduce overlapped */
  for (int v = VARIANT_GRAD_OVERLAP; v <= VARIANT_FP8 && st == PSIM_OK; v++)
    st = try_variant(A, r, slowest_s, t0, (plan_variant)v);
  if (r->found)
    note_skipped(A, slowest_s, r);
  return st;
}
