/* test_profile_cuda.c - the loader of the CUDA profiler module
 * (costdb/profile/profile_cuda_load.c, issue 19 item 3): a missing module,
 * a library that is not one, the default path of a build without CUDA, and a
 * stand-in module (fake_cuda_module.c) whose answers come back through the
 * host's callbacks. No CUDA is needed. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "costdb/profile/profile.h"
#include "sim/core/status.h"

static psim_cost_key gemm_key(void) {
  psim_cost_key k;
  memset(&k, 0, sizeof k);
  k.kind = PSIM_OP_MATMUL, k.dtype = PSIM_DTYPE_FP32, k.pass = PSIM_PASS_FWD, k.n = 4;
  k.shape[0] = 1, k.shape[1] = k.shape[2] = k.shape[3] = 64;
  return k;
}

/* Every entry point fails with PSIM_EFAILED (exit status 1) and msg in the message. */
static void expect_all_fail(const char *msg) {
  psim_costdb_fingerprint fp;
  psim_cost_key k = gemm_key();
  psim_cost_entry e;
  psim_profile_opts o;
  psim_profile_opts_init(&o);
  ck_assert_int_eq(psim_profile_cuda_available(0), PSIM_EFAILED);
  ck_assert_msg(strstr(psim_error_message(), msg), "message: %s", psim_error_message());
  ck_assert_int_eq(psim_status_exit_code(PSIM_EFAILED), 1);
  ck_assert_int_eq(psim_profile_cuda_fingerprint(0, &fp), PSIM_EFAILED);
  ck_assert_int_eq(psim_profile_cuda_measure(&k, &o, &e), PSIM_EFAILED);
  ck_assert_msg(strstr(psim_error_message(), msg), "message: %s", psim_error_message());
}

START_TEST(missing_module_is_named) {
  const char *path = "/nonexistent/plansim/libplansim_cuda.so";
  setenv("PSIM_CUDA_MODULE", path, 1);
  ck_assert_str_eq(psim_profile_cuda_module_path(), path);
  expect_all_fail(path);
  ck_assert(strstr(psim_error_message(), "libcublas")); /* says what --device cuda needs */
}
END_TEST

START_TEST(library_without_entry_point) {
  setenv("PSIM_CUDA_MODULE", "libm.so.6", 1); /* loads, but is no profiler */
  expect_all_fail("exports no psim_cuda_module_open");
}
END_TEST

START_TEST(default_path_follows_the_build) {
  unsetenv("PSIM_CUDA_MODULE");
  const char *path = psim_profile_cuda_module_path();
#if PSIM_HAVE_CUDA
  ck_assert(path && strstr(path, "libplansim_cuda.so"));
#else
  ck_assert(path == NULL);
  expect_all_fail("built without CUDA");
#endif
}
END_TEST

/* Last: a module that loads stays loaded for the process. */
START_TEST(stand_in_module_answers_through_the_host) {
  setenv("PSIM_CUDA_MODULE", PSIM_FAKE_CUDA_MODULE, 1);
  ck_assert_int_eq(psim_profile_cuda_available(0), PSIM_OK);
  ck_assert_int_eq(psim_profile_cuda_available(3), PSIM_EINPUT);
  ck_assert_str_eq(psim_error_message(), "fake GPU 3 does not exist");
  psim_costdb_fingerprint fp;
  ck_assert_int_eq(psim_profile_cuda_fingerprint(1, &fp), PSIM_OK);
  ck_assert_str_eq(fp.name, "fake GPU 1");
  psim_cost_key k = gemm_key();
  psim_cost_entry e;
  psim_profile_opts o;
  psim_profile_opts_init(&o);
  ck_assert_int_eq(psim_profile_cuda_measure(&k, &o, &e), PSIM_OK);
  /* psim_profile_summary of {3, 1, 2} ms, called through the host: median 2 ms, min 1 ms */
  ck_assert_double_eq_tol(e.median_s, 2e-3, 1e-12);
  ck_assert_double_eq_tol(e.min_s, 1e-3, 1e-12);
  k.kind = PSIM_OP_SOFTMAX;
  ck_assert_int_eq(psim_profile_cuda_measure(&k, &o, &e), PSIM_EUNIMPLEMENTED);
  ck_assert_str_eq(psim_error_message(), "no fake kernel for softmax");
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("profile_cuda");
  TCase *tc = tcase_create("loader");
  tcase_add_test(tc, missing_module_is_named);
  tcase_add_test(tc, library_without_entry_point);
  tcase_add_test(tc, default_path_follows_the_build);
  tcase_add_test(tc, stand_in_module_answers_through_the_host);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_set_fork_status(sr, CK_NOFORK); /* one process: the loaded module stays loaded */
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
