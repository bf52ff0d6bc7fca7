/* cmd_expand.c - plansim expand MODEL CLUSTER STRATEGY [-o FILE]: prints the
 * explicit form of a strategy after expanding it against a model and cluster. */
#include <string.h>

#include "cli/cli.h"
#include "sim/core/json.h"
#include "sim/ir/cluster.h"
#include "sim/ir/model.h"
#include "sim/strategy/strategy.h"

typedef struct expand_args {
  const char *files[3]; /* model, cluster, strategy */
  const char *out;      /* "-" for standard output */
} expand_args;

static psim_status parse_args(int argc, char **argv, expand_args *a) {
  int n = 0;
  a->out = "-";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) {
      PSIM_CHECK(psim_cli_need_value("expand", argc, argv, i));
      a->out = argv[++i];
    } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
      return psim_cli_usage("expand", "unknown option '%s'", argv[i]);
    } else if (n == 3) {
      return psim_cli_usage("expand", "too many arguments: '%s'", argv[i]);
    } else {
      a->files[n++] = argv[i];
    }
  }
  if (n != 3)
    return psim_cli_usage("expand", "expected MODEL CLUSTER STRATEGY");
  return PSIM_OK;
}

static psim_status expand(const expand_args *a, psim_model *m, psim_cluster *c, psim_strategy *s) {
  PSIM_CHECK(psim_model_load(a->files[0], m));
  PSIM_CHECK(psim_cluster_load(a->files[1], c));
  PSIM_CHECK(psim_strategy_load(a->files[2], m, c, s));
  cJSON *root = NULL;
  PSIM_CHECK(psim_strategy_to_json(s, m, c, &root));
  psim_status st = psim_json_write_file(a->out, root);
  cJSON_Delete(root);
  return st;
}

psim_status psim_cmd_expand(int argc, char **argv) {
  expand_args a;
  memset(&a, 0, sizeof a);
  PSIM_CHECK(parse_args(argc, argv, &a));
  PSIM_CHECK(psim_file_check_output("-o", a.out)); /* before any work */
  PSIM_CHECK(psim_cli_check_distinct(a.files, 3, &a.out, 1));
  psim_model m;
  psim_cluster c;
  psim_strategy s;
  psim_model_init(&m);
  psim_cluster_init(&c);
  psim_strategy_init(&s);
  psim_status st = expand(&a, &m, &c, &s);
  psim_strategy_destroy(&s);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
  return st;
}
