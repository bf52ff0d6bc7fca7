/* build.h - the task-graph builder: (model, cluster, strategy) -> tasks.
 *
 * Private to the simulator (sim/simulate.c, sim/build/memory.c). See build.c for
 * the rules that turn layouts into communication. */
#ifndef PSIM_BUILD_H
#define PSIM_BUILD_H

#include "costdb/cost.h"
#include "sim/engine/simulation.h"

/* A simulated instance of an op: its shard on one device. */
typedef struct psim_op_local {
  int32_t device;
  int32_t shard;
  int32_t replica;
} psim_op_local;

/* A change of a device's activation memory at the end of a task. */
typedef struct psim_mem_event {
  int32_t task;
  int32_t device;
  double bytes; /* + allocate, - free */
} psim_mem_event;

/* Cost of one shard's pass (the same for every micro-batch). */
typedef struct psim_task_cost {
  double duration_s;
  double flops;
  double mem_bytes;   /* change of saved activations at the task's end */
  uint8_t origin;     /* psim_cost_origin */
  uint8_t host_calls; /* kernels and communication calls the host issues */
  uint8_t valid;      /* psim_cost_state */
} psim_task_cost;

typedef enum psim_cost_state {
  PSIM_COST_NONE = 0,     /* not computed */
  PSIM_COST_VALID = 1,    /* every field */
  PSIM_COST_MEM_STALE = 2 /* all but mem_bytes (taken from the last build; a producer changed) */
} psim_cost_state;

/* The static bytes one op's weight shard adds on one device (memory.c). */
typedef struct psim_weight_share {
  int32_t device;
  int32_t tensor;
  double bytes[3]; /* weights, gradients, optimizer state */
} psim_weight_share;

typedef struct psim_build {
  const psim_model *m;
  psim_cluster *c;
  const psim_strategy *s;
  const psim_sim_options *o;
  psim_taskgraph g;
  bool folded;
  uint8_t *simulated; /* per device */
  int32_t n_simulated;
  psim_op_local *locals; /* grouped per op */
  int32_t *loc_first;    /* n_ops + 1 */
  int32_t n_micro;
  int32_t *fwd, *bwd, *rec; /* task per (local, micro): [(loc_first[o] + k) * n_micro + mu] */
  psim_task_cost *costs;    /* per (local, pass): [(loc_first[o] + k) * 3 + pass] */
  int32_t *last_task;       /* per device: last compute task issued (stream order) */
  int32_t *last_bwd;        /* per device: last backward task issued */
  uint8_t *need_sync;       /* per device: the next kernel starts a synchronised slot */
  int32_t *next_compute;    /* per task: the next compute task on its device, or -1 */
  size_t cap_next;
  double compute_by_origin[PSIM_ORIGIN_COUNT]; /* compute seconds by cost source */
  double hardware_flops;                       /* FLOPs of the simulated compute tasks */
  psim_mem_event *mem;                         /* activation memory events */
  size_t n_mem, cap_mem;
  double *static_mem;         /* per device: weights, gradients, optimizer bytes (3 per device) */
  psim_weight_share *wshares; /* what each (op, weight, device) adds to static_mem */
  size_t n_wshares, cap_wshares;
  size_t *wshare_first;      /* n_ops + 1: op o's shares are [wshare_first[o], ...[o + 1]) */
  uint32_t *save_slots;      /* per op: bit i set when the op saves input i for backward */
  void *cache;               /* communication of the current micro-batch (build.c) */
  void *memo;                /* per-edge decisions kept for every micro-batch (build.c) */
  void *where;               /* (op, device) -> entry / simulated shard, wide ops (build.c) */
  struct coll_cache *colls;  /* costed collective templates (build.c) */
  int32_t direct_local;      /* scratch: connect() found a local dependency on this shard */
  bool reduce_local;         /* scratch: ... or a reduction whose result stays local */
  int32_t reduce_leader;     /* scratch: first device of the last reduction's group */
  void *ps;                  /* issue 8: parameter-server tasks (ps.c), NULL unless sync == ps */
  psim_sim_options *ps_opts; /* backup rebuilds (ps.c): the options b->o points to, owned */
  uint8_t *ps_dropped;       /* ... and their ps_dropped, owned */
  /* Incremental builds (psim_build_graph_reusing). A connect segment is what
   * connect_inputs + connect_grads of one (micro-batch mu, op y) added: tasks
   * seg_task[i] .. seg_task[i + 1], edges and cache entries likewise, for
   * i = mu * n_ops + y. Recorded only when `record`. */
  bool record;
  int32_t *seg_task;          /* n_micro * n_ops + 1 */
  size_t *seg_edge, *seg_put; /* n_micro * n_ops + 1 */
  uint8_t *seg_fixed;         /* 1: names a stream successor (pipeline send): never copied */
  struct put_record *puts;    /* communication-cache entries, in insertion order */
  size_t n_puts, cap_puts;
  size_t cur_seg;
  /* only while a reusing build runs */
  struct psim_build *prev;
  uint8_t *seg_dirty;     /* per op: its segments must be rebuilt */
  uint8_t *key_read;      /* per op: a built segment reads cache entries keyed by it */
  const uint8_t *changed; /* per op: its configuration is not prev's (the caller's flags) */
  size_t micro_put0;      /* first put record of the current micro-batch */
  int32_t *old2new;       /* per task of prev: the same task in this graph, or -1 */
  int64_t segments_copied, segments_built;
} psim_build;

psim_status psim_build_graph(psim_build *b, const psim_model *m, psim_cluster *c,
                             const psim_strategy *s, const psim_sim_options *o);
void psim_build_destroy(psim_build *b);
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
 * Either way b records its segments for the next call. spare (may be NULL)
 * is a graph whose buffers b's graph takes over (left empty), so that a
 * search building graph after graph does not allocate (and fault in) them. */
psim_status psim_build_graph_reusing(psim_build *b, const psim_model *m, psim_cluster *c,
                                     const psim_strategy *s, const psim_sim_options *o,
                                     psim_build *prev, const uint8_t *changed,
                                     psim_taskgraph *spare);
/* Whether op o is recomputed in backward under the strategy's recompute mode. */
bool psim_build_recomputed(const psim_build *b, int32_t o);

/* Memory (memory.c): static per-device bytes and which inputs ops save. */
psim_status psim_memory_static(psim_build *b);
/* Bytes an op's shard keeps for its backward, per micro-batch. When
 * `recomputed`, only what the recompute needs (inputs from another layer). */
double psim_memory_saved_bytes(const psim_build *b, int32_t op, const int64_t *shard,
                               bool recomputed);
/* Peak memory per device from the simulated timeline; fills the result's
 * memory fields for the most loaded device. */
psim_status psim_memory_peak(const psim_build *b, const psim_schedule_result *r,
                             psim_sim_result *out);

/* Parameter servers and heterogeneity (issue 8, ps.c; see ps.h). */
/* Pushes, server updates and pulls instead of grad_sync; no worker update. */
psim_status psim_build_ps_sync(psim_build *b, int32_t *sync_done);
/* False when folding would hide differences: parameter servers, or devices of
 * a stage with different types or slowdowns (stragglers). */
bool psim_build_may_fold(const psim_build *b);
void psim_build_ps_free(psim_build *b);
/* End of the iteration under parameter servers: the last pull (backup: a
 * dropped worker's own compute does not count). */
double psim_ps_iteration_end(const psim_build *b, const psim_schedule_result *r);
struct psim_ps_stats;
psim_status psim_ps_collect(const psim_build *b, const psim_schedule_result *r,
                            struct psim_ps_stats **out);
/* backup_k: simulates the sync graph, drops all but each server's k earliest
 * pushes and rebuilds b in full with a copy of b's options whose ps_dropped
 * marks them (b owns both; psim_build_destroy frees them). */
bool psim_ps_needs_rebuild(const psim_strategy *s);
psim_status psim_ps_backup_rebuild(psim_build *b);

#endif
