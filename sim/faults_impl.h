/* faults_impl.h - private to the faults module (faults.c, faults_options.c,
 * faults_strategy.c, faults_report.c): the helpers the timeline shares with
 * the option checks and the strategy edits. */
#ifndef PSIM_FAULTS_IMPL_H
#define PSIM_FAULTS_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/faults.h"

/* The command-line option that names events of kind k ("--fail", ...). */
const char *psim_faults_option_name(psim_fault_kind k);
/* A device (device_only) or any vertex of c, by name or index; PSIM_EINPUT
 * naming opt and how c names its devices otherwise. */
psim_status psim_faults_find_vertex(const psim_cluster *c, const char *opt, const char *name,
                                    bool device_only, int32_t *out);

/* Index in op->dims of the model's batch dim, -1 when op does not have it. */
int32_t psim_faults_batch_index(const psim_model *m, const psim_op *op);
/* Coordinate of shard `shard` along op dim i (row-major over op->dims). */
int32_t psim_faults_shard_coord(const psim_op *op, const psim_op_config *cfg, int32_t shard,
                                int32_t i);

#endif
