/* fuzz_model.c - libFuzzer target: the model loader (psim_model_from_json). */
#include "fuzz_common.h"
#include "sim/ir/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cJSON *root = psim_fuzz_parse(data, size);
  if (!root)
    return 0;
  psim_model m;
  psim_model_init(&m);
  if (psim_model_from_json("fuzz.json", root, &m) == PSIM_OK) {
    /* A loaded model must write back out (what `plansim model` and plans do). */
    cJSON *out = NULL;
    if (psim_model_to_json(&m, &out) == PSIM_OK)
      cJSON_Delete(out);
  }
  psim_model_destroy(&m);
  cJSON_Delete(root);
  psim_error_clear();
  return 0;
}
