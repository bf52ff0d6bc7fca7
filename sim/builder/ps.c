/* ps.c - parameter-server gradient synchronisation in the task graph (issue 8).
 * The model is described in ps.h; the builder calls psim_build_ps_sync from
 * its optimizer step when the strategy's gradient_sync is a parameter server. */
#include "sim/builder/ps.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/builder/build_impl.h"
#include "sim/core/alloc.h"
#include "sim/engine/collective.h"

/* Builder state: task ids of the parameter-server tasks of one graph. */
typedef struct psim_ps_state {
  int32_t nw, ns;
  int32_t *workers, *servers;
  double *shard_bytes;  /* per server */
  double *share;        /* per server: shard_bytes / total */
  double *wbytes;       /* per worker: its weight bytes */
  int32_t *ready;       /* per worker: its gradients are ready to push */
  int32_t *push, *pull; /* per (w, s) */
  int32_t *update;      /* per server (sync, backup) or per (w, s) (async) */
  int32_t *repl_done;   /* per server (sync, backup) or per (w, s) (async): pulls wait for it */
  double replicate_s;
} ps_state;

static void ps_state_free(ps_state *p) {
  if (!p)
    return;
  void *arrays[] = {p->workers, p->ready, p->servers, p->shard_bytes, p->share,
                    p->wbytes,  p->push,  p->pull,    p->update,      p->repl_done};
  psim_free_each(arrays, sizeof arrays / sizeof *arrays);
  psim_free(p);
}

void psim_build_ps_free(psim_build *b) {
  ps_state_free(b->ps);
  b->ps = NULL;
}

/* Folding needs identical devices per stage: same type, same slowdown; and
 * parameter servers are simulated per worker. */
bool psim_build_may_fold(const psim_build *b) {
  if (b->s->sync == PSIM_SYNC_PS)
    return false;
  const psim_cluster *c = b->c;
  for (int32_t v = 0; v < b->s->n_stages * (b->s->virtual_stages > 0 ? b->s->virtual_stages : 1);
       v++) {
    const psim_stage *st = &b->s->stages[v];
    for (int32_t k = 1; k < st->n_devices; k++) {
      const psim_device *d0 = &c->devices[st->devices[0]], *dk = &c->devices[st->devices[k]];
      if (d0->type != dk->type || d0->slowdown != dk->slowdown)
        return false;
    }
  }
  return true;
}

/* ---- sharding ---------------------------------------------------------------- */

typedef struct weight_size {
  double bytes;
  int32_t t;
} weight_size;

static int cmp_weight(const void *a, const void *b) {
  const weight_size *x = a, *y = b;
  if (x->bytes != y->bytes)
    return x->bytes > y->bytes ? -1 : 1;
  return x->t - y->t;
}

void psim_ps_shards(const psim_model *m, int32_t n_servers, double *bytes) {
  for (int32_t s = 0; s < n_servers; s++)
    bytes[s] = 0;
  weight_size *w = psim_malloc(sizeof *w * (size_t)(m->n_tensors > 0 ? m->n_tensors : 1));
  if (!w || n_servers <= 0) {
    psim_free(w);
    return;
  }
  int32_t n = 0;
  for (int32_t t = 0; t < m->n_tensors; t++) {
    const psim_tensor *x = &m->tensors[t];
    if (x->kind != PSIM_TENSOR_WEIGHT)
      continue;
    double e = 1;
    for (int32_t j = 0; j < x->rank; j++)
      e *= (double)m->dims[x->dims[j]].size;
    w[n++] = (weight_size){e * (double)psim_dtype_bytes(m->dtype), t};
  }
  qsort(w, (size_t)n, sizeof *w, cmp_weight);
  for (int32_t i = 0; i < n; i++) {
    int32_t best = 0;
    for (int32_t s = 1; s < n_servers; s++)
      if (bytes[s] < bytes[best])
        best = s;
    bytes[best] += w[i].bytes;
  }
  psim_free(w);
}

static psim_status ps_state_new(psim_build *b, ps_state **out) {
  ps_state *p = psim_calloc(1, sizeof *p);
  if (!p)
    return psim_error(PSIM_ENOMEM, "out of memory");
  *out = p;
  int32_t nd = b->c->n_devices;
  p->ns = b->s->ps.n_servers;
  if (p->ns <= 0)
    return psim_error(PSIM_EINPUT, "parameter-server sync needs at least one server");
  p->workers = psim_malloc(sizeof *p->workers * (size_t)nd);
  p->servers = psim_malloc(sizeof *p->servers * (size_t)p->ns);
  p->shard_bytes = psim_malloc(sizeof(double) * (size_t)p->ns);
  p->share = psim_malloc(sizeof(double) * (size_t)p->ns);
  p->wbytes = psim_malloc(sizeof(double) * (size_t)nd);
  if (!p->workers || !p->servers || !p->shard_bytes || !p->share || !p->wbytes)
    return psim_error(PSIM_ENOMEM, "out of memory");
  for (int32_t d = 0; d < nd; d++)
    if (b->simulated[d] && b->last_task[d] >= 0) {
      p->wbytes[p->nw] = b->static_mem[3 * d];
      p->workers[p->nw++] = d;
    }
  memcpy(p->servers, b->s->ps.servers, sizeof *p->servers * (size_t)p->ns);
  psim_ps_shards(b->m, p->ns, p->shard_bytes);
  double total = 0;
  for (int32_t s = 0; s < p->ns; s++)
    total += p->shard_bytes[s];
  for (int32_t s = 0; s < p->ns; s++)
    p->share[s] = total > 0 ? p->shard_bytes[s] / total : 1.0 / p->ns;
  bool async = b->s->ps.mode == PSIM_PS_ASYNC;
  size_t nws = (size_t)p->nw * (size_t)p->ns, nu = async ? nws : (size_t)p->ns;
  p->ready = psim_malloc(sizeof(int32_t) * ((size_t)p->nw + 1));
  p->push = psim_malloc(sizeof(int32_t) * (nws ? nws : 1));
  p->pull = psim_malloc(sizeof(int32_t) * (nws ? nws : 1));
  p->update = psim_malloc(sizeof(int32_t) * (nu ? nu : 1));
  p->repl_done = psim_malloc(sizeof(int32_t) * (nu ? nu : 1));
  if (!p->ready || !p->push || !p->pull || !p->update || !p->repl_done)
    return psim_error(PSIM_ENOMEM, "out of memory");
  return PSIM_OK;
}

/* ---- graph --------------------------------------------------------------------- */

static psim_status transfer(psim_build *b, int32_t src, int32_t dst, double bytes, int32_t shard,
                            int32_t *id) {
  psim_task_info info = {PSIM_TASK_TRANSFER, PSIM_TP_COMM_DP, -1, -1, -1, src, shard};
  int32_t exit;
  return psim_p2p_add(&b->g, b->c, src, dst, bytes, &info, id, &exit);
}

/* The server's update of shard s after `dep`, then copies to its replicas;
 * *done is what the pulls wait for. */
static psim_status update(psim_build *b, ps_state *p, int32_t s, int32_t *upd, int32_t *done) {
  int32_t dev = p->servers[s], res = psim_res_compute(dev);
  double params = p->shard_bytes[s] / (double)psim_dtype_bytes(b->m->dtype);
  psim_task_info info = {PSIM_TASK_COMPUTE, PSIM_TP_UPDATE, -1, -1, -1, dev, s};
  /* the runtime's per-iteration overhead is the workers' (worker_ready) */
  double t = fmax(0, psim_cost_optimizer(b->c, dev, params, b->o->costdb) -
                         b->c->types[b->c->devices[dev].type].rt.iteration_s);
  PSIM_CHECK(psim_tg_add_task(&b->g, t, &res, 1, &info, upd));
  *done = *upd;
  int32_t r = b->s->ps.replicas;
  if (r <= 1 || p->ns <= 1)
    return PSIM_OK;
  psim_task_info binfo = {PSIM_TASK_BARRIER, PSIM_TP_COMM_DP, -1, -1, -1, dev, s};
  PSIM_CHECK(psim_tg_add_task(&b->g, 0, NULL, 0, &binfo, done));
  for (int32_t j = 1; j < r && j < p->ns; j++) {
    int32_t sec = p->servers[(s + j) % p->ns], id;
    PSIM_CHECK(transfer(b, dev, sec, p->shard_bytes[s], s, &id));
    PSIM_CHECK(psim_tg_add_edge(&b->g, *upd, id));
    PSIM_CHECK(psim_tg_add_edge(&b->g, id, *done));
    double tr;
    PSIM_CHECK(psim_p2p_time(b->c, dev, sec, p->shard_bytes[s], &tr));
    p->replicate_s = fmax(p->replicate_s, tr);
  }
  return PSIM_OK;
}

static psim_status pull(psim_build *b, ps_state *p, int32_t w, int32_t s, int32_t after,
                        int32_t *sync_done) {
  int32_t *id = &p->pull[w * p->ns + s];
  PSIM_CHECK(transfer(b, p->servers[s], p->workers[w], p->wbytes[w] * p->share[s], s, id));
  PSIM_CHECK(psim_tg_add_edge(&b->g, after, *id));
  int32_t d = p->workers[w];
  return sync_done[d] >= 0 ? psim_tg_add_edge(&b->g, *id, sync_done[d]) : PSIM_OK;
}

/* The worker's per-iteration runtime overhead (data loader, logging: the
 * device type's rt.iteration_s, which all-reduce charges with the optimizer
 * step) after its last compute task; its pushes follow. */
static psim_status worker_ready(psim_build *b, ps_state *p, int32_t w) {
  int32_t d = p->workers[w], res = psim_res_compute(d);
  psim_task_info info = {PSIM_TASK_COMPUTE, PSIM_TP_UPDATE, -1, -1, -1, d, -1};
  double t = b->c->types[b->c->devices[d].type].rt.iteration_s;
  PSIM_CHECK(psim_tg_add_task(&b->g, t, &res, 1, &info, &p->ready[w]));
  return psim_tg_add_edge(&b->g, b->last_task[d], p->ready[w]);
}

psim_status psim_build_ps_sync(psim_build *b, int32_t *sync_done) {
  ps_state *p = NULL;
  psim_status st = ps_state_new(b, &p);
  b->ps = p;
  PSIM_CHECK(st);
  for (int32_t w = 0; w < p->nw; w++) {
    PSIM_CHECK(worker_ready(b, p, w));
    for (int32_t s = 0; s < p->ns; s++) {
      int32_t *id = &p->push[w * p->ns + s];
      PSIM_CHECK(transfer(b, p->workers[w], p->servers[s], p->wbytes[w] * p->share[s], s, id));
      PSIM_CHECK(psim_tg_add_edge(&b->g, p->ready[w], *id));
    }
  }
  if (b->s->ps.mode == PSIM_PS_ASYNC) { /* each push: its own update and pull */
    for (int32_t w = 0; w < p->nw; w++)
      for (int32_t s = 0; s < p->ns; s++) {
        int32_t k = w * p->ns + s;
        PSIM_CHECK(update(b, p, s, &p->update[k], &p->repl_done[k]));
        PSIM_CHECK(psim_tg_add_edge(&b->g, p->push[k], p->update[k]));
        PSIM_CHECK(pull(b, p, w, s, p->repl_done[k], sync_done));
      }
    return PSIM_OK;
  }
  const uint8_t *dropped = b->o->ps_dropped;
  for (int32_t s = 0; s < p->ns; s++) {
    PSIM_CHECK(update(b, p, s, &p->update[s], &p->repl_done[s]));
    for (int32_t w = 0; w < p->nw; w++)
      if (!dropped || !dropped[w * p->ns + s])
        PSIM_CHECK(psim_tg_add_edge(&b->g, p->push[w * p->ns + s], p->update[s]));
    for (int32_t w = 0; w < p->nw; w++)
      PSIM_CHECK(pull(b, p, w, s, p->repl_done[s], sync_done));
  }
  return PSIM_OK;
}

/* ---- after the simulation ------------------------------------------------------- */

double psim_ps_iteration_end(const psim_build *b, const psim_schedule_result *r) {
  const ps_state *p = b->ps;
  if (!p || b->s->ps.mode == PSIM_PS_ASYNC)
    return r->makespan_s;
  double end = 0;
  for (int32_t i = 0; i < p->nw * p->ns; i++)
    end = fmax(end, r->end_s[p->pull[i]]);
  for (int32_t s = 0; s < p->ns; s++)
    end = fmax(end, r->end_s[p->repl_done[s]]);
  return end;
}

static psim_status stats_alloc(psim_ps_stats *st, int32_t nw, int32_t ns) {
  size_t nws = (size_t)nw * (size_t)ns + 1;
  st->n_workers = nw;
  st->n_servers = ns;
  st->workers = psim_malloc(sizeof(int32_t) * ((size_t)nw + 1));
  st->servers = psim_malloc(sizeof(int32_t) * ((size_t)ns + 1));
  st->shard_bytes = psim_malloc(sizeof(double) * ((size_t)ns + 1));
  st->compute_end_s = psim_malloc(sizeof(double) * ((size_t)nw + 1));
  st->push_s = psim_malloc(sizeof(double) * nws);
  st->pull_s = psim_malloc(sizeof(double) * nws);
  st->push_bytes = psim_malloc(sizeof(double) * nws);
  st->push_end_s = psim_malloc(sizeof(double) * nws);
  st->update_s = psim_malloc(sizeof(double) * ((size_t)ns + 1));
  if (!st->workers || !st->servers || !st->shard_bytes || !st->compute_end_s || !st->push_s ||
      !st->pull_s || !st->push_bytes || !st->push_end_s || !st->update_s)
    return psim_error(PSIM_ENOMEM, "out of memory");
  return PSIM_OK;
}

void psim_ps_stats_destroy(psim_ps_stats *st) {
  if (!st)
    return;
  void *arrays[] = {st->workers, st->servers,    st->shard_bytes, st->compute_end_s, st->push_s,
                    st->pull_s,  st->push_bytes, st->push_end_s,  st->update_s};
  psim_free_each(arrays, sizeof arrays / sizeof *arrays);
  memset(st, 0, sizeof *st);
}

psim_status psim_ps_collect(const psim_build *b, const psim_schedule_result *r,
                            psim_ps_stats **out) {
  const ps_state *p = b->ps;
  *out = NULL;
  if (!p)
    return PSIM_OK;
  psim_ps_stats *st = psim_calloc(1, sizeof *st);
  if (!st)
    return psim_error(PSIM_ENOMEM, "out of memory");
  *out = st;
  PSIM_CHECK(stats_alloc(st, p->nw, p->ns));
  memcpy(st->workers, p->workers, sizeof(int32_t) * (size_t)p->nw);
  memcpy(st->servers, p->servers, sizeof(int32_t) * (size_t)p->ns);
  memcpy(st->shard_bytes, p->shard_bytes, sizeof(double) * (size_t)p->ns);
  st->replicate_s = p->replicate_s;
  for (int32_t w = 0; w < p->nw; w++) {
    st->compute_end_s[w] = r->end_s[p->ready[w]];
    for (int32_t s = 0; s < p->ns; s++) {
      int32_t k = w * p->ns + s;
      /* as simulated, queueing behind the other workers' traffic included */
      int32_t up = b->s->ps.mode == PSIM_PS_ASYNC ? p->repl_done[k] : p->repl_done[s];
      st->push_s[k] = r->end_s[p->push[k]] - r->end_s[p->ready[w]];
      st->pull_s[k] = r->end_s[p->pull[k]] - r->end_s[up];
      st->push_end_s[k] = r->end_s[p->push[k]];
      st->push_bytes[k] = p->wbytes[w] * p->share[s];
    }
  }
  for (int32_t s = 0; s < p->ns; s++)
    st->update_s[s] = b->g.duration_s[p->update[s]]; /* async: update[s] is worker 0's */
  return PSIM_OK;
}

/* ---- backup_k: the k earliest pushes --------------------------------------------- */

typedef struct arrival {
  double t;
  int32_t w;
} arrival;

static int cmp_arrival(const void *a, const void *b) {
  const arrival *x = a, *y = b;
  if (x->t != y->t)
    return x->t < y->t ? -1 : 1;
  return x->w - y->w;
}

/* Marks, per server, every push but the k earliest as dropped. */
static psim_status choose_dropped(const psim_build *b, const psim_schedule_result *r, int32_t k,
                                  uint8_t *dropped) {
  const ps_state *p = b->ps;
  arrival *a = psim_malloc(sizeof *a * ((size_t)p->nw + 1));
  if (!a)
    return psim_error(PSIM_ENOMEM, "out of memory");
  for (int32_t s = 0; s < p->ns; s++) {
    for (int32_t w = 0; w < p->nw; w++)
      a[w] = (arrival){r->end_s[p->push[w * p->ns + s]], w};
    qsort(a, (size_t)p->nw, sizeof *a, cmp_arrival);
    for (int32_t i = 0; i < p->nw; i++)
      dropped[a[i].w * p->ns + s] = i >= k;
  }
  psim_free(a);
  return PSIM_OK;
}

bool psim_ps_needs_rebuild(const psim_strategy *s) {
  return s->sync == PSIM_SYNC_PS && s->ps.mode == PSIM_PS_BACKUP;
}

psim_status psim_ps_backup_rebuild(psim_build *b) {
  const ps_state *p = b->ps;
  int32_t k = b->s->ps.backup_k;
  if (!p || k <= 0 || k >= p->nw)
    return PSIM_OK; /* every push counts: the sync graph is the answer */
  psim_schedule_result sched;
  psim_schedule_result_init(&sched);
  sched.order = b->o->engine;
  psim_status st = psim_tg_simulate(&b->g, &sched);
  uint8_t *dropped = psim_calloc((size_t)p->nw * (size_t)p->ns, 1);
  psim_sim_options *o2 = psim_malloc(sizeof *o2);
  if (st == PSIM_OK && (!dropped || !o2))
    st = psim_error(PSIM_ENOMEM, "out of memory");
  if (st == PSIM_OK)
    st = choose_dropped(b, &sched, k, dropped);
  psim_schedule_result_destroy(&sched);
  if (st != PSIM_OK) {
    psim_free(dropped);
    psim_free(o2);
    return st;
  }
  const psim_model *m = b->m;
  psim_cluster *c = b->c;
  const psim_strategy *s = b->s;
  *o2 = *b->o;
  o2->ps_dropped = dropped;
  psim_build_destroy(b);
  st = psim_build_fill(b, m, c, s, o2, NULL, NULL, NULL);
  b->ps_opts = o2; /* b->o: the build owns it (and dropped) from here on */
  b->ps_dropped = dropped;
  return st;
}

/* ---- asynchronous servers over several iterations -------------------------------- */

void psim_ps_async_result_destroy(psim_ps_async_result *r) {
  psim_free(r->iteration_end_s);
  psim_free(r->staleness_hist);
  memset(r, 0, sizeof *r);
}

typedef struct async_sim {
  const psim_ps_stats *st;
  double *worker_t;    /* per worker: when its current iteration started */
  int64_t *seen;       /* per (w, s): shard version the worker last pulled */
  int64_t *version;    /* per server: updates applied */
  double *server_free; /* per server */
} async_sim;

static psim_status hist_add(psim_ps_async_result *out, int64_t stale) {
  if (stale >= out->n_hist) {
    int32_t n = (int32_t)stale + 16;
    int64_t *h = psim_realloc(out->staleness_hist, sizeof *h * (size_t)n);
    if (!h)
      return psim_error(PSIM_ENOMEM, "out of memory");
    memset(h + out->n_hist, 0, sizeof *h * (size_t)(n - out->n_hist));
    out->staleness_hist = h;
    out->n_hist = n;
  }
  out->staleness_hist[stale]++;
  if (stale > out->staleness_max)
    out->staleness_max = (int32_t)stale;
  return PSIM_OK;
}

/* One worker iteration: compute, push to every server (FIFO per server),
 * pull; the worker's clock moves to the end of its last pull. */
static psim_status async_step(async_sim *a, int32_t w, psim_ps_async_result *out, int64_t *pushes,
                              double *stale_sum) {
  const psim_ps_stats *st = a->st;
  double ready = a->worker_t[w] + st->compute_end_s[w], next = ready;
  for (int32_t s = 0; s < st->n_servers; s++) {
    int32_t k = w * st->n_servers + s;
    double start = fmax(ready + st->push_s[k], a->server_free[s]);
    a->server_free[s] = start + st->update_s[s];
    int64_t stale = a->version[s] - a->seen[k];
    a->version[s]++;
    a->seen[k] = a->version[s];
    PSIM_CHECK(hist_add(out, stale));
    *stale_sum += (double)stale;
    (*pushes)++;
    if (s == 0 && a->version[0] % st->n_workers == 0) {
      int64_t it = a->version[0] / st->n_workers - 1;
      if (it < out->n_iterations)
        out->iteration_end_s[it] = a->server_free[0];
    }
    next = fmax(next, a->server_free[s] + st->pull_s[k]);
  }
  a->worker_t[w] = next;
  return PSIM_OK;
}

psim_status psim_ps_async_run(const psim_ps_stats *st, int32_t iterations,
                              psim_ps_async_result *out) {
  memset(out, 0, sizeof *out);
  if (!st || st->n_workers <= 0 || st->n_servers <= 0 || iterations <= 0)
    return psim_error(PSIM_EINPUT, "asynchronous run needs workers, servers and iterations");
  int32_t nw = st->n_workers, ns = st->n_servers;
  async_sim a = {st, psim_calloc((size_t)nw, sizeof(double)),
                 psim_calloc((size_t)nw * (size_t)ns, sizeof(int64_t)),
                 psim_calloc((size_t)ns, sizeof(int64_t)), psim_calloc((size_t)ns, sizeof(double))};
  out->n_iterations = iterations;
  out->iteration_end_s = psim_calloc((size_t)iterations, sizeof(double));
  psim_status s = a.worker_t && a.seen && a.version && a.server_free && out->iteration_end_s
                      ? PSIM_OK
                      : psim_error(PSIM_ENOMEM, "out of memory");
  int64_t pushes = 0, target = (int64_t)iterations * nw;
  double stale_sum = 0;
  while (s == PSIM_OK && a.version[0] < target) {
    int32_t w = 0; /* the worker whose gradients are ready first pushes next */
    for (int32_t i = 1; i < nw; i++)
      if (a.worker_t[i] + st->compute_end_s[i] < a.worker_t[w] + st->compute_end_s[w])
        w = i;
    s = async_step(&a, w, out, &pushes, &stale_sum);
  }
  if (s == PSIM_OK) {
    out->total_s = out->iteration_end_s[iterations - 1];
    out->iteration_s = out->total_s / iterations;
    out->staleness_mean = pushes ? stale_sum / (double)pushes : 0;
    out->staleness_mean_iter = out->staleness_mean / nw;
  }
  psim_free(a.worker_t);
  psim_free(a.seen);
  psim_free(a.version);
  psim_free(a.server_free);
  if (s != PSIM_OK)
    psim_ps_async_result_destroy(out);
  return s;
}
