/* cmd_model.c - plansim model (not written yet). */
#include "cli.h"

psim_status psim_cmd_model(int argc, char **argv) { return psim_cmd_unbuilt(argc, argv); }
