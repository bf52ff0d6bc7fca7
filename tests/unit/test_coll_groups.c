/* test_coll_groups.c - the concurrent groups of one collective (docs/simulator.md,
 * "Concurrent groups"): an unfolded build adds each group as a task of its own, costed
 * with its whole family's traffic on the links (the time folding gives the representative),
 * and the groups share the links their routes have in common by dividing their bandwidth,
 * none holding them. Before (issue 18, the invariant suite's `hardware` and `straggler`),
 * an unfolded group was costed alone and held every link it filled, so groups that met on
 * a link ran one after the other in ready order: which went first depended on ties, a
 * device's speed or a link's bandwidth, and doubling every bandwidth made an iteration 2%
 * slower where the bottleneck moved from per-GPU PCIe links to the shared fabric. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "sim/builder/build_impl.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/engine/collective.h"
#include "sim/simulate.h"
#include "sim/strategy/strategy.h"

/* Loads a cluster file. */
static void load_cluster(const char *name, psim_cluster *c) {
  psim_cluster_init(c);
  ck_assert_msg(psim_cluster_load(name, c) == PSIM_OK, "%s", psim_error_message());
}

/* Whether task t holds resource res. */
static bool holds(const psim_taskgraph *g, int32_t t, int32_t res) {
  for (int32_t r = g->res_first[t]; r < g->res_first[t + 1]; r++)
    if (g->res[r] == res)
      return true;
  return false;
}

/* Group 0 {g0, g4} and group 1 {g1, g5} of tests/data/coll-2node-1nic.json (2 nodes x 4
 * GPUs, one NIC per node that both rings cross), added as two tasks with group_index 0 and 1: each
 * takes the family's time (what one task with concurrent_groups 2 takes), both start at 0 and end
 * together, and neither holds a link that the other's route also crosses. */
START_TEST(family_members_share_links) {
  psim_cluster c;
  load_cluster(PSIM_SOURCE_ROOT "/tests/data/coll-2node-1nic.json", &c);
  int32_t half = c.n_devices / 2;
  ck_assert_int_ge(half, 2);
  int32_t dev[2][2] = {{0, half}, {1, half + 1}};
  psim_coll_desc d[2];
  for (int k = 0; k < 2; k++) {
    psim_coll_desc_init(&d[k]);
    d[k].algo = PSIM_AR_RING;
    d[k].devices = dev[k];
    d[k].n = 2;
    d[k].bytes = 64e6;
    d[k].concurrent_groups = 2;
    d[k].group_stride = 1;
    d[k].group_index = k;
  }
  psim_coll_desc alone = d[0];
  alone.concurrent_groups = 1;
  double t_family[2], t_alone;
  for (int k = 0; k < 2; k++)
    ck_assert_int_eq(psim_coll_time(&c, &d[k], &t_family[k]), PSIM_OK);
  ck_assert_int_eq(psim_coll_time(&c, &alone, &t_alone), PSIM_OK);
  ck_assert_double_eq(t_family[0], t_family[1]);
  ck_assert_double_gt(t_family[0], 1.5 * t_alone); /* the NIC carries both rings */
  psim_taskgraph g;
  psim_tg_init(&g, 2 * c.n_devices + c.n_links);
  int32_t entry[2], exit[2];
  for (int k = 0; k < 2; k++)
    ck_assert_int_eq(
        psim_coll_add(&g, &c, &d[k], PSIM_FIDELITY_AGGREGATE, NULL, &entry[k], &exit[k]), PSIM_OK);
  ck_assert_int_eq(psim_tg_finalize(&g), PSIM_OK);
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  ck_assert_int_eq(psim_tg_simulate(&g, &r), PSIM_OK);
  for (int k = 0; k < 2; k++) {
    ck_assert_double_eq(r.start_s[entry[k]], 0);
    ck_assert_double_eq_tol(r.end_s[exit[k]], t_family[0], 1e-15);
  }
  ck_assert_double_eq_tol(r.makespan_s, t_family[0], 1e-15); /* not 2 x, not queued */
  for (int32_t l = 0; l < c.n_links; l++)
    ck_assert(!(holds(&g, entry[0], psim_res_link(c.n_devices, l)) &&
                holds(&g, entry[1], psim_res_link(c.n_devices, l))));
  /* the index must lie within the family */
  d[1].group_index = 2;
  double t;
  ck_assert_int_eq(psim_coll_time(&c, &d[1], &t), PSIM_EINPUT);
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
  psim_cluster_destroy(&c);
}
END_TEST

/* Iteration time of tests/data/groups' mlp, tp 8 x dp 4, on the cluster doc. */
static double iteration(const cJSON *cluster_doc, bool fold) {
  psim_model m;
  psim_model_init(&m);
  ck_assert_int_eq(psim_model_load(PSIM_SOURCE_ROOT "/tests/data/groups/mlp-b4.json", &m), PSIM_OK);
  psim_cluster c;
  psim_cluster_init(&c);
  ck_assert_msg(psim_cluster_from_json("c", cluster_doc, &c) == PSIM_OK, "%s",
                psim_error_message());
  psim_strategy s;
  psim_strategy_init(&s);
  ck_assert_msg(
      psim_strategy_load(PSIM_SOURCE_ROOT "/tests/data/groups/tp8-dp4.json", &m, &c, &s) == PSIM_OK,
      "%s", psim_error_message());
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.fold = fold;
  psim_sim_result res;
  psim_sim_result_init(&res);
  ck_assert_msg(psim_simulate(&m, &c, &s, &o, &res) == PSIM_OK, "%s", psim_error_message());
  double t = res.iteration_time_s;
  psim_sim_result_destroy(&res);
  psim_strategy_destroy(&s);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
  return t;
}

/* The invariant suite's hardware case (seed 12893903781, shrunk): the eight data-parallel
 * rings of the classifier's gradients (one per tensor-parallel rank) cross 2 NICs per node
 * and a 4:1 oversubscribed spine. At the preset's bandwidths each ring alone is bound by
 * its GPU's PCIe link, at twice them by the spine, which all eight share: costed alone and
 * holding the spine they ran one by one (8.662 -> 8.848 ms, slower with more bandwidth).
 * Costed as a family they share the spine in both, and twice the bandwidth is faster. */
START_TEST(twice_the_bandwidth_never_slower) {
  cJSON *doc = NULL;
  ck_assert_int_eq(
      psim_json_load_file(PSIM_SOURCE_ROOT "/tests/data/groups/pcie-box-x4.json", &doc), PSIM_OK);
  double t1 = iteration(doc, false), t1f = iteration(doc, true);
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(doc, "intra_node"), "bandwidth",
                            cJSON_CreateString("24 GB/s"));
  cJSON_ReplaceItemInObject(doc, "nic_bandwidth", cJSON_CreateString("200 Gb/s"));
  cJSON_ReplaceItemInObject(doc, "pcie_bandwidth", cJSON_CreateString("31.5 GB/s"));
  double t2 = iteration(doc, false), t2f = iteration(doc, true);
  cJSON_Delete(doc);
  ck_assert_msg(t2 <= t1, "x2 bandwidth: %.9g s -> %.9g s", t1, t2);
  ck_assert_double_eq(t1, t1f); /* folding declines or agrees */
  ck_assert_double_eq(t2, t2f);
}
END_TEST

/* psim_build_partial_group against the definition it implements, for random splits,
 * replicas and masks: member n of entry e's group is the shard with e's coordinates on
 * the unmasked dims and n's digits, row-major (the last masked dim fastest), on the
 * masked ones, at e's replica. */
START_TEST(partial_groups_match_their_definition) {
  srand(77);
  for (int trial = 0; trial < 3000; trial++) {
    psim_op op = {0};
    psim_op_config cfg = {0};
    op.n_dims = 1 + rand() % 5;
    int32_t shards = 1;
    for (int32_t i = 0; i < op.n_dims; i++) {
      cfg.degree[i] = 1 + rand() % 4;
      shards *= cfg.degree[i];
    }
    cfg.replicas = 1 + rand() % 3;
    cfg.n_devices = shards * cfg.replicas;
    int32_t devs[4 * 4 * 4 * 4 * 4 * 3];
    for (int32_t d = 0; d < cfg.n_devices; d++)
      devs[d] = 1000 + 7 * d;
    cfg.devices = devs;
    uint32_t mask = (uint32_t)rand() & ((1u << op.n_dims) - 1);
    psim_model m = {0};
    psim_strategy st = {0};
    psim_cluster c = {0};
    m.ops = &op;
    m.n_ops = 1;
    st.ops = &cfg;
    c.n_devices = cfg.n_devices;
    psim_build b = {0};
    b.m = &m;
    b.s = &st;
    b.c = &c;
    psim_group *g = psim_build_group_new(&b);
    ck_assert_ptr_nonnull(g);
    int32_t e = rand() % cfg.n_devices, k = 1;
    for (int32_t i = 0; i < op.n_dims; i++)
      k *= mask & (1u << i) ? cfg.degree[i] : 1;
    psim_build_partial_group(&b, 0, e, mask, g);
    ck_assert_int_eq(g->n, k);
    ck_assert_int_eq(g->n_groups, cfg.n_devices / k);
    int32_t coord[PSIM_MAX_OP_DIMS];
    for (int32_t i = op.n_dims - 1, sh = e / cfg.replicas; i >= 0; i--) {
      coord[i] = sh % cfg.degree[i];
      sh /= cfg.degree[i];
    }
    for (int32_t n = 0; n < k; n++) {
      int32_t c2[PSIM_MAX_OP_DIMS], rem = n, idx = 0;
      for (int32_t i = op.n_dims - 1; i >= 0; i--) {
        c2[i] = coord[i];
        if (mask & (1u << i)) {
          c2[i] = rem % cfg.degree[i];
          rem /= cfg.degree[i];
        }
      }
      for (int32_t i = 0; i < op.n_dims; i++)
        idx = idx * cfg.degree[i] + c2[i];
      int32_t want = idx * cfg.replicas + e % cfg.replicas;
      ck_assert_msg(g->entries[n] == want, "trial %d member %d: entry %d, want %d", trial, n,
                    g->entries[n], want);
      ck_assert_int_eq(g->devices[n], devs[want]);
    }
    psim_free(g);
  }
}
END_TEST

/* Devices of the largest random_config: 8 x 16 x 3 x 3 shards x 2 replicas. */
#define MEMO_TEST_DEVICES (8 * 16 * 3 * 3 * 2)

/* A random op config over devs: dims 0 and 1 split 4-8 and 16 ways (groups over both are
 * memoised, PSIM_GROUP_MEMO_MIN), up to two more dims 1-3 ways, 1-2 replicas. */
static void random_config(psim_op *op, psim_op_config *cfg, int32_t *devs) {
  *op = (psim_op){0};
  *cfg = (psim_op_config){0};
  op->n_dims = 2 + rand() % 3;
  cfg->degree[0] = 4 + rand() % 5;
  cfg->degree[1] = 16;
  int32_t shards = cfg->degree[0] * cfg->degree[1];
  for (int32_t i = 2; i < op->n_dims; i++) {
    cfg->degree[i] = 1 + rand() % 3;
    shards *= cfg->degree[i];
  }
  cfg->replicas = 1 + rand() % 2;
  cfg->n_devices = shards * cfg->replicas;
  cfg->devices = devs;
}

/* Whether the group of op's mask is memoised (PSIM_GROUP_MEMO_MIN members or more). */
static bool memoised(const psim_op *op, const psim_op_config *cfg, uint32_t mask) {
  int32_t k = 1;
  for (int32_t i = 0; i < op->n_dims; i++)
    k *= mask & (1u << i) ? cfg->degree[i] : 1;
  return k >= PSIM_GROUP_MEMO_MIN;
}

/* psim_build_partial_group into g with the memo (cached) and into want without (plain):
 * every field and member alike. */
static void same_as_uncached(psim_build *cached, psim_build *plain, int32_t o, int32_t e,
                             uint32_t mask, psim_group *g, psim_group *want) {
  g->stride = want->stride = 7; /* a caller's leftovers: reset by both */
  psim_build_partial_group(cached, o, e, mask, g);
  psim_build_partial_group(plain, o, e, mask, want);
  ck_assert_int_eq(g->n, want->n);
  ck_assert_int_eq(g->wanted, want->wanted);
  ck_assert_int_eq(g->n_groups, want->n_groups);
  ck_assert_int_eq(g->stride, want->stride);
  for (int32_t i = 0; i < g->n; i++) {
    ck_assert_int_eq(g->devices[i], want->devices[i]);
    ck_assert_int_eq(g->entries[i], want->entries[i]);
  }
}

/* The partial-group memo (b->groups) against the uncached call: requests drawn with repeats
 * from four ops: two split alike over two lists, two sharing one list of one size with different
 * degrees (same address, another group: mask 5 gives 256 and 64 members), and three masks (mask 1
 * too small to memoise) give every field and member the uncached call gives; the memoised
 * repeats are served from the memo (hits counted). A memo never consulted, or keyed without
 * the list, the degrees, the mask or the entry, fails. */
START_TEST(partial_group_memo_matches_uncached) {
  srand(19);
  enum { N_OPS = 4 };
  static int32_t devs[3][MEMO_TEST_DEVICES];
  for (int32_t k = 0; k < 3; k++)
    for (int32_t d = 0; d < MEMO_TEST_DEVICES; d++)
      devs[k][d] = 5000 * k + 3 * d;
  for (int trial = 0; trial < 100; trial++) {
    psim_op ops[N_OPS];
    psim_op_config cfgs[N_OPS];
    random_config(&ops[0], &cfgs[0], devs[0]);
    ops[1] = ops[0]; /* op 0's split over another list: other devices */
    cfgs[1] = cfgs[0];
    cfgs[1].devices = devs[1];
    for (int32_t o = 2; o < N_OPS; o++) { /* list 2 split 16 x 4 x 16 and 16 x 16 x 4 */
      ops[o] = (psim_op){.n_dims = 3};
      cfgs[o] = (psim_op_config){.degree = {16, o == 2 ? 4 : 16, o == 2 ? 16 : 4},
                                 .replicas = 1,
                                 .n_devices = 1024,
                                 .devices = devs[2]};
    }
    psim_model m = {.ops = ops, .n_ops = N_OPS};
    psim_strategy st = {.ops = cfgs};
    psim_cluster c = {.n_devices = MEMO_TEST_DEVICES};
    psim_build cached = {.m = &m, .s = &st, .c = &c}, plain = cached;
    cached.groups = psim_build_group_memo_new();
    psim_group *g = psim_build_group_new(&cached), *want = psim_build_group_new(&plain);
    ck_assert(cached.groups && g && want);
    const uint32_t masks[3] = {1u, 3u, 5u};
    int64_t memo_calls = 0;
    for (int call = 0; call < 60; call++) {
      int32_t o = rand() % N_OPS, e = rand() % 2;
      uint32_t mask = masks[rand() % 3] & ((1u << ops[o].n_dims) - 1);
      memo_calls += memoised(&ops[o], &cfgs[o], mask);
      same_as_uncached(&cached, &plain, o, e, mask, g, want);
    }
    /* at most 4 ops x 2 entries x 2 masks (3 and 5) memoised: all fit the slots */
    ck_assert_int_eq(cached.groups->hits + cached.groups->misses, memo_calls);
    ck_assert_int_ge(cached.groups->hits, memo_calls - 16);
    ck_assert_int_gt(cached.groups->hits, 0);
    psim_build_group_memo_free(cached.groups);
    psim_free(g);
    psim_free(want);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("coll_groups");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, family_members_share_links);
  tcase_add_test(tc, twice_the_bandwidth_never_slower);
  tcase_add_test(tc, partial_groups_match_their_definition);
  tcase_add_test(tc, partial_group_memo_matches_uncached);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
