/* faults.c - stragglers, faults, elastic joins and several iterations (issue 8):
 * the configurations a job goes through, the recovery models and the
 * iteration timeline. The model is described in faults.h and docs/faults.md;
 * the options are read in faults_options.c, the strategy edits are in
 * faults_strategy.c and the report is written by faults_report.c. */
#include "sim/faults.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/builder/ps.h"
#include "sim/core/alloc.h"
#include "sim/faults_impl.h"

/* Deterministic N(0,1) draw for (seed, iteration, device): splitmix64 + Box-Muller. */
static uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static double normal(uint64_t seed, int64_t it, int32_t d) {
  uint64_t h = splitmix(splitmix(seed) ^ splitmix((uint64_t)it * 1000003u + (uint64_t)d));
  double u1 = ((double)(h >> 11) + 0.5) / 9007199254740992.0;
  double u2 = ((double)(splitmix(h) >> 11) + 0.5) / 9007199254740992.0;
  return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- configurations --------------------------------------------------------------- */

/* One configuration of the job: cluster (the caller's or one without a
 * failed link) and strategy, with its iteration time when known. */
typedef struct config {
  psim_cluster *c;
  psim_cluster own; /* used when c == &own */
  bool owns_cluster;
  psim_strategy s;
  double t_iter; /* s; < 0 = not simulated yet */
} config;

typedef struct run_ctx {
  const psim_model *m;
  const psim_sim_options *so;
  const psim_fault_options *fo;
  psim_fault_report *out;
  double *base_slow; /* per device of the caller's cluster */
  double ckpt_bytes; /* weights + optimizer state of the model */
  double wbytes;     /* weights of the model */
} run_ctx;

static void config_destroy(config *k) {
  psim_strategy_destroy(&k->s);
  if (k->owns_cluster)
    psim_cluster_destroy(&k->own);
  k->owns_cluster = false;
}

static int32_t workers_of(const psim_strategy *s, int32_t n_devices) {
  uint8_t *u = psim_calloc((size_t)n_devices, 1);
  int32_t n = 0;
  if (!u)
    return 0;
  for (int32_t o = 0; o < s->n_ops; o++)
    for (int32_t e = 0; e < s->ops[o].n_devices; e++)
      if (!u[s->ops[o].devices[e]]) {
        u[s->ops[o].devices[e]] = 1;
        n++;
      }
  psim_free(u);
  return n;
}

static psim_status simulate_async(run_ctx *x, config *k, psim_sim_result *r) {
  psim_ps_async_result a;
  int32_t n = x->fo->iterations > 10 ? x->fo->iterations : 10;
  PSIM_CHECK(psim_ps_async_run(r->ps, n, &a));
  k->t_iter = a.iteration_s;
  psim_fault_report *o = x->out;
  if (!o->async) { /* the first configuration's staleness is reported */
    o->async = true;
    o->staleness_mean = a.staleness_mean;
    o->staleness_mean_iter = a.staleness_mean_iter;
    o->staleness_max = a.staleness_max;
    o->staleness_hist = a.staleness_hist;
    o->n_hist = a.staleness_max + 1;
    a.staleness_hist = NULL;
  }
  psim_ps_async_result_destroy(&a);
  return PSIM_OK;
}

/* Iteration time of k for iteration `it` (random slowdowns: drawn per iteration). */
static psim_status iteration_time(run_ctx *x, config *k, int64_t it, double *t) {
  bool random = x->fo->random_sigma > 0;
  if (!random && k->t_iter >= 0) {
    *t = k->t_iter;
    return PSIM_OK;
  }
  psim_cluster *c = k->c;
  double *saved = NULL;
  if (random) {
    saved = psim_malloc(sizeof *saved * (size_t)c->n_devices);
    if (!saved)
      return psim_error(PSIM_ENOMEM, "out of memory");
    for (int32_t d = 0; d < c->n_devices; d++) {
      saved[d] = c->devices[d].slowdown;
      c->devices[d].slowdown *= exp(x->fo->random_sigma * fabs(normal(x->fo->random_seed, it, d)));
    }
  }
  psim_sim_result r;
  psim_sim_options so = *x->so;
  so.keep_graph = false;
  psim_status st = psim_simulate(x->m, c, &k->s, &so, &r);
  if (saved) {
    for (int32_t d = 0; d < c->n_devices; d++)
      c->devices[d].slowdown = saved[d];
    psim_free(saved);
  }
  if (st != PSIM_OK)
    return st;
  k->t_iter = r.iteration_time_s;
  if (k->s.sync == PSIM_SYNC_PS && k->s.ps.mode == PSIM_PS_ASYNC && r.ps)
    st = simulate_async(x, k, &r);
  *t = k->t_iter;
  psim_sim_result_destroy(&r);
  return st;
}

/* ---- recovery models ------------------------------------------------------------- */

static bool is_server(const psim_strategy *s, int32_t d) {
  if (s->sync != PSIM_SYNC_PS)
    return false;
  for (int32_t i = 0; i < s->ps.n_servers; i++)
    if (s->ps.servers[i] == d)
      return true;
  return false;
}

/* Broadcast of a worker's state over the data-parallel group of op 0 (the
 * devices of its shards at non-batch coordinate 0, replica 0). */
static psim_status resync_time(run_ctx *x, const config *k, double *t) {
  const psim_op *op = &x->m->ops[0];
  const psim_op_config *cfg = &k->s.ops[0];
  int32_t ib = psim_faults_batch_index(x->m, op),
          *g = psim_malloc(sizeof *g * (size_t)cfg->n_devices), n = 0;
  if (!g)
    return psim_error(PSIM_ENOMEM, "out of memory");
  int32_t per_slice = ib >= 0 ? cfg->n_devices / cfg->degree[ib] : cfg->n_devices;
  for (int32_t e = 0; e < cfg->n_devices; e += cfg->replicas) {
    bool first = true;
    for (int32_t i = 0; i < op->n_dims; i++)
      if (i != ib && psim_faults_shard_coord(op, cfg, e / cfg->replicas, i) != 0)
        first = false;
    if (first)
      g[n++] = cfg->devices[e];
  }
  psim_coll_desc d;
  psim_coll_desc_init(&d);
  d.kind = PSIM_COLL_BROADCAST;
  d.devices = g;
  d.n = n;
  d.bytes = x->ckpt_bytes / (per_slice > 0 ? per_slice : 1);
  psim_status st = n > 1 ? psim_coll_time(k->c, &d, t) : PSIM_OK;
  if (n <= 1)
    *t = 0;
  psim_free(g);
  return st;
}

/* Timeline state. */
typedef struct timeline {
  double t;          /* now, s */
  double iter_start; /* start of the iteration in progress, s */
  int32_t done;      /* completed iterations (progress) */
  int32_t ckpt_iter; /* progress at the last checkpoint */
  double ckpt_t;     /* when it was written */
  double last_end;   /* end of the previous completion (for per-iteration wall times) */
} timeline;

static psim_fault_record *new_record(run_ctx *x, const psim_fault_event *e, double iter_before) {
  assert(x->out->n_rec < PSIM_FAULTS_MAX); /* the callers refuse more events first */
  psim_fault_record *r = &x->out->rec[x->out->n_rec++];
  memset(r, 0, sizeof *r);
  r->kind = e->kind;
  snprintf(r->what, sizeof r->what, "%s%s%s", e->a, e->b[0] ? "-" : "", e->b);
  r->time_s = e->time_s;
  r->iteration_before_s = iter_before;
  return r;
}

static void checkpoint_restart(run_ctx *x, timeline *tl, psim_fault_record *r, double te) {
  r->recovery = "checkpoint_restart";
  r->lost_s = te - tl->ckpt_t;
  r->resync_s = x->ckpt_bytes / x->fo->checkpoint_read_bw;
  r->recovery_s = x->fo->detect_timeout_s + x->fo->restart_s + r->resync_s;
  tl->done = tl->ckpt_iter;
  tl->t = te + r->recovery_s;
}

/* A failed device under the current configuration k; *next receives the new
 * strategy when the job continues without it (*changed). */
static psim_status fail_device(run_ctx *x, timeline *tl, config *k, int32_t dev, double te,
                               double t_iter, psim_fault_record *r, bool *changed) {
  const psim_fault_options *fo = x->fo;
  const psim_strategy *s = &k->s;
  *changed = false;
  bool server = is_server(s, dev), ps = s->sync == PSIM_SYNC_PS;
  if ((server && s->ps.replicas <= 1) || (!ps && !fo->elastic)) {
    checkpoint_restart(x, tl, r, te);
    return PSIM_OK;
  }
  psim_strategy next;
  if (psim_faults_drop_device(x->m, k->c, s, dev, &next) != PSIM_OK) {
    checkpoint_restart(x, tl, r, te);
    return PSIM_OK;
  }
  psim_strategy_destroy(&k->s);
  k->s = next;
  k->t_iter = -1;
  *changed = true;
  if (server) {
    r->recovery = "ps_failover";
    r->lost_s = te - tl->iter_start;
    r->recovery_s = fo->detect_timeout_s + fo->failover_s;
    tl->t = te + r->recovery_s;
  } else if (ps) {
    bool absorbs =
        s->ps.mode == PSIM_PS_ASYNC ||
        (s->ps.mode == PSIM_PS_BACKUP && s->ps.backup_k < workers_of(s, k->c->n_devices) + 1);
    r->recovery = s->ps.mode == PSIM_PS_ASYNC ? "async_absorbs"
                  : absorbs                   ? "backup_absorbs"
                                              : "ps_drop_worker";
    double end = tl->iter_start + t_iter;
    if (!absorbs)
      end = fmax(end, te + fo->detect_timeout_s);
    r->recovery_s = absorbs ? 0 : end - (tl->iter_start + t_iter);
    tl->t = end; /* the iteration in progress completes without the worker */
    tl->done++;
  } else {
    r->recovery = "ring_rebuild";
    r->lost_s = te - tl->iter_start;
    PSIM_CHECK(resync_time(x, k, &r->resync_s));
    r->recovery_s = fo->detect_timeout_s + fo->rebuild_s + r->resync_s;
    tl->t = te + r->recovery_s;
  }
  return PSIM_OK;
}

static psim_status fail_link(run_ctx *x, timeline *tl, config *k, const psim_fault_event *e,
                             double te, double t_iter, psim_fault_record *r, bool *changed) {
  int32_t va, vb;
  PSIM_CHECK(psim_faults_find_vertex(k->c, "--fail-link", e->a, false, &va));
  PSIM_CHECK(psim_faults_find_vertex(k->c, "--fail-link", e->b, false, &vb));
  /* The cluster without the cable, copied in memory: everything else (device types and
   * their runtime overheads, slowdowns) exactly as before the failure. */
  psim_cluster nc;
  int32_t removed;
  bool ok;
  PSIM_CHECK(psim_cluster_without_links(k->c, va, vb, &nc, &removed, &ok));
  if (!removed || !ok)
    psim_cluster_destroy(&nc);
  if (!removed)
    return psim_error(PSIM_EINPUT, "--fail-link: no link between '%s' and '%s'",
                      k->c->vertex_names[va], k->c->vertex_names[vb]);
  if (!ok) { /* a device was cut off: its failure */
    int32_t dev = vb < k->c->n_devices ? vb : va;
    if (dev >= k->c->n_devices)
      return psim_error(PSIM_EINPUT, "--fail-link %s-%s splits the network", e->a, e->b);
    return fail_device(x, tl, k, dev, te, t_iter, r, changed);
  }
  if (k->owns_cluster)
    psim_cluster_destroy(&k->own);
  k->own = nc;
  k->c = &k->own;
  k->owns_cluster = true;
  k->t_iter = -1;
  *changed = true;
  r->recovery = "link_reroute";
  r->lost_s = te - tl->iter_start;
  r->recovery_s = x->fo->detect_timeout_s + x->fo->rebuild_s;
  tl->t = te + r->recovery_s;
  return PSIM_OK;
}

static psim_status join(run_ctx *x, timeline *tl, config *k, int32_t dev, psim_fault_record *r) {
  psim_strategy next;
  PSIM_CHECK(psim_faults_add_device(x->m, k->c, &k->s, dev, &next));
  bool ps = k->s.sync == PSIM_SYNC_PS;
  int32_t src = ps ? k->s.ps.servers[0] : k->s.ops[0].devices[0];
  double t;
  psim_status st = psim_p2p_time(k->c, src, dev, ps ? x->wbytes : x->ckpt_bytes, &t);
  if (st != PSIM_OK) {
    psim_strategy_destroy(&next);
    return st;
  }
  psim_strategy_destroy(&k->s);
  k->s = next;
  k->t_iter = -1;
  r->recovery = ps ? "join_ps" : "join_ring";
  r->resync_s = t;
  r->recovery_s = t + (ps ? 0 : x->fo->rebuild_s);
  tl->t += r->recovery_s;
  return PSIM_OK;
}

/* ---- timeline ---------------------------------------------------------------------- */

static int cmp_event(const void *a, const void *b) {
  const psim_fault_event *x = a, *y = b;
  return x->time_s < y->time_s ? -1 : x->time_s > y->time_s;
}

static psim_status record_time(psim_fault_report *o, double dt) {
  if ((o->n_times & (o->n_times - 1)) == 0) { /* grow at powers of two */
    double *p = psim_realloc(o->iteration_s, sizeof *p * (size_t)(o->n_times ? 2 * o->n_times : 1));
    if (!p)
      return psim_error(PSIM_ENOMEM, "out of memory");
    o->iteration_s = p;
  }
  o->iteration_s[o->n_times++] = dt;
  return PSIM_OK;
}

static psim_status complete(run_ctx *x, timeline *tl, double t_iter) {
  tl->t = tl->iter_start + t_iter;
  tl->done++;
  int32_t every = x->fo->checkpoint_every;
  if (every > 0 && tl->done % every == 0 && tl->done < x->fo->iterations) {
    tl->t += x->out->checkpoint_write_s;
    tl->ckpt_iter = tl->done;
    tl->ckpt_t = tl->t;
    x->out->checkpoints++;
  }
  return PSIM_OK;
}

static psim_status handle(run_ctx *x, timeline *tl, config *k, const psim_fault_event *e,
                          double t_iter) {
  if (x->out->n_rec >= PSIM_FAULTS_MAX)
    return psim_error(PSIM_ELIMIT, "too many fault events");
  psim_fault_record *r = new_record(x, e, t_iter);
  double te = fmax(e->time_s, tl->iter_start);
  bool changed = false;
  int32_t dev;
  psim_status st = PSIM_OK;
  if (e->kind == PSIM_FAULT_JOIN) {
    tl->t = tl->iter_start; /* joins at an iteration boundary */
    st = psim_faults_find_vertex(k->c, psim_faults_option_name(e->kind), e->a, true, &dev);
    if (st == PSIM_OK)
      st = join(x, tl, k, dev, r);
  } else if (e->kind == PSIM_FAULT_FAIL) {
    st = psim_faults_find_vertex(k->c, psim_faults_option_name(e->kind), e->a, true, &dev);
    if (st == PSIM_OK)
      st = fail_device(x, tl, k, dev, te, t_iter, r, &changed);
  } else {
    st = fail_link(x, tl, k, e, te, t_iter, r, &changed);
  }
  PSIM_CHECK(st);
  double after;
  PSIM_CHECK(iteration_time(x, k, tl->done, &after));
  r->iteration_after_s = after;
  r->workers_after = workers_of(&k->s, k->c->n_devices);
  return PSIM_OK;
}

/* An event the run never reached (its iterations were done first): recorded,
 * so that a mistyped time shows, but without effect. */
static psim_status after_run(run_ctx *x, const config *k, const psim_fault_event *e) {
  if (x->out->n_rec >= PSIM_FAULTS_MAX)
    return psim_error(PSIM_ELIMIT, "too many fault events");
  psim_fault_record *r = new_record(x, e, k->t_iter);
  r->recovery = "after_run";
  r->after_run = true;
  r->iteration_after_s = k->t_iter;
  r->workers_after = workers_of(&k->s, k->c->n_devices);
  return PSIM_OK;
}

static psim_status run_timeline(run_ctx *x, config *k) {
  const psim_fault_options *fo = x->fo;
  psim_fault_event ev[PSIM_FAULTS_MAX];
  int32_t ne = fo->n_events, next = 0;
  memcpy(ev, fo->events, sizeof *ev * (size_t)ne);
  qsort(ev, (size_t)ne, sizeof *ev, cmp_event);
  timeline tl = {0};
  int64_t draws = 0;
  while (tl.done < fo->iterations) {
    if ((tl.done & 0xFFF) == 0xFFF && psim_interrupted())
      return psim_error(PSIM_EINTERRUPTED, "interrupted after %d of %d iterations", tl.done,
                        fo->iterations);
    tl.iter_start = tl.t;
    double t_iter;
    PSIM_CHECK(iteration_time(x, k, draws++, &t_iter));
    bool join_now = next < ne && ev[next].kind == PSIM_FAULT_JOIN && ev[next].time_s <= tl.t;
    bool fault_now =
        next < ne && ev[next].kind != PSIM_FAULT_JOIN && ev[next].time_s < tl.iter_start + t_iter;
    if (join_now || fault_now) {
      int32_t before = tl.done;
      PSIM_CHECK(handle(x, &tl, k, &ev[next++], t_iter));
      if (tl.done > before) /* the iteration completed despite the fault */
        PSIM_CHECK(record_time(x->out, tl.t - tl.last_end));
      if (tl.done > before)
        tl.last_end = tl.t;
      continue;
    }
    PSIM_CHECK(complete(x, &tl, t_iter));
    PSIM_CHECK(record_time(x->out, tl.t - tl.last_end));
    tl.last_end = tl.t;
  }
  x->out->total_s = tl.t;
  for (; next < ne; next++)
    PSIM_CHECK(after_run(x, k, &ev[next]));
  return PSIM_OK;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double quantile(const double *sorted, int32_t n, double q) {
  double pos = q * (n - 1);
  int32_t i = (int32_t)floor(pos);
  if (i + 1 >= n)
    return sorted[n - 1];
  return sorted[i] + (pos - i) * (sorted[i + 1] - sorted[i]);
}

static psim_status distribution(const psim_model *m, psim_fault_report *o) {
  int32_t n = o->n_times;
  if (n <= 0)
    return PSIM_OK;
  double *s = psim_malloc(sizeof *s * (size_t)n), sum = 0, sq = 0;
  if (!s)
    return psim_error(PSIM_ENOMEM, "out of memory");
  memcpy(s, o->iteration_s, sizeof *s * (size_t)n);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  for (int32_t i = 0; i < n; i++)
    sum += s[i];
  o->mean_s = sum / n;
  for (int32_t i = 0; i < n; i++)
    sq += (s[i] - o->mean_s) * (s[i] - o->mean_s);
  o->std_s = sqrt(sq / n);
  o->min_s = s[0];
  o->max_s = s[n - 1];
  o->p50_s = quantile(s, n, 0.5);
  o->p90_s = quantile(s, n, 0.9);
  o->p99_s = quantile(s, n, 0.99);
  psim_free(s);
  int32_t bd = m->role_dim[PSIM_ROLE_BATCH];
  double batch = bd >= 0 ? (double)m->dims[bd].size : 1;
  o->samples_per_s = o->total_s > 0 ? o->n_iterations * batch / o->total_s : 0;
  if (o->async && o->mean_s > 0)
    o->async_samples_per_s = batch / o->mean_s;
  return PSIM_OK;
}

static void model_bytes(const psim_model *m, double *weights, double *ckpt) {
  bool low = m->dtype == PSIM_DTYPE_BF16 || m->dtype == PSIM_DTYPE_FP16;
  double params = 0; /* memory.c: weights 2 (low precision) or 4, optimizer 12 or 8 bytes */
  for (int32_t t = 0; t < m->n_tensors; t++) {
    const psim_tensor *x = &m->tensors[t];
    if (x->kind != PSIM_TENSOR_WEIGHT)
      continue;
    double e = 1;
    for (int32_t j = 0; j < x->rank; j++)
      e *= (double)m->dims[x->dims[j]].size;
    params += e;
  }
  *weights = params * (low ? 2 : 4);
  *ckpt = params * (low ? 2 + 12 : 4 + 8);
}

psim_status psim_faults_run(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                            const psim_sim_options *so, const psim_fault_options *fo,
                            psim_fault_report *out) {
  psim_sim_options defaults;
  if (!so) {
    psim_sim_options_init(&defaults);
    so = &defaults;
  }
  psim_fault_report_init(out);
  out->n_iterations = fo->iterations;
  run_ctx x = {m, so, fo, out, NULL, 0, 0};
  model_bytes(m, &x.wbytes, &x.ckpt_bytes);
  out->checkpoint_bytes = x.ckpt_bytes;
  out->checkpoint_write_s = x.ckpt_bytes / fo->checkpoint_write_bw;
  config k = {c, {0}, false, {0}, -1};
  PSIM_CHECK(psim_fault_options_check(fo, c)); /* names, before any time is spent */
  psim_status st = psim_strategy_copy(s, &k.s);
  if (st == PSIM_OK)
    st = run_timeline(&x, &k);
  if (st == PSIM_OK)
    st = distribution(m, out);
  config_destroy(&k);
  if (st != PSIM_OK)
    psim_fault_report_destroy(out);
  return st;
}
