/* alpa.c - the Alpa optimizer's driver (alpa.h): layer classes and the
 * memoised ILPs, the stage DP with the bound on the slowest stage enumerated
 * in increasing order, the micro-batch and recomputation search around it,
 * and the explicit strategy of the chosen plan, re-simulated. */
#define _POSIX_C_SOURCE 200809L
#include "search/alpa/alpa.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "search/alpa/alpa_fix.h"
#include "search/alpa/alpa_impl.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/engine/taskgraph.h"

#define TOP_K      5     /* DP plans re-simulated (the issue allows a handful) */
#define EPS_TMAX   0.002 /* Alpa's second pruning: relative step of the bound */
#define MEM_USE    1.0   /* share of device memory the DP plans for (workspace, fragmentation) */
#define MAX_MESHES 8
/* ILP levels per (layer class, mesh, micro-batch): 0 minimises time; 1 and 2
 * add memory to the objective at LEVEL_MEM_WEIGHT[level] times level 0's
 * time per byte, for stages that would not fit otherwise (2 is memory first,
 * time breaking ties: what a 1T model on 80 GB devices needs). */
#define LEVELS 3
static const double LEVEL_MEM_WEIGHT[LEVELS] = {0, 1, 100};
#define MAX_MBS 128 /* micro-batch sizes considered (divisors of the batch) */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ILP result of one (layer class, logical mesh, micro-batch size, level). */
typedef struct alpa_point {
  bool solved, ok;
  double time, fwd, fwd_attn, sync, wmem, act, act_sel, act_full;
  int8_t (*op_dim)[2]; /* per local op: op dim per axis */
  bool seq_parallel;   /* some partial sums are reduce-scattered along the sequence */
} alpa_point;

typedef struct alpa_mesh {
  int32_t n, a0, a1;
  psim_sh_mesh *sh; /* fitted lazily */
} alpa_mesh;

typedef struct alpa_cand {
  double estimate;
  int32_t n, S, mb_id, rc;
  int32_t *last; /* S entries: last layer of each stage */
  int32_t *ml;   /* S entries: mesh * LEVELS + level */
} alpa_cand;

typedef struct alpa {
  const psim_model *m;
  psim_cluster *c;
  const psim_search_options *o;
  psim_alpa_fix fix;
  int64_t batch;
  double mem_bytes;
  int32_t n_classes, *class_of, *class_layer; /* per layer; per class: its first layer */
  int32_t n_meshes;
  alpa_mesh meshes[64];
  int32_t n_mbs;
  int64_t mbs[MAX_MBS];
  alpa_point *memo; /* [class][mesh][mb][level] */
  uint64_t blame;   /* --fix entries that made some ILP infeasible */
  int64_t ilp_count, memo_lookups, memo_hits, timeouts;
  double ilp_s, dp_s, max_gap, mesh_s, sim_s;
  alpa_cand top[TOP_K];
  int32_t n_top;
  pthread_mutex_t mu; /* guards the counters and blame when ILPs run on worker threads */
} alpa;

static void alpa_lock(alpa *A) {
  pthread_mutex_lock(&A->mu);
}

static void alpa_unlock(alpa *A) {
  pthread_mutex_unlock(&A->mu);
}

/* ---- layer classes ---- */

static bool same_layer(const alpa *A, int32_t a, int32_t b, int32_t first_a, int32_t first_b,
                       int32_t n) {
  const psim_model *m = A->m;
  for (int32_t i = 0; i < n; i++) {
    const psim_op *x = &m->ops[first_a + i], *y = &m->ops[first_b + i];
    if (x->layer != a || y->layer != b || x->block < 0 || x->proto != y->proto)
      return false;
    int32_t dx[PSIM_MAX_OP_DIMS], dy[PSIM_MAX_OP_DIMS];
    uint64_t ex = 0, ey = 0;
    if (psim_alpa_fix_degrees(&A->fix, m, first_a + i, dx, &ex) != PSIM_OK ||
        psim_alpa_fix_degrees(&A->fix, m, first_b + i, dy, &ey) != PSIM_OK || ex != ey)
      return false;
  }
  return true;
}

static psim_status layer_classes(alpa *A) {
  const psim_model *m = A->m;
  int32_t L = m->n_layers, *first = psim_calloc((size_t)L, sizeof *first),
          *count = psim_calloc((size_t)L, sizeof *count);
  A->class_of = psim_calloc((size_t)L, sizeof *A->class_of);
  A->class_layer = psim_calloc((size_t)L, sizeof *A->class_layer);
  psim_status st = first && count && A->class_of && A->class_layer
                       ? PSIM_OK
                       : psim_error(PSIM_ENOMEM, "out of memory (layer classes)");
  for (int32_t i = m->n_ops - 1; st == PSIM_OK && i >= 0; i--) {
    first[m->ops[i].layer] = i;
    count[m->ops[i].layer]++;
  }
  for (int32_t l = 0; st == PSIM_OK && l < L; l++) {
    int32_t k = 0;
    for (; k < A->n_classes; k++) {
      int32_t r = A->class_layer[k];
      if (count[r] == count[l] && same_layer(A, r, l, first[r], first[l], count[l]))
        break;
    }
    if (k == A->n_classes)
      A->class_layer[A->n_classes++] = l;
    A->class_of[l] = k;
  }
  psim_free(first);
  psim_free(count);
  return st;
}

/* ---- candidate meshes and micro-batch sizes ---- */

static int32_t dev_per_node(const psim_cluster *c) {
  return c->devices_per_node > 0 ? c->devices_per_node : c->n_devices;
}

static void add_meshes(alpa *A, int32_t n) {
  int32_t dpn = dev_per_node(A->c);
  for (int32_t a1 = 1; a1 <= n && a1 <= dpn && A->n_meshes < 64; a1 *= 2) {
    if (n % a1 != 0 || n / a1 > PSIM_SH_MAX_AXIS)
      continue;
    if (A->fix.has_mesh && (A->fix.mesh[0] != n / a1 || A->fix.mesh[1] != a1))
      continue;
    A->meshes[A->n_meshes++] = (alpa_mesh){n, n / a1, a1, NULL};
  }
}

/* Stage sizes: (1, 2^k) in a node, (k, devices per node) across nodes,
 * dividing the cluster into at most n_layers stages. */
static void enumerate_meshes(alpa *A) {
  int32_t N = A->c->n_devices, dpn = dev_per_node(A->c);
  for (int32_t n = 1; n <= N; n++) {
    bool shape = (n <= dpn && (n & (n - 1)) == 0) || (n % dpn == 0);
    if (!shape || N % n != 0 || N / n > A->m->n_layers)
      continue;
    if (A->fix.n_stages > 0 && N / n != A->fix.n_stages)
      continue;
    add_meshes(A, n);
  }
}

static void enumerate_mbs(alpa *A) {
  A->n_mbs = 0; /* every divisor of the batch (mb_wanted picks per mesh) */
  for (int64_t mb = 1; mb <= A->batch && A->n_mbs < MAX_MBS; mb++)
    if (A->batch % mb == 0)
      A->mbs[A->n_mbs++] = mb;
  if (A->mbs[A->n_mbs - 1] != A->batch)
    A->mbs[A->n_mbs - 1] = A->batch;
}

/* Micro-batch sizes worth trying on mesh mesh: the data-parallel axis times
 * 1..8 samples per rank (the grid's range), and the whole mesh times 1, 2. */
static bool mb_wanted(const alpa *A, const alpa_mesh *me, int64_t mb) {
  if (A->fix.n_micro > 0)
    return A->batch / mb == A->fix.n_micro;
  for (int64_t k = 1; k <= 8; k *= 2)
    if (mb == k * me->a0)
      return true;
  if (mb == me->n || mb == 2 * me->n)
    return true;
  return mb == A->batch && mb < me->a0;
}

/* ---- ILPs ---- */

static alpa_point *memo_at(alpa *A, int32_t cls, int32_t mesh, int32_t mb, int level) {
  return &A->memo[(((size_t)cls * (size_t)A->n_meshes + (size_t)mesh) * (size_t)A->n_mbs +
                   (size_t)mb) *
                      LEVELS +
                  (size_t)level];
}

/* Fixed variables of --fix: strategies of group g that break an entry. */
static psim_status apply_fix(alpa *A, psim_sh_layer *L, const psim_sh_mesh *mesh, int64_t mb) {
  int32_t *choice = psim_calloc((size_t)L->n_groups, sizeof *choice);
  if (!choice)
    return psim_error(PSIM_ENOMEM, "out of memory (--fix)");
  for (int32_t i = 0; i < L->n_ops; i++) {
    int32_t deg[PSIM_MAX_OP_DIMS], g = L->group_of[i];
    uint64_t ent = 0;
    psim_status st = psim_alpa_fix_degrees(&A->fix, A->m, L->ops[i], deg, &ent);
    if (st != PSIM_OK) {
      psim_free(choice);
      return st;
    }
    int32_t want[2] = {psim_alpa_fix_layout_dim(&A->fix, A->m, L->ops[i], 0, &ent),
                       psim_alpa_fix_layout_dim(&A->fix, A->m, L->ops[i], 1, &ent)};
    bool any = false;
    for (int32_t k = 0; k < L->n_strats[g]; k++) {
      choice[g] = k;
      psim_sh_strat s = psim_sh_op_strat(L, mesh, mb, choice, i);
      bool ok = true;
      for (int32_t d = 0; d < A->m->ops[L->ops[i]].n_dims; d++) {
        int32_t have = (s.dim[0] == d ? mesh->shape[0] : 1) * (s.dim[1] == d ? mesh->shape[1] : 1);
        ok = ok && (deg[d] == 0 || deg[d] == have);
      }
      for (int a = 0; a < 2; a++)
        ok = ok && (want[a] < 0 || s.dim[a] == want[a]);
      if (!ok)
        L->allowed[g][k] = 0;
      any = any || L->allowed[g][k];
    }
    if (!any) {
      alpa_lock(A);
      A->blame |= ent;
      alpa_unlock(A);
    }
  }
  psim_free(choice);
  return PSIM_OK;
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
    pt->wmem += c->wmem;
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

static psim_status mesh_of(alpa *A, int32_t mesh, const psim_sh_mesh **out) {
  alpa_mesh *me = &A->meshes[mesh];
  if (!me->sh) {
    me->sh = psim_malloc(sizeof *me->sh);
    if (!me->sh)
      return psim_error(PSIM_ENOMEM, "out of memory (mesh)");
    double t0 = now_s();
    PSIM_CHECK(psim_sh_mesh_init(A->c, 0, me->a0, me->a1, me->sh));
    A->mesh_s += now_s() - t0;
  }
  *out = me->sh;
  return PSIM_OK;
}

static psim_status solve_point(alpa *A, int32_t cls, int32_t mesh, int32_t mb, int level) {
  alpa_point *pt = memo_at(A, cls, mesh, mb, level);
  pt->solved = true;
  const psim_sh_mesh *sh = NULL;
  PSIM_CHECK(mesh_of(A, mesh, &sh));
  psim_sh_params p = {A->mbs[mb], (int32_t)(A->batch / A->mbs[mb]),
                      A->o->sim ? A->o->sim->costdb : NULL, 0};
  if (level > 0) { /* memory pressure: bytes weighed against level 0's time per byte */
    alpa_point *p0 = memo_at(A, cls, mesh, mb, 0);
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
static psim_status point(alpa *A, int32_t cls, int32_t mesh, int32_t mb, int level,
                         const alpa_point **out) {
  alpa_point *pt = memo_at(A, cls, mesh, mb, level);
  A->memo_lookups++;
  if (pt->solved)
    A->memo_hits++;
  else
    PSIM_CHECK(solve_point(A, cls, mesh, mb, level));
  *out = pt;
  return PSIM_OK;
}

/* ---- stage DP ---- */

/* Per (mesh, level) prefix sums over layers for one (stage size, mb, rc). */
typedef struct dp_table {
  int32_t n_ml, ml[LEVELS * MAX_MESHES];
  double *t, *w, *a; /* [ml][L + 1] prefix sums: time per micro-batch, weights, activations */
  double amax[LEVELS * MAX_MESHES]; /* largest activations of one layer (full recomputation) */
} dp_table;

typedef struct dp_ctx {
  alpa *A;
  int32_t L, S, n, mb, rc, B;
  double *slow; /* per stage: its slowest device's time factor (stragglers, mixed types) */
  dp_table tab;
  double *G; /* [(S + 1) * (L + 1)] */
  int32_t *next, *pick;
} dp_ctx;

static double layer_time(const alpa_point *p, int rc, int32_t B) {
  double t = p->time + p->sync / B;
  return rc == PSIM_RECOMPUTE_FULL        ? t + p->fwd
         : rc == PSIM_RECOMPUTE_SELECTIVE ? t + p->fwd_attn
                                          : t;
}

static double layer_act(const alpa_point *p, int rc) {
  return rc == PSIM_RECOMPUTE_FULL        ? p->act_full
         : rc == PSIM_RECOMPUTE_SELECTIVE ? p->act_sel
                                          : p->act;
}

static psim_status fill_ml(dp_ctx *x, int32_t k, int32_t mesh, int level) {
  alpa *A = x->A;
  dp_table *T = &x->tab;
  size_t off = (size_t)k * (size_t)(x->L + 1);
  T->t[off] = T->w[off] = T->a[off] = 0;
  T->amax[k] = 0;
  for (int32_t l = 0; l < x->L; l++) {
    const alpa_point *p;
    PSIM_CHECK(point(A, A->class_of[l], mesh, x->mb, level, &p));
    if (!p->ok)
      return PSIM_EFAILED; /* this mesh cannot run the layer */
    T->t[off + l + 1] = T->t[off + l] + layer_time(p, x->rc, x->B);
    T->w[off + l + 1] = T->w[off + l] + p->wmem;
    T->a[off + l + 1] = T->a[off + l] + layer_act(p, x->rc);
    T->amax[k] = fmax(T->amax[k], p->act);
  }
  return PSIM_OK;
}

/* Whether a stage would not fit a device: L layers of weights w and
 * activations a in total (bytes), averaged per layer, over the L / S + 1
 * layers of a stage holding S micro-batches. */
static bool too_big(const alpa *A, double w, double a, int32_t L, int32_t S) {
  double per = (double)L / S + 1;
  return (w + S * a) * per / L > MEM_USE * A->mem_bytes;
}

/* Memory-lean ILPs (level > 0) only where the level before would not fit a stage. */
static bool need_lean(dp_ctx *x, int32_t k) {
  dp_table *T = &x->tab;
  size_t off = (size_t)k * (size_t)(x->L + 1);
  return too_big(x->A, T->w[off + x->L], T->a[off + x->L], x->L, x->S);
}

static psim_status build_table(dp_ctx *x) {
  alpa *A = x->A;
  dp_table *T = &x->tab;
  T->n_ml = 0;
  for (int32_t me = 0; me < A->n_meshes; me++) {
    if (A->meshes[me].n != x->n || !mb_wanted(A, &A->meshes[me], A->mbs[x->mb]))
      continue;
    for (int level = 0; level < LEVELS && T->n_ml < LEVELS * MAX_MESHES; level++) {
      if (level > 0 && !need_lean(x, T->n_ml - 1))
        break;
      psim_status st = fill_ml(x, T->n_ml, me, level);
      if (st == PSIM_EFAILED)
        break;
      PSIM_CHECK(st);
      T->ml[T->n_ml++] = me * LEVELS + level;
    }
  }
  return PSIM_OK;
}

/* Fastest (mesh, level) running layers k..j as a stage holding f micro-batches
 * of activations; INFINITY when none fits. */
static double stage_time(const dp_ctx *x, int32_t k, int32_t j, int32_t f, int32_t *pick) {
  const dp_table *T = &x->tab;
  double best = INFINITY;
  for (int32_t i = 0; i < T->n_ml; i++) {
    size_t off = (size_t)i * (size_t)(x->L + 1);
    double w = T->w[off + j + 1] - T->w[off + k], a = T->a[off + j + 1] - T->a[off + k];
    double mem = w + f * a + (x->rc == PSIM_RECOMPUTE_FULL ? T->amax[i] : 0);
    double t = T->t[off + j + 1] - T->t[off + k];
    if (mem <= MEM_USE * x->A->mem_bytes && t < best) {
      best = t;
      *pick = i;
    }
  }
  return best;
}

/* Micro-batches whose activations stage i holds under 1F1B: the stages
 * from it to the last, at most the micro-batch count. */
static int32_t inflight(const dp_ctx *x, int32_t i) {
  return x->S - i < x->B ? x->S - i : x->B;
}

/* G[i][k]: least sum of stage times of stages i..S-1 over layers k..L-1 with
 * every stage at most tmax; stage i keeps S - i micro-batches (1F1B). */
static double run_dp(dp_ctx *x, double tmax, double *tmax_used) {
  int32_t L = x->L, S = x->S;
  const psim_alpa_fix *fx = &x->A->fix;
  for (int32_t k = 0; k <= L; k++)
    x->G[(size_t)S * (L + 1) + k] = k == L ? 0 : INFINITY;
  for (int32_t i = S - 1; i >= 0; i--)
    for (int32_t k = 0; k <= L; k++) {
      size_t at = (size_t)i * (L + 1) + k;
      x->G[at] = INFINITY;
      for (int32_t j = k; j <= L - (S - i); j++) {
        if (fx->n_stages > 0 && j != fx->stage_last[i])
          continue;
        int32_t pick = -1;
        double t = stage_time(x, k, j, inflight(x, i), &pick) * x->slow[i];
        if (t > tmax)
          break; /* longer ranges are slower still */
        double v = t + x->G[(size_t)(i + 1) * (L + 1) + j + 1];
        if (v < x->G[at]) {
          x->G[at] = v;
          x->next[at] = j;
          x->pick[at] = pick;
        }
      }
    }
  *tmax_used = 0;
  for (int32_t i = 0, k = 0; i < S && isfinite(x->G[0]); i++) {
    size_t at = (size_t)i * (L + 1) + k;
    int32_t pick;
    *tmax_used =
        fmax(*tmax_used, stage_time(x, k, x->next[at], inflight(x, i), &pick) * x->slow[i]);
    k = x->next[at] + 1;
  }
  return x->G[0];
}

static psim_status fill_candidate(dp_ctx *x, alpa_cand *c, double estimate);

static psim_status keep_candidate(dp_ctx *x, double estimate) {
  alpa *A = x->A;
  int32_t worst = 0, pick0 = x->tab.ml[x->pick[0]];
  for (int32_t i = 0; i < A->n_top; i++) /* one candidate per stage shape and mesh: diversity */
    if (A->top[i].n == x->n && A->top[i].ml[0] == pick0) {
      if (A->top[i].estimate <= estimate)
        return PSIM_OK;
      return fill_candidate(x, &A->top[i], estimate);
    }
  if (A->n_top == TOP_K) {
    for (int32_t i = 1; i < TOP_K; i++)
      if (A->top[i].estimate > A->top[worst].estimate)
        worst = i;
    if (A->top[worst].estimate <= estimate)
      return PSIM_OK;
  } else {
    worst = A->n_top++;
    A->top[worst].last = psim_malloc((size_t)A->m->n_layers * sizeof(int32_t));
    A->top[worst].ml = psim_malloc((size_t)A->m->n_layers * sizeof(int32_t));
    if (!A->top[worst].last || !A->top[worst].ml)
      return psim_error(PSIM_ENOMEM, "out of memory (candidates)");
  }
  return fill_candidate(x, &A->top[worst], estimate);
}

static psim_status fill_candidate(dp_ctx *x, alpa_cand *c, double estimate) {
  c->estimate = estimate;
  c->n = x->n;
  c->S = x->S;
  c->mb_id = x->mb;
  c->rc = x->rc;
  for (int32_t i = 0, k = 0; i < x->S; i++) {
    size_t at = (size_t)i * (x->L + 1) + k;
    c->last[i] = x->next[at];
    c->ml[i] = x->tab.ml[x->pick[at]];
    k = x->next[at] + 1;
  }
  return PSIM_OK;
}

/* Smallest bound with a feasible DP, by bisection (feasibility grows with the bound). */
static double first_feasible(dp_ctx *x, double hi) {
  double lo = 0, used;
  for (int it = 0; it < 40 && hi - lo > 1e-4 * hi; it++) {
    double mid = 0.5 * (lo + hi);
    if (isfinite(run_dp(x, mid, &used)))
      hi = mid;
    else
      lo = mid;
  }
  return hi;
}

/* Alpa's enumeration of the bound on the slowest stage, increasing, with its
 * two prunings: stop once (B - 1) * tmax exceeds the best total; step the
 * bound by at least EPS_TMAX (the result is then within that of optimal). */
static psim_status enumerate_tmax(dp_ctx *x) {
  double used, best = INFINITY;
  if (!isfinite(run_dp(x, INFINITY, &used)))
    return PSIM_OK;
  double tmax = first_feasible(x, used), best_tmax = tmax;
  for (int it = 0; it < 2000 && (x->B - 1) * tmax < best; it++) {
    double sum = run_dp(x, tmax, &used);
    if (isfinite(sum) && sum + (x->B - 1) * used < best) {
      best = sum + (x->B - 1) * used;
      best_tmax = tmax;
    }
    tmax = fmax(tmax * (1 + EPS_TMAX), used * (1 + EPS_TMAX));
    if (x->B == 1)
      break;
  }
  if (!isfinite(best))
    return PSIM_OK;
  run_dp(x, best_tmax, &used); /* the arg-min tables of the best bound */
  return keep_candidate(x, best);
}

/* Time factor of stage i (devices i n .. i n + n - 1, as build_strategy
 * places them) against the device the ILPs were costed on: the slowest
 * device sets a stage's pace, so its slowdown and its peak FLOP/s relative
 * to the reference device's (mixed A100/V100 clusters). The DP then gives a
 * slow stage fewer layers. */
static void stage_slowdowns(const alpa *A, int32_t n, int32_t S, double *slow) {
  const psim_cluster *c = A->c;
  double ref = psim_device_peak_flops(c, 0, A->m->dtype);
  for (int32_t i = 0; i < S; i++) {
    slow[i] = 1.0;
    for (int32_t d = i * n; d < (i + 1) * n && d < c->n_devices; d++) {
      double f = c->devices[d].slowdown > 0 ? c->devices[d].slowdown : 1.0;
      double peak = psim_device_peak_flops(c, d, A->m->dtype);
      if (peak > 0 && ref > 0)
        f *= ref / peak > 1.0 ? ref / peak : 1.0;
      slow[i] = f > slow[i] ? f : slow[i];
    }
  }
}

static psim_status dp_config(alpa *A, int32_t n, int32_t mb, int rc) {
  dp_ctx x = {.A = A, .L = A->m->n_layers, .S = A->c->n_devices / n, .n = n, .mb = mb, .rc = rc};
  x.B = (int32_t)(A->batch / A->mbs[mb]);
  size_t cells = (size_t)(x.S + 1) * (size_t)(x.L + 1),
         pre = LEVELS * MAX_MESHES * (size_t)(x.L + 1);
  x.G = psim_malloc(cells * sizeof *x.G);
  x.next = psim_malloc(cells * sizeof *x.next);
  x.pick = psim_malloc(cells * sizeof *x.pick);
  x.tab.t = psim_malloc(pre * sizeof(double));
  x.tab.w = psim_malloc(pre * sizeof(double));
  x.tab.a = psim_malloc(pre * sizeof(double));
  x.slow = psim_malloc((size_t)(x.S > 0 ? x.S : 1) * sizeof *x.slow);
  if (x.slow)
    stage_slowdowns(A, n, x.S, x.slow);
  psim_status st = x.G && x.next && x.pick && x.tab.t && x.tab.w && x.tab.a && x.slow
                       ? build_table(&x)
                       : psim_error(PSIM_ENOMEM, "out of memory (stage DP)");
  double t0 = now_s(), ilp0 = A->ilp_s;
  if (st == PSIM_OK && x.tab.n_ml > 0)
    st = enumerate_tmax(&x);
  A->dp_s += now_s() - t0 - (A->ilp_s - ilp0);
  psim_free(x.G);
  psim_free(x.next);
  psim_free(x.pick);
  psim_free(x.tab.t);
  psim_free(x.tab.w);
  psim_free(x.tab.a);
  psim_free(x.slow);
  return st;
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

typedef struct ilp_job {
  int32_t cls, mesh, mb;
  int level;
} ilp_job;

typedef struct ilp_pool {
  alpa *A;
  const ilp_job *jobs;
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
    const ilp_job *j = &P->jobs[k];
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

#define MAX_THREADS 64

/* Runs fn(arg) on up to want threads (as many as start) and waits for them;
 * the callers finish on the calling thread whatever no thread took. */
static void run_workers(int32_t want, void *(*fn)(void *), void *arg) {
  pthread_t tid[MAX_THREADS];
  int32_t started = 0;
  while (started < want && started < MAX_THREADS &&
         pthread_create(&tid[started], NULL, fn, arg) == 0)
    started++;
  for (int32_t i = 0; i < started; i++)
    pthread_join(tid[i], NULL);
}

static psim_status solve_jobs(alpa *A, const ilp_job *jobs, int32_t n) {
  ilp_pool P = {.A = A, .jobs = jobs, .n = n, .st = PSIM_OK};
  pthread_mutex_init(&P.mu, NULL);
  run_workers(A->o->threads < n ? A->o->threads : n, ilp_worker, &P);
  pthread_mutex_destroy(&P.mu);
  if (P.st != PSIM_OK)
    return psim_error(P.st, "%s", P.err);
  /* no thread started (or an interruption): what is left is solved on demand */
  return PSIM_OK;
}

/* Whether the stage DP for stages of n devices would ask for `level` of mesh
 * me at micro-batch size mb (need_lean's test, for the recomputation mode
 * searched that keeps the most activations). */
static bool level_wanted(alpa *A, int32_t n, int32_t me, int32_t mb, int level) {
  if (level == 0)
    return true;
  int32_t L = A->m->n_layers, S = A->c->n_devices / n;
  int rc = A->fix.has_recompute ? (int)A->fix.recompute : PSIM_RECOMPUTE_NONE;
  double w = 0, a = 0;
  for (int32_t l = 0; l < L; l++) {
    const alpa_point *p = memo_at(A, A->class_of[l], me, mb, level - 1);
    if (!p->solved || !p->ok)
      return false;
    w += p->wmem;
    a += layer_act(p, rc);
  }
  return too_big(A, w, a, L, S);
}

static psim_status prefetch(alpa *A, int32_t n, int32_t mb) {
  ilp_job *jobs = psim_malloc((size_t)A->n_meshes * (size_t)A->n_classes * sizeof *jobs);
  psim_status st = jobs ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory (ILP jobs)");
  for (int level = 0; st == PSIM_OK && level < LEVELS; level++) {
    int32_t k = 0;
    for (int32_t me = 0; st == PSIM_OK && me < A->n_meshes; me++) {
      const psim_sh_mesh *sh;
      if (A->meshes[me].n != n || !mb_wanted(A, &A->meshes[me], A->mbs[mb]))
        continue;
      st = mesh_of(A, me, &sh); /* fitted here, not on the workers */
      if (st != PSIM_OK || !level_wanted(A, n, me, mb, level))
        continue;
      for (int32_t cls = 0; cls < A->n_classes; cls++)
        if (!memo_at(A, cls, me, mb, level)->solved)
          jobs[k++] = (ilp_job){cls, me, mb, level};
    }
    if (st == PSIM_OK)
      st = solve_jobs(A, jobs, k);
  }
  psim_free(jobs);
  return st;
}

static psim_status search_all(alpa *A) {
  int rcs[3] = {PSIM_RECOMPUTE_NONE, PSIM_RECOMPUTE_SELECTIVE, PSIM_RECOMPUTE_FULL};
  for (int32_t n = 1; n <= A->c->n_devices; n++) {
    bool has = false;
    for (int32_t me = 0; me < A->n_meshes; me++)
      has = has || A->meshes[me].n == n;
    for (int32_t mb = 0; has && mb < A->n_mbs; mb++) {
      if (A->o->threads > 1)
        PSIM_CHECK(prefetch(A, n, mb));
      for (int r = 0; r < 3; r++) {
        if (A->fix.has_recompute && (int)A->fix.recompute != rcs[r])
          continue;
        if (psim_interrupted())
          return psim_error(PSIM_EINTERRUPTED, "alpa search interrupted");
        PSIM_CHECK(dp_config(A, n, mb, rcs[r]));
      }
    }
    if (has && A->o->progress)
      fprintf(A->o->progress, "\ralpa: stages of %d devices, %lld ILPs   ", (int)n,
              (long long)A->ilp_count);
  }
  return PSIM_OK;
}

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
        memo_at(A, A->class_of[l], c->ml[i] / LEVELS, c->mb_id, c->ml[i] % LEVELS);
    PSIM_CHECK(op_config(A, me, p->op_dim[local], op, st->devices, &s->ops[op]));
    s->ops[op].stage = i;
    /* The flag only describes the plan (exporters pass --sequence-parallel);
     * the simulator follows the ops' sequence splits. */
    s->sequence_parallel = s->sequence_parallel || p->seq_parallel;
  }
  return PSIM_OK;
}

static psim_status build_strategy(alpa *A, const alpa_cand *c, psim_strategy *s) {
  psim_strategy_init(s);
  s->n_stages = c->S;
  s->virtual_stages = 1;
  s->n_micro = (int32_t)(A->batch / A->mbs[c->mb_id]);
  s->micro_batch = A->mbs[c->mb_id];
  s->schedule = PSIM_SCHED_1F1B;
  s->recompute = (psim_recompute)c->rc;
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
           "recompute %s%s",
           (int)c->S, c->S == 1 ? "" : "s", (int)c->n, (int)me->a0, (int)me->a1,
           c->S > 1 ? " first stage" : "", (long long)(A->batch / A->mbs[c->mb_id]),
           (long long)A->mbs[c->mb_id], psim_recompute_name((psim_recompute)c->rc),
           r->best.sequence_parallel ? ", sequence parallel" : "");
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
  run_workers(want > 1 ? want : 0, cand_worker, &P);
  pthread_mutex_destroy(&P.mu);
  for (int32_t i = P.next; i < A->n_top; i++) /* serial, or what no thread took */
    eval_candidate(A, i, &ev[i]);
}

static psim_status simulate_top(alpa *A, psim_search_result *r, double t0) {
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
      st = psim_search_record(r, r->evaluations, now_s() - t0, ev[i].sim.iteration_time_s);
    } else {
      psim_strategy_destroy(&ev[i].s);
      psim_sim_result_destroy(&ev[i].sim);
    }
    if (st == PSIM_OK && (ev[i].st == PSIM_ENOMEM || ev[i].st == PSIM_EINTERRUPTED))
      st = psim_error(ev[i].st, "%s", ev[i].err);
  }
  return st;
}

/* ---- statistics, setup and the entry point ---- */

static psim_status stats_json(const alpa *A, const alpa_cand *best, psim_search_result *r) {
  cJSON *s = cJSON_CreateObject();
  if (!s)
    return psim_error(PSIM_ENOMEM, "out of memory (stats)");
  r->stats = s;
  double rate = A->memo_lookups ? (double)A->memo_hits / (double)A->memo_lookups : 0;
  PSIM_CHECK(psim_json_add_number(s, "ilp_count", (double)A->ilp_count));
  PSIM_CHECK(psim_json_add_number(s, "ilp_time_s", A->ilp_s));
  PSIM_CHECK(psim_json_add_number(s, "ilp_timeouts", (double)A->timeouts));
  PSIM_CHECK(psim_json_add_number(s, "ilp_max_gap", A->max_gap));
  PSIM_CHECK(psim_json_add_number(s, "dp_time_s", A->dp_s));
  PSIM_CHECK(psim_json_add_number(s, "mesh_fit_time_s", A->mesh_s));
  PSIM_CHECK(psim_json_add_number(s, "simulate_time_s", A->sim_s));
  PSIM_CHECK(psim_json_add_number(s, "memo_lookups", (double)A->memo_lookups));
  PSIM_CHECK(psim_json_add_number(s, "memo_hits", (double)A->memo_hits));
  PSIM_CHECK(psim_json_add_number(s, "memo_hit_rate", rate));
  PSIM_CHECK(psim_json_add_number(s, "layer_classes", A->n_classes));
  PSIM_CHECK(psim_json_add_number(s, "candidates_simulated", A->n_top));
  return psim_json_add_number(s, "estimate_s", best ? best->estimate : 0);
}

static psim_status setup(alpa *A, const psim_model *m, psim_cluster *c,
                         const psim_search_options *o) {
  memset(A, 0, sizeof *A);
  pthread_mutex_init(&A->mu, NULL);
  A->m = m;
  A->c = c;
  A->o = o;
  int32_t b = m->role_dim[PSIM_ROLE_BATCH];
  if (b < 0)
    return psim_error(PSIM_EINPUT, "%s: the Alpa optimizer needs a dim with role 'batch'",
                      m->file ? m->file : m->name);
  A->batch = m->dims[b].size;
  A->mem_bytes = c->types[c->devices[0].type].mem_bytes;
  PSIM_CHECK(psim_alpa_fix_parse(o->fix, o->fix_file, m, &A->fix));
  PSIM_CHECK(layer_classes(A));
  enumerate_meshes(A);
  enumerate_mbs(A);
  if (A->n_meshes == 0)
    return psim_error(PSIM_EINPUT, "%s: no stage shape divides the %d devices of %s%s",
                      o->fix_file ? o->fix_file : m->name, (int)c->n_devices, c->name,
                      A->fix.active ? " under the fixed mesh and stages" : "");
  size_t n = (size_t)A->n_classes * (size_t)A->n_meshes * (size_t)A->n_mbs * LEVELS;
  A->memo = psim_calloc(n, sizeof *A->memo);
  return A->memo ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory (ILP memo)");
}

static void teardown(alpa *A) {
  size_t n = (size_t)A->n_classes * (size_t)A->n_meshes * (size_t)A->n_mbs * LEVELS;
  for (size_t i = 0; A->memo && i < n; i++)
    psim_free(A->memo[i].op_dim);
  psim_free(A->memo);
  for (int32_t i = 0; i < A->n_meshes; i++)
    psim_free(A->meshes[i].sh);
  for (int32_t i = 0; i < A->n_top; i++) {
    psim_free(A->top[i].last);
    psim_free(A->top[i].ml);
  }
  psim_free(A->class_of);
  psim_free(A->class_layer);
  psim_alpa_fix_destroy(&A->fix);
  pthread_mutex_destroy(&A->mu);
}

static psim_status no_plan(const alpa *A) {
  if (A->fix.active && A->blame) {
    char who[512];
    psim_alpa_fix_describe(&A->fix, A->blame, who, sizeof who);
    return psim_error(PSIM_EINPUT,
                      "%s: the partial strategy cannot be completed: no sharding on any stage "
                      "mesh satisfies %s together with the rest",
                      A->fix.file ? A->fix.file : "--fix", who);
  }
  return psim_error(PSIM_EFAILED, "alpa: no plan of %s fits on %s%s", A->m->name, A->c->name,
                    A->fix.active ? " under the partial strategy" : "");
}

psim_status psim_search_alpa(const psim_model *m, psim_cluster *c, const psim_search_options *o,
                             psim_search_result *r) {
  double t0 = now_s();
  alpa A;
  psim_status st = setup(&A, m, c, o);
  if (st == PSIM_OK)
    st = search_all(&A);
  if (o->progress)
    fprintf(o->progress, "\n");
  double ts = now_s();
  if (st == PSIM_OK)
    st = simulate_top(&A, r, t0);
  A.sim_s = now_s() - ts;
  if (st == PSIM_OK && !r->found)
    st = no_plan(&A);
  const alpa_cand *best = NULL;
  for (int32_t i = 0; i < A.n_top; i++)
    if (!best || A.top[i].estimate < best->estimate)
      best = &A.top[i];
  if (st == PSIM_OK)
    st = stats_json(&A, best, r);
  r->wall_s = now_s() - t0;
  teardown(&A);
  return st;
}

/* ---- one layer's ILP (tests and docs) ---- */

psim_status psim_alpa_layer_ilp(const psim_model *m, psim_cluster *c, int32_t layer, int32_t a0,
                                int32_t a1, int64_t micro_batch, int32_t n_micro,
                                psim_sh_mesh *mesh, psim_sh_layer *L, psim_ilp_solution *sol) {
  PSIM_CHECK(psim_sh_mesh_init(c, 0, a0, a1, mesh));
  psim_sh_params p = {micro_batch, n_micro, NULL, 0};
  PSIM_CHECK(psim_sh_layer_build(m, c, layer, mesh, &p, L));
  psim_ilp_problem prob;
  psim_sh_layer_problem(L, &prob);
  psim_ilp_solution_init(sol);
  return psim_ilp_solve(&prob, NULL, sol);
}
