/* cmd_export.c - plansim export PLAN --format F [--model M --cluster C] [-o FILE], and
 * plansim export PLAN --check FILE [--format F]. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "search/plan/export.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"

const char psim_cmd_export_help[] =
    "Turns a plan (plansim.plan/1, from 'plansim plan -o PLAN') into the configuration of a\n"
    "training runtime. Formats (docs/export.md, which names the runtime versions):\n"
    "  plansim     the plan itself, as docs/plan.md and docs/plan.schema.json describe it\n"
    "  megatron-bridge  a Megatron-Bridge recipe override file (YAML: model, train, ddp,\n"
    "              optimizer, dataset, mixed_precision), merged over a recipe\n"
    "  megatron    Megatron-LM arguments (a bash array MEGATRON_ARGS): parallel sizes, uneven\n"
    "              or virtual pipeline stages, batch, sequence parallelism, recomputation,\n"
    "              distributed optimizer, overlap, precision, and the model (LLaMA, MoE, BERT)\n"
    "  deepspeed   a DeepSpeed config JSON: batch sizes, gradient accumulation, ZeRO stage\n"
    "              and buckets, precision and gradient accumulation dtype\n"
    "  deepspeed-pipeline  the PipelineModule arguments of a pipelined plan (Python)\n"
    "  gspmd       a JAX-style PartitionSpec per tensor over a named mesh, and the mesh shape\n"
    "  torchtitan  a torchtitan job config (TOML) for LLaMA-family models\n"
    "  flexflow    refused: no current FlexFlow release reads a strategy file\n"
    "A plan the runtime cannot express, or a model it would build differently (per-op\n"
    "placements for Megatron, a GPT for torchtitan, a pipeline for GSPMD, ...), is refused with\n"
    "the reason (exit 2); no format approximates a plan.\n"
    "\n"
    "The model and cluster are the files the plan records (\"model_file\", \"cluster_file\",\n"
    "tried as written and then beside the plan), or those given with --model and --cluster.\n"
    "\n"
    "Options:\n"
    "  --format F     one of the formats above (required)\n"
    "  --model FILE   the plan's model file\n"
    "  --cluster FILE the plan's cluster file\n"
    "  -o FILE        write FILE atomically instead of standard output\n"
    "  --check FILE   read FILE, a file exported earlier (its format from its content, or\n"
    "                 --format), print the settings its runtime reads and compare them with\n"
    "                 PLAN's own export: exit 0 when every setting agrees, 1 listing each\n"
    "                 one that differs, 2 when PLAN cannot be exported to that format\n"
    "\n"
    "Example:\n"
    "  plansim plan models/gpt-1.3b.json topologies/dgx-a100-x16.json -o plan.json\n"
    "  plansim export plan.json --format megatron -o args.sh\n"
    "  plansim export plan.json --check args.sh\n";

typedef struct export_args {
  const char *plan, *format, *model, *cluster, *out, *check;
} export_args;

static psim_status parse_args(int argc, char **argv, export_args *a) {
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    const char **slot = strcmp(arg, "--format") == 0    ? &a->format
                        : strcmp(arg, "--model") == 0   ? &a->model
                        : strcmp(arg, "--cluster") == 0 ? &a->cluster
                        : strcmp(arg, "-o") == 0        ? &a->out
                        : strcmp(arg, "--check") == 0   ? &a->check
                                                        : NULL;
    if (slot) {
      PSIM_CHECK(psim_cli_need_value("export", argc, argv, i));
      *slot = argv[++i];
    } else if (arg[0] == '-' && arg[1]) {
      return psim_cli_usage("export", "unknown option '%s'", arg);
    } else if (!a->plan) {
      a->plan = arg;
    } else {
      return psim_cli_usage("export", "too many arguments ('%s')", arg);
    }
  }
  if (!a->plan)
    return psim_cli_usage("export", "expected PLAN");
  if (!a->format && !a->check)
    return psim_cli_usage("export", "--format is required (plansim, megatron, megatron-bridge, "
                                    "deepspeed, deepspeed-pipeline, gspmd, torchtitan)");
  if (a->check && a->out)
    return psim_cli_usage("export", "--check prints its report; -o is not taken with it");
  return PSIM_OK;
}

static psim_status write_out(const char *path, const char *text, size_t len) {
  if (!path || strcmp(path, "-") == 0) {
    if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0)
      return psim_error(PSIM_EIO, "writing to standard output failed: %s", strerror(errno));
    return PSIM_OK;
  }
  return psim_file_write_atomic(path, text, len);
}

/* --check FILE: the report on standard output; exit 1 when a setting differs. */
static psim_status check_file(const psim_plan_doc *d, const export_args *a, psim_export_format f,
                              const char *text) {
  if (!a->format && psim_export_detect(text, &f) != PSIM_OK) {
    psim_error_prefix("%s: ", a->check);
    return PSIM_EINPUT;
  }
  char *report = NULL;
  size_t len = 0;
  int32_t diff = 0;
  psim_status st = psim_export_check(d, f, text, &report, &len, &diff);
  if (st == PSIM_EINPUT)
    psim_error_prefix("%s: ", a->check);
  if (st == PSIM_EFAILED) { /* the plan's own export is refused: nothing to compare (exit 2) */
    char why[1024];         /* psim_error formats into the buffer the message is in */
    snprintf(why, sizeof why, "%s", psim_error_message());
    return psim_error(PSIM_EINPUT, "%s: cannot export to %s: %s", a->plan,
                      psim_export_format_name(f), why);
  }
  if (st == PSIM_OK)
    st = write_out(NULL, report, len);
  psim_free(report);
  if (st == PSIM_OK && diff > 0)
    return psim_error(PSIM_EFAILED, "%s: %d setting%s differ%s from the plan's %s export", a->check,
                      diff, diff == 1 ? "" : "s", diff == 1 ? "s" : "", psim_export_format_name(f));
  return st;
}

psim_status psim_cmd_export(int argc, char **argv) {
  export_args a;
  memset(&a, 0, sizeof a);
  PSIM_CHECK(parse_args(argc, argv, &a));
  if (a.out) /* before any work */
    PSIM_CHECK(psim_file_check_output("-o", a.out));
  const char *ins[] = {a.plan, a.model, a.cluster};
  PSIM_CHECK(psim_cli_check_distinct(ins, 3, &a.out, 1));
  psim_export_format f = PSIM_EXPORT_COUNT;
  psim_status st = a.format ? psim_export_format_parse(a.format, &f) : PSIM_OK;
  if (st != PSIM_OK)
    return psim_cli_usage("export", "%s", psim_error_message());
  char *checked = NULL; /* the file to check, read before any work */
  size_t checked_len = 0;
  if (a.check)
    PSIM_CHECK(psim_file_read_expecting(a.check, (size_t)64 << 20, "an exported file", &checked,
                                        &checked_len));
  psim_plan_doc d;
  st = psim_plan_doc_load(a.plan, a.model, a.cluster, &d);
  char *text = NULL;
  size_t len = 0;
  if (st == PSIM_OK) /* the model and cluster the plan records, found only now */
    st = psim_cli_check_distinct((const char *const[]){d.model_file, d.cluster_file}, 2, &a.out, 1);
  bool check_done = false;
  if (st == PSIM_OK && a.check) {
    st = check_file(&d, &a, f, checked);
    check_done = true;
  } else if (st == PSIM_OK)
    st = psim_export(&d, f, &text, &len);
  if (st == PSIM_EFAILED && check_done) { /* differences: exit 1, said on stderr */
    psim_free(checked);
    psim_plan_doc_destroy(&d);
    return st;
  }
  if (st == PSIM_EFAILED) { /* a refusal: the plan is input the format cannot take (exit 2) */
    psim_error_prefix("%s: cannot export to %s: ", a.plan, psim_export_format_name(f));
    st = PSIM_EINPUT;
  }
  if (st == PSIM_OK && !check_done)
    st = write_out(a.out, text, len);
  psim_free(text);
  psim_free(checked);
  psim_plan_doc_destroy(&d);
  return st;
}
