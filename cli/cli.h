/* cli.h - the plansim executable: one source file per subcommand.
 *
 * Each command takes (argc, argv) with argv[0] the command name and returns a
 * psim_status; main() prints psim_error_message() for failures and maps the
 * status to the exit code (0 ok, 1 the work failed, 2 bad input or usage). */
#ifndef PSIM_CLI_H
#define PSIM_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sim/core/status.h"

typedef psim_status (*psim_cli_fn)(int argc, char **argv);

typedef struct psim_cli_command {
  const char *name;
  psim_cli_fn run;
  const char *synopsis; /* one line: "plansim simulate MODEL CLUSTER STRATEGY [options]" */
  const char *summary;  /* one sentence for plansim --help */
  const char *help;     /* full help text for plansim help COMMAND */
} psim_cli_command;

/* The signal (SIGINT or SIGTERM) that asked plansim to stop, 0 when none
 * (main.c). Its handler also sets psim_set_interrupt(1); main maps
 * PSIM_EINTERRUPTED to exit 130 (SIGINT) or 143 (SIGTERM). */
extern volatile sig_atomic_t psim_cli_signal;

/* Command table (main.c). */
extern const psim_cli_command psim_cli_commands[];
const psim_cli_command *psim_cli_find(const char *name);

psim_status psim_cmd_check(int argc, char **argv);
psim_status psim_cmd_model(int argc, char **argv);
void psim_cmd_model_help(FILE *out); /* the model families' options (cmd_model.c) */
psim_status psim_cmd_cluster(int argc, char **argv);
extern const char psim_cmd_cluster_help[]; /* cmd_cluster.c */
extern const char psim_cmd_profile_help[]; /* cmd_profile.c */
psim_status psim_cmd_expand(int argc, char **argv);
psim_status psim_cmd_simulate(int argc, char **argv);
psim_status psim_cmd_plan(int argc, char **argv);
psim_status psim_cmd_profile(int argc, char **argv);
psim_status psim_cmd_unbuilt(int argc, char **argv); /* commands registered, not built yet */
psim_status psim_cmd_export(int argc, char **argv);  /* cmd_export.c */
psim_status psim_cmd_sweep(int argc, char **argv);   /* cmd_sweep.c */
psim_status psim_cmd_report(int argc, char **argv);  /* cmd_report.c */
extern const char psim_cmd_export_help[], psim_cmd_sweep_help[], psim_cmd_report_help[];

/* Limits (cli_limits.c): the default --max-memory is 3/4 of this machine's
 * physical memory (psim_sim_options.max_graph_bytes); --max-tasks N and
 * --max-memory BYTES ("16 GiB") set them for simulate and plan. */
struct psim_sim_options;
void psim_cli_default_limits(struct psim_sim_options *o);
bool psim_cli_is_limit_option(const char *opt);
psim_status psim_cli_limit_option(const char *command, const char *opt, const char *val,
                                  struct psim_sim_options *o);

/* Usage error for a command: records the message, returns PSIM_EINPUT. */
psim_status psim_cli_usage(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The value of the option argv[i]: a usage error when it is missing or is
 * itself an option ("export P --format -o F" takes '-o' for no format). */
psim_status psim_cli_need_value(const char *command, int argc, char **argv, int i);
/* An integer option value in [min, max]: decimal digits only, overflow
 * (ERANGE) refused; else a usage error naming opt, the range and val. */
psim_status psim_cli_parse_int(const char *command, const char *opt, const char *val, int64_t min,
                               int64_t max, int64_t *out);
/* Refuses (PSIM_EINPUT, exit 2) an output that is one of the inputs or
 * another output: the same device and inode when the file exists, the same
 * real folder and name when it does not yet. NULL and "-" entries are
 * skipped, and so are devices and FIFOs (/dev/null twice is fine). Run it
 * before any work (files.c). O((n_in + n_out) * n_out) stat calls. */
psim_status psim_cli_check_distinct(const char *const *inputs, int n_in, const char *const *outputs,
                                    int n_out);
/* s for a terminal: control bytes (ESC, CR, ...) written as \xNN, newlines
 * and tabs too unless keep_newlines; cut to fit size (>= 8) with its NUL. */
void psim_cli_escape(const char *s, bool keep_newlines, char *out, size_t size);
/* True when stderr is a terminal (progress lines are shown only then). */
bool psim_cli_stderr_is_tty(void);
/* Writes a count for people: exact below 1e6, else three significant digits
 * with an exponent ("1.32e9"). */
void psim_cli_format_count(double n, char *out, size_t size);

#endif
