/* cmd_plan.c - plansim plan MODEL CLUSTER [options]: search, then report the
 * full-simulation figures of the plan found beside the baselines. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_load.h"
#include "search/plan/plan.h"
#include "search/policy/policy.h"
#include "search/policy/searchers.h"
#include "search/search.h"
#include "sim/builder/routing.h"
#include "sim/core/json.h"
#include "sim/core/units.h"
#include "sim/strategy/constraints.h"
#include "sim/trace_sim.h"

typedef struct plan_args {
  const char *files[2];
  int n_files;
  const char *out, *search, *budget, *costdb, *trace, *fix, *init, *stack;
  const char *routing;                /* --routing SPEC (sim/builder/routing.h) */
  const char *max_tasks, *max_memory; /* --max-tasks, --max-memory (cli_limits.c) */
  uint64_t seed;
  int64_t verify_every; /* --verify-every N (debug) */
  int32_t threads;
  bool json;
  bool no_baselines; /* --no-baselines: skip the data-parallel and grid simulations */
  bool fp8;          /* --fp8: the grids also try FP8 linears (psim_search_options.fp8) */
  bool reproducible; /* --reproducible: no wall-clock figures in the plan */
  bool progress;     /* --progress: progress lines on stderr even when it is not a terminal */
} plan_args;

static const char *const value_options[] = {
    "-o",           "--search",       "--budget", "--seed",    "--costdb",
    "--trace",      "--fix",          "--init",   "--threads", "--max-tasks",
    "--max-memory", "--verify-every", "--stack",  "--routing", NULL};

static bool takes_value(const char *opt) {
  for (const char *const *v = value_options; *v; v++)
    if (strcmp(*v, opt) == 0)
      return true;
  return false;
}

static psim_status set_option(plan_args *a, const char *opt, const char *val) {
  int64_t n;
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
  else if (strcmp(opt, "--fix") == 0)
    a->fix = val;
  else if (strcmp(opt, "--init") == 0)
    a->init = val;
  else if (strcmp(opt, "--stack") == 0)
    a->stack = val;
  else if (strcmp(opt, "--routing") == 0)
    a->routing = val;
  else if (strcmp(opt, "--max-tasks") == 0)
    a->max_tasks = val;
  else if (strcmp(opt, "--max-memory") == 0)
    a->max_memory = val;
  else if (strcmp(opt, "--threads") == 0) {
    PSIM_CHECK(psim_cli_parse_int("plan", opt, val, 1, 256, &n));
    a->threads = (int32_t)n;
  } else if (strcmp(opt, "--verify-every") == 0) {
    PSIM_CHECK(psim_cli_parse_int("plan", opt, val, 1, INT64_MAX, &n));
    a->verify_every = n;
  } else {
    PSIM_CHECK(psim_cli_parse_int("plan", opt, val, 0, INT64_MAX, &n));
    a->seed = (uint64_t)n;
  }
  return PSIM_OK;
}

static psim_status parse_args(int argc, char **argv, plan_args *a) {
  a->search = "auto";
  a->seed = 1;
  a->threads = 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      a->json = true;
    } else if (strcmp(argv[i], "--no-baselines") == 0) {
      a->no_baselines = true;
    } else if (strcmp(argv[i], "--fp8") == 0) {
      a->fp8 = true;
    } else if (strcmp(argv[i], "--reproducible") == 0) {
      a->reproducible = true;
    } else if (strcmp(argv[i], "--progress") == 0) {
      a->progress = true;
    } else if (takes_value(argv[i])) {
      PSIM_CHECK(psim_cli_need_value("plan", argc, argv, i));
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
  if (strcmp(a->search, "auto") != 0 && !psim_searcher_find(a->search))
    return psim_cli_usage("plan", "--search is auto, alpa, mcmc, grid or exhaustive, not '%s'",
                          a->search);
  return PSIM_OK;
}

static psim_status parse_budget(const char *text, psim_search_options *o) {
  if (!text)
    return PSIM_OK;
  const char *why = psim_search_budget_problem(text, &o->budget_s, &o->budget_evals);
  o->budget_from_start = true; /* the whole process keeps to it, loading included */
  return why ? psim_cli_usage("plan", "--budget '%s': %s", text, why) : PSIM_OK;
}

/* The searcher that runs: auto resolved (search/policy/policy.c). */
static const char *searcher_name(const plan_args *a) {
  return psim_policy_searcher(a->search);
}

static void note(const char *opt, const char *searcher, const char *why) {
  fprintf(stderr, "plansim plan: note: %s has no effect with --search %s (%s)\n", opt, searcher,
          why);
}

/* Options the chosen searcher ignores get a note on stderr instead of
 * silently changing nothing (the run goes on). */
static void note_ignored(const plan_args *a, const psim_search_options *o) {
  const char *s = searcher_name(a), *given = a->search;
  bool by_time = o->budget_s > 0;
  if (a->budget && !by_time && strcmp(s, "alpa") == 0 && strcmp(given, "auto") != 0)
    note("--budget", given,
         "the Alpa optimizer takes a time budget (e.g. --budget 60s: its candidate "
         "simulations end by it), not an evaluation count");
  else if (a->budget && by_time && strcmp(s, "exhaustive") == 0)
    note("a time --budget", given, "it takes an evaluation count, e.g. --budget 2000");
  if (a->init && strcmp(s, "mcmc") != 0 && strcmp(s, "exhaustive") != 0)
    note("--init", given, "only mcmc and exhaustive start from a strategy");
  if (a->fix && strcmp(s, "grid") == 0)
    note("--fix", given, "the Megatron grid does not take fixed choices; use alpa or mcmc");
  if (a->fp8 && strcmp(s, "grid") != 0 && strcmp(s, "alpa") != 0 && a->no_baselines)
    note("--fp8", given,
         "only the Megatron grid, the Alpa optimizer's plan and the grid baseline "
         "try FP8 linears");
}

/* --fp8 where it cannot apply (search/grid_space.c fp8_applies): said, not silently ignored. */
static void note_fp8(const psim_cluster *c) {
  if (c->n_devices > 0 && !psim_device_has_fp8(c, 0))
    fprintf(stderr, "plansim plan: note: --fp8 has no effect: device type '%s' has no FP8 rate\n",
            c->types[c->devices[0].type].name);
  else if (c->stack.fp8_cast_bytes <= 0)
    fprintf(stderr,
            "plansim plan: note: --fp8 has no effect: stack '%s' has no FP8 recipe (try --stack "
            "megatron-core or pytorch-fsdp2; docs/stacks.md)\n",
            psim_stack_name(&c->stack));
}

static void print_line(const char *label, const psim_sim_result *r) {
  char b1[64], b2[64];
  printf("  %-16s %s per iteration, %.1f samples/s, MFU %.1f%%, peak memory %s%s\n", label,
         psim_units_format(r->iteration_time_s, PSIM_UNIT_TIME, b1, sizeof b1), r->samples_per_s,
         100 * r->mfu, psim_units_format(r->peak_memory_bytes, PSIM_UNIT_BYTES, b2, sizeof b2),
         r->fits ? "" : " (does not fit)");
}

static void print_summary(const plan_args *a, const psim_cli_inputs *in,
                          const psim_search_result *r, const psim_plan_info *info) {
  printf("plan for %s on %s (%d devices), searcher %s: %lld strategies evaluated in %.2f s\n",
         in->model.name, in->cluster.name, in->cluster.n_devices, info->searcher,
         (long long)r->evaluations, r->wall_s);
  printf("  best: %s\n", r->description);
  print_line("plan", &r->best_sim);
  if (info->grid) {
    print_line("Megatron grid", info->grid);
    if (info->grid_description)
      printf("                   (%s)\n", info->grid_description);
  }
  if (info->data_parallel)
    print_line("data parallel", info->data_parallel);
  else if (!psim_interrupted() && !a->no_baselines) /* interrupted: baselines are not run */
    printf("  data parallel    does not apply (the batch does not split over every device)\n");
  if (strcmp(a->search, "auto") == 0 && strcmp(info->searcher, "grid") == 0)
    printf("  (auto ran the Megatron grid: the Alpa and MCMC searchers are not built yet)\n");
  if (a->out)
    printf("  plan written to %s\n", a->out);
}

static psim_status write_plan(const plan_args *a, const psim_cli_inputs *in, psim_cluster *c,
                              const psim_search_result *r, const psim_plan_info *info) {
  cJSON *doc = NULL;
  psim_status st = psim_plan_to_json(&in->model, c, &r->best, &r->best_sim, info, &doc);
  if (st == PSIM_OK && a->reproducible)
    psim_plan_strip_timings(doc);
  if (st == PSIM_OK && a->out)
    st = psim_json_write_file(a->out, doc);
  if (st == PSIM_OK && a->json)
    st = psim_json_write_file("-", doc);
  cJSON_Delete(doc);
  return st;
}

static psim_status trace_best(const psim_cli_inputs *in, psim_cluster *c,
                              const psim_search_result *r, const psim_sim_options *so,
                              const char *path) {
  psim_sim_options o = *so;
  o.keep_graph = true;
  psim_sim_result sim;
  psim_status st = psim_simulate(&in->model, c, &r->best, &o, &sim);
  if (st == PSIM_OK)
    st = psim_trace_write_sim(path, &in->model, c, &sim);
  psim_sim_result_destroy(&sim); /* also when the trace write fails (issue 9: was leaked) */
  return st;
}

typedef struct plan_run {
  psim_cli_inputs in;
  psim_sim_options sim;
  psim_search_options so;
  psim_policy_result pol; /* the plan and its baselines */
  cJSON *fix;             /* --fix as parsed; fix_k reads it once for every searcher */
  psim_constraints fix_k;
  psim_strategy init;
  psim_routing routing; /* --routing, parsed */
} plan_run;

static psim_status prepare(const plan_args *a, plan_run *p) {
  PSIM_CHECK(parse_budget(a->budget, &p->so));
  psim_cli_default_limits(&p->sim); /* issue 9: refuse absurd graphs before building them */
  if (a->max_tasks)
    PSIM_CHECK(psim_cli_limit_option("plan", "--max-tasks", a->max_tasks, &p->sim));
  if (a->max_memory)
    PSIM_CHECK(psim_cli_limit_option("plan", "--max-memory", a->max_memory, &p->sim));
  PSIM_CHECK(psim_cli_load_inputs(&p->in, a->files[0], a->files[1], NULL, a->costdb));
  PSIM_CHECK(psim_cli_apply_stack(&p->in, a->stack));
  if (a->routing) { /* MoE routed tokens per expert (issue 21) */
    PSIM_CHECK(psim_routing_parse(a->routing, &p->routing));
    p->sim.routing = &p->routing;
    PSIM_CHECK(psim_routing_check_model(&p->routing, &p->in.model));
  }
  p->sim.costdb = p->in.costdb;
  p->so.sim = &p->sim;
  p->so.seed = a->seed;
  p->so.threads = a->threads;
  p->so.fp8 = a->fp8;
  p->so.verify_every = a->verify_every;
  p->so.progress = a->progress || psim_cli_stderr_is_tty() ? stderr : NULL;
  if (a->fix) {
    PSIM_CHECK(psim_json_load_file(a->fix, &p->fix));
    PSIM_CHECK(psim_constraints_read(p->fix, a->fix, &p->fix_k));
    p->so.fix = &p->fix_k;
  }
  if (a->init) {
    PSIM_CHECK(psim_plan_load_strategy(a->init, &p->in.model, &p->in.cluster, &p->init));
    p->so.init = &p->init;
  }
  note_ignored(a, &p->so);
  if (a->fp8)
    note_fp8(&p->in.cluster);
  return PSIM_OK;
}

/* Before any work: a search of minutes must not end in "cannot create". */
static psim_status check_outputs(const plan_args *a) {
  if (a->out)
    PSIM_CHECK(psim_file_check_output("-o", a->out));
  const char *ins[] = {a->files[0], a->files[1], a->costdb, a->fix, a->init},
             *outs[] = {a->out, a->trace};
  PSIM_CHECK(psim_cli_check_distinct(ins, 5, outs, 2));
  return a->trace ? psim_file_check_output("--trace", a->trace) : PSIM_OK;
}

/* What the plan file and the summary say about the search and the baselines. */
static psim_plan_info plan_info(const plan_args *a, const psim_policy_result *pol) {
  const psim_search_result *r = &pol->result;
  psim_plan_info info = {
      pol->searcher, a->seed,  a->budget,      r->evaluations,
      r->wall_s,     r->curve, r->n_curve,     pol->dp_sim,
      pol->grid_sim, r->stats, r->description, pol->grid_sim ? pol->grid.description : NULL,
      pol->plan_from};
  return info;
}

/* The search and its baselines (search policy); the CLI's message for a
 * searcher that is not built. */
static psim_status run_policy(const plan_args *a, plan_run *p) {
  if (!psim_policy_available(a->search))
    return psim_error(PSIM_EUNIMPLEMENTED,
                      "--search %s is not built yet in this version; use --search grid (the "
                      "Megatron grid) or auto",
                      searcher_name(a));
  return psim_policy_plan(&p->in.model, &p->in.cluster, a->search, &p->so, !a->no_baselines,
                          &p->pol);
}

/* Writes the trace, the plan and the summary of a finished (or stopped) search. */
static psim_status report(const plan_args *a, plan_run *p) {
  const psim_search_result *r = &p->pol.result;
  psim_plan_info info = plan_info(a, &p->pol);
  psim_status st = PSIM_OK;
  /* the trace first: a trace that fails leaves no new plan behind */
  if (a->trace && !p->pol.stopped)
    st = trace_best(&p->in, &p->in.cluster, r, &p->sim, a->trace);
  if (st == PSIM_OK)
    st = write_plan(a, &p->in, &p->in.cluster, r, &info);
  if (st == PSIM_OK && !a->json)
    print_summary(a, &p->in, r, &info);
  /* Interrupted (SIGINT/SIGTERM, issue 9): the best plan so far is written,
   * and the command then ends with PSIM_EINTERRUPTED. */
  if (st == PSIM_OK && p->pol.stopped)
    st = psim_error(
        PSIM_EINTERRUPTED, "interrupted after %lld evaluations; the best plan so far %s%s",
        (long long)r->evaluations, a->out ? "was written to " : "is above", a->out ? a->out : "");
  return st;
}

psim_status psim_cmd_plan(int argc, char **argv) {
  plan_args a;
  memset(&a, 0, sizeof a);
  PSIM_CHECK(parse_args(argc, argv, &a));
  PSIM_CHECK(check_outputs(&a));
  plan_run p;
  memset(&p, 0, sizeof p);
  psim_sim_options_init(&p.sim);
  psim_search_options_init(&p.so);
  psim_policy_result_init(&p.pol);
  psim_strategy_init(&p.init);
  psim_status st = prepare(&a, &p);
  if (st == PSIM_OK)
    st = run_policy(&a, &p);
  if (st == PSIM_OK)
    st = report(&a, &p);
  psim_constraints_destroy(&p.fix_k);
  cJSON_Delete(p.fix);
  psim_strategy_destroy(&p.init);
  psim_policy_result_destroy(&p.pol);
  psim_cli_inputs_destroy(&p.in);
  psim_routing_destroy(&p.routing);
  return st;
}
