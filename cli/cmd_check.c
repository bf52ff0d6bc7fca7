/* cmd_check.c - plansim check (not written yet). */
#include "cli.h"

psim_status psim_cmd_check(int argc, char **argv) { return psim_cmd_unbuilt(argc, argv); }
