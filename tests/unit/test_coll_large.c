/* test_coll_large.c - issue 19: routes and collectives on clusters of any size.
 *
 * Routes found by the goal-directed pair search (sim/ir/route.c,
 * pair_search: issue 19, routes for 100,000-device clusters without an O(devices) search
 * per route) equal those of a plain breadth-first search written here from route.c's
 * documented rule (fewest hops, then widest bottleneck, then least latency, ties to the
 * link added first; a route enters a NIC from the host side and leaves to the network or
 * back), on every ordered device pair of clusters of each fabric kind, with straggling
 * links that make the widest route differ from the first; with routes translated by the
 * rotation of the nodes' devices (route_shift.h) on random generated clusters, never where the
 * representative's route has a tie; concurrent groups' collectives equal with and without
 * translation, and with and without the routes memo's kept rates and held links.
 *
 * Collectives over any number of devices (issue 19: the builder refused
 * groups over 4,096 devices). An all-reduce over every GPU of N DGX A100 nodes is costed
 * hierarchically (sim/engine/collective.c plan_hierarchical, NCCL's decomposition: ring
 * reduce-scatter in each node, ring all-reduce of 1/k of the buffer across nodes per rail,
 * ring all-gather in each node). Its time must equal the sum of the three flat collectives
 * the engine costs on the sub-groups (one node's 8 GPUs, one rail's N GPUs), and the
 * closed form
 *   2 (k - 1) (a_in + n / k / B_in) + 2 (N - 1) (a_x + n / (k N) / B_x)
 * (k = 8 GPUs per node; a_in, B_in the latency and bandwidth of a route inside a node; a_x,
 * B_x those of the slowest route between nodes, one rack to another: each rail's ring runs
 * over its own NICs, so no link is shared), to a relative 1e-9 (rounding only), on 64 nodes
 * (512 GPUs, which the builder always handled) and on 2,048 nodes (16,384 GPUs). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/json.h"
#include "sim/engine/collective.h"
#include "sim/ir/cluster.h"
#include "topologies/presets.h"

static void preset(psim_cluster *c, const char *name, int32_t nodes, int32_t per_rack,
                   int32_t nics) {
  psim_preset_opts o;
  psim_preset_opts_init(&o);
  o.preset = name;
  o.nodes = nodes;
  o.nodes_per_rack = per_rack;
  o.nics_per_node = nics;
  cJSON *doc = NULL;
  ck_assert_int_eq(psim_preset_cluster(&o, &doc), PSIM_OK);
  psim_cluster_init(c);
  psim_status s = psim_cluster_from_json("preset", doc, c);
  cJSON_Delete(doc);
  ck_assert_msg(s == PSIM_OK, "%s", psim_error_message());
}

/* The reference: a full breadth-first search from src, labels per vertex. */
typedef struct ref {
  int32_t *hops, *pred, *queue;
  double *lat, *bw;
} ref;

static bool ref_may_follow(const psim_cluster *c, int32_t u, int32_t in, int32_t out) {
  if (c->vertex_kinds[u] != PSIM_VERTEX_NIC || in < 0)
    return true;
  return (c->links[in].kind == PSIM_LINK_NIC) != (c->links[out].kind == PSIM_LINK_NIC);
}

static void ref_search(const psim_cluster *c, ref *r, int32_t src) {
  for (int32_t v = 0; v < c->n_vertices; v++)
    r->hops[v] = -1;
  int32_t head = 0, tail = 0;
  r->hops[src] = 0;
  r->pred[src] = -1;
  r->lat[src] = 0;
  r->bw[src] = INFINITY;
  r->queue[tail++] = src;
  while (head < tail) {
    int32_t u = r->queue[head++];
    for (int32_t li = 0; li < c->n_links; li++) { /* link order: ties to the first */
      const psim_link *l = &c->links[li];
      if (l->src != u || !ref_may_follow(c, u, r->pred[u], li))
        continue;
      int32_t v = l->dst;
      double lat = r->lat[u] + l->latency_s, bw = fmin(r->bw[u], l->bw / l->slowdown);
      if (r->hops[v] < 0) {
        r->hops[v] = r->hops[u] + 1;
        r->queue[tail++] = v;
      } else if (r->hops[v] != r->hops[u] + 1 ||
                 !(bw != r->bw[v] ? bw > r->bw[v] : lat < r->lat[v])) {
        continue;
      }
      r->pred[v] = li;
      r->lat[v] = lat;
      r->bw[v] = bw;
    }
  }
}

/* Every ordered pair's route equals the reference's; pairs are asked in an order that
 * changes the source at every request (the pair search), then grouped by source. */
static void check_all_pairs(psim_cluster *c) {
  size_t nv = (size_t)c->n_vertices;
  ref r = {malloc(4 * nv), malloc(4 * nv), malloc(4 * nv), malloc(8 * nv), malloc(8 * nv)};
  int32_t n = c->n_devices, *want = malloc(sizeof(int32_t) * (size_t)n * (size_t)n * 16);
  int32_t *want_n = malloc(sizeof(int32_t) * (size_t)n * (size_t)n);
  for (int32_t s = 0; s < n; s++) {
    ref_search(c, &r, s);
    for (int32_t d = 0; d < n; d++) {
      int32_t h = s == d ? 0 : r.hops[d];
      ck_assert_int_ge(h, 0);
      ck_assert_int_le(h, 16);
      want_n[s * n + d] = h;
      for (int32_t v = d, i = h - 1; i >= 0; i--) {
        want[(s * n + d) * 16 + i] = r.pred[v];
        v = c->links[r.pred[v]].src;
      }
    }
  }
  for (int32_t k = 0; k < n * n; k++) {
    int32_t d = k % n, s = (k / n + d) % n; /* a new source at (almost) every request */
    const int32_t *links;
    int32_t nl;
    ck_assert_int_eq(psim_cluster_route(c, s, d, &links, &nl), PSIM_OK);
    ck_assert_msg(nl == want_n[s * n + d], "%d -> %d: %d hops, want %d", s, d, nl,
                  want_n[s * n + d]);
    for (int32_t i = 0; i < nl; i++)
      ck_assert_msg(links[i] == want[(s * n + d) * 16 + i], "%d -> %d: hop %d differs", s, d, i);
  }
  free(r.hops), free(r.pred), free(r.queue), free(r.lat), free(r.bw), free(want), free(want_n);
}

START_TEST(fat_tree_routes) {
  psim_cluster c;
  preset(&c, "dgx-a100-80g", 7, 3, 0); /* 56 GPUs in 3 racks, the last one short */
  check_all_pairs(&c);
  psim_cluster_destroy(&c);
  preset(&c, "dgx-a100-80g", 6, 2, 2); /* 2 NICs per node: GPUs share NICs */
  check_all_pairs(&c);
  psim_cluster_destroy(&c);
}
END_TEST

/* Switches of 32 links or more are looked up by destination, not scanned (route.c,
 * relax_toward_goal): a spine over 36 racks, then leaves of 48 NICs. */
START_TEST(wide_switch_routes) {
  psim_cluster c;
  preset(&c, "dgx-a100-80g", 36, 1, 0);
  check_all_pairs(&c);
  psim_cluster_destroy(&c);
  preset(&c, "dgx-a100-80g", 13, 6, 0); /* the last rack short */
  check_all_pairs(&c);
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(other_fabrics) {
  static const char *const names[] = {"dgx1-v100", "p100-nvlink", "pcie-box", "gb200-nvl72",
                                      "k80-pcie"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    psim_cluster c;
    preset(&c, names[i], i == 3 ? 2 : 5, 2, 0);
    check_all_pairs(&c);
    psim_cluster_destroy(&c);
  }
}
END_TEST

/* A straggling NVLink of the hybrid cube mesh makes two-hop routes through a peer wider
 * than the first one found: the width tie-break must agree too. */
START_TEST(slow_links) {
  psim_cluster c;
  preset(&c, "dgx1-v100", 3, 2, 0);
  for (int32_t i = 0; i < c.n_links; i += 7)
    c.links[i].slowdown = 1 + (double)(i % 5);
  check_all_pairs(&c);
  psim_cluster_destroy(&c);
}
END_TEST

/* Routes translated by the rotation of the nodes' devices (sim/ir/route_shift.h: one
 * representative pair searched per orbit, the others its images where its route is the only
 * shortest path) equal the reference search's on every ordered pair of random generated
 * clusters (fixed seed: nodes, racks, NICs per node, straggling links), and translation is
 * used there. */
static uint32_t lcg(uint32_t *x) {
  *x = *x * 1664525u + 1013904223u; /* Numerical Recipes' LCG */
  return *x >> 8;
}

static void random_cluster(psim_cluster *c, uint32_t *seed) {
  static const char *const names[] = {"dgx-a100-80g", "dgx-h100", "dgx-b200"};
  static const int32_t nics[] = {0, 1, 2, 4};
  int32_t nodes = 2 + (int32_t)(lcg(seed) % 9);
  preset(c, names[lcg(seed) % 3], nodes, 1 + (int32_t)(lcg(seed) % (uint32_t)nodes),
         nics[lcg(seed) % 4]);
  for (int32_t i = 0; i < c->n_links; i++)
    if (lcg(seed) % 11 == 0)
      c->links[i].slowdown = 1 + (double)(lcg(seed) % 4);
}

START_TEST(rotated_routes) {
  uint32_t seed = 19;
  for (int i = 0; i < 8; i++) {
    psim_cluster c;
    random_cluster(&c, &seed);
    check_all_pairs(&c);
    int64_t searched, translated;
    psim_cluster_route_counts(&c, &searched, &translated);
    ck_assert_msg(translated > 0, "cluster %d: %lld searched, none translated", i,
                  (long long)searched);
    psim_cluster_destroy(&c);
  }
}
END_TEST

/* Routes translated by node and rack transpositions (sim/ir/route_blocks.h) equal the
 * reference's on every ordered pair, and they leave a few representatives to search: on 3 full
 * racks of 4 DGX nodes (96 GPUs, 9,120 ordered pairs) the source goes to rack 0, node 0,
 * rank 0 and the destination to the same node, node 1 or rack 1's node 0: 7 + 8 + 8 pairs
 * (the rotation alone searched every pair from a node's first GPU: 1,140). A cluster where
 * one node's GPU-NIC link has another kind is no longer symmetric there: still the
 * reference's routes, with more searched. */
START_TEST(block_translated_routes) {
  psim_cluster c;
  preset(&c, "dgx-a100-80g", 12, 4, 8);
  check_all_pairs(&c);
  int64_t searched, translated;
  psim_cluster_route_counts(&c, &searched, &translated);
  ck_assert_msg(searched <= 23, "%lld searched, %lld translated", (long long)searched,
                (long long)translated);
  int64_t symmetric = searched;
  psim_cluster_destroy(&c);
  preset(&c, "dgx-a100-80g", 12, 4, 8);
  for (int32_t i = 0; i < c.n_links; i++) /* node 5's GPU 2 -> its NIC becomes NVLink */
    if (c.links[i].src == 5 * 8 + 2 && c.vertex_kinds[c.links[i].dst] == PSIM_VERTEX_NIC) {
      c.links[i].kind = PSIM_LINK_NVLINK;
      break;
    }
  check_all_pairs(&c);
  psim_cluster_route_counts(&c, &searched, &translated);
  ck_assert_msg(searched > symmetric, "%lld searched, symmetric %lld", (long long)searched,
                (long long)symmetric);
  psim_cluster_destroy(&c);
}
END_TEST

static double coll_time(psim_cluster *c, psim_coll_kind kind, psim_allreduce_algo algo,
                        const int32_t *dev, int32_t n, double bytes) {
  psim_coll_desc d;
  psim_coll_desc_init(&d);
  d.kind = kind;
  d.algo = algo;
  d.devices = dev;
  d.n = n;
  d.bytes = bytes;
  double t = 0;
  ck_assert_msg(psim_coll_time(c, &d, &t) == PSIM_OK, "%s", psim_error_message());
  return t;
}

static void route_figures(psim_cluster *c, int32_t a, int32_t b, double *lat, double *bw) {
  const int32_t *links;
  int32_t nl;
  ck_assert_int_eq(psim_cluster_route(c, a, b, &links, &nl), PSIM_OK);
  psim_cluster_route_cost(c, links, nl, bw, lat);
}

static void check_nodes(int32_t nodes) {
  psim_cluster c;
  preset(&c, "dgx-a100-80g", nodes, 0, 0);
  psim_cluster_drop_coll_tables(&c); /* the formula's figures */
  const int32_t k = 8, m = nodes * k;
  ck_assert_int_eq(c.n_devices, m);
  int32_t *all = malloc(sizeof(int32_t) * (size_t)m), *rail = malloc(sizeof(int32_t) * nodes);
  for (int32_t i = 0; i < m; i++)
    all[i] = i;
  for (int32_t j = 0; j < nodes; j++)
    rail[j] = j * k; /* GPU 0 of every node */
  const double n = 1 << 30;
  double t = coll_time(&c, PSIM_COLL_ALL_REDUCE, PSIM_AR_AUTO, all, m, n);
  double parts = coll_time(&c, PSIM_COLL_REDUCE_SCATTER, PSIM_AR_RING, all, k, n) +
                 coll_time(&c, PSIM_COLL_ALL_REDUCE, PSIM_AR_RING, rail, nodes, n / k) +
                 coll_time(&c, PSIM_COLL_ALL_GATHER, PSIM_AR_RING, all, k, n);
  ck_assert_msg(fabs(t - parts) <= 1e-9 * parts, "%d nodes: %.12g s, parts %.12g s", nodes, t,
                parts);
  double a_in, b_in, a_x, b_x;
  route_figures(&c, 0, 1, &a_in, &b_in);
  route_figures(&c, 0, 20 * k, &a_x, &b_x); /* node 0 to node 20: the next rack */
  double closed =
      2 * (k - 1) * (a_in + n / k / b_in) + 2 * (nodes - 1) * (a_x + n / ((double)k * nodes) / b_x);
  ck_assert_msg(fabs(t - closed) <= 1e-9 * closed, "%d nodes: %.12g s, closed form %.12g s", nodes,
                t, closed);
  free(all);
  free(rail);
  psim_cluster_destroy(&c);
}

/* Ties: two nodes of two GPUs, each GPU on two switches over PCIe. The rotation (each node's
 * GPUs swapped, the switches fixed) is an automorphism, but every pair has two 2-hop routes,
 * and a straggling link makes the first pair take the second switch where its image takes
 * the first: the representative's route is not the only shortest one, so no pair may be
 * translated, and the routes must still be the reference's. */
static const char ties_json[] =
    "{\"format\": \"plansim.cluster/1\", \"name\": \"ties\", \"devices\": ["
    "{\"name\": \"g00\", \"type\": \"a100-80g\", \"node\": 0},"
    "{\"name\": \"g01\", \"type\": \"a100-80g\", \"node\": 0},"
    "{\"name\": \"g10\", \"type\": \"a100-80g\", \"node\": 1},"
    "{\"name\": \"g11\", \"type\": \"a100-80g\", \"node\": 1}],"
    "\"switches\": [\"a\", \"b\"], \"links\": ["
    "{\"a\": \"g00\", \"b\": \"a\", \"bandwidth\": \"25 GB/s\", \"latency\": \"1 us\", \"kind\": "
    "\"pcie\"},"
    "{\"a\": \"g01\", \"b\": \"a\", \"bandwidth\": \"25 GB/s\", \"latency\": \"1 us\", \"kind\": "
    "\"pcie\"},"
    "{\"a\": \"g10\", \"b\": \"a\", \"bandwidth\": \"25 GB/s\", \"latency\": \"1 us\", \"kind\": "
    "\"pcie\"},"
    "{\"a\": \"g11\", \"b\": \"a\", \"bandwidth\": \"25 GB/s\", \"latency\": \"1 us\", \"kind\": "
    "\"pcie\"},"
    "{\"a\": \"g00\", \"b\": \"b\", \"bandwidth\": \"25 GB/s\", \"latency\": \"1 us\", \"kind\": "
    "\"pcie\"},"
    "{\"a\": \"g01\", \"b\": \"b\", \"bandwidth\": \"25 GB/s\", \"latency\": \"1 us\", \"kind\": "
    "\"pcie\"},"
    "{\"a\": \"g10\", \"b\": \"b\", \"bandwidth\": \"25 GB/s\", \"latency\": \"1 us\", \"kind\": "
    "\"pcie\"},"
    "{\"a\": \"g11\", \"b\": \"b\", \"bandwidth\": \"25 GB/s\", \"latency\": \"1 us\", \"kind\": "
    "\"pcie\"}]}";

START_TEST(rotated_ties) {
  cJSON *doc = NULL;
  ck_assert_int_eq(psim_json_parse("ties", ties_json, sizeof ties_json - 1, &doc), PSIM_OK);
  psim_cluster c;
  psim_cluster_init(&c);
  psim_status s = psim_cluster_from_json("ties", doc, &c);
  cJSON_Delete(doc);
  ck_assert_msg(s == PSIM_OK, "%s", psim_error_message());
  for (int32_t i = 0; i < c.n_links; i++) /* g00 -> a straggles: g00's routes take b */
    if (c.links[i].src == 0 && c.vertex_kinds[c.links[i].dst] == PSIM_VERTEX_SWITCH) {
      c.links[i].slowdown = 2;
      break;
    }
  check_all_pairs(&c);
  int64_t searched, translated;
  psim_cluster_route_counts(&c, &searched, &translated);
  ck_assert_int_eq(translated, 0);
  ck_assert_int_eq(searched, 12);
  bool has_rotation = false;
  int64_t rejected = 0;
  psim_cluster_route_rotation(&c, &has_rotation, &rejected);
  ck_assert_msg(has_rotation, "the rotation was not found (rather than rejected)");
  ck_assert_int_gt(rejected, 0);
  psim_cluster_destroy(&c);
}
END_TEST

/* Concurrent groups' collectives (each rank's rail across the nodes, every group index; and
 * every device at once, hierarchically) take the same time to the bit on a random generated
 * cluster whose routes are translated and on the same cluster whose routes are all
 * searched (psim_cluster_route_no_translation: the per-pair path). */
static double group_time(psim_cluster *c, psim_coll_kind kind, psim_allreduce_algo algo,
                         const int32_t *dev, int32_t n, int32_t groups, int32_t k) {
  psim_coll_desc d;
  psim_coll_desc_init(&d);
  d.kind = kind;
  d.algo = algo;
  d.devices = dev;
  d.n = n;
  d.bytes = 3e8;
  d.concurrent_groups = groups;
  d.group_stride = groups > 1 ? 1 : 0;
  d.group_index = k;
  double t = 0;
  ck_assert_msg(psim_coll_time(c, &d, &t) == PSIM_OK, "%s", psim_error_message());
  return t;
}

static void check_groups(psim_cluster *a, psim_cluster *b) {
  int32_t k = a->devices_per_node, nodes = a->n_devices / k;
  int32_t *rail = malloc(sizeof(int32_t) * (size_t)a->n_devices);
  static const psim_allreduce_algo algos[] = {PSIM_AR_AUTO, PSIM_AR_RING, PSIM_AR_TREE};
  for (int32_t g = 0; g < k; g++) {
    for (int32_t j = 0; j < nodes; j++)
      rail[j] = j * k + g;
    for (size_t i = 0; i < sizeof algos / sizeof *algos; i++) {
      double ta = group_time(a, PSIM_COLL_ALL_REDUCE, algos[i], rail, nodes, k, g);
      double tb = group_time(b, PSIM_COLL_ALL_REDUCE, algos[i], rail, nodes, k, g);
      ck_assert_msg(ta == tb, "rail %d, algorithm %zu: %.17g s translated, %.17g s searched", g, i,
                    ta, tb);
    }
    double ta = group_time(a, PSIM_COLL_ALL_GATHER, PSIM_AR_RING, rail, nodes, k, g);
    ck_assert(ta == group_time(b, PSIM_COLL_ALL_GATHER, PSIM_AR_RING, rail, nodes, k, g));
  }
  for (int32_t i = 0; i < a->n_devices; i++)
    rail[i] = i;
  double ta = group_time(a, PSIM_COLL_ALL_REDUCE, PSIM_AR_AUTO, rail, a->n_devices, 1, 0);
  ck_assert(ta == group_time(b, PSIM_COLL_ALL_REDUCE, PSIM_AR_AUTO, rail, a->n_devices, 1, 0));
  free(rail);
}

START_TEST(rotated_collectives) {
  uint32_t seed = 23;
  for (int i = 0; i < 8; i++) {
    uint32_t again = seed;
    psim_cluster a, b;
    random_cluster(&a, &seed);
    random_cluster(&b, &again);
    ck_assert_int_eq(psim_cluster_route_no_translation(&b), PSIM_OK);
    check_groups(&a, &b);
    int64_t searched, translated;
    psim_cluster_route_counts(&a, &searched, &translated);
    ck_assert_int_gt(translated, 0);
    psim_cluster_route_counts(&b, &searched, &translated);
    ck_assert_int_eq(translated, 0);
    psim_cluster_destroy(&a);
    psim_cluster_destroy(&b);
  }
}
END_TEST

/* The routes memo keeps each phase's rate and filled links with its routes
 * (sim/engine/coll_routes.c): collectives added with one memo (every rail, group index,
 * algorithm and three sizes, each also alone, in turn) take the same times and make the same
 * tasks (durations and resource lists, to the bit) as the same collectives added without. */
static void add_both(psim_cluster *c, psim_taskgraph *g, psim_coll_routes *memo,
                     psim_coll_desc *d) {
  int32_t entry, exit;
  double t_memo, t_plain;
  d->routes = memo;
  ck_assert_int_eq(
      psim_coll_add_timed(&g[0], c, d, PSIM_FIDELITY_AGGREGATE, NULL, &entry, &exit, &t_memo),
      PSIM_OK);
  d->routes = NULL;
  ck_assert_int_eq(
      psim_coll_add_timed(&g[1], c, d, PSIM_FIDELITY_AGGREGATE, NULL, &entry, &exit, &t_plain),
      PSIM_OK);
  ck_assert_msg(t_memo == t_plain, "%.17g s with the memo, %.17g s without", t_memo, t_plain);
}

static void same_graphs(psim_taskgraph *g) {
  ck_assert_int_eq(psim_tg_finalize(&g[0]), PSIM_OK);
  ck_assert_int_eq(psim_tg_finalize(&g[1]), PSIM_OK);
  ck_assert_int_eq(g[0].n_tasks, g[1].n_tasks);
  for (int32_t t = 0; t < g[0].n_tasks; t++) {
    ck_assert(g[0].duration_s[t] == g[1].duration_s[t]);
    ck_assert_int_eq(g[0].res_first[t + 1] - g[0].res_first[t],
                     g[1].res_first[t + 1] - g[1].res_first[t]);
    for (int32_t r = g[0].res_first[t]; r < g[0].res_first[t + 1]; r++)
      ck_assert_int_eq(g[0].res[r], g[1].res[r - g[0].res_first[t] + g[1].res_first[t]]);
  }
}

START_TEST(memo_same_figures) {
  static const psim_allreduce_algo algos[] = {PSIM_AR_AUTO, PSIM_AR_RING, PSIM_AR_TREE};
  static const double sizes[] = {1e6, 3e8, 2e9};
  uint32_t seed = 29;
  for (int i = 0; i < 4; i++) {
    psim_cluster c;
    random_cluster(&c, &seed);
    int32_t k = c.devices_per_node, nodes = c.n_devices / k;
    int32_t *rail = malloc(sizeof(int32_t) * (size_t)nodes);
    psim_coll_routes *memo = psim_coll_routes_new();
    psim_taskgraph g[2];
    for (int j = 0; j < 2; j++)
      psim_tg_init(&g[j], 2 * c.n_devices + c.n_links);
    for (size_t a = 0; a < 3; a++)
      for (size_t z = 0; z < 3; z++)
        for (int32_t r = 0; r < k; r++) {
          for (int32_t j = 0; j < nodes; j++)
            rail[j] = j * k + r;
          psim_coll_desc d;
          psim_coll_desc_init(&d);
          d.algo = algos[a];
          d.devices = rail;
          d.n = nodes;
          d.bytes = sizes[z];
          d.own_stream = (r + (int32_t)z) % 2;
          d.concurrent_groups = k;
          d.group_stride = 1;
          d.group_index = r;
          add_both(&c, g, memo, &d);
          d.concurrent_groups = 1;
          d.group_stride = 0;
          d.group_index = 0;
          add_both(&c, g, memo, &d);
        }
    same_graphs(g);
    psim_tg_destroy(&g[0]);
    psim_tg_destroy(&g[1]);
    psim_coll_routes_free(memo);
    free(rail);
    psim_cluster_destroy(&c);
  }
}
END_TEST

START_TEST(hierarchical_512) {
  check_nodes(64);
}
END_TEST

START_TEST(hierarchical_16384) {
  check_nodes(2048);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("coll_large");
  TCase *t = tcase_create("routes");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, fat_tree_routes);
  tcase_add_test(t, wide_switch_routes);
  tcase_add_test(t, other_fabrics);
  tcase_add_test(t, slow_links);
  tcase_add_test(t, rotated_routes);
  tcase_add_test(t, rotated_ties);
  tcase_add_test(t, block_translated_routes);
  tcase_add_test(t, rotated_collectives);
  tcase_add_test(t, memo_same_figures);
  tcase_add_test(t, hierarchical_512);
  tcase_add_test(t, hierarchical_16384);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
