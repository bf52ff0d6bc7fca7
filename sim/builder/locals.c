/* locals.c - which devices and op shards are simulated (folding), and their
 * task slots. */
#include "sim/builder/build_impl.h"

#include <math.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/engine/collective.h"

/* Indexes the entries and local shards of wide ops by device, for the
 * simulated devices only: psim_build_entry_on and psim_build_local_on are
 * asked about a local's device, never about a folded-away peer. Issue 24
 * item 9: indexing every entry of every op took ops x devices entries
 * (10.2 GB for tp 8 x dp 12,500) although folding simulates one device. */
psim_status psim_build_index_devices(psim_build *b) {
  for (int32_t o = 0; o < b->m->n_ops; o++) {
    const psim_op_config *cfg = &b->s->ops[o];
    for (int32_t e = 0; cfg->n_devices > PSIM_BUILD_SCAN_DEVICES && e < cfg->n_devices; e++)
      if (b->simulated[cfg->devices[e]] &&
          psim_bcache_get(b->where, (uint64_t)(uint32_t)o, (uint64_t)(uint32_t)cfg->devices[e]) < 0)
        PSIM_CHECK(psim_bcache_put(b->where, (uint64_t)(uint32_t)o,
                                   (uint64_t)(uint32_t)cfg->devices[e], e));
    int32_t nk = b->loc_first[o + 1] - b->loc_first[o];
    for (int32_t k = 0; nk > PSIM_BUILD_SCAN_DEVICES && k < nk; k++) {
      uint64_t d = (uint64_t)(uint32_t)b->locals[b->loc_first[o] + k].device;
      if (psim_bcache_get(b->where, (uint64_t)(uint32_t)o | 1ull << 62, d) < 0)
        PSIM_CHECK(psim_bcache_put(b->where, (uint64_t)(uint32_t)o | 1ull << 62, d, k));
    }
  }
  return PSIM_OK;
}

/* ---- locals (which shards are simulated) -------------------------------- */

/* Whether every device of cfg is one of the stage's. mark (one byte per
 * cluster device, all zero) is scratch, left all zero. O(devices of the
 * stage); issue 9: was O(devices^2) per op, hours on 10^6 devices. */
static bool op_in_stage(const psim_op_config *cfg, const psim_stage *st, unsigned char *mark) {
  for (int32_t k = 0; k < st->n_devices; k++)
    mark[st->devices[k]] = 1;
  bool all_in = true;
  for (int32_t e = 0; e < cfg->n_devices && all_in; e++)
    all_in = mark[cfg->devices[e]] != 0;
  for (int32_t k = 0; k < st->n_devices; k++)
    mark[st->devices[k]] = 0;
  return all_in;
}

/* Folding applies when every op is spread evenly over all of its stage's
 * devices and the stages are equally large. */
static bool can_fold(const psim_build *b, unsigned char *mark) {
  const psim_strategy *s = b->s;
  const psim_model *m = b->m;
  if (!psim_build_may_fold(b)) /* issue 8 (ps.c): parameter servers, stragglers, mixed types */
    return false;
  for (int32_t o = 0; o < m->n_ops; o++) {
    const psim_op_config *cfg = &s->ops[o];
    const psim_stage *st = &s->stages[cfg->stage];
    if (cfg->n_devices != st->n_devices || st->n_devices != s->stages[0].n_devices)
      return false;
    for (int32_t i = 0; i < m->ops[o].n_dims; i++)
      if (psim_build_dim_size(b, m->ops[o].dims[i].dim) % cfg->degree[i] != 0)
        return false;
    if (!op_in_stage(cfg, st, mark))
      return false;
  }
  return true;
}

psim_status psim_build_choose_simulated(psim_build *b) {
  int32_t nd = b->c->n_devices;
  b->simulated = psim_calloc((size_t)nd, 1);
  if (!b->simulated)
    return psim_error(PSIM_ENOMEM, "out of memory choosing simulated devices");
  b->folded = b->o->fold && can_fold(b, b->simulated); /* simulated: zeroed scratch here */
  int32_t n_entries = b->s->n_stages * (b->s->virtual_stages > 0 ? b->s->virtual_stages : 1);
  if (b->folded) {
    for (int32_t v = 0; v < n_entries; v++)
      b->simulated[b->s->stages[v].devices[0]] = 1;
  } else {
    for (int32_t o = 0; o < b->m->n_ops; o++)
      for (int32_t e = 0; e < b->s->ops[o].n_devices; e++)
        b->simulated[b->s->ops[o].devices[e]] = 1;
  }
  for (int32_t d = 0; d < nd; d++)
    b->n_simulated += b->simulated[d];
  return PSIM_OK;
}

/* Bytes of the per-(op, weight, device) shares of the static memory model
 * (memory.c: one psim_weight_share per weight input of an op and device of
 * the op, simulated or not), counted twice: the vector grows by doubling.
 * Issue 24 item 9: 1.3 GB for GPT 1.3B on 100,000 devices, not in the
 * estimate before. */
static double weight_share_bytes(const psim_build *b) {
  double n = 0;
  for (int32_t o = 0; o < b->m->n_ops; o++) {
    const psim_op *op = &b->m->ops[o];
    for (int32_t i = 0; i < op->n_in; i++)
      if (b->m->tensors[op->in[i]].kind == PSIM_TENSOR_WEIGHT)
        n += b->s->ops[o].n_devices;
  }
  return 2 * n * (double)sizeof(psim_weight_share);
}

/* Refuses graphs over the task or memory limits (psim_sim_options.max_tasks,
 * .max_graph_bytes) from the shard count alone, before anything per shard is
 * allocated: shards x micro-batches x 3 passes compute tasks, each with its
 * share of communication and host tasks at PSIM_GRAPH_BYTES_PER_TASK, plus
 * the weight shares of the memory model. */
static psim_status check_limits(const psim_build *b, size_t shards) {
  double tasks = (double)shards * (double)b->n_micro * 3;
  if (b->o->max_tasks > 0 && tasks > (double)b->o->max_tasks)
    return psim_error(PSIM_ELIMIT,
                      "the task graph would hold about %.3g compute tasks, over the limit of "
                      "%lld (raise it with --max-tasks)",
                      tasks, (long long)b->o->max_tasks);
  double shares = weight_share_bytes(b), bytes = tasks * PSIM_GRAPH_BYTES_PER_TASK + shares;
  if (b->o->max_graph_bytes > 0 && bytes > (double)b->o->max_graph_bytes)
    return psim_error(PSIM_ELIMIT,
                      "the task graph would take about %.3g GB of memory (%.3g compute tasks, "
                      "%.3g GB for the per-device weight shares), over the limit of %.3g GB (raise "
                      "it with --max-memory)",
                      bytes / 1e9, tasks, shares / 1e9, (double)b->o->max_graph_bytes / 1e9);
  return PSIM_OK;
}

psim_status psim_build_make_locals(psim_build *b) {
  const psim_model *m = b->m;
  size_t total = 0;
  for (int32_t o = 0; o < m->n_ops; o++)
    for (int32_t e = 0; e < b->s->ops[o].n_devices; e++)
      total += b->simulated[b->s->ops[o].devices[e]];
  PSIM_CHECK(check_limits(b, total)); /* issue 9: before any per-shard allocation */
  b->loc_first = psim_calloc((size_t)m->n_ops + 1, sizeof *b->loc_first);
  b->locals = psim_calloc(total ? total : 1, sizeof *b->locals);
  if (!b->loc_first || !b->locals)
    return psim_error(PSIM_ENOMEM, "out of memory for %zu op shards", total);
  int32_t k = 0;
  for (int32_t o = 0; o < m->n_ops; o++) {
    const psim_op_config *cfg = &b->s->ops[o];
    b->loc_first[o] = k;
    for (int32_t e = 0; e < cfg->n_devices; e++) {
      if (!b->simulated[cfg->devices[e]])
        continue;
      b->locals[k].device = cfg->devices[e];
      b->locals[k].shard = e / cfg->replicas;
      b->locals[k].replica = e % cfg->replicas;
      k++;
    }
  }
  b->loc_first[m->n_ops] = k;
  size_t slots = (size_t)k * (size_t)b->n_micro;
  b->fwd = psim_malloc((slots ? slots : 1) * sizeof *b->fwd);
  b->bwd = psim_malloc((slots ? slots : 1) * sizeof *b->bwd);
  b->rec = psim_malloc((slots ? slots : 1) * sizeof *b->rec);
  if (!b->fwd || !b->bwd || !b->rec)
    return psim_error(PSIM_ENOMEM, "out of memory for %zu task slots", slots);
  memset(b->rec, 0xff, (slots ? slots : 1) * sizeof *b->rec);
  b->costs = psim_calloc((size_t)k * 3 + 1, sizeof *b->costs);
  if (!b->costs)
    return psim_error(PSIM_ENOMEM, "out of memory for %d op shards", (int)k);
  return psim_build_index_devices(b);
}
