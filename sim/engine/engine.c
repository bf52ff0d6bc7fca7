/* engine.c - full simulation: list scheduling in ready-time order.
 *
 * A task is ready when all its predecessors have ended; its ready time is the
 * latest of their end times. Ready tasks are taken from a 4-ary min-heap keyed
 * by (ready time, task id), so ties break by id and results are deterministic.
 * A taken task starts at max(ready time, free time of each of its resources),
 * ends duration later, and marks all its resources busy until then; each
 * resource therefore serves its tasks first come (by ready time), first served.
 *
 * Ready times pushed are never below the key just popped (end >= ready), so the
 * heap holds only the frontier of the graph: for pipeline-like graphs a few
 * hundred entries, which stay in L1/L2. The ready time of a task that is not
 * yet taken is kept in start_s, which the pop overwrites with the start time.
 * No allocation happens per task; scratch is kept in the result for reuse. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/engine/taskgraph.h"

/* The invariants of the inner loop, asserted per task and per edge in the
 * sanitizer build (scripts/test's second pass) or with -DPSIM_ENGINE_DEBUG:
 * in the default build they cost about 7% of the engine's instructions
 * (tests/bench/mcmc_instructions.sh), the engine being the search's hot loop. */
#if defined(PSIM_ENGINE_DEBUG) || defined(__SANITIZE_ADDRESS__)
#define ENGINE_ASSERT(x) assert(x)
#else
#define ENGINE_ASSERT(x) ((void)0)
#endif

/* Per-task scratch: the two fields a release touches, in one cache line. */
typedef struct task_state {
  double ready;  /* latest end of the finished predecessors, s */
  int32_t left;  /* predecessors not yet finished */
  int32_t level; /* static orders: the key's level part inherited so far (in the padding) */
} task_state;

/* A heap entry packs (ready time, task id) into one 128-bit unsigned key:
 * the IEEE-754 bits of a non-negative double order like the double itself,
 * so comparing keys compares ready times and then ids, without branches on
 * NaN and with conditional moves in the sift loops. */
__extension__ typedef unsigned __int128 heap_key;

typedef struct heap_entry {
  double t;   /* ready time, s */
  int32_t id; /* task id; -1 for none */
} heap_entry;

static inline heap_key key_of(double t, int32_t id) {
  uint64_t bits;
  memcpy(&bits, &t, sizeof bits);
  return ((heap_key)bits << 32) | (uint32_t)id;
}

static inline heap_entry entry_of(heap_key k) {
  uint64_t bits = (uint64_t)(k >> 32);
  heap_entry e;
  memcpy(&e.t, &bits, sizeof e.t);
  e.id = (int32_t)(uint32_t)k;
  return e;
}

static inline int entry_less(heap_entry a, heap_entry b) {
  return key_of(a.t, a.id) < key_of(b.t, b.id);
}

static inline void heap_push(heap_key *h, size_t *n, heap_key e) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t parent = (i - 1) >> 2;
    if (!(e < h[parent]))
      break;
    h[i] = h[parent];
    i = parent;
  }
  h[i] = e;
}

/* Index of the smallest of the up to four children of i (first child c). */
static inline size_t min_child(const heap_key *h, size_t c, size_t n) {
  size_t best = c;
  heap_key bk = h[c];
  if (c + 4 <= n) {
    for (size_t k = c + 1; k < c + 4; k++) {
      int lt = h[k] < bk;
      best = lt ? k : best;
      bk = lt ? h[k] : bk;
    }
    return best;
  }
  for (size_t k = c + 1; k < n; k++)
    if (h[k] < h[best])
      best = k;
  return best;
}

/* Puts e at the root's place and sifts it down (m entries). */
static inline void sift_down(heap_key *h, size_t m, heap_key e) {
  size_t i = 0;
  for (;;) {
    size_t c = 4 * i + 1;
    if (c >= m)
      break;
    size_t b = min_child(h, c, m);
    if (!(h[b] < e))
      break;
    h[i] = h[b];
    i = b;
  }
  h[i] = e;
}

static inline heap_key heap_pop(heap_key *h, size_t *n) {
  heap_key top = h[0], e = h[--(*n)];
  if (*n > 0)
    sift_down(h, *n, e);
  return top;
}

/* Pops the minimum and pushes e in one sift (the heap is not empty). */
static inline heap_key heap_replace_top(heap_key *h, size_t n, heap_key e) {
  heap_key top = h[0];
  sift_down(h, n, e);
  return top;
}

void psim_schedule_result_init(psim_schedule_result *r) {
  memset(r, 0, sizeof *r);
}

void psim_schedule_result_destroy(psim_schedule_result *r) {
  psim_free(r->start_s);
  psim_free(r->end_s);
  psim_free(r->issue_end_s);
  psim_free(r->taken);
  psim_free(r->state_);
  psim_free(r->res_free_);
  psim_free(r->heap_);
  psim_free(r->chain_);
  psim_free(r->last_);
  memset(r, 0, sizeof *r);
}

/* Makes room in r for n tasks and nres resources. */
static psim_status reserve_result(psim_schedule_result *r, size_t n, int32_t nres) {
  if (n > r->cap_tasks_ || !r->start_s) {
    size_t cap = n ? n : 1;
    double *s = psim_realloc(r->start_s, cap * sizeof *s);
    if (s)
      r->start_s = s;
    double *e = s ? psim_realloc(r->end_s, cap * sizeof *e) : NULL;
    if (e)
      r->end_s = e;
    task_state *l = e ? psim_realloc(r->state_, cap * sizeof *l) : NULL;
    if (!l)
      return psim_error(PSIM_ENOMEM, "simulation: out of memory for %zu tasks", n);
    r->state_ = l;
    r->cap_tasks_ = cap;
  }
  if (r->record_issue) { /* sized with the graph each time: traces only */
    double *e = psim_realloc(r->issue_end_s, (n ? n : 1) * sizeof *e);
    if (!e)
      return psim_error(PSIM_ENOMEM, "simulation: out of memory for %zu tasks", n);
    r->issue_end_s = e;
  }
  if (r->record_taken) { /* sized with the graph each time: full figures only */
    int32_t *t = psim_realloc(r->taken, (n ? n : 1) * sizeof *t);
    if (!t)
      return psim_error(PSIM_ENOMEM, "simulation: out of memory for %zu tasks", n);
    r->taken = t;
  }
  if (nres > r->cap_resources_ || !r->res_free_) {
    double *f = psim_realloc(r->res_free_, (size_t)(nres ? nres : 1) * sizeof *f);
    if (!f)
      return psim_error(PSIM_ENOMEM, "simulation: out of memory for %d resources", nres);
    r->res_free_ = f;
    r->cap_resources_ = nres ? nres : 1;
  }
  return PSIM_OK;
}

/* Ensures the heap can take one more entry beyond n. */
static psim_status heap_room(psim_schedule_result *r, size_t n) {
  return psim_grow(&r->heap_, &r->cap_heap_, n + 1, sizeof(heap_key));
}

static inline heap_key static_key(int32_t level, int32_t id) {
  return ((heap_key)(uint32_t)level << 32) | (uint32_t)id;
}

/* Task i's own issue position in issue order (0 where the graph has none or it inherits). */
static inline int32_t own_position(const psim_taskgraph *g, int32_t i) {
  return g->position && g->position[i] > 0 ? g->position[i] : 0;
}

/* Seeds the heap with the tasks that have no predecessors (ready order's key (0 s, id) is the
 * static orders' (level 0, id); issue order's level, by_position, is the task's own position). */
static psim_status seed(const psim_taskgraph *g, psim_schedule_result *r, bool by_position,
                        size_t *hn) {
  int32_t n = g->n_tasks;
  task_state *ts = r->state_;
  for (int32_t i = 0; i < n; i++)
    ts[i] = (task_state){0.0, g->n_pred[i], 0};
  memset(r->res_free_, 0, (size_t)g->n_resources * sizeof *r->res_free_);
  *hn = 0;
  for (int32_t i = 0; i < n; i++) {
    if (g->n_pred[i] != 0)
      continue;
    PSIM_CHECK(heap_room(r, *hn));
    heap_push(r->heap_, hn, by_position ? static_key(own_position(g, i), i) : key_of(0.0, i));
  }
  assert(*hn <= (size_t)n); /* the sources, each once */
  return PSIM_OK;
}

/* Takes task u ready at t: returns its end time after booking its resources.
 * issue_end: NULL, or where the host's issue end of u goes. */
static inline double run_task(const psim_taskgraph *g, double *res_free, int32_t u, double t,
                              double *start, double *issue_end) {
  const int32_t *res = g->res;
  int32_t a = g->index_[u][0], b = g->index_[u + 1][0];
  if (g->issue && g->issue[u].res >= 0) { /* the host issues u (psim_task_issue) */
    const psim_task_issue *is = &g->issue[u];
    double h = res_free[is->res];
    if (is->sync && b > a && res_free[res[a]] > h)
      h = res_free[res[a]];
    if (is->sync == PSIM_ISSUE_INPUTS && t > h) /* t: the task's inputs are there */
      h = t;
    h += is->issue_s;
    res_free[is->res] = h;
    if (issue_end)
      issue_end[u] = h;
    if (h > t)
      t = h;
  }
  for (int32_t k = a; k < b; k++)
    if (res_free[res[k]] > t)
      t = res_free[res[k]];
  double end = t + g->duration_s[u];
  for (int32_t k = a; k < b; k++)
    res_free[res[k]] = end;
  *start = t;
  return end;
}

/* Starts loading what taking task v will read; v usually waits in the heap
 * long enough for the loads to land, hiding most cache misses. */
static inline void prefetch_task(const psim_taskgraph *g, const psim_schedule_result *r,
                                 int32_t v) {
  __builtin_prefetch(&g->index_[v]);
  __builtin_prefetch(&g->duration_s[v]);
  __builtin_prefetch(&r->start_s[v], 1);
  __builtin_prefetch(&r->end_s[v], 1);
}

/* Releases one edge into v, whose predecessor ended at end. When that makes v ready, v is held
 * back in *next if that is empty or v precedes it (the one held back before going to the heap),
 * else v goes to the heap. */
static inline psim_status offer(const psim_taskgraph *g, psim_schedule_result *r, int32_t v,
                                double end, size_t *hn, heap_entry *next) {
  task_state *ts = r->state_;
  ENGINE_ASSERT(v >= 0 && v < g->n_tasks && ts[v].left > 0); /* one release per edge */
  ts[v].ready = ts[v].ready < end ? end : ts[v].ready;
  if (--ts[v].left != 0)
    return PSIM_OK;
  heap_entry x = {ts[v].ready, v};
  prefetch_task(g, r, v);
  if (next->id < 0) {
    *next = x;
    return PSIM_OK;
  }
  if (*hn + 1 > r->cap_heap_)
    PSIM_CHECK(heap_room(r, *hn));
  if (entry_less(x, *next)) {
    heap_entry t = *next;
    *next = x;
    x = t;
  }
  heap_push(r->heap_, hn, key_of(x.t, x.id));
  return PSIM_OK;
}

/* Releases u's successors, and in stream order (chain != NULL) the next task on each of its
 * streams. The smallest newly ready one is returned in *next (id -1 if none) instead of being
 * pushed, so that a chain runs without heap traffic; the others go to the heap. */
static inline psim_status release(const psim_taskgraph *g, psim_schedule_result *r, int32_t u,
                                  double end, const int32_t *chain, size_t *hn, heap_entry *next) {
  next->id = -1;
  for (int32_t k = g->index_[u][1], e = g->index_[u + 1][1]; k < e; k++)
    PSIM_CHECK(offer(g, r, g->succ[k], end, hn, next));
  if (chain)
    for (int32_t k = g->index_[u][0], e = g->index_[u + 1][0]; k < e; k++)
      if (chain[k] >= 0)
        PSIM_CHECK(offer(g, r, chain[k], end, hn, next));
  return PSIM_OK;
}

/* Decides what runs after a task: the held-back successor *next when it
 * precedes everything in the heap, else the heap's minimum (pushing *next). */
static inline psim_status choose_next(psim_schedule_result *r, size_t *hn, heap_entry *next) {
  heap_key *h = r->heap_;
  if (next->id >= 0) {
    heap_key k = key_of(next->t, next->id);
    if (*hn == 0 || k < h[0])
      return PSIM_OK;
    *next = entry_of(heap_replace_top(h, *hn, k));
    ENGINE_ASSERT(key_of(next->t, next->id) <= h[0]); /* the heap gave its minimum */
    return PSIM_OK;
  }
  if (*hn == 0) {
    next->id = -1;
    return PSIM_OK;
  }
  *next = entry_of(heap_pop(r->heap_, hn));
  ENGINE_ASSERT(*hn == 0 || key_of(next->t, next->id) <= h[0]); /* the heap gave its minimum */
  return PSIM_OK;
}

/* The static orders (PSIM_ENGINE_PROGRAM, _LEVEL, _PASS_LEVEL, _ISSUE): Kahn's algorithm taking
 * the ready task of least (level, id), the level being 0 throughout in program order and the
 * inherited issue position in issue order. A key is
 * level << 32 | id, so the same heap serves; NO_KEY is above every key (ids < 2^31). The pop
 * order is a function of the graph alone, and a popped task's predecessors have all ended,
 * so run_task starts it at max(its ready time, its resources' and host's free times): each
 * resource serves its tasks in that fixed order. */
#define NO_KEY (~(heap_key)0)

/* Releases u's successors (each gets level `level` at least; in issue order, pos != NULL, a
 * newly ready task's own position where that is higher); the least newly ready key is held
 * back in *next (NO_KEY if none), the others go to the heap. */
static inline psim_status release_static(const psim_taskgraph *g, psim_schedule_result *r,
                                         int32_t u, double end, int32_t level, const int32_t *pos,
                                         size_t *hn, heap_key *next) {
  task_state *ts = r->state_;
  *next = NO_KEY;
  for (int32_t k = g->index_[u][1], e = g->index_[u + 1][1]; k < e; k++) {
    int32_t v = g->succ[k];
    ENGINE_ASSERT(v >= 0 && v < g->n_tasks && ts[v].left > 0); /* one release per edge */
    ts[v].ready = ts[v].ready < end ? end : ts[v].ready;
    ts[v].level = ts[v].level < level ? level : ts[v].level;
    if (--ts[v].left != 0)
      continue;
    int32_t lv = ts[v].level;
    if (pos && pos[v] > lv)
      lv = pos[v];
    heap_key x = static_key(lv, v);
    prefetch_task(g, r, v);
    if (*next == NO_KEY) {
      *next = x;
      continue;
    }
    if (*hn + 1 > r->cap_heap_)
      PSIM_CHECK(heap_room(r, *hn));
    if (x < *next) {
      heap_key t = *next;
      *next = x;
      x = t;
    }
    heap_push(r->heap_, hn, x);
  }
  return PSIM_OK;
}

/* The held-back key when it precedes the heap's minimum, else the minimum. */
static inline void choose_static(psim_schedule_result *r, size_t *hn, heap_key *next) {
  heap_key *h = r->heap_;
  if (*next != NO_KEY) {
    if (*hn != 0 && h[0] < *next)
      *next = heap_replace_top(h, *hn, *next);
    return;
  }
  *next = *hn == 0 ? NO_KEY : heap_pop(h, hn);
}

/* What a task adds to its successors' level: 0 in program and issue order, 1 in level order;
 * in pass level order 2 for a backward kernel (twice a forward's FLOPs), 1 for other kernels,
 * 0 for communication, host and barrier tasks. */
static inline int32_t level_step(const psim_taskgraph *g, psim_engine_order o, int32_t u) {
  if (o == PSIM_ENGINE_ISSUE)
    return 0;
  if (o != PSIM_ENGINE_PASS_LEVEL)
    return o == PSIM_ENGINE_LEVEL;
  if (g->info[u].kind != PSIM_TASK_COMPUTE)
    return 0;
  return g->info[u].pass == PSIM_TP_BWD ? 2 : 1;
}

/* Runs every task in the static order; *done counts the tasks run. */
static psim_status simulate_static(const psim_taskgraph *g, psim_schedule_result *r,
                                   psim_engine_order o, size_t hn, int32_t *done) {
  const task_state *ts = r->state_;
  const int32_t *pos = o == PSIM_ENGINE_ISSUE ? g->position : NULL;
  double makespan = 0;
  double *issue_end = r->record_issue ? r->issue_end_s : NULL;
  int32_t *taken = r->record_taken ? r->taken : NULL;
  heap_key cur = NO_KEY;
  choose_static(r, &hn, &cur);
  while (cur != NO_KEY) {
    int32_t u = (int32_t)(uint32_t)cur, level = (int32_t)(uint32_t)(cur >> 32);
    ENGINE_ASSERT(u < g->n_tasks && ts[u].left == 0);
    double end = run_task(g, r->res_free_, u, ts[u].ready, &r->start_s[u], issue_end);
    r->end_s[u] = end;
    if (taken)
      taken[*done] = u;
    if (end > makespan)
      makespan = end;
    PSIM_CHECK(release_static(g, r, u, end, level + level_step(g, o, u), pos, &hn, &cur));
    choose_static(r, &hn, &cur);
    if ((++*done & 0xFFFF) == 0 && psim_interrupted())
      return psim_error(PSIM_EINTERRUPTED, "simulation interrupted after %d of %d tasks", *done,
                        g->n_tasks);
  }
  r->makespan_s = makespan;
  return PSIM_OK;
}

/* Runs every task first come (ready-time order), in stream order (chain != NULL) after the task
 * before it on each of its streams too; *done counts the tasks run. Inlined into its two callers
 * so that ready order's loop has no test of chain. */
__attribute__((always_inline)) static inline psim_status simulate_ready(const psim_taskgraph *g,
                                                                        psim_schedule_result *r,
                                                                        const int32_t *chain,
                                                                        size_t hn, int32_t *done) {
  double makespan = 0;
  heap_entry cur = {0, -1};
  double *issue_end = r->record_issue ? r->issue_end_s : NULL;
  int32_t *taken = r->record_taken ? r->taken : NULL;
  PSIM_CHECK(choose_next(r, &hn, &cur));
  while (cur.id >= 0) {
    int32_t u = cur.id;
    ENGINE_ASSERT(u < g->n_tasks);
    double end = run_task(g, r->res_free_, u, cur.t, &r->start_s[u], issue_end);
    r->end_s[u] = end;
    if (taken)
      taken[*done] = u;
    if (end > makespan)
      makespan = end;
    PSIM_CHECK(release(g, r, u, end, chain, &hn, &cur));
    PSIM_CHECK(choose_next(r, &hn, &cur));
    if ((++*done & 0xFFFF) == 0 && psim_interrupted())
      return psim_error(PSIM_EINTERRUPTED, "simulation interrupted after %d of %d tasks", *done,
                        g->n_tasks);
  }
  r->makespan_s = makespan;
  return PSIM_OK;
}

/* Stream order (PSIM_ENGINE_STREAM): each device stream (a resource below g->n_streams) serves
 * its tasks in issue order's sequence, every other resource (links, hosts) first come. A first
 * pass walks issue order without durations (Kahn's algorithm, least (inherited position, id)
 * first, as simulate_static) and links each task to the next one on each of its streams
 * (r->chain_, per resource slot); the second is ready order with those links as finish-to-start
 * edges (a stream serves one task at a time, so an edge is exactly its order). Every link
 * follows the one linear extension of the graph that the walk takes, so links and edges cannot
 * close a cycle, which per-resource orders chosen apart could. */

/* Links u, taken now by the walk, behind the last task so far on each of its streams: returns
 * on how many it waits (a stream u holds twice counts once). */
static inline int32_t chain_task(const psim_taskgraph *g, psim_schedule_result *r, int32_t u) {
  int32_t a = g->index_[u][0], b = g->index_[u + 1][0], waits = 0;
  for (int32_t k = a; k < b; k++) {
    int32_t s = g->res[k];
    r->chain_[k] = -1;
    if (s >= g->n_streams)
      continue;
    int32_t l = r->last_[s];
    if (l >= a && l < b)
      continue; /* u itself */
    if (l >= 0) {
      r->chain_[l] = u;
      waits++;
    }
    r->last_[s] = k;
  }
  return waits;
}

/* The first pass: walks issue order from the seeded heap (hn entries), linking each stream's
 * tasks; leaves in each task's level the number of its links. */
static psim_status walk_streams(const psim_taskgraph *g, psim_schedule_result *r, size_t hn) {
  task_state *ts = r->state_;
  PSIM_CHECK(PSIM_VEC_RESERVE(r->chain_, r->cap_chain_, g->n_res ? g->n_res : 1));
  int32_t ns = g->n_streams > 0 ? g->n_streams : 0;
  PSIM_CHECK(PSIM_VEC_RESERVE(r->last_, r->cap_last_, (size_t)(ns ? ns : 1)));
  for (int32_t s = 0; s < ns; s++)
    r->last_[s] = -1;
  int32_t done = 0;
  heap_key cur = NO_KEY;
  choose_static(r, &hn, &cur);
  while (cur != NO_KEY) {
    int32_t u = (int32_t)(uint32_t)cur, level = (int32_t)(uint32_t)(cur >> 32);
    int32_t waits = chain_task(g, r, u);
    PSIM_CHECK(release_static(g, r, u, 0.0, level, g->position, &hn, &cur));
    ts[u].level = waits; /* u's level is spent: release_static read it from the key */
    choose_static(r, &hn, &cur);
    done++;
  }
  if (done != g->n_tasks)
    return psim_error(PSIM_EFAILED, "simulation: only %d of %d tasks ran (cycle?)", done,
                      g->n_tasks);
  return PSIM_OK;
}

/* Stream order: the walk, then ready order with every task also waiting on its links. */
static psim_status simulate_stream(const psim_taskgraph *g, psim_schedule_result *r, size_t hn,
                                   int32_t *done) {
  PSIM_CHECK(walk_streams(g, r, hn));
  task_state *ts = r->state_;
  memset(r->res_free_, 0, (size_t)g->n_resources * sizeof *r->res_free_);
  hn = 0;
  for (int32_t i = 0; i < g->n_tasks; i++) {
    ts[i] = (task_state){0.0, g->n_pred[i] + ts[i].level, 0};
    if (ts[i].left != 0)
      continue;
    if (hn + 1 > r->cap_heap_) /* the walk's seed held every source already */
      PSIM_CHECK(heap_room(r, hn));
    heap_push(r->heap_, &hn, key_of(0.0, i));
  }
  return simulate_ready(g, r, r->chain_, hn, done);
}

psim_status psim_tg_simulate(const psim_taskgraph *g, psim_schedule_result *r) {
  if (!g->finalized)
    return psim_error(PSIM_EFAILED, "simulation: the task graph is not finalized");
  if ((unsigned)r->order >= PSIM_ENGINE_ORDER_COUNT)
    return psim_error(PSIM_EINPUT, "simulation: unknown engine order %d", (int)r->order);
  r->n_taken = 0;
  PSIM_CHECK(reserve_result(r, (size_t)g->n_tasks, g->n_resources));
  r->n_tasks = g->n_tasks;
  r->makespan_s = 0;
  size_t hn = 0;
  bool by_position = r->order == PSIM_ENGINE_ISSUE || r->order == PSIM_ENGINE_STREAM;
  PSIM_CHECK(seed(g, r, by_position, &hn));
  int32_t done = 0;
  if (r->order == PSIM_ENGINE_READY)
    PSIM_CHECK(simulate_ready(g, r, NULL, hn, &done));
  else if (r->order == PSIM_ENGINE_STREAM)
    PSIM_CHECK(simulate_stream(g, r, hn, &done));
  else
    PSIM_CHECK(simulate_static(g, r, r->order, hn, &done));
  if (done != g->n_tasks) {
    r->makespan_s = 0;
    return psim_error(PSIM_EFAILED, "simulation: only %d of %d tasks ran (cycle?)", done,
                      g->n_tasks);
  }
  r->n_taken = r->record_taken ? done : 0;
  return PSIM_OK;
}

static const char *const order_names[PSIM_ENGINE_ORDER_COUNT] = {
    "ready", "program-order", "level-order", "pass-level-order", "issue-order", "stream-order"};

bool psim_engine_order_parse(const char *name, psim_engine_order *out) {
  for (int i = 0; name && i < PSIM_ENGINE_ORDER_COUNT; i++)
    if (!strcmp(name, order_names[i])) {
      *out = (psim_engine_order)i;
      return true;
    }
  return false;
}

const char *psim_engine_order_name(psim_engine_order o) {
  return (unsigned)o < PSIM_ENGINE_ORDER_COUNT ? order_names[o] : "?";
}

psim_engine_order psim_engine_order_from_env(void) {
  const char *v = getenv("PSIM_ENGINE");
  psim_engine_order o = PSIM_ENGINE_READY;
  if (v && *v && !psim_engine_order_parse(v, &o)) {
    static int warned; /* once per process */
    if (!warned++)
      fprintf(stderr,
              "plansim: PSIM_ENGINE=%s is not ready, program-order, level-order, "
              "pass-level-order, issue-order or stream-order; using ready\n",
              v);
  }
  return o;
}
