/* fuzz_strategy.c - libFuzzer target: the strategy loader. Structure check
 * (psim_strategy_check_json, what `plansim check` runs), expansion against a
 * fixed model and cluster (psim_strategy_from_json) and, when it expands, the
 * explicit form written back and loaded again. */
#include "fuzz_common.h"
#include "fuzz_fixture.h"
#include "sim/strategy/strategy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void expand(const cJSON *root) {
  psim_strategy s;
  psim_strategy_init(&s);
  if (psim_strategy_from_json("fuzz.json", root, &psim_fuzz_model, &psim_fuzz_cluster, &s) ==
      PSIM_OK) {
    cJSON *out = NULL;
    if (psim_strategy_to_json(&s, &psim_fuzz_model, &psim_fuzz_cluster, &out) == PSIM_OK) {
      psim_strategy back;
      psim_strategy_init(&back);
      /* The explicit form of a strategy that loaded must load again. */
      if (psim_strategy_from_json("explicit.json", out, &psim_fuzz_model, &psim_fuzz_cluster,
                                  &back) != PSIM_OK) {
        fprintf(stderr, "explicit form does not load back: %s\n", psim_error_message());
        abort();
      }
      psim_strategy_destroy(&back);
    }
    cJSON_Delete(out);
  }
  psim_strategy_destroy(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  psim_fuzz_fixture_load();
  cJSON *root = psim_fuzz_parse(data, size);
  if (!root)
    return 0;
  (void)psim_strategy_check_json("fuzz.json", root);
  psim_error_clear();
  expand(root);
  cJSON_Delete(root);
  psim_error_clear();
  return 0;
}
