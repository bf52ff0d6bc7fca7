/* cmd_profile.c - plansim profile: measure kernel times into a cost database
 * (docs/profiling.md). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "costdb/costdb.h"
#include "costdb/profile/profile.h"
#include "psim_config.h"
#include "sim/core/json.h"
#include "sim/ir/cluster.h"
#include "sim/ir/model.h"

const char psim_cmd_profile_help[] =
    "Runs the real kernels of every shard shape a model can take on a cluster (or of a\n"
    "standard grid) on this machine and records median, spread and count per shape in a\n"
    "plansim.costdb/1 file, which 'simulate --costdb' and 'plan --costdb' then use.\n"
    "\n"
    "CPU: OpenBLAS SGEMM/DGEMM (bf16 when OpenBLAS exports cblas_sbgemm) for matmul,\n"
    "attention (batched GEMMs + softmax) and conv2d (im2col + GEMM), the project's own\n"
    "loops for element-wise, dropout, softmax, layernorm, rmsnorm, embedding, cross\n"
    "entropy, data movement and the Adam update; one thread = one simulated device.\n"
    "CUDA (when built with it): cublasGemmEx in fp32/fp16/bf16 and small CUDA kernels.\n"
    "\n"
    "Options:\n"
    "  --device cpu|cuda        where to measure (default cpu; cuda fails with status 1\n"
    "                           when no GPU or no CUDA library is present)\n"
    "  --model M --cluster C    every shard shape: each op, each power-of-two split of\n"
    "                           its splittable dims with at most C's device count\n"
    "  --grid                   the standard grid (GEMMs 64..4096, memory-bound sizes)\n"
    "  --dtype DT               measure in DT instead of the model's dtypes (e.g. fp32\n"
    "                           on CPUs without bf16 GEMM)\n"
    "  --budget S               timing budget per shape in seconds (default 0.05)\n"
    "  --max-flops F            larger kernels run on a slice and scale (default 4e9)\n"
    "  --resume                 continue an interrupted run (shapes in DB are skipped;\n"
    "                           this is also the default)\n"
    "  --force                  measure again shapes that DB already holds\n"
    "  --collectives            also measure a shared-memory ring all-reduce between\n"
    "                           threads (one per device, memcpy + add) at 64 KiB, 1 MiB\n"
    "                           and 16 MiB for groups of 2, 4, ... up to the devices per\n"
    "                           node of C (at most this machine's cores), stored as\n"
    "                           collective tables; may be given alone (CPU only)\n"
    "  -o DB                    the cost database; merged into when it exists\n"
    "\n"
    "A progress line is shown on a terminal. Ctrl-C keeps what was measured (the file is\n"
    "saved every few seconds and at exit, atomically and under a file lock, so two\n"
    "profile runs may write one DB at once).\n"
    "\n"
    "Example:\n"
    "  plansim profile --model models/mlp.json --cluster topologies/cpu-x4.json -o "
    "cpu.costdb.json\n";

typedef struct profile_args {
  const char *device, *model, *cluster, *out, *dtype;
  bool grid, resume, force, collectives;
  psim_profile_opts opts;
} profile_args;

static psim_status need_value(int argc, char **argv, int i) {
  return psim_cli_need_value("profile", argc, argv, i);
}

static psim_status parse_number(const char *opt, const char *v, double min, double *out) {
  char *end = NULL;
  double d = strtod(v, &end);
  if (!end || *end || !(d >= min))
    return psim_cli_usage("profile", "%s expects a number >= %g, found '%s'", opt, min, v);
  *out = d;
  return PSIM_OK;
}

static psim_status parse_option(int argc, char **argv, int *i, profile_args *a) {
  const char *o = argv[*i];
  const char **str = !strcmp(o, "--device")                         ? &a->device
                     : !strcmp(o, "--model")                        ? &a->model
                     : !strcmp(o, "--cluster")                      ? &a->cluster
                     : !strcmp(o, "--dtype")                        ? &a->dtype
                     : (!strcmp(o, "-o") || !strcmp(o, "--output")) ? &a->out
                                                                    : NULL;
  if (str) {
    PSIM_CHECK(need_value(argc, argv, *i));
    *str = argv[++*i];
    return PSIM_OK;
  }
  if (!strcmp(o, "--budget") || !strcmp(o, "--max-flops")) {
    PSIM_CHECK(need_value(argc, argv, *i));
    double *dst = o[2] == 'b' ? &a->opts.budget_s : &a->opts.max_flops;
    return parse_number(o, argv[++*i], o[2] == 'b' ? 1e-4 : 1e6, dst);
  }
  bool *flag = !strcmp(o, "--grid")          ? &a->grid
               : !strcmp(o, "--resume")      ? &a->resume
               : !strcmp(o, "--force")       ? &a->force
               : !strcmp(o, "--collectives") ? &a->collectives
                                             : NULL;
  if (!flag)
    return psim_cli_usage("profile", "unknown option '%s'", o);
  *flag = true;
  return PSIM_OK;
}

static psim_status parse_args(int argc, char **argv, profile_args *a) {
  memset(a, 0, sizeof *a);
  a->device = "cpu";
  psim_profile_opts_init(&a->opts);
  for (int i = 1; i < argc; i++)
    PSIM_CHECK(parse_option(argc, argv, &i, a));
  if (!a->out)
    return psim_cli_usage("profile", "missing -o DB (the cost database to write)");
  if (strcmp(a->device, "cpu") != 0 && strcmp(a->device, "cuda") != 0)
    return psim_cli_usage("profile", "--device expects cpu or cuda, found '%s'", a->device);
  if ((a->model == NULL) != (a->cluster == NULL) || (a->grid && a->model) ||
      (!a->grid && !a->model && !a->collectives))
    return psim_cli_usage("profile", "give either --model MODEL --cluster CLUSTER, or --grid "
                                     "(or --collectives alone)");
  if (a->collectives && strcmp(a->device, "cpu") != 0)
    return psim_cli_usage("profile", "--collectives measures CPU threads; use --device cpu");
  if (a->resume && a->force)
    return psim_cli_usage("profile", "--resume and --force exclude each other");
  PSIM_CHECK(psim_file_check_output("-o", a->out)); /* before measuring for minutes */
  const char *ins[] = {a->model, a->cluster};
  return psim_cli_check_distinct(ins, 2, &a->out, 1);
}

/* Largest all-reduce group for --collectives: the devices of one node of the
 * cluster when given, at most this machine's online cores, at least 2. */
static psim_status max_group(const profile_args *a, int32_t *out) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int32_t g = cores > 1 ? (int32_t)cores : 2;
  if (a->cluster) {
    psim_cluster c;
    psim_cluster_init(&c);
    psim_status s = psim_cluster_load(a->cluster, &c);
    int32_t per_node = c.devices_per_node > 0 ? c.devices_per_node : c.n_devices;
    psim_cluster_destroy(&c);
    PSIM_CHECK(s);
    g = per_node < g ? per_node : g;
  }
  *out = g < 2 ? 2 : g;
  return PSIM_OK;
}

static psim_status profile_collectives(const profile_args *a, psim_costdb *db) {
  int32_t g;
  PSIM_CHECK(max_group(a, &g));
  PSIM_CHECK(psim_profile_cpu_collectives(g, &a->opts, db));
  PSIM_CHECK(psim_costdb_save(db, a->out));
  printf("%s: all-reduce tables for groups of 2..%d threads\n", a->out, g);
  return PSIM_OK;
}

static psim_status collect_keys(const profile_args *a, psim_dtype dt, psim_key_set *keys) {
  if (!a->grid && !a->model)
    return PSIM_OK; /* --collectives alone */
  if (a->grid)
    return psim_profile_keys_grid(dt == PSIM_DTYPE_COUNT ? PSIM_DTYPE_FP32 : dt, keys);
  psim_model m;
  psim_cluster c;
  psim_model_init(&m);
  psim_cluster_init(&c);
  psim_status s = psim_model_load(a->model, &m);
  if (s == PSIM_OK)
    s = psim_cluster_load(a->cluster, &c);
  if (s == PSIM_OK)
    s = psim_profile_keys_model(&m, &c, dt, keys);
  psim_model_destroy(&m);
  psim_cluster_destroy(&c);
  return s;
}

/* Picks the backend; fails (exit 1) when the device is absent. */
static psim_status pick_backend(const profile_args *a, psim_costdb_fingerprint *fp,
                                psim_profile_measure_fn *measure) {
  if (strcmp(a->device, "cpu") == 0) {
    *measure = psim_profile_cpu_measure;
    return psim_profile_cpu_fingerprint(fp);
  }
  /* loads the CUDA profiler module (dlopen) on this first call; fails clearly without it */
  PSIM_CHECK(psim_profile_cuda_available(a->opts.device_index));
  *measure = psim_profile_cuda_measure;
  return psim_profile_cuda_fingerprint(a->opts.device_index, fp);
}

static psim_status open_db(const profile_args *a, psim_costdb *db) {
  if (a->force || access(a->out, F_OK) != 0)
    return PSIM_OK; /* nothing to skip; saving still merges into the file */
  return psim_costdb_load(a->out, db);
}

static void report(const profile_args *a, const psim_profile_stats *st) {
  printf("%s: measured %zu shapes (%zu scaled from a slice), skipped %zu already present, "
         "%zu unsupported, in %.1f s\n",
         a->out, st->measured, st->scaled, st->skipped, st->unsupported, st->wall_s);
  if (st->unsupported)
    fprintf(stderr, "plansim profile: %zu shapes not measured: %s\n", st->unsupported,
            psim_error_message());
}

static psim_status run_profile(profile_args *a, psim_costdb *db, psim_key_set *keys) {
  psim_dtype dt = PSIM_DTYPE_COUNT;
  if (a->dtype && psim_costdb_dtype_parse(a->dtype, &dt) != PSIM_OK)
    return psim_cli_usage("profile", "--dtype: unknown dtype '%s'", a->dtype);
  psim_profile_measure_fn measure = NULL;
  psim_costdb_fingerprint fp;
  PSIM_CHECK(pick_backend(a, &fp, &measure));
  PSIM_CHECK(open_db(a, db));
  db->fp = fp;
  PSIM_CHECK(collect_keys(a, dt, keys));
  a->opts.progress = psim_cli_stderr_is_tty();
  a->opts.save_path = a->out;
  /* main's SIGINT/SIGTERM handler sets psim_cli_signal (issue 9: main maps the
   * interruption to exit 130 or 143 by the signal received). */
  a->opts.interrupt = &psim_cli_signal;
  psim_profile_stats st;
  psim_status s = psim_profile_run(db, keys, measure, &a->opts, &st);
  if (s == PSIM_OK && a->collectives)
    s = profile_collectives(a, db);
  if (s == PSIM_OK || s == PSIM_EINTERRUPTED)
    report(a, &st);
  if (s == PSIM_EINTERRUPTED)
    psim_error(s, "interrupted; %zu measurements kept in %s (run again with --resume)", st.measured,
               a->out);
  return s;
}

psim_status psim_cmd_profile(int argc, char **argv) {
  profile_args a;
  PSIM_CHECK(parse_args(argc, argv, &a));
  psim_costdb db;
  psim_key_set keys;
  psim_costdb_init(&db);
  psim_costdb_init(&keys);
  psim_status s = run_profile(&a, &db, &keys);
  psim_costdb_destroy(&db);
  psim_costdb_destroy(&keys);
  return s;
}
