/* alpa_dp.c - the Alpa optimizer's stage DP: layers cut into stages of a
 * mesh each, the bound on the slowest stage enumerated in increasing order,
 * and the micro-batch and recomputation search around it. */
#define _POSIX_C_SOURCE 200809L
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "search/alpa/alpa_search_impl.h"
#include "sim/core/alloc.h"

/* ---- stage DP ---- */

/* Per (mesh, level) prefix sums over layers for one (stage size, mb, rc, zero). */
typedef struct dp_table {
  int32_t n_ml, ml[LEVELS * MAX_MESHES];
  double *t, *w, *a; /* [ml][L + 1] prefix sums: time per micro-batch, weights, activations */
  double amax[LEVELS * MAX_MESHES]; /* largest activations of one layer (full recomputation) */
} dp_table;

typedef struct dp_ctx {
  alpa *A;
  int32_t L, S, n, mb, rc, zero, B; /* zero: ZeRO stage, 0 or 1 */
  double *slow; /* per stage: its slowest device's time factor (stragglers, mixed types) */
  dp_table tab;
  double *G; /* [(S + 1) * (L + 1)] */
  int32_t *next, *pick;
} dp_ctx;

static double layer_time(const alpa_point *p, int rc, int zero, int32_t B) {
  double t = p->time + (zero ? p->sync_z1 : p->sync) / B;
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
    PSIM_CHECK(psim_alpa_point(A, A->class_of[l], mesh, x->mb, level, &p));
    if (!p->ok)
      return PSIM_EFAILED; /* this mesh cannot run the layer */
    T->t[off + l + 1] = T->t[off + l] + layer_time(p, x->rc, x->zero, x->B);
    T->w[off + l + 1] = T->w[off + l] + (x->zero ? p->wmem_z1 : p->wmem);
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
    if (A->meshes[me].n != x->n || !psim_alpa_mb_wanted(A, &A->meshes[me], A->mbs[x->mb]))
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
  assert(x->S >= 1 && x->S <= x->L); /* c->last and c->ml hold n_layers entries */
  c->estimate = estimate;
  c->n = x->n;
  c->S = x->S;
  c->mb_id = x->mb;
  c->rc = x->rc;
  c->zero = x->zero;
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

static psim_status dp_config(alpa *A, int32_t n, int32_t mb, int rc, int zero) {
  dp_ctx x = {.A = A, .L = A->m->n_layers, .S = A->c->n_devices / n, .n = n, .mb = mb, .rc = rc};
  x.zero = zero;
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
  double t0 = psim_alpa_now_s(), ilp0 = A->ilp_s;
  if (st == PSIM_OK && x.tab.n_ml > 0)
    st = enumerate_tmax(&x);
  A->dp_s += psim_alpa_now_s() - t0 - (A->ilp_s - ilp0);
  psim_free(x.G);
  psim_free(x.next);
  psim_free(x.pick);
  psim_free(x.tab.t);
  psim_free(x.tab.w);
  psim_free(x.tab.a);
  psim_free(x.slow);
  return st;
}

static bool level_wanted(alpa *A, int32_t n, int32_t me, int32_t mb, int level) {
  if (level == 0)
    return true;
  int32_t L = A->m->n_layers, S = A->c->n_devices / n;
  int rc = A->fix.has_recompute ? (int)A->fix.recompute : PSIM_RECOMPUTE_NONE;
  double w = 0, a = 0;
  for (int32_t l = 0; l < L; l++) {
    const alpa_point *p = psim_alpa_memo_at(A, A->class_of[l], me, mb, level - 1);
    if (!p->solved || !p->ok)
      return false;
    w += p->wmem;
    a += layer_act(p, rc);
  }
  return too_big(A, w, a, L, S);
}

static psim_status prefetch(alpa *A, int32_t n, int32_t mb) {
  psim_alpa_ilp_job *jobs = psim_malloc((size_t)A->n_meshes * (size_t)A->n_classes * sizeof *jobs);
  psim_status st = jobs ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory (ILP jobs)");
  for (int level = 0; st == PSIM_OK && level < LEVELS; level++) {
    int32_t k = 0;
    for (int32_t me = 0; st == PSIM_OK && me < A->n_meshes; me++) {
      const psim_sh_mesh *sh;
      if (A->meshes[me].n != n || !psim_alpa_mb_wanted(A, &A->meshes[me], A->mbs[mb]))
        continue;
      st = psim_alpa_mesh_of(A, me, &sh); /* fitted here, not on the workers */
      if (st != PSIM_OK || !level_wanted(A, n, me, mb, level))
        continue;
      for (int32_t cls = 0; cls < A->n_classes; cls++)
        if (!psim_alpa_memo_at(A, cls, me, mb, level)->solved)
          jobs[k++] = (psim_alpa_ilp_job){cls, me, mb, level};
    }
    if (st == PSIM_OK)
      st = psim_alpa_solve_jobs(A, jobs, k);
  }
  psim_free(jobs);
  return st;
}

/* The memory options of one (stage size, micro-batch size): each
 * recomputation mode, each with ZeRO 0 and ZeRO 1 (the distributed
 * optimizer: less optimizer state per device where the stage's ILP splits
 * the batch, a different gradient synchronisation); the DP of each costs
 * every stage under it, and the best plans of all are kept. */
static psim_status memory_options(alpa *A, int32_t n, int32_t mb) {
  int rcs[3] = {PSIM_RECOMPUTE_NONE, PSIM_RECOMPUTE_SELECTIVE, PSIM_RECOMPUTE_FULL};
  for (int r = 0; r < 3; r++)
    for (int zero = 0; zero <= A->max_zero; zero++) {
      if (A->fix.has_recompute && (int)A->fix.recompute != rcs[r])
        continue;
      if (psim_interrupted())
        return psim_error(PSIM_EINTERRUPTED, "alpa search interrupted");
      PSIM_CHECK(dp_config(A, n, mb, rcs[r], zero));
    }
  return PSIM_OK;
}

psim_status psim_alpa_search_all(alpa *A) {
  for (int32_t n = 1; n <= A->c->n_devices; n++) {
    bool has = false;
    for (int32_t me = 0; me < A->n_meshes; me++)
      has = has || A->meshes[me].n == n;
    for (int32_t mb = 0; has && mb < A->n_mbs; mb++) {
      if (A->o->threads > 1)
        PSIM_CHECK(prefetch(A, n, mb));
      PSIM_CHECK(memory_options(A, n, mb));
    }
    if (has && A->o->progress)
      fprintf(A->o->progress, "\ralpa: stages of %d devices, %lld ILPs   ", (int)n,
              (long long)A->ilp_count);
  }
  return PSIM_OK;
}
