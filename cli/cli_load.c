/* cli_load.c - shared loading of command inputs. */
#include "cli/cli_load.h"

#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/costdb_cli.h"
#include "search/plan/plan.h"
#include "sim/core/json.h"

/* A plan without "strategy" would be read as a strategy itself and fail on
 * its format ("expected plansim.strategy/1"); say what is missing instead,
 * as export does. */
static psim_status plan_has_strategy(const char *file, const cJSON *root) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "format");
  if (!cJSON_IsString(f) || strcmp(f->valuestring, "plansim.plan/1") != 0 ||
      cJSON_GetObjectItemCaseSensitive(root, "strategy"))
    return PSIM_OK;
  return psim_error(PSIM_EINPUT,
                    "%s: strategy: missing (expected an object: a plan holds its "
                    "strategy under \"strategy\")",
                    file);
}

psim_status psim_cli_load_strategy(const char *file, const psim_model *m, psim_cluster *c,
                                   psim_strategy *out) {
  cJSON *root = NULL;
  PSIM_CHECK(psim_json_load_file(file, &root));
  psim_status s = plan_has_strategy(file, root);
  if (s == PSIM_OK)
    s = psim_strategy_from_json(file, psim_plan_strategy_json(root), m, c, out);
  cJSON_Delete(root);
  return s;
}

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
    PSIM_CHECK(psim_cli_load_strategy(strategy_file, &in->model, &in->cluster, &in->strategy));
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
