/* e2e_cpu.c - end to end on this machine (issue 4, docs/accuracy.md): the
 * simulated time of a single-device forward+backward pass of models/mlp and of
 * a one-layer GPT on the cpu device, with a CPU profile, against running the
 * same kernels in the same order for real (e2e_run.h).
 *
 *   psim-e2e-cpu [--model mlp|gpt|both] [--repeat N] [--runs N] [--budget S]
 *                [--detail 0|1] [--tolerance T]
 *
 * Prints one line per model and repeat; with --tolerance exits 1 when a
 * forward+backward error (median) exceeds T in magnitude. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e_run.h"

#ifndef PSIM_SOURCE_ROOT
#define PSIM_SOURCE_ROOT "."
#endif

typedef struct args {
  const char *model;
  int repeat;
  double tolerance; /* <= 0: report only */
  psim_e2e_opts opts;
} args;

static int usage(void) {
  fprintf(stderr, "usage: psim-e2e-cpu [--model mlp|gpt|both] [--repeat N] [--runs N] "
                  "[--budget S] [--detail 0|1] [--tolerance T]\n");
  return 2;
}

static int parse(int argc, char **argv, args *a) {
  a->model = "both";
  a->repeat = 1;
  a->tolerance = 0;
  psim_e2e_opts_init(&a->opts);
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc)
      return usage();
    const char *o = argv[i], *v = argv[++i];
    if (!strcmp(o, "--model"))
      a->model = v;
    else if (!strcmp(o, "--repeat"))
      a->repeat = atoi(v);
    else if (!strcmp(o, "--runs"))
      a->opts.runs = atoi(v);
    else if (!strcmp(o, "--budget"))
      a->opts.budget_s = atof(v);
    else if (!strcmp(o, "--detail"))
      a->opts.detail = atoi(v) ? stdout : NULL;
    else if (!strcmp(o, "--tolerance"))
      a->tolerance = atof(v);
    else
      return usage();
  }
  if (a->repeat < 1 || a->opts.runs < 1 || a->opts.budget_s <= 0)
    return usage();
  return 0;
}

static psim_status load(const char *name, psim_model *m) {
  if (!strcmp(name, "mlp"))
    return psim_e2e_load_mlp(PSIM_SOURCE_ROOT, m);
  return psim_e2e_gpt_layer(m);
}

static void print(const char *name, const psim_e2e_result *r) {
  printf("%-4s kernels %3d  sim fwd+bwd %8.2f ms  real %8.2f ms  err %+6.1f%%  |  "
         "min-based: sim %8.2f real %8.2f err %+6.1f%%  |  update sim %6.2f real %6.2f ms, "
         "with update err %+6.1f%%  measured share %.2f\n",
         name, r->n_kernels, 1e3 * r->sim_fb_s, 1e3 * r->real_fb_s, 100 * r->err_fb,
         1e3 * r->sim_fb_min_s, 1e3 * r->real_fb_min_s, 100 * r->err_fb_min, 1e3 * r->sim_update_s,
         1e3 * r->real_update_s, 100 * r->err_with_update, r->share_measured);
}

/* Runs the check for one model `repeat` times; returns the worst |err_fb|. */
static psim_status check_model(const char *name, const args *a, psim_cluster *c, double *worst) {
  psim_model m;
  psim_model_init(&m);
  psim_status s = load(name, &m);
  for (int k = 0; k < a->repeat && s == PSIM_OK; k++) {
    psim_e2e_result r;
    s = psim_e2e_run(&m, c, &a->opts, &r);
    if (s != PSIM_OK)
      break;
    print(name, &r);
    fflush(stdout);
    double e = r.err_fb < 0 ? -r.err_fb : r.err_fb;
    *worst = e > *worst ? e : *worst;
  }
  psim_model_destroy(&m);
  return s;
}

int main(int argc, char **argv) {
  args a;
  if (parse(argc, argv, &a))
    return 2;
  psim_cluster c;
  psim_cluster_init(&c);
  psim_status s = psim_e2e_cpu_cluster(&c);
  double worst = 0;
  bool both = !strcmp(a.model, "both");
  if (s == PSIM_OK && (both || !strcmp(a.model, "mlp")))
    s = check_model("mlp", &a, &c, &worst);
  if (s == PSIM_OK && (both || !strcmp(a.model, "gpt")))
    s = check_model("gpt", &a, &c, &worst);
  psim_cluster_destroy(&c);
  if (s != PSIM_OK) {
    fprintf(stderr, "psim-e2e-cpu: %s\n", psim_error_message());
    return 1;
  }
  printf("worst forward+backward error %.1f%%\n", 100 * worst);
  if (a.tolerance > 0 && worst > a.tolerance) {
    fprintf(stderr, "psim-e2e-cpu: error %.1f%% exceeds the tolerance %.1f%%\n", 100 * worst,
            100 * a.tolerance);
    return 1;
  }
  return 0;
}
