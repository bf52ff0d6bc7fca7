/* alpa_stage_dp.c - the core of the Alpa optimizer's stage DP (Zheng et
 * al., OSDI 2022, section 5.2): layers cut into contiguous stages, each on a
 * submesh whose size the DP chooses, the submeshes covering the cluster
 * exactly; the bound on the slowest stage enumerated in increasing order. */
#define _POSIX_C_SOURCE 200809L
#include <assert.h>
#include <math.h>
#include <string.h>

#include "search/alpa/alpa_dp_impl.h"
#include "sim/core/alloc.h"

static size_t gat(const dp_ctx *x, int32_t s, int32_t k, int32_t e) {
  return ((size_t)s * (size_t)(x->L + 1) + (size_t)k) * (size_t)(2 * x->W + 1) + (size_t)(e + x->W);
}

static size_t tat(const dp_ctx *x, int32_t zi, int32_t k, int32_t j) {
  return ((size_t)zi * (size_t)x->L + (size_t)k) * (size_t)x->L + (size_t)j;
}

psim_status psim_alpa_dp_alloc(dp_ctx *x) {
  size_t cells = (size_t)(x->Smax + 1) * (size_t)(x->L + 1) * (size_t)(2 * x->W + 1);
  size_t pre = LEVELS * MAX_MESHES * MAX_BAND * (size_t)(x->L + 1);
  size_t tab = (size_t)x->nz * (size_t)x->L * (size_t)x->L;
  x->G = psim_malloc(cells * sizeof *x->G);
  x->next = psim_malloc(cells * sizeof *x->next);
  x->pick = psim_malloc(cells * sizeof *x->pick);
  x->tab.t = psim_malloc(pre * sizeof(double));
  x->tab.w = psim_malloc(pre * sizeof(double));
  x->tab.a = psim_malloc(pre * sizeof(double));
  x->tab.w1 = psim_malloc(pre * sizeof(double));
  x->T = psim_malloc(tab * sizeof *x->T);
  x->Tpick = psim_malloc(tab * sizeof *x->Tpick);
  x->Tf = psim_malloc(tab * sizeof *x->Tf);
  x->Sf = psim_malloc(tab * sizeof *x->Sf);
  x->Spick = psim_malloc(tab * sizeof *x->Spick);
  x->St = psim_malloc(tab * sizeof *x->St);
  x->slow = psim_malloc((size_t)(x->S0 > 0 ? x->S0 : 1) * sizeof *x->slow);
  bool ok = x->G && x->next && x->pick && x->tab.t && x->tab.w && x->tab.a && x->tab.w1 && x->T &&
            x->Tpick && x->Tf && x->Sf && x->Spick && x->St && x->slow;
  return ok ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory (stage DP)");
}

void psim_alpa_dp_free(dp_ctx *x) {
  psim_free(x->G);
  psim_free(x->next);
  psim_free(x->pick);
  psim_free(x->tab.t);
  psim_free(x->tab.w);
  psim_free(x->tab.a);
  psim_free(x->tab.w1);
  psim_free(x->T);
  psim_free(x->Tpick);
  psim_free(x->Tf);
  psim_free(x->Sf);
  psim_free(x->Spick);
  psim_free(x->St);
  psim_free(x->slow);
}

/* Whether option o runs layers k..j with f micro-batches of activations in
 * flight within the device memory, its weights' prefix sums w; *t: its time
 * per micro-batch. */
static bool fits_with(const dp_ctx *x, const double *wsum, int32_t o, int32_t k, int32_t j,
                      int32_t f, double *t) {
  const dp_table *T = &x->tab;
  size_t off = (size_t)o * (size_t)(x->L + 1);
  double w = wsum[off + j + 1] - wsum[off + k], a = T->a[off + j + 1] - T->a[off + k];
  double mem = w + f * a + (x->rc == PSIM_RECOMPUTE_FULL ? T->amax[o] : 0) + T->gmax[o];
  *t = T->t[off + j + 1] - T->t[off + k];
  return mem <= MEM_USE * x->A->mem_bytes;
}

static bool option_fits(const dp_ctx *x, int32_t o, int32_t k, int32_t j, int32_t f, double *t) {
  return fits_with(x, x->tab.w, o, k, j, f, t);
}

/* Fastest option of stage size zi for layers k..j with f micro-batches in
 * flight (the first such in option order); INFINITY when none fits. */
static double stage_scan(const dp_ctx *x, int32_t zi, int32_t k, int32_t j, int32_t f,
                         int32_t *pick) {
  double best = INFINITY, t;
  for (int32_t o = 0; o < x->tab.n_ml; o++)
    if (x->tab.zi[o] == zi && option_fits(x, o, k, j, f, &t) && t < best) {
      best = t;
      *pick = o;
    }
  return best;
}

/* Per (size, k, j): the fastest option at one micro-batch in flight and the
 * most micro-batches (up to F) it holds; other counts fall back to a scan. */
void psim_alpa_dp_tabulate(dp_ctx *x) {
  for (int32_t zi = 0; zi < x->nz; zi++)
    for (int32_t k = 0; k < x->L; k++)
      for (int32_t j = k; j < x->L; j++) {
        size_t at = tat(x, zi, k, j);
        int32_t o = -1, f = 0;
        double t;
        x->T[at] = stage_scan(x, zi, k, j, 1, &o);
        x->Tpick[at] = o;
        while (o >= 0 && f < x->F && option_fits(x, o, k, j, f + 1, &t))
          f++;
        x->Tf[at] = f;
        x->Sf[at] = 0;
      }
}

static double stage_time(const dp_ctx *x, int32_t zi, int32_t k, int32_t j, int32_t f,
                         int32_t *pick) {
  size_t at = tat(x, zi, k, j);
  if (f <= x->Tf[at]) {
    *pick = x->Tpick[at];
    return x->T[at];
  }
  if (x->Sf[at] != f) { /* the scan is a function of (zi, k, j, f): kept for the next ask */
    x->Spick[at] = -1;
    x->St[at] = stage_scan(x, zi, k, j, f, &x->Spick[at]);
    x->Sf[at] = f;
  }
  *pick = x->Spick[at];
  return x->St[at];
}

/* Stage i from the front's time factor (stragglers; equal stages only). */
static double slow_of(const dp_ctx *x, int32_t s) {
  return x->nz == 1 && s <= x->S0 ? x->slow[x->S0 - s] : 1.0;
}

/* One cell: the last s stages on d = s n + e u devices from layer k. */
static void dp_cell(dp_ctx *x, int32_t s, int32_t k, int32_t e, double tmax) {
  const psim_alpa_fix *fx = &x->A->fix;
  size_t at = gat(x, s, k, e);
  int32_t d = s * x->n + e * x->u, f = s < x->B ? s : x->B;
  x->G[at] = INFINITY;
  if (d < s * x->z[0] || d > s * x->z[x->nz - 1])
    return;
  for (int32_t zi = 0; zi < x->nz; zi++) {
    int32_t rest = d - x->z[zi] - (s - 1) * x->n, e2 = rest / x->u;
    if (rest % x->u != 0 || e2 < -x->W || e2 > x->W)
      continue;
    for (int32_t j = k; j <= x->L - s; j++) {
      if (fx->n_stages > 0 && j != fx->stage_last[fx->n_stages - s])
        continue;
      int32_t pick = -1;
      double t = stage_time(x, zi, k, j, f, &pick) * slow_of(x, s);
      if (t > tmax)
        break; /* longer ranges are slower still */
      double v = t + x->G[gat(x, s - 1, j + 1, e2)];
      if (v < x->G[at]) {
        x->G[at] = v;
        x->next[at] = j;
        x->pick[at] = pick;
      }
    }
  }
}

/* Walks the plan of the last s stages from (k, e): its slowest stage. */
static double walk(const dp_ctx *x, int32_t s, int32_t k, int32_t e, int32_t *last, int32_t *ml) {
  double mx = 0;
  for (int32_t i = 0; s > 0; i++, s--) {
    size_t at = gat(x, s, k, e);
    int32_t j = x->next[at], o = x->pick[at], f = s < x->B ? s : x->B, pick;
    mx = fmax(mx, stage_time(x, x->tab.zi[o], k, j, f, &pick) * slow_of(x, s));
    if (last) {
      last[i] = j;
      ml[i] = x->tab.ml[o];
    }
    int32_t d = s * x->n + e * x->u - x->z[x->tab.zi[o]];
    e = (d - (s - 1) * x->n) / x->u;
    k = j + 1;
  }
  return mx;
}

double psim_alpa_dp_run(dp_ctx *x, double tmax, double *used) {
  const psim_alpa_fix *fx = &x->A->fix;
  int32_t smax = fx->n_stages > 0 && fx->n_stages < x->Smax ? fx->n_stages : x->Smax;
  for (int32_t k = 0; k <= x->L; k++)
    for (int32_t e = -x->W; e <= x->W; e++)
      x->G[gat(x, 0, k, e)] = k == x->L && e == 0 ? 0 : INFINITY;
  for (int32_t s = 1; s <= smax; s++)
    for (int32_t k = 0; k <= x->L; k++)
      for (int32_t e = -x->W; e <= x->W; e++)
        if (k <= x->L - s)
          dp_cell(x, s, k, e, tmax);
        else
          x->G[gat(x, s, k, e)] = INFINITY;
  double best = INFINITY, sum = INFINITY;
  *used = 0;
  x->S_best = 0;
  for (int32_t s = 1; s <= smax; s++) {
    int32_t rest = x->N - s * x->n, e = rest / x->u;
    if ((fx->n_stages > 0 && s != fx->n_stages) || rest % x->u != 0 || e < -x->W || e > x->W ||
        !isfinite(x->G[gat(x, s, 0, e)]))
      continue;
    double mx = walk(x, s, 0, e, NULL, NULL), g = x->G[gat(x, s, 0, e)];
    if (g + (x->B - 1) * mx < best) {
      best = g + (x->B - 1) * mx;
      sum = g;
      *used = mx;
      x->S_best = s;
    }
  }
  return sum;
}

/* Whether every stage of the plan of the best bound (a ZeRO 2 DP's) fits
 * with the gradients unsharded, ZeRO 1: the simulator times ZeRO 1 and 2
 * alike (gradsync.c), so the plan is written with the lesser stage. */
static bool fits_zero1(const dp_ctx *x) {
  int32_t k = 0, e = (x->N - x->S_best * x->n) / x->u;
  double t;
  for (int32_t s = x->S_best; s > 0; s--) {
    size_t at = gat(x, s, k, e);
    int32_t o = x->pick[at], f = s < x->B ? s : x->B;
    if (!fits_with(x, x->tab.w1, o, k, x->next[at], f, &t))
      return false;
    e = (s * x->n + e * x->u - x->z[x->tab.zi[o]] - (s - 1) * x->n) / x->u;
    k = x->next[at] + 1;
  }
  return true;
}

static psim_status fill_candidate(dp_ctx *x, alpa_cand *c, double estimate) {
  int32_t S = x->S_best, e = (x->N - S * x->n) / x->u;
  assert(S >= 1 && S <= x->L); /* c->last and c->ml hold n_layers entries */
  c->estimate = estimate;
  c->n = x->n;
  c->S = S;
  c->mb_id = x->mb;
  c->rc = x->rc;
  c->zero_dp = x->zero;
  c->zero = x->zero == 2 && fits_zero1(x) ? 1 : x->zero;
  c->v = 1;
  walk(x, S, 0, e, c->last, c->ml);
  return PSIM_OK;
}

/* Whether the plan of the best bound has stages of different sizes. */
static bool unequal(const dp_ctx *x) {
  int32_t k = 0, e = (x->N - x->S_best * x->n) / x->u, z0 = 0;
  for (int32_t s = x->S_best; s > 0; s--) {
    size_t at = gat(x, s, k, e);
    int32_t z = x->z[x->tab.zi[x->pick[at]]];
    if (z0 > 0 && z != z0)
      return true;
    z0 = z;
    e = (s * x->n + e * x->u - z - (s - 1) * x->n) / x->u;
    k = x->next[at] + 1;
  }
  return false;
}

/* Whether candidate c is the plan of the best bound (the bands of two base
 * sizes overlap, so two DPs may find the same plan). */
static bool same_plan(const dp_ctx *x, const alpa_cand *c) {
  int32_t k = 0, e = (x->N - x->S_best * x->n) / x->u, i = 0;
  if (c->S != x->S_best || c->mb_id != x->mb || c->rc != x->rc || c->zero_dp != x->zero)
    return false;
  for (int32_t s = x->S_best; s > 0; s--, i++) {
    size_t at = gat(x, s, k, e);
    int32_t o = x->pick[at];
    if (c->last[i] != x->next[at] || c->ml[i] != x->tab.ml[o])
      return false;
    e = (s * x->n + e * x->u - x->z[x->tab.zi[o]] - (s - 1) * x->n) / x->u;
    k = x->next[at] + 1;
  }
  return true;
}

static psim_status new_slot(alpa *A, int32_t pool, int32_t *at) {
  assert(A->n_top < MAX_CANDS);
  *at = A->n_top++;
  A->top[*at].pool = pool;
  A->top[*at].last = psim_malloc((size_t)A->m->n_layers * sizeof(int32_t));
  A->top[*at].ml = psim_malloc((size_t)A->m->n_layers * sizeof(int32_t));
  if (!A->top[*at].last || !A->top[*at].ml)
    return psim_error(PSIM_ENOMEM, "out of memory (candidates)");
  return PSIM_OK;
}

/* Pool 3: the best equal plan of each recomputation mode that Megatron's
 * interleaving could split (S > 1, S divides the layers into >= 2 layers
 * each and the micro-batches); the interleaved variants start from these
 * too, since the best estimates tend to fill the memory that interleaving
 * needs (alpa_plan.c). */
static psim_status keep_base(dp_ctx *x, double estimate) {
  alpa *A = x->A;
  int32_t S = x->S_best, at = -1;
  if (S < 2 || x->L % S != 0 || x->L / S < 2 || x->B % S != 0)
    return PSIM_OK;
  for (int32_t i = 0; i < A->n_top; i++)
    if (A->top[i].pool == 3 && A->top[i].rc == x->rc)
      at = i;
  if (at >= 0 && A->top[at].estimate <= estimate)
    return PSIM_OK;
  if (at < 0)
    PSIM_CHECK(new_slot(A, 3, &at));
  return fill_candidate(x, &A->top[at], estimate);
}

/* Keeps the plan in its pool (equal stages: TOP_K; different sizes:
 * TOP_UNEQUAL), one per (base size, first stage's option), the best
 * estimates. */
static psim_status keep_candidate(dp_ctx *x, double estimate) {
  alpa *A = x->A;
  int32_t e = (x->N - x->S_best * x->n) / x->u, pool = x->nz > 1 ? 1 : 0;
  int32_t pick0 = x->tab.ml[x->pick[gat(x, x->S_best, 0, e)]], worst = -1, count = 0;
  if (pool == 1 && !unequal(x))
    return PSIM_OK; /* equal stages: the equal-stage DP of their size has them */
  if (pool == 0)
    PSIM_CHECK(keep_base(x, estimate));
  for (int32_t i = 0; i < A->n_top; i++) {
    if (A->top[i].pool != pool)
      continue;
    if (pool == 1 && same_plan(x, &A->top[i]))
      return PSIM_OK;
    if (A->top[i].n == x->n && A->top[i].ml[0] == pick0) /* diversity */
      return A->top[i].estimate <= estimate ? PSIM_OK : fill_candidate(x, &A->top[i], estimate);
    count++;
    if (worst < 0 || A->top[i].estimate > A->top[worst].estimate)
      worst = i;
  }
  if (count == (pool == 0 ? TOP_K : TOP_UNEQUAL)) {
    if (A->top[worst].estimate <= estimate)
      return PSIM_OK;
  } else {
    PSIM_CHECK(new_slot(A, pool, &worst));
  }
  return fill_candidate(x, &A->top[worst], estimate);
}

/* Smallest bound with a feasible DP, by bisection (feasibility grows with the bound). */
static double first_feasible(dp_ctx *x, double hi) {
  double lo = 0, used;
  for (int it = 0; it < 40 && hi - lo > 1e-4 * hi; it++) {
    double mid = 0.5 * (lo + hi);
    if (isfinite(psim_alpa_dp_run(x, mid, &used)))
      hi = mid;
    else
      lo = mid;
  }
  return hi;
}

/* Alpa's enumeration of the bound on the slowest stage, increasing, with its
 * two prunings: stop once (B - 1) * tmax exceeds the best total; step the
 * bound by at least EPS_TMAX (the result is then within that of optimal). */
psim_status psim_alpa_dp_enumerate(dp_ctx *x) {
  double used, best = INFINITY;
  if (!isfinite(psim_alpa_dp_run(x, INFINITY, &used)))
    return PSIM_OK;
  /* one micro-batch: the objective is the sum alone, no bound needed */
  double tmax = x->B == 1 ? INFINITY : first_feasible(x, used), best_tmax = tmax;
  for (int it = 0; it < 2000 && (x->B == 1 || (x->B - 1) * tmax < best); it++) {
    double sum = psim_alpa_dp_run(x, tmax, &used);
    if (isfinite(sum) && sum + (x->B - 1) * used < best) {
      best = sum + (x->B - 1) * used;
      best_tmax = tmax;
    }
    if (x->B == 1)
      break;
    tmax = fmax(tmax * (1 + EPS_TMAX), used * (1 + EPS_TMAX));
  }
  if (!isfinite(best))
    return PSIM_OK;
  x->found = true;
  psim_alpa_dp_run(x, best_tmax, &used); /* the arg-min tables of the best bound */
  return keep_candidate(x, best);
}
