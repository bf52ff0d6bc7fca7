/* simulate_json.c - a simulation result as JSON (simulate --json, plans). */
#include <cjson/cJSON.h>

#include "sim/core/json.h"
#include "sim/simulate.h"

static psim_status add_memory(cJSON *root, const psim_sim_result *r) {
  cJSON *mem;
  PSIM_CHECK(psim_json_add_object(root, "memory", &mem));
  PSIM_CHECK(psim_json_add_number(mem, "device", r->peak_device));
  PSIM_CHECK(psim_json_add_number(mem, "weights_bytes", r->memory.weights));
  PSIM_CHECK(psim_json_add_number(mem, "gradients_bytes", r->memory.gradients));
  PSIM_CHECK(psim_json_add_number(mem, "optimizer_bytes", r->memory.optimizer));
  PSIM_CHECK(psim_json_add_number(mem, "activations_bytes", r->memory.activations));
  PSIM_CHECK(psim_json_add_number(mem, "workspace_bytes", r->memory.workspace));
  PSIM_CHECK(psim_json_add_number(mem, "total_bytes", r->memory.peak));
  return psim_json_add_number(mem, "capacity_bytes", r->capacity_bytes);
}

static psim_status add_breakdown(cJSON *root, const psim_sim_result *r) {
  cJSON *tb, *ec;
  PSIM_CHECK(psim_json_add_object(root, "time_breakdown", &tb));
  PSIM_CHECK(psim_json_add_number(tb, "compute_s", r->compute_s));
  PSIM_CHECK(psim_json_add_object(tb, "exposed_comm_s", &ec));
  double total = 0;
  for (int k = 0; k < PSIM_COMM_KIND_COUNT; k++) {
    PSIM_CHECK(psim_json_add_number(ec, psim_comm_kind_name(k), r->exposed_comm_s[k]));
    total += r->exposed_comm_s[k];
  }
  PSIM_CHECK(psim_json_add_number(ec, "total", total));
  PSIM_CHECK(psim_json_add_number(tb, "bubble_s", r->bubble_s));
  cJSON *w; /* issue #18: the waits that are neither communication nor the pipeline */
  PSIM_CHECK(psim_json_add_object(tb, "wait_s", &w));
  total = 0;
  for (int k = 0; k < PSIM_WAIT_KIND_COUNT; k++) {
    PSIM_CHECK(psim_json_add_number(w, psim_wait_kind_name(k), r->wait_s[k]));
    total += r->wait_s[k];
  }
  return psim_json_add_number(w, "total", total);
}

static psim_status add_sim_stats(cJSON *root, const psim_sim_result *r) {
  cJSON *sim, *src;
  PSIM_CHECK(psim_json_add_object(root, "sim", &sim));
  PSIM_CHECK(psim_json_add_number(sim, "tasks", (double)r->n_tasks));
  PSIM_CHECK(psim_json_add_number(sim, "edges", (double)r->n_edges));
  PSIM_CHECK(psim_json_add_number(sim, "build_s", r->build_s));
  PSIM_CHECK(psim_json_add_number(sim, "simulate_s", r->simulate_s));
  PSIM_CHECK(psim_json_add_bool(sim, "folded", r->folded));
  PSIM_CHECK(psim_json_add_number(sim, "simulated_devices", r->simulated_devices));
  PSIM_CHECK(psim_json_add_object(root, "cost_sources", &src));
  PSIM_CHECK(psim_json_add_number(src, "measured", r->share_measured));
  PSIM_CHECK(psim_json_add_number(src, "interpolated", r->share_interpolated));
  return psim_json_add_number(src, "estimated", r->share_estimated);
}

psim_status psim_sim_result_to_json(const psim_sim_result *r, cJSON *root) {
  PSIM_CHECK(psim_json_add_number(root, "iteration_time_s", r->iteration_time_s));
  PSIM_CHECK(psim_json_add_number(root, "samples_per_s", r->samples_per_s));
  if (r->tokens_per_s > 0)
    PSIM_CHECK(psim_json_add_number(root, "tokens_per_s", r->tokens_per_s));
  PSIM_CHECK(
      psim_json_add_number(root, "model_flops_per_s_per_device", r->model_flops_per_s_per_device));
  PSIM_CHECK(psim_json_add_number(root, "mfu", r->mfu));
  PSIM_CHECK(psim_json_add_number(root, "hfu", r->hfu));
  PSIM_CHECK(psim_json_add_bool(root, "fits", r->fits));
  PSIM_CHECK(psim_json_add_number(root, "peak_memory_bytes", r->peak_memory_bytes));
  PSIM_CHECK(add_memory(root, r));
  PSIM_CHECK(add_breakdown(root, r));
  return add_sim_stats(root, r);
}
