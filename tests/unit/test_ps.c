/* test_ps.c - parameter servers and stragglers against closed forms (issue 8):
 * a ring all-reduce with one worker slowed by f follows that worker; a
 * parameter server with backup_k = n - 1 leaves the straggler behind while
 * sync waits for it; each shard moves 2 x shard bytes x workers per
 * iteration; asynchronous servers reach a staleness of n - 1 updates. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include <cJSON.h>

#include "models/generators.h"
#include "sim/builder/ps.h"
#include "sim/core/alloc.h"
#include "sim/simulate.h"

#define ROOT PSIM_SOURCE_ROOT "/"

typedef struct fixture {
  psim_model m;
  psim_cluster c;
} fixture;

/* mlp (fp32, four 1024 x 1024 layers, batch 8192: kernels of milliseconds)
 * on four V100 in an NVLink ring; the runtime overheads are zeroed so that
 * kernels, not host issue, take the time. */
static void load(fixture *f) {
  psim_model_init(&f->m);
  psim_cluster_init(&f->c);
  psim_gen_net_opts go;
  psim_gen_net_opts_init(&go, "mlp");
  go.batch = 8192;
  cJSON *mj;
  ck_assert(psim_gen_mlp(&go, &mj) == PSIM_OK);
  ck_assert_msg(psim_model_from_json("mlp", mj, &f->m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(mj);
  ck_assert_msg(psim_cluster_load(ROOT "topologies/explicit-ring.json", &f->c) == PSIM_OK, "%s",
                psim_error_message());
  for (int32_t t = 0; t < f->c.n_types; t++)
    f->c.types[t].rt = (psim_runtime){0, 0, 0};
}

static void unload(fixture *f) {
  psim_cluster_destroy(&f->c);
  psim_model_destroy(&f->m);
}

static void dp(fixture *f, int32_t n, psim_strategy *s) {
  psim_strategy_init(s);
  ck_assert_msg(psim_strategy_data_parallel(&f->m, &f->c, n, 1, s) == PSIM_OK, "%s",
                psim_error_message());
}

static void with_ps(psim_strategy *s, const int32_t *servers, int32_t n, psim_ps_mode mode,
                    int32_t k) {
  s->sync = PSIM_SYNC_PS;
  s->ps.n_servers = n;
  s->ps.servers = psim_malloc(sizeof(int32_t) * (size_t)n);
  for (int32_t i = 0; i < n; i++)
    s->ps.servers[i] = servers[i];
  s->ps.mode = mode;
  s->ps.backup_k = k;
  s->ps.replicas = 1;
}

static double sim(fixture *f, const psim_strategy *s, bool keep, psim_sim_result *r) {
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.keep_graph = keep;
  ck_assert_msg(psim_simulate(&f->m, &f->c, s, &o, r) == PSIM_OK, "%s", psim_error_message());
  return r->iteration_time_s;
}

/* Summed compute-task time of device d in a kept graph. */
static double compute_of(const psim_sim_result *r, int32_t d) {
  double t = 0;
  for (int32_t i = 0; i < r->graph->n_tasks; i++)
    if (r->graph->info[i].kind == PSIM_TASK_COMPUTE && r->graph->info[i].device == d)
      t += r->graph->duration_s[i];
  return t;
}

START_TEST(ring_follows_slowest_worker) {
  fixture f;
  load(&f);
  psim_strategy s;
  dp(&f, 4, &s);
  s.overlap_grad_reduce = false;
  psim_sim_result r;
  double base = sim(&f, &s, true, &r);
  double c2 = compute_of(&r, 0); /* folded: device 0 stands for all four */
  psim_sim_result_destroy(&r);
  ck_assert_msg(c2 > 0.3 * base, "compute %g s of %g s", c2, base); /* kernels matter here */
  const double fs[] = {1.5, 3, 8};
  for (int i = 0; i < 3; i++) {
    f.c.devices[2].slowdown = fs[i];
    double t = sim(&f, &s, false, &r);
    psim_sim_result_destroy(&r);
    /* every worker waits in the all-reduce for the slowed one: its compute
     * grows by (f - 1) x its kernels and the rest of the iteration is unchanged */
    double want = base + (fs[i] - 1) * c2;
    ck_assert_msg(fabs(t - want) < 0.01 * want, "f=%g: %g s, closed form %g s", fs[i], t, want);
    f.c.devices[2].slowdown = 1;
    f.c.devices[0].slowdown = fs[i]; /* whichever worker it is */
    double t0 = sim(&f, &s, false, &r);
    psim_sim_result_destroy(&r);
    ck_assert_msg(fabs(t0 - t) < 0.01 * t, "slow device 0: %g s vs device 2: %g s", t0, t);
    f.c.devices[0].slowdown = 1;
  }
  psim_strategy_destroy(&s);
  unload(&f);
}
END_TEST

START_TEST(backup_leaves_straggler_behind) {
  fixture f;
  load(&f);
  const int32_t servers[] = {0, 1};
  psim_strategy sync, backup;
  dp(&f, 4, &sync);
  dp(&f, 4, &backup);
  with_ps(&sync, servers, 2, PSIM_PS_SYNC, 0);
  with_ps(&backup, servers, 2, PSIM_PS_BACKUP, 3);
  psim_sim_result r;
  double sync0 = sim(&f, &sync, true, &r);
  double c3 = compute_of(&r, 3);
  psim_sim_result_destroy(&r);
  double backup0 = sim(&f, &backup, false, &r);
  psim_sim_result_destroy(&r);
  ck_assert(backup0 <= sync0 * (1 + 1e-9));
  f.c.devices[3].slowdown = 4;
  double sync4 = sim(&f, &sync, false, &r);
  psim_sim_result_destroy(&r);
  double backup4 = sim(&f, &backup, false, &r);
  psim_sim_result_destroy(&r);
  /* sync waits for the straggler's push: + 3 x its compute */
  ck_assert_msg(sync4 > sync0 + 0.95 * 3 * c3, "sync: %g s -> %g s (compute %g s)", sync0, sync4,
                c3);
  /* backup_k = n - 1 proceeds with the three others: no slower than the healthy sync run (which
   * waits for all four pushes), and a straggler never makes it faster than the healthy backup
   * run (which also proceeds with the first three); where between depends on the routes the
   * pushes share (sim/ir/route.c) */
  ck_assert_msg(backup4 <= sync0 * 1.02 && backup4 >= backup0 * (1 - 1e-9),
                "backup: %g s, healthy backup %g s, healthy sync %g s", backup4, backup0, sync0);
  psim_strategy_destroy(&sync);
  psim_strategy_destroy(&backup);
  unload(&f);
}
END_TEST

/* Bytes of a transfer task from its duration: latency + bytes / bottleneck bw. */
static double transfer_bytes(psim_cluster *c, int32_t src, int32_t dst, double dur) {
  const int32_t *links;
  int32_t n;
  ck_assert(psim_cluster_route(c, src, dst, &links, &n) == PSIM_OK);
  double bw, lat;
  psim_cluster_route_cost(c, links, n, &bw, &lat);
  return (dur - lat) * bw;
}

/* Four V100 on one switch, equal links: every route costs the same. */
static void star(psim_cluster *c) {
  const char *js =
      "{\"format\": \"plansim.cluster/1\", \"name\": \"star\", \"devices\": ["
      "{\"name\": \"g0\", \"type\": \"v100\"}, {\"name\": \"g1\", \"type\": \"v100\"},"
      "{\"name\": \"g2\", \"type\": \"v100\"}, {\"name\": \"g3\", \"type\": \"v100\"}],"
      "\"switches\": [\"sw\"], \"links\": ["
      "{\"a\": \"g0\", \"b\": \"sw\", \"bandwidth\": \"10 GB/s\", \"latency\": \"1 us\"},"
      "{\"a\": \"g1\", \"b\": \"sw\", \"bandwidth\": \"10 GB/s\", \"latency\": \"1 us\"},"
      "{\"a\": \"g2\", \"b\": \"sw\", \"bandwidth\": \"10 GB/s\", \"latency\": \"1 us\"},"
      "{\"a\": \"g3\", \"b\": \"sw\", \"bandwidth\": \"10 GB/s\", \"latency\": \"1 us\"}]}";
  cJSON *root = cJSON_Parse(js);
  ck_assert(root);
  psim_cluster_destroy(c);
  psim_cluster_init(c);
  ck_assert_msg(psim_cluster_from_json("star", root, c) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(root);
}

START_TEST(shard_traffic_is_twice_shard_times_workers) {
  fixture f;
  load(&f);
  star(&f.c);
  const int32_t servers[] = {2, 3}; /* dedicated: workers 0 and 1 */
  psim_strategy s;
  dp(&f, 2, &s);
  with_ps(&s, servers, 2, PSIM_PS_SYNC, 0);
  psim_sim_result r;
  sim(&f, &s, true, &r);
  /* the model's weights, largest first onto the least loaded server */
  double shard[2] = {0, 0}, total = 0, w[16];
  int32_t nw = 0;
  for (int32_t t = 0; t < f.m.n_tensors; t++)
    if (f.m.tensors[t].kind == PSIM_TENSOR_WEIGHT) {
      double e = 4; /* fp32 */
      for (int32_t j = 0; j < f.m.tensors[t].rank; j++)
        e *= (double)f.m.dims[f.m.tensors[t].dims[j]].size;
      w[nw++] = e;
      total += e;
    }
  for (int32_t i = 0; i < nw; i++) { /* selection of the largest left */
    int32_t big = i;
    for (int32_t j = i + 1; j < nw; j++)
      if (w[j] > w[big])
        big = j;
    double x = w[big];
    w[big] = w[i];
    w[i] = x;
    shard[shard[1] < shard[0] ? 1 : 0] += x;
  }
  double moved[2] = {0, 0};
  const psim_taskgraph *g = r.graph;
  for (int32_t i = 0; i < g->n_tasks; i++) {
    if (g->info[i].kind != PSIM_TASK_TRANSFER || g->info[i].pass != PSIM_TP_COMM_DP)
      continue;
    int32_t sv = g->info[i].shard, src = g->info[i].device;
    ck_assert(sv == 0 || sv == 1);
    int32_t dst = src == servers[sv] ? 0 : servers[sv]; /* pulls: every route costs the same */
    moved[sv] += transfer_bytes(&f.c, src, dst, g->duration_s[i]);
  }
  for (int s2 = 0; s2 < 2; s2++)
    ck_assert_msg(fabs(moved[s2] - 2 * shard[s2] * 2) < 1e-6 * moved[s2],
                  "server %d moved %g bytes, 2 x %g x 2 workers expected", s2, moved[s2],
                  shard[s2]);
  ck_assert(fabs(moved[0] + moved[1] - 2 * total * 2) < 1e-6 * total);
  psim_sim_result_destroy(&r);
  psim_strategy_destroy(&s);
  unload(&f);
}
END_TEST

START_TEST(async_staleness_is_n_minus_one) {
  enum { N = 4 };
  int32_t workers[N] = {0, 1, 2, 3}, servers[1] = {0};
  double shard = 1, cend[N] = {1, 1, 1, 1}, zero[N] = {0}, upd = 0.001, pend[N] = {0};
  psim_ps_stats st = {N, 1, workers, servers, &shard, cend, zero, zero, zero, &upd, pend, 0};
  psim_ps_async_result a;
  int32_t iters = 50;
  ck_assert(psim_ps_async_run(&st, iters, &a) == PSIM_OK);
  /* between a worker's pull and its next push the other n - 1 workers update */
  ck_assert_int_eq(a.staleness_max, N - 1);
  ck_assert(a.staleness_hist[N - 1] >= (int64_t)(iters - 1) * N);
  /* once staggered no push waits: one iteration = compute + one update */
  ck_assert_msg(a.iteration_s > 1 + upd - 1e-9 && a.iteration_s < 1 + N * upd + 1e-9,
                "iteration %g s", a.iteration_s);
  psim_ps_async_result_destroy(&a);
}
END_TEST

START_TEST(shards_balance_by_size) {
  fixture f;
  load(&f);
  double b[3];
  psim_ps_shards(&f.m, 3, b);
  /* four 4 MiB matrices (two on server 0), then the 40 KiB classifier to
   * server 1 (tied with 2: the lower index), then the four 4 KiB biases to
   * server 2, which stays the least loaded */
  const double mat = 1024.0 * 1024 * 4;
  ck_assert(b[0] == 2 * mat);
  ck_assert(b[1] == mat + 1024.0 * 10 * 4);
  ck_assert(b[2] == mat + 4 * 1024.0 * 4);
  unload(&f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ps");
  TCase *tc = tcase_create("closed_forms");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, ring_follows_slowest_worker);
  tcase_add_test(tc, backup_leaves_straggler_behind);
  tcase_add_test(tc, shard_traffic_is_twice_shard_times_workers);
  tcase_add_test(tc, async_staleness_is_n_minus_one);
  tcase_add_test(tc, shards_balance_by_size);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
