/* test_costdb.c - cost database: keys, round trip, merge, exact and
 * interpolated lookup, crash-safe saving under concurrent writers and
 * SIGKILL, corrupt files. */
#include <check.h>
#include <dirent.h>
#include <glob.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "costdb/cost.h"
#include "costdb/costdb.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"

static psim_cost_entry gemm_entry(int64_t m, int64_t n, int64_t k, double t) {
  psim_cost_entry e;
  memset(&e, 0, sizeof e);
  e.key.kind = PSIM_OP_MATMUL;
  e.key.dtype = PSIM_DTYPE_FP32;
  e.key.pass = PSIM_PASS_FWD;
  e.key.n = 4;
  e.key.shape[0] = 1, e.key.shape[1] = m, e.key.shape[2] = n, e.key.shape[3] = k;
  e.median_s = e.min_s = t;
  e.iqr_s = t * 0.01;
  e.count = 5;
  e.scale = 1;
  return e;
}

static void tmp_path(char *buf, size_t n, const char *tag) {
  snprintf(buf, n, "/tmp/psim_costdb_%s_%ld.json", tag, (long)getpid());
  remove(buf);
}

static void remove_db(const char *path) {
  char lock[300];
  snprintf(lock, sizeof lock, "%s.lock", path);
  remove(path);
  remove(lock);
}

START_TEST(add_find_and_hash_growth) {
  psim_costdb db;
  psim_costdb_init(&db);
  for (int64_t i = 1; i <= 1000; i++) {
    psim_cost_entry e = gemm_entry(i, 2 * i, 3, (double)i);
    ck_assert_int_eq(psim_costdb_add(&db, &e, PSIM_MERGE_REPLACE), PSIM_OK);
  }
  ck_assert_uint_eq(db.n_entries, 1000);
  for (int64_t i = 1; i <= 1000; i++) {
    psim_cost_entry e = gemm_entry(i, 2 * i, 3, 0);
    const psim_cost_entry *f = psim_costdb_find(&db, &e.key);
    ck_assert_ptr_nonnull(f);
    ck_assert_double_eq(f->median_s, (double)i);
  }
  psim_cost_entry miss = gemm_entry(5, 10, 4, 0);
  ck_assert_ptr_null(psim_costdb_find(&db, &miss.key));
  miss = gemm_entry(5, 10, 3, 0);
  miss.key.pass = PSIM_PASS_BWD; /* same shape, other pass: another key */
  ck_assert_ptr_null(psim_costdb_find(&db, &miss.key));
  miss.key.n = PSIM_COSTDB_MAX_SHAPE + 1; /* a malformed key: refused, never found */
  ck_assert_ptr_null(psim_costdb_find(&db, &miss.key));
  ck_assert_int_eq(psim_costdb_add(&db, &miss, PSIM_MERGE_REPLACE), PSIM_EINPUT);
  ck_assert_uint_eq(db.n_entries, 1000);
  psim_costdb_destroy(&db);
}
END_TEST

START_TEST(merge_combine_and_replace) {
  psim_costdb a, b;
  psim_costdb_init(&a);
  psim_costdb_init(&b);
  psim_cost_entry e1 = gemm_entry(64, 64, 64, 1.0), e2 = gemm_entry(64, 64, 64, 4.0);
  e1.count = 1, e2.count = 3, e2.min_s = 0.5, e1.min_s = 0.9;
  psim_cost_entry other = gemm_entry(128, 64, 64, 2.0);
  ck_assert_int_eq(psim_costdb_add(&a, &e1, PSIM_MERGE_REPLACE), PSIM_OK);
  ck_assert_int_eq(psim_costdb_add(&b, &e2, PSIM_MERGE_REPLACE), PSIM_OK);
  ck_assert_int_eq(psim_costdb_add(&b, &other, PSIM_MERGE_REPLACE), PSIM_OK);
  ck_assert_int_eq(psim_costdb_merge(&a, &b, PSIM_MERGE_COMBINE), PSIM_OK);
  ck_assert_uint_eq(a.n_entries, 2);
  const psim_cost_entry *f = psim_costdb_find(&a, &e1.key);
  ck_assert_double_eq_tol(f->median_s, (1.0 * 1 + 4.0 * 3) / 4, 1e-12); /* count-weighted */
  ck_assert_int_eq(f->count, 4);
  ck_assert_double_eq(f->min_s, 0.5);
  ck_assert_int_eq(psim_costdb_merge(&a, &b, PSIM_MERGE_REPLACE), PSIM_OK);
  ck_assert_double_eq(psim_costdb_find(&a, &e1.key)->median_s, 4.0);
  ck_assert_uint_eq(a.n_entries, 2);
  psim_costdb_destroy(&a);
  psim_costdb_destroy(&b);
}
END_TEST

static void fill_mixed(psim_costdb *db) {
  snprintf(db->fp.device, sizeof db->fp.device, "cpu");
  snprintf(db->fp.name, sizeof db->fp.name, "Test CPU \"quoted\"");
  snprintf(db->fp.library, sizeof db->fp.library, "OpenBLAS test");
  db->fp.cores = 2, db->fp.threads = 1;
  psim_cost_entry e = gemm_entry(128, 256, 512, 1.25e-4);
  e.scale = 4;
  ck_assert_int_eq(psim_costdb_add(db, &e, PSIM_MERGE_REPLACE), PSIM_OK);
  memset(&e.key, 0, sizeof e.key);
  e.key.kind = PSIM_OP_ELEMENTWISE, e.key.n = 2, e.key.shape[0] = 4096, e.key.shape[1] = 0;
  e.key.pass = PSIM_PASS_BWD, e.key.dtype = PSIM_DTYPE_BF16, e.scale = 1;
  snprintf(e.key.fn, sizeof e.key.fn, "gelu");
  ck_assert_int_eq(psim_costdb_add(db, &e, PSIM_MERGE_REPLACE), PSIM_OK);
  psim_costdb_key_adam(1 << 20, PSIM_DTYPE_FP32, &e.key);
  e.median_s = e.min_s = 3e-3;
  ck_assert_int_eq(psim_costdb_add(db, &e, PSIM_MERGE_REPLACE), PSIM_OK);
  double bytes[] = {1024, 1048576}, bw[] = {1e9, 2e10};
  psim_coll_table t = {PSIM_COLL_ALL_REDUCE, 8, true, 2, bytes, bw};
  ck_assert_int_eq(psim_costdb_add_coll(db, &t), PSIM_OK);
}

START_TEST(round_trip) {
  char path[256];
  tmp_path(path, sizeof path, "rt");
  psim_costdb db, back;
  psim_costdb_init(&db);
  psim_costdb_init(&back);
  fill_mixed(&db);
  ck_assert_int_eq(psim_costdb_save(&db, path), PSIM_OK);
  ck_assert_int_eq(psim_costdb_load(path, &back), PSIM_OK);
  ck_assert_uint_eq(back.n_entries, db.n_entries);
  for (size_t i = 0; i < db.n_entries; i++) {
    const psim_cost_entry *f = psim_costdb_find(&back, &db.entries[i].key);
    ck_assert_ptr_nonnull(f);
    ck_assert_double_eq_tol(f->median_s, db.entries[i].median_s, 1e-15);
    ck_assert_double_eq_tol(f->scale, db.entries[i].scale, 1e-12);
    ck_assert_int_eq(f->count, db.entries[i].count);
  }
  ck_assert_str_eq(back.fp.name, db.fp.name);
  ck_assert_int_eq(back.fp.cores, 2);
  ck_assert_int_eq(back.n_colls, 1);
  ck_assert_double_eq(back.colls[0].busbw[1], 2e10);
  ck_assert_int_eq(back.colls[0].group_size, 8);
  ck_assert_int_eq(psim_costdb_check_file(path), PSIM_OK);
  psim_costdb_destroy(&db);
  psim_costdb_destroy(&back);
  remove_db(path);
}
END_TEST

START_TEST(save_merges_with_file_and_refuses_other_device) {
  char path[256];
  tmp_path(path, sizeof path, "merge");
  psim_costdb a, b, back;
  psim_costdb_init(&a);
  psim_costdb_init(&b);
  psim_costdb_init(&back);
  psim_cost_entry e = gemm_entry(64, 64, 64, 1.0);
  psim_costdb_add(&a, &e, PSIM_MERGE_REPLACE);
  e = gemm_entry(128, 64, 64, 2.0);
  psim_costdb_add(&a, &e, PSIM_MERGE_REPLACE);
  e = gemm_entry(128, 64, 64, 3.0); /* newer measurement of the same key */
  psim_costdb_add(&b, &e, PSIM_MERGE_REPLACE);
  e = gemm_entry(256, 64, 64, 4.0);
  psim_costdb_add(&b, &e, PSIM_MERGE_REPLACE);
  ck_assert_int_eq(psim_costdb_save(&a, path), PSIM_OK);
  ck_assert_int_eq(psim_costdb_save(&b, path), PSIM_OK);
  ck_assert_int_eq(psim_costdb_load(path, &back), PSIM_OK);
  ck_assert_uint_eq(back.n_entries, 3);
  e = gemm_entry(128, 64, 64, 0);
  ck_assert_double_eq(psim_costdb_find(&back, &e.key)->median_s, 3.0);
  snprintf(a.fp.device, sizeof a.fp.device, "cpu");
  snprintf(b.fp.device, sizeof b.fp.device, "cuda");
  snprintf(b.fp.name, sizeof b.fp.name, "Some GPU");
  ck_assert_int_eq(psim_costdb_save(&a, path), PSIM_OK);
  ck_assert_int_eq(psim_costdb_save(&b, path), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), path));
  psim_costdb_destroy(&a);
  psim_costdb_destroy(&b);
  psim_costdb_destroy(&back);
  remove_db(path);
}
END_TEST

/* Child c saves entries (c, i) for i < n, saving after every entry. */
static void child_saver(const char *path, int c, int n) {
  psim_costdb db;
  psim_costdb_init(&db);
  for (int i = 0; i < n; i++) {
    psim_cost_entry e = gemm_entry(1000 + c, 1 + i, 7, 1.0 + c + 0.001 * i);
    if (psim_costdb_add(&db, &e, PSIM_MERGE_REPLACE) != PSIM_OK ||
        psim_costdb_save(&db, path) != PSIM_OK) {
      fprintf(stderr, "child %d: %s\n", c, psim_error_message());
      _exit(1);
    }
  }
  _exit(0);
}

START_TEST(concurrent_savers_lose_nothing) {
  enum { CHILDREN = 4, PER = 25 };
  char path[256];
  tmp_path(path, sizeof path, "conc");
  pid_t pids[CHILDREN];
  for (int c = 0; c < CHILDREN; c++) {
    pids[c] = fork();
    ck_assert_int_ge(pids[c], 0);
    if (pids[c] == 0)
      child_saver(path, c, PER);
  }
  for (int c = 0; c < CHILDREN; c++) {
    int st = 0;
    waitpid(pids[c], &st, 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  psim_costdb db;
  psim_costdb_init(&db);
  ck_assert_int_eq(psim_costdb_load(path, &db), PSIM_OK);
  ck_assert_uint_eq(db.n_entries, CHILDREN * PER);
  for (int c = 0; c < CHILDREN; c++)
    for (int i = 0; i < PER; i++) {
      psim_cost_entry e = gemm_entry(1000 + c, 1 + i, 7, 0);
      const psim_cost_entry *f = psim_costdb_find(&db, &e.key);
      ck_assert_ptr_nonnull(f);
      ck_assert_double_eq_tol(f->median_s, 1.0 + c + 0.001 * i, 1e-12);
    }
  psim_costdb_destroy(&db);
  remove_db(path);
}
END_TEST

START_TEST(sigkill_never_leaves_half_written_file) {
  char path[256];
  tmp_path(path, sizeof path, "kill");
  psim_costdb base;
  psim_costdb_init(&base);
  for (int i = 0; i < 300; i++) { /* a sizeable file so a write takes a while */
    psim_cost_entry e = gemm_entry(1 + i, 3, 5, 1e-3);
    psim_costdb_add(&base, &e, PSIM_MERGE_REPLACE);
  }
  ck_assert_int_eq(psim_costdb_save(&base, path), PSIM_OK);
  srand(12345);
  for (int round = 0; round < 8; round++) {
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
      child_saver(path, 10 + round, 1000000); /* saves until killed */
    struct timespec ts = {0, (20 + rand() % 120) * 1000000L};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    psim_costdb db;
    psim_costdb_init(&db);
    ck_assert_int_eq(psim_costdb_load(path, &db), PSIM_OK);
    /* every base entry survives, and each child's saved entries form a prefix */
    for (size_t i = 0; i < base.n_entries; i++)
      ck_assert_ptr_nonnull(psim_costdb_find(&db, &base.entries[i].key));
    for (int r = 0; r <= round; r++) {
      int seen = 0;
      for (int i = 0; i < 1000000; i++) {
        psim_cost_entry e = gemm_entry(1000 + 10 + r, 1 + i, 7, 0);
        if (!psim_costdb_find(&db, &e.key))
          break;
        seen++;
      }
      size_t later = 0;
      for (size_t i = 0; i < db.n_entries; i++)
        later += db.entries[i].key.shape[1] == 1010 + r;
      ck_assert_uint_eq(later, (size_t)seen);
    }
    psim_costdb_destroy(&db);
  }
  psim_costdb_destroy(&base);
  remove_db(path);
  /* killed savers may leave their temporary files: never read, removed here */
  char pattern[300];
  glob_t g;
  snprintf(pattern, sizeof pattern, "%s.tmp.*", path);
  if (glob(pattern, 0, NULL, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; i++)
      remove(g.gl_pathv[i]);
  globfree(&g);
}
END_TEST

START_TEST(lookup_exact_interpolated_and_not_found) {
  psim_costdb db;
  psim_costdb_init(&db);
  /* t = 2mnk / 1e11 exactly: the interpolator works in time per FLOP, so a
   * constant rate must be reproduced exactly between grid points. */
  for (int64_t m = 64; m <= 1024; m *= 2)
    for (int64_t n = 64; n <= 1024; n *= 2)
      for (int64_t k = 64; k <= 1024; k *= 2) {
        psim_cost_entry e = gemm_entry(m, n, k, 2.0 * m * n * k / 1e11);
        psim_costdb_add(&db, &e, PSIM_MERGE_REPLACE);
      }
  double t = 0;
  psim_cost_origin src;
  psim_cost_entry q = gemm_entry(256, 512, 128, 0);
  ck_assert(psim_costdb_lookup(&db, &q.key, NULL, &t, &src));
  ck_assert_int_eq(src, PSIM_ORIGIN_MEASURED);
  ck_assert_double_eq_tol(t, 2.0 * 256 * 512 * 128 / 1e11, 1e-15);
  q = gemm_entry(300, 700, 100, 0);
  ck_assert(psim_costdb_lookup(&db, &q.key, NULL, &t, &src));
  ck_assert_int_eq(src, PSIM_ORIGIN_INTERPOLATED);
  ck_assert_double_eq_tol(t / (2.0 * 300 * 700 * 100 / 1e11), 1.0, 1e-6);
  q = gemm_entry(300, 700, 100000, 0); /* far outside the measured range */
  ck_assert(!psim_costdb_lookup(&db, &q.key, NULL, &t, &src));
  q = gemm_entry(300, 700, 100, 0);
  q.key.dtype = PSIM_DTYPE_BF16; /* no bf16 measurements */
  ck_assert(!psim_costdb_lookup(&db, &q.key, NULL, &t, &src));
  psim_costdb_destroy(&db);
}
END_TEST

/* A hand-built model: x[b, s, h] @ w[h, f] -> y[b, s, f]; and a batched
 * activation matmul q[b, n, s, d] @ k[b, n, t, d] -> p[b, n, s, t]. */
static void tiny_model(psim_model *m, psim_dim *dims, psim_tensor *ts, psim_op *ops) {
  memset(m, 0, sizeof *m);
  const char *names[] = {"b", "s", "h", "f", "n", "t", "d"};
  int64_t sizes[] = {8, 128, 256, 1024, 4, 128, 64};
  for (int i = 0; i < 7; i++)
    dims[i] = (psim_dim){(char *)names[i], sizes[i], PSIM_ROLE_NONE};
  dims[4].role = PSIM_ROLE_HEADS;
  int32_t td[6][4] = {{0, 1, 2}, {2, 3}, {0, 1, 3}, {0, 4, 1, 6}, {0, 4, 5, 6}, {0, 4, 1, 5}};
  int32_t rank[6] = {3, 2, 3, 4, 4, 4};
  psim_tensor_kind kinds[6] = {PSIM_TENSOR_INPUT, PSIM_TENSOR_WEIGHT, PSIM_TENSOR_ACTIVATION,
                               PSIM_TENSOR_INPUT, PSIM_TENSOR_INPUT,  PSIM_TENSOR_ACTIVATION};
  for (int i = 0; i < 6; i++) {
    memset(&ts[i], 0, sizeof ts[i]);
    ts[i].kind = kinds[i], ts[i].rank = rank[i], ts[i].dtype = PSIM_DTYPE_FP32;
    memcpy(ts[i].dims, td[i], sizeof td[i]);
  }
  memset(ops, 0, 2 * sizeof *ops);
  ops[0].kind = ops[1].kind = PSIM_OP_MATMUL;
  ops[0].n_in = ops[1].n_in = 2, ops[0].n_out = ops[1].n_out = 1;
  ops[0].in[0] = 0, ops[0].in[1] = 1, ops[0].out[0] = 2;
  ops[1].in[0] = 3, ops[1].in[1] = 4, ops[1].out[0] = 5;
  int32_t od0[] = {0, 1, 2, 3}, od1[] = {0, 4, 1, 5, 6};
  ops[0].n_dims = 4, ops[1].n_dims = 5;
  for (int i = 0; i < 4; i++)
    ops[0].dims[i] =
        (psim_op_dim){od0[i], od0[i] == 2 ? PSIM_USE_CONTRACTED : PSIM_USE_OUTPUT, od0[i] >= 2};
  for (int i = 0; i < 5; i++)
    ops[1].dims[i] =
        (psim_op_dim){od1[i], od1[i] == 6 ? PSIM_USE_CONTRACTED : PSIM_USE_OUTPUT, false};
  m->dims = dims, m->n_dims = 7, m->tensors = ts, m->n_tensors = 6, m->ops = ops, m->n_ops = 2;
}

START_TEST(key_from_op_maps_to_bmnk) {
  psim_model m;
  psim_dim dims[7];
  psim_tensor ts[6];
  psim_op ops[2];
  tiny_model(&m, dims, ts, ops);
  psim_cost_key k;
  int64_t shard0[] = {8, 128, 256, 512}; /* f split 2 ways */
  ck_assert_int_eq(psim_costdb_key_from_op(&m, &ops[0], shard0, PSIM_PASS_FWD, &k), PSIM_OK);
  ck_assert_int_eq(k.n, 4);
  ck_assert_int_eq(k.shape[0], 1);
  ck_assert_int_eq(k.shape[1], 8 * 128);   /* M = tokens */
  ck_assert_int_eq(k.shape[2], 512);       /* N = weight output dim */
  ck_assert_int_eq(k.shape[3], 256);       /* K = contracted */
  int64_t shard1[] = {8, 2, 128, 128, 64}; /* heads split 2 ways */
  ck_assert_int_eq(psim_costdb_key_from_op(&m, &ops[1], shard1, PSIM_PASS_BWD, &k), PSIM_OK);
  ck_assert_int_eq(k.shape[0], 16); /* batch = b * heads: in both inputs */
  ck_assert_int_eq(k.shape[1], 128);
  ck_assert_int_eq(k.shape[2], 128);
  ck_assert_int_eq(k.shape[3], 64);
  ck_assert_int_eq(k.pass, PSIM_PASS_BWD);
  double f = 0, b = 0;
  psim_costdb_key_work(&k, &f, &b);
  ck_assert_double_eq(f, 2.0 * 2 * 16 * 128 * 128 * 64); /* backward = two GEMMs */
}
END_TEST

/* A device type with distinct fp32 (vector) and bf16 (tensor) peaks. */
static psim_device_type roof_type(void) {
  psim_device_type t;
  memset(&t, 0, sizeof t);
  t.name = "roof";
  t.peak_flops[PSIM_DTYPE_FP32] = 1e12;
  t.peak_flops[PSIM_DTYPE_BF16] = 8e12;
  t.mem_bw = 1e11;
  t.launch_s = 1e-6;
  t.eff = (psim_efficiency){.gemm_max = 0.5, .gemm_half_flops = 1e6, .mem = 0.8};
  return t;
}

/* The one roofline (cost.h): GEMMs at the dtype's tensor peak times the
 * GEMM curve, other kernels at the fp32 vector peak at full efficiency,
 * bytes at mem_bw * mem; eff NULL is the type's own curve, a fitted set
 * (psim_costdb_fit_efficiency) replaces it. The former costdb roofline
 * applied the dtype peak and gemm_max to non-GEMM kernels too. */
START_TEST(one_roofline) {
  psim_device_type t = roof_type();
  double f = 1e9, tol = 1e-18;
  double gemm = f / (8e12 * 0.5 * f / (f + 1e6)) + 1e-6;
  ck_assert_double_eq_tol(psim_cost_roofline(&t, NULL, PSIM_DTYPE_BF16, true, f, 0), gemm, tol);
  ck_assert_double_eq_tol(psim_cost_roofline(&t, NULL, PSIM_DTYPE_BF16, false, f, 0),
                          f / 1e12 + 1e-6, tol);
  ck_assert_double_eq_tol(psim_cost_roofline(&t, NULL, PSIM_DTYPE_BF16, false, 0, 1e9),
                          1e9 / (1e11 * 0.8) + 1e-6, tol);
  ck_assert_double_eq(psim_cost_roofline(&t, &t.eff, PSIM_DTYPE_BF16, true, f, 3e8),
                      psim_cost_roofline(&t, NULL, PSIM_DTYPE_BF16, true, f, 3e8));
  psim_efficiency fitted = {.gemm_max = 1, .gemm_half_flops = 0, .mem = 1};
  ck_assert_double_eq_tol(psim_cost_roofline(&t, &fitted, PSIM_DTYPE_BF16, true, f, 0),
                          f / 8e12 + 1e-6, tol);
  ck_assert_double_eq_tol(psim_cost_roofline(&t, &fitted, PSIM_DTYPE_BF16, false, f, 0),
                          f / 1e12 + 1e-6, tol);
  ck_assert_double_eq(psim_cost_peak_flops(&t, PSIM_DTYPE_FP16, true), 1e12); /* none listed */
  ck_assert_double_eq(psim_cost_peak_flops(&t, PSIM_DTYPE_BF16, false), 1e12);
}
END_TEST

/* psim_cost_compute and psim_cost_optimizer take the database from the
 * caller (psim_sim_options.costdb): measured with it, roofline without. */
START_TEST(compute_takes_db_from_caller) {
  psim_model m;
  psim_dim dims[7];
  psim_tensor ts[6];
  psim_op ops[2];
  tiny_model(&m, dims, ts, ops);
  ops[0].flops[PSIM_PASS_FWD] = 1; /* not a free view */
  psim_device_type t = roof_type();
  psim_device dev = {.name = "d0", .type = 0, .slowdown = 2};
  psim_cluster c;
  memset(&c, 0, sizeof c);
  c.types = &t, c.n_types = 1, c.devices = &dev, c.n_devices = 1;
  int64_t shard[] = {8, 128, 256, 512};
  psim_costdb db;
  psim_costdb_init(&db);
  psim_cost_entry e = gemm_entry(8 * 128, 512, 256, 3e-3), adam = e;
  psim_costdb_key_adam(1000, PSIM_DTYPE_FP32, &adam.key);
  adam.median_s = 5e-4;
  ck_assert_int_eq(psim_costdb_add(&db, &e, PSIM_MERGE_REPLACE), PSIM_OK);
  ck_assert_int_eq(psim_costdb_add(&db, &adam, PSIM_MERGE_REPLACE), PSIM_OK);
  psim_cost_origin o = PSIM_ORIGIN_COUNT;
  ck_assert_double_eq(psim_cost_compute(&c, 0, &m, &ops[0], shard, PSIM_PASS_FWD, &db, &o), 6e-3);
  ck_assert_int_eq(o, PSIM_ORIGIN_MEASURED);
  double est = psim_cost_compute(&c, 0, &m, &ops[0], shard, PSIM_PASS_FWD, NULL, &o);
  ck_assert_int_eq(o, PSIM_ORIGIN_ESTIMATED);
  ck_assert_double_eq_tol(est, 2 * 1e-6, 1e-18); /* no work terms: one launch, slowed 2x */
  ck_assert_double_eq(psim_cost_optimizer(&c, 0, 1000, &db), 1e-3);
  ck_assert_double_eq(psim_cost_optimizer(&c, 0, 1000, NULL),
                      2 * psim_cost_roofline(&t, NULL, PSIM_DTYPE_FP32, false, 1e4, 46e3));
  ck_assert_str_eq(psim_cost_origin_name(PSIM_ORIGIN_INTERPOLATED), "interpolated");
  psim_costdb_destroy(&db);
}
END_TEST

START_TEST(corrupt_files_give_einput_with_path) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/tests/data/bad", PSIM_SOURCE_ROOT);
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  for (struct dirent *de; (de = readdir(d));) {
    if (strncmp(de->d_name, "costdb-", 7) != 0)
      continue;
    char file[2048];
    snprintf(file, sizeof file, "%s/%s", dir, de->d_name);
    ck_assert_msg(psim_costdb_check_file(file) == PSIM_EINPUT, "%s was accepted", file);
    ck_assert_msg(strstr(psim_error_message(), de->d_name) != NULL, "%s: message '%s'", file,
                  psim_error_message());
    n++;
  }
  closedir(d);
  ck_assert_int_ge(n, 5);
}
END_TEST

START_TEST(error_messages_name_the_json_path) {
  const char *text = "{\"format\": \"plansim.costdb/1\", \"entries\": ["
                     "{\"kind\": \"matmul\", \"dtype\": \"fp32\", \"pass\": \"fwd\", "
                     "\"shape\": [1, 2, 3, 4], \"median\": 1e-3},"
                     "{\"kind\": \"matmul\", \"dtype\": \"fp32\", \"pass\": \"fwd\", "
                     "\"shape\": [1, 2, 3.5, 4], \"median\": 1e-3}]}";
  cJSON *root = NULL;
  ck_assert_int_eq(psim_json_parse("db.json", text, strlen(text), &root), PSIM_OK);
  psim_costdb db;
  psim_costdb_init(&db);
  ck_assert_int_eq(psim_costdb_from_json("db.json", root, &db), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "db.json: entries[1].shape[2]"));
  ck_assert_uint_eq(db.n_entries, 0); /* left empty */
  cJSON_Delete(root);
}
END_TEST

START_TEST(allocation_failures_are_clean) {
  char path[256];
  tmp_path(path, sizeof path, "oom");
  psim_costdb db;
  psim_costdb_init(&db);
  fill_mixed(&db);
  ck_assert_int_eq(psim_costdb_save(&db, path), PSIM_OK);
  psim_costdb_destroy(&db);
  int failures = 0;
  for (long n = 1; n < 400; n++) {
    psim_costdb_init(&db);
    psim_alloc_fail_at(n);
    psim_status s = psim_costdb_load(path, &db);
    psim_alloc_fail_at(0);
    ck_assert(s == PSIM_OK || s == PSIM_ENOMEM || s == PSIM_EINPUT);
    failures += s != PSIM_OK;
    psim_costdb_destroy(&db);
  }
  ck_assert_int_gt(failures, 5);
  remove_db(path);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("costdb");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, add_find_and_hash_growth);
  tcase_add_test(tc, merge_combine_and_replace);
  tcase_add_test(tc, round_trip);
  tcase_add_test(tc, save_merges_with_file_and_refuses_other_device);
  tcase_add_test(tc, concurrent_savers_lose_nothing);
  tcase_add_test(tc, sigkill_never_leaves_half_written_file);
  tcase_add_test(tc, lookup_exact_interpolated_and_not_found);
  tcase_add_test(tc, key_from_op_maps_to_bmnk);
  tcase_add_test(tc, one_roofline);
  tcase_add_test(tc, compute_takes_db_from_caller);
  tcase_add_test(tc, corrupt_files_give_einput_with_path);
  tcase_add_test(tc, error_messages_name_the_json_path);
  tcase_add_test(tc, allocation_failures_are_clean);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  psim_json_init_hooks();
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
