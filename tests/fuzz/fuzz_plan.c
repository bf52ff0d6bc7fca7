/* fuzz_plan.c - libFuzzer target: plan files as `plansim simulate MODEL CLUSTER
 * PLAN` reads them (psim_plan_strategy_json, then the strategy loader against
 * a fixed model and cluster), and `plansim check` on a plan document. */
#include "fuzz_common.h"
#include "fuzz_fixture.h"
#include "search/plan/plan.h"
#include "sim/strategy/strategy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  psim_fuzz_fixture_load();
  cJSON *root = psim_fuzz_parse(data, size);
  if (!root)
    return 0;
  const cJSON *sj = psim_plan_strategy_json(root);
  (void)psim_strategy_check_json("fuzz.json", sj);
  psim_error_clear();
  psim_strategy s;
  psim_strategy_init(&s);
  (void)psim_strategy_from_json("fuzz.json", sj, &psim_fuzz_model, &psim_fuzz_cluster, &s);
  psim_strategy_destroy(&s);
  cJSON_Delete(root);
  psim_error_clear();
  return 0;
}
