/* costdb_cli.h - opening a cost database for --costdb. */
#ifndef PSIM_COSTDB_CLI_H
#define PSIM_COSTDB_CLI_H

#include "sim/core/status.h"

struct psim_costdb;

psim_status psim_cli_costdb_open(const char *file, struct psim_costdb **out);
void psim_cli_costdb_close(struct psim_costdb *db);

#endif
