/* delta.c - search-time simulation with reuse between evaluations.
 *
 * Why the figures equal psim_simulate's. Both run the one simulate pipeline
 * (psim_sim_pipeline, simulate_impl.h): build, the parameter-server backup
 * rebuild, schedule (psim_tg_simulate: ties broken by task id, no
 * randomness), iteration end, memory peak. The only difference is the
 * build: here psim_build_graph_reusing builds the same graph, array for
 * array, from the last one (sim/builder/ argues why the copied parts equal what
 * the builder would build; test_delta compares the graphs), so the iteration
 * time and fits are the same bits. The pipeline skips what a search does not
 * read (the time breakdown, the throughput figures, the trace copy) and the
 * schedule's and graph's buffers are reused. A memo answers a strategy
 * already costed by its fingerprint: two independent 64-bit hashes of every
 * field the builder reads, so two different strategies share an entry with
 * probability about 2^-128 per pair; verify_every catches any mismatch in
 * tests. The changed ops are found by comparing configurations exactly (no
 * hash) with a snapshot of those the last graph was built for.
 *
 * Not done (docs/search.md): the engine schedules the whole graph each time;
 * it does not resume from the first task the change can move. */
#define _POSIX_C_SOURCE 200809L
#include "sim/delta.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "sim/builder/build.h"
#include "sim/core/alloc.h"
#include "sim/core/clock.h"
#include "sim/core/hashmap.h"
#include "sim/simulate_impl.h"

void psim_delta_options_init(psim_delta_options *o) {
  memset(o, 0, sizeof *o);
  o->verify_every = 0;
  o->memo_entries = 65536;
}

/* One op's configuration as the last graph was built for it (the fields the
 * builder reads; devices owned). */
typedef struct op_snapshot {
  int32_t degree[PSIM_MAX_OP_DIMS];
  int32_t replicas, stage, n_devices;
  const int32_t *devices; /* the config's list, shared (devlist.h); NULL: never taken */
} op_snapshot;

/* What the memo remembers of a strategy already costed. */
typedef struct memo_value {
  double time_s;
  bool fits;
} memo_value;

struct psim_delta {
  const psim_model *m;
  psim_cluster *c;
  psim_sim_options sim;
  psim_delta_options opt;
  psim_schedule_result sched; /* reused between evaluations */
  psim_hmap memo;             /* fingerprint -> index into memo_values */
  memo_value *memo_values;    /* memo_limit entries, in insertion order since the last flush */
  size_t memo_limit;          /* strategies remembered before the memo forgets all; 0 = no memo */
  psim_delta_stats stats;
  /* the last graph built, and the strategy it was built for */
  psim_build *prev;     /* NULL: none yet */
  psim_taskgraph spare; /* the graph before prev's: its buffers serve the next build */
  op_snapshot *seen;    /* per op: the configuration prev was built for */
  uint64_t seen_globals[2];
  uint8_t *changed; /* per op: differs from seen */
};

/* ---- fingerprint ---------------------------------------------------------- */

static uint64_t mix(uint64_t h, uint64_t v, uint64_t k) {
  h ^= v + k + (h << 6) + (h >> 2);
  h *= 0x9fb21c651e98df25ULL;
  return h ^ (h >> 29);
}

typedef struct hasher {
  uint64_t a, b;
} hasher;

static void hv(hasher *x, uint64_t v) {
  x->a = mix(x->a, v, 0x9e3779b97f4a7c15ULL);
  x->b = mix(x->b, v, 0xc2b2ae3d27d4eb4fULL);
}

static void hash_double(hasher *x, double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  hv(x, bits);
}

static void hash_globals(hasher *x, const psim_strategy *s) {
  hv(x, (uint64_t)s->n_ops);
  hv(x, (uint64_t)s->n_stages);
  hv(x, (uint64_t)s->virtual_stages);
  hv(x, (uint64_t)s->n_micro);
  hv(x, (uint64_t)s->micro_batch);
  hv(x, (uint64_t)s->schedule);
  hv(x, (uint64_t)s->recompute);
  if (psim_strategy_partial_recompute(s)) /* the layers recomputed; others hash as before */
    hv(x, ((uint64_t)s->recompute_method << 32) | (uint32_t)s->recompute_layers);
  hv(x, (uint64_t)s->sequence_parallel);
  hv(x, (uint64_t)s->zero_stage);
  hv(x, (uint64_t)s->overlap_grad_reduce);
  hv(x, (uint64_t)s->overlap_param_gather);
  hash_double(x, s->bucket_bytes);
  hv(x, (uint64_t)s->bucket_given);
  hv(x, (uint64_t)s->allreduce);
  hv(x, (uint64_t)s->sync);
  hv(x, (uint64_t)s->tmpl.dp); /* ZeRO's update sharding reads it */
  if (s->zero_stage >= 3)      /* the gathers' prefetch (zero.c); others hash as before */
    hash_double(x, s->zero_prefetch);
  if (s->sync == PSIM_SYNC_PS) { /* the servers (ps.c); other strategies hash as before */
    hv(x, ((uint64_t)(uint32_t)s->ps.mode << 32) | (uint32_t)s->ps.backup_k);
    hv(x, ((uint64_t)(uint32_t)s->ps.replicas << 32) | (uint32_t)s->ps.n_servers);
    for (int32_t k = 0; k < s->ps.n_servers; k++)
      hv(x, (uint64_t)s->ps.servers[k]);
  }
  int32_t ns = s->n_stages * (s->virtual_stages > 0 ? s->virtual_stages : 1);
  for (int32_t st = 0; st < ns; st++) {
    hv(x,
       ((uint64_t)(uint32_t)s->stages[st].first_layer << 32) | (uint32_t)s->stages[st].last_layer);
    for (int32_t k = 0; k < s->stages[st].n_devices; k++)
      hv(x, (uint64_t)s->stages[st].devices[k]);
  }
}

static void globals_fingerprint(const psim_strategy *s, uint64_t out[2]) {
  hasher x = {0x452821e638d01377ULL, 0xbe5466cf34e90c6cULL};
  hash_globals(&x, s);
  out[0] = x.a;
  out[1] = x.b;
}

void psim_delta_fingerprint(const psim_strategy *s, uint64_t out[2]) {
  hasher x = {0x243f6a8885a308d3ULL, 0x13198a2e03707344ULL};
  hash_globals(&x, s);
  for (int32_t o = 0; o < s->n_ops; o++) {
    const psim_op_config *cfg = &s->ops[o];
    hv(&x, 0xabcdef00u + (uint64_t)o);
    for (int32_t i = 0; i < PSIM_MAX_OP_DIMS; i++)
      hv(&x, (uint64_t)cfg->degree[i]);
    hv(&x, ((uint64_t)(uint32_t)cfg->replicas << 32) | (uint32_t)cfg->stage);
    hv(&x, (uint64_t)cfg->n_devices);
    for (int32_t e = 0; e < cfg->n_devices; e++)
      hv(&x, (uint64_t)cfg->devices[e]);
  }
  out[0] = x.a;
  out[1] = x.b;
}

/* ---- memo ----------------------------------------------------------------- */

/* The memo's entry for fingerprint h, or NULL. */
static const memo_value *memo_find(const psim_delta *d, const uint64_t h[2]) {
  int32_t i;
  if (!psim_hmap_find(&d->memo, (psim_hmap_key){h[0], h[1]}, &i))
    return NULL;
  assert(i >= 0 && (size_t)i < d->memo.count);
  return &d->memo_values[i];
}

/* Remembers (h -> time, fits); when full, forgets everything (a search's
 * working set is the recent past). Never allocates: the map was sized for
 * memo_limit entries (memo_init). */
static psim_status memo_put(psim_delta *d, const uint64_t h[2], double t, bool fits) {
  if (!d->memo_limit)
    return PSIM_OK;
  if (d->memo.count == d->memo_limit)
    psim_hmap_clear(&d->memo);
  size_t i = d->memo.count;
  assert(i < d->memo_limit);
  d->memo_values[i] = (memo_value){t, fits};
  return psim_hmap_put(&d->memo, (psim_hmap_key){h[0], h[1]}, (int32_t)i);
}

/* Sizes the memo for at least o->memo_entries strategies: the map's capacity
 * (a power of two) holds half as many, and all of those are used. */
static psim_status memo_init(psim_delta *d) {
  psim_hmap_init(&d->memo);
  if (d->opt.memo_entries <= 0)
    return PSIM_OK;
  if (d->opt.memo_entries > INT32_MAX / 2)
    return psim_error(PSIM_ENOMEM, "a search memo of %lld entries does not fit in memory",
                      (long long)d->opt.memo_entries);
  PSIM_CHECK(psim_hmap_reserve(&d->memo, (size_t)d->opt.memo_entries));
  d->memo_limit = d->memo.cap / 2;
  d->memo_values = psim_malloc(d->memo_limit * sizeof *d->memo_values);
  if (!d->memo_values)
    return psim_error(PSIM_ENOMEM, "out of memory for the search memo");
  return PSIM_OK;
}

/* ---- context -------------------------------------------------------------- */

psim_status psim_delta_create(const psim_model *m, psim_cluster *c, const psim_delta_options *o,
                              psim_delta **out) {
  psim_delta *d = psim_calloc(1, sizeof *d);
  if (!d)
    return psim_error(PSIM_ENOMEM, "out of memory for the search simulator");
  d->m = m;
  d->c = c;
  if (o)
    d->opt = *o;
  else
    psim_delta_options_init(&d->opt);
  if (d->opt.sim)
    d->sim = *d->opt.sim;
  else
    psim_sim_options_init(&d->sim);
  d->sim.keep_graph = false;
  psim_schedule_result_init(&d->sched);
  d->seen = psim_calloc((size_t)m->n_ops + 1, sizeof *d->seen);
  d->changed = psim_malloc((size_t)m->n_ops + 1);
  if (!d->seen || !d->changed) {
    psim_free(d->seen);
    psim_free(d->changed);
    psim_free(d);
    return psim_error(PSIM_ENOMEM, "out of memory for the search simulator");
  }
  psim_status st = memo_init(d);
  if (st != PSIM_OK) {
    psim_delta_free(d);
    return st;
  }
  *out = d;
  return PSIM_OK;
}

void psim_delta_free(psim_delta *d) {
  if (!d)
    return;
  psim_schedule_result_destroy(&d->sched);
  psim_build_free(d->prev);
  psim_tg_destroy(&d->spare);
  for (int32_t o = 0; o < d->m->n_ops; o++)
    psim_devlist_release(d->seen[o].devices);
  psim_free(d->seen);
  psim_free(d->changed);
  psim_hmap_destroy(&d->memo);
  psim_free(d->memo_values);
  psim_free(d);
}

const psim_delta_stats *psim_delta_get_stats(const psim_delta *d) {
  return &d->stats;
}

static bool same_config(const psim_op_config *a, const op_snapshot *b) {
  return b->devices && a->n_devices == b->n_devices && a->replicas == b->replicas &&
         a->stage == b->stage && memcmp(a->degree, b->degree, sizeof b->degree) == 0 &&
         (a->devices == b->devices ||
          memcmp(a->devices, b->devices, sizeof(int32_t) * (size_t)a->n_devices) == 0);
}

/* Takes a copy of cfg into snap, its device list shared: an edit of cfg's list copies it
 * first (psim_op_config_writable), so the snapshot keeps what the last graph was built for. */
static psim_status snapshot(const psim_op_config *cfg, op_snapshot *snap) {
  const int32_t *devs = psim_devlist_share(cfg->devices);
  psim_devlist_release(snap->devices);
  snap->devices = devs;
  memcpy(snap->degree, cfg->degree, sizeof snap->degree);
  snap->n_devices = cfg->n_devices;
  snap->replicas = cfg->replicas;
  snap->stage = cfg->stage;
  return PSIM_OK;
}

/* Flags the ops whose configuration differs from the last graph's; false
 * when there is no last graph or the global fields differ (build in full). */
static bool mark_changed(psim_delta *d, const psim_strategy *s) {
  uint64_t g[2];
  globals_fingerprint(s, g);
  bool same = d->prev && g[0] == d->seen_globals[0] && g[1] == d->seen_globals[1];
  for (int32_t o = 0; o < d->m->n_ops; o++)
    d->changed[o] = !same || !same_config(&s->ops[o], &d->seen[o]);
  return same;
}

/* Remembers s as the strategy of the last graph (the changed ops' copies). */
static psim_status remember(psim_delta *d, const psim_strategy *s) {
  globals_fingerprint(s, d->seen_globals);
  for (int32_t o = 0; o < d->m->n_ops; o++)
    if (d->changed[o])
      PSIM_CHECK(snapshot(&s->ops[o], &d->seen[o]));
  return PSIM_OK;
}

/* The simulate pipeline (simulate_impl.h) with a graph built incrementally
 * from the last one; only the figures a search reads. */
static psim_status simulate(psim_delta *d, const psim_strategy *s, double *time_s, bool *fits) {
  psim_build *b = NULL;
  bool reuse = mark_changed(d, s);
  psim_sim_reuse how = {reuse ? d->prev : NULL, d->changed, &d->spare};
  psim_sim_result r;
  psim_status st =
      psim_sim_pipeline(d->m, d->c, s, &d->sim, &how, PSIM_FIGURES_SEARCH, &b, &d->sched, &r);
  if (b) {
    psim_build_summary sum;
    psim_build_summarise(b, &sum);
    d->stats.segments_copied += sum.segments_copied;
    d->stats.segments_built += sum.segments_built;
  }
  d->stats.engine_s += r.simulate_s;
  d->stats.tasks_simulated += r.n_tasks;
  *time_s = r.iteration_time_s;
  *fits = r.fits;
  psim_sim_result_destroy(&r);
  if (st == PSIM_OK)
    st = remember(d, s);
  if (st != PSIM_OK) { /* keep the last good graph: its seen[] still describe it */
    psim_build_free(b);
    return st;
  }
  if (d->prev) { /* keep its graph's buffers for the next build */
    psim_tg_destroy(&d->spare);
    psim_taskgraph *g = psim_build_taskgraph(d->prev);
    d->spare = *g;
    psim_tg_init(g, 0);
    psim_build_free(d->prev);
  }
  d->prev = b;
  return PSIM_OK;
}

static psim_status verify(psim_delta *d, const psim_strategy *s, int32_t changed_op, double t,
                          bool fits) {
  psim_sim_result full;
  double t0 = psim_clock_now_s();
  psim_status st = psim_simulate(d->m, d->c, s, &d->sim, &full);
  d->stats.verify_s += psim_clock_now_s() - t0;
  PSIM_CHECK(st);
  double ft = full.iteration_time_s;
  bool ffits = full.fits;
  psim_sim_result_destroy(&full);
  d->stats.verified++;
  if (memcmp(&ft, &t, sizeof t) != 0 || ffits != fits)
    return psim_error(PSIM_EFAILED,
                      "delta simulation differs from the full simulation after changing op %s: "
                      "%.17g s (fits %d) against %.17g s (fits %d)",
                      changed_op >= 0 ? d->m->ops[changed_op].name : "(several)", t, fits, ft,
                      ffits);
  return PSIM_OK;
}

psim_status psim_delta_eval(psim_delta *d, const psim_strategy *s, int32_t changed_op,
                            double *time_s, bool *fits) {
  double t0 = psim_clock_now_s();
  uint64_t h[2];
  psim_delta_fingerprint(s, h);
  const memo_value *e = memo_find(d, h);
  d->stats.evaluations++;
  if (e) {
    *time_s = e->time_s;
    *fits = e->fits;
    d->stats.memo_hits++;
  } else {
    psim_status st = simulate(d, s, time_s, fits);
    if (st != PSIM_OK) {
      d->stats.eval_s += psim_clock_now_s() - t0;
      return st;
    }
    d->stats.simulated++;
    PSIM_CHECK(memo_put(d, h, *time_s, *fits));
  }
  if (d->opt.verify_every > 0 && d->stats.evaluations % d->opt.verify_every == 0)
    PSIM_CHECK(verify(d, s, changed_op, *time_s, *fits));
  d->stats.eval_s += psim_clock_now_s() - t0;
  return PSIM_OK;
}
