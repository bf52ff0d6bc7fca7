/* simulate.h - one training iteration of (model, cluster, strategy): build the
 * task graph, simulate it, and derive the figures a plan reports.
 *
 * Folding (DESIGN.md 4, "Symmetry"): when every op of a pipeline stage is
 * spread evenly over all of the stage's devices, those devices do identical
 * work, so only one representative device per stage is simulated. Its
 * collectives are still costed over the real topology with every concurrent
 * group sharing links, and transfers from its (unsimulated) peers are kept as
 * tasks on its own links. psim_sim_options.fold = false simulates every
 * device; tests check that both agree on small clusters. */
#ifndef PSIM_SIMULATE_H
#define PSIM_SIMULATE_H

#include <stdbool.h>
#include <stdint.h>

#include "cluster.h"
#include "collective.h"
#include "model.h"
#include "strategy.h"
#include "taskgraph.h"
#include "trace.h"

struct psim_costdb;

typedef struct psim_sim_options {
  psim_fidelity fidelity;           /* default PSIM_FIDELITY_AGGREGATE */
  bool fold;                        /* default true */
  const struct psim_costdb *costdb; /* measured costs; NULL = roofline only */
  int64_t max_tasks;                /* refuse larger graphs; default 50,000,000 */
  int64_t max_graph_bytes;          /* refuse graphs estimated larger (bytes, at
                                       PSIM_GRAPH_BYTES_PER_TASK); 0 = no limit (default) */
  bool keep_graph;                  /* keep graph and schedule (traces); default false */
  const uint8_t *ps_dropped;        /* issue 8, internal (ps.c): per (worker, server) push
                                       dropped by backup_k; NULL (default) = none */
} psim_sim_options;

void psim_sim_options_init(psim_sim_options *o);

/* Memory of the simulator per estimated compute task (bytes): task arrays,
 * edges, schedule and builder tables, with the communication and host tasks
 * that come with it. Measured (issue 9, docs/reliability.md): 223 bytes per
 * estimated compute task for an unfolded data-parallel GPT on 4096 devices. */
#define PSIM_GRAPH_BYTES_PER_TASK 256.0

/* Memory of one device, bytes. */
typedef struct psim_mem_breakdown {
  double weights, gradients, optimizer, activations, workspace;
  double peak; /* peak of the simulated timeline (>= sum of the static parts) */
} psim_mem_breakdown;

enum { PSIM_COMM_KIND_COUNT = 4 }; /* tp/resharding, pipeline, data-parallel, other */

typedef struct psim_sim_result {
  double iteration_time_s;
  double samples_per_s;
  double tokens_per_s;        /* 0 when the model has no sequence dim */
  double model_flops;         /* FLOPs of one iteration (forward + backward), no recompute */
  double hardware_flops;      /* including recomputation */
  double model_flops_per_s_per_device;
  double mfu, hfu;            /* against the devices' peak for the model dtype */
  bool fits;
  double peak_memory_bytes;   /* max over devices */
  int32_t peak_device;
  double capacity_bytes;      /* memory of that device */
  psim_mem_breakdown memory;  /* of the peak device */
  double *activation_peak;    /* per device: peak activation bytes (0 when not simulated) */
  int32_t n_devices;
  /* time breakdown of the critical (slowest) stage's representative device */
  double compute_s, bubble_s;
  double exposed_comm_s[PSIM_COMM_KIND_COUNT];
  /* share of compute time by cost source: measured, interpolated, estimated */
  double share_measured, share_interpolated, share_estimated;
  int64_t n_tasks, n_edges;
  double build_s, simulate_s;
  int32_t simulated_devices;  /* devices simulated (after folding) */
  bool folded;
  psim_taskgraph *graph;      /* when keep_graph */
  psim_schedule_result *schedule;
  psim_trace_counter *mem_samples; /* keep_graph: memory in use per device over time */
  size_t n_mem_samples;
  double *static_bytes; /* keep_graph: per device weights, gradients, optimizer bytes (3 per
                           device, that order); added for the plan report (issue 7) */
  struct psim_ps_stats *ps; /* issue 8: parameter-server figures (ps.h); NULL unless sync == ps */
} psim_sim_result;

void psim_sim_result_init(psim_sim_result *r);
void psim_sim_result_destroy(psim_sim_result *r);

/* Simulates one iteration. O(tasks log tasks). */
psim_status psim_simulate(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                          const psim_sim_options *o, psim_sim_result *r);

const char *psim_comm_kind_name(int kind);

/* Adds the result's figures to a JSON object (the keys of simulate --json). */
struct cJSON;
psim_status psim_sim_result_to_json(const psim_sim_result *r, struct cJSON *root);

#endif
