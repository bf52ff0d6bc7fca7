/* e2e_run.h - the end-to-end check of the CPU cost model (issue 4, docs/accuracy.md):
 * profile the shard shapes of a model on a one-device cpu cluster, simulate a
 * single-device iteration with that cost database, then run the same kernels
 * (the CPU profiler's, psim_profile_cpu_kernel_*) in the simulator's order for
 * real and time the sequence. Used by tests/calibration/e2e_cpu.c (figures) and
 * tests/unit/test_e2e_cpu.c (assertions). */
#ifndef PSIM_E2E_RUN_H
#define PSIM_E2E_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sim/core/status.h"
#include "sim/ir/cluster.h"
#include "sim/ir/model.h"

typedef struct psim_e2e_opts {
  double budget_s; /* profiler budget per shape, s (default 0.1) */
  int32_t runs;    /* timed real runs of the sequence (default 7; one untimed warm-up first) */
  FILE *detail;    /* when set, one line per kernel: simulated vs median time in the
                      sequence (default NULL) */
} psim_e2e_opts;

void psim_e2e_opts_init(psim_e2e_opts *o);

typedef struct psim_e2e_result {
  /* simulated, s: forward+backward = the compute tasks of the chain on the one
   * device (iteration time minus the optimizer update); update = the
   * simulator's optimizer task (psim_cost_optimizer) */
  double sim_iter_s, sim_fb_s, sim_update_s;
  double sim_fb_min_s; /* sum of the cost database's per-kernel minima, same tasks */
  double share_measured;
  /* real, s: median and minimum over the runs of the whole kernel sequence */
  double real_fb_s, real_fb_min_s;
  /* real Adam update (profiler kernel, fp32, one per weight tensor), median */
  double real_update_s;
  int32_t n_kernels;      /* kernels in the forward+backward sequence */
  int32_t n_views;        /* zero-time view tasks (reshape, split): nothing to run */
  int32_t n_weights;      /* weight tensors (Adam kernels) */
  double err_fb;          /* sim_fb_s / real_fb_s - 1 */
  double err_fb_min;      /* sim_fb_min_s / real_fb_min_s - 1 */
  double err_with_update; /* (sim_fb_s + sim_update_s) / (real_fb_s + real_update_s) - 1 */
} psim_e2e_result;

/* Runs the whole check for m on c (one device). O(profile + runs * sequence). */
psim_status psim_e2e_run(const psim_model *m, psim_cluster *c, const psim_e2e_opts *o,
                         psim_e2e_result *r);

/* The models of the check: models/mlp.json (loaded from root) and a one-layer
 * GPT in fp32 (hidden 512, 8 heads, seq 128, vocab 2048, batch 8). */
psim_status psim_e2e_load_mlp(const char *root, psim_model *m);
psim_status psim_e2e_gpt_layer(psim_model *m);
/* A cluster of one built-in cpu device (one core of this machine). */
psim_status psim_e2e_cpu_cluster(psim_cluster *c);

#endif
