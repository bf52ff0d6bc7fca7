/* props2.c - properties (e), (f), (g), (i), (j) of the invariant suite (inv.h). */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "inv.h"
#include "search/policy/policy.h"
#include "sim/builder/memory.h"
#include "sim/delta.h"

/* Bytes moved over links in a kept, expanded-fidelity graph: the bytes the
 * simulation records per transfer and collective task when it keeps the graph
 * (psim_taskgraph.bytes). out[0]: data-parallel communication (gradient sync and ZeRO's
 * parameter gathers, tasks of pass PSIM_TP_COMM_DP), out[1]: the rest (tensor parallel,
 * pipeline, resharding). */
static void graph_bytes(const psim_taskgraph *g, double out[2]) {
  assert(g->bytes);
  out[0] = out[1] = 0;
  for (int32_t t = 0; t < g->n_tasks; t++)
    if (g->info[t].kind == PSIM_TASK_TRANSFER || g->info[t].kind == PSIM_TASK_COLLECTIVE)
      out[g->info[t].pass == PSIM_TP_COMM_DP ? 0 : 1] += g->bytes[t];
}

/* Bytes moved by case k at ZeRO stage z (unfolded, expanded; graph_bytes) and its
 * micro-batches; false when it does not load. */
static bool zero_bytes(const inv_case *k, inv_inst *x, int z, double out[2], int32_t *micro) {
  inv_case k2 = *k;
  k2.zero = z;
  cJSON *j = inv_strategy_json(&k2, &x->m);
  psim_strategy s;
  psim_strategy_init(&s);
  bool ok = false;
  if (psim_strategy_from_json("strategy", j, &x->m, &x->c, &s) == PSIM_OK) {
    psim_sim_options o;
    psim_sim_options_init(&o);
    o.fold = false;
    o.keep_graph = true;
    o.fidelity = PSIM_FIDELITY_EXPANDED;
    psim_sim_result r;
    psim_sim_result_init(&r);
    ok = psim_simulate(&x->m, &x->c, &s, &o, &r) == PSIM_OK && r.graph;
    if (ok)
      graph_bytes(r.graph, out);
    *micro = s.n_micro;
    psim_sim_result_destroy(&r);
  }
  psim_strategy_destroy(&s);
  cJSON_Delete(j);
  return ok;
}

/* Relative agreement of a and b within rel. */
static bool inv_eq(double a, double b, double rel) {
  return fabs(a - b) <= rel * fmax(fabs(a), fabs(b));
}

/* (e) ZeRO's communication volume by stage (docs/simulator.md, "ZeRO stages": per rank of a
 * data-parallel group of n, ring volumes 2(n-1)/n P g at stage 0, (n-1)/n P (g + w) at 1
 * and 2, (n-1)/n P (g + 2 m w) at 3, with g and w the bytes per gradient and per parameter
 * of the memory table, sim/builder/memory.h, and m the micro-batches). With U = stage 0's
 * data-parallel bytes / 2g: stages 1 and 2 move exactly U (g + w) (so with g = w, as fp32
 * and fp16 models, exactly stage 0's bytes; with bf16 or fp8 parameters and fp32 gradients
 * 0.75 of them), stage 3 at least U (g + 2 m w) (stage 2's bytes plus the parameter gathers:
 * a unit may be gathered more than once per pass, e.g. tied embeddings), and the other
 * communication (tensor parallel, pipeline) is the same at every stage. So with one dtype
 * for gradients and parameters stage k+1 never moves fewer bytes than stage k. */
inv_verdict inv_prop_zero(const inv_case *k, inv_inst *x, char *why, size_t n) {
  if (k->dp < 2 || x->c.n_devices > 32)
    return INV_SKIP;
  double b[4][2], pb[3];
  int32_t micro[4];
  for (int z = 0; z < 4; z++)
    if (!zero_bytes(k, x, z, b[z], &micro[z]))
      return INV_SKIP;
  if (b[0][0] <= 0)
    return INV_SKIP; /* no data-parallel gradient sync (every weight sharded) */
  /* The closed forms are ring volumes: exact for the ring algorithm (the measured
   * bus-bandwidth tables only time it). */
  bool exact = k->allreduce == 1;
  psim_memory_param_bytes(x->m.dtype, pb);
  double g = pb[1], w = pb[0], u = b[0][0] / (2 * g), m = micro[3];
  const char *bad = NULL;
  for (int z = 1; z < 4 && !bad; z++)
    if (!inv_eq(b[z][1], b[0][1], 1e-9))
      bad = "other communication differs between stages";
  if (!bad && !inv_eq(b[1][0], b[2][0], 1e-9))
    bad = "stages 1 and 2 differ";
  if (!bad && !inv_le(b[2][0], b[3][0], 1e-9))
    bad = "stage 3 < stage 2";
  if (!bad && exact && (!inv_eq(b[1][0], u * (g + w), 1e-9) || !inv_eq(b[2][0], u * (g + w), 1e-9)))
    bad = "stage 1 or 2 != U (g + w)";
  if (!bad && exact && !inv_le(u * (g + 2 * m * w), b[3][0], 1e-9))
    bad = "stage 3 < U (g + 2 m w)";
  for (int z = 0; z < 3 && !bad && g == w; z++)
    if (!inv_le(b[z][0] + b[z][1], b[z + 1][0] + b[z + 1][1], 1e-9))
      bad = "one dtype, and stage k+1 moves fewer bytes than stage k";
  if (bad)
    snprintf(why, n,
             "%s: data-parallel bytes ZeRO 0 %.9g, 1 %.9g, 2 %.9g, 3 %.9g; other %.9g, %.9g, "
             "%.9g, %.9g; g %g w %g m %g U %.9g",
             bad, b[0][0], b[1][0], b[2][0], b[3][0], b[0][1], b[1][1], b[2][1], b[3][1], g, w, m,
             u);
  return bad ? INV_FAIL : INV_PASS;
}

/* s with one op split further: a dim's degree doubled and its replicas halved, on the same
 * devices; the op's index, or -1 when no op has replicas to trade. */
static int split_further(const inv_case *k, const psim_model *m, const psim_strategy *s,
                         psim_strategy *out) {
  uint64_t r = k->split_seed ^ 0x3141ull;
  int32_t start = inv_pick(&r, s->n_ops);
  for (int32_t q = 0; q < s->n_ops; q++) {
    int32_t i = (start + q) % s->n_ops;
    const psim_op *op = &m->ops[i];
    const psim_op_config *oc = &s->ops[i];
    if (oc->replicas % 2)
      continue;
    for (int32_t d = 0; d < op->n_dims; d++) {
      const psim_dim *dim = &m->dims[op->dims[d].dim];
      int64_t ext = dim->role == PSIM_ROLE_BATCH ? dim->size / s->n_micro : dim->size;
      if (2 * oc->degree[d] > ext)
        continue;
      if (psim_strategy_copy(s, out) != PSIM_OK)
        return -1;
      out->ops[i].degree[d] *= 2;
      out->ops[i].replicas /= 2;
      return i;
    }
  }
  return -1;
}

/* Largest per-device memory without workspace: static bytes + activation peak (unfolded). */
static double memory_max(inv_inst *x, const psim_strategy *s, bool *ok) {
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.fold = false;
  o.keep_graph = true;
  psim_sim_result r;
  psim_sim_result_init(&r);
  double mx = 0;
  *ok = psim_simulate(&x->m, &x->c, s, &o, &r) == PSIM_OK && r.static_bytes && r.activation_peak;
  for (int32_t d = 0; *ok && d < r.n_devices; d++) {
    double v = r.static_bytes[3 * d] + r.static_bytes[3 * d + 1] + r.static_bytes[3 * d + 2] +
               r.activation_peak[d];
    mx = fmax(mx, v);
  }
  psim_sim_result_destroy(&r);
  return mx;
}

/* (f) splitting a dim further (same devices) never grows the largest per-device memory,
 * workspace excepted (resharding buffers may grow with the split). */
inv_verdict inv_prop_memory(const inv_case *k, inv_inst *x, char *why, size_t n) {
  if (x->c.n_devices > 32)
    return INV_SKIP;
  psim_strategy s2;
  psim_strategy_init(&s2);
  int op = split_further(k, &x->m, &x->s, &s2);
  inv_verdict v = INV_SKIP;
  bool ok0, ok1;
  if (op >= 0) {
    double m0 = memory_max(x, &x->s, &ok0), m1 = memory_max(x, &s2, &ok1);
    v = !ok0 || !ok1 ? INV_SKIP : inv_le(m1, m0, 1e-9) ? INV_PASS : INV_FAIL;
    if (v == INV_FAIL)
      snprintf(why, n, "op %s split further: largest device memory %.6g -> %.6g bytes",
               x->m.ops[op].name, m0, m1);
  }
  psim_strategy_destroy(&s2);
  return v;
}

/* (g) doubling the batch at a fixed strategy: T <= T2 <= 2 T and T2 >= its compute. */
inv_verdict inv_prop_batch(const inv_case *k, inv_inst *x, char *why, size_t n) {
  inv_case k2 = *k;
  k2.batch *= 2;
  k2.micro_batches *= 2; /* data_parallel and explicit: same micro-batch size */
  inv_inst y;
  psim_sim_result a, b;
  inv_verdict v = INV_SKIP;
  if (inv_inst_make(&k2, &y) && inv_sim(&x->m, &x->c, &x->s, true, &a)) {
    if (inv_sim(&y.m, &y.c, &y.s, true, &b)) {
      double t = a.iteration_time_s, t2 = b.iteration_time_s;
      bool up = inv_le(t2, 2 * t, 1e-9), down = inv_le(t, t2, 1e-9),
           comp = inv_le(b.compute_s, t2, 1e-9);
      v = up && down && comp ? INV_PASS : INV_FAIL;
      if (v == INV_FAIL)
        snprintf(why, n, "batch %d: %.9g s; batch %d: %.9g s (compute %.9g s)", k->batch, t,
                 k2.batch, t2, b.compute_s);
      psim_sim_result_destroy(&b);
    }
    psim_sim_result_destroy(&a);
  }
  inv_inst_destroy(&y);
  return v;
}

static bool delta_vs_full(psim_delta *d, inv_inst *x, const psim_strategy *s, int32_t op, char *why,
                          size_t n) {
  double td;
  bool fd;
  psim_sim_result r;
  if (psim_delta_eval(d, s, op, &td, &fd) != PSIM_OK)
    return snprintf(why, n, "delta evaluation failed: %s", psim_error_message()), false;
  bool ok = inv_sim(&x->m, &x->c, s, true, &r);
  bool same = ok && td == r.iteration_time_s && fd == r.fits;
  if (ok && !same)
    snprintf(why, n, "after op %d: delta %.17g s (fits %d), full %.17g s (fits %d)", op, td, fd,
             r.iteration_time_s, r.fits);
  psim_sim_result_destroy(&r);
  return !ok || same;
}

/* (i) delta simulation equals the full one exactly: the strategy, a neighbour (one op split
 * further) and the strategy again. */
inv_verdict inv_prop_delta(const inv_case *k, inv_inst *x, char *why, size_t n) {
  psim_delta *d = NULL;
  if (psim_delta_create(&x->m, &x->c, NULL, &d) != PSIM_OK)
    return INV_SKIP;
  psim_strategy s2;
  psim_strategy_init(&s2);
  int op = split_further(k, &x->m, &x->s, &s2);
  bool ok = delta_vs_full(d, x, &x->s, -1, why, n);
  if (ok && op >= 0)
    ok = delta_vs_full(d, x, &s2, op, why, n) && delta_vs_full(d, x, &x->s, op, why, n);
  psim_strategy_destroy(&s2);
  psim_delta_free(d);
  return ok ? INV_PASS : INV_FAIL;
}

/* (j) the plan psim_policy_plan chooses (small budget) is never slower than a baseline it
 * evaluated. */
inv_verdict inv_prop_plan(const inv_case *k, inv_inst *x, char *why, size_t n) {
  (void)k;
  if (x->c.n_devices > 16)
    return INV_SKIP;
  psim_search_options o;
  psim_search_options_init(&o);
  o.budget_evals = 30;
  o.seed = k->split_seed;
  psim_policy_result r;
  psim_policy_result_init(&r);
  inv_verdict v = INV_SKIP;
  if (psim_policy_plan(&x->m, &x->c, "auto", &o, true, &r) == PSIM_OK && r.result.found) {
    double t = r.result.best_sim.iteration_time_s;
    v = INV_PASS;
    if (r.dp_sim && r.dp_sim->fits && !inv_le(t, r.dp_sim->iteration_time_s, 1e-9))
      v = INV_FAIL, snprintf(why, n, "plan (%s) %.9g s, data-parallel baseline %.9g s", r.searcher,
                             t, r.dp_sim->iteration_time_s);
    if (r.grid_sim && r.grid_sim->fits && !inv_le(t, r.grid_sim->iteration_time_s, 1e-9))
      v = INV_FAIL, snprintf(why, n, "plan (%s) %.9g s, Megatron grid baseline %.9g s", r.searcher,
                             t, r.grid_sim->iteration_time_s);
  }
  psim_policy_result_destroy(&r);
  return v;
}
