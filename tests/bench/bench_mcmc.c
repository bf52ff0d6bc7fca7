/* bench_mcmc.c - delta against full simulation per MCMC proposal, and the
 * whole search's proposals per second, for Inception-v3 on 16 devices (4
 * nodes of 4 P100, p100-nvlink) and 64 devices (16 such nodes). One core.
 *
 * Three measurements per cluster:
 *  - walk: a random walk from data parallelism, one op per step set to a
 *    random configuration of its SOAP space (half of the steps undone, as
 *    rejections are); every step costed by psim_simulate and by
 *    psim_delta_eval. The hardest case for delta: after a few hundred steps
 *    most ops are off data parallelism, and every step misses the memo.
 *  - search proposals: the MCMC search with verify_every = 1, so that each
 *    of its own proposals is costed by delta and by a full simulation.
 *  - search: the MCMC search alone, proposals per second.
 *
 * usage: bench_mcmc [PROPOSALS [search NODES]]   (default 300; "search 4": only
 * the search on 4 nodes, for profiling) */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search/mcmc/mcmc.h"
#include "search/mcmc/space.h"
#include "sim/core/alloc.h"
#include "sim/core/clock.h"
#include "sim/delta.h"
#include "topologies/presets.h"

#ifndef PSIM_SOURCE_ROOT
#define PSIM_SOURCE_ROOT "."
#endif

static int die(const char *what) {
  fprintf(stderr, "bench_mcmc: %s: %s\n", what, psim_error_message());
  return 1;
}

typedef struct walk_figures {
  double full_s, delta_s, engine_s; /* summed over the walk's steps */
  int64_t built, copied;            /* connect segments */
} walk_figures;

/* The same random walk twice: once costed by psim_simulate, once by delta. */
static int walk(const psim_model *m, psim_cluster *c, int n, walk_figures *w) {
  psim_strategy s;
  psim_strategy_init(&s);
  if (psim_strategy_data_parallel(m, c, c->n_devices, 1, &s) != PSIM_OK)
    return die("data parallel");
  psim_space sp;
  if (psim_space_init(&sp, m, &s, NULL) != PSIM_OK)
    return die("space");
  psim_delta *d;
  if (psim_delta_create(m, c, NULL, &d) != PSIM_OK)
    return die("delta");
  psim_op_config undo = {0};
  uint64_t rng = 42;
  w->full_s = w->delta_s = 0;
  for (int k = 0; k < n; k++) {
    int32_t o = (int32_t)psim_space_rand_below(&rng, (uint64_t)m->n_ops);
    psim_space_config_copy(&s.ops[o], &undo);
    psim_space_sample(&sp, o, &rng, &s.ops[o]);
    double t0 = psim_clock_now_s(), t;
    bool fits;
    psim_sim_result r;
    psim_status st = psim_simulate(m, c, &s, NULL, &r);
    double t1 = psim_clock_now_s();
    if (st == PSIM_OK)
      psim_sim_result_destroy(&r);
    psim_status st2 = psim_delta_eval(d, &s, o, &t, &fits);
    double t2 = psim_clock_now_s();
    psim_error_clear();
    w->full_s += t1 - t0;
    w->delta_s += t2 - t1;
    if (st != PSIM_OK || st2 != PSIM_OK || rng % 2) /* rejected: undo, as MCMC does half the time */
      psim_space_config_copy(&undo, &s.ops[o]);
  }
  const psim_delta_stats *ds = psim_delta_get_stats(d);
  if (ds->memo_hits)
    fprintf(stderr, "bench_mcmc: %lld memo hits in the walk\n", (long long)ds->memo_hits);
  w->engine_s = ds->engine_s;
  w->built = ds->segments_built;
  w->copied = ds->segments_copied;
  psim_op_config_destroy(&undo);
  psim_delta_free(d);
  psim_space_destroy(&sp);
  psim_strategy_destroy(&s);
  return 0;
}

/* The MCMC search on one chain; verify = 1 also costs every proposal in full. */
static int search(const psim_model *m, psim_cluster *c, int n, int verify, psim_search_result *r) {
  psim_search_options o;
  psim_search_options_init(&o);
  o.budget_evals = n;
  o.seed = 1;
  psim_mcmc_options mo;
  psim_mcmc_options_init(&mo);
  mo.verify_every = verify;
  psim_search_result_init(r);
  return psim_mcmc_run(m, c, &o, &mo, r) != PSIM_OK ? die("mcmc") : 0;
}

static double stat(const psim_search_result *r, const char *name) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->stats, name);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static int load_cluster(int nodes, psim_cluster *c) {
  psim_preset_opts po;
  psim_preset_opts_init(&po);
  po.preset = "p100-nvlink";
  po.nodes = nodes;
  cJSON *cj;
  psim_cluster_init(c);
  if (psim_preset_cluster(&po, &cj) != PSIM_OK || psim_cluster_from_json("p100", cj, c) != PSIM_OK)
    return die("cluster");
  cJSON_Delete(cj);
  return 0;
}

/* The search alone (profiling), with the engine's cost per task: the floor
 * of an evaluation that schedules the whole graph. */
static int search_only(const psim_model *m, int nodes, int n) {
  psim_cluster c;
  psim_search_result r;
  if (load_cluster(nodes, &c) || search(m, &c, n, 0, &r))
    return 1;
  double sims = fmax(1, stat(&r, "delta_simulations")),
         tasks = fmax(1, stat(&r, "tasks_simulated"));
  double engine_s = stat(&r, "engine_wall_s");
  printf("inception-v3 on %3d devices, search: %7.1f proposals/s (%lld in %.2f s, one chain); "
         "%.0f simulations of %.0f tasks on average, engine %.1f ns/task (%.3f ms/simulation, "
         "%.0f%% of the search)\n",
         c.n_devices, (double)r.evaluations / r.wall_s, (long long)r.evaluations, r.wall_s, sims,
         tasks / sims, 1e9 * engine_s / tasks, 1e3 * engine_s / sims, 100 * engine_s / r.wall_s);
  psim_search_result_destroy(&r);
  psim_cluster_destroy(&c);
  return 0;
}

static int bench(const psim_model *m, int nodes, int n) {
  psim_cluster c;
  if (load_cluster(nodes, &c))
    return 1;
  walk_figures w = {0};
  if (walk(m, &c, n, &w))
    return 1;
  printf("inception-v3 on %3d devices, walk:   full %8.3f ms/proposal, delta %8.3f ms/proposal "
         "(engine %6.3f ms; %5.1f segments built, %5.1f copied), ratio %5.2fx\n",
         c.n_devices, 1e3 * w.full_s / n, 1e3 * w.delta_s / n, 1e3 * w.engine_s / n,
         (double)w.built / n, (double)w.copied / n, w.full_s / w.delta_s);
  psim_search_result r;
  if (search(m, &c, n, 1, &r))
    return 1;
  double ver = stat(&r, "full_verifications"), hits = stat(&r, "memo_hits");
  double delta_s = stat(&r, "delta_wall_s"), full_s = stat(&r, "verify_wall_s");
  printf("inception-v3 on %3d devices, search: full %8.3f ms/proposal, delta %8.3f ms/proposal "
         "(engine %6.3f ms; %5.1f segments built, %5.1f copied; memo hits %.0f of %.0f), "
         "ratio %5.2fx\n",
         c.n_devices, 1e3 * full_s / ver, 1e3 * delta_s / ver,
         1e3 * stat(&r, "engine_wall_s") / ver, stat(&r, "segments_built") / ver,
         stat(&r, "segments_copied") / ver, hits, ver, full_s / delta_s);
  psim_search_result_destroy(&r);
  if (search(m, &c, n, 0, &r))
    return 1;
  printf("inception-v3 on %3d devices, search: %7.1f proposals/s (%lld in %.2f s, one chain)\n",
         c.n_devices, (double)r.evaluations / r.wall_s, (long long)r.evaluations, r.wall_s);
  psim_search_result_destroy(&r);
  psim_cluster_destroy(&c);
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 300;
  psim_model m;
  psim_model_init(&m);
  if (psim_model_load(PSIM_SOURCE_ROOT "/models/inception-v3.json", &m) != PSIM_OK)
    return die("model");
  if (argc > 3 && strcmp(argv[2], "search") == 0) {
    int rc = search_only(&m, atoi(argv[3]), n);
    psim_model_destroy(&m);
    return rc;
  }
  int rc = bench(&m, 4, n) || bench(&m, 16, n);
  psim_model_destroy(&m);
  return rc;
}
