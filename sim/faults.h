/* faults.h - stragglers, faults, elastic joins and several iterations (issue 8,
 * docs/faults.md).
 *
 * Design: one task graph per configuration. Every configuration the job goes
 * through (healthy; after a failure without the lost worker, server or link;
 * after a join) is simulated once with psim_simulate (asynchronous parameter
 * servers: psim_ps_async_run over the iterations), and the timeline of N
 * iterations is composed from those iteration times plus the recovery model
 * below. With random slowdowns every iteration draws fresh factors and is
 * simulated on its own.
 *
 * Recovery (all durations configurable, defaults in psim_fault_options_init):
 *  - all-reduce, worker lost, elastic (default): the ring notices after
 *    detect_timeout_s, re-ranks and rebuilds its communicators (rebuild_s),
 *    and re-synchronises: a broadcast of the weights and optimizer state of a
 *    worker over the remaining data-parallel group (Horovod elastic's
 *    state.sync()). The iteration in progress is lost and redone; later
 *    iterations run without the lost worker's data-parallel slice (its
 *    tensor/pipeline peers leave with it), the global batch unchanged.
 *  - parameter server, server lost: with replicas > 1 the secondary takes
 *    over after detect_timeout_s + failover_s and the shards are re-spread over
 *    the remaining servers; the iteration in progress is redone. Without
 *    replicas the shard's state is gone: checkpoint restart.
 *  - parameter server, worker lost: sync waits detect_timeout_s for the push
 *    that never comes, then continues with n - 1 workers; backup_k with
 *    k <= n - 1 and async do not wait at all.
 *  - no redundancy (a non-elastic job, or a failure the strategy cannot drop):
 *    restart from the last checkpoint: everything since it is lost; recovery
 *    = detect_timeout_s + restart_s + checkpoint bytes / checkpoint_read_bw;
 *    a replacement device is assumed, so the iteration time is unchanged.
 *    A checkpoint (weights + optimizer state of the whole model, memory.c's
 *    bytes per parameter) is written every checkpoint_every iterations at
 *    checkpoint_write_bw and costs that time.
 *  - link lost: after detect_timeout_s + rebuild_s traffic takes the other
 *    routes (the cluster without that link); a link whose loss cuts a device
 *    off counts as that device's failure.
 *  - join at time t: at the first iteration boundary after t the device pulls
 *    the weights (and, for a ring, the optimizer state) and joins: cost =
 *    rebuild_s (ring only) + the transfer over its route.
 * Events are named by device (or vertex) name or index; times in seconds from
 * the start of the run. An event the run does not reach before its last
 * iteration ends is reported (recovery "after_run") and has no effect. */
#ifndef PSIM_FAULTS_H
#define PSIM_FAULTS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sim/simulate.h"

#define PSIM_FAULTS_MAX  64 /* events and slowdown entries each */
#define PSIM_FAULTS_NAME 128

typedef enum psim_fault_kind {
  PSIM_FAULT_FAIL = 0,
  PSIM_FAULT_FAIL_LINK,
  PSIM_FAULT_JOIN
} psim_fault_kind;

typedef struct psim_fault_event {
  psim_fault_kind kind;
  char a[PSIM_FAULTS_NAME], b[PSIM_FAULTS_NAME]; /* device (a) or link ends (a, b) */
  double time_s;
} psim_fault_event;

typedef struct psim_slow_spec {
  char a[PSIM_FAULTS_NAME], b[PSIM_FAULTS_NAME]; /* device, or link ends */
  double factor;
} psim_slow_spec;

typedef struct psim_fault_options {
  int32_t iterations;                   /* iterations to complete; default 1 */
  psim_slow_spec slow[PSIM_FAULTS_MAX]; /* --slow DEVICE=FACTOR */
  int32_t n_slow;
  psim_slow_spec slow_link[PSIM_FAULTS_MAX]; /* --slow-link A-B=FACTOR (both directions) */
  int32_t n_slow_link;
  uint64_t random_seed; /* --slow-random SEED:SIGMA */
  double random_sigma;  /* each iteration, device d computes exp(sigma |z|) times
                           slower, z ~ N(0, 1) from (seed, iteration, d); 0 = off (default) */
  psim_fault_event events[PSIM_FAULTS_MAX];
  int32_t n_events;
  double detect_timeout_s;    /* a lost peer is noticed after this; default 30 s */
  double rebuild_s;           /* re-rank and rebuild communicators; default 5 s */
  double failover_s;          /* a server replica takes over; default 1 s */
  double restart_s;           /* relaunch the job after a checkpoint restart; default 120 s */
  int32_t checkpoint_every;   /* iterations between checkpoints; default 100; 0 = none */
  double checkpoint_write_bw; /* bytes/s, aggregate; default 2 GB/s */
  double checkpoint_read_bw;  /* bytes/s, aggregate; default 4 GB/s */
  bool elastic;               /* all-reduce jobs rebuild without a lost worker; default true */
} psim_fault_options;

void psim_fault_options_init(psim_fault_options *o);
/* Parses one command-line option. Returns 0 when arg is not a fault option,
 * 1 when it took arg alone, 2 when it also took val; -1 on an error (message
 * set; *st holds the status). */
int psim_fault_option(psim_fault_options *o, const char *arg, const char *val, psim_status *st);
/* True when a multi-iteration run is needed (iterations > 1, events, random). */
bool psim_fault_options_timeline(const psim_fault_options *o);
/* Checks every device and link the options name (--slow, --slow-link, --fail,
 * --fail-link, --join) against c, whatever the event times: PSIM_EINPUT with
 * the option, the name and how c names its devices otherwise. A link needs
 * both ends and a link between them. psim_faults_run calls it too; callers
 * call it first to refuse bad names before simulating anything.
 * O(names x log V + link names x links). */
psim_status psim_fault_options_check(const psim_fault_options *o, const psim_cluster *c);
/* Applies --slow and --slow-link to c (before its routes are first used). */
psim_status psim_faults_apply_slowdowns(const psim_fault_options *o, psim_cluster *c);

typedef struct psim_fault_record {
  psim_fault_kind kind;
  char what[2 * PSIM_FAULTS_NAME + 2]; /* device or "a-b" */
  double time_s;
  const char *recovery; /* ring_rebuild, ps_failover, ps_drop_worker, backup_absorbs,
                           async_absorbs, checkpoint_restart, link_reroute, join_ring, join_ps,
                           after_run */
  bool after_run;       /* the run completed its iterations before the event: no effect */
  double lost_s;        /* work discarded, s */
  double recovery_s;    /* no progress while recovering (detection included), s */
  double resync_s;      /* part of recovery_s: re-synchronisation / state transfer, s */
  double iteration_before_s, iteration_after_s;
  int32_t workers_after;
} psim_fault_record;

typedef struct psim_fault_report {
  int32_t n_iterations;
  double *iteration_s; /* wall time of each completed iteration (stalls included), in order */
  int32_t n_times;     /* entries (redone iterations appear again) */
  double total_s, mean_s, std_s, min_s, p50_s, p90_s, p99_s, max_s;
  double samples_per_s; /* iterations x batch / total */
  int32_t checkpoints;
  double checkpoint_write_s; /* one checkpoint */
  double checkpoint_bytes;
  psim_fault_record rec[PSIM_FAULTS_MAX];
  int32_t n_rec;
  bool async; /* parameter servers in async mode: */
  double async_samples_per_s;
  double staleness_mean, staleness_mean_iter;
  int32_t staleness_max;
  int64_t *staleness_hist; /* [k] pushes k updates stale */
  int32_t n_hist;
} psim_fault_report;

void psim_fault_report_init(psim_fault_report *r);
void psim_fault_report_destroy(psim_fault_report *r);

/* Runs the timeline. c gets the per-iteration random slowdowns while it runs
 * (restored after). O(configurations x simulation), or O(iterations x
 * simulation) with random slowdowns. */
psim_status psim_faults_run(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                            const psim_sim_options *so, const psim_fault_options *fo,
                            psim_fault_report *out);

struct cJSON;
/* Adds "iterations" (and "async", "events") to a simulate --json object. */
psim_status psim_fault_report_to_json(const psim_fault_report *r, struct cJSON *root);
void psim_fault_report_print(const psim_fault_report *r, FILE *f);

/* The strategy without device dev's data-parallel slice (dev and the devices
 * sharing its batch index in every op that holds it), and without dev as a
 * server. PSIM_EINPUT when an op holding dev is not split on the batch dim. */
psim_status psim_faults_drop_device(const psim_model *m, const psim_cluster *c,
                                    const psim_strategy *s, int32_t dev, psim_strategy *out);
/* The strategy with dev as one more data-parallel worker (every op split on
 * the batch dim only). PSIM_EINPUT otherwise. */
psim_status psim_faults_add_device(const psim_model *m, const psim_cluster *c,
                                   const psim_strategy *s, int32_t dev, psim_strategy *out);

#endif
