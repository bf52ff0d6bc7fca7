/* cmd_plan.c - plansim plan (not written yet). */
#include "cli.h"

psim_status psim_cmd_plan(int argc, char **argv) { return psim_cmd_unbuilt(argc, argv); }
