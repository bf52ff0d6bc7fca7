/* profile.c - shapes to profile (model + cluster, or a grid), slicing under
 * the FLOP and byte caps, statistics, and the device-independent run loop
 * with progress, checkpoints and interruption (docs/profiling.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "costdb/profile/profile.h"
#include "sim/core/alloc.h"
#include "sim/core/clock.h"

void psim_profile_opts_init(psim_profile_opts *o) {
  memset(o, 0, sizeof *o);
  o->budget_s = 0.05;
  o->min_reps = 3;
  o->max_reps = 25;
  o->max_flops = 4e9;
  o->max_bytes = 256.0 * 1048576.0;
  o->save_every_s = 5;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Quantile q of sorted samples with linear interpolation (type 7). */
static double quantile(const double *s, int32_t n, double q) {
  double pos = q * (double)(n - 1);
  int32_t i = (int32_t)pos;
  return i + 1 < n ? s[i] + (pos - i) * (s[i + 1] - s[i]) : s[n - 1];
}

void psim_profile_summary(double *samples, int32_t n, double *median, double *iqr, double *min) {
  if (n <= 0) {
    *median = *iqr = *min = 0;
    return;
  }
  qsort(samples, (size_t)n, sizeof *samples, cmp_double);
  *median = quantile(samples, n, 0.5);
  *iqr = quantile(samples, n, 0.75) - quantile(samples, n, 0.25);
  *min = samples[0];
}

/* ---- slicing ---------------------------------------------------------- */

static double key_size(const psim_cost_key *k, double max_flops, double max_bytes) {
  double f = 0, b = 0;
  psim_costdb_key_work(k, &f, &b);
  return fmax(f / max_flops, b / max_bytes);
}

static double key_scale_work(const psim_cost_key *k) {
  double f = 0, b = 0;
  psim_costdb_key_work(k, &f, &b);
  bool compute =
      k->kind == PSIM_OP_MATMUL || k->kind == PSIM_OP_ATTENTION || k->kind == PSIM_OP_CONV2D;
  return compute ? f : b;
}

/* Dims that time is linear in, sliced first to last. */
static const char *slice_order(int32_t kind) {
  switch (kind) {
  case PSIM_OP_MATMUL: return "\0\1\2";
  case PSIM_OP_ATTENTION: return "\0\1";
  case PSIM_OP_CONV2D: return "\0\2\3";
  default: return "\0";
  }
}

static int slice_len(int32_t kind) {
  return kind == PSIM_OP_MATMUL || kind == PSIM_OP_CONV2D ? 3 : kind == PSIM_OP_ATTENTION ? 2 : 1;
}

void psim_profile_slice(const psim_cost_key *key, double max_flops, double max_bytes,
                        psim_cost_key *slice, double *scale) {
  *slice = *key;
  *scale = 1;
  double f = key_size(key, max_flops, max_bytes);
  const char *order = slice_order(key->kind);
  for (int i = 0; i < slice_len(key->kind) && f > 1; i++) {
    int d = order[i];
    int64_t ext = slice->shape[d], next = (int64_t)ceil((double)ext / f);
    next = next < 1 ? 1 : next;
    slice->shape[d] = next;
    bool pair = (key->kind == PSIM_OP_ELEMENTWISE && key->shape[1] == ext) ||
                (key->kind != PSIM_OP_ELEMENTWISE && key->n == 2 &&
                 psim_costdb_signature(key->kind)[0] == 'i');
    if (pair) /* un-broadcast second input / data movement out side: same ratio */
      slice->shape[1] = (int64_t)ceil((double)slice->shape[1] * (double)next / (double)ext);
    f = key_size(slice, max_flops, max_bytes);
  }
  if (!psim_cost_key_equal(slice, key))
    *scale = key_scale_work(key) / key_scale_work(slice);
}

/* ---- key sets ----------------------------------------------------------- */

static psim_status add_key(psim_key_set *set, const psim_cost_key *k) {
  psim_cost_entry e;
  memset(&e, 0, sizeof e);
  e.key = *k;
  e.median_s = e.min_s = 1; /* unused: the set only holds keys */
  e.count = 1;
  e.scale = 1;
  return psim_costdb_add(set, &e, PSIM_MERGE_REPLACE);
}

static psim_status add_both_passes(psim_key_set *set, psim_cost_key *k) {
  k->pass = PSIM_PASS_FWD;
  PSIM_CHECK(add_key(set, k));
  k->pass = PSIM_PASS_BWD;
  return add_key(set, k);
}

static psim_status grid_gemm(psim_dtype dt, psim_key_set *out) {
  psim_cost_key k;
  memset(&k, 0, sizeof k);
  k.kind = PSIM_OP_MATMUL, k.dtype = dt, k.n = 4, k.shape[0] = 1;
  for (int64_t m = 64; m <= 4096; m *= 2)
    for (int64_t n = 64; n <= 4096; n *= 2)
      for (int64_t kk = 64; kk <= 4096; kk *= 2) {
        k.shape[1] = m, k.shape[2] = n, k.shape[3] = kk;
        PSIM_CHECK(add_both_passes(out, &k));
      }
  return PSIM_OK;
}

static psim_status grid_memory(psim_dtype dt, psim_key_set *out) {
  static const int32_t row_kinds[] = {PSIM_OP_SOFTMAX, PSIM_OP_LAYERNORM, PSIM_OP_RMSNORM};
  static const char *const fns[] = {"add", "gelu"};
  psim_cost_key k;
  for (int64_t e = (int64_t)1 << 12; e <= (int64_t)1 << 24; e *= 4) {
    memset(&k, 0, sizeof k);
    k.dtype = dt;
    for (int f = 0; f < 2; f++) {
      k.kind = PSIM_OP_ELEMENTWISE, k.n = 2, k.shape[0] = e, k.shape[1] = f == 0 ? e : 0;
      snprintf(k.fn, sizeof k.fn, "%s", fns[f]);
      PSIM_CHECK(add_both_passes(out, &k));
    }
    k.fn[0] = '\0';
    k.kind = PSIM_OP_DROPOUT, k.n = 1;
    PSIM_CHECK(add_both_passes(out, &k));
    for (size_t r = 0; r < sizeof row_kinds / sizeof row_kinds[0]; r++)
      for (int64_t cols = 64; cols <= 16384 && cols <= e; cols *= 4) {
        k.kind = row_kinds[r], k.n = 2, k.shape[0] = e / cols, k.shape[1] = cols;
        PSIM_CHECK(add_both_passes(out, &k));
      }
    psim_costdb_key_adam(e, PSIM_DTYPE_FP32, &k);
    PSIM_CHECK(add_key(out, &k));
  }
  return PSIM_OK;
}

psim_status psim_profile_keys_grid(psim_dtype dt, psim_key_set *out) {
  PSIM_CHECK(grid_gemm(dt, out));
  return grid_memory(dt, out);
}

static bool splittable(psim_dim_use u) {
  return u == PSIM_USE_OUTPUT || u == PSIM_USE_CONTRACTED || u == PSIM_USE_WINDOW;
}

typedef struct enum_ctx {
  const psim_model *m;
  const psim_op *op;
  psim_dtype dtype;
  int32_t devices;
  int32_t degree[PSIM_MAX_OP_DIMS];
  psim_key_set *out;
} enum_ctx;

static psim_status emit_shard(enum_ctx *c) {
  int64_t sizes[PSIM_MAX_OP_DIMS];
  for (int32_t i = 0; i < c->op->n_dims; i++) {
    int64_t n = c->m->dims[c->op->dims[i].dim].size;
    sizes[i] = (n + c->degree[i] - 1) / c->degree[i]; /* largest shard sets the time */
  }
  psim_cost_key k;
  for (int p = 0; p < PSIM_PASS_COUNT; p++) {
    if (c->op->flops[p] <= 0 && c->op->bytes[p] <= 0)
      continue; /* free in the model (a view): nothing to measure */
    PSIM_CHECK(psim_costdb_key_from_op(c->m, c->op, sizes, (psim_pass)p, &k));
    if (c->dtype != PSIM_DTYPE_COUNT)
      k.dtype = c->dtype;
    PSIM_CHECK(add_key(c->out, &k));
  }
  return PSIM_OK;
}

/* Every power-of-two degree vector over dims i.. with product <= left. */
static psim_status enum_degrees(enum_ctx *c, int32_t i, int32_t left) {
  if (i == c->op->n_dims)
    return emit_shard(c);
  c->degree[i] = 1;
  PSIM_CHECK(enum_degrees(c, i + 1, left));
  int64_t size = c->m->dims[c->op->dims[i].dim].size;
  for (int32_t d = 2; splittable(c->op->dims[i].use) && d <= left && d <= size; d *= 2) {
    c->degree[i] = d;
    PSIM_CHECK(enum_degrees(c, i + 1, left / d));
  }
  c->degree[i] = 1;
  return PSIM_OK;
}

static psim_status weight_keys(const psim_model *m, int32_t devices, psim_key_set *out) {
  psim_cost_key k;
  for (int32_t t = 0; t < m->n_tensors; t++) {
    if (m->tensors[t].kind != PSIM_TENSOR_WEIGHT)
      continue;
    int64_t n = 1;
    for (int32_t r = 0; r < m->tensors[t].rank; r++)
      n *= m->dims[m->tensors[t].dims[r]].size;
    for (int32_t d = 1; d <= devices; d *= 2) {
      psim_costdb_key_adam((n + d - 1) / d, PSIM_DTYPE_FP32, &k); /* fp32 master weights */
      PSIM_CHECK(add_key(out, &k));
    }
  }
  return PSIM_OK;
}

psim_status psim_profile_keys_model(const psim_model *m, const psim_cluster *c, psim_dtype dtype,
                                    psim_key_set *out) {
  int32_t devices = c && c->n_devices > 0 ? c->n_devices : 1;
  for (int32_t i = 0; i < m->n_ops; i++) {
    if (m->ops[i].proto >= 0 && m->ops[i].proto != i)
      continue; /* repeats of a block have the shapes of the first */
    enum_ctx ctx = {m, &m->ops[i], dtype, devices, {0}, out};
    PSIM_CHECK(enum_degrees(&ctx, 0, devices));
  }
  return weight_keys(m, devices, out);
}

/* ---- the run loop ----------------------------------------------------- */

/* Measures key (through its slice when over the caps) into *e. */
static psim_status measure_one(psim_costdb *db, const psim_cost_key *key,
                               psim_profile_measure_fn measure, const psim_profile_opts *o,
                               psim_cost_entry *e, bool *scaled) {
  psim_cost_key slice;
  double scale = 1;
  psim_profile_slice(key, o->max_flops, o->max_bytes, &slice, &scale);
  *scaled = scale > 1;
  const psim_cost_entry *have = *scaled ? psim_costdb_find(db, &slice) : NULL;
  if (have) {
    *e = *have;
  } else {
    PSIM_CHECK(measure(&slice, o, e));
    if (*scaled)
      PSIM_CHECK(psim_costdb_add(db, e, PSIM_MERGE_REPLACE)); /* a real measurement too */
  }
  e->key = *key;
  e->median_s *= scale, e->iqr_s *= scale, e->min_s *= scale;
  e->scale = scale;
  return PSIM_OK;
}

static void progress(const psim_profile_opts *o, size_t done, size_t total,
                     const psim_cost_entry *e, double t0) {
  if (!o->progress)
    return;
  char buf[160];
  psim_cost_key_format(&e->key, buf, sizeof buf);
  fprintf(stderr, "\rprofile: %zu/%zu  %.0f s  %-60.60s %10.3g s\033[K", done, total,
          psim_clock_now_s() - t0, buf, e->median_s);
  fflush(stderr);
}

static psim_status checkpoint(psim_costdb *db, const psim_profile_opts *o, double *last) {
  if (!o->save_path)
    return PSIM_OK;
  *last = psim_clock_now_s();
  return psim_costdb_save(db, o->save_path);
}

static psim_status run_keys(psim_costdb *db, const psim_key_set *keys,
                            psim_profile_measure_fn measure, const psim_profile_opts *o,
                            psim_profile_stats *st, double t0) {
  double last = t0;
  char first_unsupported[512] = "";
  for (size_t i = 0; i < keys->n_entries; i++) {
    if (o->interrupt && *o->interrupt)
      return psim_error(PSIM_EINTERRUPTED, "interrupted after %zu measurements", st->measured);
    const psim_cost_key *key = &keys->entries[i].key;
    if (psim_costdb_find(db, key)) {
      st->skipped++;
      continue;
    }
    psim_cost_entry e;
    bool scaled = false;
    psim_status s = measure_one(db, key, measure, o, &e, &scaled);
    if (s == PSIM_EUNIMPLEMENTED) {
      if (!st->unsupported++)
        snprintf(first_unsupported, sizeof first_unsupported, "%s", psim_error_message());
      continue;
    }
    PSIM_CHECK(s);
    PSIM_CHECK(psim_costdb_add(db, &e, PSIM_MERGE_REPLACE));
    st->measured++, st->scaled += scaled;
    progress(o, i + 1, keys->n_entries, &e, t0);
    if (o->save_path && psim_clock_now_s() - last >= o->save_every_s)
      PSIM_CHECK(checkpoint(db, o, &last));
  }
  if (st->unsupported)
    psim_error(PSIM_OK, "%s", first_unsupported);
  return PSIM_OK;
}

psim_status psim_profile_run(psim_costdb *db, const psim_key_set *keys,
                             psim_profile_measure_fn measure, const psim_profile_opts *o,
                             psim_profile_stats *stats) {
  psim_profile_stats local;
  psim_profile_stats *st = stats ? stats : &local;
  memset(st, 0, sizeof *st);
  double t0 = psim_clock_now_s(), last = t0;
  psim_status s = run_keys(db, keys, measure, o, st, t0);
  if (o->progress)
    fprintf(stderr, "\n");
  if (s == PSIM_OK || s == PSIM_EINTERRUPTED) {
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", psim_error_message());
    psim_status cs = checkpoint(db, o, &last);
    if (cs != PSIM_OK)
      s = cs;
    else
      psim_error(s, "%s", msg); /* keep the run's message */
  }
  st->wall_s = psim_clock_now_s() - t0;
  return s;
}
