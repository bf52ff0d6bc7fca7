/* simulate_impl.h - the one simulate pipeline, shared by the full simulation
 * (psim_simulate, simulate.c) and the search's delta simulation (delta.c).
 * Private to sim/.
 *
 * build -> parameter-server backup rebuild -> schedule -> iteration end ->
 * memory peak -> (full figures). The two callers differ only in how the graph
 * is built (from scratch, or reusing the previous build) and in which figures
 * they read; every step that decides the iteration time or the memory peak is
 * this one code path, so delta and full simulation cannot drift apart. */
#ifndef PSIM_SIMULATE_IMPL_H
#define PSIM_SIMULATE_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/builder/build.h"
#include "sim/engine/simulation.h"

/* How the pipeline builds the graph. prev == NULL (or reuse == NULL): in
 * full. Else incrementally from prev (psim_build_graph_reusing), changed[]
 * flagging the ops whose configuration differs; spare (may be NULL) lends its
 * buffers. */
typedef struct psim_sim_reuse {
  psim_build *prev;
  const uint8_t *changed;
  psim_taskgraph *spare;
} psim_sim_reuse;

typedef enum psim_sim_figures {
  PSIM_FIGURES_SEARCH = 0, /* iteration time, fits, memory peak, task counts: what a search reads */
  PSIM_FIGURES_ALL = 1     /* and the time breakdown, parameter-server stats, throughput, graph */
} psim_sim_figures;

/* Runs the pipeline for s into r (initialised here). *b receives the build
 * (the caller frees it with psim_build_free, also on error; may be NULL); sched holds the
 * schedule's buffers (initialised by the caller, reusable between runs; under PSIM_FIGURES_ALL with
 * keep_graph it moves into r). */
psim_status psim_sim_pipeline(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                              const psim_sim_options *o, const psim_sim_reuse *reuse,
                              psim_sim_figures figures, psim_build **b, psim_schedule_result *sched,
                              psim_sim_result *r);

/* The time breakdown of device d (sim/breakdown.c; docs/simulator.md "Time breakdown"): fills
 * r's compute_s, exposed_comm_s, bubble_s and wait_s, which sum to t_end (the iteration time)
 * from the schedule alone. O(V + E + S), S resource slots; allocates, so not on the search's
 * path. */
psim_status psim_sim_breakdown(const psim_taskgraph *g, const psim_schedule_result *sched,
                               int32_t d, int32_t n_devices, double t_end, const psim_strategy *s,
                               psim_sim_result *r);

#endif
