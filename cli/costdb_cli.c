/* costdb_cli.c - opening a cost database for --costdb. */
#include "cli/costdb_cli.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

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

/* Issue 18, defect 9: a database measured on a CPU applied to a GPU cluster
 * (or the reverse) gave mlp 10.2 -> 16.7 ms without a word. Device types
 * named "cpu" are CPUs (sim/ir/device_types.c, as sim/ir/cluster_hier.c
 * reads them); any other is an accelerator, measured by --device cuda. */
bool psim_cli_costdb_mismatch(const struct psim_costdb *db, const psim_cluster *c, char *why,
                              size_t n) {
  if (!db || !db->fp.device[0])
    return false;
  bool db_cpu = strcmp(db->fp.device, "cpu") == 0;
  for (int32_t t = 0; t < c->n_types; t++) {
    const char *name = c->types[t].name;
    if ((strcmp(name, "cpu") == 0) == db_cpu)
      continue;
    snprintf(why, n,
             "the cost database was measured on %s (%s), but cluster %s has %s devices: its "
             "measured times are used as they are; profile on that device instead",
             db->fp.device, db->fp.name, c->name ? c->name : "", name);
    return true;
  }
  return false;
}
