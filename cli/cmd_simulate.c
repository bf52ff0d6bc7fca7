/* cmd_simulate.c - plansim simulate (not written yet). */
#include "cli.h"

psim_status psim_cmd_simulate(int argc, char **argv) { return psim_cmd_unbuilt(argc, argv); }
