/* taskgraph.h - the simulator's task graph and its list-scheduling engine.
 *
 * A task occupies one or more resources for its duration: a device's compute
 * stream, a device's communication engine, or a directed link. Edges are
 * finish-to-start dependencies. Data is kept in contiguous arrays (no
 * allocation per task or event once capacities are reserved) with successor
 * lists in CSR form after psim_tg_finalize.
 *
 * Full simulation (DESIGN.md 4): tasks are taken in ready-time order (ties by
 * task id, so results are deterministic); a task starts at
 * max(ready time, every resource's free time) and holds all its resources
 * until it ends. Each resource thus serves its tasks first in, first out. */
#ifndef PSIM_TASKGRAPH_H
#define PSIM_TASKGRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/core/status.h"

typedef enum psim_task_kind {
  PSIM_TASK_COMPUTE = 0, /* kernel on a device's compute stream */
  PSIM_TASK_TRANSFER,    /* point-to-point bytes over links */
  PSIM_TASK_COLLECTIVE,  /* aggregated collective over a device group */
  PSIM_TASK_BARRIER,     /* zero-duration join, no resources */
  PSIM_TASK_HOST         /* the host issuing a kernel (runtime overhead) */
} psim_task_kind;

/* What a task stands for; used for traces, breakdowns and the memory model. */
typedef enum psim_task_pass {
  PSIM_TP_FWD = 0,
  PSIM_TP_BWD,
  PSIM_TP_RECOMPUTE,
  PSIM_TP_UPDATE,  /* optimizer step */
  PSIM_TP_COMM_TP, /* tensor-parallel / resharding communication */
  PSIM_TP_COMM_PP, /* pipeline point-to-point */
  PSIM_TP_COMM_DP, /* gradient synchronisation */
  PSIM_TP_COMM_OTHER,
  PSIM_TP_COUNT
} psim_task_pass;

typedef struct psim_task_info {
  uint8_t kind;   /* psim_task_kind */
  uint8_t pass;   /* psim_task_pass */
  int16_t stage;  /* pipeline stage or -1 */
  int32_t op;     /* model op index or -1 */
  int32_t micro;  /* micro-batch or -1 */
  int32_t device; /* representative device (first resource owner) or -1 */
  int32_t shard;  /* shard index within the op, or -1 */
} psim_task_info;

/* An issue latency: before a task can start, the thread issuing it (a host
 * resource) spends issue_s on it; the thread runs ahead of the device, except
 * that a `sync` task is issued only once the task's first resource (its
 * stream) has drained (PSIM_ISSUE_DRAIN), or once that stream has drained and
 * every predecessor of the task has ended (PSIM_ISSUE_INPUTS: the host reads
 * the task's inputs, transfers included). Equivalent to a chain of host tasks,
 * without them. */
enum { PSIM_ISSUE_DRAIN = 1, PSIM_ISSUE_INPUTS = 2 };
typedef struct psim_task_issue {
  double issue_s;
  int32_t res;  /* issuing resource, -1 = none */
  int32_t sync; /* 0, PSIM_ISSUE_DRAIN or PSIM_ISSUE_INPUTS: what the host waits for first */
} psim_task_issue;

typedef struct psim_taskgraph {
  int32_t n_tasks;
  size_t cap_tasks;
  double *duration_s;   /* per task */
  psim_task_info *info; /* per task */
  int32_t *res_first;   /* per task: first index into res (n_tasks + 1 entries once finalized) */
  int32_t *res;         /* resource ids, grouped per task */
  size_t n_res, cap_res;
  /* edges as added (from, to); CSR after finalize */
  int32_t *edge_from, *edge_to;
  size_t n_edges, cap_edges;
  int32_t *succ_first;    /* n_tasks + 1 */
  int32_t *succ;          /* n_edges */
  int32_t *n_pred;        /* per task */
  int32_t n_resources;    /* resource ids are in [0, n_resources) */
  psim_task_issue *issue; /* per task, NULL until psim_tg_set_issue is called */
  /* Per task, the bytes it moves over links (a transfer: its message; a
   * collective task: the messages of its group's plan; 0 for others and for
   * tasks copied from a graph without it). NULL unless psim_tg_track_bytes
   * turned it on (the simulation does with keep_graph, for tests and traces):
   * the search pays nothing for it. */
  double *bytes;
  /* Per task, its issue position (PSIM_ENGINE_ISSUE): where the program issues it, in the
   * builder's ideal schedule time (sim/builder/schedules.c), or -1 for a task issued after
   * the last of its predecessors (communication, barriers: they inherit). NULL unless
   * psim_tg_track_positions turned it on (the builder does for that order only). */
  int32_t *position;
  /* Resources [0, n_streams) are device streams (compute streams and comm engines, the
   * builder's psim_res_compute / psim_res_comm): PSIM_ENGINE_STREAM serves them in issue
   * order, the others (links, hosts) first come. 0 after init and clear (no streams). */
  int32_t n_streams;
  int finalized;
  /* Built by finalize for the engine: per task (n_tasks + 1 entries) its
   * res_first and succ_first side by side, so one cache line serves both.
   * Private to taskgraph.c / engine.c. */
  int32_t (*index_)[2];
  size_t cap_csr_tasks_, cap_csr_edges_; /* capacities of the CSR buffers (private) */
} psim_taskgraph;

/* The order in which each resource serves its tasks (docs/simulator.md, "A fixed order per
 * resource"). READY is list scheduling in ready-time order: each resource serves first come,
 * first served (the default). The others are static: tasks are taken in an order computed
 * from the graph's structure alone, never from durations, so every start time is a max-plus
 * expression of the durations and no duration made longer can make the makespan shorter. */
typedef enum psim_engine_order {
  PSIM_ENGINE_READY = 0,  /* first come: (ready time, id) */
  PSIM_ENGINE_PROGRAM,    /* program order: Kahn's algorithm, lowest ready id first */
  PSIM_ENGINE_LEVEL,      /* hop level (longest path in edges from a source), then id */
  PSIM_ENGINE_PASS_LEVEL, /* level weighted by pass: a backward kernel 2, other kernels 1,
                             communication and barriers 0; then id */
  PSIM_ENGINE_ISSUE,      /* issue position (g->position; the most of the predecessors' where
                             -1 or above it), then id */
  PSIM_ENGINE_STREAM,     /* stream order: each device stream (resources below n_streams)
                             serves its tasks in issue order's (PSIM_ENGINE_ISSUE) sequence,
                             every other resource first come as READY */
  PSIM_ENGINE_ORDER_COUNT
} psim_engine_order;

/* Parses "ready", "program-order", "level-order", "pass-level-order", "issue-order" or
 * "stream-order"; false otherwise. */
bool psim_engine_order_parse(const char *name, psim_engine_order *out);
const char *psim_engine_order_name(psim_engine_order o);
/* The order named by the environment variable PSIM_ENGINE (the experiment's switch, read by
 * psim_sim_options_init only); READY when unset, empty or not a name (with a warning). */
psim_engine_order psim_engine_order_from_env(void);

typedef struct psim_schedule_result {
  double makespan_s;
  /* Set before psim_tg_simulate: the order of each resource (default READY, by _init). */
  psim_engine_order order;
  double *start_s; /* per task, owned */
  double *end_s;   /* per task, owned */
  int32_t n_tasks;
  /* Set record_issue before psim_tg_simulate to get, for every task the host
   * issues (psim_task_issue), the time it finished issuing it in
   * issue_end_s[task] (s; owned; other entries undefined). For traces: the
   * host's track. Default off: the search does not pay for it. */
  bool record_issue;
  double *issue_end_s;
  /* Set record_taken before psim_tg_simulate to get taken[i], the i-th task the engine took
   * (owned; n_tasks entries). Each resource serves its tasks in the order taken, so restricted
   * to one resource it is that resource's tasks in start order, each positive-duration one
   * ending before the next starts. For the time breakdown (sim/breakdown.c), which otherwise
   * sorted every task by start time. Default off: the search pays one predicted branch per
   * task for it. */
  bool record_taken;
  int32_t *taken;
  int32_t n_taken; /* entries of taken the last psim_tg_simulate wrote: n_tasks, or 0 */
  /* Engine scratch, kept between calls so that repeated simulations (search)
   * allocate nothing once warm. Private to engine.c. */
  size_t cap_tasks_;      /* capacity of start_s, end_s, state_ */
  void *state_;           /* per task: ready time and unfinished predecessors */
  double *res_free_;      /* per resource: time it becomes free, s */
  int32_t cap_resources_; /* capacity of res_free_ */
  void *heap_;            /* ready heap entries */
  size_t cap_heap_;
  int32_t *chain_;   /* stream order: per resource slot, the task next on its stream */
  size_t cap_chain_; /* capacity of chain_ */
  int32_t *last_;    /* stream order: per stream, the slot of its last task so far */
  size_t cap_last_;  /* capacity of last_ */
} psim_schedule_result;

void psim_tg_init(psim_taskgraph *g, int32_t n_resources);
void psim_tg_destroy(psim_taskgraph *g);
/* Empties g for rebuilding, keeping its capacity (and its successor-list
 * buffers: a rebuilt graph allocates nothing until it outgrows them). */
void psim_tg_clear(psim_taskgraph *g, int32_t n_resources);
/* Reserves room for tasks, resource slots and edges (optional, speeds up). */
psim_status psim_tg_reserve(psim_taskgraph *g, size_t tasks, size_t res, size_t edges);
/* Adds a task holding n_res resources (0 for barriers). O(1) amortised. */
psim_status psim_tg_add_task(psim_taskgraph *g, double duration_s, const int32_t *res,
                             int32_t n_res, const psim_task_info *info, int32_t *id);
/* Adds the dependency from -> to (from must finish before to starts). */
psim_status psim_tg_add_edge(psim_taskgraph *g, int32_t from, int32_t to);
/* A device stream's next kernel in one call (the builder adds ~10^4 per
 * search evaluation): psim_tg_add_task with the one resource res, then, when
 * issue != NULL, that issue latency (psim_tg_set_issue), and when after >= 0
 * the edge after -> the new task. *id receives the new task (required). */
psim_status psim_tg_add_kernel(psim_taskgraph *g, double duration_s, int32_t res,
                               const psim_task_info *info, const psim_task_issue *issue,
                               int32_t after, int32_t *id);
/* psim_tg_add_edge without its checks, for builders' inner loops: the caller
 * has reserved room for the edge (psim_tg_reserve) and from and to are tasks
 * of g. */
static inline void psim_tg_add_edge_reserved(psim_taskgraph *g, int32_t from, int32_t to) {
  g->edge_from[g->n_edges] = from;
  g->edge_to[g->n_edges] = to;
  g->n_edges++;
  g->finalized = 0;
}
/* Gives task an issue latency on resource res (see psim_task_issue). */
psim_status psim_tg_set_issue(psim_taskgraph *g, int32_t task, int32_t res, double issue_s,
                              bool sync);
/* Turns g->bytes on (allocated, 0 for the tasks already in g) or off (freed).
 * It stays as set across psim_tg_clear. */
psim_status psim_tg_track_bytes(psim_taskgraph *g, bool on);
/* Turns g->position on (allocated, -1 for the tasks already in g) or off (freed); it stays
 * as set across psim_tg_clear. New tasks get -1 (inherit). */
psim_status psim_tg_track_positions(psim_taskgraph *g, bool on);
/* Sets task's issue position (>= 0); nothing unless g tracks positions. */
static inline void psim_tg_set_position(psim_taskgraph *g, int32_t task, int32_t position) {
  if (g->position)
    g->position[task] = position;
}
/* Records that task moves bytes over links; nothing unless g tracks bytes. */
static inline void psim_tg_set_bytes(psim_taskgraph *g, int32_t task, double bytes) {
  if (g->bytes)
    g->bytes[task] = bytes;
}
/* Appends copies of src's tasks [t0, t1) (duration, resources, info, issue
 * latency, bytes moved) to g, in order: task t becomes g->n_tasks + (t - t0). */
psim_status psim_tg_append_tasks(psim_taskgraph *g, const psim_taskgraph *src, int32_t t0,
                                 int32_t t1);
/* Appends src's edges [e0, e1) (as added) to g, renaming each end u to
 * rename[u]. When some end has no counterpart (rename[u] < 0) nothing is
 * appended and *mapped is false; otherwise *mapped is true, and every renamed
 * end must be a task of g (else PSIM_EINPUT). */
psim_status psim_tg_append_edges(psim_taskgraph *g, const psim_taskgraph *src, size_t e0, size_t e1,
                                 const int32_t *rename, bool *mapped);
/* Drops g's tasks n, n + 1, ... and their resource slots (undoes appends);
 * no edge may name them. */
psim_status psim_tg_truncate(psim_taskgraph *g, int32_t n);
/* Builds successor lists; fails (PSIM_EFAILED) if the graph has a cycle. O(V+E). */
psim_status psim_tg_finalize(psim_taskgraph *g);
/* psim_tg_finalize without the cycle check (for graphs built to equal a
 * checked one); on a cycle psim_tg_simulate fails with tasks left unrun. */
psim_status psim_tg_finalize_unchecked(psim_taskgraph *g);

void psim_schedule_result_init(psim_schedule_result *r);
void psim_schedule_result_destroy(psim_schedule_result *r);
/* Full simulation of a finalized graph. O((V + E) + V log H) time, H the
 * largest number of tasks ready at once; O(V + R) memory in r (reused across
 * calls). Polls the interrupt flag every 2^16 tasks (PSIM_EINTERRUPTED). r may
 * be reused for another graph. */
psim_status psim_tg_simulate(const psim_taskgraph *g, psim_schedule_result *r);

/* Resource id conventions used by the builder. */
static inline int32_t psim_res_compute(int32_t device) {
  return 2 * device;
}
static inline int32_t psim_res_comm(int32_t device) {
  return 2 * device + 1;
}
static inline int32_t psim_res_link(int32_t n_devices, int32_t link) {
  return 2 * n_devices + link;
}
/* The host thread that issues a device's kernels (after all links). */
static inline int32_t psim_res_host(int32_t n_devices, int32_t n_links, int32_t device) {
  return 2 * n_devices + n_links + device;
}

/* Interrupt polling: long loops call psim_interrupted(); SIGINT handlers set it. */
void psim_set_interrupt(int on);
int psim_interrupted(void);

#endif
