/* costdb_cli.c - opening a cost database for --costdb. */
#include "cli/costdb_cli.h"

#include <stddef.h>

#include "costdb/costdb.h"
#include "sim/core/alloc.h"

psim_status psim_cli_costdb_open(const char *file, struct psim_costdb **out) {
  *out = NULL;
  psim_costdb *db = psim_malloc(sizeof *db);
  if (!db)
    return psim_error(PSIM_ENOMEM, "%s: out of memory", file);
  psim_costdb_init(db);
  psim_status s = psim_costdb_load(file, db);
  if (s != PSIM_OK) {
    psim_costdb_destroy(db);
    psim_free(db);
    return s;
  }
  *out = db;
  return PSIM_OK;
}

void psim_cli_costdb_close(struct psim_costdb *db) {
  if (!db)
    return;
  psim_costdb_destroy(db);
  psim_free(db);
}
