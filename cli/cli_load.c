/* cli_load.c - shared loading of command inputs. */
#include "cli/cli_load.h"

#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/costdb_cli.h"
#include "search/plan/plan.h"
#include "sim/core/json.h"

psim_status psim_cli_load_inputs(psim_cli_inputs *in, const char *model_file,
                                 const char *cluster_file, const char *strategy_file,
                                 const char *costdb_file) {
  memset(in, 0, sizeof *in);
  psim_model_init(&in->model);
  psim_cluster_init(&in->cluster);
  psim_strategy_init(&in->strategy);
  PSIM_CHECK(psim_model_load(model_file, &in->model));
  PSIM_CHECK(psim_cluster_load(cluster_file, &in->cluster));
  if (strategy_file)
    PSIM_CHECK(psim_plan_load_strategy(strategy_file, &in->model, &in->cluster, &in->strategy));
  if (costdb_file)
    PSIM_CHECK(psim_cli_costdb_open(costdb_file, &in->costdb));
  char why[512];
  if (psim_cli_costdb_mismatch(in->costdb, &in->cluster, why, sizeof why))
    fprintf(stderr, "plansim: warning: %s: %s\n", costdb_file, why);
  return PSIM_OK;
}

void psim_cli_inputs_destroy(psim_cli_inputs *in) {
  psim_strategy_destroy(&in->strategy);
  psim_cluster_destroy(&in->cluster);
  psim_model_destroy(&in->model);
  psim_cli_costdb_close(in->costdb);
  in->costdb = NULL;
}

psim_status psim_cli_apply_stack(psim_cli_inputs *in, const char *stack) {
  if (!stack)
    return PSIM_OK;
  psim_stack st;
  psim_status s = psim_stack_select(stack, &st);
  if (s != PSIM_OK) {
    psim_error_prefix("--stack: ");
    return s;
  }
  in->cluster.stack = st;
  return PSIM_OK;
}
