/* ps.h - parameter-server gradient synchronisation (issue 8, docs/faults.md).
 *
 * Parameters are sharded across the strategy's servers by size: the model's
 * weight tensors, largest first, each to the least loaded server (ties: the
 * lower server index), so shard s holds a share f_s of the parameter bytes.
 * Per iteration every worker w (a device that computes) pushes f_s of its
 * weight-gradient bytes to server s and pulls f_s of its weight bytes back,
 * both as point-to-point transfers over the real topology; in between the
 * server updates its shard (costed as an optimizer step of the shard's
 * parameters on the server's compute stream). Push + pull bytes of shard s
 * per iteration = 2 x shard bytes x workers (pure data parallelism).
 *
 * Modes (psim_ps_mode):
 *  - sync: each server updates after every worker's push;
 *  - backup (backup_k = k): each server updates after the k earliest pushes;
 *    the others are dropped. The engine has no "k of n" join, so
 *    psim_simulate builds and simulates the sync graph, reads each server's
 *    push arrival times, marks all but the k earliest as dropped
 *    (psim_sim_options.ps_dropped), and rebuilds: the dropped pushes still
 *    use the links, but no update waits for them. The iteration ends when the
 *    last pull ends: a worker whose push was dropped abandons its work and
 *    starts the next iteration with the pulled weights (Chen et al. 2016,
 *    "Revisiting distributed synchronous SGD", backup workers);
 *  - async: each push is applied at once (one update of the shard per push,
 *    serialised on the server) and answered by a pull to that worker alone.
 *    psim_ps_async_run runs the iterations (throughput, staleness).
 * Replicas (ps.replicas = r > 1): after each update the primary copies its
 * shard to the r - 1 following servers (chain order) before answering pulls.
 *
 * Parameter-server strategies are never folded: every worker is simulated. */
#ifndef PSIM_PS_H
#define PSIM_PS_H

#include <stdint.h>

#include "sim/core/status.h"
#include "sim/ir/model.h"
#include "sim/strategy/strategy.h"

/* What one simulated parameter-server iteration looked like. */
typedef struct psim_ps_stats {
  int32_t n_workers, n_servers;
  int32_t *workers;      /* device per worker index */
  int32_t *servers;      /* device per server index */
  double *shard_bytes;   /* per server: parameter bytes of its shard (model dtype) */
  double *compute_end_s; /* per worker: its gradients are ready (pushes may start) */
  double *push_s;        /* per (w, s) [w * n_servers + s]: from gradients ready to the push's
                            arrival, s (as simulated: queueing on shared links included) */
  double *pull_s;        /* per (w, s): from the update (and replication) to the pull's end, s */
  double *push_bytes;    /* per (w, s): bytes pushed (= bytes pulled) */
  double *update_s;      /* per server: one update of its shard, s */
  double *push_end_s;    /* per (w, s): when the push arrived */
  double replicate_s;    /* longest copy of a shard to a replica (0 without replicas), s */
} psim_ps_stats;

void psim_ps_stats_destroy(psim_ps_stats *st);

/* Shard bytes per server (n_servers entries, caller-allocated) by the rule
 * above. O(weights log weights + weights x servers). */
void psim_ps_shards(const psim_model *m, int32_t n_servers, double *bytes);

/* Asynchronous parameter servers over several iterations: an event-driven
 * run from the per-worker figures of one simulated iteration (compute time,
 * push, update and pull times). Each worker computes, pushes
 * to every server, each server applies pushes first come first served (one
 * shard update each), and the worker starts its next iteration when all its
 * pulls have ended. Staleness of a push = updates the shard received between
 * the worker's pull of the weights it used and the push's own update, in
 * iterations (updates / workers, rounded down) as well as in updates.
 * Runs until every worker finished `iterations` iterations' worth of pushes
 * in total (iterations x workers pushes per server). */
typedef struct psim_ps_async_result {
  double total_s;          /* wall time of the run */
  double iteration_s;      /* total_s / iterations: time per n_workers pushes */
  double *iteration_end_s; /* per iteration i: when server 0 applied its (i+1) x n-th push */
  int32_t n_iterations;
  int64_t *staleness_hist; /* [k]: pushes whose staleness was k updates */
  int32_t n_hist;
  double staleness_mean;      /* updates */
  double staleness_mean_iter; /* iterations */
  int32_t staleness_max;      /* updates */
} psim_ps_async_result;

psim_status psim_ps_async_run(const psim_ps_stats *st, int32_t iterations,
                              psim_ps_async_result *out);
void psim_ps_async_result_destroy(psim_ps_async_result *r);

#endif
