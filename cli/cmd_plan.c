/* cmd_plan.c - plansim plan MODEL CLUSTER [options]: search, then report the
 * full-simulation figures of the plan found beside the baselines. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_load.h"
#include "grid.h"
#include "json.h"
#include "plan.h"
#include "trace_sim.h"
#include "units.h"

typedef struct plan_args {
  const char *files[2];
  int n_files;
  const char *out, *search, *budget, *costdb, *trace;
  uint64_t seed;
  bool json;
} plan_args;

static const char *const value_options[] = {"-o", "--search", "--budget", "--seed", "--costdb",
                                            "--trace", NULL};

static psim_status set_option(plan_args *a, const char *opt, const char *val) {
  if (strcmp(opt, "-o") == 0)
    a->out = val;
  else if (strcmp(opt, "--search") == 0)
    a->search = val;
  else if (strcmp(opt, "--budget") == 0)
    a->budget = val;
  else if (strcmp(opt, "--costdb") == 0)
    a->costdb = val;
  else if (strcmp(opt, "--trace") == 0)
    a->trace = val;
  else {
    char *end;
    a->seed = strtoull(val, &end, 10);
    if (*end || !*val)
      return psim_cli_usage("plan", "--seed wants a non-negative integer, not '%s'", val);
  }
  return PSIM_OK;
}

static bool takes_value(const char *opt) {
  for (const char *const *v = value_options; *v; v++)
    if (strcmp(*v, opt) == 0)
      return true;
  return false;
}

static psim_status parse_args(int argc, char **argv, plan_args *a) {
  a->search = "auto";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      a->json = true;
    } else if (takes_value(argv[i])) {
      if (i + 1 >= argc)
        return psim_cli_usage("plan", "%s needs a value", argv[i]);
      PSIM_CHECK(set_option(a, argv[i], argv[i + 1]));
      i++;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      return psim_cli_usage("plan", "unknown option '%s'", argv[i]);
    } else if (a->n_files < 2) {
      a->files[a->n_files++] = argv[i];
    } else {
      return psim_cli_usage("plan", "too many arguments ('%s')", argv[i]);
    }
  }
  if (a->n_files != 2)
    return psim_cli_usage("plan", "expected MODEL CLUSTER");
  if (strcmp(a->search, "auto") && strcmp(a->search, "grid") && strcmp(a->search, "alpa") &&
      strcmp(a->search, "mcmc") && strcmp(a->search, "exhaustive"))
    return psim_cli_usage("plan", "--search is auto, alpa, mcmc, grid or exhaustive, not '%s'",
                          a->search);
  if (strcmp(a->search, "auto") && strcmp(a->search, "grid"))
    return psim_error(PSIM_EUNIMPLEMENTED,
                      "--search %s is not built yet in this version; use --search grid (the "
                      "Megatron grid) or auto",
                      a->search);
  return PSIM_OK;
}

/* The data-parallel baseline over every device (NULL result when it fails,
 * e.g. the batch does not split that many ways). */
static bool data_parallel(const psim_cli_inputs *in, psim_cluster *c, const psim_sim_options *so,
                          psim_sim_result *out) {
  psim_strategy s;
  psim_strategy_init(&s);
  psim_status st = psim_strategy_data_parallel(&in->model, c, c->n_devices, 1, &s);
  if (st == PSIM_OK)
    st = psim_simulate(&in->model, c, &s, so, out);
  psim_strategy_destroy(&s);
  psim_error_clear();
  return st == PSIM_OK;
}

static void print_line(const char *label, const psim_sim_result *r) {
  char b1[64], b2[64];
  printf("  %-16s %s per iteration, %.0f samples/s, MFU %.1f%%, peak memory %s%s\n", label,
         psim_units_format(r->iteration_time_s, PSIM_UNIT_TIME, b1, sizeof b1), r->samples_per_s,
         100 * r->mfu, psim_units_format(r->peak_memory_bytes, PSIM_UNIT_BYTES, b2, sizeof b2),
         r->fits ? "" : " (does not fit)");
}

static void print_summary(const psim_cli_inputs *in, const psim_grid_result *g,
                          const psim_sim_result *dp, const plan_args *a) {
  const psim_megatron_opts *b = &g->best;
  printf("plan for %s on %s (%d devices), searcher %s: %lld strategies evaluated in %.2f s\n",
         in->model.name, in->cluster.name, in->cluster.n_devices, a->search,
         (long long)g->evaluations, g->wall_s);
  printf("  best: Megatron tp %d, pp %d, dp %d, micro-batch %d, recompute %s%s\n", b->tp, b->pp,
         b->dp, b->micro_batch, psim_recompute_name(b->recompute),
         b->sequence_parallel ? ", sequence parallel" : "");
  print_line("plan", &g->best_sim);
  if (dp)
    print_line("data parallel", dp);
  else
    printf("  data parallel    does not apply (the batch does not split over every device)\n");
  if (strcmp(a->search, "auto") == 0)
    printf("  (auto ran the Megatron grid: the Alpa and MCMC searchers are not built yet)\n");
  if (a->out)
    printf("  plan written to %s\n", a->out);
}

static psim_status write_plan(const psim_cli_inputs *in, psim_cluster *c, const psim_grid_result *g,
                              const psim_sim_result *dp, const plan_args *a) {
  psim_strategy s;
  psim_strategy_init(&s);
  psim_status st = psim_strategy_megatron(&in->model, c, &g->best, &s);
  psim_plan_info info = {a->search, a->seed, a->budget, g->evaluations, g->wall_s,
                         g->curve, g->n_curve, dp};
  cJSON *doc = NULL;
  if (st == PSIM_OK)
    st = psim_plan_to_json(&in->model, c, &s, &g->best_sim, &info, &doc);
  if (st == PSIM_OK && a->out)
    st = psim_json_write_file(a->out, doc);
  if (st == PSIM_OK && a->json)
    st = psim_json_write_file("-", doc);
  cJSON_Delete(doc);
  psim_strategy_destroy(&s);
  return st;
}

static psim_status trace_best(const psim_cli_inputs *in, psim_cluster *c, const psim_grid_result *g,
                              const psim_sim_options *so, const char *path) {
  psim_strategy s;
  psim_strategy_init(&s);
  psim_sim_options o = *so;
  o.keep_graph = true;
  psim_sim_result r;
  psim_sim_result_init(&r);
  psim_status st = psim_strategy_megatron(&in->model, c, &g->best, &s);
  if (st == PSIM_OK)
    st = psim_simulate(&in->model, c, &s, &o, &r);
  if (st == PSIM_OK)
    st = psim_trace_write_sim(path, &in->model, c, &r);
  psim_sim_result_destroy(&r);
  psim_strategy_destroy(&s);
  return st;
}

psim_status psim_cmd_plan(int argc, char **argv) {
  plan_args a;
  memset(&a, 0, sizeof a);
  PSIM_CHECK(parse_args(argc, argv, &a));
  psim_cli_inputs in;
  psim_status st = psim_cli_load_inputs(&in, a.files[0], a.files[1], NULL, a.costdb);
  psim_sim_options so;
  psim_sim_options_init(&so);
  so.costdb = in.costdb;
  psim_grid_options go;
  psim_grid_options_init(&go);
  go.sim = &so;
  go.progress = psim_cli_stderr_is_tty() ? stderr : NULL;
  psim_grid_result g;
  psim_grid_result_init(&g);
  psim_sim_result dp;
  psim_sim_result_init(&dp);
  if (st == PSIM_OK)
    st = psim_grid_search(&in.model, &in.cluster, &go, &g);
  bool have_dp = st == PSIM_OK && data_parallel(&in, &in.cluster, &so, &dp);
  if (st == PSIM_OK)
    st = write_plan(&in, &in.cluster, &g, have_dp ? &dp : NULL, &a);
  if (st == PSIM_OK && a.trace)
    st = trace_best(&in, &in.cluster, &g, &so, a.trace);
  if (st == PSIM_OK && !a.json)
    print_summary(&in, &g, have_dp ? &dp : NULL, &a);
  psim_sim_result_destroy(&dp);
  psim_grid_result_destroy(&g);
  psim_cli_inputs_destroy(&in);
  return st;
}
