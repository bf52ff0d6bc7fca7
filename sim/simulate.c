/* simulate.c - build, simulate, and derive the iteration's figures. */
#define _POSIX_C_SOURCE 200809L
#include "sim/simulate.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/builder/build.h"
#include "sim/builder/ps.h"
#include "sim/core/alloc.h"
#include "sim/core/clock.h"
#include "sim/simulate_impl.h"

void psim_sim_options_init(psim_sim_options *o) {
  memset(o, 0, sizeof *o);
  o->fidelity = PSIM_FIDELITY_AGGREGATE;
  o->fold = true;
  o->costdb = NULL;
  o->max_tasks = 50000000; /* 5e7: about 11 GB of graph and minutes of building;
                              the 1T benchmark needs 4.7e6 */
  o->keep_graph = false;
  o->merge_links = true;
  o->engine = psim_engine_order_from_env(); /* the one reader of PSIM_ENGINE */
}

void psim_sim_result_init(psim_sim_result *r) {
  memset(r, 0, sizeof *r);
}

void psim_sim_result_destroy(psim_sim_result *r) {
  if (r->graph) {
    psim_tg_destroy(r->graph);
    psim_free(r->graph);
  }
  if (r->schedule) {
    psim_schedule_result_destroy(r->schedule);
    psim_free(r->schedule);
  }
  psim_free(r->activation_peak);
  psim_free(r->mem_samples);
  psim_free(r->static_bytes);
  psim_ps_stats_destroy(r->ps); /* issue 8 */
  psim_free(r->ps);
  memset(r, 0, sizeof *r);
}

const char *psim_comm_kind_name(int kind) {
  static const char *const names[] = {"tensor_parallel", "pipeline", "data_parallel", "other"};
  return kind >= 0 && kind < PSIM_COMM_KIND_COUNT ? names[kind] : "unknown";
}

const char *psim_wait_kind_name(int kind) {
  static const char *const names[] = {"parameter_server", "host", "straggler"};
  return kind >= 0 && kind < PSIM_WAIT_KIND_COUNT ? names[kind] : "unknown";
}

/* The simulated device with the most compute time: the critical one. */
static int32_t critical_device(const psim_taskgraph *g, int32_t n_devices) {
  double *busy = psim_calloc((size_t)n_devices, sizeof *busy);
  if (!busy)
    return 0;
  for (int32_t i = 0; i < g->n_tasks; i++)
    if (g->info[i].kind == PSIM_TASK_COMPUTE && g->info[i].device >= 0)
      busy[g->info[i].device] += g->duration_s[i];
  int32_t best = 0;
  for (int32_t d = 1; d < n_devices; d++)
    if (busy[d] > busy[best])
      best = d;
  psim_free(busy);
  return best;
}

static int32_t devices_used(const psim_strategy *s, int32_t n_devices) {
  uint8_t *used = psim_calloc((size_t)n_devices, 1);
  if (!used)
    return 1;
  int32_t n = 0;
  /* ops repeat a few device lists (a layer's layouts): a list equal to one of the last
   * scanned (memcmp, vectorised) adds no device; at 131,072 GPUs every op lists 16,384
   * and the scan was 5% of the run (issue 19) */
  enum { RECENT = 8 };
  const psim_op_config *recent[RECENT] = {0};
  int32_t n_recent = 0;
  for (int32_t o = 0; o < s->n_ops; o++) {
    const psim_op_config *cf = &s->ops[o];
    bool seen = false;
    for (int32_t k = 0; k < n_recent && !seen; k++)
      seen = recent[k]->n_devices == cf->n_devices &&
             (recent[k]->devices == cf->devices || /* a shared list (devlist.h) */
              memcmp(recent[k]->devices, cf->devices,
                     sizeof *cf->devices * (size_t)cf->n_devices) == 0);
    if (seen)
      continue;
    recent[n_recent < RECENT ? n_recent++ : o % RECENT] = cf;
    for (int32_t e = 0; e < cf->n_devices; e++)
      if (!used[cf->devices[e]]) {
        used[cf->devices[e]] = 1;
        n++;
      }
  }
  psim_free(used);
  return n > 0 ? n : 1;
}

static void throughput(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                       const psim_build_summary *b, psim_sim_result *r) {
  double t = r->iteration_time_s > 0 ? r->iteration_time_s : 1e-30;
  int32_t bd = m->role_dim[PSIM_ROLE_BATCH], sd = m->role_dim[PSIM_ROLE_SEQUENCE];
  double samples = bd >= 0 ? (double)m->dims[bd].size : 1;
  r->samples_per_s = samples / t;
  r->tokens_per_s = sd >= 0 ? samples * (double)m->dims[sd].size / t : 0;
  for (int32_t o = 0; o < m->n_ops; o++)
    r->model_flops += m->ops[o].flops[PSIM_PASS_FWD] + m->ops[o].flops[PSIM_PASS_BWD];
  int32_t n = devices_used(s, c->n_devices);
  int32_t dev0 = s->ops[0].devices[0];
  double peak = psim_device_peak_flops(c, dev0, m->dtype);
  r->model_flops_per_s_per_device = r->model_flops / n / t;
  r->mfu = peak > 0 ? r->model_flops_per_s_per_device / peak : 0;
  r->hardware_flops = b->hardware_flops * (double)n / (double)(b->n_simulated ? b->n_simulated : 1);
  r->hfu = peak > 0 ? r->hardware_flops / n / t / peak : 0;
  double total = 0;
  for (int i = 0; i < PSIM_ORIGIN_COUNT; i++)
    total += b->compute_by_origin[i];
  if (total > 0) {
    r->share_measured = b->compute_by_origin[PSIM_ORIGIN_MEASURED] / total;
    r->share_interpolated = b->compute_by_origin[PSIM_ORIGIN_INTERPOLATED] / total;
    r->share_estimated = b->compute_by_origin[PSIM_ORIGIN_ESTIMATED] / total;
  }
}

/* Moves the graph and schedule into the result (traces need them). */
static psim_status keep(psim_taskgraph *g, psim_schedule_result *sched, psim_sim_result *r) {
  r->graph = psim_malloc(sizeof *r->graph);
  r->schedule = psim_malloc(sizeof *r->schedule);
  if (!r->graph || !r->schedule) {
    /* issue 9: the other block is uninitialised; destroy must not see it */
    psim_free(r->graph);
    psim_free(r->schedule);
    r->graph = NULL;
    r->schedule = NULL;
    return psim_error(PSIM_ENOMEM, "out of memory keeping the task graph");
  }
  *r->graph = *g;
  *r->schedule = *sched;
  memset(g, 0, sizeof *g);
  psim_schedule_result_init(sched);
  return PSIM_OK;
}

/* Build the graph: in full, or reusing the previous build (reuse->prev). */
static psim_status build(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                         const psim_sim_options *o, const psim_sim_reuse *reuse, psim_build **b) {
  if (reuse) /* prev NULL: in full, recording segments for the next build */
    return psim_build_graph_reusing(b, m, c, s, o, reuse->prev, reuse->changed, reuse->spare);
  return psim_build_graph(b, m, c, s, o);
}

/* Schedule, iteration end and memory peak: what every caller reads. */
static psim_status schedule(psim_build *b, const psim_sim_options *o, psim_schedule_result *sched,
                            psim_sim_result *r) {
  psim_taskgraph *g = psim_build_taskgraph(b);
  psim_build_summary sum;
  psim_build_summarise(b, &sum);
  sched->record_issue = o->keep_graph; /* the trace's host track */
  sched->order = o->engine;
  double t1 = psim_clock_now_s();
  psim_status st = psim_tg_simulate(g, sched);
  r->simulate_s = psim_clock_now_s() - t1;
  PSIM_CHECK(st);
  r->iteration_time_s = sched->makespan_s;
  if (sum.parameter_servers) /* issue 8: parameter servers end with their pulls (ps.c) */
    r->iteration_time_s = psim_ps_iteration_end(b, sched);
  r->n_tasks = g->n_tasks;
  r->n_edges = (int64_t)g->n_edges;
  r->folded = sum.folded;
  r->simulated_devices = sum.n_simulated;
  return psim_memory_peak(b, sched, r);
}

/* The figures a search does not read: breakdown, servers, throughput, graph. */
static psim_status all_figures(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                               const psim_sim_options *o, psim_build *b,
                               psim_schedule_result *sched, psim_sim_result *r) {
  psim_taskgraph *g = psim_build_taskgraph(b);
  psim_build_summary sum;
  psim_build_summarise(b, &sum);
  PSIM_CHECK(psim_sim_breakdown(g, sched, critical_device(g, c->n_devices), c->n_devices,
                                r->iteration_time_s, s, r));
  if (sum.parameter_servers) /* issue 8 */
    PSIM_CHECK(psim_ps_collect(b, sched, &r->ps));
  if (o->keep_graph)
    PSIM_CHECK(keep(g, sched, r));
  throughput(m, c, s, &sum, r);
  return PSIM_OK;
}

psim_status psim_sim_pipeline(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                              const psim_sim_options *o, const psim_sim_reuse *reuse,
                              psim_sim_figures figures, psim_build **b, psim_schedule_result *sched,
                              psim_sim_result *r) {
  psim_sim_result_init(r);
  double t0 = psim_clock_now_s();
  psim_status st = build(m, c, s, o, reuse, b);
  if (st == PSIM_OK && psim_ps_needs_rebuild(s)) /* issue 8: the k earliest pushes (ps.c) */
    st = psim_ps_backup_rebuild(*b);
  r->build_s = psim_clock_now_s() - t0;
  assert(st != PSIM_OK || *b);                       /* a build that succeeded exists */
  sched->record_taken = figures == PSIM_FIGURES_ALL; /* the breakdown reads it */
  if (st == PSIM_OK)
    st = schedule(*b, o, sched, r);
  if (st == PSIM_OK && figures == PSIM_FIGURES_ALL)
    st = all_figures(m, c, s, o, *b, sched, r);
  return st;
}

psim_status psim_simulate(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                          const psim_sim_options *opts, psim_sim_result *r) {
  psim_sim_options defaults;
  if (!opts) {
    psim_sim_options_init(&defaults);
    opts = &defaults;
  }
  psim_sim_result_init(r);
  if (s->n_ops != m->n_ops)
    return psim_error(PSIM_EINPUT, "the strategy has %d ops but the model has %d", (int)s->n_ops,
                      (int)m->n_ops);
  psim_build *b = NULL;
  psim_schedule_result sched;
  psim_schedule_result_init(&sched);
  psim_status st = psim_sim_pipeline(m, c, s, opts, NULL, PSIM_FIGURES_ALL, &b, &sched, r);
  psim_schedule_result_destroy(&sched);
  psim_build_free(b);
  if (st != PSIM_OK)
    psim_sim_result_destroy(r);
  return st;
}
