/* cmd_simulate.c - plansim simulate MODEL CLUSTER STRATEGY [options]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_load.h"
#include "sim/builder/build.h"
#include "sim/builder/routing.h"
#include "sim/core/json.h"
#include "sim/core/units.h"
#include "sim/faults.h"
#include "sim/simulate.h"
#include "sim/trace_sim.h"

typedef struct simulate_args {
  const char *files[3];
  int n_files;
  bool json;
  const char *trace;
  const char *costdb;
  const char *stack;   /* --stack NAME|FILE (docs/stacks.md) */
  const char *routing; /* --routing SPEC (sim/builder/routing.h) */
  psim_sim_options opts;
  psim_fault_options faults; /* issue 8: stragglers, faults, --iterations (sim/faults.h) */
} simulate_args;

static psim_status parse_args(int argc, char **argv, simulate_args *a) {
  psim_sim_options_init(&a->opts);
  psim_cli_default_limits(&a->opts); /* --max-memory default: 3/4 of physical memory */
  psim_fault_options_init(&a->faults);
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    psim_status fst;
    int took = psim_fault_option(&a->faults, arg, val, &fst); /* issue 8 (sim/faults.c) */
    if (took < 0)
      return psim_cli_usage("simulate", "%s", psim_error_message());
    if (took > 0) {
      i += took - 1;
      continue;
    }
    if (strcmp(arg, "--json") == 0) {
      a->json = true;
    } else if (strcmp(arg, "--no-fold") == 0) {
      a->opts.fold = false;
    } else if (strcmp(arg, "--trace") == 0 || strcmp(arg, "--costdb") == 0 ||
               strcmp(arg, "--fidelity") == 0 || strcmp(arg, "--stack") == 0 ||
               strcmp(arg, "--routing") == 0 || psim_cli_is_limit_option(arg)) {
      PSIM_CHECK(psim_cli_need_value("simulate", argc, argv, i));
      i++;
      if (strcmp(arg, "--routing") == 0)
        a->routing = val;
      else if (strcmp(arg, "--stack") == 0)
        a->stack = val;
      else if (strcmp(arg, "--trace") == 0)
        a->trace = val;
      else if (strcmp(arg, "--costdb") == 0)
        a->costdb = val;
      else if (psim_cli_is_limit_option(arg)) /* --max-tasks, --max-memory (cli_limits.c) */
        PSIM_CHECK(psim_cli_limit_option("simulate", arg, val, &a->opts));
      else if (strcmp(val, "aggregate") == 0)
        a->opts.fidelity = PSIM_FIDELITY_AGGREGATE;
      else if (strcmp(val, "expanded") == 0)
        a->opts.fidelity = PSIM_FIDELITY_EXPANDED;
      else
        return psim_cli_usage("simulate", "--fidelity is aggregate or expanded, not '%s'", val);
    } else if (arg[0] == '-' && arg[1]) {
      return psim_cli_usage("simulate", "unknown option '%s'", arg);
    } else if (a->n_files < 3) {
      a->files[a->n_files++] = arg;
    } else {
      return psim_cli_usage("simulate", "too many arguments ('%s')", arg);
    }
  }
  if (a->n_files != 3)
    return psim_cli_usage("simulate", "expected MODEL CLUSTER STRATEGY");
  if (a->trace)
    a->opts.keep_graph = true;
  return PSIM_OK;
}

/* Formats one quantity into its own slot of a small ring of buffers, so a
 * printf can take several. */
static const char *fmt(double v, psim_unit_kind kind) {
  static char ring[8][48];
  static int next;
  char *buf = ring[next++ % 8];
  return psim_units_format(v, kind, buf, sizeof ring[0]);
}

static void print_summary(const psim_model *m, const psim_cluster *c, const psim_sim_result *r) {
  char model[512], cluster[512]; /* names may hold control characters */
  psim_cli_escape(m->name, false, model, sizeof model);
  psim_cli_escape(c->name, false, cluster, sizeof cluster);
  printf("model %s on %s: %s per iteration (%.1f samples/s", model, cluster,
         fmt(r->iteration_time_s, PSIM_UNIT_TIME), r->samples_per_s);
  if (r->tokens_per_s > 0)
    printf(", %.0f tokens/s", r->tokens_per_s);
  printf(")\n  model FLOP/s per device %s, MFU %.1f%%, HFU %.1f%%\n",
         fmt(r->model_flops_per_s_per_device, PSIM_UNIT_FLOPS), 100 * r->mfu, 100 * r->hfu);
  printf("  memory: peak %s of %s on device %d (%s): weights %s, gradients %s, optimizer %s, "
         "activations %s\n",
         fmt(r->peak_memory_bytes, PSIM_UNIT_BYTES), fmt(r->capacity_bytes, PSIM_UNIT_BYTES),
         r->peak_device, r->fits ? "fits" : "DOES NOT FIT", fmt(r->memory.weights, PSIM_UNIT_BYTES),
         fmt(r->memory.gradients, PSIM_UNIT_BYTES), fmt(r->memory.optimizer, PSIM_UNIT_BYTES),
         fmt(r->memory.activations, PSIM_UNIT_BYTES));
  printf("  critical device: compute %s, pipeline bubble %s, exposed communication:",
         fmt(r->compute_s, PSIM_UNIT_TIME), fmt(r->bubble_s, PSIM_UNIT_TIME));
  for (int k = 0; k < PSIM_COMM_KIND_COUNT; k++)
    printf(" %s %s", psim_comm_kind_name(k), fmt(r->exposed_comm_s[k], PSIM_UNIT_TIME));
  printf(", waiting on:");
  for (int k = 0; k < PSIM_WAIT_KIND_COUNT; k++)
    printf(" %s %s", psim_wait_kind_name(k), fmt(r->wait_s[k], PSIM_UNIT_TIME));
  printf("\n  simulated %lld tasks on %d devices%s in %.3f s (build %.3f s)\n",
         (long long)r->n_tasks, r->simulated_devices,
         r->folded ? " (symmetric devices folded)" : "", r->simulate_s, r->build_s);
}

static psim_status print_json(const psim_sim_result *r, const psim_fault_report *rep) {
  cJSON *root = cJSON_CreateObject();
  if (!root)
    return psim_error(PSIM_ENOMEM, "out of memory");
  psim_status s = psim_sim_result_to_json(r, root);
  if (s == PSIM_OK && rep) /* issue 8: several iterations, faults */
    s = psim_fault_report_to_json(rep, root);
  if (s == PSIM_OK)
    s = psim_json_write_file("-", root);
  cJSON_Delete(root);
  return s;
}

static bool given(int argc, char **argv, const char *flag) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], flag) == 0)
      return true;
  return false;
}

/* The strategy's "checkpoint" settings replace the fault options' defaults;
 * the command line's replace both. */
static void checkpoint_from_strategy(int argc, char **argv, const psim_strategy *st,
                                     psim_fault_options *f) {
  if (st->checkpoint.every > 0 && !given(argc, argv, "--checkpoint-every"))
    f->checkpoint_every = st->checkpoint.every;
  if (st->checkpoint.write_bw > 0 && !given(argc, argv, "--checkpoint-write-bw"))
    f->checkpoint_write_bw = st->checkpoint.write_bw;
  if (st->checkpoint.read_bw > 0 && !given(argc, argv, "--checkpoint-read-bw"))
    f->checkpoint_read_bw = st->checkpoint.read_bw;
}

/* A fault or join timed after the last iteration changes nothing; say so on
 * stderr (also with --json), as such a time is most likely a mistake (a
 * time in iterations, or one from a longer run). */
static void note_after_run(const psim_fault_report *rep) {
  for (int32_t i = 0; i < rep->n_rec; i++) {
    const psim_fault_record *e = &rep->rec[i];
    if (!e->after_run)
      continue;
    const char *opt = e->kind == PSIM_FAULT_FAIL        ? "--fail"
                      : e->kind == PSIM_FAULT_FAIL_LINK ? "--fail-link"
                                                        : "--join";
    fprintf(stderr,
            "plansim simulate: note: %s %s at %g s has no effect: the run (%d iterations) "
            "ends at %.6g s, before the event takes effect\n",
            opt, e->what, e->time_s, (int)rep->n_iterations, rep->total_s);
  }
}

psim_status psim_cmd_simulate(int argc, char **argv) {
  simulate_args a;
  memset(&a, 0, sizeof a);
  PSIM_CHECK(parse_args(argc, argv, &a));
  if (a.trace) /* before any work: a simulation must not end in "cannot create" */
    PSIM_CHECK(psim_file_check_output("--trace", a.trace));
  const char *ins[] = {a.files[0], a.files[1], a.files[2], a.costdb};
  PSIM_CHECK(psim_cli_check_distinct(ins, 4, &a.trace, 1));
  psim_routing routing = {0};
  if (a.routing) /* MoE routed tokens per expert (issue 21) */
    PSIM_CHECK(psim_routing_parse(a.routing, &routing));
  a.opts.routing = a.routing ? &routing : NULL;
  psim_cli_inputs in;
  psim_status s = psim_cli_load_inputs(&in, a.files[0], a.files[1], a.files[2], a.costdb);
  if (s == PSIM_OK)
    s = psim_cli_apply_stack(&in, a.stack);
  if (s == PSIM_OK)
    s = psim_routing_check_model(a.opts.routing, &in.model);
  if (s == PSIM_OK && in.cluster.stack.moe_a2a_overlap &&
      !psim_build_combines_1f1b(&in.cluster, &in.strategy))
    fprintf(stderr, "plansim: warning: the stack's moe_a2a_overlap applies to one pipeline stage "
                    "under 1F1B only (combined 1F1B); this strategy runs without it\n");
  psim_sim_result r;
  psim_sim_result_init(&r);
  psim_fault_report rep; /* issue 8 */
  psim_fault_report_init(&rep);
  bool timeline = psim_fault_options_timeline(&a.faults);
  if (s == PSIM_OK) /* bad device or link names: exit 2 before simulating, whatever the time */
    s = psim_fault_options_check(&a.faults, &in.cluster);
  if (s == PSIM_OK)
    checkpoint_from_strategy(argc, argv, &in.strategy, &a.faults);
  if (s == PSIM_OK)
    s = psim_faults_apply_slowdowns(&a.faults, &in.cluster);
  if (s == PSIM_OK) {
    a.opts.costdb = in.costdb;
    s = psim_simulate(&in.model, &in.cluster, &in.strategy, &a.opts, &r);
  }
  if (s == PSIM_OK && timeline)
    s = psim_faults_run(&in.model, &in.cluster, &in.strategy, &a.opts, &a.faults, &rep);
  if (s == PSIM_OK && a.trace)
    s = psim_trace_write_sim(a.trace, &in.model, &in.cluster, &r);
  if (s == PSIM_OK) {
    if (a.json)
      s = print_json(&r, timeline ? &rep : NULL);
    else
      print_summary(&in.model, &in.cluster, &r);
    if (s == PSIM_OK && !a.json && timeline)
      psim_fault_report_print(&rep, stdout);
    if (s == PSIM_OK && timeline)
      note_after_run(&rep);
  }
  psim_fault_report_destroy(&rep);
  psim_sim_result_destroy(&r);
  psim_cli_inputs_destroy(&in);
  psim_routing_destroy(&routing);
  return s;
}
