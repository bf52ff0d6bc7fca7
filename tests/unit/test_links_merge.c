/* test_links_merge.c - the link merge (sim/builder/links_merge.c) against a brute-force
 * reference: a link is dropped from every task exactly when a lower-numbered link is held by
 * the same set of tasks, and every list keeps its other entries in order. Random graphs built
 * by hand (runs, repeated lists far apart, lists of links that always go together), and real
 * folded builds whose collectives' later pieces read their first piece's list through the
 * templates (psim_coll_desc.list_first_piece, colls.c list_from_template): their merged graph
 * is the reference merge of the graph built with every piece's list written out, and both
 * schedule to the same start and end of every task. Also list_first_piece itself: the engine's
 * chain is the same but for the later pieces' lists, and before the merge every task of a
 * deferred build reads the list the build without deferral writes. */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/builder/build_impl.h"
#include "sim/core/alloc.h"
#include "sim/engine/collective.h"
#include "topologies/presets.h"

#define MODELS PSIM_SOURCE_ROOT "/models/"
#define DATA   PSIM_SOURCE_ROOT "/tests/data/"

/* splitmix64 (Steele, Lea and Flood 2014): the test's random numbers. */
static uint64_t next_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15u);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

static int32_t below(uint64_t *s, int32_t n) {
  return (int32_t)(next_rand(s) % (uint64_t)n);
}

/* The reference: rep[l] = the lowest link held by the same non-empty set of tasks as link l
 * (l itself when none), from the holders written out per link. */
static int32_t *reference_reps(const psim_taskgraph *g, int32_t lo, int32_t nl) {
  int32_t *cnt = psim_calloc((size_t)nl + 1, sizeof *cnt);
  int32_t *first = psim_calloc((size_t)nl + 2, sizeof *first);
  ck_assert(cnt && first);
  for (size_t k = 0; k < g->n_res; k++)
    if (g->res[k] >= lo && g->res[k] < lo + nl)
      cnt[g->res[k] - lo]++;
  for (int32_t l = 0; l < nl; l++)
    first[l + 1] = first[l] + cnt[l];
  int32_t *holders = psim_malloc(((size_t)first[nl] + 1) * sizeof *holders);
  ck_assert(holders);
  memset(cnt, 0, (size_t)nl * sizeof *cnt);
  for (int32_t t = 0; t < g->n_tasks; t++) /* in task order: each link's holders ascending */
    for (int32_t k = g->res_first[t]; k < g->res_first[t + 1]; k++)
      if (g->res[k] >= lo && g->res[k] < lo + nl) {
        int32_t l = g->res[k] - lo;
        holders[first[l] + cnt[l]++] = t;
      }
  int32_t *rep = psim_malloc(((size_t)nl + 1) * sizeof *rep);
  ck_assert(rep);
  for (int32_t l = 0; l < nl; l++) {
    rep[l] = l;
    for (int32_t j = 0; j < l && cnt[l] > 0; j++)
      if (rep[j] == j && cnt[j] == cnt[l] &&
          memcmp(holders + first[j], holders + first[l], (size_t)cnt[l] * sizeof *holders) == 0) {
        rep[l] = j;
        break;
      }
  }
  psim_free(cnt);
  psim_free(first);
  psim_free(holders);
  return rep;
}

/* merged must be full's lists without the links whose reference rep is another link, every
 * other entry kept in order, and schedule as full does. */
static void same_as_reference(const psim_taskgraph *full, const psim_taskgraph *merged, int32_t nd,
                              int32_t nl, const char *what) {
  int32_t lo = psim_res_link(nd, 0);
  int32_t *rep = reference_reps(full, lo, nl);
  ck_assert_int_eq(full->n_tasks, merged->n_tasks);
  int32_t w = 0;
  for (int32_t t = 0; t < full->n_tasks; t++) {
    ck_assert_msg(merged->res_first[t] == w, "%s: task %d starts at %d, not %d", what, (int)t,
                  (int)merged->res_first[t], (int)w);
    for (int32_t k = full->res_first[t]; k < full->res_first[t + 1]; k++) {
      int32_t r = full->res[k];
      if (r >= lo && r < lo + nl && rep[r - lo] != r - lo)
        continue;
      ck_assert_msg(merged->res[w] == r, "%s: task %d entry %d is %d, not %d", what, (int)t,
                    (int)(w - merged->res_first[t]), (int)merged->res[w], (int)r);
      w++;
    }
  }
  ck_assert_int_eq(merged->res_first[full->n_tasks], w);
  psim_free(rep);
  psim_schedule_result a, b;
  psim_schedule_result_init(&a);
  psim_schedule_result_init(&b);
  ck_assert(psim_tg_simulate(full, &a) == PSIM_OK && psim_tg_simulate(merged, &b) == PSIM_OK);
  ck_assert(a.makespan_s == b.makespan_s);
  for (int32_t t = 0; t < full->n_tasks; t++)
    ck_assert_msg(a.start_s[t] == b.start_s[t] && a.end_s[t] == b.end_s[t],
                  "%s: task %d at [%.17g, %.17g], merged [%.17g, %.17g]", what, (int)t,
                  a.start_s[t], a.end_s[t], b.start_s[t], b.end_s[t]);
  psim_schedule_result_destroy(&a);
  psim_schedule_result_destroy(&b);
}

/* A random list into out: some of the link blocks (blk: block of each link; links of one block
 * always go together, so they merge) and a few devices' engines, shuffled; *n its length. */
static void random_list(uint64_t *rng, int32_t nd, int32_t nl, const int32_t *blk, int32_t n_blk,
                        bool long_list, int32_t *out, int32_t *n) {
  *n = 0;
  uint8_t *take = psim_calloc((size_t)n_blk + 1, 1);
  ck_assert(take);
  int32_t p = long_list ? 70 : 15; /* percent of the blocks taken */
  for (int32_t k = 0; k < n_blk; k++)
    take[k] = below(rng, 100) < p;
  for (int32_t l = 0; l < nl; l++)
    if (take[blk[l]])
      out[(*n)++] = psim_res_link(nd, l);
  psim_free(take);
  for (int32_t d = 0; d < nd; d++)
    if (below(rng, 4) == 0)
      out[(*n)++] = below(rng, 2) ? psim_res_compute(d) : psim_res_comm(d);
  for (int32_t k = *n - 1; k > 0; k--) { /* Fisher-Yates: the entries in no particular order */
    int32_t j = below(rng, k + 1), x = out[k];
    out[k] = out[j];
    out[j] = x;
  }
}

/* One random graph: a pool of lists, tasks drawing from it (runs of one list, lists repeated
 * far apart, long lists that the merge looks up by content), random edges. */
static void random_graph(uint64_t *rng, int32_t nd, int32_t nl, psim_taskgraph *g) {
  int32_t n_blk = 1 + below(rng, nl), *blk = psim_malloc((size_t)nl * sizeof *blk);
  int32_t n_pool = 1 + below(rng, 12), cap = nl + nd + 1;
  int32_t *pool = psim_malloc((size_t)n_pool * (size_t)cap * sizeof *pool);
  int32_t *pool_n = psim_malloc((size_t)n_pool * sizeof *pool_n);
  ck_assert(blk && pool && pool_n);
  for (int32_t l = 0; l < nl; l++)
    blk[l] = below(rng, n_blk);
  for (int32_t i = 0; i < n_pool; i++)
    random_list(rng, nd, nl, blk, n_blk, below(rng, 2) == 0, pool + (size_t)i * (size_t)cap,
                &pool_n[i]);
  psim_tg_init(g, 3 * nd + nl);
  int32_t n_tasks = 1 + below(rng, 200), list = 0;
  psim_task_info info = {PSIM_TASK_COLLECTIVE, 0, -1, -1, -1, 0, -1};
  for (int32_t t = 0; t < n_tasks; t++) {
    int32_t id, tmp[256], n;
    const int32_t *res;
    if (below(rng, 8) == 0) { /* a list of its own */
      random_list(rng, nd, nl, blk, n_blk, below(rng, 2) == 0, tmp, &n);
      res = tmp;
    } else {
      if (below(rng, 3) == 0) /* else the same list as the task before: a run */
        list = below(rng, n_pool);
      res = pool + (size_t)list * (size_t)cap;
      n = pool_n[list];
    }
    ck_assert(psim_tg_add_task(g, 1e-3 * (1 + below(rng, 5)), res, n, &info, &id) == PSIM_OK);
    for (int e = 0; t > 0 && e < 2; e++)
      if (below(rng, 2))
        ck_assert(psim_tg_add_edge(g, below(rng, t), t) == PSIM_OK);
  }
  ck_assert(psim_tg_finalize(g) == PSIM_OK);
  psim_free(blk);
  psim_free(pool);
  psim_free(pool_n);
}

/* A copy of g's tasks, lists and edges. */
static void copy_graph(const psim_taskgraph *g, psim_taskgraph *out) {
  psim_tg_init(out, g->n_resources);
  int32_t *same = psim_malloc(((size_t)g->n_tasks + 1) * sizeof *same);
  ck_assert(same);
  for (int32_t t = 0; t < g->n_tasks; t++)
    same[t] = t;
  bool mapped;
  ck_assert(psim_tg_append_tasks(out, g, 0, g->n_tasks) == PSIM_OK);
  ck_assert(psim_tg_append_edges(out, g, 0, g->n_edges, same, &mapped) == PSIM_OK && mapped);
  ck_assert(psim_tg_finalize(out) == PSIM_OK);
  psim_free(same);
}

/* 400 random graphs on 1-8 devices and 2-80 links, merged by psim_build_merge_links as a
 * deferred build's are (the merge then runs whatever the entries per task). */
START_TEST(random_graphs_merge_as_the_reference) {
  uint64_t rng = 19;
  int32_t merged_some = 0, kept_some = 0;
  for (int round = 0; round < 400; round++) {
    int32_t nd = 1 + below(&rng, 8), nl = 2 + below(&rng, 79);
    psim_cluster c = {0};
    c.n_devices = nd;
    c.n_links = nl;
    psim_sim_options o;
    psim_sim_options_init(&o);
    psim_build *b = psim_calloc(1, sizeof *b);
    ck_assert(b);
    b->c = &c;
    b->o = &o;
    b->res_deferred = true;
    random_graph(&rng, nd, nl, &b->g);
    psim_taskgraph full;
    copy_graph(&b->g, &full);
    ck_assert_msg(psim_build_merge_links(b) == PSIM_OK, "%s", psim_error_message());
    char what[64];
    snprintf(what, sizeof what, "round %d (%d devices, %d links)", round, (int)nd, (int)nl);
    same_as_reference(&full, &b->g, nd, nl, what);
    merged_some += b->g.n_res < full.n_res;
    kept_some += b->g.n_res == full.n_res;
    psim_tg_destroy(&full);
    psim_tg_destroy(&b->g);
    psim_free(b);
  }
  ck_assert_int_gt(merged_some, 100); /* the cases are not all of one kind */
  ck_assert_int_gt(kept_some, 0);
}
END_TEST

static void preset_cluster(psim_cluster *c, const char *preset, int nodes) {
  psim_preset_opts po;
  psim_preset_opts_init(&po);
  po.preset = preset;
  po.nodes = nodes;
  cJSON *cj;
  ck_assert(psim_preset_cluster(&po, &cj) == PSIM_OK);
  psim_cluster_init(c);
  ck_assert_msg(psim_cluster_from_json(preset, cj, c) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(cj);
}

/* Tasks of g in chains of at least two consecutive collective tasks with one list (a chain's
 * pieces), and tasks whose list an earlier, non-adjacent task holds too (a template's copies;
 * only lists of at least min_n entries are compared). */
static void count_repeats(const psim_taskgraph *g, int32_t min_n, int32_t *pieces,
                          int32_t *copies) {
  *pieces = *copies = 0;
  for (int32_t t = 1; t < g->n_tasks; t++) {
    int32_t n = g->res_first[t + 1] - g->res_first[t];
    if (n < min_n || g->info[t].kind != PSIM_TASK_COLLECTIVE)
      continue;
    const int32_t *r = g->res + g->res_first[t];
    int32_t np = g->res_first[t] - g->res_first[t - 1];
    if (np == n && memcmp(g->res + g->res_first[t - 1], r, (size_t)n * sizeof *r) == 0) {
      ++*pieces;
      continue;
    }
    for (int32_t u = t - 2; u >= 0; u--)
      if (g->res_first[u + 1] - g->res_first[u] == n &&
          memcmp(g->res + g->res_first[u], r, (size_t)n * sizeof *r) == 0) {
        ++*copies;
        break;
      }
  }
}

/* Folded Megatron builds of GPT-1.3B on 2 to 8 DGX A100 nodes: with merge_links the
 * collectives' later pieces and copies get their lists from the templates and the merge
 * writes them; without, every piece's list is written where it is added. */
START_TEST(builds_merge_as_the_reference) {
  psim_model m;
  psim_model_init(&m);
  ck_assert_msg(psim_model_load(MODELS "gpt-1.3b.json", &m) == PSIM_OK, "%s", psim_error_message());
  static const int cases[][4] = {/* nodes, tp, pp, dp */
                                 {2, 8, 1, 2}, {4, 4, 2, 4}, {4, 8, 2, 2},
                                 {8, 2, 4, 8}, {8, 8, 1, 8}, {8, 8, 4, 2}};
  int32_t pieces_seen = 0, copies_seen = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    psim_cluster c;
    preset_cluster(&c, "dgx-a100-80g", cases[i][0]);
    psim_megatron_opts mo;
    psim_megatron_opts_init(&mo);
    mo.tp = cases[i][1];
    mo.pp = cases[i][2];
    mo.dp = cases[i][3];
    mo.recompute = PSIM_RECOMPUTE_FULL;
    psim_strategy s;
    psim_strategy_init(&s);
    ck_assert_msg(psim_strategy_megatron(&m, &c, &mo, &s) == PSIM_OK, "%s", psim_error_message());
    psim_sim_options o;
    psim_sim_options_init(&o);
    o.merge_links = false;
    psim_build *full, *merged;
    ck_assert_msg(psim_build_graph(&full, &m, &c, &s, &o) == PSIM_OK, "%s", psim_error_message());
    o.merge_links = true;
    ck_assert_msg(psim_build_graph(&merged, &m, &c, &s, &o) == PSIM_OK, "%s", psim_error_message());
    ck_assert(merged->res_deferred && !full->res_deferred);
    ck_assert(merged->folded == full->folded);
    int32_t pieces, copies;
    count_repeats(&full->g, 2, &pieces, &copies);
    pieces_seen += pieces;
    copies_seen += copies;
    char what[64];
    snprintf(what, sizeof what, "%d nodes, tp %d pp %d dp %d", cases[i][0], cases[i][1],
             cases[i][2], cases[i][3]);
    ck_assert_uint_lt(merged->g.n_res, full->g.n_res);
    same_as_reference(&full->g, &merged->g, c.n_devices, c.n_links, what);
    psim_build_free(full);
    psim_build_free(merged);
    psim_strategy_destroy(&s);
    psim_cluster_destroy(&c);
  }
  ck_assert_int_gt(pieces_seen, 0); /* chains of several pieces were built */
  ck_assert_int_gt(copies_seen, 0); /* and templates copied */
  psim_model_destroy(&m);
}
END_TEST

/* An own-stream all-reduce over 4 DGX A100 nodes with list_first_piece: the same chain (pieces,
 * durations, edges) as without, the first piece holding the list that every piece holds
 * without, the later pieces none. */
START_TEST(first_piece_holds_the_chain_list) {
  psim_cluster c;
  preset_cluster(&c, "dgx-a100-80g", 4);
  int32_t dev[32];
  for (int32_t i = 0; i < 32; i++)
    dev[i] = i;
  psim_taskgraph g[2];
  int32_t entry[2], exit[2];
  psim_task_info info = {PSIM_TASK_COLLECTIVE, 0, -1, -1, -1, 0, -1};
  for (int k = 0; k < 2; k++) {
    psim_coll_desc d;
    psim_coll_desc_init(&d);
    d.devices = dev;
    d.n = 32;
    d.bytes = 1 << 30;
    d.own_stream = true;
    d.list_first_piece = k == 1;
    psim_tg_init(&g[k], 3 * c.n_devices + c.n_links);
    ck_assert_msg(psim_coll_add(&g[k], &c, &d, PSIM_FIDELITY_AGGREGATE, &info, &entry[k],
                                &exit[k]) == PSIM_OK,
                  "%s", psim_error_message());
  }
  ck_assert_int_eq(entry[0], entry[1]);
  ck_assert_int_eq(exit[0], exit[1]);
  ck_assert_int_gt(exit[0], entry[0]); /* several pieces */
  ck_assert_int_eq(g[0].n_tasks, g[1].n_tasks);
  ck_assert_uint_eq(g[0].n_edges, g[1].n_edges);
  for (size_t e = 0; e < g[0].n_edges; e++)
    ck_assert(g[0].edge_from[e] == g[1].edge_from[e] && g[0].edge_to[e] == g[1].edge_to[e]);
  const int32_t *first = g[1].res + g[1].res_first[entry[1]];
  int32_t n = g[1].res_first[entry[1] + 1] - g[1].res_first[entry[1]];
  ck_assert_int_gt(n, 8);
  for (int32_t t = 0; t < g[0].n_tasks; t++) {
    ck_assert(g[0].duration_s[t] == g[1].duration_s[t]);
    int32_t n0 = g[0].res_first[t + 1] - g[0].res_first[t];
    int32_t n1 = g[1].res_first[t + 1] - g[1].res_first[t];
    if (t < entry[0] || t > exit[0]) { /* not a piece: the same list */
      ck_assert(n0 == n1 && memcmp(g[0].res + g[0].res_first[t], g[1].res + g[1].res_first[t],
                                   (size_t)n0 * sizeof(int32_t)) == 0);
      continue;
    }
    ck_assert_int_eq(n0, n);
    ck_assert(memcmp(g[0].res + g[0].res_first[t], first, (size_t)n * sizeof *first) == 0);
    ck_assert_int_eq(n1, t == entry[1] ? n : 0);
  }
  psim_tg_destroy(&g[0]);
  psim_tg_destroy(&g[1]);
  psim_cluster_destroy(&c);
}
END_TEST

/* Before the merge, every task of a deferred build (res_deferred: the chains' later pieces and
 * the templates' copies without lists of their own) reads through psim_build_task_res the list
 * that the build without deferral writes for it. */
START_TEST(deferred_lists_read_as_written) {
  psim_model m;
  psim_model_init(&m);
  ck_assert_msg(psim_model_load(MODELS "gpt-1.3b.json", &m) == PSIM_OK, "%s", psim_error_message());
  psim_cluster c;
  preset_cluster(&c, "dgx-a100-80g", 4);
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = 4;
  mo.pp = 2;
  mo.dp = 4;
  psim_strategy s;
  psim_strategy_init(&s);
  ck_assert_msg(psim_strategy_megatron(&m, &c, &mo, &s) == PSIM_OK, "%s", psim_error_message());
  psim_build *b[2];
  for (int k = 0; k < 2; k++) {
    psim_sim_options o;
    psim_sim_options_init(&o);
    o.merge_links = k == 1;
    b[k] = psim_calloc(1, sizeof *b[k]);
    ck_assert(b[k]);
    ck_assert_msg(psim_build_fill(b[k], &m, &c, &s, &o, NULL, NULL, NULL) == PSIM_OK, "%s",
                  psim_error_message());
  }
  ck_assert(!b[0]->res_deferred && b[1]->res_deferred);
  ck_assert_int_eq(b[0]->g.n_tasks, b[1]->g.n_tasks);
  int32_t deferred = 0;
  for (int32_t t = 0; t < b[0]->g.n_tasks; t++) {
    const int32_t *r0, *r1;
    int32_t n0, n1;
    psim_build_task_res(b[0], t, &r0, &n0);
    psim_build_task_res(b[1], t, &r1, &n1);
    ck_assert_msg(n0 == n1 && (n0 == 0 || memcmp(r0, r1, (size_t)n0 * sizeof *r0) == 0),
                  "task %d: %d entries written, %d read", (int)t, (int)n0, (int)n1);
    deferred += n1 > 0 && b[1]->g.res_first[t + 1] == b[1]->g.res_first[t];
  }
  ck_assert_int_gt(deferred, 0); /* some lists were the templates' */
  for (int k = 0; k < 2; k++) {
    psim_build_destroy(b[k]);
    psim_free(b[k]);
  }
  psim_strategy_destroy(&s);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

Suite *links_merge_suite(void) {
  Suite *s = suite_create("links_merge");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, random_graphs_merge_as_the_reference);
  tcase_add_test(tc, builds_merge_as_the_reference);
  tcase_add_test(tc, first_piece_holds_the_chain_list);
  tcase_add_test(tc, deferred_lists_read_as_written);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(links_merge_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
