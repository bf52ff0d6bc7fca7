/* cmd_unbuilt.c - commands registered but not built yet: say so, exit 1. */
#include "cli/cli.h"

psim_status psim_cmd_unbuilt(int argc, char **argv) {
  (void)argc;
  return psim_error(PSIM_EUNIMPLEMENTED,
                    "'%s' is not built yet in this version of plansim (see the open issues)",
                    argv[0]);
}
