/* test_mcmc_space.c - issues 21 and 23: MCMC's proposals (psim_space_sample,
 * which mcmc.c's propose() draws from) reach expert parallelism and context
 * parallelism: on a MoE model the expert GEMMs' expert dim is in their SOAP
 * space (an output dim carried by the expert weights: Attribute and
 * Parameter) and some proposal splits it; the attention scores' query
 * sequence likewise. */
#include <check.h>
#include <cjson/cJSON.h>
#include <string.h>

#include "search/mcmc/space.h"

/* Draws proposals for op o until one splits a dim of role r (at most 4096). */
static bool some_proposal_splits(const psim_space *sp, const psim_strategy *s, int32_t o,
                                 psim_role r) {
  const psim_model *m = sp->m;
  uint64_t rng = 7;
  psim_op_config cfg = s->ops[o];
  cfg.devices = NULL;
  bool hit = false;
  for (int k = 0; k < 4096 && !hit; k++) {
    ck_assert_int_eq(psim_space_sample(sp, o, &rng, &cfg), PSIM_OK);
    for (int32_t d = 0; d < m->ops[o].n_dims; d++)
      hit = hit || (cfg.degree[d] > 1 && m->dims[m->ops[o].dims[d].dim].role == r);
  }
  psim_op_config_destroy(&cfg);
  return hit;
}

START_TEST(proposals_split_expert_and_sequence) {
  psim_model m;
  psim_model_init(&m);
  ck_assert(psim_model_load(PSIM_SOURCE_ROOT "/models/moe-1.3b-8e.json", &m) == PSIM_OK);
  psim_cluster c;
  psim_cluster_init(&c);
  ck_assert(psim_cluster_load(PSIM_SOURCE_ROOT "/topologies/dgx-a100-x1.json", &c) == PSIM_OK);
  psim_strategy s;
  ck_assert_msg(psim_strategy_data_parallel(&m, &c, 8, 1, &s) == PSIM_OK, "%s",
                psim_error_message());
  psim_space sp;
  ck_assert_msg(psim_space_init(&sp, &m, &s, NULL) == PSIM_OK, "%s", psim_error_message());
  int checked = 0;
  for (int32_t o = 0; o < m.n_ops; o++) {
    const char *dot = strrchr(m.ops[o].name, '.');
    const char *n = dot ? dot + 1 : m.ops[o].name;
    if (strcmp(n, "fc1") == 0 || strcmp(n, "fc2") == 0)
      ck_assert_msg(some_proposal_splits(&sp, &s, o, PSIM_ROLE_EXPERT), "%s", m.ops[o].name);
    else if (strcmp(n, "scores") == 0)
      ck_assert_msg(some_proposal_splits(&sp, &s, o, PSIM_ROLE_SEQUENCE), "%s", m.ops[o].name);
    else
      continue;
    checked++;
  }
  ck_assert_int_eq(checked, 3 * 24);
  psim_space_destroy(&sp);
  psim_strategy_destroy(&s);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mcmc_space");
  TCase *t = tcase_create("space");
  tcase_add_test(t, proposals_split_expert_and_sequence);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
