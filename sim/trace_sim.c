/* trace_sim.c - names and counters for the trace of a simulated iteration. */
#include "sim/trace_sim.h"

#include <stdio.h>

typedef struct name_ctx {
  const psim_model *m;
} name_ctx;

static const char *pass_name(uint8_t pass) {
  static const char *const names[] = {"fwd",     "bwd",     "recompute", "update",
                                      "comm tp", "comm pp", "comm dp",   "comm"};
  return pass < PSIM_TP_COUNT ? names[pass] : "task";
}

/* "layer.3.fc1 fwd shard 2 mb 5", "allreduce comm dp", "issue layer.3.fc1". */
static void task_name(void *ctx, const psim_taskgraph *g, int32_t task, char *buf, size_t size) {
  const name_ctx *n = ctx;
  const psim_task_info *in = &g->info[task];
  const char *op = in->op >= 0 && in->op < n->m->n_ops ? n->m->ops[in->op].name : "iteration";
  const char *what = in->kind == PSIM_TASK_HOST         ? "issue "
                     : in->kind == PSIM_TASK_COLLECTIVE ? "collective "
                     : in->kind == PSIM_TASK_TRANSFER   ? "send "
                                                        : "";
  if (in->micro >= 0)
    snprintf(buf, size, "%s%s %s shard %d mb %d", what, op, pass_name(in->pass), in->shard,
             in->micro);
  else
    snprintf(buf, size, "%s%s %s", what, op, pass_name(in->pass));
}

psim_status psim_trace_write_sim(const char *path, const psim_model *m, const psim_cluster *c,
                                 const psim_sim_result *r) {
  if (!r->graph || !r->schedule)
    return psim_error(PSIM_EFAILED, "%s: the simulation kept no task graph to trace", path);
  psim_trace_names names;
  PSIM_CHECK(psim_trace_names_from_cluster(&names, c));
  name_ctx ctx = {m};
  names.task_name = task_name;
  names.ctx = &ctx;
  psim_status s =
      psim_trace_write(path, r->graph, r->schedule, &names, r->mem_samples, r->n_mem_samples);
  psim_trace_names_destroy(&names);
  return s;
}
