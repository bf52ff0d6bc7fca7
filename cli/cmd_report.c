/* cmd_report.c - plansim report PLAN [-o report.html] [--model M --cluster C]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "search/plan/report.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"

const char psim_cmd_report_help[] =
    "Renders a plan (plansim.plan/1) as one self-contained HTML file that needs no network:\n"
    "  - a summary: iteration time, throughput, MFU, peak memory, time breakdown, options;\n"
    "  - a timeline: an SVG Gantt chart with one bar per simulated task on its device's\n"
    "    compute, communication or host stream, or on the links it uses (zoom with the\n"
    "    mouse wheel or the buttons, drag to pan);\n"
    "  - memory per device as stacked bars (weights, gradients, optimizer, activations);\n"
    "  - the pipeline schedule (forward, backward and recompute spans per micro-batch);\n"
    "  - per-op shardings (split degrees, replicas, devices) and the search's best-so-far\n"
    "    curve.\n"
    "The plan's strategy is simulated again to get its schedule, so the page shows exactly\n"
    "what 'plansim simulate' predicts. Huge plans draw the first --max-tasks tasks and say so.\n"
    "\n"
    "Options:\n"
    "  -o FILE          write FILE (default report.html)\n"
    "  --model FILE     the plan's model, when the plan does not record it\n"
    "  --cluster FILE   the plan's cluster, when the plan does not record it\n"
    "  --max-tasks N    tasks drawn on the timeline at most (default 20000)\n"
    "\n"
    "Example:\n"
    "  plansim plan models/gpt-1.3b.json topologies/dgx-a100-x1.json -o plan.json\n"
    "  plansim report plan.json -o plan.html\n";

typedef struct report_args {
  const char *plan, *out, *model, *cluster;
  psim_report_options opts;
} report_args;

static psim_status set_value(report_args *a, const char *opt, const char *val) {
  if (strcmp(opt, "-o") == 0)
    a->out = val;
  else if (strcmp(opt, "--model") == 0)
    a->model = val;
  else if (strcmp(opt, "--cluster") == 0)
    a->cluster = val;
  else
    return psim_cli_parse_int("report", opt, val, 1, INT64_MAX, &a->opts.max_tasks);
  return PSIM_OK;
}

static psim_status parse_args(int argc, char **argv, report_args *a) {
  psim_report_options_init(&a->opts);
  a->out = "report.html";
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "-o") || !strcmp(arg, "--model") || !strcmp(arg, "--cluster") ||
        !strcmp(arg, "--max-tasks")) {
      PSIM_CHECK(psim_cli_need_value("report", argc, argv, i));
      PSIM_CHECK(set_value(a, arg, argv[++i]));
    } else if (arg[0] == '-' && arg[1]) {
      return psim_cli_usage("report", "unknown option '%s'", arg);
    } else if (!a->plan) {
      a->plan = arg;
    } else {
      return psim_cli_usage("report", "too many arguments ('%s')", arg);
    }
  }
  if (!a->plan)
    return psim_cli_usage("report", "expected PLAN");
  return PSIM_OK;
}

static psim_status render(const report_args *a, psim_plan_doc *d, psim_sim_result *r) {
  psim_sim_options so;
  psim_sim_options_init(&so);
  so.keep_graph = true;
  PSIM_CHECK(psim_simulate(&d->model, &d->cluster, &d->strategy, &so, r));
  char *html = NULL;
  size_t len = 0;
  PSIM_CHECK(psim_report_html(d, r, &a->opts, &html, &len));
  psim_status st = psim_file_write_atomic(a->out, html, len);
  psim_free(html);
  if (st == PSIM_OK)
    printf("report of %s written to %s (%lld tasks%s)\n", a->plan, a->out, (long long)r->n_tasks,
           r->n_tasks > a->opts.max_tasks ? ", timeline capped" : "");
  return st;
}

psim_status psim_cmd_report(int argc, char **argv) {
  report_args a;
  memset(&a, 0, sizeof a);
  PSIM_CHECK(parse_args(argc, argv, &a));
  PSIM_CHECK(psim_file_check_output("-o", a.out)); /* before the simulation */
  const char *ins[] = {a.plan, a.model, a.cluster};
  PSIM_CHECK(psim_cli_check_distinct(ins, 3, &a.out, 1));
  psim_plan_doc d;
  psim_sim_result r;
  psim_sim_result_init(&r);
  psim_status st = psim_plan_doc_load(a.plan, a.model, a.cluster, &d);
  if (st == PSIM_OK) /* the model and cluster the plan records, found only now */
    st = psim_cli_check_distinct((const char *const[]){d.model_file, d.cluster_file}, 2, &a.out, 1);
  if (st == PSIM_OK)
    st = render(&a, &d, &r);
  psim_sim_result_destroy(&r);
  psim_plan_doc_destroy(&d);
  return st;
}
