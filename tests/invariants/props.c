/* props.c - properties (a)-(d), (h), (k) of the invariant suite (inv.h, docs/testing.md). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "inv.h"
#include "sim/faults.h"

bool inv_le(double a, double b, double rel) {
  return a <= b + rel * fabs(b);
}

bool inv_sim(const psim_model *m, psim_cluster *c, const psim_strategy *s, bool fold,
             psim_sim_result *r) {
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.fold = fold;
  psim_sim_result_init(r);
  return psim_simulate(m, c, s, &o, r) == PSIM_OK;
}

/* Iteration time of x's model and strategy on the cluster document j; NAN when it fails.
 * Properties (b) and (c) run unfolded: a changed cluster (a link removed, a device slowed)
 * may fold differently, and folding's own error is property (h)'s, not theirs. */
static double time_on(inv_inst *x, const cJSON *j, bool fold) {
  psim_cluster c;
  if (!inv_cluster_load(j, &c))
    return NAN;
  psim_sim_result r;
  double t = inv_sim(&x->m, &c, &x->s, fold, &r) ? r.iteration_time_s : NAN;
  psim_sim_result_destroy(&r);
  psim_cluster_destroy(&c);
  return t;
}

static double base_time(inv_inst *x, bool fold) {
  psim_sim_result r;
  double t = inv_sim(&x->m, &x->c, &x->s, fold, &r) ? r.iteration_time_s : NAN;
  psim_sim_result_destroy(&r);
  return t;
}

/* (a) x2 bandwidth, x2 peak FLOP/s, /2 latency never make an iteration slower. */
static inv_verdict prop_hardware(const inv_case *k, inv_inst *x, char *why, size_t n) {
  (void)k;
  double t0 = base_time(x, true);
  if (isnan(t0))
    return INV_SKIP;
  const char *what[] = {"bandwidth x2", "peak FLOP/s x2"};
  for (int i = 0; i < 2; i++) {
    cJSON *j = cJSON_Duplicate(x->cluster_json, 1);
    bool ok = i == 0 ? inv_scale_bandwidth(j, 2) : inv_scale_flops(j, 2);
    double t = ok ? time_on(x, j, true) : NAN;
    cJSON_Delete(j);
    if (!ok || isnan(t))
      return snprintf(why, n, "%s: the changed cluster does not load or simulate", what[i]),
             INV_FAIL;
    if (!inv_le(t, t0, 1e-9))
      return snprintf(why, n, "%s: %.9g s -> %.9g s (slower)", what[i], t0, t), INV_FAIL;
  }
  cJSON *e = NULL;
  if (psim_cluster_to_json(&x->c, &e) != PSIM_OK)
    return INV_SKIP;
  double te = time_on(x, e, true);
  bool ok = inv_scale_latency(e, 0.5);
  double tl = ok ? time_on(x, e, true) : NAN;
  cJSON_Delete(e);
  if (!isnan(te) && !isnan(tl) && !inv_le(tl, te, 1e-9))
    return snprintf(why, n, "latency /2 (explicit form): %.9g s -> %.9g s (slower)", te, tl),
           INV_FAIL;
  return INV_PASS;
}

/* A link of x's cluster drawn from the case: its ends' names. */
static int pick_link(const inv_case *k, inv_inst *x) {
  uint64_t r = k->split_seed ^ 0x5151ull;
  return x->c.n_links ? inv_pick(&r, x->c.n_links) : -1;
}

/* The explicit form of x's cluster without the duplex link between a and b. */
static cJSON *without_link(inv_inst *x, const char *a, const char *b) {
  cJSON *e = NULL;
  if (psim_cluster_to_json(&x->c, &e) != PSIM_OK)
    return NULL;
  cJSON *links = cJSON_GetObjectItem(e, "links"), *l;
  int i = 0;
  cJSON_ArrayForEach(l, links) {
    const char *la = cJSON_GetObjectItem(l, "a")->valuestring;
    const char *lb = cJSON_GetObjectItem(l, "b")->valuestring;
    if ((!strcmp(la, a) && !strcmp(lb, b)) || (!strcmp(la, b) && !strcmp(lb, a))) {
      cJSON_DeleteItemFromArray(links, i);
      break;
    }
    i++;
  }
  return e;
}

/* (b) removing a link (from the explicit form) or failing it (sim/faults.h) never makes an
 * iteration faster. */
static inv_verdict prop_link(const inv_case *k, inv_inst *x, char *why, size_t n) {
  int li = pick_link(k, x);
  if (li < 0)
    return INV_SKIP;
  const char *a = x->c.vertex_names[x->c.links[li].src], *b = x->c.vertex_names[x->c.links[li].dst];
  cJSON *full = NULL, *cut = without_link(x, a, b);
  if (!cut || psim_cluster_to_json(&x->c, &full) != PSIM_OK)
    return cJSON_Delete(cut), INV_SKIP;
  double t0 = time_on(x, full, false), t1 = time_on(x, cut, false);
  cJSON_Delete(full);
  cJSON_Delete(cut);
  if (!isnan(t0) && !isnan(t1) && !inv_le(t0, t1, 1e-9))
    return snprintf(why, n, "link %s-%s removed from the explicit form: %.9g s -> %.9g s", a, b, t0,
                    t1),
           INV_FAIL;
  psim_fault_options fo;
  psim_fault_options_init(&fo);
  fo.iterations = 3;
  fo.n_events = 1;
  fo.events[0].kind = PSIM_FAULT_FAIL_LINK;
  snprintf(fo.events[0].a, PSIM_FAULTS_NAME, "%s", a);
  snprintf(fo.events[0].b, PSIM_FAULTS_NAME, "%s", b);
  fo.events[0].time_s = 0;
  psim_fault_report rep;
  psim_fault_report_init(&rep);
  psim_sim_options so;
  psim_sim_options_init(&so);
  psim_status st = psim_faults_run(&x->m, &x->c, &x->s, &so, &fo, &rep);
  inv_verdict v = INV_PASS;
  for (int i = 0; st == PSIM_OK && i < rep.n_rec; i++)
    if (rep.rec[i].recovery && !strcmp(rep.rec[i].recovery, "link_reroute") &&
        !inv_le(rep.rec[i].iteration_before_s, rep.rec[i].iteration_after_s, 1e-9)) {
      snprintf(why, n, "--fail-link %s-%s@0: iteration %.9g s -> %.9g s (faster)", a, b,
               rep.rec[i].iteration_before_s, rep.rec[i].iteration_after_s);
      v = INV_FAIL;
    }
  psim_fault_report_destroy(&rep);
  return v;
}

/* (c) a device computing 2x slower (--slow DEVICE=2) never makes an iteration faster (both
 * unfolded: a slowed device breaks the symmetry folding needs). */
static inv_verdict prop_straggler(const inv_case *k, inv_inst *x, char *why, size_t n) {
  double t0 = base_time(x, false);
  uint64_t r = k->split_seed ^ 0x7777ull;
  int dev = x->s.ops[inv_pick(&r, x->s.n_ops)].devices[0];
  psim_fault_options fo;
  psim_fault_options_init(&fo);
  fo.n_slow = 1;
  snprintf(fo.slow[0].a, PSIM_FAULTS_NAME, "%s", x->c.devices[dev].name);
  fo.slow[0].factor = 2;
  psim_cluster c;
  if (isnan(t0) || !inv_cluster_load(x->cluster_json, &c))
    return INV_SKIP;
  double t = NAN;
  if (psim_faults_apply_slowdowns(&fo, &c) == PSIM_OK) {
    psim_sim_result res;
    if (inv_sim(&x->m, &c, &x->s, false, &res))
      t = res.iteration_time_s;
    psim_sim_result_destroy(&res);
  }
  psim_cluster_destroy(&c);
  if (isnan(t))
    return snprintf(why, n, "--slow %s=2 fails to simulate", x->c.devices[dev].name), INV_FAIL;
  if (!inv_le(t0, t, 1e-9))
    return snprintf(why, n, "--slow %s=2: %.9g s -> %.9g s (faster)", x->c.devices[dev].name, t0,
                    t),
           INV_FAIL;
  return INV_PASS;
}

/* Case k with another recompute setting, unfolded (hardware FLOPs summed over every device):
 * its iteration time and hardware FLOPs; false when it does not load. */
static bool run_recompute(const inv_case *k, inv_inst *x, int recompute, double *t, double *hw,
                          psim_strategy *s) {
  inv_case k2 = *k;
  k2.recompute = recompute;
  cJSON *j = inv_strategy_json(&k2, &x->m);
  bool ok = false;
  if (psim_strategy_from_json("strategy", j, &x->m, &x->c, s) == PSIM_OK) {
    psim_sim_result r;
    ok = inv_sim(&x->m, &x->c, s, x->c.n_devices > 32, &r);
    *t = r.iteration_time_s;
    *hw = r.hardware_flops;
    psim_sim_result_destroy(&r);
  }
  cJSON_Delete(j);
  return ok;
}

/* FLOPs selective recompute may add: the forward of the attention core (ops tagged
 * attn_core: QK^T, softmax, dropout, AV, or the fused attention; Korthikanti et al. 2022,
 * section 4.2), each shard on each of its replicas. */
static double attn_core_flops(const psim_model *m, const psim_strategy *s) {
  double f = 0;
  for (int32_t i = 0; i < m->n_ops; i++)
    if (m->ops[i].tag && !strcmp(m->ops[i].tag, "attn_core"))
      f += m->ops[i].flops[PSIM_PASS_FWD] * s->ops[i].replicas;
  return f;
}

/* (d) none <= selective <= full in time, and selective recomputes no more than the attention
 * core (its hardware FLOPs exceed none's by at most the core's forward FLOPs). */
static inv_verdict prop_recompute(const inv_case *k, inv_inst *x, char *why, size_t n) {
  double t[3], hw[3], core = 0;
  bool ok = true;
  for (int i = 0; i < 3; i++) {
    psim_strategy s;
    psim_strategy_init(&s);
    ok = ok && run_recompute(k, x, i, &t[i], &hw[i], &s);
    if (ok && i == 1)
      core = attn_core_flops(&x->m, &s);
    psim_strategy_destroy(&s);
  }
  if (!ok)
    return INV_SKIP;
  if (!inv_le(t[0], t[1], 1e-9) || !inv_le(t[1], t[2], 1e-9))
    return snprintf(why, n, "recompute none %.9g s, selective %.9g s, full %.9g s", t[0], t[1],
                    t[2]),
           INV_FAIL;
  if (x->c.n_devices <= 32 && !inv_le(hw[1] - hw[0], core, 1e-6))
    return snprintf(why, n,
                    "selective recomputes %.6g FLOPs, the attention core's forward is %.6g "
                    "(full recomputes %.6g; times none %.9g, selective %.9g, full %.9g s)",
                    hw[1] - hw[0], core, hw[2] - hw[0], t[0], t[1], t[2]),
           INV_FAIL;
  return INV_PASS;
}

/* (h) folded and unfolded simulation agree within 1e-9 relative. */
static inv_verdict prop_fold(const inv_case *k, inv_inst *x, char *why, size_t n) {
  (void)k;
  psim_sim_result a, b;
  bool ok = inv_sim(&x->m, &x->c, &x->s, true, &a) && inv_sim(&x->m, &x->c, &x->s, false, &b);
  inv_verdict v = INV_SKIP;
  if (ok && a.folded) {
    double ta = a.iteration_time_s, tb = b.iteration_time_s;
    v = fabs(ta - tb) <= 1e-9 * fabs(tb) ? INV_PASS : INV_FAIL;
    if (v == INV_FAIL)
      snprintf(why, n, "folded %.12g s (%d devices simulated), unfolded %.12g s (rel %.2e)", ta,
               a.simulated_devices, tb, fabs(ta - tb) / tb);
  }
  psim_sim_result_destroy(&a);
  if (ok)
    psim_sim_result_destroy(&b);
  return v;
}

/* (k) the time breakdown of the critical device (docs/simulator.md, "Time breakdown"):
 * compute + exposed communication by kind + bubble + waits (parameter server, host,
 * straggler) = the iteration time, every part >= 0, and no bubble without pipeline
 * parallelism (one stage). */
static inv_verdict prop_breakdown(const inv_case *k, inv_inst *x, char *why, size_t n) {
  (void)k;
  psim_sim_result r;
  if (!inv_sim(&x->m, &x->c, &x->s, true, &r))
    return psim_sim_result_destroy(&r), INV_SKIP;
  double comm = 0, wait = 0, least = fmin(r.compute_s, r.bubble_s);
  for (int i = 0; i < PSIM_COMM_KIND_COUNT; i++)
    comm += r.exposed_comm_s[i], least = fmin(least, r.exposed_comm_s[i]);
  for (int i = 0; i < PSIM_WAIT_KIND_COUNT; i++)
    wait += r.wait_s[i], least = fmin(least, r.wait_s[i]);
  double sum = r.compute_s + comm + r.bubble_s + wait, t = r.iteration_time_s;
  const char *bad = fabs(sum - t) > 1e-9 * t ? "parts do not sum to the iteration time"
                    : least < 0              ? "a negative part"
                    : x->s.n_stages == 1 && r.bubble_s > 0 ? "a bubble at one pipeline stage"
                                                           : NULL;
  if (bad)
    snprintf(why, n,
             "%s: compute %.9g + exposed comm %.9g (tp %.9g pp %.9g dp %.9g other %.9g) + bubble "
             "%.9g + wait %.9g (server %.9g host %.9g straggler %.9g) = %.9g s, iteration %.9g s",
             bad, r.compute_s, comm, r.exposed_comm_s[0], r.exposed_comm_s[1], r.exposed_comm_s[2],
             r.exposed_comm_s[3], r.bubble_s, wait, r.wait_s[0], r.wait_s[1], r.wait_s[2], sum, t);
  psim_sim_result_destroy(&r);
  return bad ? INV_FAIL : INV_PASS;
}

inv_verdict inv_prop_zero(const inv_case *k, inv_inst *x, char *why, size_t n);
/* props_moe.c (issue 21) */
inv_verdict inv_prop_routing(const inv_case *k, inv_inst *x, char *why, size_t n);
inv_verdict inv_prop_experts(const inv_case *k, inv_inst *x, char *why, size_t n);
inv_verdict inv_prop_memory(const inv_case *k, inv_inst *x, char *why, size_t n);
inv_verdict inv_prop_batch(const inv_case *k, inv_inst *x, char *why, size_t n);
inv_verdict inv_prop_delta(const inv_case *k, inv_inst *x, char *why, size_t n);
inv_verdict inv_prop_plan(const inv_case *k, inv_inst *x, char *why, size_t n);

const inv_prop inv_props[] = {
    {"hardware", "(a) x2 bandwidth, x2 FLOP/s, /2 latency never slower", prop_hardware, 1},
    {"link", "(b) removing or failing a link never faster", prop_link, 1},
    {"straggler", "(c) a device 2x slower never faster", prop_straggler, 1},
    {"recompute", "(d) none <= selective <= full", prop_recompute, 1},
    {"zero", "(e) ZeRO volumes by stage (docs/simulator.md)", inv_prop_zero, 1},
    {"memory", "(f) memory per device never grows when a dim is split further", inv_prop_memory, 1},
    {"batch", "(g) 2x batch: T <= T2 <= 2T, T2 >= its compute", inv_prop_batch, 1},
    {"fold", "(h) folded == unfolded within 1e-9", prop_fold, 1},
    {"delta", "(i) delta == full simulation exactly", inv_prop_delta, 1},
    {"plan", "(j) the plan is never slower than a baseline", inv_prop_plan, 40},
    {"breakdown", "(k) breakdown parts sum to the iteration time", prop_breakdown, 1},
    {"routing", "(l) a more skewed MoE routing never faster (dropless)", inv_prop_routing, 1},
    {"experts", "(m) more experts per device never less memory", inv_prop_experts, 1},
};
const int inv_n_props = (int)(sizeof inv_props / sizeof inv_props[0]);
