/* reuse.c - incremental builds (psim_build_graph_reusing): connect
 * segments, their copies from the previous build, and what the changed ops
 * leave valid. */
#include "sim/builder/build_impl.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/engine/collective.h"

/* ---- incremental builds (psim_build_graph_reusing) -------------------------
 *
 * Why a copied segment equals the one connect_inputs + connect_grads would
 * build. Segment (mu, y) reads: the configurations of y and of the producers
 * x of y's inputs; the communication cache, whose entries it reads are keyed
 * by y (backward, scatter-gather) or by a producer x (forward reductions,
 * gathers, all-gathers), put there by segments of x's consumers; the
 * per-edge memo (keyed by y); compute task ids of x and y. A segment is
 * dirty when y, a producer x or a consumer of x's outputs changed; a clean
 * segment's inputs are those prev read, up to task numbering, so its output
 * is prev's up to numbering. Numbering: every task it names outside itself
 * (compute tasks, communication of earlier segments) must have a counterpart
 * in old2new (compute tasks of unchanged ops, tasks of copied segments), else
 * it is built instead. Cache entries it put are put again, renumbered, so
 * later built segments see the cache a full build would. A segment naming a
 * stream successor (pipeline sends) depends on other ops and is always
 * built. */

/* Segment seg starts here (its end is the next one's start). */
static void begin_segment(psim_build *b, size_t seg) {
  b->inc.cur_seg = seg;
  b->inc.seg_task[seg] = b->g.n_tasks;
  b->inc.seg_edge[seg] = b->g.n_edges;
  b->inc.seg_put[seg] = b->inc.n_puts;
}

/* Copies segment seg of prev (tasks, edges, cache entries, renumbered) when
 * every task it names outside itself has a counterpart in this graph, else
 * adds nothing and sets *copied false (the segment is built instead). */
static psim_status copy_segment(psim_build *b, size_t seg, bool *copied) {
  const psim_build *p = b->inc.prev;
  assert(p && seg < (size_t)b->n_micro * (size_t)b->m->n_ops); /* can_reuse: the same count */
  int32_t t0 = p->inc.seg_task[seg], t1 = p->inc.seg_task[seg + 1];
  *copied = false;
  for (size_t i = p->inc.seg_put[seg]; i < p->inc.seg_put[seg + 1]; i++) {
    int32_t v = p->inc.puts[i].value;
    if (!p->inc.puts[i].memo && (v < t0 || v >= t1) && b->inc.old2new[v] < 0)
      return PSIM_OK;
  }
  int32_t first = b->g.n_tasks;
  PSIM_CHECK(psim_tg_append_tasks(&b->g, &p->g, t0, t1));
  for (int32_t t = t0; t < t1; t++)
    b->inc.old2new[t] = first + (t - t0);
  PSIM_CHECK(psim_tg_append_edges(&b->g, &p->g, p->inc.seg_edge[seg], p->inc.seg_edge[seg + 1],
                                  b->inc.old2new, copied));
  if (!*copied) { /* an edge leaves to a task without counterpart */
    for (int32_t t = t0; t < t1; t++)
      b->inc.old2new[t] = -1;
    return psim_tg_truncate(&b->g, first);
  }
  for (size_t i = p->inc.seg_put[seg]; i < p->inc.seg_put[seg + 1]; i++) {
    const psim_put_record *r = &p->inc.puts[i];
    int32_t v = r->memo ? r->value : b->inc.old2new[r->value];
    PSIM_CHECK(psim_build_record_put(b, r->k1, r->k2, v, r->memo));
    if (b->inc
            .key_read[psim_build_key_op(r->k1)]) /* else no built segment reads it (ensure_keys) */
      PSIM_CHECK(psim_bcache_put(r->memo ? b->memo : b->cache, r->k1, r->k2, v));
  }
  b->inc.segments_copied++;
  return PSIM_OK;
}

/* Marks op o's cache entries as read; true when it was not yet. */
static bool mark_read(psim_build *b, int32_t o) {
  bool fresh = !b->inc.key_read[o];
  b->inc.key_read[o] = 1;
  return fresh;
}

/* Before building segment (mu, y): it reads cache entries keyed by y or a
 * producer of y. Copied segments put only entries of ops marked in key_read
 * (those of dirty segments, marked up front); a clean segment built anyway
 * (pipeline sends, unmapped tasks) marks its ops now and puts the entries
 * copied so far: the memo's of every micro-batch, the cache's of this one. */
static psim_status ensure_keys(psim_build *b, int32_t y) {
  const psim_op *op = &b->m->ops[y];
  bool fresh = mark_read(b, y);
  for (int32_t i = 0; i < op->n_in; i++)
    if (b->m->tensors[op->in[i]].producer >= 0)
      fresh |= mark_read(b, b->m->tensors[op->in[i]].producer);
  for (size_t i = 0; fresh && i < b->inc.n_puts; i++) {
    const psim_put_record *r = &b->inc.puts[i];
    if ((r->memo || i >= b->inc.micro_put0) && b->inc.key_read[psim_build_key_op(r->k1)])
      PSIM_CHECK(psim_bcache_put(r->memo ? b->memo : b->cache, r->k1, r->k2, r->value));
  }
  return PSIM_OK;
}

/* The edges into op y (forward, recompute) and out of it (backward) for
 * micro-batch mu: copied from prev when clean, else built. */
static psim_status connect_op(psim_build *b, int32_t y, int32_t mu) {
  size_t seg = (size_t)mu * (size_t)b->m->n_ops + (size_t)y;
  if (b->inc.record)
    begin_segment(b, seg);
  if (b->inc.prev && !b->inc.seg_dirty[y] && !b->inc.prev->inc.seg_fixed[seg]) {
    bool copied;
    PSIM_CHECK(copy_segment(b, seg, &copied));
    if (copied)
      return PSIM_OK;
  }
  if (b->inc.prev)
    PSIM_CHECK(ensure_keys(b, y));
  b->inc.segments_built++;
  PSIM_CHECK(psim_build_connect_inputs(b, y, mu));
  return psim_build_connect_grads(b, y, mu);
}

psim_status psim_build_connect_all(psim_build *b) {
  for (int32_t mu = 0; mu < b->n_micro; mu++) {
    psim_bcache_reset(b->cache);
    b->inc.micro_put0 = b->inc.n_puts;
    for (int32_t o = 0; o < b->m->n_ops; o++) {
      PSIM_CHECK(connect_op(b, o, mu));
      if (psim_interrupted())
        return psim_error(PSIM_EINTERRUPTED, "interrupted while building the task graph");
    }
  }
  if (b->inc.record)
    begin_segment(b, (size_t)b->n_micro * (size_t)b->m->n_ops);
  return PSIM_OK;
}

/* Whether prev was built over the same devices, folding and micro-batches
 * (then op-local indices and segment numbers mean the same in both). */
bool psim_build_can_reuse(const psim_build *b, const psim_build *p) {
  return p && p->inc.record && p->inc.seg_task && p->m == b->m && p->c == b->c && p->o == b->o &&
         p->n_micro == b->n_micro && p->folded == b->folded && !b->wgt && !p->wgt &&
         memcmp(p->simulated, b->simulated, (size_t)b->c->n_devices) == 0;
}

/* From changed[]: seg_dirty (op y, a producer x of its inputs, or another
 * consumer of x changed) and cost_dirty (y or a producer changed: saved
 * activations depend on the producer's shards, memory.c). */
/* Whether op x or, through views, the op whose output x views changed (the
 * saved bytes of x's consumers depend on it: memory.c). */
static bool source_changed(const psim_model *m, int32_t x, const uint8_t *changed) {
  for (; x >= 0; x = m->tensors[m->ops[x].in[0]].producer) {
    if (changed[x])
      return true;
    if (!psim_build_is_view(&m->ops[x]) || m->ops[x].n_in != 1)
      return false;
  }
  return false;
}

static psim_status mark_dirty(psim_build *b, const uint8_t *changed, uint8_t *cost_dirty) {
  const psim_model *m = b->m;
  uint8_t *sibling = psim_calloc((size_t)m->n_ops, 1); /* a consumer of op x changed */
  b->inc.seg_dirty = psim_calloc((size_t)m->n_ops, 1);
  b->inc.key_read = psim_calloc((size_t)m->n_ops, 1);
  if (!sibling || !b->inc.seg_dirty || !b->inc.key_read) {
    psim_free(sibling);
    return psim_error(PSIM_ENOMEM, "out of memory");
  }
  for (int32_t z = 0; z < m->n_ops; z++)
    for (int32_t i = 0; changed[z] && i < m->ops[z].n_in; i++)
      if (m->tensors[m->ops[z].in[i]].producer >= 0)
        sibling[m->tensors[m->ops[z].in[i]].producer] = 1;
  for (int32_t y = 0; y < m->n_ops; y++) {
    b->inc.seg_dirty[y] = cost_dirty[y] = changed[y];
    for (int32_t i = 0; i < m->ops[y].n_in; i++) {
      int32_t x = m->tensors[m->ops[y].in[i]].producer;
      if (x < 0)
        continue;
      b->inc.seg_dirty[y] |= changed[x] | sibling[x];
      cost_dirty[y] |= source_changed(m, x, changed);
    }
  }
  for (int32_t y = 0; y < m->n_ops; y++) /* a dirty segment reads y's and its producers' keys */
    for (int32_t i = -1; b->inc.seg_dirty[y] && i < m->ops[y].n_in; i++) {
      int32_t x = i < 0 ? y : m->tensors[m->ops[y].in[i]].producer;
      if (x >= 0)
        b->inc.key_read[x] = 1;
    }
  psim_free(sibling);
  return PSIM_OK;
}

/* Takes from prev what the changed ops leave valid: the shard costs of the
 * unchanged ops (but the saved activations of those with a changed
 * producer, marked stale for shard_cost) and the collective templates. */
psim_status psim_build_reuse_costs(psim_build *b, psim_build *p, const uint8_t *changed) {
  uint8_t *cost_dirty = psim_calloc((size_t)b->m->n_ops, 1);
  if (!cost_dirty)
    return psim_error(PSIM_ENOMEM, "out of memory");
  psim_status st = mark_dirty(b, changed, cost_dirty);
  for (int32_t o = 0; o < b->m->n_ops && st == PSIM_OK; o++) {
    if (changed[o])
      continue;
    size_t at = (size_t)b->loc_first[o] * 3,
           n = 3 * (size_t)(b->loc_first[o + 1] - b->loc_first[o]);
    memcpy(b->costs + at, p->costs + (size_t)p->loc_first[o] * 3, sizeof *b->costs * n);
    for (size_t i = 0; cost_dirty[o] && i < n; i++)
      if (b->costs[at + i].valid == PSIM_COST_VALID)
        b->costs[at + i].valid = PSIM_COST_MEM_STALE;
  }
  psim_free(cost_dirty);
  if (p->colls) { /* templates are pure functions of their descriptions */
    psim_build_colls_free(b->colls);
    b->colls = p->colls;
    p->colls = NULL;
  }
  return st;
}

/* old2new for the compute tasks of unchanged ops (the same locals). */
psim_status psim_build_map_compute_tasks(psim_build *b, const uint8_t *changed) {
  const psim_build *p = b->inc.prev;
  b->inc.old2new = psim_malloc(sizeof *b->inc.old2new * ((size_t)p->g.n_tasks + 1));
  if (!b->inc.old2new)
    return psim_error(PSIM_ENOMEM, "out of memory");
  memset(b->inc.old2new, 0xff, sizeof *b->inc.old2new * ((size_t)p->g.n_tasks + 1));
  for (int32_t o = 0; o < b->m->n_ops; o++) {
    if (changed[o])
      continue;
    size_t n = (size_t)(b->loc_first[o + 1] - b->loc_first[o]) * (size_t)b->n_micro;
    size_t at = (size_t)b->loc_first[o] * (size_t)b->n_micro;
    size_t at_p = (size_t)p->loc_first[o] * (size_t)b->n_micro;
    /* an unchanged op has prev's locals: the same devices are simulated (can_reuse) */
    assert(b->loc_first[o + 1] - b->loc_first[o] == p->loc_first[o + 1] - p->loc_first[o]);
    for (size_t i = 0; i < n; i++) {
      b->inc.old2new[p->fwd[at_p + i]] = b->fwd[at + i];
      b->inc.old2new[p->bwd[at_p + i]] = b->bwd[at + i];
      if (p->rec[at_p + i] >= 0)
        b->inc.old2new[p->rec[at_p + i]] = b->rec[at + i];
    }
  }
  return PSIM_OK;
}

psim_status psim_build_alloc_segments(psim_build *b) {
  size_t n = (size_t)b->n_micro * (size_t)b->m->n_ops + 1;
  b->inc.seg_task = psim_malloc(sizeof *b->inc.seg_task * n);
  b->inc.seg_edge = psim_malloc(sizeof *b->inc.seg_edge * n);
  b->inc.seg_put = psim_malloc(sizeof *b->inc.seg_put * n);
  b->inc.seg_fixed = psim_calloc(n, 1);
  if (!b->inc.seg_task || !b->inc.seg_edge || !b->inc.seg_put || !b->inc.seg_fixed)
    return psim_error(PSIM_ENOMEM, "out of memory for %zu build segments", n);
  return PSIM_OK;
}
