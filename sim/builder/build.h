/* build.h - the task-graph builder: (model, cluster, strategy) -> tasks.
 *
 * What the simulate pipeline (sim/simulate.c, sim/delta.c) needs of a build:
 * make one (in full or from the previous one), its graph, a few totals, the
 * memory peak and the parameter servers' figures. The build itself is opaque
 * here (sim/builder/build_impl.h; build.c states the rules that turn layouts
 * into communication). */
#ifndef PSIM_BUILD_H
#define PSIM_BUILD_H

#include <stdbool.h>
#include <stdint.h>

#include "costdb/cost.h"
#include "sim/engine/simulation.h"

typedef struct psim_build psim_build;

/* Builds the task graph of one training iteration into *out (allocated here;
 * also on failure, when it is not NULL: the caller frees it with
 * psim_build_free). */
psim_status psim_build_graph(psim_build **out, const psim_model *m, psim_cluster *c,
                             const psim_strategy *s, const psim_sim_options *o);
/* Builds the graph psim_build_graph builds for s, copying from prev, a build
 * of a strategy that differs from s in the ops flagged in changed[] (one byte
 * per op), what those ops cannot affect: shard costs of ops whose inputs'
 * producers and themselves are unchanged, the connect segments whose ops,
 * producers and producers' consumers are unchanged, and the costed collective
 * templates (taken from prev). The graph is the same, array for array, as
 * psim_build_graph's (test_delta compares them); the caller guarantees that
 * the strategies' global fields (stages, schedule, recompute, ZeRO,
 * buckets, sync) are equal and o is prev's options; changed is required. prev == NULL, or a prev
 * whose simulated devices, folding or micro-batches differ, builds in full.
 * Either way the build records its segments for the next call. spare (may be
 * NULL) is a graph whose buffers the new graph takes over (left empty), so
 * that a search building graph after graph does not allocate (and fault in)
 * them. */
psim_status psim_build_graph_reusing(psim_build **out, const psim_model *m, psim_cluster *c,
                                     const psim_strategy *s, const psim_sim_options *o,
                                     psim_build *prev, const uint8_t *changed,
                                     psim_taskgraph *spare);
void psim_build_free(psim_build *b);

/* Whether the stack's moe_a2a_overlap applies to s (schedules.c: combined 1F1B without
 * pipelining: one stage, no virtual stages, a 1F1B-ordered schedule that keeps backward
 * whole); the CLI warns where it is set and does not. */
bool psim_build_combines_1f1b(const psim_cluster *c, const psim_strategy *s);

/* The build's task graph (the caller may move it out, leaving an empty one). */
psim_taskgraph *psim_build_taskgraph(psim_build *b);

/* What the pipeline reports of a build besides its graph. */
typedef struct psim_build_summary {
  bool folded;           /* one device per stage simulated */
  int32_t n_simulated;   /* devices simulated */
  double hardware_flops; /* FLOPs of the simulated compute tasks */
  double dp_bytes; /* bytes sent by all ranks in gradient and parameter collectives (ring volume) */
  double compute_by_origin[PSIM_ORIGIN_COUNT]; /* compute seconds by cost source */
  bool parameter_servers;                      /* the graph has parameter-server tasks */
  int64_t segments_copied, segments_built;     /* incremental builds: connect segments */
} psim_build_summary;

void psim_build_summarise(const psim_build *b, psim_build_summary *out);

/* Peak memory per device from the simulated timeline; fills the result's
 * memory fields for the most loaded device (memory.c). */
psim_status psim_memory_peak(const psim_build *b, const psim_schedule_result *r,
                             psim_sim_result *out);

/* Parameter servers and heterogeneity (issue 8, ps.c; see ps.h). */
/* End of the iteration under parameter servers: the last pull (backup: a
 * dropped worker's own compute does not count). */
double psim_ps_iteration_end(const psim_build *b, const psim_schedule_result *r);
struct psim_ps_stats;
psim_status psim_ps_collect(const psim_build *b, const psim_schedule_result *r,
                            struct psim_ps_stats **out);
/* backup_k: simulates the sync graph, drops all but each server's k earliest
 * pushes and rebuilds b in full with a copy of b's options whose ps_dropped
 * marks them (b owns both). */
bool psim_ps_needs_rebuild(const psim_strategy *s);
psim_status psim_ps_backup_rebuild(psim_build *b);

#endif
