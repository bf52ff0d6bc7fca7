/* simulation.h - what one simulation is asked and what it answers: the options
 * (fidelity, folding, cost database, limits) and the result (iteration time, memory, time
 * breakdown, the graph when kept). The builder (sim/builder) fills parts of the result, the
 * pipeline (sim/simulate.c) the rest, so these types live below both. */
#ifndef PSIM_SIMULATION_H
#define PSIM_SIMULATION_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/engine/collective.h"
#include "sim/engine/taskgraph.h"
#include "sim/engine/trace.h"
#include "sim/ir/cluster.h"
#include "sim/ir/model.h"
#include "sim/strategy/strategy.h"

struct psim_costdb;

typedef struct psim_sim_options {
  psim_fidelity fidelity;           /* default PSIM_FIDELITY_AGGREGATE */
  bool fold;                        /* default true */
  const struct psim_costdb *costdb; /* measured costs; NULL = roofline only */
  int64_t max_tasks;                /* refuse larger graphs; default 50,000,000 */
  int64_t max_graph_bytes;          /* refuse graphs estimated larger (bytes, at
                                       PSIM_GRAPH_BYTES_PER_TASK); 0 = no limit (default) */
  bool keep_graph;                  /* keep graph and schedule (traces); default false */
  bool merge_links;                 /* links held by the same tasks held once (sim/builder/
                                       links_merge.c; the same schedule); default true */
  const uint8_t *ps_dropped;        /* issue 8, internal (ps.c): per (worker, server) push
                                       dropped by backup_k; NULL (default) = none */
  /* issue 21: MoE routed tokens per expert (sim/builder/routing.h); NULL = the default there */
  const struct psim_routing *routing;
  /* issue 18 experiment: the order each resource serves (taskgraph.h, docs/simulator.md "A
   * fixed order per resource"); default PSIM_ENGINE_READY, or what PSIM_ENGINE names */
  psim_engine_order engine;
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
/* What an idle compute stream waits on besides communication and other pipeline stages. */
typedef enum psim_wait_kind {
  PSIM_WAIT_PARAMETER_SERVER = 0, /* pushes, the servers' updates, pulls */
  PSIM_WAIT_HOST,                 /* the host issuing kernels late (host-bound) */
  PSIM_WAIT_STRAGGLER,            /* compute of another device of the same stage */
  PSIM_WAIT_KIND_COUNT
} psim_wait_kind;

typedef struct psim_sim_result {
  double iteration_time_s;
  double samples_per_s;
  double tokens_per_s;   /* 0 when the model has no sequence dim */
  double model_flops;    /* FLOPs of one iteration (forward + backward), no recompute */
  double hardware_flops; /* including recomputation */
  double model_flops_per_s_per_device;
  double mfu, hfu; /* against the devices' peak for the model dtype */
  bool fits;
  double peak_memory_bytes; /* max over devices */
  int32_t peak_device;
  double capacity_bytes;     /* memory of that device */
  psim_mem_breakdown memory; /* of the peak device */
  double *activation_peak;   /* per device: peak activation bytes (0 when not simulated) */
  int32_t n_devices;
  /* Time breakdown of the critical (busiest) device (docs/simulator.md, "Time breakdown"):
   * compute + exposed comm + bubble + waits = iteration_time_s. Idle time is attributed to
   * what the next kernel waited on: a collective or transfer (exposed_comm_s by kind), another
   * pipeline stage's compute (bubble_s; 0 without pipeline parallelism), or wait_s. */
  double compute_s, bubble_s;
  double exposed_comm_s[PSIM_COMM_KIND_COUNT];
  double wait_s[PSIM_WAIT_KIND_COUNT];
  /* share of compute time by cost source: measured, interpolated, estimated */
  double share_measured, share_interpolated, share_estimated;
  int64_t n_tasks, n_edges;
  double build_s, simulate_s;
  int32_t simulated_devices; /* devices simulated (after folding) */
  bool folded;
  psim_taskgraph *graph; /* when keep_graph */
  psim_schedule_result *schedule;
  psim_trace_counter *mem_samples; /* keep_graph: memory in use per device over time */
  size_t n_mem_samples;
  double *static_bytes;     /* keep_graph: per device weights, gradients, optimizer bytes (3 per
                               device, that order); added for the plan report (issue 7) */
  struct psim_ps_stats *ps; /* issue 8: parameter-server figures (ps.h); NULL unless sync == ps */
} psim_sim_result;

void psim_sim_result_init(psim_sim_result *r);
void psim_sim_result_destroy(psim_sim_result *r);

/* Simulates one iteration. O(tasks log tasks). */

#endif
