/* main.c - plansim entry point: command dispatch, help, exit codes, signals. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "psim_config.h"
#include "sim/core/json.h"
#include "sim/engine/taskgraph.h"

volatile sig_atomic_t psim_cli_signal;

/* SIGINT/SIGTERM: the first asks the work to stop (long loops poll
 * psim_interrupted(); plan writes its best plan so far, profile saves what it
 * measured); a second one ends the process at once. Only async-signal-safe
 * calls here: the interrupt flag is a lock-free atomic. */
static void on_signal(int sig) {
  if (psim_cli_signal) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  psim_cli_signal = sig;
  psim_set_interrupt(1);
}

static void install_signal_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* 130 after SIGINT, 143 after SIGTERM (128 + signal, as shells report). */
static int exit_code(psim_status s) {
  if (s == PSIM_EINTERRUPTED && psim_cli_signal == SIGTERM)
    return 128 + SIGTERM;
  return psim_status_exit_code(s);
}

/* Long help texts, one static string per command, shown by 'plansim help COMMAND'. */
static const char help_check[] =
    "Validates each FILE by its \"format\" key: plansim.model/1, plansim.cluster/1,\n"
    "plansim.strategy/1, plansim.costdb/1, plansim.plan/1, plansim.sweep/1. Models and\n"
    "clusters go through the full loaders; strategies are checked for structure (their fit\n"
    "to a model and cluster is checked by 'plansim expand'); cost databases by their\n"
    "loader; plans and sweeps only for the format key until those issues land.\n"
    "\n"
    "Every file is checked, even after a bad one. A good file prints one line on standard\n"
    "output, \"FILE: ok (what it holds)\"; a bad one prints its error on standard error\n"
    "(the file, line:column for JSON syntax, the JSON path for content) and nothing on\n"
    "standard output.\n"
    "\n"
    "Exit status: 0 when every file is valid, 2 when any file is bad, 1 when a check could\n"
    "not run (a validator not built yet, out of memory).\n"
    "\n"
    "Example:\n"
    "  plansim check models/*.json topologies/*.json\n";
static const char help_expand[] =
    "Loads MODEL and CLUSTER, expands STRATEGY (a template such as megatron, data_parallel\n"
    "or zero, or an explicit form) against them and prints the explicit form: the mesh and\n"
    "layout, the pipeline stages with their layer ranges and devices, per-op overrides where\n"
    "an op differs from the layout, gradient synchronisation and memory options. The output\n"
    "is a plansim.strategy/1 file that loads back to the identical strategy.\n"
    "\n"
    "A strategy that does not fit (tp that does not divide the heads, more devices than the\n"
    "cluster has, a layer in two stages, ...) is an error naming the file, field and why.\n"
    "\n"
    "Options:\n"
    "  -o FILE   write to FILE (atomically) instead of standard output\n"
    "\n"
    "Example:\n"
    "  plansim expand models/gpt-22b.json topologies/dgx-a100-x1.json \\\n"
    "      strategies/megatron-22b-x1.json\n";
static const char help_simulate[] =
    "Builds the task graph of one training iteration of MODEL on CLUSTER under STRATEGY (a\n"
    "strategy file in any form, or a plan file: its prediction is reproduced exactly),\n"
    "simulates it and prints the iteration time, throughput, MFU/HFU, peak memory per device\n"
    "with its breakdown and where the time goes (docs/simulator.md).\n"
    "\n"
    "Options:\n"
    "  --json                  one JSON object: iteration_time_s, samples_per_s, tokens_per_s,\n"
    "                          model_flops_per_s_per_device, mfu, hfu, fits,\n"
    "                          peak_memory_bytes, memory, time_breakdown, sim, cost_sources\n"
    "  --trace FILE            write a Chrome/Perfetto trace (ui.perfetto.dev): a track per\n"
    "                          device stream (compute, comm, host) and per link, a memory\n"
    "                          counter per device\n"
    "  --fidelity F            collectives as one aggregated task each (aggregate, default) or\n"
    "                          as their point-to-point steps on the links (expanded)\n"
    "  --costdb DB             use measured operator costs (plansim profile)\n"
    "  --stack NAME|FILE       the software stack (docs/stacks.md): megatron-lm-2021 (default),\n"
    "                          megatron-core, pytorch-fsdp2, llm-foundry-fsdp, deepspeed\n"
    "  --routing R             MoE tokens per expert: uniform, zipf:S, maxvio:V, counts:FILE\n"
    "                          (default: docs/simulator.md, \"Mixture of experts\")\n"
    "  --no-fold               simulate every device (default: identical devices of a\n"
    "                          pipeline stage are simulated once)\n"
    "  --max-tasks N           refuse task graphs larger than N tasks (default 50000000)\n"
    "  --max-memory BYTES      refuse task graphs estimated to need more memory (\"16 GiB\";\n"
    "                          default 3/4 of this machine's physical memory)\n"
    "\n"
    "Stragglers, faults, several iterations (docs/faults.md):\n"
    "  --iterations N          run N iterations; --json adds \"iterations\": per-iteration times,\n"
    "                          their distribution, fault events, async staleness (default 1)\n"
    "  --slow DEVICE=F         DEVICE (name or index) computes F times slower (repeatable)\n"
    "  --slow-link A-B=F       the links between A and B carry F times less (repeatable)\n"
    "  --slow-random SEED:SIGMA  each iteration every device computes exp(SIGMA |z|) times\n"
    "                          slower, z ~ N(0,1) drawn from SEED (reproducible)\n"
    "  --fail DEVICE@TIME      the device fails TIME seconds into the run (\"90\", \"2 min\")\n"
    "  --fail-link A-B@TIME    the links between A and B fail\n"
    "  --join DEVICE@TIME      DEVICE joins as a data-parallel worker at the next iteration\n"
    "                          (DEVICE, A, B: an index or a full name such as node0.gpu5;\n"
    "                          unknown names exit 2; an event after the run's end is\n"
    "                          reported and has no effect)\n"
    "  --detect-timeout T      a lost peer is noticed after T (default 30 s)\n"
    "  --rebuild-time T        re-rank and rebuild the communicators (default 5 s)\n"
    "  --failover-time T       a parameter-server replica takes over (default 1 s)\n"
    "  --restart-time T        relaunch after a failure without redundancy (default 120 s)\n"
    "  --no-elastic            all-reduce jobs restart from a checkpoint instead of rebuilding\n"
    "  --checkpoint-every N    iterations between checkpoints (default 100; 0 = none)\n"
    "  --checkpoint-write-bw B, --checkpoint-read-bw B\n"
    "                          checkpoint bandwidth, aggregate (defaults 2 GB/s and 4 GB/s)\n"
    "\n"
    "Example:\n"
    "  plansim simulate models/gpt-175b.json topologies/dgx-a100-x128.json \\\n"
    "      strategies/megatron-gpt-175b-x128.json --trace trace.json\n";
static const char help_plan[] =
    "Searches strategies for MODEL on CLUSTER, simulates the best one with the full\n"
    "simulator and writes a plan (docs/plan.md) beside the data-parallel and Megatron-grid\n"
    "baselines. The plan is never slower than a baseline: a faster baseline becomes the\n"
    "plan (search.plan_from says so). Without --budget, auto ends within about 40 s.\n"
    "\n"
    "Options:\n"
    "  -o PLAN                 write the plan (plansim.plan/1) atomically; its folder is\n"
    "                          checked before the search\n"
    "  --search S              auto (default: the Alpa optimizer, then MCMC refinement, when\n"
    "                          built; else the grid), alpa, mcmc, grid (every Megatron\n"
    "                          tp x pp x dp x micro-batch x recompute that fits), exhaustive\n"
    "  --budget B              a time (\"60s\", \"2m\", \"1.5h\"; at most 30 days) or a whole\n"
    "                          number of evaluations (\"20000\"; 1 to 1e12); a time is CPU\n"
    "                          time per search thread, not wall time (a loaded machine or a\n"
    "                          stopped process gets the same search); mcmc and grid\n"
    "                          take both, exhaustive evaluations only, alpa a time (for its\n"
    "                          candidate simulations; a note on stderr says when a budget\n"
    "                          has no effect); auto: a time is\n"
    "                          the whole plan's, evaluations go to its MCMC refinement\n"
    "  --seed N                random seed (same seed and evaluation budget: same plan)\n"
    "  --threads N             search chains (mcmc) or ILP solver threads (alpa) in parallel\n"
    "  --init STRATEGY         start the search from this strategy (mcmc, exhaustive)\n"
    "  --fix PARTIAL           a partial strategy whose choices the search keeps\n"
    "  --costdb DB             use measured operator costs (plansim profile)\n"
    "  --stack NAME|FILE       the software stack (docs/stacks.md; default megatron-lm-2021)\n"
    "  --routing R             MoE tokens per expert: uniform, zipf:S, maxvio:V, counts:FILE\n"
    "  --trace FILE            a Chrome/Perfetto trace of the plan\n"
    "  --json                  print the plan as JSON instead of the summary\n"
    "  --progress              progress lines on stderr (phase, evaluations, time left)\n"
    "                          even when stderr is not a terminal\n"
    "  --fp8                   also search FP8 linear layers (the strategy's \"fp8\"), where\n"
    "                          the device has an FP8 rate and the stack FP8 recipes: grid,\n"
    "                          the grid baseline and Alpa's plan (docs/search.md); off:\n"
    "                          BF16 as given\n"
    "  --no-baselines          do not simulate the data-parallel and Megatron-grid baselines\n"
    "                          (the grid baseline stops after 20 s on thousands of GPUs)\n"
    "  --reproducible          leave wall-clock figures (search and simulation seconds,\n"
    "                          proposals/s) out of the plan: the same seed and evaluation\n"
    "                          budget then write a byte-identical file\n"
    "  --verify-every N        debug (mcmc, exhaustive): check every Nth delta simulation\n"
    "                          against a full one; stop with an error on any difference\n"
    "  --max-tasks N           skip strategies whose task graph exceeds N tasks\n"
    "  --max-memory BYTES      skip strategies whose graph needs more memory (default 3/4\n"
    "                          of physical memory)\n"
    "\n"
    "SIGINT or SIGTERM stops the search: the best plan so far is written and plan exits\n"
    "with status 130 (SIGINT) or 143 (SIGTERM); a second signal ends it at once.\n"
    "\n"
    "Example:\n"
    "  plansim plan models/gpt-1.3b.json topologies/dgx-a100-x16.json -o plan.json\n";
const psim_cli_command psim_cli_commands[] = {
    {"plan", psim_cmd_plan, "plansim plan MODEL CLUSTER [options]",
     "search for the fastest strategy and write a plan", help_plan},
    {"simulate", psim_cmd_simulate, "plansim simulate MODEL CLUSTER STRATEGY [options]",
     "predict one training iteration of a strategy", help_simulate},
    {"profile", psim_cmd_profile, "plansim profile [--device cpu|cuda] [options] -o DB",
     "measure operator costs on this machine into a cost database", psim_cmd_profile_help},
    {"sweep", psim_cmd_sweep,
     "plansim sweep SWEEP [-o RESULTS] [--resume] [-j N] [--check BASELINE]",
     "run models x clusters x searchers and collect results", psim_cmd_sweep_help},
    {"export", psim_cmd_export,
     "plansim export PLAN --format plansim|megatron|megatron-bridge|deepspeed|gspmd|torchtitan|... "
     "| --check FILE",
     "turn a plan into a runtime's configuration", psim_cmd_export_help},
    {"report", psim_cmd_report, "plansim report PLAN [-o report.html]",
     "render a plan as a self-contained HTML page", psim_cmd_report_help},
    {"model", psim_cmd_model, "plansim model FAMILY [options] [-o FILE]",
     "generate a model file (gpt, gpt3-mlperf, llama, llama3, mpt, qwen3, bert, moe, qwen3-moe, "
     "mixtral, deepseek-v3, gpt-oss, mlp, alexnet, resnet, inception, dlrm)",
     "Writes a plansim.model/1 file (docs/model.md) to FILE, or to standard output.\n\n"
     "  -o FILE   write FILE atomically instead of standard output\n\n"
     "--flash replaces the attention core (scores matmul, softmax, dropout, context matmul,\n"
     "tagged attn_core) with one fused attention op. Unknown families or options exit 2.\n\n"},
    {"cluster", psim_cmd_cluster, "plansim cluster PRESET [--nodes N] [options] [-o FILE]",
     "generate a cluster file from a preset", psim_cmd_cluster_help},
    {"expand", psim_cmd_expand, "plansim expand MODEL CLUSTER STRATEGY [-o FILE]",
     "print the explicit form of a strategy", help_expand},
    {"check", psim_cmd_check, "plansim check FILE...",
     "validate model, cluster, strategy, plan and cost database files", help_check},
    {NULL, NULL, NULL, NULL, NULL}};

const psim_cli_command *psim_cli_find(const char *name) {
  for (const psim_cli_command *c = psim_cli_commands; c->name; c++)
    if (strcmp(c->name, name) == 0)
      return c;
  return NULL;
}

static void print_usage(FILE *out) {
  fprintf(out, "usage: plansim COMMAND [ARGS]\n\n"
               "Predicts and searches parallel training strategies for deep-learning models.\n\n"
               "commands:\n");
  for (const psim_cli_command *c = psim_cli_commands; c->name; c++)
    fprintf(out, "  %-9s %s\n", c->name, c->summary);
  fprintf(out, "\n'plansim help COMMAND' shows a command's options. Exit status: 0 success,\n"
               "1 the work failed, 2 bad input or usage, 130/143 interrupted by SIGINT/SIGTERM.\n");
}

static int print_help(const char *name) {
  const psim_cli_command *c = psim_cli_find(name);
  if (!c) {
    fprintf(stderr, "plansim: unknown command '%s'; see 'plansim --help'\n", name);
    return 2;
  }
  printf("usage: %s\n\n%s.\n", c->synopsis, c->summary);
  if (c->help)
    printf("\n%s", c->help);
  if (c->run == psim_cmd_model)
    psim_cmd_model_help(stdout); /* the families' options, from models/registry.c */
  return 0;
}

/* Standard output is buffered: a full disk or /dev/full shows only when it
 * is flushed, after the command returned OK, and exit() would drop that
 * error (issue 24: exit 0 and an empty file). Returns false when a write,
 * the flush or the close failed, and records why when record is set. */
static bool stdout_closed_ok(bool record) {
  errno = 0;
  bool ok = fflush(stdout) == 0 && !ferror(stdout);
  int e = errno;
  if (fclose(stdout) != 0 && ok) {
    ok = false;
    e = errno;
  }
  if (!ok && record)
    psim_error(PSIM_EIO, "writing to standard output failed: %s", e ? strerror(e) : "write error");
  return ok;
}

/* For the help and version paths, which have no command status. */
static int finish(int code) {
  if (stdout_closed_ok(true))
    return code;
  fprintf(stderr, "plansim: %s\n", psim_error_message());
  return code ? code : 1;
}

static int run_command(const psim_cli_command *c, int argc, char **argv) {
  install_signal_handlers();
  psim_status s = c->run(argc - 1, argv + 1);
  if (s == PSIM_OK && psim_cli_signal)
    s = psim_error(PSIM_EINTERRUPTED, "interrupted");
  if (!stdout_closed_ok(s == PSIM_OK) && s == PSIM_OK) /* else keep the first error */
    s = PSIM_EIO;
  if (s != PSIM_OK) {
    static char msg[4096]; /* names in messages may hold control characters */
    psim_cli_escape(psim_error_message(), true, msg, sizeof msg);
    fprintf(stderr, "plansim %s: %s\n", c->name, *msg ? msg : psim_status_name(s));
  }
  return exit_code(s);
}

int main(int argc, char **argv) {
  psim_json_init_hooks();
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    print_usage(stdout);
    return finish(0);
  }
  if (strcmp(cmd, "--version") == 0) {
    printf("plansim %s\n", PSIM_VERSION);
    return finish(0);
  }
  if (strcmp(cmd, "help") == 0) {
    if (argc < 3) {
      print_usage(stdout);
      return finish(0);
    }
    return finish(print_help(argv[2]));
  }
  const psim_cli_command *c = psim_cli_find(cmd);
  if (!c) {
    fprintf(stderr, "plansim: unknown command '%s'; see 'plansim --help'\n", cmd);
    return 2;
  }
  for (int i = 2; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
      return finish(print_help(cmd));
  return run_command(c, argc, argv);
}
