/* schedules.c - the order in which each pipeline stage issues its slots (a chunk's forward,
 * backward or weight gradients for one micro-batch). A device's kernels run in issue order
 * (kernels.c chains them), so the order is the schedule. Megatron-LM's (GPipe, 1F1B and the
 * interleaved 1F1B: megatron/core/pipeline_parallel/schedules.py) and torchtitan's
 * (torch/distributed/pipelining/schedules.py at pytorch 00722e648b: ScheduleLoopedBFS,
 * ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, ScheduleDualPipeV), each written from
 * its rules; the rules
 * on chunks and micro-batches are sim/strategy/schedule.c's. */
#include "sim/builder/build_impl.h"
#include "sim/core/alloc.h"

#include <assert.h>

typedef struct slot {
  int32_t chunk; /* local chunk of this physical stage (psim_schedule_rank_chunk) */
  int32_t micro;
  int pass_kind; /* PSIM_DIR_FWD, _BWD (input gradients where split) or _WGT */
} slot;

typedef struct order {
  slot *out;
  int32_t n;
} order;

static void push(order *o, int32_t chunk, int32_t micro, int pass_kind) {
  o->out[o->n++] = (slot){chunk, micro, pass_kind};
}

/* The k-th forward (or backward) of a stage in rounds of `round` micro-batches: chunk after
 * chunk within a round (Megatron-LM's get_model_chunk_id with round = pp; torchtitan's
 * forward_stage_index / backward_stage_index with round = microbatches_per_round). */
static slot nth_slot(int32_t k, int32_t round, int32_t v, int pass_kind) {
  slot s = {0, k, pass_kind};
  if (v > 1) {
    int32_t in_group = k % (round * v);
    s.chunk = in_group / round;
    s.micro = (k / (round * v)) * round + in_group % round;
  }
  if (pass_kind != PSIM_DIR_FWD)
    s.chunk = v - 1 - s.chunk;
  return s;
}

static void push_nth(order *o, int32_t k, int32_t round, int32_t v, int pass_kind) {
  slot s = nth_slot(k, round, v, pass_kind);
  push(o, s.chunk, s.micro, pass_kind);
}

/* Megatron-LM: warm-up forwards, then one forward and one backward in turn, then the
 * remaining backwards. GPipe runs every forward first. */
static void megatron_order(const psim_strategy *s, int32_t i, int32_t m, int32_t v, order *o) {
  int32_t p = s->n_stages, total = m * v, warm;
  if (s->schedule == PSIM_SCHED_GPIPE)
    warm = total;
  else if (v == 1)
    warm = p - i - 1;
  else
    warm = (p - i - 1) * 2 + (v - 1) * p;
  if (warm > total)
    warm = total;
  for (int32_t k = 0; k < warm; k++)
    push_nth(o, k, p, v, PSIM_DIR_FWD);
  for (int32_t j = 0; j < total - warm; j++) {
    push_nth(o, warm + j, p, v, PSIM_DIR_FWD);
    push_nth(o, j, p, v, PSIM_DIR_BWD);
  }
  for (int32_t j = total - warm; j < total; j++)
    push_nth(o, j, p, v, PSIM_DIR_BWD);
}

/* ScheduleLoopedBFS: every micro-batch's forward chunk by chunk, then the backwards of the
 * chunks in reverse, each chunk's micro-batches last first. */
static void looped_bfs_order(int32_t m, int32_t v, order *o) {
  for (int32_t c = 0; c < v; c++)
    for (int32_t mu = 0; mu < m; mu++)
      push(o, c, mu, PSIM_DIR_FWD);
  for (int32_t c = v - 1; c >= 0; c--)
    for (int32_t mu = m - 1; mu >= 0; mu--)
      push(o, c, mu, PSIM_DIR_BWD);
}

/* ScheduleInterleavedZeroBubble (ZB1P; _get_1f1b_rank_ops with enable_zero_bubble): warm-up
 * (v - 1) rounds plus one forward per stage below, then forward and input gradients in turn;
 * after rank i's first i such pairs each step also runs the oldest pending weight gradients;
 * the cool-down runs input then weight gradients, then the weights left. */
static void zero_bubble_order(int32_t p, int32_t i, int32_t m, int32_t v, order *o) {
  int32_t rounds = m / p > 1 ? m / p : 1, round = m / rounds, total = m * v;
  int32_t warm = (v - 1) * round + (p - 1 - i), w = 0;
  if (warm > total)
    warm = total;
  for (int32_t k = 0; k < warm; k++)
    push_nth(o, k, round, v, PSIM_DIR_FWD);
  for (int32_t op = warm, j = 0; op < total + warm; op++, j++) {
    if (op < total)
      push_nth(o, op, round, v, PSIM_DIR_FWD);
    push_nth(o, j, round, v, PSIM_DIR_BWD);
    if (j >= i)
      push_nth(o, w++, round, v, PSIM_DIR_WGT);
  }
  while (w < total)
    push_nth(o, w++, round, v, PSIM_DIR_WGT);
}

/* ScheduleZBVZeroBubble, rank i of p: chunk 0 is stage i, chunk 1 stage 2p - 1 - i. Counters
 * of forwards, input and weight gradients per chunk; the schedule is written for at least
 * 2p - 1 micro-batches and drops the slots of those beyond m. */
typedef struct zbv {
  order *o;
  int32_t m, f[2], b[2], w[2];
} zbv;

static void zbv_push(zbv *z, int32_t c, int pass_kind) {
  int32_t *n = pass_kind == PSIM_DIR_FWD   ? &z->f[c]
               : pass_kind == PSIM_DIR_BWD ? &z->b[c]
                                           : &z->w[c];
  if (*n < z->m)
    push(z->o, c, *n, pass_kind);
  (*n)++;
}

static void zbv_order(int32_t p, int32_t i, int32_t m, order *o) {
  int32_t n = m > 2 * p - 1 ? m : 2 * p - 1;
  zbv z = {o, m, {0, 0}, {0, 0}, {0, 0}};
  for (int32_t k = 0; k < 2 * (p - i) - 1; k++)
    zbv_push(&z, 0, PSIM_DIR_FWD);
  for (int32_t k = 0; k < i; k++) {
    zbv_push(&z, 1, PSIM_DIR_FWD);
    zbv_push(&z, 0, PSIM_DIR_FWD);
  }
  for (int32_t k = 0; k < p - i; k++) {
    zbv_push(&z, 1, PSIM_DIR_FWD);
    zbv_push(&z, 1, PSIM_DIR_BWD);
    zbv_push(&z, 1, PSIM_DIR_WGT);
  }
  while (z.f[1] < z.f[0] || z.f[0] < n) {
    if (z.f[0] < n)
      zbv_push(&z, 0, PSIM_DIR_FWD);
    zbv_push(&z, 0, PSIM_DIR_BWD);
    zbv_push(&z, 0, PSIM_DIR_WGT);
    zbv_push(&z, 1, PSIM_DIR_FWD);
    zbv_push(&z, 1, PSIM_DIR_BWD);
    zbv_push(&z, 1, PSIM_DIR_WGT);
  }
  for (int32_t k = 0; k < i; k++) {
    zbv_push(&z, 0, PSIM_DIR_BWD);
    zbv_push(&z, 1, PSIM_DIR_BWD);
  }
  for (int32_t k = 0; k < p - i; k++) {
    zbv_push(&z, 0, PSIM_DIR_BWD);
    zbv_push(&z, 0, PSIM_DIR_WGT);
  }
  while (z.w[1] < z.b[1])
    zbv_push(&z, 1, PSIM_DIR_WGT);
  while (z.w[0] < z.b[0])
    zbv_push(&z, 0, PSIM_DIR_WGT);
  assert(z.f[0] == n && z.b[0] == n && z.w[0] == n && z.f[1] == n && z.b[1] == n && z.w[1] == n);
}

/* ScheduleDualPipeV, rank i of p (chunks in a V, as zbv): a full backward is its input and
 * weight gradients back to back; an input gradient alone queues its weight gradients, which
 * later steps run oldest first. Its F/B pairs (OVERLAP_F_B) run one after the other, as the
 * runtime does without a registered overlap function (_PipelineScheduleRuntime: "for sub_a in
 * action.sub_actions: _perform_action(sub_a)"). */
typedef struct dualpipe {
  order *o;
  int32_t f[2], b[2];
  int32_t *queue; /* pending weight gradients: chunk * m + micro-batch, oldest first */
  int32_t head, tail, m;
} dualpipe;

static void dp_forward(dualpipe *d, int32_t c) {
  push(d->o, c, d->f[c]++, PSIM_DIR_FWD);
}

static void dp_backward(dualpipe *d, int32_t c, bool full) {
  int32_t mu = d->b[c]++;
  push(d->o, c, mu, PSIM_DIR_BWD);
  if (full)
    push(d->o, c, mu, PSIM_DIR_WGT);
  else
    d->queue[d->tail++] = c * d->m + mu;
}

static void dp_weights(dualpipe *d) {
  if (d->head < d->tail) {
    int32_t q = d->queue[d->head++];
    push(d->o, q / d->m, q % d->m, PSIM_DIR_WGT);
  }
}

static void dp_overlap(dualpipe *d, int32_t fc, int32_t bc) {
  dp_forward(d, fc);
  dp_backward(d, bc, true);
}

static void dualpipev_order(int32_t p, int32_t i, int32_t m, int32_t *queue, order *o) {
  dualpipe d = {o, {0, 0}, {0, 0}, queue, 0, 0, m};
  for (int32_t k = 0; k < 2 * (p - i - 1); k++) /* step 1: F0 */
    dp_forward(&d, 0);
  for (int32_t k = 0; k < i + 1; k++) { /* step 2: F0 F1 */
    dp_forward(&d, 0);
    dp_forward(&d, 1);
  }
  for (int32_t k = 0; k < p - i - 1; k++) { /* step 3: I1 W F1 */
    dp_backward(&d, 1, false);
    dp_weights(&d);
    dp_forward(&d, 1);
  }
  for (int32_t k = 0; k < m - 2 * p + i + 1; k++) { /* step 4: F0B1 F1B0 */
    dp_overlap(&d, 0, 1); /* the last rank's first pair is not overlapped: the same order */
    dp_overlap(&d, 1, 0);
  }
  for (int32_t k = 0; k < p - i - 1; k++) { /* step 5: B1 F1B0 */
    dp_backward(&d, 1, true);
    dp_overlap(&d, 1, 0);
  }
  bool zb = false; /* step 6: B1 B0, the second half with input gradients only */
  for (int32_t k = 0; k < i + 1; k++) {
    zb = zb || (k == (i + 1) / 2 && i % 2 == 1);
    dp_backward(&d, 1, !zb);
    zb = zb || (k == (i + 1) / 2 && i % 2 == 0);
    dp_backward(&d, 0, !zb);
  }
  for (int32_t k = 0; k < p - i - 1; k++) { /* step 7: W B0 */
    dp_weights(&d);
    dp_backward(&d, 0, !zb);
  }
  while (d.head < d.tail) /* step 8: the weights left (i + 1 of them) */
    dp_weights(&d);
  assert(d.f[0] == m && d.f[1] == m && d.b[0] == m && d.b[1] == m);
}

/* Stage i's issue order into o (room for 3 m v slots; queue: room for 2 m). */
static void stage_order(const psim_strategy *s, int32_t i, int32_t m, int32_t *queue, order *o) {
  int32_t v = s->virtual_stages > 0 ? s->virtual_stages : 1;
  o->n = 0;
  switch (s->schedule) {
  case PSIM_SCHED_LOOPED_BFS: looped_bfs_order(m, v, o); break;
  case PSIM_SCHED_INTERLEAVED_ZB: zero_bubble_order(s->n_stages, i, m, v, o); break;
  case PSIM_SCHED_ZBV: zbv_order(s->n_stages, i, m, o); break;
  case PSIM_SCHED_DUALPIPEV: dualpipev_order(s->n_stages, i, m, queue, o); break;
  default: megatron_order(s, i, m, v, o);
  }
  assert(o->n == (psim_schedule_splits_backward(s->schedule) ? 3 : 2) * m * v);
}

/* Issue positions (PSIM_ENGINE_ISSUE, docs/simulator.md "A fixed order per resource"): each
 * slot's start in an ideal run of the schedule with durations fixed by pass alone, a forward
 * 1, a backward 2 (two GEMMs per forward GEMM; where split, input and weight gradients 1 each)
 * plus the share of the stage's ops it recomputes, each stage running its slots in issue order, a
 * forward after the previous virtual stage's forward of its micro-batch, a backward after the next
 * one's backward. The positions depend on the schedule only, never on measured durations; a slot's
 * kernels share its span in the order the builder issues them (a pass's ops in topological order,
 * backward reversed). */
#define ISSUE_UNIT 512 /* positions per unit (half a forward): 1024 per forward slot */

typedef struct ideal {
  const psim_strategy *s;
  int32_t m, nvs, per;    /* micro-batches, virtual stages, slots per stage */
  order *orders;          /* per physical stage */
  int32_t *at, *clock;    /* per stage: the next slot, the ideal time (units) */
  int32_t *start;         /* per slot (stage * per + index): ideal start (units), -1 not yet */
  int32_t *end_f, *end_b; /* per (virtual stage, micro-batch): forward / backward end, -1 */
  int32_t *rank; /* per op, then per virtual stage its ops and its recomputed ops (op_ranks) */
  int32_t n_ops;
} ideal;

/* A slot's ideal length in half forwards: a forward 2, a backward 4 (where split, input and
 * weight gradients 2 each) plus 2 times the share of the stage's ops it recomputes (a
 * recomputed op runs its forward again). */
static int32_t slot_units(const ideal *d, int32_t vs, int pass_kind) {
  if (pass_kind == PSIM_DIR_FWD || pass_kind == PSIM_DIR_WGT)
    return 2;
  int32_t n = d->rank ? d->rank[d->n_ops + vs] : 0,
          rec = d->rank ? d->rank[d->n_ops + d->nvs + vs] : 0;
  int32_t bwd = psim_schedule_splits_backward(d->s->schedule) ? 2 : 4;
  return bwd + (n > 0 ? (2 * rec + n / 2) / n : 0);
}

/* The time slot j of stage i may start at (-1: a dependency has not run yet). */
static int32_t slot_ready(const ideal *d, int32_t i, const slot *sl) {
  int32_t vs = psim_schedule_rank_chunk(d->s->schedule, d->s->n_stages, i, sl->chunk);
  int32_t dep = 0, at = vs * d->m + sl->micro;
  if (sl->pass_kind == PSIM_DIR_FWD && vs > 0)
    dep = d->end_f[at - d->m];
  else if (sl->pass_kind == PSIM_DIR_BWD)
    dep = vs + 1 < d->nvs ? d->end_b[at + d->m] : d->end_f[at];
  else if (sl->pass_kind == PSIM_DIR_WGT)
    dep = d->end_b[at];
  return dep < 0 ? -1 : (dep > d->clock[i] ? dep : d->clock[i]);
}

/* Runs stage i's slots while their dependencies have run; true when one ran. */
static bool advance_stage(ideal *d, int32_t i, bool force) {
  bool ran = false;
  while (d->at[i] < d->orders[i].n) {
    const slot *sl = &d->orders[i].out[d->at[i]];
    int32_t t = slot_ready(d, i, sl);
    if (t < 0 && !force)
      break;
    t = t < 0 ? d->clock[i] : t;
    int32_t vs = psim_schedule_rank_chunk(d->s->schedule, d->s->n_stages, i, sl->chunk);
    int32_t end = t + slot_units(d, vs, sl->pass_kind), at = vs * d->m + sl->micro;
    d->start[i * d->per + d->at[i]++] = t;
    d->clock[i] = end;
    if (sl->pass_kind == PSIM_DIR_FWD)
      d->end_f[at] = end;
    else if (sl->pass_kind == PSIM_DIR_BWD)
      d->end_b[at] = end;
    ran = true;
  }
  return ran;
}

/* Every slot's ideal start (d->start); a schedule that deadlocks in this model (none of
 * those above) has its waiting slots run from their stage's clock. */
static void ideal_run(ideal *d) {
  int32_t p = d->s->n_stages;
  for (bool more = true; more;) {
    bool ran = false;
    more = false;
    for (int32_t i = 0; i < p; i++) {
      ran = advance_stage(d, i, false) || ran;
      more = more || d->at[i] < d->orders[i].n;
    }
    for (int32_t i = 0; more && !ran && i < p; i++)
      ran = advance_stage(d, i, true);
  }
}

/* Tasks [t0, t1), the kernels of one slot of pass pass_kind starting at `start` units: op o
 * of the stage's n ops (rank[o]-th of them) at rank / n of the slot's span, reversed in a
 * backward; its shards share that position (then id). A recompute kernel (or one of no op)
 * takes the position of the kernel after it, the backward it serves: a task's position
 * depends on its op and slot alone, so adding or dropping recompute kernels, shards or views
 * moves no other task's position. */
static void set_positions(psim_build *b, int32_t t0, int32_t t1, int32_t start, int32_t units,
                          int pass_kind, const int32_t *rank, int32_t n) {
  int64_t base = (int64_t)start * ISSUE_UNIT, span = (int64_t)units * ISSUE_UNIT;
  int64_t carry = base + span - 1;
  for (int32_t t = t1 - 1; t >= t0; t--) {
    const psim_task_info *in = &b->g.info[t];
    int64_t p = carry;
    if (in->op >= 0 && in->pass != PSIM_TP_RECOMPUTE) {
      int32_t r = pass_kind == PSIM_DIR_FWD ? rank[in->op] : n - 1 - rank[in->op];
      p = base + span * r / (n > 0 ? n : 1);
    }
    carry = p;
    psim_tg_set_position(&b->g, t, p < INT32_MAX ? (int32_t)p : INT32_MAX - 1);
  }
}

/* Whether slots j and j + 1 of stage i issue as one merged slot: the stack's
 * moe_a2a_overlap without pipelining (Megatron-Core's combined_1f1b_schedule_for_no_pipelining,
 * megatron/core/pipeline_parallel/combined_1f1b.py: the first forward runs alone, then
 * forward i + 1 with backward i, then the last backward alone), 1F1B's order F0 B0 F1 B1 ...
 * pairing each backward with the forward after it. */
bool psim_build_combines_1f1b(const psim_cluster *c, const psim_strategy *s) {
  return c->stack.moe_a2a_overlap && s->n_stages == 1 && s->virtual_stages <= 1 &&
         s->schedule != PSIM_SCHED_GPIPE && !psim_schedule_splits_backward(s->schedule);
}

static bool merged_pair(const psim_build *b, const order *o, int32_t j) {
  if (!psim_build_combines_1f1b(b->c, b->s) || j + 1 >= o->n)
    return false;
  return o->out[j].pass_kind == PSIM_DIR_BWD && o->out[j + 1].pass_kind == PSIM_DIR_FWD;
}

/* A merged slot's tasks [t0, t1) spread in issue order over the two slots' span. */
static void set_merged_positions(psim_build *b, int32_t t0, int32_t t1, int32_t start,
                                 int32_t units) {
  int64_t base = (int64_t)start * ISSUE_UNIT, span = (int64_t)units * ISSUE_UNIT;
  for (int32_t t = t0; t < t1; t++) {
    int64_t p = base + span * (t - t0) / (t1 - t0);
    psim_tg_set_position(&b->g, t, p < INT32_MAX ? (int32_t)p : INT32_MAX - 1);
  }
}

/* Slots j (a backward) and j + 1 (a forward) of stage 0 as one merged slot. */
static psim_status issue_merged(psim_build *b, ideal *d, int32_t j) {
  const slot *sb = &d->orders[0].out[j], *sf = sb + 1;
  int32_t t0 = b->g.n_tasks;
  PSIM_CHECK(psim_build_issue_merged(b, 0, sf->micro, sb->micro));
  if (b->g.position && b->g.n_tasks > t0)
    set_merged_positions(b, t0, b->g.n_tasks, d->start[j],
                         slot_units(d, 0, PSIM_DIR_BWD) + slot_units(d, 0, PSIM_DIR_FWD));
  return PSIM_OK;
}

/* Issues every stage's slots in order (positions from d when b's graph tracks them; rank:
 * each op's place among its virtual stage's ops, count: their number per virtual stage). */
static psim_status issue_all(psim_build *b, ideal *d, const int32_t *rank, const int32_t *count) {
  const psim_strategy *s = b->s;
  for (int32_t i = 0; i < s->n_stages; i++)
    for (int32_t j = 0; j < d->orders[i].n; j++) {
      const slot *sl = &d->orders[i].out[j];
      int32_t vs = psim_schedule_rank_chunk(s->schedule, s->n_stages, i, sl->chunk);
      int32_t t0 = b->g.n_tasks;
      if (merged_pair(b, &d->orders[i], j)) {
        PSIM_CHECK(issue_merged(b, d, j++));
        continue;
      }
      PSIM_CHECK(psim_build_issue_slot(b, vs, sl->micro, sl->pass_kind));
      if (b->g.position && b->g.n_tasks > t0)
        set_positions(b, t0, b->g.n_tasks, d->start[i * d->per + j],
                      slot_units(d, vs, sl->pass_kind), sl->pass_kind, rank, count[vs]);
    }
  return PSIM_OK;
}

/* rank[o]: op o's place among the ops of its virtual stage; count[vs]: their number;
 * count[nvs + vs]: how many of them are recomputed. */
static void op_ranks(const psim_build *b, int32_t nvs, int32_t *rank, int32_t *count) {
  for (int32_t v = 0; v < 2 * nvs; v++)
    count[v] = 0;
  for (int32_t o = 0; o < b->m->n_ops; o++) {
    int32_t vs = b->s->ops[o].stage;
    bool in = vs >= 0 && vs < nvs;
    rank[o] = in ? count[vs]++ : 0;
    if (in && psim_build_recomputed(b, o))
      count[nvs + vs]++;
  }
}

static void free_ideal(ideal *d, slot *slots, int32_t *queue) {
  psim_free(d->orders);
  psim_free(d->rank);
  psim_free(d->at);
  psim_free(d->start);
  psim_free(d->end_f);
  psim_free(slots);
  psim_free(queue);
}

psim_status psim_build_issue_compute(psim_build *b) {
  const psim_strategy *s = b->s;
  int32_t v = s->virtual_stages > 0 ? s->virtual_stages : 1, p = s->n_stages, m = b->n_micro;
  ideal d = {s, m, p * v, 3 * m * v, NULL, NULL, NULL, NULL, NULL, NULL, NULL, b->m->n_ops};
  size_t n_slots = (size_t)p * (size_t)d.per, n_ends = (size_t)d.nvs * (size_t)m;
  slot *slots = psim_malloc(sizeof *slots * n_slots);
  int32_t *queue = psim_malloc(sizeof *queue * (size_t)m * 2);
  d.orders = psim_malloc(sizeof *d.orders * (size_t)p);
  d.at = psim_calloc((size_t)p * 2, sizeof *d.at);
  d.start = psim_malloc(sizeof *d.start * n_slots);
  d.end_f = psim_malloc(sizeof *d.end_f * n_ends * 2);
  d.rank = psim_malloc(sizeof *d.rank * ((size_t)b->m->n_ops + 2 * (size_t)d.nvs));
  if (!slots || !queue || !d.orders || !d.at || !d.start || !d.end_f || !d.rank) {
    free_ideal(&d, slots, queue);
    return psim_error(PSIM_ENOMEM, "out of memory for the pipeline schedule");
  }
  d.clock = d.at + p;
  d.end_b = d.end_f + n_ends;
  for (size_t k = 0; k < n_ends * 2; k++)
    d.end_f[k] = -1;
  for (int32_t i = 0; i < p; i++) {
    d.orders[i] = (order){slots + (size_t)i * (size_t)d.per, 0};
    stage_order(s, i, m, queue, &d.orders[i]);
  }
  if (b->g.position) {
    op_ranks(b, d.nvs, d.rank, d.rank + b->m->n_ops);
    ideal_run(&d);
  }
  psim_status st = issue_all(b, &d, d.rank, d.rank + b->m->n_ops);
  free_ideal(&d, slots, queue);
  return st;
}

/* The sender's kernel that waits for a pipeline send issued after kernel `from` (-1: none).
 * Megatron-LM's sends block the sender: its next kernel. Megatron-Core's interleaved schedule
 * with overlap_p2p_comm (the stack's pp_overlap) isends and waits before the sender's next
 * step in the same direction (megatron/core/pipeline_parallel/schedules.py,
 * forward_backward_pipelining_with_interleaving: a forward send's handles before the next
 * forward step, a backward send's before the next backward step): the send blocks the next
 * step in warmup (forwards only) and cooldown (backwards only) and overlaps one step of the
 * other direction in the steady 1F1B state. 1F1B without interleaving blocks, as there. */
int32_t psim_build_send_waiter(const psim_build *b, int32_t from) {
  psim_schedule sched = b->s->schedule;
  if (sched == PSIM_SCHED_LOOPED_BFS || psim_schedule_splits_backward(sched))
    return -1; /* torch.distributed.pipelining's runtime isends and waits at the step's end
                  (_PipelineScheduleRuntime._step_microbatches, pytorch 00722e648b) */
  if (!b->c->stack.pp_overlap || sched != PSIM_SCHED_INTERLEAVED)
    return b->next_compute[from];
  const psim_task_info *f = &b->g.info[from];
  for (int32_t k = b->next_compute[from]; k >= 0; k = b->next_compute[k]) {
    const psim_task_info *in = &b->g.info[k];
    if (in->pass == f->pass && (in->micro != f->micro || in->stage != f->stage))
      return k;
  }
  return -1;
}

/* The first op of x's checkpoint unit on x's stage that is recomputed, at or before x: its
 * recompute kernel is the first kernel of the backward slot that x's gradient starts
 * (kernels.c issue_layer_backward); -1 when the unit recomputes nothing. */
int32_t psim_build_first_recomputed(const psim_build *b, int32_t x) {
  int32_t vs = b->s->ops[x].stage, unit = psim_build_rc_unit(b, x), first = -1;
  for (int32_t o = x; o >= 0 && b->s->ops[o].stage == vs && psim_build_rc_unit(b, o) == unit; o--)
    if (psim_build_recomputed(b, o))
      first = o;
  return first;
}

/* The recompute of a backward slot waits for the gradient from the next stage: Megatron-LM
 * receives it (recv_backward) before backward_step, whose autograd call runs the
 * checkpointed forward first (megatron/core/pipeline_parallel/schedules.py). The edges
 * e0.. into x's backward kernel k that come from pipeline transfers are copied to the
 * recompute kernel of r (psim_build_first_recomputed) on the same device. */
psim_status psim_build_gate_recompute(psim_build *b, int32_t x, int32_t k, int32_t r, int32_t mu,
                                      size_t e0) {
  int32_t to = *psim_build_task_slot(b, b->bwd, x, k, mu);
  int32_t dev = b->locals[b->loc_first[x] + k].device, rec = -1;
  for (int32_t j = 0; j < b->loc_first[r + 1] - b->loc_first[r] && rec < 0; j++)
    if (b->locals[b->loc_first[r] + j].device == dev)
      rec = *psim_build_task_slot(b, b->rec, r, j, mu);
  if (rec < 0 || to < 0)
    return PSIM_OK;
  for (size_t e = e0, n = b->g.n_edges; e < n; e++)
    if (b->g.edge_to[e] == to && b->g.edge_from[e] != rec)
      PSIM_CHECK(psim_tg_add_edge(&b->g, b->g.edge_from[e], rec));
  return PSIM_OK;
}
