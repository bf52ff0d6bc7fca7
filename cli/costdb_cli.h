/* costdb_cli.h - opening a cost database for --costdb. */
#ifndef PSIM_COSTDB_CLI_H
#define PSIM_COSTDB_CLI_H

#include <stdbool.h>
#include <stddef.h>

#include "sim/core/status.h"
#include "sim/ir/cluster.h"

struct psim_costdb;

psim_status psim_cli_costdb_open(const char *file, struct psim_costdb **out);
void psim_cli_costdb_close(struct psim_costdb *db);
/* True, with why, when db's fingerprint names a device of another kind than
 * cluster c's device types (a CPU database on GPUs or the reverse). */
bool psim_cli_costdb_mismatch(const struct psim_costdb *db, const psim_cluster *c, char *why,
                              size_t n);

#endif
