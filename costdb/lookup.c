/* lookup.c - exact lookup, interpolation between measured entries and
 * fitted efficiency curves for the roofline (costdb/cost.h; DESIGN.md 5). */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "costdb/cost.h"
#include "costdb/costdb.h"

/* Most neighbours a local fit may use (a fixed stack buffer: no allocation). */
#define MAX_NEIGHBOURS 64
/* Local-fit terms: intercept + one slope per shape dim. */
#define MAX_TERMS (PSIM_COSTDB_MAX_SHAPE + 1)
/* Ridge on the slopes, relative to the summed weights: keeps the fit defined
 * when neighbours do not span a dim (a shape dim constant in the group). */
#define RIDGE 1e-3
/* Clamp of an interpolated log(time/work) to the neighbours' range, in
 * natural-log units (0.2 = 22%): a local fit never extrapolates wildly. */
#define CLAMP_LOG 0.2

void psim_costdb_interp_opts_init(psim_costdb_interp_opts *o) {
  o->neighbours = 0;
  o->max_outside = 1.0;
}

static bool same_group(const psim_cost_key *a, const psim_cost_key *b) {
  return a->kind == b->kind && a->dtype == b->dtype && a->pass == b->pass && a->n == b->n &&
         strncmp(a->fn, b->fn, PSIM_COSTDB_FN_LEN) == 0;
}

/* GEMM-like kinds scale with FLOPs (the Adam kind is none of them). */
static bool compute_bound(int32_t kind) {
  return kind >= 0 && kind < PSIM_OP_KIND_COUNT && psim_cost_is_gemm((psim_op_kind)kind);
}

/* The quantity time scales with: FLOPs for compute-bound kinds, else bytes. */
static double key_scale(const psim_cost_key *k) {
  double f = 0, b = 0;
  psim_costdb_key_work(k, &f, &b);
  double w = compute_bound(k->kind) ? f : b;
  return w > 0 ? w : 1;
}

static void key_point(const psim_cost_key *k, double *x) {
  for (int32_t i = 0; i < k->n; i++)
    x[i] = log2(1.0 + (double)k->shape[i]);
}

typedef struct neighbour {
  double d2;
  size_t e;
} neighbour;

/* Keeps the k nearest in nb[0..*n) sorted by distance (insertion). */
static void keep_nearest(neighbour *nb, int *n, int k, double d2, size_t e) {
  assert(k >= 1 && k <= MAX_NEIGHBOURS && *n <= k);
  if (*n == k && d2 >= nb[k - 1].d2)
    return;
  int i = *n < k ? (*n)++ : k - 1;
  while (i > 0 && nb[i - 1].d2 > d2) {
    nb[i] = nb[i - 1];
    i--;
  }
  nb[i] = (neighbour){d2, e};
}

/* Gathers the nearest group members; false when the query lies outside the
 * measured range (plus max_outside) in some dim or the group is too small. */
/* Measured extents bracketing the query in each dim (the grid cell). */
typedef struct bracket {
  int64_t below[PSIM_COSTDB_MAX_SHAPE], above[PSIM_COSTDB_MAX_SHAPE];
} bracket;

static void bracket_update(bracket *b, const psim_cost_key *q, const psim_cost_key *e) {
  for (int32_t i = 0; i < q->n; i++) {
    int64_t v = e->shape[i];
    if (v <= q->shape[i] && (b->below[i] < 0 || v > b->below[i]))
      b->below[i] = v;
    if (v >= q->shape[i] && (b->above[i] < 0 || v < b->above[i]))
      b->above[i] = v;
  }
}

static bool gather(const psim_costdb *db, const psim_cost_key *key, const double *xq,
                   double max_outside, int k, neighbour *nb, int *n, bracket *br) {
  double lo[PSIM_COSTDB_MAX_SHAPE], hi[PSIM_COSTDB_MAX_SHAPE], x[PSIM_COSTDB_MAX_SHAPE];
  for (int32_t i = 0; i < key->n; i++)
    lo[i] = INFINITY, hi[i] = -INFINITY, br->below[i] = br->above[i] = -1;
  *n = 0;
  for (size_t e = 0; e < db->n_entries; e++) {
    if (!same_group(&db->entries[e].key, key))
      continue;
    key_point(&db->entries[e].key, x);
    double d2 = 0;
    for (int32_t i = 0; i < key->n; i++) {
      d2 += (x[i] - xq[i]) * (x[i] - xq[i]);
      lo[i] = fmin(lo[i], x[i]);
      hi[i] = fmax(hi[i], x[i]);
    }
    bracket_update(br, key, &db->entries[e].key);
    keep_nearest(nb, n, k, d2, e);
  }
  for (int32_t i = 0; i < key->n && *n >= 2; i++)
    if (xq[i] < lo[i] - max_outside || xq[i] > hi[i] + max_outside)
      return false;
  return *n >= 2;
}

/* Solves a p x p symmetric positive definite system in place (Cholesky-free
 * Gaussian elimination with partial pivoting); false when singular. */
static bool solve(double a[MAX_TERMS][MAX_TERMS], double *b, int p) {
  for (int c = 0; c < p; c++) {
    int piv = c;
    for (int r = c + 1; r < p; r++)
      if (fabs(a[r][c]) > fabs(a[piv][c]))
        piv = r;
    if (fabs(a[piv][c]) < 1e-300)
      return false;
    for (int j = 0; j < p; j++) {
      double t = a[c][j];
      a[c][j] = a[piv][j], a[piv][j] = t;
    }
    double t = b[c];
    b[c] = b[piv], b[piv] = t;
    for (int r = c + 1; r < p; r++) {
      double f = a[r][c] / a[c][c];
      for (int j = c; j < p; j++)
        a[r][j] -= f * a[c][j];
      b[r] -= f * b[c];
    }
  }
  for (int c = p - 1; c >= 0; c--) {
    for (int j = c + 1; j < p; j++)
      b[c] -= a[c][j] * b[j];
    b[c] /= a[c][c];
  }
  return true;
}

/* LOESS-style local linear fit at xq with tricube weights. */
static bool local_fit(const psim_costdb *db, const psim_cost_key *key, const double *xq,
                      const neighbour *nb, int n, double *y_out) {
  assert(n >= 2 && n <= MAX_NEIGHBOURS && key->n >= 1 && key->n <= PSIM_COSTDB_MAX_SHAPE);
  int p = key->n + 1;
  double a[MAX_TERMS][MAX_TERMS] = {{0}}, rhs[MAX_TERMS] = {0}, x[PSIM_COSTDB_MAX_SHAPE];
  double h = sqrt(nb[n - 1].d2) * 1.1 + 1e-9, ylo = INFINITY, yhi = -INFINITY, wsum = 0;
  for (int i = 0; i < n; i++) {
    const psim_cost_entry *e = &db->entries[nb[i].e];
    double u = sqrt(nb[i].d2) / h, w = pow(1 - u * u * u, 3);
    double y = log(e->median_s / key_scale(&e->key)), z[MAX_TERMS] = {1};
    key_point(&e->key, x);
    for (int32_t j = 0; j < key->n; j++)
      z[j + 1] = x[j] - xq[j];
    for (int r = 0; r < p; r++) {
      rhs[r] += w * z[r] * y;
      for (int c = 0; c < p; c++)
        a[r][c] += w * z[r] * z[c];
    }
    wsum += w, ylo = fmin(ylo, y), yhi = fmax(yhi, y);
  }
  for (int r = 1; r < p; r++)
    a[r][r] += RIDGE * wsum;
  if (!solve(a, rhs, p) || !isfinite(rhs[0]))
    return false;
  *y_out = fmin(fmax(rhs[0], ylo - CLAMP_LOG), yhi + CLAMP_LOG);
  return true;
}

/* Multilinear interpolation of log(time/work) in log2(shape) over the 2^n
 * corners of the enclosing grid cell, when every corner was measured (grids
 * and power-of-two shard shapes): second-order accurate, unlike the local
 * linear fit, which is the fallback for scattered measurements. */
static bool cell_fit(const psim_costdb *db, const psim_cost_key *key, const bracket *br,
                     double *y_out) {
  int32_t n = key->n;
  assert(n >= 1 && n <= PSIM_COSTDB_MAX_SHAPE);
  double t[PSIM_COSTDB_MAX_SHAPE], y = 0;
  for (int32_t i = 0; i < n; i++) {
    if (br->below[i] < 0 || br->above[i] < 0)
      return false;
    double lo = log2(1.0 + (double)br->below[i]), hi = log2(1.0 + (double)br->above[i]);
    t[i] = hi > lo ? (log2(1.0 + (double)key->shape[i]) - lo) / (hi - lo) : 0;
  }
  for (uint32_t c = 0; c < (1u << n); c++) {
    psim_cost_key corner = *key;
    double w = 1;
    for (int32_t i = 0; i < n; i++) {
      bool up = (c >> i) & 1u;
      if (up && br->above[i] == br->below[i])
        w = 0; /* collapsed dim: count its corner once */
      corner.shape[i] = up ? br->above[i] : br->below[i];
      w *= up ? t[i] : 1 - t[i];
    }
    if (w == 0)
      continue;
    const psim_cost_entry *e = psim_costdb_find(db, &corner);
    if (!e)
      return false;
    y += w * log(e->median_s / key_scale(&e->key));
  }
  *y_out = y;
  return isfinite(y);
}

bool psim_costdb_lookup(const psim_costdb *db, const psim_cost_key *key,
                        const psim_costdb_interp_opts *opts, double *seconds,
                        psim_cost_origin *origin) {
  const psim_cost_entry *e = psim_costdb_find(db, key);
  if (e) {
    *seconds = e->median_s;
    *origin = e->scale > 1 ? PSIM_ORIGIN_INTERPOLATED : PSIM_ORIGIN_MEASURED;
    return true;
  }
  if (!db || key->n < 1 || key->n > PSIM_COSTDB_MAX_SHAPE)
    return false;
  psim_costdb_interp_opts def;
  psim_costdb_interp_opts_init(&def);
  if (!opts)
    opts = &def;
  int k = opts->neighbours > 0 ? opts->neighbours : 3 * (key->n + 1);
  k = k > MAX_NEIGHBOURS ? MAX_NEIGHBOURS : k;
  neighbour nb[MAX_NEIGHBOURS];
  double xq[PSIM_COSTDB_MAX_SHAPE], y = 0;
  int n = 0;
  bracket br;
  key_point(key, xq);
  if (!gather(db, key, xq, opts->max_outside, k, nb, &n, &br))
    return false;
  if (!cell_fit(db, key, &br, &y) && !local_fit(db, key, xq, nb, n, &y))
    return false;
  *seconds = exp(y) * key_scale(key);
  *origin = PSIM_ORIGIN_INTERPOLATED;
  return true;
}

/* ---- efficiency fitting ----------------------------------------------- */

/* t = alpha f + beta minimising relative errors: rows (f/t, 1/t) -> 1. */
static int fit_gemm(const psim_costdb *db, psim_dtype dtype, double *alpha, double *beta) {
  double s11 = 0, s12 = 0, s22 = 0, r1 = 0, r2 = 0;
  int n = 0;
  for (size_t i = 0; i < db->n_entries; i++) {
    const psim_cost_entry *e = &db->entries[i];
    if (e->key.kind != PSIM_OP_MATMUL || e->key.dtype != dtype || e->key.pass != PSIM_PASS_FWD)
      continue;
    double f = 0, b = 0;
    psim_costdb_key_work(&e->key, &f, &b);
    double u = f / e->median_s, v = 1 / e->median_s;
    s11 += u * u, s12 += u * v, s22 += v * v, r1 += u, r2 += v, n++;
  }
  double det = s11 * s22 - s12 * s12;
  if (n < 3 || det <= 0)
    return 0;
  *alpha = (r1 * s22 - r2 * s12) / det;
  *beta = (s11 * r2 - s12 * r1) / det;
  if (*beta < 0) /* no fixed cost: refit through the origin */
    *beta = 0, *alpha = r1 / s11;
  return *alpha > 0;
}

/* t = c * bytes for memory-bound kernels of at least 1 MiB (smaller ones are
 * dominated by fixed costs, which launch_s covers). */
static int fit_mem(const psim_costdb *db, psim_dtype dtype, double *c) {
  double s = 0, s2 = 0;
  int n = 0;
  for (size_t i = 0; i < db->n_entries; i++) {
    const psim_cost_entry *e = &db->entries[i];
    double f = 0, b = 0;
    if (compute_bound(e->key.kind) || e->key.kind == PSIM_OP_EMBEDDING || e->key.dtype != dtype)
      continue;
    psim_costdb_key_work(&e->key, &f, &b);
    if (b < 1048576.0)
      continue;
    s += b / e->median_s, s2 += (b / e->median_s) * (b / e->median_s), n++;
  }
  if (n < 3)
    return 0;
  *c = s / s2;
  return 1;
}

psim_status psim_costdb_fit_efficiency(const psim_costdb *db, const psim_device_type *dt,
                                       psim_dtype dtype, psim_efficiency *out) {
  *out = dt->eff;
  double alpha = 0, beta = 0, c = 0, peak = psim_cost_peak_flops(dt, dtype, true);
  if (peak <= 0 || dt->mem_bw <= 0)
    return psim_error(PSIM_EINPUT, "device type '%s' has no peak FLOP/s or memory bandwidth",
                      dt->name ? dt->name : "?");
  if (fit_gemm(db, dtype, &alpha, &beta)) {
    out->gemm_max = fmin(1.0, 1.0 / (peak * alpha));
    out->gemm_half_flops = beta / alpha;
  }
  if (fit_mem(db, dtype, &c))
    out->mem = fmin(1.0, 1.0 / (c * dt->mem_bw));
  return PSIM_OK;
}
