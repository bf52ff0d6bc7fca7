/* collective.c - collectives as phases of point-to-point messages.
 *
 * Every algorithm is first written as a plan: a list of phases, each a set of (src rank ->
 * dst rank, bytes) messages that run at the same time, repeated `repeat` times (a ring
 * all-reduce is one phase of p messages repeated 2(p-1) times). Both fidelities read it:
 *  - aggregated: a phase takes repeat * (alpha + max bytes / B), alpha the largest summed
 *    latency of its routes, B the smallest over its routes' links of bandwidth / load, load
 *    = number of the phase's routes (of this group and of its concurrent replicas) crossing
 *    the link. One task holds every rank's comm engine and the links some phase fills
 *    that no concurrent replica's route crosses.
 *  - expanded: one transfer task per message and repeat, lasting latency + bytes / (its
 *    route's smallest bandwidth / load), holding its sender's comm engine and the links it
 *    fills where it is its group's only message; a message waits for its sender's previous
 *    message and the last message the sender received.
 * Aggregated, a link that several concurrent groups' routes cross is shared by dividing its
 * bandwidth (the load), never also held: holding it would queue on top of dividing, and
 * between replicas added as tasks of their own (an unfolded build) make the first ready go
 * first, the list-scheduling anomaly of docs/simulator.md, "Where the engine is not
 * monotone".
 * Algorithms and their cost (Thakur, Rabenseifner & Gropp 2005, IJHPCA 19(1)) are in
 * docs/simulator.md. Measured tables use the nccl-tests bus-bandwidth convention
 * (/work/shared/calibration/collectives.md). */
#include "sim/engine/collective.h"
#include "sim/engine/collective_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/sort.h"

/* ---- costing a plan over the topology ---- */

typedef struct coll_ctx {
  psim_cluster *c;
  const psim_coll_desc *d;
  int32_t groups; /* concurrent copies of the group routed */
  int32_t self;   /* which of them is d's own group (its devices): the one added */
  int32_t *load;  /* per link: routes of the current phase crossing it */
  int32_t *own;   /* per link: those of the own group alone */
  /* the routes of every group's messages in the phase routed last (phase_routes): entry
   * k * n + i is message i of group k; the costing reads each 3 to 6 times */
  const int32_t **rl;
  int32_t *rn;
  size_t cap_r;
  const coll_phase *routed; /* that phase, or NULL */
  int32_t *pairs;           /* group 0's (source, destination) devices of the phase */
  size_t cap_pairs;
  int32_t *kpairs; /* those of the group being routed (phase_routes) */
  size_t cap_kpairs;
  int32_t routed_groups; /* the groups routed there */
  int32_t routed_self;   /* and the own group's index among them */
  int32_t rbase;         /* rl's group of index k is k + rbase (the own group alone: routed_self) */
  int32_t routed_entry;  /* the routes memo's entry of the phase routed last, -1 none */
  int32_t entry;         /* that of the routes phase_routes gave last (-1: the own group alone
                          * among the others', or no memo) */
  int32_t *marks;        /* mark_saturated's filled links of one phase */
  size_t cap_marks;
  /* the links the aggregated task holds: held[l] set for those in held_list (held is zeroed
   * again when the list is read), so no pass over every link of the cluster */
  uint8_t *held;
  int32_t *held_list;
  size_t n_held, cap_held;
  bool borrowed; /* load, own and held are the routes memo's zeroed scratch */
  bool known;    /* t_known is the chosen plan's time with every group (auto_tree) */
  double t_known;
  double t_s; /* the time plan_times gave last (psim_coll_add_timed) */
} coll_ctx;

/* Device of rank in the k-th concurrent group. */
static int32_t group_device(const coll_ctx *x, int32_t k, int32_t rank) {
  return x->d->devices[rank] + (k - x->self) * x->d->group_stride;
}

static psim_status route(const coll_ctx *x, int32_t k, const coll_msg *m, const int32_t **links,
                         int32_t *n) {
  return psim_cluster_route(x->c, group_device(x, k, m->src), group_device(x, k, m->dst), links, n);
}

/* Routes the messages of ph in every group into x->rl / x->rn, unless they are there: one
 * route-cache lookup per message and group, not one per pass over the phase (the same
 * routes, so the same figures to the bit). */
static psim_status phase_routes(coll_ctx *x, const coll_plan *p, const coll_phase *ph) {
  if (x->routed == ph && x->routed_groups == x->groups && x->routed_self == x->self) {
    x->rbase = 0;
    x->entry = x->routed_entry;
    return PSIM_OK;
  }
  if (x->routed == ph && x->groups == 1) { /* the own group alone: routed among the others */
    x->rbase = x->routed_self;
    x->entry = -1;
    return PSIM_OK;
  }
  size_t need = (size_t)x->groups * (size_t)ph->n;
  if (need > x->cap_r) {
    psim_free(x->rl);
    psim_free(x->rn);
    x->cap_r = 0;
    x->rl = psim_malloc(need * sizeof *x->rl);
    x->rn = psim_malloc(need * sizeof *x->rn);
    if (!x->rl || !x->rn)
      return psim_error(PSIM_ENOMEM, "collective: out of memory");
    x->cap_r = need;
  }
  x->routed = NULL;
  psim_coll_routes *memo = x->d->routes;
  if (memo) {
    PSIM_CHECK(PSIM_VEC_RESERVE(x->pairs, x->cap_pairs, 2 * (size_t)ph->n));
    for (int32_t i = 0; i < ph->n; i++) {
      x->pairs[2 * i] = group_device(x, 0, p->msgs[ph->first + i].src);
      x->pairs[2 * i + 1] = group_device(x, 0, p->msgs[ph->first + i].dst);
    }
  }
  int32_t stride = x->groups > 1 ? x->d->group_stride : 0;
  x->entry = -1;
  if (!memo ||
      !psim_coll_routes_find(memo, x->pairs, ph->n, x->groups, stride, x->rl, x->rn, &x->entry)) {
    PSIM_CHECK(PSIM_VEC_RESERVE(x->kpairs, x->cap_kpairs, 2 * (size_t)ph->n));
    for (int32_t k = 0; k < x->groups; k++) { /* one group's pairs at a time, under one lock */
      for (int32_t i = 0; i < ph->n; i++) {
        x->kpairs[2 * i] = group_device(x, k, p->msgs[ph->first + i].src);
        x->kpairs[2 * i + 1] = group_device(x, k, p->msgs[ph->first + i].dst);
      }
      size_t at = (size_t)k * (size_t)ph->n;
      PSIM_CHECK(psim_cluster_routes(x->c, x->kpairs, ph->n, &x->rl[at], &x->rn[at]));
    }
    if (memo)
      PSIM_CHECK(
          psim_coll_routes_put(memo, x->pairs, ph->n, x->groups, stride, x->rl, x->rn, &x->entry));
  }
  x->routed_entry = x->entry;
  x->routed = ph;
  x->routed_groups = x->groups;
  x->routed_self = x->self;
  x->rbase = 0;
  return PSIM_OK;
}

/* Adds delta to the load of every link the phase's messages use, in groups
 * [k0, groups). */
static psim_status phase_load(coll_ctx *x, const coll_plan *p, const coll_phase *ph, int32_t k0,
                              int32_t delta) {
  PSIM_CHECK(phase_routes(x, p, ph));
  for (int32_t k = k0; k < x->groups; k++)
    for (int32_t i = 0; i < ph->n; i++) {
      size_t at = (size_t)(k + x->rbase) * (size_t)ph->n + (size_t)i;
      const int32_t *links = x->rl[at];
      for (int32_t j = 0; j < x->rn[at]; j++) {
        x->load[links[j]] += delta;
        x->own[links[j]] += k == x->self ? delta : 0;
      }
    }
  return PSIM_OK;
}

/* Bandwidth (bytes/s) and summed latency (s) of a route under the current
 * loads (the route itself counted in them). */
static void route_under_load(const coll_ctx *x, const int32_t *links, int32_t nl, double *bw,
                             double *lat) {
  *bw = INFINITY;
  *lat = 0;
  for (int32_t j = 0; j < nl; j++) {
    const psim_link *l = &x->c->links[links[j]];
    double b = psim_coll_link_bw(l) / (double)x->load[links[j]];
    *bw = b < *bw ? b : *bw;
    *lat += l->latency_s;
  }
}

/* The phase's bottleneck bandwidth (smallest bandwidth / load over every
 * group's routes; loads set), largest route latency and largest message. */
static psim_status phase_rate(coll_ctx *x, const coll_plan *p, const coll_phase *ph, double *bw,
                              double *lat, double *bytes) {
  *bw = INFINITY;
  *lat = *bytes = 0;
  PSIM_CHECK(phase_routes(x, p, ph));
  for (int32_t k = 0; k < x->groups; k++)
    for (int32_t i = 0; i < ph->n; i++) {
      const coll_msg *m = &p->msgs[ph->first + i];
      size_t at = (size_t)(k + x->rbase) * (size_t)ph->n + (size_t)i;
      double b, l;
      route_under_load(x, x->rl[at], x->rn[at], &b, &l);
      *bw = b < *bw ? b : *bw;
      *lat = l > *lat ? l : *lat;
      *bytes = m->bytes > *bytes ? m->bytes : *bytes;
    }
  return PSIM_OK;
}

/* x->marks[0 .. *n_marks): the links of the group's own routes that the phase saturates at
 * bottleneck bandwidth bw (phase_rate's): their load (the routes of every concurrent group
 * crossing them) times bw reaches their bandwidth, and no other concurrent group's route
 * crosses them (those share by division). Loads are set. */
static psim_status collect_saturated(coll_ctx *x, const coll_phase *ph, double bw,
                                     int32_t *n_marks) {
  *n_marks = 0;
  if (!isfinite(bw))
    return PSIM_OK;
  for (int32_t i = 0; i < ph->n; i++) { /* the own group's routes, of phase_routes' */
    size_t at = (size_t)(x->self + x->rbase) * (size_t)ph->n + (size_t)i;
    const int32_t *links = x->rl[at];
    for (int32_t j = 0; j < x->rn[at]; j++) {
      int32_t l = links[j];
      if (x->load[l] != x->own[l] ||
          !psim_coll_saturates(x->load[l] * bw, psim_coll_link_bw(&x->c->links[l])))
        continue;
      PSIM_CHECK(PSIM_VEC_RESERVE(x->marks, x->cap_marks, (size_t)*n_marks + 1));
      x->marks[(*n_marks)++] = l;
    }
  }
  return PSIM_OK;
}

/* The memo's held links of the phase routed last for the own group, from the loads and the
 * rate phase_rate_alone has just set and found (what mark_phase would find again with two
 * more passes over every group's routes). */
static psim_status keep_held(coll_ctx *x, const coll_phase *ph, double bw) {
  const int32_t *kept;
  int32_t n;
  if (x->entry < 0 || psim_coll_routes_held(x->d->routes, x->entry, x->self, &kept, &n))
    return PSIM_OK;
  PSIM_CHECK(collect_saturated(x, ph, bw, &n));
  return psim_coll_routes_put_held(x->d->routes, x->entry, x->self, x->marks, n);
}

/* phase_rate under the phase's own loads (set here and cleared), or the rate the routes
 * memo keeps for its routes: phase_rate's bandwidth and latency read only the routes of
 * every group and the loads they make, so a phase routed the same way (another bucket of
 * the group, another pass) has the same two figures to the bit; its largest message is the
 * plan's (every group sends the same). */
static psim_status phase_rate_alone(coll_ctx *x, const coll_plan *p, const coll_phase *ph,
                                    double *bw, double *lat, double *bytes) {
  PSIM_CHECK(phase_routes(x, p, ph));
  psim_coll_routes *memo = x->d->routes;
  if (x->entry >= 0 && psim_coll_routes_rate(memo, x->entry, bw, lat)) {
    *bytes = 0;
    for (int32_t i = 0; i < ph->n; i++)
      *bytes = p->msgs[ph->first + i].bytes > *bytes ? p->msgs[ph->first + i].bytes : *bytes;
    return PSIM_OK;
  }
  PSIM_CHECK(phase_load(x, p, ph, 0, 1));
  psim_status s = phase_rate(x, p, ph, bw, lat, bytes);
  if (s == PSIM_OK)
    s = keep_held(x, ph, *bw);
  PSIM_CHECK(phase_load(x, p, ph, 0, -1));
  PSIM_CHECK(s);
  if (x->entry >= 0)
    psim_coll_routes_set_rate(memo, x->entry, *bw, *lat);
  return PSIM_OK;
}

/* Aggregated time of one phase: repeat * (max latency + max bytes / min B). */
static psim_status phase_time(coll_ctx *x, const coll_plan *p, const coll_phase *ph, double *t) {
  double bw, lat, bytes;
  PSIM_CHECK(phase_rate_alone(x, p, ph, &bw, &lat, &bytes));
  *t = ph->repeat * (lat + (bytes > 0 ? bytes / bw : 0));
  return PSIM_OK;
}

static psim_status plan_time(coll_ctx *x, const coll_plan *p, double *t) {
  *t = 0;
  for (size_t i = 0; i < p->n_phases; i++) {
    double pt;
    PSIM_CHECK(phase_time(x, p, &p->phases[i], &pt));
    *t += pt;
  }
  return PSIM_OK;
}

/* ---- public entry points ---- */

/* Concurrent groups whose traffic is routed: all of them when the stride
 * is known, else only the group itself (no contention assumed). */
static int32_t groups_routed(const psim_coll_desc *d) {
  return d->concurrent_groups > 1 && d->group_stride != 0 ? d->concurrent_groups : 1;
}

/* d's own group among those routed (0 when they are not). */
static int32_t group_self(const psim_coll_desc *d) {
  return groups_routed(d) > 1 ? d->group_index : 0;
}

static psim_status check_desc(const psim_cluster *c, const psim_coll_desc *d) {
  if (d->n < 1 || !d->devices)
    return psim_error(PSIM_EINPUT, "collective: group of %d devices", d->n);
  if (!(d->bytes >= 0) || !isfinite(d->bytes))
    return psim_error(PSIM_EINPUT, "collective: size %g bytes is not a number >= 0", d->bytes);
  int32_t g = groups_routed(d), self = group_self(d);
  if (self < 0 || self >= g)
    return psim_error(PSIM_EINPUT, "collective: group %d of %d concurrent groups", self, g);
  uint8_t *seen = psim_calloc((size_t)c->n_devices + 1, 1); /* O(n), not O(n^2) */
  if (!seen)
    return psim_error(PSIM_ENOMEM, "collective: out of memory");
  psim_status s = PSIM_OK;
  for (int32_t i = 0; i < d->n && s == PSIM_OK; i++) {
    int64_t first = d->devices[i] - (int64_t)self * d->group_stride;
    int64_t last = d->devices[i] + (int64_t)(g - 1 - self) * d->group_stride;
    if (d->devices[i] < 0 || d->devices[i] >= c->n_devices || first < 0 || first >= c->n_devices ||
        last < 0 || last >= c->n_devices)
      s = psim_error(PSIM_EINPUT,
                     "collective: rank %d (device %d, %d groups, stride %d) is outside the "
                     "cluster's %d devices",
                     i, d->devices[i], g, d->group_stride, c->n_devices);
    else if (seen[d->devices[i]]++)
      s = psim_error(PSIM_EINPUT, "collective: device %d appears twice in the group",
                     d->devices[i]);
  }
  psim_free(seen);
  return s;
}

/* `auto` all-reduce over one rank per node: ring or tree, whichever costs
 * less, as NCCL picks per call the algorithm of least predicted time (v2.18.3
 * src/enqueue.cc getAlgoInfo, ncclTopoGetAlgoTime: latency + bytes / bw;
 * src/graph/tuning.cc: ring latency 2 x nodes network steps, tree 2 log2
 * nodes). Ties keep the ring; several ranks per node stay hierarchical. */
static psim_status auto_tree(coll_ctx *x, coll_plan *p) {
  if (!p->tree_alt)
    return PSIM_OK;
  coll_plan tree = {0};
  double t_ring = INFINITY, t_tree = INFINITY; /* read below only when both are set */
  psim_status s = psim_coll_plan_reduce(&tree, x->d->n, x->d->bytes);
  if (s == PSIM_OK)
    s = psim_coll_plan_bcast(&tree, x->d->n, x->d->bytes);
  if (s == PSIM_OK)
    s = plan_time(x, p, &t_ring);
  if (s == PSIM_OK)
    s = plan_time(x, &tree, &t_tree);
  if (s == PSIM_OK && t_tree < t_ring) {
    coll_plan ring = *p;
    *p = tree;
    tree = ring;
  }
  psim_coll_plan_destroy(&tree);
  x->routed = NULL; /* the plan not chosen is freed */
  x->known = s == PSIM_OK;
  x->t_known = t_tree < t_ring ? t_tree : t_ring;
  return s;
}

/* Frees x; s its outcome (after an error the memo's scratch is zeroed again: loads may be
 * left set). */
static void ctx_free(coll_ctx *x, psim_status s) {
  if (x->borrowed) {
    psim_coll_routes_unborrow(x->d->routes, s != PSIM_OK);
  } else {
    psim_free(x->load);
    psim_free(x->held);
  }
  psim_free(x->marks);
  psim_free(x->held_list);
  psim_free(x->rl);
  psim_free(x->rn);
  psim_free(x->pairs);
  psim_free(x->kpairs);
}

/* Builds the plan and the context (load array) for d. */
static psim_status prepare(psim_cluster *c, const psim_coll_desc *d, coll_plan *p, coll_ctx *x) {
  memset(p, 0, sizeof *p);
  *x = (coll_ctx){.c = c,
                  .d = d,
                  .groups = groups_routed(d),
                  .self = group_self(d),
                  .routed_entry = -1,
                  .entry = -1};
  PSIM_CHECK(check_desc(c, d));
  size_t nl = (size_t)(c->n_links > 0 ? c->n_links : 1);
  x->borrowed = d->routes && psim_coll_routes_borrow(d->routes, nl, &x->load, &x->held);
  if (!x->borrowed) {
    x->load = psim_calloc(2 * nl, sizeof *x->load);
    x->held = psim_calloc(nl, 1);
  }
  if (!x->load || !x->held) {
    ctx_free(x, PSIM_OK);
    return psim_error(PSIM_ENOMEM, "collective: out of memory");
  }
  x->own = x->load + nl;
  psim_status s = psim_coll_plan_build(p, c, d);
  if (s == PSIM_OK)
    s = auto_tree(x, p);
  if (s != PSIM_OK) {
    ctx_free(x, s);
    psim_coll_plan_destroy(p);
  }
  return s;
}

/* Formula time with replicas (*t) and the measured-table scale factor
 * (table time / formula time of one group; 1 when no table applies). */
static psim_status plan_times(coll_ctx *x, const coll_plan *p, double *t, double *scale) {
  if (x->known) /* auto_tree costed this plan with every group: the same figure */
    *t = x->t_known;
  else
    PSIM_CHECK(plan_time(x, p, t));
  *scale = 1.0;
  x->t_s = *t;
  const psim_coll_table *tab = psim_coll_find_table(x->c, x->d);
  if (!tab || *t <= 0)
    return PSIM_OK;
  double t1 = *t;
  if (x->groups > 1) {
    int32_t g = x->groups, self = x->self;
    x->groups = 1;
    x->self = 0;
    psim_status s = plan_time(x, p, &t1);
    x->groups = g;
    x->self = self;
    PSIM_CHECK(s);
  }
  *scale = psim_coll_table_time(tab, x->d->bytes) / t1;
  *t *= *scale;
  x->t_s = *t;
  return PSIM_OK;
}

psim_status psim_coll_time(psim_cluster *c, const psim_coll_desc *d, double *seconds) {
  *seconds = 0;
  if (d->n == 1 && d->devices)
    return PSIM_OK;
  coll_plan p;
  coll_ctx x;
  PSIM_CHECK(prepare(c, d, &p, &x));
  double scale;
  psim_status s = plan_times(&x, &p, seconds, &scale);
  ctx_free(&x, s);
  psim_coll_plan_destroy(&p);
  return s;
}

/* ---- adding to a task graph ---- */

psim_task_info psim_coll_task_info(const psim_task_info *info, psim_task_kind kind, int32_t dev) {
  psim_task_info t = {PSIM_TASK_COMPUTE, PSIM_TP_COMM_OTHER, -1, -1, -1, -1, -1};
  if (info)
    t = *info;
  t.kind = (uint8_t)kind;
  t.device = dev;
  return t;
}

psim_status psim_coll_add_barrier(psim_taskgraph *g, const psim_task_info *info, int32_t dev,
                                  int32_t *id) {
  psim_task_info t = psim_coll_task_info(info, PSIM_TASK_BARRIER, dev);
  return psim_tg_add_task(g, 0.0, NULL, 0, &t, id);
}

/* Adds link l to the held links. */
static psim_status hold(coll_ctx *x, int32_t l) {
  if (x->held[l])
    return PSIM_OK;
  PSIM_CHECK(PSIM_VEC_RESERVE(x->held_list, x->cap_held, x->n_held + 1));
  x->held[l] = 1;
  x->held_list[x->n_held++] = l;
  return PSIM_OK;
}

/* Marks in held[] the links of the group's own routes that the phase saturates
 * (collect_saturated). Loads are set. */
static psim_status mark_saturated(coll_ctx *x, const coll_plan *p, const coll_phase *ph,
                                  int32_t *n_marks) {
  double bw, lat, bytes;
  PSIM_CHECK(phase_rate(x, p, ph, &bw, &lat, &bytes));
  PSIM_CHECK(collect_saturated(x, ph, bw, n_marks));
  for (int32_t i = 0; i < *n_marks; i++)
    PSIM_CHECK(hold(x, x->marks[i]));
  return PSIM_OK;
}

/* Marks in held[] the links phase ph fills (mark_saturated), or those the routes memo kept
 * for its routes and the own group: they are a function of the routes of every group, the
 * rate they give and the own group's index, so the same to the bit. */
static psim_status mark_phase(coll_ctx *x, const coll_plan *p, const coll_phase *ph) {
  PSIM_CHECK(phase_routes(x, p, ph));
  psim_coll_routes *memo = x->d->routes;
  const int32_t *kept;
  int32_t n;
  if (x->entry >= 0 && psim_coll_routes_held(memo, x->entry, x->self, &kept, &n)) {
    for (int32_t i = 0; i < n; i++)
      PSIM_CHECK(hold(x, kept[i]));
    return PSIM_OK;
  }
  int32_t entry = x->entry;
  PSIM_CHECK(phase_load(x, p, ph, 0, 1));
  psim_status s = mark_saturated(x, p, ph, &n);
  psim_status s2 = phase_load(x, p, ph, 0, -1);
  PSIM_CHECK(s);
  PSIM_CHECK(s2);
  return entry >= 0 ? psim_coll_routes_put_held(memo, entry, x->self, x->marks, n) : PSIM_OK;
}

/* Resource list of the aggregated task: comm engines, then the links some
 * phase saturates in increasing order (x->load and x->held are left zeroed). */
static psim_status aggregated_resources(coll_ctx *x, const coll_plan *p, int32_t **res,
                                        int32_t *n) {
  int32_t nd = x->c->n_devices, cnt = x->d->own_stream ? 0 : x->d->n;
  psim_status s = PSIM_OK;
  for (size_t i = 0; i < p->n_phases && s == PSIM_OK; i++)
    s = mark_phase(x, p, &p->phases[i]);
  if (s == PSIM_OK && x->n_held > 1) /* held_list is NULL while nothing is held: UBSan */
    s = psim_sort_nonneg_i32(x->held_list, x->n_held);
  cnt += (int32_t)x->n_held;
  *res = s == PSIM_OK ? psim_malloc(((size_t)cnt + 1) * sizeof **res) : NULL;
  if (s == PSIM_OK && !*res)
    s = psim_error(PSIM_ENOMEM, "collective: out of memory");
  *n = 0;
  for (int32_t i = 0; *res && !x->d->own_stream && i < x->d->n; i++)
    (*res)[(*n)++] = psim_res_comm(x->d->devices[i]);
  for (size_t i = 0; i < x->n_held; i++) {
    if (*res)
      (*res)[(*n)++] = psim_res_link(nd, x->held_list[i]);
    x->held[x->held_list[i]] = 0;
  }
  x->n_held = 0;
  return s;
}

/* Bytes one group's messages move over links: every phase's, times its repeats. */
static double plan_bytes(const coll_plan *p) {
  double sum = 0;
  for (size_t i = 0; i < p->n_phases; i++)
    for (int32_t k = 0; k < p->phases[i].n; k++)
      sum += p->phases[i].repeat * p->msgs[p->phases[i].first + k].bytes;
  return sum;
}

/* One task, or own_stream a chain of psim_coll_pieces pieces (collective.h). */
static psim_status add_aggregated(psim_taskgraph *g, coll_ctx *x, const coll_plan *p,
                                  const psim_task_info *info, int32_t *entry, int32_t *exit) {
  double t, scale;
  PSIM_CHECK(plan_times(x, p, &t, &scale));
  int32_t *res = NULL, n = 0;
  PSIM_CHECK(aggregated_resources(x, p, &res, &n));
  psim_task_info ti = psim_coll_task_info(info, PSIM_TASK_COLLECTIVE, x->d->devices[0]);
  double bytes = plan_bytes(p);
  int32_t k = psim_coll_pieces(x->d, t);
  psim_status s = x->d->list_first_piece
                      ? psim_coll_add_pieces_first(g, k, t, res, n, &ti, entry, exit)
                      : psim_coll_add_pieces(g, k, t, res, n, &ti, entry, exit);
  psim_free(res);
  for (int32_t id = *entry; s == PSIM_OK && g->bytes && id <= *exit; id++)
    psim_tg_set_bytes(g, id, bytes / k);
  return s;
}

/* Expanded state: per rank the last message it sent and received (-1). */
typedef struct exp_state {
  int32_t *last_send, *last_recv, *step_ids;
  int32_t entry;
  double scale;
} exp_state;

/* Edges into a new message task from what its sender last did and what its
 * receiver last received (or the entry barrier). */
static psim_status message_deps(psim_taskgraph *g, const exp_state *e, const coll_msg *m,
                                int32_t t) {
  int32_t dep[3] = {e->last_send[m->src], e->last_recv[m->src], e->last_recv[m->dst]};
  int any = 0;
  for (int i = 0; i < 3; i++) {
    if (dep[i] < 0 || (i > 0 && dep[i] == dep[0]) || (i == 2 && dep[2] == dep[1]))
      continue;
    PSIM_CHECK(psim_tg_add_edge(g, dep[i], t));
    any = 1;
  }
  return any ? PSIM_OK : psim_tg_add_edge(g, e->entry, t);
}

/* One transfer task for message m of the own group at its share of its route's
 * links (loads: the phase's messages of every group). It holds its sender's
 * comm engine (a rank's collectives run in issue order, as on one NCCL
 * stream) and the links it fills with its replicas where no other message
 * of the own group shares them (those already divide the link: holding it too
 * would queue them on top of dividing it). Links shared with the replicas stay
 * held here, unlike the aggregated task's: a collective's messages depend on
 * each other step by step, and without the hold the next collective of the
 * group (gradient buckets in a row) would overlap its predecessor's on them. */
static psim_status add_message(psim_taskgraph *g, coll_ctx *x, const exp_state *e,
                               const coll_msg *m, const psim_task_info *info, int32_t *id) {
  const int32_t *links;
  int32_t nl;
  double bw, lat;
  PSIM_CHECK(route(x, x->self, m, &links, &nl));
  route_under_load(x, links, nl, &bw, &lat);
  int32_t res[64], *rp = nl < 64 ? res : psim_malloc(((size_t)nl + 1) * sizeof *rp), nh = 0;
  if (!rp)
    return psim_error(PSIM_ENOMEM, "collective: out of memory");
  if (!x->d->own_stream)
    rp[nh++] = psim_res_comm(group_device(x, x->self, m->src));
  for (int32_t j = 0; j < nl; j++) {
    int32_t l = links[j];
    if (x->own[l] == 1 && psim_coll_saturates(bw * x->load[l], psim_coll_link_bw(&x->c->links[l])))
      rp[nh++] = psim_res_link(x->c->n_devices, l);
  }
  double d = (lat + (m->bytes > 0 ? m->bytes / bw : 0)) * e->scale;
  psim_task_info ti =
      psim_coll_task_info(info, PSIM_TASK_TRANSFER, group_device(x, x->self, m->src));
  psim_status s = psim_tg_add_task(g, d, rp, nh, &ti, id);
  if (rp != res)
    psim_free(rp);
  PSIM_CHECK(s);
  psim_tg_set_bytes(g, *id, m->bytes);
  return message_deps(g, e, m, *id);
}

/* Adds every repeat of one phase; its messages and the replicas' load the links. */
static psim_status add_phase(psim_taskgraph *g, coll_ctx *x, exp_state *e, const coll_plan *p,
                             const coll_phase *ph, const psim_task_info *info) {
  PSIM_CHECK(phase_load(x, p, ph, 0, 1));
  psim_status s = PSIM_OK;
  for (int32_t r = 0; r < ph->repeat && s == PSIM_OK; r++) {
    for (int32_t i = 0; i < ph->n && s == PSIM_OK; i++)
      s = add_message(g, x, e, &p->msgs[ph->first + i], info, &e->step_ids[i]);
    for (int32_t i = 0; i < ph->n && s == PSIM_OK; i++) {
      e->last_send[p->msgs[ph->first + i].src] = e->step_ids[i];
      e->last_recv[p->msgs[ph->first + i].dst] = e->step_ids[i];
    }
  }
  psim_status s2 = phase_load(x, p, ph, 0, -1);
  return s != PSIM_OK ? s : s2;
}

static psim_status expanded_body(psim_taskgraph *g, coll_ctx *x, exp_state *e, const coll_plan *p,
                                 const psim_task_info *info, int32_t exit) {
  for (size_t i = 0; i < p->n_phases; i++)
    PSIM_CHECK(add_phase(g, x, e, p, &p->phases[i], info));
  int any = 0;
  for (int32_t r = 0; r < x->d->n; r++) {
    if (e->last_send[r] >= 0)
      PSIM_CHECK(psim_tg_add_edge(g, e->last_send[r], exit));
    if (e->last_recv[r] >= 0 && e->last_recv[r] != e->last_send[r])
      PSIM_CHECK(psim_tg_add_edge(g, e->last_recv[r], exit));
    any |= e->last_send[r] >= 0;
  }
  return any ? PSIM_OK : psim_tg_add_edge(g, e->entry, exit);
}

static psim_status add_expanded(psim_taskgraph *g, coll_ctx *x, const coll_plan *p,
                                const psim_task_info *info, int32_t *entry, int32_t *exit) {
  double t, scale;
  PSIM_CHECK(plan_times(x, p, &t, &scale));
  size_t widest = 1;
  for (size_t i = 0; i < p->n_phases; i++)
    widest = (size_t)p->phases[i].n > widest ? (size_t)p->phases[i].n : widest;
  exp_state e = {NULL, NULL, NULL, -1, scale};
  e.last_send = psim_malloc((2 * (size_t)x->d->n + widest) * sizeof *e.last_send);
  if (!e.last_send)
    return psim_error(PSIM_ENOMEM, "collective: out of memory");
  e.last_recv = e.last_send + x->d->n;
  e.step_ids = e.last_recv + x->d->n;
  for (int32_t r = 0; r < 2 * x->d->n; r++)
    e.last_send[r] = -1;
  psim_status s = psim_coll_add_barrier(g, info, x->d->devices[0], entry);
  if (s == PSIM_OK)
    s = psim_coll_add_barrier(g, info, x->d->devices[0], exit);
  e.entry = *entry;
  if (s == PSIM_OK)
    s = expanded_body(g, x, &e, p, info, *exit);
  psim_free(e.last_send);
  return s;
}

psim_status psim_coll_add(psim_taskgraph *g, psim_cluster *c, const psim_coll_desc *d,
                          psim_fidelity fidelity, const psim_task_info *info, int32_t *entry,
                          int32_t *exit) {
  double t;
  return psim_coll_add_timed(g, c, d, fidelity, info, entry, exit, &t);
}

psim_status psim_coll_add_timed(psim_taskgraph *g, psim_cluster *c, const psim_coll_desc *d,
                                psim_fidelity fidelity, const psim_task_info *info, int32_t *entry,
                                int32_t *exit, double *seconds) {
  *seconds = 0;
  if (d->n == 1 && d->devices) {
    PSIM_CHECK(check_desc(c, d));
    PSIM_CHECK(psim_coll_add_barrier(g, info, d->devices[0], entry));
    *exit = *entry;
    return PSIM_OK;
  }
  coll_plan p;
  coll_ctx x;
  PSIM_CHECK(prepare(c, d, &p, &x));
  psim_status s;
  if (fidelity == PSIM_FIDELITY_EXPANDED) {
    s = add_expanded(g, &x, &p, info, entry, exit);
  } else {
    s = add_aggregated(g, &x, &p, info, entry, exit);
  }
  *seconds = x.t_s;
  ctx_free(&x, s);
  psim_coll_plan_destroy(&p);
  return s;
}
