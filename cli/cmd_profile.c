/* cmd_profile.c - plansim profile (not written yet). */
#include "cli.h"

psim_status psim_cmd_profile(int argc, char **argv) { return psim_cmd_unbuilt(argc, argv); }
