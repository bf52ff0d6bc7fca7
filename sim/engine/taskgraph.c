/* taskgraph.c - building the task graph: tasks, resources, edges, CSR.
 *
 * Storage is structure-of-arrays with 32-bit indices so that the engine's
 * inner loop touches a few dense arrays (engine.c). res_first always holds
 * n_tasks + 1 entries (res_first[n_tasks] == n_res), so a task's resources are
 * res[res_first[t] .. res_first[t + 1]) both before and after finalize. */
#include "sim/engine/taskgraph.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "sim/core/alloc.h"

/* Largest task, resource-slot or edge count: indices are int32_t. */
#define TG_MAX_COUNT ((size_t)INT32_MAX - 1)

static atomic_int interrupt_flag;

void psim_set_interrupt(int on) {
  atomic_store(&interrupt_flag, on ? 1 : 0);
}

int psim_interrupted(void) {
  return atomic_load_explicit(&interrupt_flag, memory_order_relaxed);
}

void psim_tg_init(psim_taskgraph *g, int32_t n_resources) {
  memset(g, 0, sizeof *g);
  g->n_resources = n_resources > 0 ? n_resources : 0;
}

static void free_csr(psim_taskgraph *g) {
  psim_free(g->succ_first);
  psim_free(g->succ);
  psim_free(g->n_pred);
  psim_free(g->index_);
  g->succ_first = g->succ = g->n_pred = NULL;
  g->index_ = NULL;
  g->cap_csr_tasks_ = g->cap_csr_edges_ = 0;
  g->finalized = 0;
}

/* Successor-list buffers for n tasks and e edges, kept between finalizes
 * (a graph cleared and rebuilt, as the search does, allocates nothing). */
static psim_status reserve_csr(psim_taskgraph *g, size_t n, size_t e) {
  if (n + 1 > g->cap_csr_tasks_) {
    size_t cap = n + 1 + n / 8;
    psim_free(g->succ_first);
    psim_free(g->n_pred);
    psim_free(g->index_);
    g->succ_first = psim_malloc(cap * sizeof *g->succ_first);
    g->n_pred = psim_malloc(cap * sizeof *g->n_pred);
    g->index_ = psim_malloc(cap * sizeof *g->index_);
    g->cap_csr_tasks_ = cap;
  }
  if (e + 1 > g->cap_csr_edges_) {
    size_t cap = e + 1 + e / 8;
    psim_free(g->succ);
    g->succ = psim_malloc(cap * sizeof *g->succ);
    g->cap_csr_edges_ = cap;
  }
  if (!g->succ_first || !g->succ || !g->n_pred || !g->index_) {
    free_csr(g);
    return psim_error(PSIM_ENOMEM, "task graph: out of memory for %zu edges", e);
  }
  return PSIM_OK;
}

void psim_tg_destroy(psim_taskgraph *g) {
  psim_free(g->duration_s);
  psim_free(g->info);
  psim_free(g->res_first);
  psim_free(g->res);
  psim_free(g->edge_from);
  psim_free(g->edge_to);
  psim_free(g->issue);
  psim_free(g->bytes);
  psim_free(g->position);
  free_csr(g);
  memset(g, 0, sizeof *g);
}

void psim_tg_clear(psim_taskgraph *g, int32_t n_resources) {
  g->n_tasks = 0;
  g->n_res = 0;
  g->n_edges = 0;
  g->n_resources = n_resources > 0 ? n_resources : 0;
  g->n_streams = 0;
  if (g->res_first)
    g->res_first[0] = 0;
  g->finalized = 0;
}

/* The doubled capacity (from 64) that holds need entries; PSIM_ELIMIT naming
 * what ("tasks", "edges") past TG_MAX_COUNT. */
static psim_status doubled(size_t cap, size_t need, const char *what, size_t *out) {
  if (need > TG_MAX_COUNT)
    return psim_error(PSIM_ELIMIT, "task graph: more than %zu %s", TG_MAX_COUNT, what);
  cap = cap ? cap : 64;
  while (cap < need)
    cap *= 2;
  *out = cap;
  return PSIM_OK;
}

/* Reallocates *p to n elements of elem bytes; on failure *p is unchanged and
 * the message names cap entries of what. */
static psim_status regrow(void **p, size_t n, size_t elem, size_t cap, const char *what) {
  void *q = psim_realloc(*p, n * elem);
  if (!q)
    return psim_error(PSIM_ENOMEM, "task graph: out of memory for %zu %s", cap, what);
  *p = q;
  return PSIM_OK;
}

/* Grows the per-task arrays together to hold need tasks (+1 for res_first). */
static psim_status grow_tasks_to(psim_taskgraph *g, size_t need) {
  size_t cap = 0;
  PSIM_CHECK(doubled(g->cap_tasks, need, "tasks", &cap));
  PSIM_CHECK(regrow((void **)&g->duration_s, cap, sizeof *g->duration_s, cap, "tasks"));
  PSIM_CHECK(regrow((void **)&g->info, cap, sizeof *g->info, cap, "tasks"));
  bool fresh = !g->res_first;
  PSIM_CHECK(regrow((void **)&g->res_first, cap + 1, sizeof *g->res_first, cap, "tasks"));
  if (fresh)
    g->res_first[0] = 0;
  if (g->issue)
    PSIM_CHECK(regrow((void **)&g->issue, cap, sizeof *g->issue, cap, "tasks"));
  if (g->bytes)
    PSIM_CHECK(regrow((void **)&g->bytes, cap, sizeof *g->bytes, cap, "tasks"));
  if (g->position)
    PSIM_CHECK(regrow((void **)&g->position, cap, sizeof *g->position, cap, "tasks"));
  g->cap_tasks = cap;
  return PSIM_OK;
}

static inline psim_status grow_tasks(psim_taskgraph *g, size_t need) {
  return need <= g->cap_tasks ? PSIM_OK : grow_tasks_to(g, need);
}

/* Grows both edge arrays to the same capacity (doubling). */
static psim_status grow_edges_to(psim_taskgraph *g, size_t need) {
  size_t cap = 0;
  PSIM_CHECK(doubled(g->cap_edges, need, "edges", &cap));
  PSIM_CHECK(regrow((void **)&g->edge_from, cap, sizeof *g->edge_from, cap, "edges"));
  PSIM_CHECK(regrow((void **)&g->edge_to, cap, sizeof *g->edge_to, cap, "edges"));
  g->cap_edges = cap;
  return PSIM_OK;
}

static inline psim_status grow_edges(psim_taskgraph *g, size_t need) {
  return need <= g->cap_edges ? PSIM_OK : grow_edges_to(g, need);
}

psim_status psim_tg_reserve(psim_taskgraph *g, size_t tasks, size_t res, size_t edges) {
  PSIM_CHECK(grow_tasks(g, tasks));
  if (res > TG_MAX_COUNT)
    return psim_error(PSIM_ELIMIT, "task graph: more than %zu resource slots", TG_MAX_COUNT);
  PSIM_CHECK(PSIM_VEC_RESERVE(g->res, g->cap_res, res));
  return grow_edges(g, edges);
}

/* Allocates the issue array (every task: no issue latency). */
static psim_status alloc_issue(psim_taskgraph *g) {
  g->issue = psim_malloc((g->cap_tasks ? g->cap_tasks : 1) * sizeof *g->issue);
  if (!g->issue)
    return psim_error(PSIM_ENOMEM, "task graph: out of memory");
  for (int32_t i = 0; i < g->n_tasks; i++)
    g->issue[i] = (psim_task_issue){0, -1, 0};
  return PSIM_OK;
}

static inline psim_status ensure_issue(psim_taskgraph *g) {
  return g->issue ? PSIM_OK : alloc_issue(g);
}

psim_status psim_tg_track_bytes(psim_taskgraph *g, bool on) {
  if (!on || g->bytes) {
    if (!on)
      psim_free(g->bytes);
    g->bytes = on ? g->bytes : NULL;
    return PSIM_OK;
  }
  g->bytes = psim_calloc(g->cap_tasks ? g->cap_tasks : 1, sizeof *g->bytes);
  return g->bytes ? PSIM_OK : psim_error(PSIM_ENOMEM, "task graph: out of memory");
}

psim_status psim_tg_track_positions(psim_taskgraph *g, bool on) {
  if (!on || g->position) {
    if (!on)
      psim_free(g->position);
    g->position = on ? g->position : NULL;
    return PSIM_OK;
  }
  size_t cap = g->cap_tasks ? g->cap_tasks : 1;
  g->position = psim_malloc(cap * sizeof *g->position);
  if (!g->position)
    return psim_error(PSIM_ENOMEM, "task graph: out of memory");
  for (size_t i = 0; i < cap; i++)
    g->position[i] = -1;
  return PSIM_OK;
}

/* Whether (res, issue_s) is a valid issue latency in g. */
static inline bool issue_ok(const psim_taskgraph *g, int32_t res, double issue_s) {
  return res >= 0 && res < g->n_resources && issue_s >= 0 && isfinite(issue_s);
}

psim_status psim_tg_set_issue(psim_taskgraph *g, int32_t task, int32_t res, double issue_s,
                              bool sync) {
  if (task < 0 || task >= g->n_tasks || !issue_ok(g, res, issue_s))
    return psim_error(PSIM_EINPUT, "task graph: bad issue latency for task %d", task);
  PSIM_CHECK(ensure_issue(g));
  g->issue[task] = (psim_task_issue){issue_s, res, sync ? PSIM_ISSUE_DRAIN : 0};
  return PSIM_OK;
}

static const psim_task_info default_info = {PSIM_TASK_COMPUTE, PSIM_TP_FWD, -1, -1, -1, -1, -1};

static psim_status check_task_args(const psim_taskgraph *g, double duration_s, const int32_t *res,
                                   int32_t n_res) {
  if (!(duration_s >= 0) || !isfinite(duration_s))
    return psim_error(PSIM_EINPUT, "task graph: task %d: duration %g s is not a finite number >= 0",
                      g->n_tasks, duration_s);
  if (n_res < 0 || (n_res > 0 && !res))
    return psim_error(PSIM_EINPUT, "task graph: task %d: bad resource list", g->n_tasks);
  for (int32_t i = 0; i < n_res; i++)
    if (res[i] < 0 || res[i] >= g->n_resources)
      return psim_error(PSIM_EINPUT, "task graph: task %d: resource %d outside [0, %d)", g->n_tasks,
                        res[i], g->n_resources);
  return PSIM_OK;
}

/* Room for one more task holding n_res resources. */
static inline psim_status reserve_task(psim_taskgraph *g, int32_t n_res) {
  PSIM_CHECK(grow_tasks(g, (size_t)g->n_tasks + 1));
  if (g->n_res + (size_t)n_res > TG_MAX_COUNT)
    return psim_error(PSIM_ELIMIT, "task graph: more than %zu resource slots", TG_MAX_COUNT);
  return PSIM_VEC_RESERVE(g->res, g->cap_res, g->n_res + (size_t)n_res);
}

/* Appends a checked task into reserved room (issue: NULL = none, else g->issue
 * exists); returns its id. */
static inline int32_t push_task(psim_taskgraph *g, double duration_s, const int32_t *res,
                                int32_t n_res, const psim_task_info *info,
                                const psim_task_issue *issue) {
  int32_t t = g->n_tasks;
  for (int32_t i = 0; i < n_res; i++) /* usually one: a loop, not a memcpy call */
    g->res[g->n_res + (size_t)i] = res[i];
  g->n_res += (size_t)n_res;
  g->duration_s[t] = duration_s;
  g->info[t] = info ? *info : default_info;
  if (g->issue)
    g->issue[t] = issue ? *issue : (psim_task_issue){0, -1, 0};
  if (g->bytes)
    g->bytes[t] = 0;
  if (g->position)
    g->position[t] = -1;
  g->res_first[t + 1] = (int32_t)g->n_res;
  g->n_tasks = t + 1;
  g->finalized = 0; /* successor lists are stale; their buffers stay for the next finalize */
  return t;
}

psim_status psim_tg_add_task(psim_taskgraph *g, double duration_s, const int32_t *res,
                             int32_t n_res, const psim_task_info *info, int32_t *id) {
  PSIM_CHECK(check_task_args(g, duration_s, res, n_res));
  PSIM_CHECK(reserve_task(g, n_res));
  int32_t t = push_task(g, duration_s, res, n_res, info, NULL);
  if (id)
    *id = t;
  return PSIM_OK;
}

psim_status psim_tg_add_edge(psim_taskgraph *g, int32_t from, int32_t to) {
  if (from < 0 || from >= g->n_tasks || to < 0 || to >= g->n_tasks)
    return psim_error(PSIM_EINPUT, "task graph: edge %d -> %d names a task outside [0, %d)", from,
                      to, g->n_tasks);
  PSIM_CHECK(grow_edges(g, g->n_edges + 1));
  psim_tg_add_edge_reserved(g, from, to);
  return PSIM_OK;
}

psim_status psim_tg_add_kernel(psim_taskgraph *g, double duration_s, int32_t res,
                               const psim_task_info *info, const psim_task_issue *issue,
                               int32_t after, int32_t *id) {
  if (after >= g->n_tasks)
    return psim_error(PSIM_EINPUT, "task graph: kernel after task %d, outside [0, %d)", after,
                      g->n_tasks);
  if (issue && !issue_ok(g, issue->res, issue->issue_s))
    return psim_error(PSIM_EINPUT, "task graph: task %d: bad issue latency %g s on resource %d",
                      g->n_tasks, issue->issue_s, issue->res);
  PSIM_CHECK(check_task_args(g, duration_s, &res, 1));
  PSIM_CHECK(reserve_task(g, 1));
  PSIM_CHECK(grow_edges(g, g->n_edges + 1));
  if (issue)
    PSIM_CHECK(ensure_issue(g));
  *id = push_task(g, duration_s, &res, 1, info, issue);
  if (after >= 0)
    psim_tg_add_edge_reserved(g, after, *id);
  return PSIM_OK;
}

psim_status psim_tg_append_tasks(psim_taskgraph *g, const psim_taskgraph *src, int32_t t0,
                                 int32_t t1) {
  if (t0 < 0 || t1 < t0 || t1 > src->n_tasks || src->n_resources > g->n_resources)
    return psim_error(PSIM_EINPUT, "task graph: cannot copy tasks [%d, %d)", t0, t1);
  size_t n = (size_t)(t1 - t0), r0 = (size_t)src->res_first[t0];
  size_t nr = (size_t)src->res_first[t1] - r0;
  PSIM_CHECK(grow_tasks(g, (size_t)g->n_tasks + n));
  if (g->n_res + nr > TG_MAX_COUNT)
    return psim_error(PSIM_ELIMIT, "task graph: more than %zu resource slots", TG_MAX_COUNT);
  PSIM_CHECK(PSIM_VEC_RESERVE(g->res, g->cap_res, g->n_res + nr));
  if (src->issue)
    PSIM_CHECK(ensure_issue(g));
  int32_t at = g->n_tasks;
  memcpy(g->duration_s + at, src->duration_s + t0, n * sizeof *g->duration_s);
  memcpy(g->info + at, src->info + t0, n * sizeof *g->info);
  if (nr > 0) /* a graph of tasks holding nothing may have no resource array (NULL) */
    memcpy(g->res + g->n_res, src->res + r0, nr * sizeof *g->res);
  int32_t shift = (int32_t)g->n_res - (int32_t)r0;
  for (size_t i = 1; i <= n; i++)
    g->res_first[(size_t)at + i] = src->res_first[(size_t)t0 + i] + shift;
  if (g->issue) {
    for (size_t i = 0; i < n; i++)
      g->issue[(size_t)at + i] =
          src->issue ? src->issue[(size_t)t0 + i] : (psim_task_issue){0, -1, 0};
  }
  for (size_t i = 0; g->bytes && i < n; i++)
    g->bytes[(size_t)at + i] = src->bytes ? src->bytes[(size_t)t0 + i] : 0;
  for (size_t i = 0; g->position && i < n; i++)
    g->position[(size_t)at + i] = src->position ? src->position[(size_t)t0 + i] : -1;
  g->n_res += nr;
  g->n_tasks = at + (int32_t)n;
  g->finalized = 0; /* successor lists are stale; their buffers stay for the next finalize */
  return PSIM_OK;
}

psim_status psim_tg_append_edges(psim_taskgraph *g, const psim_taskgraph *src, size_t e0, size_t e1,
                                 const int32_t *rename, bool *mapped) {
  if (e1 < e0 || e1 > src->n_edges)
    return psim_error(PSIM_EINPUT, "task graph: cannot copy edges [%zu, %zu)", e0, e1);
  PSIM_CHECK(grow_edges(g, g->n_edges + (e1 - e0)));
  size_t start = g->n_edges;
  *mapped = true;
  for (size_t e = e0; e < e1; e++) {
    int32_t u = rename[src->edge_from[e]], v = rename[src->edge_to[e]];
    if (u < 0 || v < 0) { /* no counterpart: undo */
      g->n_edges = start;
      *mapped = false;
      return PSIM_OK;
    }
    if (u >= g->n_tasks || v >= g->n_tasks) {
      g->n_edges = start;
      return psim_error(PSIM_EINPUT,
                        "task graph: copied edge %d -> %d names a task outside [0, %d)", u, v,
                        g->n_tasks);
    }
    psim_tg_add_edge_reserved(g, u, v);
  }
  return PSIM_OK;
}

psim_status psim_tg_truncate(psim_taskgraph *g, int32_t n) {
  if (n < 0 || n > g->n_tasks)
    return psim_error(PSIM_EINPUT, "task graph: cannot truncate %d tasks to %d", g->n_tasks, n);
  g->n_res = (size_t)g->res_first[n];
  g->n_tasks = n;
  g->finalized = 0;
  return PSIM_OK;
}

/* Counting sort of the edges by source into succ_first/succ; in-degrees;
 * the engine's per-task index (index_). */
static void build_csr(psim_taskgraph *g) {
  int32_t n = g->n_tasks;
  memset(g->succ_first, 0, ((size_t)n + 1) * sizeof *g->succ_first);
  memset(g->n_pred, 0, ((size_t)n ? (size_t)n : 1) * sizeof *g->n_pred);
  for (size_t e = 0; e < g->n_edges; e++) {
    g->succ_first[g->edge_from[e] + 1]++;
    g->n_pred[g->edge_to[e]]++;
  }
  for (int32_t i = 0; i < n; i++)
    g->succ_first[i + 1] += g->succ_first[i];
  /* Fill from the end of each list backwards so edge order is kept; then
   * succ_first[u + 1] holds the start of u, so shift the array left by one. */
  for (size_t e = g->n_edges; e-- > 0;) {
    int32_t u = g->edge_from[e];
    g->succ[--g->succ_first[u + 1]] = g->edge_to[e];
  }
  for (int32_t i = 0; i < n; i++) { /* the shift, and the engine's index in the same pass */
    g->succ_first[i] = g->succ_first[i + 1];
    g->index_[i][0] = g->res_first[i];
    g->index_[i][1] = g->succ_first[i];
  }
  g->succ_first[n] = (int32_t)g->n_edges;
  g->index_[n][0] = g->res_first[n];
  g->index_[n][1] = g->succ_first[n];
}

/* Names a task on a cycle: among tasks Kahn's algorithm left unprocessed,
 * every one has an unprocessed predecessor; walking such predecessors n
 * times lands on a cycle. pred is scratch of n entries. */
static int32_t task_on_cycle(const psim_taskgraph *g, const int32_t *left, int32_t *pred) {
  int32_t n = g->n_tasks, start = -1;
  for (int32_t i = 0; i < n; i++)
    pred[i] = -1;
  for (size_t e = 0; e < g->n_edges; e++)
    if (left[g->edge_from[e]] > 0 && left[g->edge_to[e]] > 0)
      pred[g->edge_to[e]] = g->edge_from[e];
  for (int32_t i = 0; i < n && start < 0; i++)
    if (left[i] > 0)
      start = i;
  for (int32_t k = 0; k < n && start >= 0 && pred[start] >= 0; k++)
    start = pred[start];
  return start;
}

/* Kahn's algorithm; on a cycle fails naming one of its tasks. */
static psim_status check_acyclic(const psim_taskgraph *g) {
  int32_t n = g->n_tasks;
  int32_t *left = psim_malloc(((size_t)n ? (size_t)n : 1) * sizeof *left);
  int32_t *queue = psim_malloc(((size_t)n ? (size_t)n : 1) * sizeof *queue);
  if (!left || !queue) {
    psim_free(left);
    psim_free(queue);
    return psim_error(PSIM_ENOMEM, "task graph: out of memory checking for cycles");
  }
  int32_t head = 0, tail = 0;
  for (int32_t i = 0; i < n; i++)
    if ((left[i] = g->n_pred[i]) == 0)
      queue[tail++] = i;
  while (head < tail) {
    int32_t u = queue[head++];
    for (int32_t k = g->succ_first[u]; k < g->succ_first[u + 1]; k++)
      if (--left[g->succ[k]] == 0)
        queue[tail++] = g->succ[k];
  }
  psim_status s = PSIM_OK;
  if (tail < n) {
    int32_t t = task_on_cycle(g, left, queue);
    s = psim_error(PSIM_EFAILED, "task graph has a cycle through task %d (op %d, micro-batch %d)",
                   t, g->info[t].op, g->info[t].micro);
  }
  psim_free(left);
  psim_free(queue);
  return s;
}

psim_status psim_tg_finalize(psim_taskgraph *g) {
  PSIM_CHECK(psim_tg_finalize_unchecked(g));
  psim_status s = check_acyclic(g);
  if (s != PSIM_OK)
    g->finalized = 0;
  return s;
}

psim_status psim_tg_finalize_unchecked(psim_taskgraph *g) {
  g->finalized = 0;
  PSIM_CHECK(grow_tasks(g, 1)); /* res_first exists even for an empty graph */
  size_t n = (size_t)g->n_tasks;
  PSIM_CHECK(reserve_csr(g, n, g->n_edges));
  build_csr(g);
  g->finalized = 1;
  return PSIM_OK;
}
