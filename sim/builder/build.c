/* build.c - the task-graph builder: (model, cluster, strategy) -> tasks.
 *
 * Compute tasks: one per (op, simulated shard, micro-batch, pass), issued per
 * device in the pipeline schedule's order and chained in that order (a CUDA
 * stream runs kernels in issue order).
 *
 * Communication follows from layouts (GSPMD/Alpa rules), per tensor edge
 * X -> T -> Y and micro-batch:
 *  - partial sums: X splits a dim that T does not carry (forward: a contracted
 *    dim; backward: any dim of the consumer outside T) -> the group of shards
 *    differing only in those dims reduces: reduce-scatter when Y's region is
 *    1/k of X's, else all-reduce;
 *  - then Y's shard region of T is gathered from the shards of X that overlap
 *    it (FlexFlow's rectangle intersection): a local edge when Y's device
 *    holds it, else point-to-point transfers over the route (this covers
 *    all-gather, all-to-all and pipeline boundaries alike).
 * Backward mirrors forward with producer and consumer swapped. Weight
 * gradients of shards that differ only in non-weight dims are synchronised
 * (all-reduce, or reduce-scatter under ZeRO >= 2) in buckets, optionally
 * overlapped with the backward pass; then the optimizer update runs. */
#include "sim/builder/build_impl.h"

#include <assert.h>
#include <string.h>

#include "sim/core/alloc.h"

/* The build's own allocations: hash maps, templates, per-device stream state. */
static psim_status alloc_state(psim_build *b) {
  b->cache = psim_calloc(1, sizeof(psim_comm_cache));
  b->memo = psim_calloc(1, sizeof(psim_comm_cache));
  b->where = psim_calloc(1, sizeof(psim_comm_cache));
  b->colls = psim_build_colls_new();
  b->groups = psim_build_group_memo_new();
  size_t nd = (size_t)b->c->n_devices;
  b->last_task = psim_malloc(sizeof *b->last_task * nd);
  b->last_bwd = psim_malloc(sizeof *b->last_bwd * nd);
  b->need_sync = psim_calloc(nd, 1);
  if (!b->cache || !b->memo || !b->where || !b->colls || !b->groups || !b->last_task ||
      !b->last_bwd || !b->need_sync)
    return psim_error(PSIM_ENOMEM, "out of memory");
  memset(b->last_task, 0xff, sizeof *b->last_task * nd);
  memset(b->last_bwd, 0xff, sizeof *b->last_bwd * nd);
  return PSIM_OK;
}

/* Room for the graph, so that building it does not regrow the arrays. */
static psim_status reserve_graph(psim_build *b, const psim_build *prev) {
  size_t slots = (size_t)b->loc_first[b->m->n_ops] * (size_t)b->n_micro;
  /* measured on Megatron graphs: about 4 tasks, 5 resource slots and 8 edges per
   * (shard, micro-batch); untouched reserve costs no page faults */
  if (prev) /* about the last graph's size: no regrowth */
    PSIM_CHECK(psim_tg_reserve(&b->g, (size_t)prev->g.n_tasks * 9 / 8 + 1024,
                               prev->g.n_res * 9 / 8 + 1024, prev->g.n_edges * 9 / 8 + 1024));
  else
    PSIM_CHECK(psim_tg_reserve(&b->g, slots * 4 + 1024, slots * 5 + 1024, slots * 8 + 1024));
  /* at most three kernels (forward, recompute, backward) per slot: no regrowth */
  return PSIM_VEC_RESERVE(b->next_compute, b->cap_next, slots * 3 + 1);
}

/* The fields every phase reads, and the graph (spare's buffers if given). */
static void begin(psim_build *b, const psim_model *m, psim_cluster *c, const psim_strategy *s,
                  const psim_sim_options *o, bool record, psim_taskgraph *spare) {
  memset(b, 0, sizeof *b);
  b->m = m;
  b->c = c;
  b->s = s;
  b->o = o;
  b->inc.record = record;
  b->res_deferred = o->merge_links && !o->keep_graph && !record &&
                    o->fidelity == PSIM_FIDELITY_AGGREGATE &&
                    s->sync != PSIM_SYNC_PS; /* psim_build_merge_links writes the lists */
  b->n_micro = s->n_micro > 0 ? s->n_micro : 1;
  psim_tg_init(&b->g, 3 * c->n_devices + c->n_links); /* compute, comm, links, host */
  if (spare) {                                        /* take over its buffers */
    b->g = *spare;
    psim_tg_init(spare, 0);
    psim_tg_clear(&b->g, 3 * c->n_devices + c->n_links);
  }
  b->g.n_streams = 2 * c->n_devices; /* compute and comm of each device (PSIM_ENGINE_STREAM) */
}

/* Forgets prev and the per-build incremental state once nothing reads them. */
static void end_reuse(psim_build *b) {
  b->inc.prev = NULL; /* prev may be destroyed from here on */
  psim_free(b->inc.old2new);
  psim_free(b->inc.seg_dirty);
  psim_free(b->inc.key_read);
  b->inc.old2new = NULL;
  b->inc.seg_dirty = NULL;
  b->inc.key_read = NULL;
  b->inc.changed = NULL;
}

/* psim_build_fill's phases after begin(). */
static psim_status fill_phases(psim_build *b, const psim_model *m, psim_build *prev,
                               const uint8_t *changed) {
  const psim_sim_options *o = b->o;
  PSIM_CHECK(psim_tg_track_bytes(&b->g, o->keep_graph)); /* bytes per task, for traces and tests */
  PSIM_CHECK(psim_tg_track_positions(&b->g, o->engine == PSIM_ENGINE_ISSUE ||
                                                o->engine == PSIM_ENGINE_STREAM)); /* schedules.c */
  PSIM_CHECK(psim_build_apply_precision(b));
  PSIM_CHECK(alloc_state(b));
  PSIM_CHECK(psim_build_recompute_units(b));
  PSIM_CHECK(psim_build_choose_simulated(b));
  PSIM_CHECK(psim_build_make_locals(b));
  if (b->inc.record)
    PSIM_CHECK(psim_build_alloc_segments(b));
  if (changed && psim_build_can_reuse(b, prev)) {
    b->inc.prev = prev;
    b->inc.changed = changed;
    PSIM_CHECK(psim_build_reuse_costs(b, prev, changed));
  }
  PSIM_CHECK(reserve_graph(b, b->inc.prev));
  PSIM_CHECK(psim_memory_static(b));
  PSIM_CHECK(psim_build_issue_compute(b));
  if (b->inc.prev)
    PSIM_CHECK(psim_build_map_compute_tasks(b, changed));
  PSIM_CHECK(psim_build_connect_all(b));
  assert(!b->inc.record || b->inc.seg_task[(size_t)b->n_micro * (size_t)m->n_ops] == b->g.n_tasks);
  end_reuse(b);
  PSIM_CHECK(psim_build_optimizer(b));
  /* an incremental graph is a full build's graph, acyclic when that is; a
   * builder bug would still stop the engine (tasks left unrun) */
  return changed ? psim_tg_finalize_unchecked(&b->g) : psim_tg_finalize(&b->g);
}

psim_status psim_build_fill(psim_build *b, const psim_model *m, psim_cluster *c,
                            const psim_strategy *s, const psim_sim_options *o, psim_build *prev,
                            const uint8_t *changed, psim_taskgraph *spare) {
  assert(m && c && s && o && s->n_ops == m->n_ops); /* psim_simulate checks the op count */
  begin(b, m, c, s, o, changed != NULL, spare);
  return fill_phases(b, m, prev, changed);
}

/* A folded build whose checks found peers that are not symmetric (locals.c)
 * is redone unfolded, with options of its own (fold off) that it keeps. */
static psim_status refill_unfolded(psim_build *b, const psim_model *m, psim_cluster *c,
                                   const psim_strategy *s, const psim_sim_options *o,
                                   psim_build *prev, const uint8_t *changed) {
  psim_sim_options *own = psim_malloc(sizeof *own);
  if (!own)
    return psim_error(PSIM_ENOMEM, "out of memory");
  *own = *o;
  own->fold = false;
  psim_build_destroy(b);
  psim_status st = psim_build_fill(b, m, c, s, own, prev, changed, NULL);
  b->nofold_opts = own; /* fill zeroed b; fold is off, so no second refill */
  if (st == PSIM_ELIMIT)
    psim_error_prefix("folding was declined (the devices of a stage are not symmetric: "
                      "docs/simulator.md, \"Folding symmetric devices\"), and unfolded ");
  return st;
}

/* Folding refinements (columns split by taint, fold_links.c) tried before a build whose
 * columns share links unevenly is redone unfolded. */
#define PSIM_FOLD_REFINEMENTS 3

/* While a folded build's columns hold links unevenly (fold_pairs), builds it again with
 * those columns split from their classes; then, or when a check declines, unfolded. */
static psim_status refine(psim_build *b, const psim_model *m, psim_cluster *c,
                          const psim_strategy *s, const psim_sim_options *o, psim_build *prev,
                          const uint8_t *changed) {
  int32_t n_pos = s->n_stages > 0 ? s->stages[0].n_devices : 0;
  uint64_t *taint = NULL;
  psim_status st = PSIM_OK;
  for (int i = 0; st == PSIM_OK && b->folded && !b->fold_broken && b->n_fold_pairs > 0; i++) {
    /* past the route budget the held links are known only for the routes searched (locals.c),
     * and each round is a large build: declined as before */
    if (i == PSIM_FOLD_REFINEMENTS || b->fold_by_key) {
      b->fold_broken = true;
      break;
    }
    if (!taint)
      taint = psim_calloc((size_t)n_pos + 1, sizeof *taint);
    if (!taint) {
      b->fold_broken = true; /* declined, which is never wrong */
      break;
    }
    if (!psim_build_fold_taint(b, taint)) {
      b->fold_broken = true;
      break;
    }
    psim_build_destroy(b);
    begin(b, m, c, s, o, changed != NULL, NULL);
    b->fold_taint = taint;
    st = fill_phases(b, m, NULL, changed);
    b->fold_taint = NULL; /* the caller's, freed below */
    if (st == PSIM_OK)
      psim_build_fold_check_graph(b);
  }
  psim_free(taint);
  if (st == PSIM_OK && b->fold_broken)
    st = refill_unfolded(b, m, c, s, o, prev, changed);
  return st;
}

static psim_status build_new(psim_build **out, const psim_model *m, psim_cluster *c,
                             const psim_strategy *s, const psim_sim_options *o, psim_build *prev,
                             const uint8_t *changed, psim_taskgraph *spare) {
  *out = psim_malloc(sizeof **out);
  if (!*out)
    return psim_error(PSIM_ENOMEM, "out of memory for a task-graph build");
  psim_status st = psim_build_fill(*out, m, c, s, o, prev, changed, spare);
  if (st == PSIM_OK)
    psim_build_fold_check_graph(*out);
  if (st == PSIM_OK && ((*out)->fold_broken || (*out)->n_fold_pairs > 0))
    st = refine(*out, m, c, s, o, prev, changed);
  if (st == PSIM_OK && !changed) /* after folding's checks, which read the links held */
    st = psim_build_merge_links(*out);
  return st;
}

psim_status psim_build_graph(psim_build **out, const psim_model *m, psim_cluster *c,
                             const psim_strategy *s, const psim_sim_options *o) {
  return build_new(out, m, c, s, o, NULL, NULL, NULL);
}

psim_status psim_build_graph_reusing(psim_build **out, const psim_model *m, psim_cluster *c,
                                     const psim_strategy *s, const psim_sim_options *o,
                                     psim_build *prev, const uint8_t *changed,
                                     psim_taskgraph *spare) {
  if (!changed) {
    *out = NULL;
    return psim_error(PSIM_EINPUT, "psim_build_graph_reusing: no changed[] flags (one per op)");
  }
  return build_new(out, m, c, s, o, prev, changed, spare);
}

psim_taskgraph *psim_build_taskgraph(psim_build *b) {
  return &b->g;
}

void psim_build_summarise(const psim_build *b, psim_build_summary *out) {
  out->folded = b->folded;
  out->n_simulated = b->n_simulated;
  out->hardware_flops = b->hardware_flops;
  out->dp_bytes = b->dp_bytes;
  memcpy(out->compute_by_origin, b->compute_by_origin, sizeof out->compute_by_origin);
  out->parameter_servers = b->ps != NULL;
  out->segments_copied = b->inc.segments_copied;
  out->segments_built = b->inc.segments_built;
}

static void free_reuse(psim_build_reuse *r) {
  psim_free(r->seg_task);
  psim_free(r->seg_edge);
  psim_free(r->seg_put);
  psim_free(r->seg_fixed);
  psim_free(r->puts);
  psim_free(r->old2new);
  psim_free(r->seg_dirty);
  psim_free(r->key_read);
}

void psim_build_destroy(psim_build *b) {
  psim_tg_destroy(&b->g);
  psim_build_ps_free(b); /* issue 8 */
  void *arrays[] = {b->simulated, b->locals,     b->loc_first,  b->fwd,          b->bwd,
                    b->rec,       b->last_task,  b->last_bwd,   b->need_sync,    b->next_compute,
                    b->mem,       b->static_mem, b->wshares,    b->wshare_first, b->save_slots,
                    b->costs,     b->ps_opts,    b->ps_dropped, b->rep_of,       b->nofold_opts,
                    b->fold_pos,  b->fold_owner, b->fold_role,  b->fold_pairs,   b->task_tmpl,
                    b->dev_twin,  b->rc_unit,    b->own_ops,    b->own_model,    b->wgt};
  for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++)
    psim_free(arrays[i]);
  free_reuse(&b->inc);
  psim_build_colls_free(b->colls);
  psim_build_group_memo_free(b->groups);
  psim_bcache_free(b->cache);
  psim_bcache_free(b->memo);
  psim_bcache_free(b->where);
  if (b->fold_task_fam)
    psim_hmap_destroy(b->fold_task_fam);
  psim_free(b->fold_task_fam);
  memset(b, 0, sizeof *b);
}

void psim_build_free(psim_build *b) {
  if (!b)
    return;
  psim_build_destroy(b);
  psim_free(b);
}
