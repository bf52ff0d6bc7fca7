/* test_moe_a2a.c - a MoE all-to-all under a dispatcher that sends a token once per
 * destination rank and once per destination node (DeepEP / HybridEP, the stack's
 * moe_dispatcher; sim/builder/moe_a2a.c, docs/stacks.md): the probability that top-k
 * routing reaches a set of experts against the closed form 1 - C(n - m, k) / C(n, k) and
 * against enumeration of every expert subset, the bytes that cross InfiniBand on two DGX
 * H100 nodes against E[distinct destination nodes], and never more than the rank-pair
 * exchange's (alltoall) bytes; HybridEP's exchange inside one DGX B200 at the README's
 * measured NVLink rate, one across nodes at the link's. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "models/generators.h"
#include "sim/builder/routing.h"
#include "sim/core/json.h"
#include "sim/engine/collective.h"
#include "sim/simulate.h"
#include "topologies/presets.h"

/* C(n, k), exact for the sizes below (C(128, 8) = 1.4e12). */
static double binom(int n, int k) {
  if (k < 0 || k > n)
    return 0;
  uint64_t c = 1;
  for (int i = 1; i <= k; i++)
    c = c * (uint64_t)(n - k + i) / (uint64_t)i; /* exact: c is C(n - k + i, i) */
  return (double)c;
}

/* Uniform routing: P(a token's k experts include one of m) = 1 - C(n - m, k) / C(n, k). */
START_TEST(hit_prob_is_the_closed_form) {
  static const int cases[][3] = {{128, 8, 8}, {128, 8, 16}, {128, 8, 64}, {256, 8, 32},
                                 {16, 4, 8},  {32, 4, 2},   {8, 2, 1},    {8, 8, 1},
                                 {12, 3, 4},  {64, 6, 60},  {10, 9, 2},   {128, 8, 120}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int n = cases[i][0], k = cases[i][1], m = cases[i][2];
    double want = 1 - binom(n - m, k) / binom(n, k);
    double got = psim_routing_hit_prob(n, k, m, (double)m / n);
    ck_assert_msg(fabs(got - want) < 1e-12, "n %d k %d m %d: %.15g, want %.15g", n, k, m, got,
                  want);
    ck_assert(got <= k * (double)m / n + 1e-12); /* never more than alltoall's copies */
  }
  ck_assert(psim_routing_hit_prob(16, 4, 0, 0) == 0);
  ck_assert(psim_routing_hit_prob(16, 4, 16, 1) == 1);
}
END_TEST

/* E[distinct groups] over every k-subset of e experts in groups of e / groups, enumerated. */
static double enumerate_groups(int e, int k, int groups) {
  double sum = 0, count = 0;
  for (uint32_t s = 0; s < (1u << e); s++) {
    if (__builtin_popcount(s) != k)
      continue;
    int hit = 0;
    for (int g = 0; g < groups; g++)
      hit += (s >> (g * (e / groups)) & ((1u << (e / groups)) - 1)) != 0;
    sum += hit;
    count++;
  }
  return sum / count;
}

/* The expected distinct nodes (and ranks) per token: groups x P(group), as DeepEP's
 * get_expected_topk counts them, equals the enumeration of all expert subsets. */
START_TEST(distinct_groups_match_enumeration) {
  static const int cases[][3] = {{8, 2, 2},  {8, 3, 4},  {12, 3, 3}, {12, 4, 2},
                                 {16, 4, 2}, {16, 4, 4}, {16, 2, 8}, {16, 6, 16}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int e = cases[i][0], k = cases[i][1], g = cases[i][2];
    double want = enumerate_groups(e, k, g);
    double got = g * psim_routing_hit_prob(e, k, e / g, 1.0 / g);
    ck_assert_msg(fabs(got - want) < 1e-12, "e %d k %d groups %d: %.15g, want %.15g", e, k, g, got,
                  want);
  }
}
END_TEST

/* P(one of experts [lo, hi) among k drawn without replacement, each draw in proportion
 * to the remaining weights w), by enumerating every ordered draw (Plackett-Luce). */
static double draw_exact(const double *w, int n, int k, int lo, int hi, uint32_t used) {
  if (k == 0)
    return 0;
  double left = 0, p = 0;
  for (int e = 0; e < n; e++)
    left += used >> e & 1 ? 0 : w[e];
  for (int e = 0; e < n; e++) {
    if (used >> e & 1)
      continue;
    double q = w[e] / left;
    p += q * (e >= lo && e < hi ? 1 : draw_exact(w, n, k - 1, lo, hi, used | 1u << e));
  }
  return p;
}

/* Skewed routing: the probability is at least the first draw's (the set's share), and
 * under sequential draws in proportion to the weights it is within 0.1 of the exact
 * enumeration and not above it (the mean share outside the set stands for the experts the
 * missing draws took: zipf:1.2 on 12 experts, top-3, sets of 4, 0.29 where 0.34 is exact). */
START_TEST(skewed_hit_prob_is_bounded) {
  enum { N = 12, K = 3 };
  psim_routing r;
  ck_assert(psim_routing_parse("zipf:1.2", &r) == PSIM_OK);
  double w[N];
  for (int e = 0; e < N; e++)
    w[e] = psim_routing_share(&r, N, e, e + 1);
  for (int lo = 0; lo < N; lo += 4) {
    double s = psim_routing_share(&r, N, lo, lo + 4);
    double p = psim_routing_hit_prob(N, K, 4, s), exact = draw_exact(w, N, K, lo, lo + 4, 0);
    ck_assert_msg(p >= s - 1e-12 && p <= exact + 1e-12 && exact - p < 0.1,
                  "experts %d..%d: share %g, P %g, exact %g", lo, lo + 4, s, p, exact);
  }
  psim_routing_destroy(&r);
  ck_assert(psim_routing_parse("uniform", &r) == PSIM_OK);
  ck_assert(fabs(psim_routing_share(&r, 32, 4, 12) - 0.25) < 1e-15);
  for (int e = 0; e < N; e++)
    w[e] = 1;
  ck_assert(fabs(draw_exact(w, N, K, 0, 4, 0) - psim_routing_hit_prob(N, K, 4, 4.0 / N)) < 1e-12);
  psim_routing_destroy(&r);
}
END_TEST

#define NODES   2
#define GPUS    (8 * NODES) /* DGX H100 */
#define EXPERTS (2 * GPUS)  /* two per rank */
#define TOP_K   4
#define SEQ     256
#define HIDDEN  256

typedef struct fixture {
  psim_model m;
  psim_cluster c;
  psim_strategy s;
} fixture;

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

/* f's model generated from o (dropless) and its cluster: `nodes` nodes of the preset. */
static void load_model_and_cluster(fixture *f, const psim_gen_tf_opts *o, const char *preset,
                                   int nodes) {
  cJSON *doc = NULL;
  ck_assert_msg(psim_gen_moe(o, &doc) == PSIM_OK, "%s", psim_error_message());
  make_dropless(cJSON_GetObjectItem(doc, "ops"));
  psim_model_init(&f->m);
  ck_assert_msg(psim_model_from_json("moe", doc, &f->m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(doc);
  psim_preset_opts po;
  psim_preset_opts_init(&po);
  po.preset = preset;
  po.nodes = nodes;
  ck_assert(psim_preset_cluster(&po, &doc) == PSIM_OK);
  psim_cluster_init(&f->c);
  ck_assert_msg(psim_cluster_from_json("h100", doc, &f->c) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(doc);
}

/* One MoE layer of EXPERTS experts, top-4, on `nodes` nodes of the preset (8 GPUs each; two
 * DGX H100 unless told): data parallel over the GPUs, the experts split as many ways (ep 16
 * over two nodes). */
static void setup_on(fixture *f, psim_moe_dispatcher disp, const char *preset, int nodes) {
  int gpus = 8 * nodes;
  psim_gen_tf_opts o;
  psim_gen_moe_opts_init(&o);
  o.layers = 1;
  o.hidden = HIDDEN;
  o.heads = 4;
  o.ffn = 4 * HIDDEN;
  o.vocab = 1024;
  o.seq = SEQ;
  o.batch = GPUS;
  o.experts = EXPERTS;
  o.top_k = TOP_K;
  load_model_and_cluster(f, &o, preset, nodes);
  cJSON *doc = NULL;
  f->c.stack.moe_dispatcher = disp;
  char js[1024];
  snprintf(js, sizeof js,
           "{\"format\":\"plansim.strategy/1\",\"mesh\":{\"axes\":{\"dp\":%d}},\"layout\":{"
           "\"batch\":\"dp\"},\"ops\":{\"layer.*.fc1\":{\"split\":{\"expert\":%d}},"
           "\"layer.*.fc2\":{\"split\":{\"expert\":%d}},\"layer.*.gelu\":{\"split\":{"
           "\"expert\":%d}}}}",
           gpus, gpus, gpus, gpus);
  doc = cJSON_Parse(js);
  psim_strategy_init(&f->s);
  ck_assert_msg(psim_strategy_from_json("s", doc, &f->m, &f->c, &f->s) == PSIM_OK, "%s",
                psim_error_message());
  cJSON_Delete(doc);
}

static void setup(fixture *f, psim_moe_dispatcher disp) {
  setup_on(f, disp, "dgx-h100", NODES);
}

static void teardown(fixture *f) {
  psim_strategy_destroy(&f->s);
  psim_cluster_destroy(&f->c);
  psim_model_destroy(&f->m);
}

static int32_t op_named(const psim_model *m, const char *name) {
  for (int32_t o = 0; o < m->n_ops; o++)
    if (strcmp(m->ops[o].name, name) == 0)
      return o;
  ck_abort_msg("no op %s", name);
  return -1;
}

/* Whether task i's route holds a NIC link (it crosses nodes). */
static bool crosses_nodes(const psim_cluster *c, const psim_taskgraph *g, int32_t i) {
  for (int32_t j = g->res_first[i]; j < g->res_first[i + 1]; j++) {
    int32_t l = g->res[j] - psim_res_link(c->n_devices, 0);
    if (l >= 0 && l < c->n_links && c->links[l].kind == PSIM_LINK_NIC)
      return true;
  }
  return false;
}

/* Simulates f under uniform routing (*rt parsed here, the caller destroys it), keeping the
 * graph. */
static void simulate_uniform(fixture *f, psim_routing *rt, psim_sim_result *r) {
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.keep_graph = true;
  ck_assert(psim_routing_parse("uniform", rt) == PSIM_OK);
  o.routing = rt;
  psim_sim_result_init(r);
  ck_assert_msg(psim_simulate(&f->m, &f->c, &f->s, &o, r) == PSIM_OK, "%s", psim_error_message());
}

/* The bytes of op o's transfers over InfiniBand (ib) and inside nodes (nvl), per
 * direction of the route (a cross-node transfer's NIC links are counted once). */
static void transfer_bytes(psim_moe_dispatcher disp, const char *op, double *ib, double *nvl,
                           double *elem_bytes) {
  fixture f;
  setup(&f, disp);
  psim_routing rt;
  psim_sim_result r;
  simulate_uniform(&f, &rt, &r);
  int32_t x = op_named(&f.m, op);
  const psim_taskgraph *g = r.graph;
  *ib = *nvl = 0;
  for (int32_t i = 0; i < g->n_tasks; i++)
    if (g->info[i].kind == PSIM_TASK_TRANSFER && g->info[i].op == x)
      *(crosses_nodes(&f.c, g, i) ? ib : nvl) += g->bytes[i];
  *elem_bytes = (double)psim_dtype_bytes(f.m.tensors[f.m.ops[x].out[0]].dtype);
  psim_sim_result_destroy(&r);
  psim_routing_destroy(&rt);
  teardown(&f);
}

/* The forward dispatch on ep 16 over two nodes, uniform routing: each rank's SEQ tokens
 * (one sample) cross InfiniBand P(node) = 1 - C(E - E/2, k) / C(E, k) times with DeepEP
 * (once per remote node) against k / 2 copies with alltoall (one per remote expert); inside
 * the nodes, each of the 7 peers and each of the relay's 7 forwards carries P(rank) =
 * 1 - C(E - 2, k) / C(E, k) of them. */
START_TEST(dedup_crosses_infiniband_once_per_node) {
  double ib_a, nvl_a, ib_d, nvl_d, eb;
  transfer_bytes(PSIM_MOE_ALLTOALL, "layer.0.dispatch", &ib_a, &nvl_a, &eb);
  transfer_bytes(PSIM_MOE_DEEPEP, "layer.0.dispatch", &ib_d, &nvl_d, &eb);
  double tok = (double)SEQ * HIDDEN * eb; /* one rank's tokens, bytes */
  double p_node = 1 - binom(EXPERTS - EXPERTS / NODES, TOP_K) / binom(EXPERTS, TOP_K);
  double p_rank = 1 - binom(EXPERTS - 2, TOP_K) / binom(EXPERTS, TOP_K);
  double want_ib = GPUS * tok * p_node, want_ib_a = GPUS * tok * TOP_K / 2.0;
  ck_assert_msg(fabs(ib_a / want_ib_a - 1) < 1e-9, "alltoall %g B over IB, want %g", ib_a,
                want_ib_a);
  ck_assert_msg(fabs(ib_d / want_ib - 1) < 1e-9, "deepep %g B over IB, want %g", ib_d, want_ib);
  double want_nvl = GPUS * 14 * tok * p_rank;
  ck_assert_msg(fabs(nvl_d / want_nvl - 1) < 1e-9, "deepep %g B inside nodes, want %g", nvl_d,
                want_nvl);
  ck_assert(ib_d <= ib_a);
}
END_TEST

/* Never more InfiniBand traffic than the rank-pair exchange, forward and backward, for
 * dispatch and combine; HybridEP sends what DeepEP sends. */
START_TEST(dedup_never_exceeds_rank_pairs) {
  static const char *const ops[] = {"layer.0.dispatch", "layer.0.fc2", "layer.0.combine"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    double ib_a, nvl_a, ib_d, nvl_d, ib_h, nvl_h, eb;
    transfer_bytes(PSIM_MOE_ALLTOALL, ops[i], &ib_a, &nvl_a, &eb);
    transfer_bytes(PSIM_MOE_DEEPEP, ops[i], &ib_d, &nvl_d, &eb);
    transfer_bytes(PSIM_MOE_HYBRIDEP, ops[i], &ib_h, &nvl_h, &eb);
    ck_assert_msg(ib_d <= ib_a * (1 + 1e-12), "%s: %g > %g", ops[i], ib_d, ib_a);
    ck_assert(ib_h == ib_d && nvl_h == nvl_d);
  }
}
END_TEST

/* Each transfer of op's forward dispatch under disp on `nodes` nodes of preset, uniform
 * routing: calls check(duration, bytes, latency of the route, arg) for each. */
typedef void (*xfer_check)(double dur_s, double bytes, double lat_s, double arg);
static int32_t each_transfer(psim_moe_dispatcher disp, const char *preset, int nodes,
                             xfer_check check, double arg) {
  fixture f;
  setup_on(&f, disp, preset, nodes);
  psim_routing rt;
  psim_sim_result r;
  simulate_uniform(&f, &rt, &r);
  int32_t x = op_named(&f.m, "layer.0.dispatch"), n = 0;
  double lat;
  ck_assert(psim_p2p_time(&f.c, 0, 1, 0, &lat) == PSIM_OK); /* NVSwitch: every pair alike */
  const psim_taskgraph *g = r.graph;
  for (int32_t i = 0; i < g->n_tasks; i++)
    if (g->info[i].kind == PSIM_TASK_TRANSFER && g->info[i].op == x &&
        g->info[i].pass == PSIM_TP_COMM_TP && !crosses_nodes(&f.c, g, i)) {
      check(g->duration_s[i], g->bytes[i], lat, arg);
      n++;
    }
  psim_sim_result_destroy(&r);
  psim_routing_destroy(&rt);
  teardown(&f);
  return n;
}

static void at_rate(double dur_s, double bytes, double lat_s, double bw) {
  double want = lat_s + bytes / bw;
  ck_assert_msg(fabs(dur_s / want - 1) < 1e-9, "transfer of %g B took %g s, want %g s", bytes,
                dur_s, want);
}

/* HybridEP inside one DGX B200 (ep 8, 4 experts a rank): each rank-pair transfer of the
 * forward dispatch takes latency + bytes / (f x 900 GB/s), f = 545.71 GB/s x 7/8 / 900 GB/s
 * (README_Hybrid-EP.md @ 41cad944: GB200, 8 ranks, 32 SMs, BF16 dispatch through the torch
 * API, of which 7 of 8 shares cross NVLink), alltoall and DeepEP at the link's 900 GB/s; on
 * two DGX H100 nodes (an exchange across nodes) HybridEP's NVLink transfers keep the link's
 * 450 GB/s. */
START_TEST(hybridep_reaches_its_measured_nvlink_rate) {
  double f = 545.71 * 7 / 8 / 900;
  ck_assert_int_gt(each_transfer(PSIM_MOE_HYBRIDEP, "dgx-b200", 1, at_rate, f * 900e9), 0);
  ck_assert_int_gt(each_transfer(PSIM_MOE_ALLTOALL, "dgx-b200", 1, at_rate, 900e9), 0);
  ck_assert_int_gt(each_transfer(PSIM_MOE_DEEPEP, "dgx-b200", 1, at_rate, 900e9), 0);
  ck_assert_int_gt(each_transfer(PSIM_MOE_HYBRIDEP, "dgx-h100", 2, at_rate, 450e9), 0);
}
END_TEST

/* Two MoE layers, ep 8 on one DGX H100, `micro` micro-batches of 8 samples under 1F1B. */
static void setup_combined(fixture *f, int micro) {
  psim_gen_tf_opts o;
  psim_gen_moe_opts_init(&o);
  o.layers = 2;
  o.hidden = 2048;
  o.heads = 16;
  o.ffn = 4 * 2048;
  o.vocab = 1024;
  o.seq = 4096;
  o.batch = 8 * micro;
  o.experts = 16;
  o.top_k = TOP_K;
  load_model_and_cluster(f, &o, "dgx-h100", 1);
  cJSON *doc = NULL;
  char js[1024];
  snprintf(js, sizeof js,
           "{\"format\":\"plansim.strategy/1\",\"mesh\":{\"axes\":{\"dp\":8}},\"layout\":{"
           "\"batch\":\"dp\"},\"pipeline\":{\"micro_batches\":%d,\"schedule\":\"1f1b\"},"
           "\"ops\":{"
           "\"layer.*.fc1\":{\"split\":{\"expert\":8}},\"layer.*.fc2\":{\"split\":{"
           "\"expert\":8}},\"layer.*.gelu\":{\"split\":{\"expert\":8}}}}",
           micro);
  doc = cJSON_Parse(js);
  psim_strategy_init(&f->s);
  ck_assert_msg(psim_strategy_from_json("s", doc, &f->m, &f->c, &f->s) == PSIM_OK, "%s",
                psim_error_message());
  cJSON_Delete(doc);
}

/* The iteration time of f with the stack's moe_a2a_overlap on or off. */
static double iteration_s(fixture *f, bool overlap) {
  psim_routing rt;
  psim_sim_result r;
  f->c.stack.moe_a2a_overlap = overlap;
  simulate_uniform(f, &rt, &r);
  double t = r.iteration_time_s;
  psim_sim_result_destroy(&r);
  psim_routing_destroy(&rt);
  return t;
}

/* Combined 1F1B (moe_a2a_overlap) reorders one stream's kernels: it saves time only by
 * hiding all-to-all time, so the overlapped iteration is shorter than the plain one by no
 * more than the plain one's exposed communication (its time less the same iteration with
 * free links), at least by some of it here (each all-to-all has another micro-batch's
 * segment to run under), and equal to it when the links are free. */
START_TEST(combined_1f1b_hides_at_most_the_alltoall) {
  fixture f;
  setup_combined(&f, 4);
  double off = iteration_s(&f, false), on = iteration_s(&f, true);
  for (int32_t l = 0; l < f.c.n_links; l++) {
    f.c.links[l].bw = 1e30;
    f.c.links[l].latency_s = 0;
  }
  double free_off = iteration_s(&f, false), free_on = iteration_s(&f, true);
  double exposed = off - free_off;
  ck_assert_msg(exposed > 1e-3 * off, "no exposed communication: %g s of %g s", exposed, off);
  ck_assert_msg(on < off - 0.1 * exposed, "overlap hid nothing: %g s vs %g s", on, off);
  ck_assert_msg(off - on <= exposed * (1 + 1e-9), "saved %g s, exposed %g s", off - on, exposed);
  ck_assert_msg(fabs(free_on - free_off) <= 1e-9 * free_off, "free links: %g s vs %g s", free_on,
                free_off);
  teardown(&f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("moe_a2a");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, hit_prob_is_the_closed_form);
  tcase_add_test(tc, distinct_groups_match_enumeration);
  tcase_add_test(tc, skewed_hit_prob_is_bounded);
  tcase_add_test(tc, dedup_crosses_infiniband_once_per_node);
  tcase_add_test(tc, dedup_never_exceeds_rank_pairs);
  tcase_add_test(tc, hybridep_reaches_its_measured_nvlink_rate);
  tcase_add_test(tc, combined_1f1b_hides_at_most_the_alltoall);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
