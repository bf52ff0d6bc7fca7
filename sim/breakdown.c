/* breakdown.c - where the representative device's iteration goes (docs/simulator.md, "Time
 * breakdown"; issue #18 defect 5).
 *
 * The device's compute stream is busy (compute_s) or idle. Each idle interval is attributed by
 * walking back from the task that ended it along its chain of causes, read off the schedule
 * and the order the engine took the tasks in (r->taken, its one record for the breakdown): the
 * engine starts a task at the latest of its predecessors' ends, the free time of its resources
 * (the end of the last task taken before it on each) and the host's issue; so what a task waited
 * for last is its last-arriving predecessor or the task before it on one of its resources, and a
 * start later than both is the host issuing it late. Each cause covers the part of the interval it
 * ran in and is classified by what it is: a collective or transfer (exposed communication by kind),
 * another pipeline stage's compute (bubble), parameter-server traffic or updates, another device of
 * the same stage (straggler), the host. The parts sum to the iteration time. */
#include <assert.h>
#include <math.h>

#include "sim/core/alloc.h"
#include "sim/simulate_impl.h"

enum {
  BD_COMM = 0,                      /* + comm kind: exposed communication, 4 kinds */
  BD_BUBBLE = PSIM_COMM_KIND_COUNT, /* compute of another pipeline stage */
  BD_WAIT,                          /* + psim_wait_kind */
  BD_COUNT = BD_WAIT + PSIM_WAIT_KIND_COUNT
};

typedef struct bd_ctx {
  const psim_taskgraph *g;
  const psim_schedule_result *r;
  int32_t d;             /* the representative device */
  bool ps, pipelined;    /* parameter servers; more than one pipeline stage */
  uint8_t *peer;         /* per device: computes in one of d's pipeline stages */
  int32_t *pred_first;   /* n_tasks + 1: predecessors in CSR form */
  int32_t *pred;         /* n_edges */
  const int32_t *order;  /* task ids as the engine took them (r->taken, not owned) */
  int32_t *res_prev;     /* per task: the task that last held one of its resources, or -1 */
  double part[BD_COUNT]; /* s */
} bd_ctx;

static psim_status oom(void) {
  return psim_error(PSIM_ENOMEM, "out of memory in the time breakdown");
}

static int comm_kind_of(uint8_t pass) {
  switch (pass) {
  case PSIM_TP_COMM_TP: return 0;
  case PSIM_TP_COMM_PP: return 1;
  case PSIM_TP_COMM_DP: return 2;
  default: return 3;
  }
}

/* Predecessor lists from the edges as added. O(V + E). */
static psim_status bd_preds(bd_ctx *b) {
  const psim_taskgraph *g = b->g;
  size_t n = (size_t)g->n_tasks;
  b->pred_first = psim_calloc(n + 2, sizeof *b->pred_first);
  b->pred = psim_malloc(sizeof *b->pred * (g->n_edges + 1));
  if (!b->pred_first || !b->pred)
    return oom();
  for (size_t e = 0; e < g->n_edges; e++)
    b->pred_first[g->edge_to[e] + 2]++;
  for (size_t t = 0; t < n; t++)
    b->pred_first[t + 2] += b->pred_first[t + 1];
  for (size_t e = 0; e < g->n_edges; e++)
    b->pred[b->pred_first[g->edge_to[e] + 1]++] = g->edge_from[e];
  return PSIM_OK;
}

static void bd_consider(const bd_ctx *b, int32_t c, int32_t *best) {
  const double *end = b->r->end_s;
  if (*best < 0 || end[c] > end[*best] || (end[c] == end[*best] && c < *best))
    *best = c;
}

/* b->res_prev: per task, of the tasks that held one of its resources before it, the one that
 * ended last. Each resource serves its tasks in the order the engine took them, each ending
 * before the next starts (r->taken), so the last one taken on a resource is the one before it
 * there. Only tasks that took time count: a zero-length task neither delays another nor closes
 * a loop. O(V + S). */
static psim_status bd_res_prev(bd_ctx *b) {
  const psim_taskgraph *g = b->g;
  int32_t *last = psim_malloc(sizeof *last * ((size_t)g->n_resources + 1));
  b->res_prev = psim_malloc(sizeof *b->res_prev * ((size_t)g->n_tasks + 1));
  if (!last || !b->res_prev) {
    psim_free(last);
    return oom();
  }
  for (int32_t q = 0; q < g->n_resources; q++)
    last[q] = -1;
  for (int32_t i = 0; i < g->n_tasks; i++) {
    int32_t t = b->order[i], best = -1;
    for (int32_t k = g->res_first[t]; k < g->res_first[t + 1]; k++) {
      int32_t p = last[g->res[k]];
      assert(p < 0 || b->r->end_s[p] <= b->r->start_s[t]); /* the resource served p first */
      if (p >= 0)
        bd_consider(b, p, &best);
    }
    b->res_prev[t] = best;
    if (g->duration_s[t] > 0)
      for (int32_t k = g->res_first[t]; k < g->res_first[t + 1]; k++)
        last[g->res[k]] = t;
  }
  psim_free(last);
  return PSIM_OK;
}

/* What x waited for last: its last-arriving predecessor or the task before it on a resource. */
static int32_t bd_cause(const bd_ctx *b, int32_t x) {
  int32_t best = b->res_prev[x];
  for (int32_t k = b->pred_first[x]; k < b->pred_first[x + 1]; k++)
    bd_consider(b, b->pred[k], &best);
  return best;
}

/* The part a cause c stands for (c is not on d's compute stream when the part is not 0). */
static int bd_class(const bd_ctx *b, int32_t c) {
  const psim_task_info *inf = &b->g->info[c];
  switch (inf->kind) {
  case PSIM_TASK_HOST: return BD_WAIT + PSIM_WAIT_HOST;
  case PSIM_TASK_COMPUTE:
    if (b->ps && inf->pass == PSIM_TP_UPDATE && inf->shard >= 0) /* a server's update (ps.c) */
      return BD_WAIT + PSIM_WAIT_PARAMETER_SERVER;
    if (b->pipelined && inf->device >= 0 && !b->peer[inf->device])
      return BD_BUBBLE;
    return BD_WAIT + PSIM_WAIT_STRAGGLER; /* another device of the same stage */
  default:
    if (b->ps && inf->pass == PSIM_TP_COMM_DP) /* pushes, pulls, replica copies (ps.c) */
      return BD_WAIT + PSIM_WAIT_PARAMETER_SERVER;
    return BD_COMM + comm_kind_of(inf->pass);
  }
}

/* Attributes [lo, hi) of d's idle compute stream; hi is where task x starts (x >= 0) or where
 * the cause c0 ends (the iteration end). Each step moves back in time along the chain. */
static void bd_walk(bd_ctx *b, double lo, double hi, int32_t x, int32_t c0) {
  while (hi > lo) {
    int32_t c = x >= 0 ? bd_cause(b, x) : c0;
    double e = c >= 0 ? fmin(b->r->end_s[c], hi) : lo;
    if (e < hi) { /* ready and its resources free, yet not started: the host was late */
      b->part[BD_WAIT + PSIM_WAIT_HOST] += hi - fmax(lo, e);
      hi = fmax(lo, e);
    }
    if (c < 0 || hi <= lo)
      break;
    double s = b->r->start_s[c];
    b->part[bd_class(b, c)] += hi - fmax(lo, s);
    hi = s;
    x = c;
  }
}

/* The task ending last by t_end (lowest id on ties), -1 when none. */
static int32_t bd_last(const bd_ctx *b, double t_end) {
  int32_t best = -1;
  for (int32_t t = 0; t < b->g->n_tasks; t++)
    if (b->r->end_s[t] <= t_end)
      bd_consider(b, t, &best);
  return best;
}

/* Which devices compute in one of d's pipeline stages (its peers: waiting on one of them is
 * waiting on a straggler; on any other device, on the pipeline). */
static psim_status bd_peers(bd_ctx *b, int32_t n_devices) {
  const psim_taskgraph *g = b->g;
  int32_t n_stage = 0;
  for (int32_t t = 0; t < g->n_tasks; t++)
    n_stage = g->info[t].stage >= n_stage ? g->info[t].stage + 1 : n_stage;
  uint8_t *d_stage = psim_calloc((size_t)n_stage + 1, 1);
  b->peer = psim_calloc((size_t)n_devices + 1, 1);
  if (!d_stage || !b->peer) {
    psim_free(d_stage);
    return oom();
  }
  for (int32_t t = 0; t < g->n_tasks; t++)
    if (g->info[t].kind == PSIM_TASK_COMPUTE && g->info[t].device == b->d && g->info[t].stage >= 0)
      d_stage[g->info[t].stage] = 1;
  for (int32_t t = 0; t < g->n_tasks; t++) {
    const psim_task_info *inf = &g->info[t];
    if (inf->kind == PSIM_TASK_COMPUTE && inf->stage >= 0 && d_stage[inf->stage]) {
      assert(inf->device >= 0 && inf->device < n_devices); /* compute runs on a device */
      b->peer[inf->device] = 1;
    }
  }
  psim_free(d_stage);
  return PSIM_OK;
}

static bool on_stream(const psim_taskgraph *g, int32_t t, int32_t q) {
  for (int32_t k = g->res_first[t]; k < g->res_first[t + 1]; k++)
    if (g->res[k] == q)
      return true;
  return false;
}

/* Walks d's compute stream in start order (the order taken, on one resource): busy time is compute,
 * each gap (and the tail up to t_end) is attributed by bd_walk. */
static void bd_stream(bd_ctx *b, double t_end, psim_sim_result *out) {
  const psim_taskgraph *g = b->g;
  int32_t q = psim_res_compute(b->d);
  double busy_end = 0;
  for (int32_t i = 0; i < g->n_tasks; i++) {
    int32_t t = b->order[i];
    if (g->duration_s[t] <= 0 || !on_stream(g, t, q))
      continue;
    double s = fmin(b->r->start_s[t], t_end), e = fmin(b->r->end_s[t], t_end);
    if (e <= busy_end)
      continue;
    if (s > busy_end)
      bd_walk(b, busy_end, s, t, -1);
    out->compute_s += e - fmax(s, busy_end);
    busy_end = e;
  }
  if (t_end > busy_end)
    bd_walk(b, busy_end, t_end, -1, bd_last(b, t_end));
}

psim_status psim_sim_breakdown(const psim_taskgraph *g, const psim_schedule_result *r, int32_t d,
                               int32_t n_devices, double t_end, const psim_strategy *s,
                               psim_sim_result *out) {
  bd_ctx b = {.g = g, .r = r, .d = d};
  b.ps = s->sync == PSIM_SYNC_PS;
  b.pipelined = s->n_stages > 1;
  if (!r->taken || r->n_taken != g->n_tasks) /* a schedule of this graph, recorded */
    return psim_error(PSIM_EFAILED, "time breakdown: the schedule did not record its order");
  b.order = r->taken;
  psim_status st = bd_preds(&b);
  if (st == PSIM_OK)
    st = bd_res_prev(&b);
  if (st == PSIM_OK)
    st = bd_peers(&b, n_devices);
  if (st == PSIM_OK) {
    bd_stream(&b, t_end, out);
    for (int k = 0; k < PSIM_COMM_KIND_COUNT; k++)
      out->exposed_comm_s[k] = b.part[BD_COMM + k];
    out->bubble_s = b.part[BD_BUBBLE];
    for (int k = 0; k < PSIM_WAIT_KIND_COUNT; k++)
      out->wait_s[k] = b.part[BD_WAIT + k];
  }
  psim_free(b.peer);
  psim_free(b.pred_first);
  psim_free(b.pred);
  psim_free(b.res_prev);
  return st;
}
