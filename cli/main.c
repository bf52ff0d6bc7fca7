/* main.c - plansim entry point: command dispatch, help, exit codes. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "psim_config.h"

const psim_cli_command psim_cli_commands[] = {
    {"plan", psim_cmd_plan, "plansim plan MODEL CLUSTER [options]",
     "search for the fastest strategy and write a plan", NULL},
    {"simulate", psim_cmd_simulate, "plansim simulate MODEL CLUSTER STRATEGY [options]",
     "predict one training iteration of a strategy", NULL},
    {"profile", psim_cmd_profile, "plansim profile [--device cpu|cuda] [options] -o DB",
     "measure operator costs on this machine into a cost database", NULL},
    {"sweep", psim_cmd_unbuilt, "plansim sweep SWEEP [-o RESULTS] [--resume] [-j N]",
     "run models x clusters x searchers and collect results", NULL},
    {"export", psim_cmd_unbuilt, "plansim export PLAN --format megatron|deepspeed|flexflow|gspmd",
     "turn a plan into a runtime's configuration", NULL},
    {"report", psim_cmd_unbuilt, "plansim report PLAN [-o report.html]",
     "render a plan as a self-contained HTML page", NULL},
    {"model", psim_cmd_model, "plansim model FAMILY [options] [-o FILE]",
     "generate a model file (gpt, llama, bert, moe, mlp, alexnet, resnet, inception, dlrm)", NULL},
    {"cluster", psim_cmd_cluster, "plansim cluster PRESET [--nodes N] [options] [-o FILE]",
     "generate a cluster file from a preset", NULL},
    {"expand", psim_cmd_expand, "plansim expand MODEL CLUSTER STRATEGY [-o FILE]",
     "print the explicit form of a strategy", NULL},
    {"check", psim_cmd_check, "plansim check FILE...",
     "validate model, cluster, strategy, plan and cost database files", NULL},
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
               "1 the work failed, 2 bad input or usage.\n");
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
  return 0;
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
    return 0;
  }
  if (strcmp(cmd, "--version") == 0) {
    printf("plansim %s\n", PSIM_VERSION);
    return 0;
  }
  if (strcmp(cmd, "help") == 0) {
    if (argc < 3) {
      print_usage(stdout);
      return 0;
    }
    return print_help(argv[2]);
  }
  const psim_cli_command *c = psim_cli_find(cmd);
  if (!c) {
    fprintf(stderr, "plansim: unknown command '%s'; see 'plansim --help'\n", cmd);
    return 2;
  }
  for (int i = 2; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
      return print_help(cmd);
  psim_status s = c->run(argc - 1, argv + 1);
  if (s != PSIM_OK) {
    const char *msg = psim_error_message();
    fprintf(stderr, "plansim %s: %s\n", cmd, *msg ? msg : psim_status_name(s));
  }
  return psim_status_exit_code(s);
}
