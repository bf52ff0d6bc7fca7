/* cli_load.h - loading the (model, cluster, strategy[, cost database]) that
 * several commands take, with one clean-up. */
#ifndef PSIM_CLI_LOAD_H
#define PSIM_CLI_LOAD_H

#include "sim/ir/cluster.h"
#include "sim/ir/model.h"
#include "sim/strategy/strategy.h"

struct psim_costdb;

typedef struct psim_cli_inputs {
  psim_model model;
  psim_cluster cluster;
  psim_strategy strategy;
  struct psim_costdb *costdb; /* NULL when no --costdb */
} psim_cli_inputs;

/* Loads the files; strategy_file and costdb_file may be NULL. The inputs are
 * always destroyable afterwards, whatever the status. */
psim_status psim_cli_load_inputs(psim_cli_inputs *in, const char *model_file,
                                 const char *cluster_file, const char *strategy_file,
                                 const char *costdb_file);
void psim_cli_inputs_destroy(psim_cli_inputs *in);
/* --stack NAME|FILE (docs/stacks.md): replaces the stack of the cluster file and
 * the strategy; NULL leaves theirs. */
psim_status psim_cli_apply_stack(psim_cli_inputs *in, const char *stack);

#endif
