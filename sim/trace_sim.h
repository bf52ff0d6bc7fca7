/* trace_sim.h - a Chrome/Perfetto trace of a simulated iteration. */
#ifndef PSIM_TRACE_SIM_H
#define PSIM_TRACE_SIM_H

#include "sim/simulate.h"

/* Writes the trace of r (which must have been simulated with keep_graph)
 * atomically to path: a track per device stream and per link, a memory
 * counter per device, task names that say op, shard, micro-batch and pass. */
psim_status psim_trace_write_sim(const char *path, const psim_model *m, const psim_cluster *c,
                                 const psim_sim_result *r);

#endif
