/* fuzz_cluster.c - libFuzzer target: the cluster loader (psim_cluster_from_json)
 * and, for clusters that load, a route between the first and last device. */
#include "fuzz_common.h"
#include "sim/ir/cluster.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cJSON *root = psim_fuzz_parse(data, size);
  if (!root)
    return 0;
  psim_cluster c;
  psim_cluster_init(&c);
  if (psim_cluster_from_json("fuzz.json", root, &c) == PSIM_OK && c.n_devices > 1) {
    const int32_t *links = NULL;
    int32_t n = 0;
    (void)psim_cluster_route(&c, 0, c.n_devices - 1, &links, &n);
  }
  psim_cluster_destroy(&c);
  cJSON_Delete(root);
  psim_error_clear();
  return 0;
}
