/* test_api.c - the public C API (include/plansim/plansim.h), linked against the shared
 * libplansim alone: a program that sees only the public header and the exported symbols
 * must be able to load files, predict, and read errors. The prediction must be the one
 * `plansim simulate --json` makes (the golden file of the prediction corpus). */
#include <check.h>
#include <plansim/plansim.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SRC(p) PSIM_SOURCE_ROOT "/" p

/* The value of "key": in a JSON text (the first occurrence), or NAN when absent. */
static double json_number(const char *text, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(text, pat);
  return p ? strtod(p + strlen(pat), NULL) : 0.0 / 0.0;
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = 0;
  fclose(f);
  return buf;
}

START_TEST(predict_matches_the_corpus) {
  psim_model *m = NULL;
  psim_cluster *c = NULL;
  psim_strategy *s = NULL;
  ck_assert_int_eq(psim_open_model(SRC("models/bert-large.json"), &m), PSIM_OK);
  ck_assert_int_eq(psim_open_cluster(SRC("topologies/dgx-a100-x1.json"), &c), PSIM_OK);
  ck_assert_int_eq(psim_open_strategy(SRC("strategies/zero3-x8.json"), m, c, &s), PSIM_OK);
  psim_prediction p;
  ck_assert_int_eq(psim_predict(m, c, s, &p), PSIM_OK);
  char *golden = read_all(SRC("tests/corpus/golden/zero3-bert.json"));
  /* cJSON prints 15 significant digits when they read back within its epsilon, so the
   * golden figures agree to about 1e-15 relative, not to the bit */
  ck_assert_double_eq_tol(p.iteration_time_s, json_number(golden, "iteration_time_s"),
                          1e-14 * p.iteration_time_s);
  ck_assert_double_eq_tol(p.mfu, json_number(golden, "mfu"), 1e-14 * p.mfu);
  ck_assert_double_eq_tol(p.peak_memory_bytes, json_number(golden, "peak_memory_bytes"), 1);
  ck_assert_int_eq(p.fits, strstr(golden, "\"fits\": true") != NULL);
  char *json = NULL;
  ck_assert_int_eq(psim_predict_json(m, c, s, &json), PSIM_OK);
  ck_assert(json_number(json, "iteration_time_s") == p.iteration_time_s);
  psim_free_string(json);
  free(golden);
  psim_close_strategy(s);
  psim_close_cluster(c);
  psim_close_model(m);
}
END_TEST

START_TEST(errors_name_the_file) {
  psim_model *m = (psim_model *)1;
  psim_status st = psim_open_model(SRC("tests/data/bad/no-such-file.json"), &m);
  ck_assert_int_ne(st, PSIM_OK);
  ck_assert_ptr_null(m);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "no-such-file.json"));
  ck_assert_str_ne(psim_status_name(st), "");
  psim_cluster *c = NULL;
  ck_assert_int_eq(psim_open_cluster(SRC("models/mlp.json"), &c), PSIM_EINPUT);
  ck_assert_ptr_null(c);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "mlp.json"));
  psim_close_model(NULL); /* NULL is a no-op */
  ck_assert_str_eq(psim_version(), "0.1.0");
}
END_TEST

START_TEST(strategy_that_does_not_fit_is_refused) {
  psim_model *m = NULL;
  psim_cluster *c = NULL;
  psim_strategy *s = (psim_strategy *)1;
  ck_assert_int_eq(psim_open_model(SRC("models/gpt-1.3b.json"), &m), PSIM_OK);
  ck_assert_int_eq(psim_open_cluster(SRC("topologies/p100-nvlink-x4.json"), &c), PSIM_OK);
  /* tp 8 x pp 8 needs 64 devices; the cluster has 16 */
  ck_assert_int_eq(psim_open_strategy(SRC("strategies/megatron-175b-x8.json"), m, c, &s),
                   PSIM_EINPUT);
  ck_assert_ptr_null(s);
  psim_close_cluster(c);
  psim_close_model(m);
}
END_TEST

int main(void) {
  Suite *su = suite_create("api");
  TCase *tc = tcase_create("public");
  tcase_add_test(tc, predict_matches_the_corpus);
  tcase_add_test(tc, errors_name_the_file);
  tcase_add_test(tc, strategy_that_does_not_fit_is_refused);
  suite_add_tcase(su, tc);
  SRunner *sr = srunner_create(su);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
