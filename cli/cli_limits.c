/* cli_limits.c - the --max-tasks and --max-memory options of simulate and
 * plan (issue 9): inputs that would take absurd memory or time are refused
 * before the graph is built, with a message naming the limit and the option. */
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "sim/core/units.h"
#include "sim/simulate.h"

void psim_cli_default_limits(psim_sim_options *o) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0)
    o->max_graph_bytes = (int64_t)((double)pages * (double)page * 0.75);
}

bool psim_cli_is_limit_option(const char *opt) {
  return strcmp(opt, "--max-tasks") == 0 || strcmp(opt, "--max-memory") == 0;
}

psim_status psim_cli_limit_option(const char *command, const char *opt, const char *val,
                                  psim_sim_options *o) {
  if (strcmp(opt, "--max-tasks") == 0)
    return psim_cli_parse_int(command, opt, val, 1, INT64_MAX, &o->max_tasks);
  double bytes;
  if (psim_units_parse(val, PSIM_UNIT_BYTES, &bytes) != PSIM_OK || bytes < 1 || bytes > 9e18)
    return psim_cli_usage(command, "--max-memory wants bytes (\"16 GiB\", 2e10), not '%s'", val);
  o->max_graph_bytes = (int64_t)bytes;
  return PSIM_OK;
}
