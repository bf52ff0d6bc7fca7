/* bench_alpa.c - speed of `plan --search alpa` (issue 6, "Speed"):
 *   GPT-3 175B (96 layers, h 12288, 96 heads, batch 1536, seq 2048) on 128
 *   DGX A100 nodes (topologies/dgx-a100-x128.json): target under 60 s wall;
 *   a 39B GPT (48 layers, h 8192, 64 heads, batch 1024, seq 2048; Alpa's
 *   OSDI'22 GPT-39B) on 64 V100s in 8 nodes with 25 Gb/s between them
 *   (topologies/v100-x8-25g.json), fp16 (V100 has no bf16; Alpa trained in fp16):
 *   target under 10 s wall.
 * Prints wall and CPU time, the plan's simulated iteration time, ILP count,
 * ILP time, DP time and memoisation hit rate; exit status 1 when a target
 * is missed.
 *
 * Usage: bench_alpa [175b|39b|all] [THREADS]   (default all, 2 threads: the ILPs of a
 * stage size are solved on THREADS threads, as `plan --threads` does) */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/generators.h"
#include "search/alpa/alpa.h"

#ifndef PSIM_SOURCE_ROOT
#define PSIM_SOURCE_ROOT "."
#endif

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double stat_of(const psim_search_result *r, const char *key) {
  return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r->stats, key));
}

static int threads = 2;

static int run(const char *label, int64_t layers, int64_t hidden, int64_t heads, int64_t batch,
               const char *dtype, const char *topology, double target_s) {
  psim_gen_tf_opts g;
  psim_gen_gpt_opts_init(&g);
  g.layers = layers;
  g.hidden = hidden;
  g.heads = heads;
  g.batch = batch;
  g.seq = 2048;
  g.dtype = dtype;
  cJSON *j = NULL;
  psim_model m;
  psim_cluster c;
  psim_model_init(&m);
  psim_cluster_init(&c);
  char path[512];
  snprintf(path, sizeof path, "%s/topologies/%s", PSIM_SOURCE_ROOT, topology);
  if (psim_gen_gpt(&g, &j) != PSIM_OK || psim_model_from_json(label, j, &m) != PSIM_OK ||
      psim_cluster_load(path, &c) != PSIM_OK) {
    fprintf(stderr, "bench_alpa: %s\n", psim_error_message());
    return 1;
  }
  cJSON_Delete(j);
  psim_search_options o;
  psim_search_options_init(&o);
  o.threads = threads;
  psim_search_result r;
  psim_search_result_init(&r);
  double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
  psim_status st = psim_search_alpa(&m, &c, &o, &r);
  double wall = clock_s(CLOCK_MONOTONIC) - w0, cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
  int bad = st != PSIM_OK || wall > target_s;
  if (st != PSIM_OK)
    fprintf(stderr, "bench_alpa: %s: %s\n", label, psim_error_message());
  else
    printf(
        "%-5s on %-20s %d thread%s: wall %6.2f s (target %.0f s), cpu %6.2f s: %.3f s/iteration, "
        "%.0f ILPs in %.2f s, DP %.2f s, memo hit rate %.1f%%, %s\n  %s\n",
        label, topology, threads, threads == 1 ? "" : "s", wall, target_s, cpu,
        r.best_sim.iteration_time_s, stat_of(&r, "ilp_count"), stat_of(&r, "ilp_time_s"),
        stat_of(&r, "dp_time_s"), 100 * stat_of(&r, "memo_hit_rate"), bad ? "MISSED" : "ok",
        r.description);
  psim_search_result_destroy(&r);
  psim_model_destroy(&m);
  psim_cluster_destroy(&c);
  return bad;
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "all";
  if (argc > 2)
    threads = atoi(argv[2]) > 0 ? atoi(argv[2]) : 1;
  int bad = 0;
  if (strcmp(which, "39b") == 0 || strcmp(which, "all") == 0)
    bad |= run("39b", 48, 8192, 64, 1024, "fp16", "v100-x8-25g.json", 10);
  if (strcmp(which, "175b") == 0 || strcmp(which, "all") == 0)
    bad |= run("175b", 96, 12288, 96, 1536, "bf16", "dgx-a100-x128.json", 60);
  return bad;
}
