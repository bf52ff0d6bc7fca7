/* costdb_cli.c - opening a cost database for --costdb. */
#include "costdb_cli.h"

#include <stddef.h>

psim_status psim_cli_costdb_open(const char *file, struct psim_costdb **out) {
  *out = NULL;
  return psim_error(PSIM_EUNIMPLEMENTED, "%s: --costdb is not wired up yet", file);
}

void psim_cli_costdb_close(struct psim_costdb *db) { (void)db; }
