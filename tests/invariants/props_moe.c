/* props_moe.c - mixture-of-experts properties of the invariant suite (inv.h; issue 21,
 * docs/simulator.md "Mixture of experts"): (l) a more skewed routing never makes a dropless
 * iteration faster; (m) more experts per device never reduce a device's memory. Both take the
 * case's MoE model and split its experts over the devices in the explicit form. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "inv.h"
#include "sim/builder/routing.h"

/* Sets "dropless": true on every dispatch and combine (the blocks' ops too). */
static void make_dropless(cJSON *ops) {
  cJSON *op;
  cJSON_ArrayForEach(op, ops) {
    const cJSON *kind = cJSON_GetObjectItem(op, "kind");
    if (cJSON_IsString(kind) &&
        (strcmp(kind->valuestring, "dispatch") == 0 || strcmp(kind->valuestring, "combine") == 0))
      cJSON_AddBoolToObject(op, "dropless", true);
    if (cJSON_GetObjectItem(op, "ops"))
      make_dropless(cJSON_GetObjectItem(op, "ops"));
  }
}

static int gcd(int a, int b) {
  return b ? gcd(b, a % b) : a;
}

/* Data parallel over every device, the expert GEMMs split `ways` over the experts; false
 * when the strategy does not load. */
static bool expert_strategy(inv_inst *x, int ways, psim_strategy *s) {
  char buf[512];
  snprintf(buf, sizeof buf,
           "{\"format\":\"plansim.strategy/1\",\"mesh\":{\"axes\":{\"dp\":%d}},\"layout\":{"
           "\"batch\":\"dp\"},\"ops\":{\"layer.*.fc1\":{\"split\":{\"expert\":%d}},"
           "\"layer.*.gelu\":{\"split\":{\"expert\":%d}},\"layer.*.fc2\":{\"split\":{"
           "\"expert\":%d}}}}",
           x->c.n_devices, ways, ways, ways);
  cJSON *j = cJSON_Parse(buf);
  psim_strategy_init(s);
  bool ok = j && psim_strategy_from_json("strategy", j, &x->m, &x->c, s) == PSIM_OK;
  cJSON_Delete(j);
  if (!ok)
    psim_strategy_destroy(s);
  return ok;
}

/* Unfolded iteration time under a routing spec (NAN on failure). */
static double time_with(const psim_model *m, inv_inst *x, const psim_strategy *s,
                        const char *spec) {
  psim_routing r;
  if (psim_routing_parse(spec, &r) != PSIM_OK)
    return NAN;
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.fold = false;
  o.routing = &r;
  psim_sim_result res;
  psim_sim_result_init(&res);
  double t = psim_simulate(m, &x->c, s, &o, &res) == PSIM_OK ? res.iteration_time_s : NAN;
  psim_sim_result_destroy(&res);
  psim_routing_destroy(&r);
  return t;
}

/* (l) Dropless: uniform <= zipf:0.5 <= zipf:1 <= zipf:2 (each more skewed than the last:
 * the hottest experts' share grows, so does the most loaded device's). */
inv_verdict inv_prop_routing(const inv_case *k, inv_inst *x, char *why, size_t n) {
  int ways = gcd(x->c.n_devices, k->experts);
  if (k->model != INV_M_MOE || x->c.n_devices > 32 || ways < 2)
    return INV_SKIP;
  cJSON *doc = cJSON_Duplicate(x->model_json, true);
  make_dropless(cJSON_GetObjectItem(doc, "ops"));
  psim_model m;
  psim_model_init(&m);
  bool ok = psim_model_from_json("model", doc, &m) == PSIM_OK;
  cJSON_Delete(doc);
  psim_strategy s;
  inv_verdict v = INV_SKIP;
  if (ok && expert_strategy(x, ways, &s)) {
    const char *specs[] = {"uniform", "zipf:0.5", "zipf:1", "zipf:2"};
    double last = 0;
    v = INV_PASS;
    for (int i = 0; i < 4 && v == INV_PASS; i++) {
      double t = time_with(&m, x, &s, specs[i]);
      if (!(t >= last * (1 - 1e-9)))
        v = INV_FAIL, snprintf(why, n, "%s: %.9g s, %s: %.9g s (experts split %d ways)", specs[i],
                               t, i ? specs[i - 1] : "-", last, ways);
      last = t;
    }
    psim_strategy_destroy(&s);
  }
  psim_model_destroy(&m);
  return v;
}

/* Peak memory (bytes) of the experts split `ways` ways; NAN when it does not load. */
static double peak_with(inv_inst *x, int ways) {
  psim_strategy s;
  if (!expert_strategy(x, ways, &s))
    return NAN;
  psim_sim_result r;
  double peak = inv_sim(&x->m, &x->c, &s, false, &r) ? r.peak_memory_bytes : NAN;
  psim_sim_result_destroy(&r);
  psim_strategy_destroy(&s);
  return peak;
}

/* (m) Experts split half as many ways (twice the experts per device): no device needs less. */
inv_verdict inv_prop_experts(const inv_case *k, inv_inst *x, char *why, size_t n) {
  int ways = gcd(x->c.n_devices, k->experts);
  if (k->model != INV_M_MOE || x->c.n_devices > 32 || ways < 2)
    return INV_SKIP;
  double fine = peak_with(x, ways), coarse = peak_with(x, ways / 2);
  if (isnan(fine) || isnan(coarse))
    return INV_SKIP;
  if (!inv_le(fine, coarse, 1e-9)) {
    snprintf(why, n, "experts split %d ways: peak %.6g B; %d ways: %.6g B", ways, fine, ways / 2,
             coarse);
    return INV_FAIL;
  }
  return INV_PASS;
}
