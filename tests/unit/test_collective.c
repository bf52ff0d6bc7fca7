/* test_collective.c - collective algorithms against closed forms (Thakur,
 * Rabenseifner & Gropp 2005), agreement of the two fidelities, measured
 * tables (vTrain's A100 nccl-tests all-reduce), point-to-point transfers. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/engine/collective.h"

#define DATA       PSIM_SOURCE_ROOT "/tests/data/"
#define VTRAIN_LUT "/work/shared/calibration/vtrain/allreduce_a100_8gpu.lut"

static const int32_t ranks8[8] = {0, 1, 2, 3, 4, 5, 6, 7};

static void load(psim_cluster *c, const char *name) {
  psim_cluster_init(c);
  char path[512];
  snprintf(path, sizeof path, "%s%s", DATA, name);
  psim_status s = psim_cluster_load(path, c);
  ck_assert_msg(s == PSIM_OK, "%s", psim_error_message());
}

static psim_coll_desc desc(psim_coll_kind k, psim_allreduce_algo a, int32_t n, double bytes) {
  psim_coll_desc d;
  psim_coll_desc_init(&d);
  d.kind = k;
  d.algo = a;
  d.devices = ranks8;
  d.n = n;
  d.bytes = bytes;
  return d;
}

static double coll_time(psim_cluster *c, const psim_coll_desc *d) {
  double t = -1;
  psim_status s = psim_coll_time(c, d, &t);
  ck_assert_msg(s == PSIM_OK, "%s", psim_error_message());
  return t;
}

/* Simulated makespan of the collective alone at a fidelity. */
static double sim_time(psim_cluster *c, const psim_coll_desc *d, psim_fidelity f) {
  psim_taskgraph g;
  psim_tg_init(&g, 2 * c->n_devices + c->n_links);
  int32_t entry = -1, exit = -1;
  psim_status s = psim_coll_add(&g, c, d, f, NULL, &entry, &exit);
  ck_assert_msg(s == PSIM_OK, "%s", psim_error_message());
  ck_assert_int_ge(entry, 0);
  ck_assert_int_ge(exit, 0);
  ck_assert_int_eq(psim_tg_finalize(&g), PSIM_OK);
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  ck_assert_int_eq(psim_tg_simulate(&g, &r), PSIM_OK);
  double t = r.makespan_s;
  ck_assert_double_eq(r.end_s[exit], t); /* exit finishes last */
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
  return t;
}

static void assert_rel(double got, double want, double tol) {
  ck_assert_msg(fabs(got - want) <= tol * fabs(want), "got %.9g, expected %.9g (rel. tol %g)", got,
                want, tol);
}

/* NVSwitch node: a route is 2 hops, alpha = 2 us, B = 300 GB/s. */
static const double A = 2e-6, B = 300e9;

START_TEST(ring_allreduce_closed_form) {
  psim_cluster c;
  load(&c, "coll-nvswitch8.json");
  for (int32_t p = 2; p <= 8; p++) {
    for (double n = 1e3; n <= 4e9; n *= 37) {
      psim_coll_desc d = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_RING, p, n);
      double want = 2.0 * (p - 1) / p * n / B + 2.0 * (p - 1) * A;
      assert_rel(coll_time(&c, &d), want, 1e-12);
    }
  }
  /* auto inside one node is the ring */
  psim_coll_desc d = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_AUTO, 8, 1e9);
  assert_rel(coll_time(&c, &d), 2.0 * 7 / 8 * 1e9 / B + 14 * A, 1e-12);
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(tree_and_doubling_closed_forms) {
  psim_cluster c;
  load(&c, "coll-nvswitch8.json");
  double n = 64e6;
  for (int32_t p = 2; p <= 8; p *= 2) {
    double lg = log2(p);
    psim_coll_desc d = desc(PSIM_COLL_BROADCAST, PSIM_AR_TREE, p, n);
    assert_rel(coll_time(&c, &d), (A + n / B) * lg, 1e-12); /* binomial broadcast */
    d.kind = PSIM_COLL_REDUCE;
    assert_rel(coll_time(&c, &d), (A + n / B) * lg, 1e-12);
    d = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_TREE, p, n);
    assert_rel(coll_time(&c, &d), 2 * (A + n / B) * lg, 1e-12);
    /* recursive-doubling all-gather: alpha log p + (p-1) beta l, l = n / p */
    d = desc(PSIM_COLL_ALL_GATHER, PSIM_AR_HALVING_DOUBLING, p, n);
    assert_rel(coll_time(&c, &d), A * lg + (p - 1) * (n / p) / B, 1e-12);
    d = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_HALVING_DOUBLING, p, n);
    assert_rel(coll_time(&c, &d), 2 * lg * A + 2.0 * (p - 1) / p * n / B, 1e-12);
    d = desc(PSIM_COLL_REDUCE_SCATTER, PSIM_AR_HALVING_DOUBLING, p, n);
    assert_rel(coll_time(&c, &d), lg * A + (p - 1.0) / p * n / B, 1e-12);
    d = desc(PSIM_COLL_GATHER, PSIM_AR_AUTO, p, n);
    assert_rel(coll_time(&c, &d), lg * A + (p - 1.0) / p * n / B, 1e-12);
    d.kind = PSIM_COLL_SCATTER;
    assert_rel(coll_time(&c, &d), lg * A + (p - 1.0) / p * n / B, 1e-12);
  }
  /* non-powers of two: Bruck all-gather, ceil(log2 p) steps, (p-1)/p n */
  psim_coll_desc d = desc(PSIM_COLL_ALL_GATHER, PSIM_AR_HALVING_DOUBLING, 6, n);
  assert_rel(coll_time(&c, &d), 3 * A + 5.0 / 6 * n / B, 1e-12);
  d = desc(PSIM_COLL_BROADCAST, PSIM_AR_TREE, 5, n);
  assert_rel(coll_time(&c, &d), 3 * (A + n / B), 1e-12);
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(ring_gather_scatter_alltoall_closed_forms) {
  psim_cluster c;
  load(&c, "coll-nvswitch8.json");
  double n = 3e8;
  for (int32_t p = 2; p <= 8; p++) {
    psim_coll_desc d = desc(PSIM_COLL_ALL_GATHER, PSIM_AR_RING, p, n);
    double want = (p - 1) * A + (p - 1.0) / p * n / B;
    assert_rel(coll_time(&c, &d), want, 1e-12);
    d.kind = PSIM_COLL_REDUCE_SCATTER;
    assert_rel(coll_time(&c, &d), want, 1e-12);
    d.kind = PSIM_COLL_ALL_TO_ALL;
    assert_rel(coll_time(&c, &d), want, 1e-12);
  }
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(fidelities_agree_on_nvswitch) {
  psim_cluster c;
  load(&c, "coll-nvswitch8.json");
  const psim_coll_kind kinds[] = {
      PSIM_COLL_ALL_REDUCE, PSIM_COLL_ALL_GATHER, PSIM_COLL_REDUCE_SCATTER, PSIM_COLL_ALL_TO_ALL,
      PSIM_COLL_BROADCAST,  PSIM_COLL_REDUCE,     PSIM_COLL_GATHER,         PSIM_COLL_SCATTER};
  const psim_allreduce_algo algos[] = {PSIM_AR_RING, PSIM_AR_TREE, PSIM_AR_HALVING_DOUBLING};
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
    for (size_t a = 0; a < 3; a++)
      for (int32_t p = 2; p <= 8; p += 3)
        for (double n = 1e4; n < 2e9; n *= 100) {
          psim_coll_desc d = desc(kinds[k], algos[a], p, n);
          double agg = coll_time(&c, &d);
          assert_rel(sim_time(&c, &d, PSIM_FIDELITY_AGGREGATE), agg, 1e-12);
          double exp = sim_time(&c, &d, PSIM_FIDELITY_EXPANDED);
          ck_assert_msg(fabs(exp - agg) <= 0.01 * agg, "kind %d algo %d p %d n %g: %g vs %g",
                        kinds[k], algos[a], p, n, exp, agg);
        }
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(hierarchical_two_nodes) {
  psim_cluster c;
  load(&c, "coll-2node.json");
  /* 2 nodes x 4 ranks: in-node hops 2 x 1 us at 300 GB/s; across nodes
   * GPU -> IB switch -> GPU, 2 x 5 us at 25 GB/s on each GPU's own NIC. */
  double a1 = 2e-6, b1 = 300e9, a2 = 10e-6, b2 = 25e9;
  for (double n = 1e5; n < 2e9; n *= 20) {
    psim_coll_desc d = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_AUTO, 8, n);
    double want = 2 * 3 * (a1 + n / 4 / b1) + 2 * 1 * (a2 + n / 8 / b2);
    assert_rel(coll_time(&c, &d), want, 1e-12);
    d.algo = PSIM_AR_HIERARCHICAL;
    assert_rel(coll_time(&c, &d), want, 1e-12);
    assert_rel(sim_time(&c, &d, PSIM_FIDELITY_EXPANDED), want, 0.01);
    /* the flat ring is bound by the 25 GB/s NICs */
    d.algo = PSIM_AR_RING;
    assert_rel(coll_time(&c, &d), 14 * a2 + 2.0 * 7 / 8 * n / b2, 1e-12);
    assert_rel(sim_time(&c, &d, PSIM_FIDELITY_EXPANDED), coll_time(&c, &d), 0.01);
  }
  psim_cluster_destroy(&c);
}
END_TEST

/* Route latency (s) and bottleneck bandwidth (bytes/s) between two devices. */
static void route_ab(psim_cluster *c, int32_t a, int32_t b, double *alpha, double *bw) {
  const int32_t *links;
  int32_t n;
  ck_assert_int_eq(psim_cluster_route(c, a, b, &links, &n), PSIM_OK);
  psim_cluster_route_cost(c, links, n, bw, alpha);
}

START_TEST(shipped_dgx_a100_two_nodes) {
  psim_cluster c;
  psim_cluster_init(&c);
  psim_status st = psim_cluster_load(PSIM_SOURCE_ROOT "/topologies/dgx-a100-x2.json", &c);
  ck_assert_msg(st == PSIM_OK, "%s", psim_error_message());
  ck_assert_int_eq(c.n_devices, 16);
  /* the preset carries measured A100 tables; the closed forms below are the
   * formula's, so hide the tables first and check them at the end */
  int32_t n_tables = c.n_coll_tables;
  ck_assert_int_gt(n_tables, 0);
  c.n_coll_tables = 0;
  int32_t all[16];
  for (int32_t i = 0; i < 16; i++)
    all[i] = i;
  double a1, b1, a2, b2;
  route_ab(&c, 0, 1, &a1, &b1); /* in node, over NVSwitch */
  route_ab(&c, 0, 8, &a2, &b2); /* across nodes, GPU 0's NIC */
  ck_assert(b2 < b1);
  for (double n = 1e6; n < 2e9; n *= 30) {
    psim_coll_desc d = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_AUTO, 16, n);
    d.devices = all;
    /* hierarchical: k = 8 ranks per node, m = 2 nodes, one NIC per GPU */
    double want = 2 * 7 * (a1 + n / 8 / b1) + 2 * (a2 + n / 16 / b2);
    assert_rel(coll_time(&c, &d), want, 1e-9);
    assert_rel(sim_time(&c, &d, PSIM_FIDELITY_EXPANDED), want, 0.01);
    d.algo = PSIM_AR_RING;
    assert_rel(sim_time(&c, &d, PSIM_FIDELITY_EXPANDED), coll_time(&c, &d), 0.01);
    d = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_RING, 8, n); /* one node */
    assert_rel(coll_time(&c, &d), 14 * a1 + 2.0 * 7 / 8 * n / b1, 1e-9);
    assert_rel(sim_time(&c, &d, PSIM_FIDELITY_EXPANDED), coll_time(&c, &d), 0.01);
    d.algo = PSIM_AR_TREE;
    assert_rel(sim_time(&c, &d, PSIM_FIDELITY_EXPANDED), coll_time(&c, &d), 0.01);
  }
  /* with the tables: 64 MiB over 8 GPUs at the measured 202.56 GB/s busbw
   * (vtrain/allreduce_a100_8gpu.lut) */
  c.n_coll_tables = n_tables;
  psim_coll_desc d = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_RING, 8, 67108864.0);
  d.devices = all;
  assert_rel(coll_time(&c, &d), 2.0 * 7 / 8 * 67108864.0 / 202.56e9, 1e-6);
  psim_cluster_destroy(&c);
}
END_TEST

static void load_topology(psim_cluster *c, const char *name) {
  psim_cluster_init(c);
  char path[512];
  snprintf(path, sizeof path, "%s/topologies/%s", PSIM_SOURCE_ROOT, name);
  psim_status st = psim_cluster_load(path, c);
  ck_assert_msg(st == PSIM_OK, "%s", psim_error_message());
  psim_cluster_drop_coll_tables(c); /* the formula's figures */
}

/* Issue 18 defect 5: on 16 DGX A100 the two fidelities agree for ring and
 * tree over all 128 GPUs, with or without a 4:1 oversubscribed fabric (4
 * nodes per leaf, each leaf's uplink 200 GB/s = 8 NICs). Before, expanded
 * messages held every link of their route, so the 32 tree messages of 25
 * GB/s that a 200 GB/s uplink carries at once ran one after another there:
 * the tree came out 6.5 times slower expanded than aggregated. */
START_TEST(fidelities_agree_across_nodes) {
  const char *clusters[] = {"dgx-a100-x16.json", "dgx-a100-x16-oversub4.json"};
  int32_t all[128];
  for (int32_t i = 0; i < 128; i++)
    all[i] = i;
  const psim_allreduce_algo algos[] = {PSIM_AR_RING, PSIM_AR_TREE, PSIM_AR_HIERARCHICAL,
                                       PSIM_AR_HALVING_DOUBLING};
  for (int k = 0; k < 2; k++) {
    psim_cluster c;
    load_topology(&c, clusters[k]);
    for (size_t a = 0; a < sizeof algos / sizeof *algos; a++)
      for (double n = 1e6; n < 2e9; n *= 40) {
        psim_coll_desc d = desc(PSIM_COLL_ALL_REDUCE, algos[a], 128, n);
        d.devices = all;
        double agg = coll_time(&c, &d), exp = sim_time(&c, &d, PSIM_FIDELITY_EXPANDED);
        assert_rel(sim_time(&c, &d, PSIM_FIDELITY_AGGREGATE), agg, 1e-12);
        ck_assert_msg(fabs(exp - agg) <= 0.03 * agg, "%s algo %d n %g: expanded %g, aggregated %g",
                      clusters[k], algos[a], n, exp, agg);
      }
    psim_cluster_destroy(&c);
  }
}
END_TEST

/* Issue 18 defect 8: two rings crossing the same 4:1 leaf uplink (200 GB/s)
 * at 25 GB/s each leave it room to spare, so together they take as long as
 * one; before, each held the uplink for its whole duration and the second
 * waited for the first (pipeline stages' data-parallel rings, concurrent
 * groups of an unfolded run). On their shared NICs they must still queue. */
START_TEST(rings_share_a_wide_uplink) {
  psim_cluster c;
  load_topology(&c, "dgx-a100-x16-oversub4.json");
  int32_t g1[2] = {0, 32}, g2[2] = {8, 40}, g3[2] = {0, 40}; /* node 0/1 (rack 0) - node 4/5 */
  const int32_t *groups[3] = {g1, g2, g3};
  for (int fid = 0; fid < 2; fid++) {
    psim_taskgraph g;
    psim_tg_init(&g, 2 * c.n_devices + c.n_links);
    double one = 0;
    for (int i = 0; i < 3; i++) {
      psim_coll_desc d = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_RING, 2, 1e9);
      d.devices = groups[i];
      one = coll_time(&c, &d);
      int32_t entry, exit;
      ck_assert_int_eq(psim_coll_add(&g, &c, &d, (psim_fidelity)fid, NULL, &entry, &exit), PSIM_OK);
    }
    ck_assert_int_eq(psim_tg_finalize(&g), PSIM_OK);
    psim_schedule_result r;
    psim_schedule_result_init(&r);
    ck_assert_int_eq(psim_tg_simulate(&g, &r), PSIM_OK);
    /* g1 and g2 in parallel; g3 shares GPU 0's NIC with g1, GPU 40's with g2 */
    assert_rel(r.makespan_s, 2 * one, 0.01);
    psim_schedule_result_destroy(&r);
    psim_tg_destroy(&g);
  }
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(concurrent_groups_share_links) {
  psim_cluster c;
  load(&c, "coll-2node-1nic.json");
  /* groups {0,4}, {1,5}, {2,6}, {3,7}: each crosses its node's one NIC. */
  int32_t pair[2] = {0, 4};
  psim_coll_desc d = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_RING, 2, 1e9);
  d.devices = pair;
  double alpha = 1e-6 + 5e-6 + 5e-6 + 1e-6, b = 25e9;
  assert_rel(coll_time(&c, &d), 2 * alpha + 1e9 / b, 1e-12);
  d.concurrent_groups = 4;
  d.group_stride = 1;
  assert_rel(coll_time(&c, &d), 2 * alpha + 1e9 / (b / 4), 1e-12);
  assert_rel(sim_time(&c, &d, PSIM_FIDELITY_EXPANDED), coll_time(&c, &d), 0.01);
  d.concurrent_groups = 5; /* the fifth group would start at device 4 + 4 = 8 */
  double t;
  ck_assert_int_eq(psim_coll_time(&c, &d, &t), PSIM_EINPUT);
  /* the four-rank group inside a node shares nothing */
  psim_coll_desc e = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_RING, 4, 1e9);
  e.concurrent_groups = 2;
  e.group_stride = 4;
  assert_rel(coll_time(&c, &e), 6 * 2e-6 + 1.5e9 / 300e9, 1e-12);
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(slowdown_divides_bandwidth) {
  psim_cluster c;
  load(&c, "coll-nvswitch8.json");
  for (int32_t l = 0; l < c.n_links; l++)
    c.links[l].slowdown = 2.0;
  psim_coll_desc d = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_RING, 8, 1e9);
  assert_rel(coll_time(&c, &d), 2.0 * 7 / 8 * 1e9 / (B / 2) + 14 * A, 1e-12);
  double t;
  ck_assert_int_eq(psim_p2p_time(&c, 0, 1, 1e9, &t), PSIM_OK);
  assert_rel(t, A + 1e9 / (B / 2), 1e-12);
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(p2p_cut_through) {
  psim_cluster c;
  load(&c, "coll-2node.json");
  double t;
  ck_assert_int_eq(psim_p2p_time(&c, 0, 5, 5e8, &t), PSIM_OK);
  assert_rel(t, 10e-6 + 5e8 / 25e9, 1e-12);
  ck_assert_int_eq(psim_p2p_time(&c, 0, 1, 5e8, &t), PSIM_OK);
  assert_rel(t, 2e-6 + 5e8 / 300e9, 1e-12);
  ck_assert_int_eq(psim_p2p_time(&c, 2, 2, 5e8, &t), PSIM_OK);
  ck_assert_double_eq(t, 0);
  /* two transfers out of GPU 0 across nodes share its NIC: they serialise */
  psim_taskgraph g;
  psim_tg_init(&g, 2 * c.n_devices + c.n_links);
  int32_t in, out;
  ck_assert_int_eq(psim_p2p_add(&g, &c, 0, 4, 5e8, NULL, &in, &out), PSIM_OK);
  ck_assert_int_eq(in, out);
  ck_assert_int_eq(g.info[in].kind, PSIM_TASK_TRANSFER);
  ck_assert_int_eq(psim_p2p_add(&g, &c, 0, 5, 5e8, NULL, &in, &out), PSIM_OK);
  ck_assert_int_eq(psim_p2p_add(&g, &c, 1, 2, 5e8, NULL, &in, &out), PSIM_OK);
  ck_assert_int_eq(psim_tg_finalize(&g), PSIM_OK);
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  ck_assert_int_eq(psim_tg_simulate(&g, &r), PSIM_OK);
  assert_rel(r.makespan_s, 2 * (10e-6 + 5e8 / 25e9), 1e-12);
  ck_assert_double_eq(r.start_s[2], 0);
  ck_assert_int_eq(psim_p2p_time(&c, 0, 99, 1, &t), PSIM_EINPUT);
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
  psim_cluster_destroy(&c);
}
END_TEST

/* A ring reduce-scatter / all-gather over 2 nodes x 2 ranks, one 25 GB/s NIC per GPU: two
 * channel rings, each entering a node at one rank and leaving from the other, carry half the
 * data each, so every NIC carries one channel each way: (m - 1) (alpha + S / (m k B)) with
 * m = 4 ranks, k = 2 per node, alpha = 10 us (GPU-NIC-switch-NIC-GPU), and the task holds
 * the NIC links of all four GPUs in both directions (8), the symmetry folding needs. One rank
 * per node keeps the single ring. Before, a single ring in rank order left each node by one
 * NIC and entered by the other: 3 (10 us + S / (4 B)), twice the bandwidth term, holding 4. */
START_TEST(ring_gather_uses_every_nic) {
  psim_cluster c;
  load(&c, "coll-2node.json");
  int32_t quad[4] = {0, 1, 4, 5}, pair[2] = {0, 4};
  const double S = 1e9, b = 25e9, alpha = 10e-6;
  psim_coll_kind kinds[2] = {PSIM_COLL_REDUCE_SCATTER, PSIM_COLL_ALL_GATHER};
  for (int i = 0; i < 2; i++) {
    psim_coll_desc d = desc(kinds[i], PSIM_AR_AUTO, 4, S);
    d.devices = quad;
    assert_rel(coll_time(&c, &d), 3 * (alpha + S / (4 * 2) / b), 1e-12);
    assert_rel(sim_time(&c, &d, PSIM_FIDELITY_AGGREGATE), coll_time(&c, &d), 1e-12);
    psim_taskgraph g;
    psim_tg_init(&g, 2 * c.n_devices + c.n_links);
    int32_t entry, exit, links = 0;
    ck_assert_int_eq(psim_coll_add(&g, &c, &d, PSIM_FIDELITY_AGGREGATE, NULL, &entry, &exit),
                     PSIM_OK);
    for (int32_t r = g.res_first[entry]; r < g.res_first[entry + 1]; r++)
      links += g.res[r] >= psim_res_link(c.n_devices, 0);
    ck_assert_int_eq(links, 8);
    psim_tg_destroy(&g);
    psim_coll_desc e = desc(kinds[i], PSIM_AR_AUTO, 2, S);
    e.devices = pair;
    assert_rel(coll_time(&c, &e), alpha + S / 2 / b, 1e-12);
  }
  psim_cluster_destroy(&c);
}
END_TEST

/* A data-parallel (own_stream) collective is a chain of pieces of at most
 * PSIM_COLL_PIECE_S: their number is the closed form ceil(time / piece) (capped),
 * their times sum to the collective's,
 * and a pipeline transfer that needs the NIC the collective fills, issued at
 * the same instant, waits one piece, not the whole collective; the link then
 * serves both, so the collective ends one transfer later. On the comm engine
 * (not own_stream) a collective stays one task. Before, the transfer waited
 * for the whole 20 ms reduce-scatter. */
START_TEST(own_stream_collective_in_pieces) {
  psim_cluster c;
  load(&c, "coll-2node.json");
  int32_t pair[2] = {0, 4};
  psim_coll_desc d = desc(PSIM_COLL_REDUCE_SCATTER, PSIM_AR_RING, 2, 1e9);
  d.devices = pair;
  double whole = coll_time(&c, &d);
  ck_assert_int_eq(psim_coll_pieces(&d, whole), 1);
  assert_rel(sim_time(&c, &d, PSIM_FIDELITY_AGGREGATE), whole, 1e-12);
  d.own_stream = true;
  int32_t k = (int32_t)ceil(whole / PSIM_COLL_PIECE_S);
  ck_assert_int_gt(k, 1);
  ck_assert_int_eq(psim_coll_pieces(&d, whole), k);
  ck_assert_int_eq(psim_coll_pieces(&d, 1e3), PSIM_COLL_MAX_PIECES);
  ck_assert_int_eq(psim_coll_pieces(&d, 0.5 * PSIM_COLL_PIECE_S), 1);
  assert_rel(sim_time(&c, &d, PSIM_FIDELITY_AGGREGATE), whole, 1e-12);
  psim_taskgraph g;
  psim_tg_init(&g, 2 * c.n_devices + c.n_links);
  int32_t entry, exit, in, out;
  ck_assert_int_eq(psim_coll_add(&g, &c, &d, PSIM_FIDELITY_AGGREGATE, NULL, &entry, &exit),
                   PSIM_OK);
  ck_assert_int_eq(exit - entry + 1, k);
  ck_assert_int_eq(psim_p2p_add(&g, &c, 0, 4, 1e7, NULL, &in, &out), PSIM_OK);
  double p2p;
  ck_assert_int_eq(psim_p2p_time(&c, 0, 4, 1e7, &p2p), PSIM_OK);
  ck_assert_int_eq(psim_tg_finalize(&g), PSIM_OK);
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  ck_assert_int_eq(psim_tg_simulate(&g, &r), PSIM_OK);
  assert_rel(r.end_s[out], whole / k + p2p, 1e-9);
  assert_rel(r.end_s[exit], whole + p2p, 1e-9);
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
  psim_cluster_destroy(&c);
}
END_TEST

/* Reads the vTrain nccl-tests table: size (B), time (ns), busbw (GB/s). */
static int read_lut(double **size, double **time, double **busbw) {
  FILE *f = fopen(VTRAIN_LUT, "r");
  if (!f)
    return 0;
  char line[256];
  int n = 0, cap = 2048;
  *size = psim_malloc(cap * sizeof **size);
  *time = malloc(cap * sizeof **time);
  *busbw = psim_malloc(cap * sizeof **busbw);
  while (fgets(line, sizeof line, f) && n < cap) {
    double s, cnt, t, bb;
    char type[32];
    if (sscanf(line, "%lf,%lf,%31[a-z],%lf,%lf", &s, &cnt, type, &t, &bb) != 5)
      continue;
    (*size)[n] = s;
    (*time)[n] = t * 1e-9;
    (*busbw)[n] = bb * 1e9;
    n++;
  }
  fclose(f);
  return n;
}

START_TEST(measured_table_reproduces_its_points) {
  psim_cluster c;
  load(&c, "coll-nvswitch8.json");
  double *size, *time, *busbw;
  int n = read_lut(&size, &time, &busbw);
  ck_assert_int_gt(n, 1000);
  c.coll_tables = psim_calloc(1, sizeof *c.coll_tables);
  c.coll_tables[0] = (psim_coll_table){PSIM_COLL_ALL_REDUCE, 8, true, n, size, busbw};
  c.n_coll_tables = 1;
  psim_coll_desc d = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_AUTO, 8, 0);
  for (int i = 0; i < n; i += 7) {
    d.bytes = size[i];
    /* busbw in the file is rounded to 0.01 GB/s: 0.3% at the smallest size */
    assert_rel(coll_time(&c, &d), time[i], 0.004);
    assert_rel(sim_time(&c, &d, PSIM_FIDELITY_AGGREGATE), time[i], 0.004);
    assert_rel(sim_time(&c, &d, PSIM_FIDELITY_EXPANDED), time[i], 0.004);
  }
  /* between points the time lies between the neighbours' times */
  d.bytes = sqrt(size[100] * size[101]);
  double t = coll_time(&c, &d);
  ck_assert(t >= fmin(time[100], time[101]) * 0.99 && t <= fmax(time[100], time[101]) * 1.01);
  /* a 1 GB all-reduce on A100 NVSwitch: about 230 GB/s busbw (collectives.md) */
  d.bytes = 1073741824.0;
  double bus = 2.0 * 7 / 8 * d.bytes / coll_time(&c, &d);
  ck_assert(bus > 220e9 && bus < 235e9);
  /* the table does not apply to 4 ranks: the formula does */
  d = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_RING, 4, 1e8);
  assert_rel(coll_time(&c, &d), 1.5 * 1e8 / B + 6 * A, 1e-12);
  free(time);
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(bad_groups_are_rejected) {
  psim_cluster c;
  load(&c, "coll-nvswitch8.json");
  double t;
  int32_t dup[3] = {0, 1, 1}, out[2] = {0, 8};
  psim_coll_desc d = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_RING, 3, 1e6);
  d.devices = dup;
  ck_assert_int_eq(psim_coll_time(&c, &d, &t), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "twice"));
  d.devices = out;
  d.n = 2;
  ck_assert_int_eq(psim_coll_time(&c, &d, &t), PSIM_EINPUT);
  d = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_RING, 8, -1);
  ck_assert_int_eq(psim_coll_time(&c, &d, &t), PSIM_EINPUT);
  d = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_RING, 1, 1e6); /* one rank: free */
  ck_assert_int_eq(psim_coll_time(&c, &d, &t), PSIM_OK);
  ck_assert_double_eq(t, 0);
  psim_cluster_destroy(&c);
}
END_TEST

/* Adds one expanded and one aggregated collective; returns the status. */
static psim_status add_both(psim_cluster *c) {
  psim_taskgraph g;
  psim_tg_init(&g, 2 * c->n_devices + c->n_links);
  psim_coll_desc d = desc(PSIM_COLL_ALL_REDUCE, PSIM_AR_HIERARCHICAL, 8, 1e6);
  int32_t a, b;
  psim_status s = psim_coll_add(&g, c, &d, PSIM_FIDELITY_EXPANDED, NULL, &a, &b);
  if (s == PSIM_OK)
    s = psim_coll_add(&g, c, &d, PSIM_FIDELITY_AGGREGATE, NULL, &a, &b);
  psim_tg_destroy(&g);
  return s;
}

START_TEST(allocation_failures_are_clean) {
  psim_cluster c;
  load(&c, "coll-2node.json");
  ck_assert_int_eq(add_both(&c), PSIM_OK); /* routes now cached */
  int failures = 0;
  for (long n = 1; n < 80; n++) {
    psim_alloc_fail_at(n);
    psim_status s = add_both(&c);
    psim_alloc_fail_at(0);
    ck_assert(s == PSIM_OK || s == PSIM_ENOMEM);
    failures += s == PSIM_ENOMEM;
  }
  ck_assert_int_gt(failures, 5);
  psim_cluster_destroy(&c);
}
END_TEST

int main(void) {
  psim_json_init_hooks();
  Suite *s = suite_create("collective");
  TCase *tc = tcase_create("collective");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, ring_allreduce_closed_form);
  tcase_add_test(tc, tree_and_doubling_closed_forms);
  tcase_add_test(tc, ring_gather_scatter_alltoall_closed_forms);
  tcase_add_test(tc, fidelities_agree_on_nvswitch);
  tcase_add_test(tc, hierarchical_two_nodes);
  tcase_add_test(tc, shipped_dgx_a100_two_nodes);
  tcase_add_test(tc, fidelities_agree_across_nodes);
  tcase_add_test(tc, rings_share_a_wide_uplink);
  tcase_add_test(tc, concurrent_groups_share_links);
  tcase_add_test(tc, slowdown_divides_bandwidth);
  tcase_add_test(tc, p2p_cut_through);
  tcase_add_test(tc, own_stream_collective_in_pieces);
  tcase_add_test(tc, ring_gather_uses_every_nic);
  tcase_add_test(tc, measured_table_reproduces_its_points);
  tcase_add_test(tc, bad_groups_are_rejected);
  tcase_add_test(tc, allocation_failures_are_clean);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
