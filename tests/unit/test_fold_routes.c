/* test_fold_routes.c - routes found by the goal-directed pair search (sim/ir/route.c,
 * pair_search: issue 19, routes for 100,000-device clusters without an O(devices) search
 * per route) equal those of a plain breadth-first search written here from route.c's
 * documented rule (fewest hops, then widest bottleneck, then least latency, ties to the
 * link added first; a route enters a NIC from the host side and leaves to the network or
 * back), on every ordered device pair of clusters of each fabric kind, with straggling
 * links that make the widest route differ from the first. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/json.h"
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

static Suite *suite(void) {
  Suite *s = suite_create("fold_routes");
  TCase *t = tcase_create("routes");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, fat_tree_routes);
  tcase_add_test(t, other_fabrics);
  tcase_add_test(t, slow_links);
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
