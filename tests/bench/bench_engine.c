/* bench_engine.c - speed of the list-scheduling engine on a synthetic
 * pipeline-like task graph (issue 3, "Speed").
 *
 * Graph: S stages x M micro-batches x {forward, backward}; each (stage,
 * micro-batch, pass) is a chain of K tasks: K-1 kernels on the stage's compute
 * stream, every 4th of them also holding the stage's comm engine and two
 * links (a tensor-parallel all-reduce folded into the kernel), and a final
 * point-to-point send holding the comm engine and the link to the next (or
 * previous) stage. Cross-stage edges carry activations forward and gradients
 * backward; 1F1B ordering edges chain the passes of a stage. Defaults give
 * 64 x 512 x 2 x 16 = 1,048,576 tasks.
 *
 * Usage: bench_engine [STAGES MICRO_BATCHES CHAIN [REPEATS]]
 * PSIM_ENGINE=program-order (or level-order, issue-order) times the static orders, stream-order
 * the hybrid (taskgraph.h). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "sim/engine/taskgraph.h"

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now_s(void) {
  return clock_s(CLOCK_MONOTONIC);
}

/* CPU time of this thread: unaffected by other processes taking the core. */
static double cpu_s(void) {
  return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

typedef struct bench_shape {
  int32_t stages, micro, chain;
} bench_shape;

/* First task id of chain (stage, micro, pass). */
static int32_t chain_first(const bench_shape *b, int32_t s, int32_t m, int32_t pass) {
  return ((s * b->micro + m) * 2 + pass) * b->chain;
}

/* Adds one chain: kernels then a send; returns status. */
static psim_status add_chain(psim_taskgraph *g, const bench_shape *b, int32_t s, int32_t pass) {
  int32_t nd = b->stages, peer = pass == 0 ? (s + 1) % nd : (s + nd - 1) % nd;
  int32_t k_res[4] = {psim_res_compute(s), psim_res_comm(s), psim_res_link(nd, 2 * s),
                      psim_res_link(nd, 2 * s + 1)};
  int32_t send_res[2] = {psim_res_comm(s), psim_res_link(nd, 2 * s + (peer > s))};
  psim_task_info info = {PSIM_TASK_COMPUTE, (uint8_t)pass, (int16_t)s, 0, 0, s, 0};
  int32_t first = g->n_tasks;
  for (int32_t k = 0; k < b->chain; k++) {
    int last = k == b->chain - 1;
    double d = last ? 20e-6 : (pass ? 2.0 : 1.0) * (50e-6 + 1e-6 * (k % 7));
    const int32_t *res = last ? send_res : k_res;
    int32_t nres = last ? 2 : (k % 4 == 3 ? 4 : 1);
    PSIM_CHECK(psim_tg_add_task(g, d, res, nres, &info, NULL));
    if (k > 0)
      PSIM_CHECK(psim_tg_add_edge(g, first + k - 1, first + k));
  }
  return PSIM_OK;
}

/* Chains the passes of stage s in 1F1B order: warm-up forwards, then one
 * forward and one backward alternately, then the remaining backwards. */
static psim_status add_1f1b_edges(psim_taskgraph *g, const bench_shape *b, int32_t s) {
  int32_t warm = b->stages - s - 1 < b->micro ? b->stages - s - 1 : b->micro;
  int32_t prev = -1;
  for (int32_t i = 0; i < 2 * b->micro; i++) {
    int32_t m, pass;
    if (i < warm) {
      m = i, pass = 0;
    } else if (i < 2 * b->micro - warm) {
      int32_t j = i - warm; /* steady state: F(warm + j/2), B(j/2) */
      m = j % 2 == 0 ? warm + j / 2 : j / 2, pass = j % 2;
    } else {
      m = i - b->micro, pass = 1;
    }
    int32_t first = chain_first(b, s, m, pass);
    if (prev >= 0)
      PSIM_CHECK(psim_tg_add_edge(g, prev, first));
    prev = first + b->chain - 1;
  }
  return PSIM_OK;
}

static psim_status build(psim_taskgraph *g, const bench_shape *b) {
  size_t n = (size_t)b->stages * (size_t)b->micro * 2 * (size_t)b->chain;
  PSIM_CHECK(psim_tg_reserve(g, n, 3 * n, 2 * n));
  for (int32_t s = 0; s < b->stages; s++)
    for (int32_t m = 0; m < b->micro; m++)
      for (int32_t p = 0; p < 2; p++)
        PSIM_CHECK(add_chain(g, b, s, p));
  for (int32_t s = 0; s < b->stages; s++) {
    for (int32_t m = 0; m < b->micro; m++) {
      int32_t fwd_end = chain_first(b, s, m, 0) + b->chain - 1;
      if (s + 1 < b->stages)
        PSIM_CHECK(psim_tg_add_edge(g, fwd_end, chain_first(b, s + 1, m, 0)));
      else
        PSIM_CHECK(psim_tg_add_edge(g, fwd_end, chain_first(b, s, m, 1)));
      if (s > 0)
        PSIM_CHECK(psim_tg_add_edge(g, chain_first(b, s, m, 1) + b->chain - 1,
                                    chain_first(b, s - 1, m, 1)));
    }
    PSIM_CHECK(add_1f1b_edges(g, b, s));
  }
  return psim_tg_finalize(g);
}

int main(int argc, char **argv) {
  bench_shape b = {64, 512, 16};
  int repeats = 5;
  if (argc >= 4) {
    b.stages = atoi(argv[1]);
    b.micro = atoi(argv[2]);
    b.chain = atoi(argv[3]);
  }
  if (argc >= 5)
    repeats = atoi(argv[4]);
  if (b.stages < 1 || b.micro < 1 || b.chain < 2 || repeats < 1) {
    fprintf(stderr, "usage: bench_engine [STAGES MICRO_BATCHES CHAIN>=2 [REPEATS]]\n");
    return 2;
  }
  psim_taskgraph g;
  psim_tg_init(&g, 2 * b.stages + 2 * b.stages);
  g.n_streams = 2 * b.stages; /* compute and comm of each stage (PSIM_ENGINE_STREAM) */
  double t0 = now_s();
  psim_status st = build(&g, &b);
  double build_s = now_s() - t0;
  if (st != PSIM_OK) {
    fprintf(stderr, "bench_engine: %s\n", psim_error_message());
    return 1;
  }
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  r.order = psim_engine_order_from_env(); /* PSIM_ENGINE=program-order: the static order */
  double best = 1e300, total = 0, best_cpu = 1e300;
  for (int i = 0; i < repeats && st == PSIM_OK; i++) {
    double t1 = now_s(), c1 = cpu_s();
    st = psim_tg_simulate(&g, &r);
    double dt = now_s() - t1, dc = cpu_s() - c1;
    best = dt < best ? dt : best;
    best_cpu = dc < best_cpu ? dc : best_cpu;
    total += dt;
  }
  if (st != PSIM_OK) {
    fprintf(stderr, "bench_engine: %s\n", psim_error_message());
    return 1;
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("graph: %d stages x %d micro-batches x 2 passes x %d tasks\n", b.stages, b.micro, b.chain);
  printf("tasks %d  edges %zu  resource slots %zu  resources %d\n", g.n_tasks, g.n_edges, g.n_res,
         g.n_resources);
  printf("build (add + finalize): %.3f s\n", build_s);
  printf("simulate: best %.4f s, mean %.4f s over %d runs\n", best, total / repeats, repeats);
  printf("tasks/s: %.3g (best), %.3g (mean), %.3g (best, per CPU second)\n", g.n_tasks / best,
         g.n_tasks * repeats / total, g.n_tasks / best_cpu);
  printf("edges/s: %.3g (best)\n", (double)g.n_edges / best);
  printf("simulated makespan: %.6f s\n", r.makespan_s);
  printf("peak RSS: %.1f MiB\n", ru.ru_maxrss / 1024.0);
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
  return 0;
}
