/* test_engine_order.c - the engine's static orders (psim_engine_order, issue 18): program order
 * (Kahn's algorithm, lowest ready id first), level order (longest path in edges, then id) and
 * issue order (the builder's issue positions, inherited where -1) against first come (ready
 * order), and stream order (device streams in issue order's sequence, links first come).
 * docs/simulator.md, "A fixed order per resource" and "Stream order". */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/engine/taskgraph.h"

static int32_t add(psim_taskgraph *g, double d, const int32_t *res, int32_t n) {
  int32_t id = -1;
  ck_assert_int_eq(psim_tg_add_task(g, d, res, n, NULL, &id), PSIM_OK);
  return id;
}

static void edge(psim_taskgraph *g, int32_t a, int32_t b) {
  ck_assert_int_eq(psim_tg_add_edge(g, a, b), PSIM_OK);
}

static double run(const psim_taskgraph *g, psim_schedule_result *r, psim_engine_order o) {
  r->order = o;
  ck_assert_int_eq(psim_tg_simulate(g, r), PSIM_OK);
  return r->makespan_s;
}

/* Two sends on one link L (resource 2): A (task 1) after a kernel of d0 on stream 0 and
 * followed by a kernel C of 10 s on stream 0, B (task 3) after a kernel of d2 on stream 1;
 * each send takes 4 s. First come sends whichever is ready first; program order sends A
 * (the lower id) first. Closed forms (d0 = 3):
 *   first come: d2 < d0: B at d2, A at d2 + 4, makespan d2 + 4 + 4 + 10;
 *               d2 > d0: A at d0, makespan d0 + 4 + 10 (B ends at max(d2, d0 + 4) + 4);
 *   program order: A at d0, B at max(d2, d0 + 4): max(d0 + 14, max(d2, d0 + 4) + 4).
 * d2 = 1 -> 4 (a longer kernel): first come 19 -> 17 s (Graham's anomaly), program 17 -> 17. */
static void two_sends(psim_taskgraph *g, double d2) {
  psim_tg_init(g, 3);
  int32_t s0 = 0, s1 = 1, link = 2;
  add(g, 3.0, &s0, 1);   /* 0: kernel, d0 = 3 */
  add(g, 4.0, &link, 1); /* 1: send A */
  add(g, d2, &s1, 1);    /* 2: kernel, d2 */
  add(g, 4.0, &link, 1); /* 3: send B */
  add(g, 10.0, &s0, 1);  /* 4: kernel C */
  edge(g, 0, 1);
  edge(g, 1, 4);
  edge(g, 2, 3);
  ck_assert_int_eq(psim_tg_finalize(g), PSIM_OK);
}

START_TEST(first_come_and_program_order_differ_on_a_hand_graph) {
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  ck_assert_int_eq(r.order, PSIM_ENGINE_READY); /* the default */
  double want_ready[2] = {19, 17}, want_static[2] = {17, 17}, d2[2] = {1, 4};
  for (int i = 0; i < 2; i++) {
    psim_taskgraph g;
    two_sends(&g, d2[i]);
    ck_assert_double_eq(run(&g, &r, PSIM_ENGINE_READY), want_ready[i]);
    ck_assert_double_eq(r.start_s[1], i == 0 ? 5.0 : 3.0); /* A behind B, then first */
    ck_assert_double_eq(run(&g, &r, PSIM_ENGINE_PROGRAM), want_static[i]);
    ck_assert_double_eq(r.start_s[1], 3.0);
    ck_assert_double_eq(r.start_s[3], 7.0); /* B waits behind A, ready at d2 */
    ck_assert_double_eq(run(&g, &r, PSIM_ENGINE_LEVEL), want_static[i]);
    psim_tg_destroy(&g);
  }
  psim_schedule_result_destroy(&r);
}
END_TEST

/* Program and level order differ: a low-id send C behind a chain of two kernels (level 2)
 * against a higher-id send D ready at once (level 0), on one link. Program order takes 0, 1,
 * then C (id 2) before D (id 3): D waits for C. Level order takes D (level 0) first. */
START_TEST(program_and_level_order_differ) {
  psim_taskgraph g;
  psim_tg_init(&g, 2);
  int32_t s0 = 0, link = 1;
  add(&g, 1.0, &s0, 1);   /* 0 */
  add(&g, 1.0, &s0, 1);   /* 1 */
  add(&g, 5.0, &link, 1); /* 2: C, after 0 -> 1 */
  add(&g, 5.0, &link, 1); /* 3: D, a source */
  edge(&g, 0, 1);
  edge(&g, 1, 2);
  ck_assert_int_eq(psim_tg_finalize(&g), PSIM_OK);
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  ck_assert_double_eq(run(&g, &r, PSIM_ENGINE_PROGRAM), 12.0); /* C 2-7, D 7-12 */
  ck_assert_double_eq(r.start_s[3], 7.0);
  ck_assert_double_eq(run(&g, &r, PSIM_ENGINE_LEVEL), 10.0); /* D 0-5, C 5-10 */
  ck_assert_double_eq(r.start_s[2], 5.0);
  ck_assert_double_eq(run(&g, &r, PSIM_ENGINE_READY), 10.0); /* D ready at 0, C at 2 */
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
}
END_TEST

/* Random DAG: ids in a random order (not topological), integer durations 0-3, 0-3 of 4 shared
 * resources per task, and with `host` a host (resource 4) issuing a third of the tasks (0.5 s
 * each, half of them in sync: psim_task_issue). */
static void random_dag(psim_taskgraph *g, unsigned *seed, bool host) {
  int32_t n = 2 + rand_r(seed) % 40;
  psim_tg_init(g, 5);
  int32_t *order = malloc((size_t)n * sizeof *order);
  for (int32_t i = 0; i < n; i++)
    order[i] = i;
  for (int32_t i = n - 1; i > 0; i--) {
    int32_t j = rand_r(seed) % (i + 1), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  for (int32_t i = 0; i < n; i++) {
    int32_t res[3], nr = rand_r(seed) % 4, used = 0;
    for (int32_t k = 0; k < nr; k++) {
      int32_t x = rand_r(seed) % 4, dup = 0;
      for (int32_t q = 0; q < used; q++)
        dup |= res[q] == x;
      if (!dup)
        res[used++] = x;
    }
    int32_t id = add(g, (double)(rand_r(seed) % 4), res, used);
    if (host && rand_r(seed) % 3 == 0)
      ck_assert_int_eq(psim_tg_set_issue(g, id, 4, 0.5, rand_r(seed) % 2), PSIM_OK);
  }
  for (int32_t i = 0; i < n; i++)
    for (int32_t j = i + 1; j < n; j++)
      if (rand_r(seed) % 6 == 0)
        edge(g, order[i], order[j]);
  free(order);
  ck_assert_int_eq(psim_tg_finalize(g), PSIM_OK);
}

/* Gives g's tasks issue positions (PSIM_ENGINE_ISSUE) 0-7 in a random order, a quarter -1
 * (inherit), from a seed of their own (the DAGs stay those of the other orders). */
static void random_positions(psim_taskgraph *g, unsigned *seed) {
  ck_assert_int_eq(psim_tg_track_positions(g, true), PSIM_OK);
  for (int32_t i = 0; i < g->n_tasks; i++)
    psim_tg_set_position(g, i, rand_r(seed) % 4 == 0 ? -1 : rand_r(seed) % 8);
}

/* Over random DAGs, lengthens each task in turn by 1.5 s: the number of (DAG, task) pairs
 * where some task then ends earlier (*ends) or the makespan falls (returned). */
static int count_anomalies(psim_engine_order o, int dags, int *ends) {
  unsigned seed = 2026, pseed = 11;
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  int shorter = 0;
  *ends = 0;
  for (int t = 0; t < dags; t++) {
    psim_taskgraph g;
    random_dag(&g, &seed, true);
    g.n_streams = 2; /* resources 0 and 1 streams, 2 and 3 links (stream order) */
    if (o == PSIM_ENGINE_ISSUE || o == PSIM_ENGINE_STREAM)
      random_positions(&g, &pseed);
    int32_t n = g.n_tasks;
    double m0 = run(&g, &r, o), *e0 = malloc((size_t)n * sizeof *e0);
    memcpy(e0, r.end_s, (size_t)n * sizeof *e0);
    for (int32_t i = 0; i < n; i++) {
      g.duration_s[i] += 1.5;
      shorter += run(&g, &r, o) < m0;
      bool earlier = false;
      for (int32_t k = 0; k < n; k++)
        earlier |= r.end_s[k] < e0[k];
      *ends += earlier;
      g.duration_s[i] -= 1.5;
    }
    free(e0);
    psim_tg_destroy(&g);
  }
  psim_schedule_result_destroy(&r);
  return shorter;
}

/* The point of the static orders: a max-plus schedule, so no task ends earlier and the
 * makespan never falls when a duration grows; first come fails on the same DAGs. */
START_TEST(static_orders_are_monotone_first_come_is_not) {
  int ends = 0;
  ck_assert_int_eq(count_anomalies(PSIM_ENGINE_PROGRAM, 400, &ends), 0);
  ck_assert_int_eq(ends, 0);
  ck_assert_int_eq(count_anomalies(PSIM_ENGINE_LEVEL, 400, &ends), 0);
  ck_assert_int_eq(ends, 0);
  ck_assert_int_eq(count_anomalies(PSIM_ENGINE_PASS_LEVEL, 400, &ends), 0);
  ck_assert_int_eq(ends, 0);
  ck_assert_int_eq(count_anomalies(PSIM_ENGINE_ISSUE, 400, &ends), 0);
  ck_assert_int_eq(ends, 0);
  int shorter = count_anomalies(PSIM_ENGINE_READY, 400, &ends);
  ck_assert_int_gt(shorter, 0); /* Graham's anomaly: 233 pairs (988 with some task earlier) */
  ck_assert_int_gt(ends, shorter);
}
END_TEST

/* Stream order runs every random DAG to the end (run() asserts PSIM_OK: its links never
 * deadlock) with random positions, two streams and two links shared at random and a host
 * issuing a third of the tasks; its links stay first come, so it keeps some of Graham's
 * anomalies (fewer than ready order's on the same DAGs, not 0). */
START_TEST(stream_order_never_deadlocks_and_keeps_link_anomalies) {
  int ends = 0, ready_ends = 0;
  int shorter = count_anomalies(PSIM_ENGINE_STREAM, 400, &ends);
  int ready = count_anomalies(PSIM_ENGINE_READY, 400, &ready_ends);
  ck_assert_int_gt(shorter, 0);
  ck_assert_int_lt(shorter, ready);   /* 400 DAGs: 84 against 233 pairs */
  ck_assert_int_lt(ends, ready_ends); /* some task earlier: 343 against 988 */
}
END_TEST

/* Naive reference of the static orders (no host issue): repeatedly takes the ready task of
 * least (level, id), level 0 throughout in program order; in issue order (g->position set)
 * the level is the most of the predecessors' and the task's own position. */
static void reference(const psim_taskgraph *g, bool by_level, double *start, double *end,
                      int32_t *seq) {
  int32_t n = g->n_tasks;
  char *done = calloc((size_t)n, 1);
  int32_t *level = calloc((size_t)n, sizeof *level);
  double *res_free = calloc((size_t)g->n_resources, sizeof *res_free);
  for (int32_t step = 0; step < n; step++) {
    int32_t best = -1;
    double best_t = 0;
    for (int32_t v = 0; v < n; v++) {
      bool ok = !done[v];
      double t = 0;
      int32_t lv = 0;
      for (size_t e = 0; e < g->n_edges && ok; e++)
        if (g->edge_to[e] == v) {
          int32_t u = g->edge_from[e];
          ok = done[u];
          t = ok ? fmax(t, end[u]) : t;
          int32_t up = level[u] + (by_level ? 1 : 0); /* issue order inherits, step 0 */
          lv = ok && (by_level || g->position) && up > lv ? up : lv;
        }
      if (g->position && g->position[v] > lv)
        lv = g->position[v];
      if (ok && (best < 0 || lv < level[best])) {
        best = v, best_t = t, level[v] = lv;
      }
    }
    double s = best_t;
    for (int32_t k = g->res_first[best]; k < g->res_first[best + 1]; k++)
      s = fmax(s, res_free[g->res[k]]);
    start[best] = s, end[best] = s + g->duration_s[best];
    for (int32_t k = g->res_first[best]; k < g->res_first[best + 1]; k++)
      res_free[g->res[k]] = end[best];
    done[best] = 1;
    if (seq)
      seq[step] = best;
  }
  free(done), free(level), free(res_free);
}

/* Naive reference of stream order (no host issue): the sequence seq of issue order's reference;
 * then repeatedly the task of least (ready time, id) among those whose predecessors have all
 * ended and which come first on each stream (resource below g->n_streams) they hold among the
 * tasks not yet taken, in seq's order; it starts at max(ready time, its resources' free times),
 * its ready time the latest end of its predecessors and of the tasks before it on its streams. */
static void stream_reference(const psim_taskgraph *g, const int32_t *seq, double *start,
                             double *end) {
  int32_t n = g->n_tasks;
  char *done = calloc((size_t)n, 1);
  int32_t *rank = malloc((size_t)n * sizeof *rank);
  double *res_free = calloc((size_t)g->n_resources, sizeof *res_free);
  double *stream_end = calloc((size_t)g->n_resources, sizeof *stream_end);
  for (int32_t i = 0; i < n; i++)
    rank[seq[i]] = i;
  for (int32_t step = 0; step < n; step++) {
    int32_t best = -1;
    double best_t = 0;
    for (int32_t v = 0; v < n; v++) {
      bool ok = !done[v];
      double t = 0;
      for (size_t e = 0; e < g->n_edges && ok; e++)
        if (g->edge_to[e] == v) {
          ok = done[g->edge_from[e]];
          t = fmax(t, end[g->edge_from[e]]);
        }
      for (int32_t k = g->res_first[v]; k < g->res_first[v + 1] && ok; k++) {
        int32_t s = g->res[k];
        for (int32_t w = 0; w < n && ok && s < g->n_streams; w++)
          for (int32_t q = g->res_first[w]; q < g->res_first[w + 1]; q++)
            ok &= !(g->res[q] == s && !done[w] && rank[w] < rank[v]);
        t = s < g->n_streams ? fmax(t, stream_end[s]) : t;
      }
      if (ok && (best < 0 || t < best_t))
        best = v, best_t = t;
    }
    double st = best_t;
    for (int32_t k = g->res_first[best]; k < g->res_first[best + 1]; k++)
      st = fmax(st, res_free[g->res[k]]);
    start[best] = st, end[best] = st + g->duration_s[best];
    for (int32_t k = g->res_first[best]; k < g->res_first[best + 1]; k++)
      res_free[g->res[k]] = stream_end[g->res[k]] = end[best];
    done[best] = 1;
  }
  free(done), free(rank), free(res_free), free(stream_end);
}

START_TEST(static_orders_match_a_naive_reference) {
  unsigned seed = 77;
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  for (int t = 0; t < 200; t++) {
    psim_taskgraph g;
    random_dag(&g, &seed, false);
    int32_t n = g.n_tasks;
    double *s = malloc((size_t)n * sizeof *s), *e = malloc((size_t)n * sizeof *e);
    for (int by_level = 0; by_level < 2; by_level++) {
      reference(&g, by_level, s, e, NULL);
      double mk = run(&g, &r, by_level ? PSIM_ENGINE_LEVEL : PSIM_ENGINE_PROGRAM);
      double want = 0;
      for (int32_t i = 0; i < n; i++) {
        ck_assert_double_eq(r.start_s[i], s[i]);
        ck_assert_double_eq(r.end_s[i], e[i]);
        want = fmax(want, e[i]);
      }
      ck_assert_double_eq(mk, want);
    }
    random_positions(&g, &seed); /* issue order against the same reference */
    int32_t *seq = malloc((size_t)n * sizeof *seq);
    reference(&g, false, s, e, seq);
    run(&g, &r, PSIM_ENGINE_ISSUE);
    for (int32_t i = 0; i < n; i++)
      ck_assert_double_eq(r.start_s[i], s[i]);
    g.n_streams = 4; /* every resource a stream: stream order is issue order */
    run(&g, &r, PSIM_ENGINE_STREAM);
    for (int32_t i = 0; i < n; i++)
      ck_assert_double_eq(r.start_s[i], s[i]);
    for (int32_t ns = 0; ns <= 4; ns += 2) { /* no streams (first come), two, all */
      g.n_streams = ns;
      stream_reference(&g, seq, s, e);
      run(&g, &r, PSIM_ENGINE_STREAM);
      for (int32_t i = 0; i < n; i++)
        ck_assert_double_eq(r.start_s[i], s[i]);
    }
    g.n_streams = 0; /* no streams: stream order is ready order */
    run(&g, &r, PSIM_ENGINE_READY);
    memcpy(s, r.start_s, (size_t)n * sizeof *s);
    run(&g, &r, PSIM_ENGINE_STREAM);
    for (int32_t i = 0; i < n; i++)
      ck_assert_double_eq(r.start_s[i], s[i]);
    free(s), free(e), free(seq);
    psim_tg_destroy(&g);
  }
  psim_schedule_result_destroy(&r);
}
END_TEST

/* A comm engine (resource 0, a stream), a compute stream (1) and a link (2), n_streams 2:
 *   0: kernel K, compute, 3 s, position 0;
 *   1: A, comm, 2 s, after K (inherits key 0);   2: B, comm, 4 s, a source, position 5;
 *   3: C, link, 4 s, after K (key 0);             4: D, link, 4 s, a source, position 7.
 * First come: B 0-4 then A 4-6 on the comm engine, D 0-4 then C 4-8 on the link: 8 s.
 * Stream order: the comm engine in key order, A (0) 3-5 before B (5) 5-9; the link first
 * come, D 0-4 then C 4-8: 9 s. Issue order: every resource in key order, K, A 3-5, C 3-7,
 * B 5-9, D 7-11: 11 s. */
START_TEST(stream_order_serves_streams_in_key_order_links_first_come) {
  psim_taskgraph g;
  psim_tg_init(&g, 3);
  g.n_streams = 2;
  int32_t comm = 0, compute = 1, link = 2;
  add(&g, 3.0, &compute, 1); /* K */
  add(&g, 2.0, &comm, 1);    /* A */
  add(&g, 4.0, &comm, 1);    /* B */
  add(&g, 4.0, &link, 1);    /* C */
  add(&g, 4.0, &link, 1);    /* D */
  edge(&g, 0, 1);
  edge(&g, 0, 3);
  ck_assert_int_eq(psim_tg_track_positions(&g, true), PSIM_OK);
  psim_tg_set_position(&g, 0, 0);
  psim_tg_set_position(&g, 2, 5);
  psim_tg_set_position(&g, 4, 7);
  ck_assert_int_eq(psim_tg_finalize(&g), PSIM_OK);
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  ck_assert_double_eq(run(&g, &r, PSIM_ENGINE_READY), 8.0);
  ck_assert_double_eq(r.start_s[1], 4.0); /* A behind B */
  ck_assert_double_eq(run(&g, &r, PSIM_ENGINE_STREAM), 9.0);
  double want[5] = {0, 3, 5, 4, 0}; /* K, A, B, C, D */
  for (int i = 0; i < 5; i++)
    ck_assert_double_eq(r.start_s[i], want[i]);
  ck_assert_double_eq(run(&g, &r, PSIM_ENGINE_ISSUE), 11.0);
  ck_assert_double_eq(r.start_s[4], 7.0); /* D behind C */
  g.n_streams = 0;                        /* no streams: first come everywhere */
  ck_assert_double_eq(run(&g, &r, PSIM_ENGINE_STREAM), 8.0);
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
}
END_TEST

/* A task holding one stream twice waits on it once (no self-link), and a task on two streams
 * waits for the previous task of each: X (streams 0 and 1, position 0), Y (stream 0 twice,
 * position 1) and Z (stream 1, position 2), all sources, 1 s each; stream order X 0-1, then Y
 * and Z 1-2 side by side. */
START_TEST(stream_order_links_each_stream_once) {
  psim_taskgraph g;
  psim_tg_init(&g, 2);
  g.n_streams = 2;
  int32_t both[2] = {1, 0}, twice[2] = {0, 0}, one = 1;
  add(&g, 1.0, twice, 2); /* Y, id 0 */
  add(&g, 1.0, &one, 1);  /* Z, id 1 */
  add(&g, 1.0, both, 2);  /* X, id 2 */
  ck_assert_int_eq(psim_tg_track_positions(&g, true), PSIM_OK);
  psim_tg_set_position(&g, 0, 1);
  psim_tg_set_position(&g, 1, 2);
  psim_tg_set_position(&g, 2, 0);
  ck_assert_int_eq(psim_tg_finalize(&g), PSIM_OK);
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  ck_assert_double_eq(run(&g, &r, PSIM_ENGINE_STREAM), 2.0);
  ck_assert_double_eq(r.start_s[2], 0.0);
  ck_assert_double_eq(r.start_s[0], 1.0);
  ck_assert_double_eq(r.start_s[1], 1.0);
  ck_assert_double_eq(run(&g, &r, PSIM_ENGINE_READY), 2.0); /* Y 0-1 and Z 0-1, X 1-2 */
  ck_assert_double_eq(r.start_s[2], 1.0);
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
}
END_TEST

/* Every allocation of a stream-order simulation failing in turn (the result's scratch, the
 * links' and the streams' arrays, the heap) gives PSIM_ENOMEM, and the same result, reused,
 * then runs the graph: ASan or valgrind see no leak (psim_schedule_result_destroy frees all). */
START_TEST(stream_order_allocation_failures_are_clean) {
  unsigned seed = 5;
  psim_taskgraph g;
  random_dag(&g, &seed, true);
  g.n_streams = 2;
  int failures = 0;
  for (long n = 1; n < 12; n++) {
    psim_schedule_result r;
    psim_schedule_result_init(&r);
    r.order = PSIM_ENGINE_STREAM;
    psim_alloc_fail_at(n);
    psim_status st = psim_tg_simulate(&g, &r);
    bool pending = psim_alloc_fail_pending() > 0;
    psim_alloc_fail_at(0);
    ck_assert(st == (pending ? PSIM_OK : PSIM_ENOMEM));
    failures += st == PSIM_ENOMEM;
    ck_assert_int_eq(psim_tg_simulate(&g, &r), PSIM_OK);
    psim_schedule_result_destroy(&r);
  }
  ck_assert_int_ge(failures, 6); /* start, end, state, res_free, heap, chain, last */
  psim_tg_destroy(&g);
}
END_TEST

/* Unknown orders are refused. */
START_TEST(order_names_and_bad_order) {
  psim_engine_order o = PSIM_ENGINE_READY;
  ck_assert(psim_engine_order_parse("program-order", &o) && o == PSIM_ENGINE_PROGRAM);
  ck_assert(psim_engine_order_parse("level-order", &o) && o == PSIM_ENGINE_LEVEL);
  ck_assert(psim_engine_order_parse("ready", &o) && o == PSIM_ENGINE_READY);
  ck_assert(psim_engine_order_parse("issue-order", &o) && o == PSIM_ENGINE_ISSUE);
  ck_assert(psim_engine_order_parse("stream-order", &o) && o == PSIM_ENGINE_STREAM);
  ck_assert_str_eq(psim_engine_order_name(PSIM_ENGINE_STREAM), "stream-order");
  ck_assert(!psim_engine_order_parse("fifo", &o) && !psim_engine_order_parse(NULL, &o));
  ck_assert_str_eq(psim_engine_order_name(PSIM_ENGINE_PROGRAM), "program-order");
  psim_taskgraph g;
  two_sends(&g, 1.0);
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  r.order = PSIM_ENGINE_ORDER_COUNT;
  ck_assert_int_eq(psim_tg_simulate(&g, &r), PSIM_EINPUT);
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("engine_order");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, first_come_and_program_order_differ_on_a_hand_graph);
  tcase_add_test(tc, program_and_level_order_differ);
  tcase_add_test(tc, static_orders_are_monotone_first_come_is_not);
  tcase_add_test(tc, static_orders_match_a_naive_reference);
  tcase_add_test(tc, stream_order_serves_streams_in_key_order_links_first_come);
  tcase_add_test(tc, stream_order_links_each_stream_once);
  tcase_add_test(tc, stream_order_never_deadlocks_and_keeps_link_anomalies);
  tcase_add_test(tc, stream_order_allocation_failures_are_clean);
  tcase_add_test(tc, order_names_and_bad_order);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
