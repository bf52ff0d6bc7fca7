/* cmd_expand.c - plansim expand (not written yet). */
#include "cli.h"

psim_status psim_cmd_expand(int argc, char **argv) { return psim_cmd_unbuilt(argc, argv); }
