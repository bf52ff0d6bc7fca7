/* test_core.c - statuses, allocation wrapper, units, JSON errors, the hash map, sorting. */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/hashmap.h"
#include "sim/core/json.h"
#include "sim/core/sort.h"
#include "sim/core/units.h"

START_TEST(units_parse_bandwidth) {
  double v = 0;
  ck_assert_int_eq(psim_units_parse("300 GB/s", PSIM_UNIT_BANDWIDTH, &v), PSIM_OK);
  ck_assert_double_eq_tol(v, 300e9, 1);
  ck_assert_int_eq(psim_units_parse("200 Gb/s", PSIM_UNIT_BANDWIDTH, &v), PSIM_OK);
  ck_assert_double_eq_tol(v, 25e9, 1);
  ck_assert_int_eq(psim_units_parse("25e9", PSIM_UNIT_BANDWIDTH, &v), PSIM_OK);
  ck_assert_double_eq_tol(v, 25e9, 1);
}
END_TEST

START_TEST(units_parse_bytes_time_flops) {
  double v = 0;
  ck_assert_int_eq(psim_units_parse("80 GiB", PSIM_UNIT_BYTES, &v), PSIM_OK);
  ck_assert_double_eq(v, 80.0 * 1073741824.0);
  ck_assert_int_eq(psim_units_parse("2 us", PSIM_UNIT_TIME, &v), PSIM_OK);
  ck_assert_double_eq_tol(v, 2e-6, 1e-15);
  ck_assert_int_eq(psim_units_parse("1.5ms", PSIM_UNIT_TIME, &v), PSIM_OK);
  ck_assert_double_eq_tol(v, 1.5e-3, 1e-15);
  ck_assert_int_eq(psim_units_parse("312 TFLOP/s", PSIM_UNIT_FLOPS, &v), PSIM_OK);
  ck_assert_double_eq_tol(v, 312e12, 1);
}
END_TEST

START_TEST(units_reject_bad) {
  double v = 0;
  ck_assert_int_eq(psim_units_parse("", PSIM_UNIT_BYTES, &v), PSIM_EINPUT);
  ck_assert_int_eq(psim_units_parse("abc", PSIM_UNIT_BYTES, &v), PSIM_EINPUT);
  ck_assert_int_eq(psim_units_parse("3 parsecs", PSIM_UNIT_BYTES, &v), PSIM_EINPUT);
  ck_assert_int_eq(psim_units_parse("-3 GB", PSIM_UNIT_BYTES, &v), PSIM_EINPUT);
  /* absurd magnitudes (a typo's 1e300) are errors, the largest real systems are not */
  ck_assert_int_eq(psim_units_parse("1e300 s", PSIM_UNIT_TIME, &v), PSIM_EINPUT);
  ck_assert_int_eq(psim_units_parse("1e30 B", PSIM_UNIT_BYTES, &v), PSIM_EINPUT);
  ck_assert_int_eq(psim_units_parse("1.1 EFLOP/s", PSIM_UNIT_FLOPS, &v), PSIM_OK);
  ck_assert_int_eq(psim_units_parse("400 Gb/s", PSIM_UNIT_BANDWIDTH, &v), PSIM_OK);
  ck_assert_int_eq(psim_units_check(2e9, PSIM_UNIT_TIME), PSIM_EINPUT);
  ck_assert_int_eq(psim_units_check(90, PSIM_UNIT_TIME), PSIM_OK);
  /* issue 24: a rate below 1 byte/s or 1 FLOP/s (4.9e-324, the smallest denormal, made a
   * duration of inf) and denormals of any kind are refused; 0 and 1 are not */
  ck_assert_int_eq(psim_units_check(4.9e-324, PSIM_UNIT_BANDWIDTH), PSIM_EINPUT);
  ck_assert_int_eq(psim_units_check(0.5, PSIM_UNIT_BANDWIDTH), PSIM_EINPUT);
  ck_assert_int_eq(psim_units_parse("4 bit/s", PSIM_UNIT_BANDWIDTH, &v), PSIM_EINPUT);
  ck_assert_int_eq(psim_units_check(1e-3, PSIM_UNIT_FLOPS), PSIM_EINPUT);
  ck_assert_int_eq(psim_units_check(1e-310, PSIM_UNIT_TIME), PSIM_EINPUT);
  ck_assert_int_eq(psim_units_check(1.0, PSIM_UNIT_BANDWIDTH), PSIM_OK);
  ck_assert_int_eq(psim_units_parse("8 bit/s", PSIM_UNIT_BANDWIDTH, &v), PSIM_OK);
  ck_assert_int_eq(psim_units_check(0.0, PSIM_UNIT_BANDWIDTH), PSIM_OK);
  ck_assert_int_eq(psim_units_check(2e-6, PSIM_UNIT_TIME), PSIM_OK);
  psim_error_clear();
  /* a huge time keeps its unit in a short text */
  char buf[64];
  ck_assert_str_eq(psim_units_format(2.8e46, PSIM_UNIT_TIME, buf, sizeof buf), "2.8e+46 s");
  ck_assert_int_eq(psim_units_parse("nan", PSIM_UNIT_TIME, &v), PSIM_EINPUT);
  ck_assert_int_eq(psim_units_parse("1e999 s", PSIM_UNIT_TIME, &v), PSIM_EINPUT);
  ck_assert_int_eq(psim_units_parse("5 GB/s", PSIM_UNIT_TIME, &v), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "seconds"));
}
END_TEST

START_TEST(json_syntax_error_has_line_and_column) {
  const char *text = "{\n  \"a\": 1,\n  \"b\": ]\n}";
  cJSON *root = NULL;
  ck_assert_int_eq(psim_json_parse("x.json", text, strlen(text), &root), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "x.json:3:"));
}
END_TEST

START_TEST(json_path_in_errors) {
  const char *text = "{\"ops\": [{\"n\": 1}, {\"n\": 2.5}]}";
  cJSON *root = NULL;
  ck_assert_int_eq(psim_json_parse("m.json", text, strlen(text), &root), PSIM_OK);
  psim_jctx c;
  psim_jctx_init(&c, "m.json");
  cJSON *ops = cJSON_GetObjectItem(root, "ops");
  size_t s0 = psim_jctx_key(&c, "ops");
  size_t s1 = psim_jctx_index(&c, 1);
  int64_t n = 0;
  ck_assert_int_eq(psim_json_int(&c, cJSON_GetArrayItem(ops, 1), "n", true, 0, 10, &n),
                   PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "m.json: ops[1].n: expected an integer"));
  psim_jctx_pop(&c, s1);
  psim_jctx_pop(&c, s0);
  ck_assert_str_eq(c.path, "");
  cJSON_Delete(root);
}
END_TEST

START_TEST(json_unknown_and_duplicate_keys) {
  const char *text = "{\"a\": 1, \"zz\": 2}";
  cJSON *root = NULL;
  ck_assert_int_eq(psim_json_parse("k.json", text, strlen(text), &root), PSIM_OK);
  psim_jctx c;
  psim_jctx_init(&c, "k.json");
  static const char *const allowed[] = {"a", "b", NULL};
  ck_assert_int_eq(psim_json_check_keys(&c, root, allowed), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "unknown key 'zz'"));
  cJSON_Delete(root);
  const char *dup = "{\"a\": 1, \"a\": 2}";
  ck_assert_int_eq(psim_json_parse("k.json", dup, strlen(dup), &root), PSIM_OK);
  ck_assert_int_eq(psim_json_check_keys(&c, root, allowed), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "duplicate key 'a'"));
  cJSON_Delete(root);
}
END_TEST

START_TEST(alloc_failure_injection) {
  psim_alloc_fail_at(2);
  void *a = psim_malloc(8);
  void *b = psim_malloc(8);
  void *c = psim_malloc(8);
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_null(b);
  ck_assert_ptr_nonnull(c);
  psim_free(a);
  psim_free(c);
  psim_alloc_fail_at(0);
}
END_TEST

/* The VmFlags of the /proc/self/smaps mapping holding address a ("" when not found). */
static void smaps_flags(uintptr_t a, char *flags, size_t n) {
  flags[0] = 0;
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f)
    return;
  char line[512];
  bool in = false;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
      in = a >= lo && a < hi;
    else if (in && strncmp(line, "VmFlags:", 8) == 0) {
      size_t k = strlen(line + 8) < n ? strlen(line + 8) : n - 1;
      memcpy(flags, line + 8, k);
      flags[k] = 0;
      break;
    }
  }
  fclose(f);
}

/* Large blocks are advised as transparent huge pages (alloc.c: a simulation's page faults
 * were a third of its CPU time at 14 M tasks); small ones are not. Linux with THP in
 * "madvise" or "always" mode only: elsewhere the advice is a no-op by design. */
START_TEST(large_blocks_advised_huge) {
  FILE *thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  char mode[128] = "";
  if (thp) {
    if (!fgets(mode, sizeof mode, thp))
      mode[0] = 0;
    fclose(thp);
  }
  if (!strstr(mode, "[madvise]") && !strstr(mode, "[always]"))
    return; /* no THP here: nothing to check */
  size_t big = (size_t)64 << 20;
  char *p = psim_malloc(big), *q = psim_calloc(big / 8, 8), flags[256];
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_nonnull(q);
  char *r = psim_realloc(p, 2 * big); /* a grown block is advised again */
  ck_assert_ptr_nonnull(r);
  char *blocks[] = {r + big + ((size_t)4 << 20), q + big / 2};
  for (int i = 0; i < 2; i++) {
    smaps_flags((uintptr_t)blocks[i], flags, sizeof flags);
    ck_assert_msg(strstr(flags, " hg") != NULL, "block %d: VmFlags%s", i, flags);
  }
  psim_free(r);
  psim_free(q);
}
END_TEST

START_TEST(atomic_write_replaces_file) {
  char path[] = "/tmp/psim_test_atomicXXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(psim_file_write_atomic(path, "hello", 5), PSIM_OK);
  char *text = NULL;
  size_t len = 0;
  ck_assert_int_eq(psim_file_read(path, 100, &text, &len), PSIM_OK);
  ck_assert_str_eq(text, "hello");
  psim_free(text);
  remove(path);
}
END_TEST

/* ---- hash map: random operations against a brute-force map ------------- */

enum { HM_A = 97, HM_B = 3, HM_OPS = 100000 };

/* Brute force over the key space {word[a], b} (a < na <= HM_A, b < nb <=
 * HM_B): present flag and value. Many small key spaces of random words keep
 * the table small and about half full, with probe chains that wrap around
 * its end. */
typedef struct hm_brute {
  bool in[HM_A][HM_B];
  int32_t val[HM_A][HM_B];
  uint64_t word[HM_A];
  size_t count;
  uint64_t na, nb;
} hm_brute;

static void hm_check_all(const psim_hmap *m, const hm_brute *bf) {
  ck_assert_uint_eq(m->count, bf->count);
  for (uint64_t a = 0; a < bf->na; a++)
    for (uint64_t b = 0; b < bf->nb; b++) {
      int32_t v = -12345;
      bool found = psim_hmap_find(m, (psim_hmap_key){bf->word[a], b}, &v);
      ck_assert_int_eq(found, bf->in[a][b]);
      if (found)
        ck_assert_int_eq(v, bf->val[a][b]);
    }
}

/* One random operation: put (insert or overwrite), remove, find or clear. */
static void hm_step(psim_hmap *m, hm_brute *bf, unsigned *seed) {
  uint64_t a = (uint64_t)rand_r(seed) % bf->na, b = (uint64_t)rand_r(seed) % bf->nb;
  psim_hmap_key k = {bf->word[a], b};
  int op = rand_r(seed) % 100;
  if (op < 50) {
    int32_t v = rand_r(seed) - RAND_MAX / 2;
    ck_assert_int_eq(psim_hmap_put(m, k, v), PSIM_OK);
    bf->count += !bf->in[a][b];
    bf->in[a][b] = true;
    bf->val[a][b] = v;
  } else if (op < 85) {
    ck_assert_int_eq(psim_hmap_remove(m, k), bf->in[a][b]);
    bf->count -= bf->in[a][b];
    bf->in[a][b] = false;
  } else if (op < 99) {
    int32_t v = 0;
    ck_assert_int_eq(psim_hmap_find(m, k, &v), bf->in[a][b]);
    if (bf->in[a][b])
      ck_assert_int_eq(v, bf->val[a][b]);
  } else if (rand_r(seed) % 20 == 0) {
    psim_hmap_clear(m);
    memset(bf->in, 0, sizeof bf->in);
    bf->count = 0;
  }
  ck_assert_uint_le(2 * m->count, m->cap);
}

START_TEST(hashmap_matches_brute_force) {
  static hm_brute bf;
  unsigned seed = 17;
  for (int sp = 0; sp < 64; sp++) { /* one large key space, then small ones */
    psim_hmap m;
    psim_hmap_init(&m);
    ck_assert(!psim_hmap_find(&m, (psim_hmap_key){1, 2}, NULL));
    ck_assert(!psim_hmap_remove(&m, (psim_hmap_key){1, 2}));
    memset(&bf, 0, sizeof bf);
    bf.na = sp == 0 ? HM_A : 8 + (uint64_t)sp % 24, bf.nb = sp == 0 ? HM_B : 1 + (uint64_t)sp % 2;
    for (uint64_t a = 0; a < bf.na; a++)
      bf.word[a] = (uint64_t)rand_r(&seed) << 32 ^ (uint64_t)rand_r(&seed);
    for (int i = 0; i < (sp == 0 ? HM_OPS : HM_OPS / 20); i++) {
      hm_step(&m, &bf, &seed);
      if (i % 997 == 0)
        hm_check_all(&m, &bf);
    }
    hm_check_all(&m, &bf);
    psim_hmap_destroy(&m);
  }
}
END_TEST

START_TEST(hashmap_growth_and_reserve) {
  psim_hmap m;
  psim_hmap_init(&m);
  ck_assert_int_eq(psim_hmap_reserve(&m, 1000), PSIM_OK);
  size_t cap = m.cap;
  ck_assert_uint_ge(cap, 2000);
  long allocs = psim_alloc_count();
  for (int32_t i = 0; i < 1000; i++) /* no allocation below the reserved size */
    ck_assert_int_eq(psim_hmap_put(&m, (psim_hmap_key){(uint64_t)i * 7919, 0}, i), PSIM_OK);
  ck_assert_int_eq(psim_alloc_count(), allocs);
  ck_assert_uint_eq(m.cap, cap);
  for (int32_t i = 1000; i < 100000; i++) /* grows, keeps every entry */
    ck_assert_int_eq(psim_hmap_put(&m, (psim_hmap_key){(uint64_t)i * 7919, 0}, i), PSIM_OK);
  ck_assert_uint_eq(m.count, 100000);
  for (int32_t i = 0; i < 100000; i++) {
    int32_t v = -1;
    ck_assert(psim_hmap_find(&m, (psim_hmap_key){(uint64_t)i * 7919, 0}, &v));
    ck_assert_int_eq(v, i);
  }
  psim_alloc_fail_at(1); /* a failed growth leaves the map as it was */
  size_t before = m.count;
  psim_status st = PSIM_OK;
  for (int32_t i = 0; st == PSIM_OK; i++) {
    before = m.count;
    st = psim_hmap_put(&m, (psim_hmap_key){(uint64_t)i, 1}, i);
  }
  psim_alloc_fail_at(0);
  ck_assert_int_eq(st, PSIM_ENOMEM);
  ck_assert_uint_eq(m.count, before);
  ck_assert(psim_hmap_find(&m, (psim_hmap_key){7919, 0}, NULL));
  psim_hmap_destroy(&m);
}
END_TEST

/* Variable keys: short strings kept by the caller, with a deliberately weak
 * hash (length mod 3) so that many distinct keys share a hash. */
typedef struct hm_strings {
  char keys[800][8];
  int32_t n;
  const char *want;
} hm_strings;

static bool hm_str_eq(const void *ctx, int32_t value) {
  const hm_strings *s = ctx;
  ck_assert(value >= 0 && value < s->n);
  return strcmp(s->keys[value], s->want) == 0;
}

START_TEST(hashmap_variable_keys) {
  static hm_strings s;
  psim_hmap m, strong;
  psim_hmap_init(&m);
  psim_hmap_init(&strong);
  s.n = 0;
  unsigned seed = 5;
  for (int i = 0; i < 4000; i++) {
    char k[8];
    snprintf(k, sizeof k, "%d", rand_r(&seed) % 700);
    s.want = k;
    int32_t v = -1, brute = -1;
    for (int32_t j = 0; j < s.n && brute < 0; j++)
      brute = strcmp(s.keys[j], k) == 0 ? j : -1;
    bool found = psim_hmap_find_eq(&m, strlen(k) % 3, hm_str_eq, &s, &v);
    ck_assert_int_eq(found, brute >= 0);
    ck_assert(psim_hmap_find_eq(&strong, psim_hmap_hash_bytes(k, strlen(k), 0), hm_str_eq, &s,
                                &v) == found);
    if (found) {
      ck_assert_int_eq(v, brute);
      continue;
    }
    ck_assert_int_lt(s.n, 800);
    strcpy(s.keys[s.n], k);
    ck_assert_int_eq(psim_hmap_add(&m, strlen(k) % 3, s.n), PSIM_OK);
    ck_assert_int_eq(psim_hmap_add(&strong, psim_hmap_hash_bytes(k, strlen(k), 0), s.n), PSIM_OK);
    s.n++;
  }
  ck_assert_uint_eq(m.count, (size_t)s.n);
  ck_assert_uint_ne(psim_hmap_hash_bytes("ab", 2, 0), psim_hmap_hash_bytes("ab", 2, 1));
  psim_hmap_destroy(&m);
  psim_hmap_destroy(&strong);
}
END_TEST

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return x < y ? -1 : x > y;
}

/* psim_sort_nonneg_i32 against qsort on random arrays: sizes on both sides of the insertion
 * sort's threshold, value ranges that need one, two and three radix passes, duplicates. */
START_TEST(sort_matches_qsort) {
  const size_t sizes[] = {0, 1, 2, 63, 64, 65, 1000, 100000};
  const int32_t ranges[] = {1, 2047, 2048, 1 << 22, INT32_MAX};
  uint64_t seed = 12345;
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
    for (size_t ri = 0; ri < sizeof ranges / sizeof *ranges; ri++) {
      size_t n = sizes[si];
      int32_t *a = malloc((n + 1) * sizeof *a), *b = malloc((n + 1) * sizeof *b);
      ck_assert_ptr_nonnull(a);
      ck_assert_ptr_nonnull(b);
      for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        a[i] = b[i] = (int32_t)((seed >> 33) % ((uint64_t)ranges[ri] + 1));
      }
      if (n > 0)
        a[n / 2] = b[n / 2] = ranges[ri]; /* the largest value needs every pass */
      ck_assert_int_eq(psim_sort_nonneg_i32(a, n), PSIM_OK);
      qsort(b, n, sizeof *b, cmp_i32);
      for (size_t i = 0; i < n; i++)
        ck_assert_msg(a[i] == b[i], "n %zu range %d: [%zu] %d != %d", n, ranges[ri], i, a[i], b[i]);
      free(a);
      free(b);
    }
}
END_TEST

int main(void) {
  psim_json_init_hooks();
  Suite *s = suite_create("core");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, units_parse_bandwidth);
  tcase_add_test(tc, units_parse_bytes_time_flops);
  tcase_add_test(tc, units_reject_bad);
  tcase_add_test(tc, json_syntax_error_has_line_and_column);
  tcase_add_test(tc, json_path_in_errors);
  tcase_add_test(tc, json_unknown_and_duplicate_keys);
  tcase_add_test(tc, alloc_failure_injection);
  tcase_add_test(tc, large_blocks_advised_huge);
  tcase_add_test(tc, atomic_write_replaces_file);
  tcase_add_test(tc, hashmap_matches_brute_force);
  tcase_add_test(tc, hashmap_growth_and_reserve);
  tcase_add_test(tc, hashmap_variable_keys);
  tcase_add_test(tc, sort_matches_qsort);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
