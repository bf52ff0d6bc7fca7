/* test_core.c - statuses, allocation wrapper, units, JSON errors. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/json.h"
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
  tcase_add_test(tc, atomic_write_replaces_file);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
