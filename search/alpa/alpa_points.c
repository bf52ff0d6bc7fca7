/* alpa_points.c - the Alpa optimizer's ILP points: one (layer class,
 * logical mesh, micro-batch size, memory level) solved once and memoised,
 * with --fix's fixed variables, on worker threads when --threads > 1. */
#define _POSIX_C_SOURCE 200809L
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "search/alpa/alpa_search_impl.h"
#include "sim/core/alloc.h"

/* ILP levels: see LEVELS. */
static const double LEVEL_MEM_WEIGHT[LEVELS] = {0, 1, 100};

/* ---- ILPs ---- */

alpa_point *psim_alpa_memo_at(alpa *A, int32_t cls, int32_t mesh, int32_t mb, int level) {
  assert(cls >= 0 && cls < A->n_classes && mesh >= 0 && mesh < A->n_meshes);
  assert(mb >= 0 && mb < A->n_mbs && level >= 0 && level < LEVELS);
  return &A->memo[(((size_t)cls * (size_t)A->n_meshes + (size_t)mesh) * (size_t)A->n_mbs +
                   (size_t)mb) *
                      LEVELS +
                  (size_t)level];
}

/* Whether strategy k of op i's group keeps the op's fixed degrees deg and
 * layout dims want. */
static bool strat_keeps(const alpa *A, psim_sh_layer *L, const psim_sh_mesh *mesh, int64_t mb,
                        int32_t *choice, int32_t i, const int32_t *deg, const int32_t want[2]) {
  psim_sh_strat s = psim_sh_op_strat(L, mesh, mb, choice, i);
  bool ok = true;
  for (int32_t d = 0; d < A->m->ops[L->ops[i]].n_dims; d++) {
    int32_t have = (s.dim[0] == d ? mesh->shape[0] : 1) * (s.dim[1] == d ? mesh->shape[1] : 1);
    ok = ok && (deg[d] == 0 || deg[d] == have);
  }
  for (int a = 0; a < 2; a++)
    ok = ok && (want[a] < 0 || s.dim[a] == want[a]);
  return ok;
}

/* Marks the strategies of op i's group that break a --fix entry; blames the
 * entries the op matches when none is left. hit: scratch, one byte per entry. */
static psim_status fix_op(alpa *A, psim_sh_layer *L, const psim_sh_mesh *mesh, int64_t mb,
                          int32_t *choice, int32_t i, uint8_t *hit) {
  int32_t n_entries = psim_alpa_fix_entries(&A->fix), deg[PSIM_MAX_OP_DIMS], g = L->group_of[i];
  assert(g >= 0 && g < L->n_groups);
  memset(hit, 0, (size_t)n_entries);
  PSIM_CHECK(psim_alpa_fix_degrees(&A->fix, A->m, L->ops[i], deg, hit));
  int32_t want[2] = {psim_alpa_fix_layout_dim(&A->fix, A->m, L->ops[i], 0, hit),
                     psim_alpa_fix_layout_dim(&A->fix, A->m, L->ops[i], 1, hit)};
  bool any = false;
  for (int32_t k = 0; k < L->n_strats[g]; k++) {
    choice[g] = k;
    if (!strat_keeps(A, L, mesh, mb, choice, i, deg, want))
      L->allowed[g][k] = 0;
    any = any || L->allowed[g][k];
  }
  if (any)
    return PSIM_OK;
  alpa_lock(A);
  for (int32_t e = 0; e < n_entries; e++)
    if (hit[e]) {
      A->blame[e] = 1;
      A->blamed = true;
    }
  alpa_unlock(A);
  return PSIM_OK;
}

/* Fixed variables of --fix: strategies of each group that break an entry. */
static psim_status apply_fix(alpa *A, psim_sh_layer *L, const psim_sh_mesh *mesh, int64_t mb) {
  int32_t n_entries = psim_alpa_fix_entries(&A->fix);
  int32_t *choice = psim_calloc((size_t)L->n_groups, sizeof *choice);
  uint8_t *hit = psim_calloc((size_t)(n_entries > 0 ? n_entries : 1), 1);
  psim_status st = choice && hit ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory (--fix)");
  for (int32_t i = 0; st == PSIM_OK && i < L->n_ops; i++)
    st = fix_op(A, L, mesh, mb, choice, i, hit);
  psim_free(choice);
  psim_free(hit);
  return st;
}

static int32_t *warm_start(const psim_sh_layer *L, const psim_model *m) {
  int32_t *w = psim_calloc((size_t)L->n_groups, sizeof *w);
  int32_t b = m->role_dim[PSIM_ROLE_BATCH];
  for (int32_t g = 0; w && g < L->n_groups; g++) {
    const psim_op *op = &m->ops[L->ops[L->root[g]]];
    w[g] = -1;
    for (int32_t k = 0; k < L->n_strats[g] && w[g] < 0; k++) {
      psim_sh_strat s = L->strats[g][k];
      bool dp = (s.dim[0] < 0 || op->dims[s.dim[0]].dim == b) && s.dim[1] < 0;
      if (dp && L->allowed[g][k])
        w[g] = k;
    }
    if (w[g] < 0) {
      psim_free(w);
      return NULL;
    }
  }
  return w;
}

/* Sums of the chosen strategies' costs; mem_weight: the ILP's s per byte,
 * taken back out of the edge costs to leave time. */
static void point_sums(alpa_point *pt, const psim_sh_layer *L, const psim_sh_mesh *mesh, int64_t mb,
                       double mem_weight, const int32_t *choice) {
  for (int32_t g = 0; g < L->n_groups; g++) {
    const psim_sh_cost *c = &L->costs[g][choice[g]];
    pt->fwd += c->fwd;
    pt->fwd_attn += c->fwd_attn;
    pt->time += c->fwd + c->bwd + c->comm;
    pt->sync += c->sync;
    pt->sync_z1 += c->sync_z1;
    pt->wmem += c->wmem;
    pt->wmem_z1 += c->wmem_z1;
    pt->wmem_z2 += c->wmem_z2;
    pt->wmem_z3 += c->wmem_z3;
    pt->sync_z3 += c->sync_z3;
    pt->gather_z3 += c->gather_z3;
    pt->gbytes_z3 += c->gbytes_z3;
    pt->act += c->act;
    pt->act_sel += c->act_sel;
  }
  for (int32_t e = 0; e < L->n_edges; e++) {
    size_t at = (size_t)choice[L->edges[e].a] * (size_t)L->n_strats[L->edges[e].b] +
                (size_t)choice[L->edges[e].b];
    pt->act += L->edge_act[e].all[at];
    pt->act_sel += L->edge_act[e].sel[at];
    pt->time += L->edges[e].cost[at] - mem_weight * L->edge_act[e].all[at];
  }
  pt->act_full = psim_sh_input_bytes(L, mesh, mb, choice);
  for (int32_t g = 0; g < L->n_groups; g++)
    pt->seq_parallel = pt->seq_parallel || L->strats[g][choice[g]].rs >= 0;
  for (int32_t i = 0; i < L->n_ops; i++) {
    psim_sh_strat s = psim_sh_op_strat(L, mesh, mb, choice, i);
    pt->op_dim[i][0] = s.dim[0];
    pt->op_dim[i][1] = s.dim[1];
  }
}

static psim_status run_ilp(alpa *A, psim_sh_layer *L, alpa_point *pt, const psim_sh_mesh *mesh,
                           const psim_sh_params *sp) {
  int64_t mb = sp->micro_batch;
  psim_ilp_problem p;
  psim_sh_layer_problem(L, &p);
  p.mem_limit = A->mem_bytes; /* one layer and one micro-batch must fit */
  int32_t *warm = warm_start(L, A->m);
  p.warm = warm;
  psim_ilp_options io;
  psim_ilp_options_init(&io);
  psim_ilp_solution sol;
  psim_ilp_solution_init(&sol);
  psim_status st = psim_ilp_solve(&p, &io, &sol);
  alpa_lock(A);
  A->ilp_count++;
  A->ilp_s += sol.solve_s; /* summed over worker threads */
  if (st == PSIM_OK) {
    A->timeouts += !sol.optimal;
    A->max_gap = fmax(A->max_gap, sol.gap);
  }
  alpa_unlock(A);
  if (st == PSIM_OK) {
    pt->op_dim = psim_calloc((size_t)L->n_ops, sizeof *pt->op_dim);
    st = pt->op_dim ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory (ILP result)");
  }
  if (st == PSIM_OK) {
    point_sums(pt, L, mesh, mb, sp->mem_weight, sol.choice);
    pt->ok = true;
  } else if (st == PSIM_EFAILED) {
    psim_error_clear(); /* infeasible here; other meshes may do */
    st = PSIM_OK;
  }
  psim_free(warm);
  psim_ilp_solution_destroy(&sol);
  return st;
}

psim_status psim_alpa_mesh_of(alpa *A, int32_t mesh, const psim_sh_mesh **out) {
  alpa_mesh *me = &A->meshes[mesh];
  if (!me->sh) {
    me->sh = psim_malloc(sizeof *me->sh);
    if (!me->sh)
      return psim_error(PSIM_ENOMEM, "out of memory (mesh)");
    double t0 = psim_budget_thread_s();
    PSIM_CHECK(psim_sh_mesh_init(A->c, 0, me->a0, me->a1, me->sh));
    A->mesh_s += psim_budget_thread_s() - t0;
  }
  *out = me->sh;
  return PSIM_OK;
}

static psim_status solve_point(alpa *A, int32_t cls, int32_t mesh, int32_t mb, int level) {
  alpa_point *pt = psim_alpa_memo_at(A, cls, mesh, mb, level);
  pt->solved = true;
  const psim_sh_mesh *sh = NULL;
  PSIM_CHECK(psim_alpa_mesh_of(A, mesh, &sh));
  psim_sh_params p = {A->mbs[mb], (int32_t)(A->batch / A->mbs[mb]),
                      A->o->sim ? A->o->sim->costdb : NULL, 0};
  if (level > 0) { /* memory pressure: bytes weighed against level 0's time per byte */
    alpa_point *p0 = psim_alpa_memo_at(A, cls, mesh, mb, 0);
    if (!p0->ok || p0->wmem + p0->act <= 0)
      return PSIM_OK;
    p.mem_weight = LEVEL_MEM_WEIGHT[level] * p0->time / (p0->wmem + p0->act);
  }
  psim_sh_layer L;
  psim_status st = psim_sh_layer_build(A->m, A->c, A->class_layer[cls], sh, &p, &L);
  if (st == PSIM_OK && A->fix.active)
    st = apply_fix(A, &L, sh, A->mbs[mb]);
  if (st == PSIM_OK)
    st = run_ilp(A, &L, pt, sh, &p);
  psim_sh_layer_destroy(&L);
  return st;
}

/* The memoised point: the same ILP is never solved twice. */
psim_status psim_alpa_point(alpa *A, int32_t cls, int32_t mesh, int32_t mb, int level,
                            const alpa_point **out) {
  alpa_point *pt = psim_alpa_memo_at(A, cls, mesh, mb, level);
  A->memo_lookups++;
  if (pt->solved)
    A->memo_hits++;
  else
    PSIM_CHECK(solve_point(A, cls, mesh, mb, level));
  *out = pt;
  return PSIM_OK;
}

/* ---- ILPs on worker threads (--threads) ----
 *
 * With threads > 1, the ILPs a stage size will need are solved up front, one
 * level at a time, by a pool of threads: the same points the stage DP would
 * solve on demand (level 0 for every mesh and layer class; a higher level
 * where the level below would not fit a stage with the recomputation mode
 * that keeps the most activations), so the DP then finds them all in the
 * memo. Each point is one independent GLPK problem (GLPK's environment is
 * per thread; ilp.c's fences are thread-local), and its result does not
 * depend on which thread solves it or when: plans are the same for any
 * thread count. */

typedef struct ilp_pool {
  alpa *A;
  const psim_alpa_ilp_job *jobs;
  int32_t n, next;
  psim_status st; /* first failure */
  char err[512];
  pthread_mutex_t mu;
} ilp_pool;

static void *ilp_worker(void *arg) {
  ilp_pool *P = arg;
  for (;;) {
    pthread_mutex_lock(&P->mu);
    int32_t k = P->st == PSIM_OK && !psim_interrupted() ? P->next++ : P->n;
    pthread_mutex_unlock(&P->mu);
    if (k >= P->n)
      break;
    const psim_alpa_ilp_job *j = &P->jobs[k];
    psim_status st = solve_point(P->A, j->cls, j->mesh, j->mb, j->level);
    if (st != PSIM_OK) {
      pthread_mutex_lock(&P->mu);
      if (P->st == PSIM_OK) {
        P->st = st;
        snprintf(P->err, sizeof P->err, "%s", psim_error_message());
      }
      pthread_mutex_unlock(&P->mu);
    }
  }
  psim_ilp_thread_exit();
  return NULL;
}

psim_status psim_alpa_solve_jobs(alpa *A, const psim_alpa_ilp_job *jobs, int32_t n) {
  ilp_pool P = {.A = A, .jobs = jobs, .n = n, .st = PSIM_OK};
  pthread_mutex_init(&P.mu, NULL);
  psim_budget_run_threads(A->o->threads < n ? A->o->threads : n, ilp_worker, &P);
  pthread_mutex_destroy(&P.mu);
  if (P.st != PSIM_OK)
    return psim_error(P.st, "%s", P.err);
  /* no thread started (or an interruption): what is left is solved on demand */
  return PSIM_OK;
}

/* Whether the stage DP for stages of n devices would ask for `level` of mesh
 * me at micro-batch size mb (need_lean's test, for the recomputation mode
 * searched that keeps the most activations). */
