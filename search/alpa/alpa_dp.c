/* alpa_dp.c - the Alpa optimizer's stage DP driver: per base stage size,
 * micro-batch size and memory option, the stage sizes and (mesh, ILP level)
 * options of one DP (its core: alpa_stage_dp.c). */
#define _POSIX_C_SOURCE 200809L
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "search/alpa/alpa_dp_impl.h"
#include "sim/core/alloc.h"

/* ---- the options of one DP ---- */

/* A layer's time per micro-batch under a recomputation mode and ZeRO stage:
 * ZeRO 1 and 2 synchronise alike (gradsync.c); ZeRO 3 gathers the weights
 * before the forward and the backward of every micro-batch (zero.c), added
 * in full: prefetched on the data-parallel stream they could overlap the
 * layers, but counted as overlapped the estimate put ZeRO 3 plans first that
 * the simulator found slower than the ZeRO 1 plan they displaced
 * (test_alpa_dp unequal_stages_win: 93.4 ms against 92.9 ms), so ZeRO 3 is
 * the fallback where nothing else fits. */
static double layer_time(const alpa_point *p, int rc, int zero, int32_t B) {
  double t = zero == 3   ? p->time + 2 * p->gather_z3 + p->sync_z3 / B
             : zero >= 1 ? p->time + p->sync_z1 / B
                         : p->time + p->sync / B;
  return rc == PSIM_RECOMPUTE_FULL        ? t + p->fwd
         : rc == PSIM_RECOMPUTE_SELECTIVE ? t + p->fwd_attn
                                          : t;
}

static double layer_wmem(const alpa_point *p, int zero) {
  const double w[4] = {p->wmem, p->wmem_z1, p->wmem_z2, p->wmem_z3};
  return w[zero];
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
  T->t[off] = T->w[off] = T->w1[off] = T->a[off] = 0;
  T->amax[k] = T->gmax[k] = 0;
  for (int32_t l = 0; l < x->L; l++) {
    const alpa_point *p;
    PSIM_CHECK(psim_alpa_point(A, A->class_of[l], mesh, x->mb, level, &p));
    if (!p->ok)
      return PSIM_EFAILED; /* this mesh cannot run the layer */
    T->t[off + l + 1] = T->t[off + l] + layer_time(p, x->rc, x->zero, x->B);
    T->w[off + l + 1] = T->w[off + l] + layer_wmem(p, x->zero);
    T->w1[off + l + 1] = T->w1[off + l] + p->wmem_z1;
    T->a[off + l + 1] = T->a[off + l] + layer_act(p, x->rc);
    T->amax[k] = fmax(T->amax[k], p->act);
    /* ZeRO 3: the unit computing and the one prefetched ahead (a layer each at most) */
    T->gmax[k] = x->zero == 3 ? fmax(T->gmax[k], 2 * p->gbytes_z3) : 0;
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

/* Memory-lean ILPs (level > 0) only where the level before would not fit a
 * stage (of the base size n: S0 stages). */
static bool need_lean(dp_ctx *x, int32_t k) {
  dp_table *T = &x->tab;
  size_t off = (size_t)k * (size_t)(x->L + 1);
  return too_big(x->A, T->w[off + x->L], T->a[off + x->L], x->L, x->S0);
}

static bool has_size(const alpa *A, int32_t z) {
  for (int32_t me = 0; me < A->n_meshes; me++)
    if (A->meshes[me].n == z)
      return true;
  return false;
}

/* Time factor of device d against the device the ILPs were costed on: its
 * slowdown and its peak FLOP/s relative to the reference device's (mixed
 * A100/V100 clusters). */
static double device_factor(const alpa *A, int32_t d) {
  const psim_cluster *c = A->c;
  double ref = psim_device_peak_flops(c, 0, A->m->dtype);
  double f = c->devices[d].slowdown > 0 ? c->devices[d].slowdown : 1.0;
  double peak = psim_device_peak_flops(c, d, A->m->dtype);
  if (peak > 0 && ref > 0)
    f *= ref / peak > 1.0 ? ref / peak : 1.0;
  return f;
}

/* Stage sizes of the DP around base size n: Alpa's submesh shapes n / 2, n
 * and 2 n where they exist, on clusters whose devices are all alike (with
 * stragglers or mixed types every stage has n devices, placed in order, so
 * that the DP knows each stage's slowest device). */
static void make_band(const alpa *A, int32_t n, int32_t *nz, int32_t *z) {
  bool alike = !A->equal_stages;
  for (int32_t d = 0; d < A->c->n_devices && alike; d++)
    alike = device_factor(A, d) == 1.0;
  *nz = 0;
  if (alike && n % 2 == 0 && has_size(A, n / 2))
    z[(*nz)++] = n / 2;
  z[(*nz)++] = n;
  if (alike && 2 * n <= A->c->n_devices && has_size(A, 2 * n))
    z[(*nz)++] = 2 * n;
}

/* Whether mesh me takes part in the DP of base n at micro-batch size mb:
 * a mesh of the band's sizes where the micro-batch size is worth trying on
 * it (mb_wanted). */
static bool option_wanted(const alpa *A, int32_t n, int32_t me, int32_t mb) {
  int32_t nz, z[MAX_BAND];
  make_band(A, n, &nz, z);
  bool in = false;
  for (int32_t i = 0; i < nz; i++)
    in = in || A->meshes[me].n == z[i];
  return in && psim_alpa_mb_wanted(A, &A->meshes[me], A->mbs[mb]);
}

/* Whether some mesh of the base size tries micro-batch size mb. */
static bool base_wants(const alpa *A, int32_t n, int32_t mb) {
  for (int32_t me = 0; me < A->n_meshes; me++)
    if (A->meshes[me].n == n && psim_alpa_mb_wanted(A, &A->meshes[me], A->mbs[mb]))
      return true;
  return false;
}

static psim_status build_table(dp_ctx *x) {
  alpa *A = x->A;
  dp_table *T = &x->tab;
  T->n_ml = 0;
  for (int32_t zi = 0; zi < x->nz; zi++)
    for (int32_t me = 0; me < A->n_meshes; me++) {
      if (A->meshes[me].n != x->z[zi] || !option_wanted(A, x->n, me, x->mb))
        continue;
      for (int level = 0; level < LEVELS && T->n_ml < LEVELS * MAX_MESHES * MAX_BAND; level++) {
        if (level > 0 && !need_lean(x, T->n_ml - 1))
          break;
        psim_status st = fill_ml(x, T->n_ml, me, level);
        if (st == PSIM_EFAILED)
          break;
        PSIM_CHECK(st);
        T->zi[T->n_ml] = zi;
        T->ml[T->n_ml++] = me * LEVELS + level;
      }
    }
  return PSIM_OK;
}

static int32_t gcd(int32_t a, int32_t b) {
  return b == 0 ? a : gcd(b, a % b);
}

/* The DP's dimensions for base size n: the band, the device unit, the
 * surplus window (n), the most stages, the in-flight counts. */
static void dp_shape(dp_ctx *x, bool band) {
  make_band(x->A, x->n, &x->nz, x->z);
  if (!band) {
    x->nz = 1;
    x->z[0] = x->n;
  }
  x->u = 0;
  for (int32_t i = 0; i < x->nz; i++)
    x->u = gcd(x->z[i], x->u);
  x->W = x->nz > 1 ? x->n / x->u : 0;
  x->Smax = (x->N + x->W * x->u) / x->n;
  x->Smax = x->Smax < x->N / x->z[0] ? x->Smax : x->N / x->z[0];
  x->Smax = x->Smax < x->L ? x->Smax : x->L;
  x->F = x->Smax < x->B ? x->Smax : x->B;
}

/* Whether the pool of plans of different sizes is full and its worst
 * estimate at most a lower bound of this DP's objective, so that no plan of
 * it could enter the pool (the DP is then skipped, an exact pruning): every
 * plan's stage times sum to at least the sum over layers of each layer's
 * fastest option, and its slowest stage takes at least that sum over the
 * most stages and at least the slowest such layer. */
static bool pool_beats(const dp_ctx *x) {
  const alpa *A = x->A;
  double worst = 0, sum = 0, lmax = 0;
  int32_t count = 0;
  for (int32_t i = 0; i < A->n_top; i++)
    if (A->top[i].pool == 1) {
      count++;
      worst = fmax(worst, A->top[i].estimate);
    }
  if (count < TOP_UNEQUAL)
    return false;
  for (int32_t l = 0; l < x->L; l++) {
    double t = INFINITY;
    for (int32_t o = 0; o < x->tab.n_ml; o++) {
      size_t off = (size_t)o * (size_t)(x->L + 1);
      t = fmin(t, x->tab.t[off + l + 1] - x->tab.t[off + l]);
    }
    sum += t;
    lmax = fmax(lmax, t);
  }
  return sum + (x->B - 1) * fmax(sum / x->Smax, lmax) >= worst;
}

/* One DP; *found: whether a plan fits. A ZeRO 3 DP (its gathers cost more
 * than the weight all-gather after the step it saves, layer_time) runs only
 * where no plan fits with less (need_z3). */
static psim_status dp_run(alpa *A, int32_t n, int32_t mb, int rc, int zero, bool band, bool need_z3,
                          bool *found) {
  dp_ctx x = {.A = A, .L = A->m->n_layers, .N = A->c->n_devices, .n = n, .mb = mb, .rc = rc};
  x.zero = zero;
  x.S0 = x.N / n;
  x.B = (int32_t)(A->batch / A->mbs[mb]);
  dp_shape(&x, band);
  if ((band && x.nz == 1) || (zero == 3 && !need_z3))
    return PSIM_OK; /* no other size (the equal-stage DP was the whole search), or ZeRO 3 unneeded
                     */
  psim_status st = psim_alpa_dp_alloc(&x);
  for (int32_t i = 0; st == PSIM_OK && i < x.S0; i++) { /* stage i on devices i n.. (nz == 1) */
    x.slow[i] = 1.0;
    for (int32_t d = i * n; d < (i + 1) * n && d < x.N; d++)
      x.slow[i] = fmax(x.slow[i], device_factor(A, d));
  }
  if (st == PSIM_OK)
    st = build_table(&x);
  double t0 = psim_budget_thread_s(), ilp0 = A->ilp_s;
  if (st == PSIM_OK && x.tab.n_ml > 0 && (x.nz == 1 || !pool_beats(&x))) {
    psim_alpa_dp_tabulate(&x);
    st = psim_alpa_dp_enumerate(&x);
  }
  *found = *found || x.found;
  A->dp_s += psim_budget_thread_s() - t0 - (A->ilp_s - ilp0);
  psim_alpa_dp_free(&x);
  return st;
}

/* One configuration: the DP of equal stages (its plans in the pool of
 * TOP_K), then the DP of the band's sizes (a plan with stages of different
 * sizes in its own pool), so that stages of different sizes add candidates
 * and never displace the equal ones. */
static psim_status dp_config(alpa *A, int32_t n, int32_t mb, int rc, int zero, bool need_z3,
                             bool *found) {
  if (!base_wants(A, n, mb))
    return PSIM_OK;
  PSIM_CHECK(dp_run(A, n, mb, rc, zero, false, need_z3, found));
  return dp_run(A, n, mb, rc, zero, true, need_z3, found);
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
      if (!option_wanted(A, n, me, mb))
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
 * recomputation mode, each with ZeRO 0, the distributed optimizer and ZeRO 3
 * up to A->max_zero; the DP of each costs every stage under it, and the best
 * plans of all are kept. ZeRO 1 and 2 take the same time (gradsync.c) and 2
 * holds less, so with max_zero >= 2 one DP runs at ZeRO 2 and writes the
 * plans that fit with ZeRO 1 as ZeRO 1 (fits_zero1); ZeRO 3 is tried where
 * dp_run says. */
static psim_status memory_options(alpa *A, int32_t n, int32_t mb) {
  int rcs[3] = {PSIM_RECOMPUTE_NONE, PSIM_RECOMPUTE_SELECTIVE, PSIM_RECOMPUTE_FULL};
  int zs[3] = {0, A->max_zero >= 2 ? 2 : 1, 3}, nzs = A->max_zero < 1 ? 1 : A->max_zero < 3 ? 2 : 3;
  for (int r = 0; r < 3; r++) {
    bool found = false;
    for (int i = 0; i < nzs; i++) {
      if (A->fix.has_recompute && (int)A->fix.recompute != rcs[r])
        continue;
      if (psim_interrupted())
        return psim_error(PSIM_EINTERRUPTED, "alpa search interrupted");
      PSIM_CHECK(dp_config(A, n, mb, rcs[r], zs[i], !found, &found));
    }
  }
  return PSIM_OK;
}

psim_status psim_alpa_search_all(alpa *A) {
  for (int32_t n = 1; n <= A->c->n_devices; n++) {
    bool has = psim_alpa_is_base(A, n);
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
