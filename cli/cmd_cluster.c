/* cmd_cluster.c - plansim cluster (not written yet). */
#include "cli.h"

psim_status psim_cmd_cluster(int argc, char **argv) { return psim_cmd_unbuilt(argc, argv); }
