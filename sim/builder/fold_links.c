/* fold_links.c - folding's held-link condition, checked on the schedule.
 *
 * docs/simulator.md, "Folding symmetric devices", check 3. A task T of the
 * folded graph may hold a link L of a folded-away column's pipeline routes
 * without holding the same link L' of its class's simulated column: a data-
 * parallel ring whose inter-node hop leaves from the NIC that position 7's
 * pipeline sends use, while position 0 stands for position 7. Unfolded, T and
 * position 7's sends (the images of position 0's, which hold L') share L; folded
 * they do not. Whether that changes anything depends on time: the engine
 * (sim/engine/engine.c) takes tasks in order of their ready times (the latest
 * end of their predecessors) and a resource serves them first come, so two
 * tasks whose windows [ready, end] are disjoint never wait for each other.
 * The build records each such (L, L'); psim_build_fold_verify then requires,
 * on the folded schedule, that every task on L that is not also on L' keeps
 * clear of every task on L', and every task on L' that is not on L of every
 * task on L. By induction over the engine's order the unfolded schedule then
 * equals the folded one: each shared resource sees the same tasks at the same
 * times, or tasks that never meet. Otherwise the simulation is redone
 * unfolded (sim/simulate.c). */
#include <stdlib.h>
#include <string.h>

#include "sim/builder/build_impl.h"
#include "sim/core/alloc.h"

/* Link pairs recorded before folding is declined (each costs a scan of its
 * tasks after the schedule). */
#define PSIM_FOLD_MAX_PAIRS 4096
/* Window comparisons of the verification before folding is declined. */
#define PSIM_FOLD_VERIFY_BUDGET 5e7

/* The position of the column that stands for position p's. */
static int32_t rep_position(const psim_build *b, int32_t p) {
  return b->fold_pos[b->rep_of[b->s->stages[0].devices[p]]];
}

/* A link of a column's pipeline routes as {position, role}. */
static psim_hmap_key owned_key(int32_t p, int32_t role) {
  return (psim_hmap_key){(uint64_t)(uint32_t)p, (uint64_t)(uint32_t)role};
}

/* Records (l, l2) once. */
static psim_status add_pair(psim_build *b, psim_hmap *seen, int32_t l, int32_t l2) {
  int32_t v;
  psim_hmap_key k = {(uint64_t)(uint32_t)l, (uint64_t)(uint32_t)l2};
  if (psim_hmap_find(seen, k, &v))
    return PSIM_OK;
  if (b->n_fold_pairs >= PSIM_FOLD_MAX_PAIRS) {
    b->fold_broken = true;
    return PSIM_OK;
  }
  PSIM_CHECK(PSIM_VEC_RESERVE(b->fold_pairs, b->cap_fold_pairs, 2 * b->n_fold_pairs + 2));
  b->fold_pairs[2 * b->n_fold_pairs] = l;
  b->fold_pairs[2 * b->n_fold_pairs + 1] = l2;
  b->n_fold_pairs++;
  return psim_hmap_put(seen, k, 1);
}

/* d's concurrent peer groups as a family (position stride, groups): peer k of a column's
 * group stands at its position + k * stride; stride 0: not a family of positions. */
static int32_t family_of(psim_build *b, const psim_coll_desc *d) {
  int32_t d0 = d->devices[0], d1 = d0 + d->group_stride;
  int32_t stride = d->group_stride > 0 && d1 < b->c->n_devices && b->fold_pos[d1] >= 0
                       ? b->fold_pos[d1] - b->fold_pos[d0]
                       : 0;
  stride = stride > 0 ? stride : 0;
  for (int32_t i = 0; i < b->n_fold_fam; i++)
    if (b->fold_fam[i][0] == stride && b->fold_fam[i][1] == d->concurrent_groups)
      return i;
  if (b->n_fold_fam == 8)
    return -1;
  b->fold_fam[b->n_fold_fam][0] = stride;
  b->fold_fam[b->n_fold_fam][1] = d->concurrent_groups;
  return b->n_fold_fam++;
}

psim_status psim_build_fold_note_coll(psim_build *b, const psim_coll_desc *d, int32_t t0) {
  if (!b->folded || b->fold_broken || d->concurrent_groups <= 1 || !b->fold_owner)
    return PSIM_OK;
  const psim_taskgraph *g = &b->g;
  int32_t nd = b->c->n_devices, f = -2, last_n = -1;
  const int32_t *last_res = NULL; /* the list scanned last (a template's pieces share one) */
  bool last_owned = false;        /* and whether it holds an owned link */
  for (int32_t t = t0; t < g->n_tasks; t++) {
    const int32_t *res;
    int32_t n;
    psim_build_task_res(b, t, &res, &n);
    bool same = res == last_res && n == last_n; /* the same list: the same outcome */
    if (same && !last_owned)
      continue;
    last_res = res;
    last_n = n;
    last_owned = false;
    for (int32_t r = 0; r < n; r++) {
      int32_t l = res[r] - 2 * nd;
      if (!same && (l < 0 || l >= b->c->n_links || b->fold_owner[l] < 0))
        continue;
      last_owned = true;
      f = f == -2 ? family_of(b, d) : f;
      if (f < 0) {
        b->fold_broken = true; /* too many families: declined */
        return PSIM_OK;
      }
      if (!b->fold_task_fam) {
        b->fold_task_fam = psim_malloc(sizeof *b->fold_task_fam);
        if (!b->fold_task_fam)
          return psim_error(PSIM_ENOMEM, "out of memory");
        psim_hmap_init(b->fold_task_fam);
      }
      PSIM_CHECK(psim_hmap_put(b->fold_task_fam, (psim_hmap_key){(uint64_t)(uint32_t)t, 0}, f));
      break;
    }
  }
  return PSIM_OK;
}

/* For every link of a folded-away column's pipeline routes that task t holds
 * without the same link of its class's simulated column: the pair (links:
 * owned_key -> link). */
static psim_status task_pairs(psim_build *b, int32_t t, const psim_hmap *links, psim_hmap *seen,
                              int32_t *stamp, bool *found) {
  int32_t nd = b->c->n_devices, n;
  const int32_t *res;
  psim_build_task_res(b, t, &res, &n);
  for (int32_t r = 0; r < n; r++)
    stamp[res[r]] = t; /* what t holds, for O(1) membership below */
  for (int32_t r = 0; r < n && !b->fold_broken; r++) {
    int32_t l = res[r] - 2 * nd; /* psim_res_link's inverse */
    if (l < 0 || l >= b->c->n_links || b->fold_owner[l] < 0)
      continue;
    int32_t p = b->fold_owner[l], rp = rep_position(b, p), l2;
    if (rp == p)
      continue;
    if (!psim_hmap_find(links, owned_key(rp, b->fold_role[l]), &l2)) {
      b->fold_broken = true; /* the simulated column has no such link */
      break;
    }
    int32_t f;
    if (stamp[psim_res_link(nd, l2)] == t)
      continue;
    *found = true;
    if (b->fold_task_fam &&
        psim_hmap_find(b->fold_task_fam, (psim_hmap_key){(uint64_t)(uint32_t)t, 0}, &f))
      b->fold_fam_used |= 1u << f;
    PSIM_CHECK(add_pair(b, seen, l, l2));
  }
  return PSIM_OK;
}

/* What task_pairs would add for task t, whose template's list (tmpl) an earlier task scanned:
 * no pair where that scan found none, else the same pairs (recorded already) and t's family. */
static void repeat_pairs(psim_build *b, int32_t t, int8_t tmpl, bool *found) {
  int32_t f;
  *found = tmpl > 0;
  if (*found && b->fold_task_fam &&
      psim_hmap_find(b->fold_task_fam, (psim_hmap_key){(uint64_t)(uint32_t)t, 0}, &f))
    b->fold_fam_used |= 1u << f;
}

/* Every task's pairs; a template's copies (one per layer and micro-batch) scan its list once
 * (tmpl: per template, -1 unscanned, 0 no pair found, 1 pairs). */
static psim_status scan_tasks(psim_build *b, const psim_hmap *links, psim_hmap *seen,
                              int32_t *stamp, int8_t *tmpl) {
  bool found = true;
  psim_status st = PSIM_OK;
  for (int32_t t = 0; t < b->g.n_tasks && st == PSIM_OK && !b->fold_broken; t++) {
    int32_t i = t < b->n_task_tmpl ? b->task_tmpl[t] : -1;
    if (i >= 0 && tmpl[i] >= 0) {
      repeat_pairs(b, t, tmpl[i], &found);
      continue;
    }
    /* a task whose list is the one before's, which found no pair, finds none either (the
     * pieces of a collective, its copies: the scan follows the lists, not the tasks) */
    if (!found && psim_build_same_res(b, t - 1, t))
      continue;
    found = false;
    st = task_pairs(b, t, links, seen, stamp, &found);
    if (i >= 0)
      tmpl[i] = found ? 1 : 0;
  }
  return st;
}

void psim_build_fold_check_graph(psim_build *b) {
  if (!b->folded || b->fold_broken)
    return;
  psim_hmap links, seen;
  psim_hmap_init(&links);
  psim_hmap_init(&seen);
  psim_status st = PSIM_OK;
  for (int32_t l = 0; l < b->c->n_links && st == PSIM_OK; l++)
    if (b->fold_owner[l] >= 0)
      st = psim_hmap_put(&links, owned_key(b->fold_owner[l], b->fold_role[l]), l);
  int32_t *stamp = psim_malloc(((size_t)b->g.n_resources + 1) * sizeof *stamp);
  size_t n_tmpl = (size_t)psim_build_n_templates(b);
  int8_t *tmpl = psim_malloc(n_tmpl + 1);
  for (int32_t r = 0; stamp && r < b->g.n_resources; r++)
    stamp[r] = -1;
  if (tmpl)
    memset(tmpl, -1, n_tmpl + 1);
  if (!stamp || !tmpl)
    st = psim_error(PSIM_ENOMEM, "out of memory");
  if (st == PSIM_OK)
    st = scan_tasks(b, &links, &seen, stamp, tmpl);
  psim_free(stamp);
  psim_free(tmpl);
  b->fold_broken = b->fold_broken || st != PSIM_OK; /* out of memory: declined, never wrong */
  psim_hmap_destroy(&links);
  psim_hmap_destroy(&seen);
}

/* The first position of p's family along (stride, groups): peer groups k * stride apart, the
 * families aligned at multiples of stride * groups. */
static int32_t family_base(int32_t p, int32_t stride, int32_t groups) {
  return p - (p / stride) % groups * stride;
}

bool psim_build_fold_taint(const psim_build *b, uint64_t *taint) {
  int32_t n_pos = b->s->stages[0].n_devices;
  uint64_t *v = psim_calloc((size_t)n_pos + 1, sizeof *v);
  if (!v)
    return false;
  for (size_t i = 0; i < b->n_fold_pairs; i++) { /* a sum: the order of the pairs is moot */
    int32_t l = b->fold_pairs[2 * i];
    v[b->fold_owner[l]] += psim_hmap_mix64((uint64_t)(uint32_t)b->fold_role[l] + 1);
  }
  bool ok = true;
  for (int32_t f = 0; f < b->n_fold_fam && ok; f++) { /* alike over each family */
    if (!(b->fold_fam_used >> f & 1))
      continue;
    int32_t stride = b->fold_fam[f][0], groups = b->fold_fam[f][1];
    ok = stride > 0 && n_pos % (stride * groups) == 0;
    for (int32_t p = 0; p < n_pos && ok; p++) {
      int32_t base = family_base(p, stride, groups);
      if (base != p)
        continue;
      uint64_t sum = 0;
      for (int32_t k = 0; k < groups; k++)
        sum += v[base + k * stride];
      for (int32_t k = 0; k < groups; k++)
        v[base + k * stride] = sum;
    }
  }
  for (int32_t p = 0; p < n_pos && ok; p++)
    taint[p] = v[p] ? psim_hmap_mix64(taint[p] ^ v[p]) : taint[p];
  psim_free(v);
  return ok;
}
