/* cmd_sweep.c - plansim sweep SWEEP [-o DIR] [--resume] [-j N] [--check BASELINE]:
 * runs the cases of a plansim.sweep/1 file in forked processes (-j N), or over
 * MPI ranks under mpirun (rank 0 hands out cases one at a time and writes the
 * results; the others run them), then optionally checks against a baseline. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "psim_config.h"
#include "search/sweep/sweep.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/engine/taskgraph.h"

#if PSIM_HAVE_MPI
#include <mpi.h>
#endif

const char psim_cmd_sweep_help[] =
    "Runs every case of a plansim.sweep/1 file (docs/sweep.md): the cartesian product of\n"
    "its models (files, or generators with the options of 'plansim model'), clusters\n"
    "(files, or presets with node counts), searchers, seeds and budgets; at most\n"
    "1,000,000 cases. Each case runs the search 'plansim plan --search NAME' runs (auto:\n"
    "Alpa, then MCMC refinement), without the baselines, writes the plan to\n"
    "DIR/plans/caseNNNN.json and adds one row to DIR/results.csv and DIR/results.jsonl as\n"
    "soon as it finishes (case, key, model, cluster, devices, searcher, seed, budget,\n"
    "status, error, iteration time, throughput, MFU, peak memory, fits, evaluations, plan\n"
    "file, search wall time). A failing case is a row with status \"failed\" and its error;\n"
    "the sweep goes on. When the sweep ends the files are rewritten sorted by case, so\n"
    "every way of running it (resumed, -j N, MPI) gives the same rows.\n"
    "\n"
    "Under mpirun (when plansim was built with MPI) the cases are spread over the ranks:\n"
    "rank 0 hands them out one at a time as ranks become free and writes the results.\n"
    "\n"
    "Options:\n"
    "  -o DIR            results folder (default: the sweep file's name + \"-results\")\n"
    "  --resume          keep the rows of an interrupted run (SIGINT or SIGKILL) and run\n"
    "                    only the missing cases; without it the results start empty\n"
    "  -j N              run N cases at once in separate processes (default 1)\n"
    "  --check BASELINE  after the sweep, compare with a previous results.jsonl (or its\n"
    "                    folder): exit 1 when a case is missing, fails, stops fitting, is\n"
    "                    slower or has a lower MFU beyond the tolerance\n"
    "  --tolerance X     relative tolerance of --check (default 0.01 = 1%)\n"
    "\n"
    "Exit status: 0 done (failed cases included), 1 a --check regression, 2 bad input,\n"
    "130 interrupted (run again with --resume).\n"
    "\n"
    "Example:\n"
    "  plansim sweep sweeps/gpt-scaling.json -o gpt-scaling -j 2\n"
    "  mpirun -n 4 plansim sweep sweeps/gpt-scaling.json -o gpt-scaling\n"
    "  plansim sweep tests/sweeps/smoke.json -o now --check baseline/results.jsonl\n";

typedef struct sweep_args {
  const char *file, *out, *check;
  bool resume;
  int32_t jobs;
  double tolerance;
  char default_out[1024];
} sweep_args;

static psim_status parse_number(const char *opt, const char *val, double lo, double hi,
                                double *out) {
  char *end;
  *out = strtod(val, &end);
  if (end == val || *end || !(*out >= lo && *out <= hi))
    return psim_cli_usage("sweep", "%s wants a number in [%g, %g], not '%s'", opt, lo, hi, val);
  return PSIM_OK;
}

static psim_status set_value(sweep_args *a, const char *opt, const char *val) {
  double v;
  if (strcmp(opt, "-o") == 0)
    a->out = val;
  else if (strcmp(opt, "--check") == 0)
    a->check = val;
  else if (strcmp(opt, "--tolerance") == 0)
    PSIM_CHECK(parse_number(opt, val, 0, 10, &a->tolerance));
  else {
    PSIM_CHECK(parse_number(opt, val, 1, 1024, &v));
    if (v != (int32_t)v)
      return psim_cli_usage("sweep", "-j wants a whole number of processes, not '%s'", val);
    a->jobs = (int32_t)v;
  }
  return PSIM_OK;
}

static void default_out(sweep_args *a) {
  const char *b = strrchr(a->file, '/');
  b = b ? b + 1 : a->file;
  size_t n = strlen(b);
  if (n > 5 && strcmp(b + n - 5, ".json") == 0)
    n -= 5;
  snprintf(a->default_out, sizeof a->default_out, "%.*s-results", (int)n, b);
  a->out = a->default_out;
}

/* The --check baseline is read only after every case ran: refuse a missing
 * one before the sweep starts. */
static psim_status check_baseline(const char *path) {
  struct stat st;
  char jsonl[4096];
  if (stat(path, &st) != 0)
    return psim_cli_usage("sweep", "--check %s: %s; expected a results.jsonl or its folder", path,
                          strerror(errno));
  snprintf(jsonl, sizeof jsonl, "%s/results.jsonl", path);
  if (S_ISDIR(st.st_mode) && access(jsonl, R_OK) != 0)
    return psim_cli_usage("sweep", "--check %s: a folder without a readable results.jsonl", path);
  return PSIM_OK;
}

static psim_status parse_args(int argc, char **argv, sweep_args *a) {
  a->jobs = 1;
  a->tolerance = 0.01;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--resume") == 0) {
      a->resume = true;
    } else if (!strcmp(arg, "-o") || !strcmp(arg, "-j") || !strcmp(arg, "--check") ||
               !strcmp(arg, "--tolerance")) {
      PSIM_CHECK(psim_cli_need_value("sweep", argc, argv, i));
      PSIM_CHECK(set_value(a, arg, argv[++i]));
    } else {
      PSIM_CHECK(psim_cli_positional("sweep", arg, &a->file));
    }
  }
  if (!a->file)
    return psim_cli_usage("sweep", "expected SWEEP (a plansim.sweep/1 file)");
  if (!a->out)
    default_out(a);
  if (a->check)
    PSIM_CHECK(check_baseline(a->check));
  return psim_file_check_output_dir("-o", a->out); /* before any case runs */
}

/* ---- progress ---- */

typedef struct sweep_run {
  const sweep_args *a;
  psim_sweep sweep;
  psim_sweep_results res;
  int32_t ran, failed;
} sweep_run;

static psim_status record(sweep_run *r, const psim_sweep_row *row) {
  PSIM_CHECK(psim_sweep_results_append(&r->res, row));
  r->ran++;
  r->failed += strcmp(row->status, "ok") != 0;
  if (psim_cli_stderr_is_tty())
    fprintf(stderr, "[%d/%d] %s: %s\n", r->res.n_rows, r->sweep.n_cases, row->key, row->status);
  return PSIM_OK;
}

/* ---- forked workers ---- */

typedef struct job {
  pid_t pid;
  int fd;
  int32_t index;
  char buf[8192];
  size_t len;
} job;

/* In the child: run the case, send its JSON line, exit. */
static void child(const sweep_run *r, int32_t i, int fd) {
  psim_sweep_row row;
  char line[8192];
  signal(SIGPIPE, SIG_DFL);
  if (psim_sweep_run_case(&r->sweep, i, r->a->out, &row) != PSIM_OK)
    _exit(3); /* interrupted: no row, the case runs again on --resume */
  if (psim_sweep_row_jsonl(&row, line, sizeof line) != PSIM_OK)
    _exit(4);
  size_t len = strlen(line), done = 0;
  while (done < len) {
    ssize_t w = write(fd, line + done, len - done);
    if (w <= 0 && errno != EINTR)
      _exit(5);
    done += w > 0 ? (size_t)w : 0;
  }
  _exit(0);
}

static psim_status spawn(sweep_run *r, job *j, int32_t i) {
  int p[2];
  if (pipe(p) != 0)
    return psim_error(PSIM_EIO, "sweep: pipe failed: %s", strerror(errno));
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(p[0]);
    close(p[1]);
    return psim_error(PSIM_EIO, "sweep: fork failed: %s", strerror(errno));
  }
  if (pid == 0) {
    close(p[0]);
    child(r, i, p[1]);
  }
  close(p[1]);
  *j = (job){pid, p[0], i, "", 0};
  return PSIM_OK;
}

/* Reads what the child sent (until EOF); returns false while more may come. */
static bool drain(job *j) {
  for (;;) {
    ssize_t n = read(j->fd, j->buf + j->len, sizeof j->buf - 1 - j->len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return false;
    if (n <= 0 || j->len + (size_t)n >= sizeof j->buf - 1)
      break;
    j->len += (size_t)n;
  }
  j->buf[j->len] = '\0';
  return true;
}

/* A finished child: its row, or a failed row when it died without one. */
static psim_status reap(sweep_run *r, job *j) {
  int status = 0;
  while (waitpid(j->pid, &status, 0) < 0 && errno == EINTR) {
  }
  close(j->fd);
  psim_sweep_row row;
  if (j->len > 0 && psim_sweep_row_parse(j->buf, &row) == PSIM_OK && row.index == j->index)
    return record(r, &row);
  psim_error_clear();
  bool stopped_by_signal =
      WIFSIGNALED(status) && (WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGTERM);
  if (psim_interrupted() || stopped_by_signal || (WIFEXITED(status) && WEXITSTATUS(status) == 3))
    return PSIM_OK; /* interrupted case: not recorded, --resume runs it again */
  psim_sweep_row_for_case(&r->sweep, j->index, &row);
  if (WIFSIGNALED(status))
    snprintf(row.error, sizeof row.error, "the case's process died of signal %d", WTERMSIG(status));
  else
    snprintf(row.error, sizeof row.error, "the case's process exited with status %d",
             WEXITSTATUS(status));
  return record(r, &row);
}

/* A signal sent to the sweep alone (kill PID, a job scheduler's SIGTERM) reached
 * only this process: the running cases, in their own processes, would run to the
 * end of their budgets (issue 24). The first time the sweep sees the interrupt,
 * it passes the signal on to them; each stops as plan does and sends no row. */
static void forward_interrupt(job *jobs, int32_t n, bool *forwarded) {
  if (*forwarded || !psim_interrupted())
    return;
  *forwarded = true;
  int sig = psim_cli_signal ? psim_cli_signal : SIGTERM;
  for (int32_t k = 0; k < n; k++)
    kill(jobs[k].pid, sig);
}

/* Waits until one running job ends; returns its slot. */
static psim_status wait_one(sweep_run *r, job *jobs, int32_t n, int32_t *slot) {
  struct pollfd fds[1024];
  static bool forwarded;
  if (n <= 0 || n > 1024)
    return psim_error(PSIM_EFAILED, "sweep: %d jobs to wait for", n);
  for (int32_t k = 0; k < n; k++)
    fds[k] = (struct pollfd){jobs[k].fd, POLLIN, 0};
  for (;;) {
    forward_interrupt(jobs, n, &forwarded);
    int rc = poll(fds, (nfds_t)n, 250); /* 250 ms: a signal between the check and poll */
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc < 0)
      return psim_error(PSIM_EIO, "sweep: poll failed: %s", strerror(errno));
    for (int32_t k = 0; k < n; k++)
      if (fds[k].revents && drain(&jobs[k])) {
        *slot = k;
        return reap(r, &jobs[k]);
      }
  }
}

static psim_status run_forked(sweep_run *r) {
  int32_t n = 0, next = 0, cap = r->a->jobs;
  job *jobs = psim_calloc((size_t)cap, sizeof *jobs);
  if (!jobs)
    return psim_error(PSIM_ENOMEM, "out of memory");
  psim_status st = PSIM_OK;
  for (;;) {
    while (st == PSIM_OK && n < cap && next < r->sweep.n_cases && !psim_interrupted()) {
      if (r->res.done[next]) {
        next++;
        continue;
      }
      st = spawn(r, &jobs[n], next++);
      n += st == PSIM_OK;
    }
    if (n == 0)
      break;
    int32_t slot = 0;
    psim_status w = wait_one(r, jobs, n, &slot);
    st = st == PSIM_OK ? w : st;
    jobs[slot] = jobs[--n];
  }
  psim_free(jobs);
  return st;
}

/* ---- MPI ---- */

#if PSIM_HAVE_MPI
enum { TAG_READY = 1, TAG_CASE = 2, LINE_MAX_ = 8192 };

static bool under_mpirun(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_SIZE");
}

/* Rank 0: hands out case indices as ranks ask, records the rows they return. */
static psim_status mpi_master(sweep_run *r, int size) {
  int32_t next = 0, stopped = 0;
  psim_status st = PSIM_OK;
  char line[LINE_MAX_];
  while (stopped < size - 1) {
    MPI_Status ms;
    MPI_Recv(line, LINE_MAX_, MPI_CHAR, MPI_ANY_SOURCE, TAG_READY, MPI_COMM_WORLD, &ms);
    psim_sweep_row row;
    if (line[0] && psim_sweep_row_parse(line, &row) == PSIM_OK && st == PSIM_OK)
      st = record(r, &row);
    while (next < r->sweep.n_cases && r->res.done[next])
      next++;
    int32_t give = next < r->sweep.n_cases && st == PSIM_OK && !psim_interrupted() ? next++ : -1;
    stopped += give < 0;
    MPI_Send(&give, 1, MPI_INT32_T, ms.MPI_SOURCE, TAG_CASE, MPI_COMM_WORLD);
  }
  return st;
}

/* Other ranks: ask for a case, run it, send its row with the next request. */
static psim_status mpi_worker(const sweep_run *r) {
  char line[LINE_MAX_] = "";
  for (;;) {
    MPI_Send(line, (int)strlen(line) + 1, MPI_CHAR, 0, TAG_READY, MPI_COMM_WORLD);
    int32_t i;
    MPI_Recv(&i, 1, MPI_INT32_T, 0, TAG_CASE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (i < 0)
      return PSIM_OK;
    psim_sweep_row row;
    line[0] = '\0';
    if (psim_sweep_run_case(&r->sweep, i, r->a->out, &row) == PSIM_OK)
      PSIM_CHECK(psim_sweep_row_jsonl(&row, line, sizeof line));
  }
}
#endif

/* ---- the command ---- */

static psim_status finish(sweep_run *r, psim_status st) {
  psim_status f = psim_sweep_results_finish(&r->res);
  st = st == PSIM_OK ? f : st;
  if (st == PSIM_OK && psim_interrupted())
    st = psim_error(PSIM_EINTERRUPTED,
                    "sweep interrupted: %d of %d cases done; run again with "
                    "--resume",
                    r->res.n_rows, r->sweep.n_cases);
  if (st != PSIM_OK)
    return st;
  printf("sweep %s: %d cases (%d resumed, %d run, %d failed); results in %s/results.csv and "
         "%s/results.jsonl\n",
         r->sweep.name, r->sweep.n_cases, r->res.n_resumed, r->ran, r->failed, r->a->out,
         r->a->out);
  if (!r->a->check)
    return PSIM_OK;
  int32_t regressions = 0;
  fflush(stdout);
  PSIM_CHECK(psim_sweep_check(r->a->check, r->res.rows, r->res.n_rows, r->a->tolerance, stdout,
                              &regressions));
  if (regressions > 0)
    return psim_error(PSIM_EFAILED, "%d regressions against %s", regressions, r->a->check);
  return PSIM_OK;
}

static psim_status run_master(sweep_run *r, int mpi_size) {
  PSIM_CHECK(psim_sweep_results_open(&r->res, r->a->out, &r->sweep, r->a->resume));
  psim_status st = PSIM_OK;
#if PSIM_HAVE_MPI
  if (mpi_size > 1)
    st = mpi_master(r, mpi_size);
  else
#endif
    st = run_forked(r);
  (void)mpi_size;
  return finish(r, st);
}

static psim_status run(sweep_run *r) {
  int rank = 0, size = 1;
#if PSIM_HAVE_MPI
  bool mpi = under_mpirun();
  if (mpi) {
    MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  psim_status st = rank == 0 ? run_master(r, size) : mpi_worker(r);
  if (mpi)
    MPI_Finalize();
  return st;
#else
  return run_master(r, size + rank);
#endif
}

psim_status psim_cmd_sweep(int argc, char **argv) {
  sweep_args a;
  memset(&a, 0, sizeof a);
  PSIM_CHECK(parse_args(argc, argv, &a));
  sweep_run r;
  memset(&r, 0, sizeof r);
  r.a = &a;
  r.res.jsonl_fd = r.res.csv_fd = -1;
  psim_status st = psim_sweep_load(a.file, &r.sweep);
  if (st == PSIM_OK)
    st = run(&r);
  psim_sweep_results_close(&r.res);
  psim_sweep_destroy(&r.sweep);
  return st;
}
