/* test_devlist.c - shared device lists of op configs (sim/strategy/devlist.h, issue 19 session
 * 22): the ops of a stage that split alike hold one list, a strategy copy shares them, and every
 * in-place edit (psim_op_config_writable, the faults' drop and join, the MCMC space) copies a
 * shared list first, so the ops and strategies sharing it keep theirs. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "search/mcmc/space.h"
#include "sim/core/alloc.h"
#include "sim/faults.h"
#include "sim/strategy/strategy.h"

#define ROOT PSIM_SOURCE_ROOT "/"

static psim_model M;
static psim_cluster C;

static void setup(void) {
  psim_model_init(&M);
  psim_cluster_init(&C);
  ck_assert_msg(psim_model_load(ROOT "models/gpt-1.3b.json", &M) == PSIM_OK, "%s",
                psim_error_message());
  ck_assert_msg(psim_cluster_load(ROOT "topologies/dgx-a100-x2.json", &C) == PSIM_OK, "%s",
                psim_error_message());
}

static void teardown(void) {
  psim_cluster_destroy(&C);
  psim_model_destroy(&M);
}

/* Megatron tp 2, pp 2, dp 4 on the 16 GPUs: 8 devices a stage. */
static void megatron(psim_strategy *s) {
  psim_megatron_opts o;
  psim_megatron_opts_init(&o);
  o.tp = 2, o.pp = 2, o.dp = 4;
  psim_strategy_init(s);
  ck_assert_msg(psim_strategy_megatron(&M, &C, &o, s) == PSIM_OK, "%s", psim_error_message());
}

/* Every op's list written out, to compare with later (a deep copy: no sharing). */
static int32_t **contents(const psim_strategy *s) {
  int32_t **c = calloc((size_t)s->n_ops, sizeof *c);
  for (int32_t o = 0; o < s->n_ops; o++) {
    c[o] = malloc(sizeof **c * (size_t)(s->ops[o].n_devices + 1));
    memcpy(c[o], s->ops[o].devices, sizeof **c * (size_t)s->ops[o].n_devices);
  }
  return c;
}

static void expect_contents(const psim_strategy *s, int32_t **c) {
  for (int32_t o = 0; o < s->n_ops; o++) {
    ck_assert_msg(memcmp(c[o], s->ops[o].devices, sizeof **c * (size_t)s->ops[o].n_devices) == 0,
                  "op %s: its list changed under an edit of another", M.ops[o].name);
    free(c[o]);
  }
  free(c);
}

START_TEST(writable_copies_only_when_shared) {
  int32_t *d = psim_devlist_from((const int32_t[]){4, 5, 6}, 3), *w;
  const int32_t *a = d, *b = psim_devlist_share(d);
  ck_assert(a == b && psim_devlist_shared(a));
  ck_assert(psim_devlist_writable(&a, 3, 3, &w) == PSIM_OK);
  ck_assert(w != b && w == a && !psim_devlist_shared(b) && !psim_devlist_shared(a));
  w[0] = 9;
  ck_assert(b[0] == 4 && b[1] == 5 && b[2] == 6 && a[1] == 5 && a[2] == 6);
  int32_t *again;
  ck_assert(psim_devlist_writable(&a, 3, 3, &again) == PSIM_OK);
  ck_assert(again == w); /* held alone: written in place */
  ck_assert(psim_devlist_writable(&a, 3, 100, &again) == PSIM_OK); /* grown, entries kept */
  ck_assert(psim_devlist_cap(a) >= 100 && a[0] == 9 && a[2] == 6);
  psim_devlist_release(a);
  psim_devlist_release(b);
}
END_TEST

/* The template's ops of a stage with equal degrees and equal lists hold one list, and a copy
 * holds the same. */
START_TEST(stage_ops_share_one_list) {
  psim_strategy s, c;
  megatron(&s);
  int32_t shared = 0;
  for (int32_t o = 1; o < s.n_ops; o++)
    for (int32_t p = 0; p < o; p++)
      if (s.ops[p].stage == s.ops[o].stage && s.ops[p].n_devices == s.ops[o].n_devices &&
          s.ops[p].replicas == s.ops[o].replicas && M.ops[p].n_dims == M.ops[o].n_dims &&
          memcmp(s.ops[p].degree, s.ops[o].degree, sizeof s.ops[o].degree) == 0 &&
          memcmp(s.ops[p].devices, s.ops[o].devices,
                 sizeof(int32_t) * (size_t)s.ops[o].n_devices) == 0) {
        ck_assert_msg(s.ops[p].devices == s.ops[o].devices,
                      "ops %s and %s: equal lists, two copies", M.ops[p].name, M.ops[o].name);
        shared++;
        break;
      }
  ck_assert_int_gt(shared, s.n_ops / 2);
  ck_assert(psim_strategy_copy(&s, &c) == PSIM_OK);
  for (int32_t o = 0; o < s.n_ops; o++)
    ck_assert(c.ops[o].devices == s.ops[o].devices);
  ck_assert(psim_strategy_equal(&s, &c));
  psim_strategy_destroy(&c);
  psim_strategy_destroy(&s);
}
END_TEST

/* Ops of a stage whose lists hold the same devices in the same order hold one list, whatever
 * their splits (different degrees can order a stage alike): the compares by address in
 * folding's twins, the validation and devices_used then find them without reading them. */
START_TEST(equal_lists_of_a_stage_are_one) {
  psim_strategy s;
  megatron(&s);
  int32_t unlike = 0;
  for (int32_t o = 1; o < s.n_ops; o++)
    for (int32_t p = 0; p < o; p++)
      if (s.ops[p].stage == s.ops[o].stage && s.ops[p].n_devices == s.ops[o].n_devices &&
          memcmp(s.ops[p].devices, s.ops[o].devices,
                 sizeof(int32_t) * (size_t)s.ops[o].n_devices) == 0) {
        ck_assert_msg(s.ops[p].devices == s.ops[o].devices,
                      "ops %s and %s: equal lists, two copies", M.ops[p].name, M.ops[o].name);
        unlike += memcmp(s.ops[p].degree, s.ops[o].degree, sizeof s.ops[o].degree) != 0;
      }
  ck_assert_int_gt(unlike, 0); /* some of them split unlike */
  psim_strategy_destroy(&s);
}
END_TEST

/* The memo's lists (positions computed once for all stages, the lists per stage) are the
 * ones psim_mesh_op_config computes for each op alone. */
START_TEST(memo_lists_match_the_definition) {
  psim_strategy s;
  megatron(&s);
  for (int32_t o = 0; o < s.n_ops; o++) {
    const psim_stage *st = &s.stages[s.ops[o].stage];
    psim_op_config want = {0};
    ck_assert(psim_mesh_op_config(&s.mesh, &M, o, st->devices, st->n_devices, &want) == PSIM_OK);
    ck_assert_int_eq(want.n_devices, s.ops[o].n_devices);
    ck_assert_msg(
        memcmp(want.devices, s.ops[o].devices, sizeof(int32_t) * (size_t)want.n_devices) == 0,
        "op %s (stage %d)", M.ops[o].name, (int)s.ops[o].stage);
    psim_op_config_destroy(&want);
  }
  psim_strategy_destroy(&s);
}
END_TEST

/* An in-place edit of one op's list leaves every other op, in the strategy and in its copy,
 * as it was: the shared list is copied before the write. */
START_TEST(edit_of_one_op_copies_the_shared_list) {
  psim_strategy s, c;
  megatron(&s);
  ck_assert(psim_strategy_copy(&s, &c) == PSIM_OK);
  int32_t o = 0;
  while (o < s.n_ops && !psim_devlist_shared(s.ops[o].devices))
    o++;
  ck_assert(o < s.n_ops);
  int32_t **before = contents(&s);
  int32_t *d;
  ck_assert(psim_op_config_writable(&c.ops[o], c.ops[o].n_devices, &d) == PSIM_OK);
  int32_t t = d[0];
  d[0] = d[1];
  d[1] = t;
  ck_assert(c.ops[o].devices != s.ops[o].devices);
  ck_assert(!psim_strategy_equal(&s, &c));
  expect_contents(&s, before);
  before = contents(&c); /* and the copy's other ops, which share s's lists */
  ck_assert(psim_op_config_writable(&s.ops[o], s.ops[o].n_devices, &d) == PSIM_OK);
  d[0] = d[1] = -1;
  expect_contents(&c, before);
  psim_strategy_destroy(&c);
  psim_strategy_destroy(&s);
}
END_TEST

/* The faults' drop and join edit the lists of a copy in place: the original keeps its own. */
START_TEST(faults_leave_the_original_alone) {
  psim_strategy s, out;
  megatron(&s);
  int32_t **before = contents(&s);
  ck_assert_msg(psim_faults_drop_device(&M, &C, &s, 3, &out) == PSIM_OK, "%s",
                psim_error_message());
  expect_contents(&s, before);
  psim_strategy_destroy(&out);
  psim_strategy_destroy(&s);
  psim_strategy_init(&s);
  ck_assert(psim_strategy_data_parallel(&M, &C, 8, 1, &s) == PSIM_OK);
  ck_assert(psim_devlist_shared(s.ops[0].devices));
  before = contents(&s);
  ck_assert_msg(psim_faults_add_device(&M, &C, &s, 12, &out) == PSIM_OK, "%s",
                psim_error_message());
  expect_contents(&s, before);
  ck_assert_int_eq(out.ops[0].n_devices, 9);
  psim_strategy_destroy(&out);
  psim_strategy_destroy(&s);
}
END_TEST

/* A sample of the MCMC space writes its proposal's list: the current config it was copied
 * from keeps its devices. */
START_TEST(space_sample_copies_on_write) {
  psim_strategy s;
  megatron(&s);
  psim_space sp;
  ck_assert_msg(psim_space_init(&sp, &M, &s, NULL) == PSIM_OK, "%s", psim_error_message());
  int32_t **before = contents(&s);
  uint64_t rng = 11;
  psim_op_config prop = {0};
  for (int32_t k = 0; k < 200; k++) {
    int32_t o = (int32_t)psim_space_rand_below(&rng, (uint64_t)s.n_ops);
    ck_assert(psim_space_config_copy(&s.ops[o], &prop) == PSIM_OK);
    ck_assert(psim_space_sample(&sp, o, &rng, &prop) == PSIM_OK);
  }
  expect_contents(&s, before);
  psim_op_config_destroy(&prop);
  psim_space_destroy(&sp);
  psim_strategy_destroy(&s);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("devlist");
  TCase *t = tcase_create("core");
  tcase_add_checked_fixture(t, setup, teardown);
  tcase_add_test(t, writable_copies_only_when_shared);
  tcase_add_test(t, stage_ops_share_one_list);
  tcase_add_test(t, equal_lists_of_a_stage_are_one);
  tcase_add_test(t, memo_lists_match_the_definition);
  tcase_add_test(t, edit_of_one_op_copies_the_shared_list);
  tcase_add_test(t, faults_leave_the_original_alone);
  tcase_add_test(t, space_sample_copies_on_write);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
