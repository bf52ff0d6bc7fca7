/* delta.h - search-time simulation: the cost of a strategy that differs from
 * the previous one in one op's configuration, bit-identical to psim_simulate.
 *
 * A psim_delta context keeps, between evaluations, what a change of one op
 * leaves valid (see delta.c for what is reused and the argument why the
 * result equals a full simulation):
 *  - the strategies already costed (a 128-bit fingerprint of every op's
 *    configuration and the strategy's global fields -> iteration time, fits),
 *    so a proposal that returns to a known strategy costs a lookup;
 *  - the last task graph and the configuration of every op it was built
 *    for: the next graph copies from it what the changed ops cannot affect
 *    (shard costs, communication of untouched ops; sim/builder/build.h);
 *  - the schedule's buffers and those of the graph before last;
 *  - only what the search needs is derived (iteration time and the memory
 *    peak; no time breakdown, no throughput figures).
 * The figures are those of psim_simulate with the same options: the same
 * graph (built incrementally) is scheduled by the same engine.
 *
 * Debug: verify_every = N re-runs psim_simulate every N evaluations and fails
 * (PSIM_EFAILED, naming the op and both times) on any difference. */
#ifndef PSIM_DELTA_H
#define PSIM_DELTA_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/simulate.h"
#include "sim/strategy/strategy.h"

typedef struct psim_delta_options {
  const psim_sim_options *sim; /* default NULL = defaults */
  int64_t verify_every; /* compare with psim_simulate every N evaluations; 0 = never (default) */
  int64_t memo_entries; /* strategies remembered; default 65,536 (0 = no memo) */
} psim_delta_options;

void psim_delta_options_init(psim_delta_options *o);

typedef struct psim_delta_stats {
  int64_t evaluations;     /* calls to psim_delta_eval */
  int64_t simulated;       /* evaluations that built and simulated a graph */
  int64_t memo_hits;       /* evaluations answered from the memo */
  int64_t verified;        /* full simulations run to check (verify_every) */
  double eval_s;           /* seconds spent in psim_delta_eval, verify_s included */
  double engine_s;         /* of which scheduling the graphs (psim_tg_simulate) */
  double verify_s;         /* of which the verifying full simulations */
  int64_t segments_copied; /* connect segments copied from the last graph */
  int64_t segments_built;  /* connect segments built */
  int64_t tasks_simulated; /* tasks of the graphs scheduled, summed */
} psim_delta_stats;

typedef struct psim_delta psim_delta;

/* Creates a context for (model, cluster); *out owned by the caller. */
psim_status psim_delta_create(const psim_model *m, psim_cluster *c, const psim_delta_options *o,
                              psim_delta **out);
void psim_delta_free(psim_delta *d);

/* Iteration time (s) and whether strategy s fits in memory. changed_op is the
 * op whose configuration differs from the previous evaluation (-1: unknown
 * or several); it is used for messages only, correctness never depends on it.
 * O(tasks log tasks) when simulated, O(ops) on a memo hit. */
psim_status psim_delta_eval(psim_delta *d, const psim_strategy *s, int32_t changed_op,
                            double *time_s, bool *fits);

const psim_delta_stats *psim_delta_get_stats(const psim_delta *d);

/* The 128-bit fingerprint of a strategy (every field that changes the
 * simulation), as two 64-bit words. O(ops * devices). */
void psim_delta_fingerprint(const psim_strategy *s, uint64_t out[2]);

#endif
