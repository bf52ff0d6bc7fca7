/* schedule.c - the rules of the pipeline schedules: how many chunks each runs, how many
 * micro-batches, where its chunks are placed. Their issue orders are the builder's
 * (sim/builder/schedules.c). Sources: Megatron-LM's interleaved schedule
 * (megatron/core/pipeline_parallel/schedules.py; arguments.py: num_microbatches %
 * pipeline_model_parallel_size == 0) and torchtitan's schedules from
 * torch.distributed.pipelining (torch/distributed/pipelining/schedules.py and _utils.py at
 * pytorch 00722e648b: ScheduleLoopedBFS, ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble,
 * ScheduleDualPipeV). */
#include <stddef.h>

#include "sim/strategy/strategy.h"

const char *psim_schedule_chunks_rule(psim_schedule s, int32_t v) {
  switch (s) {
  case PSIM_SCHED_GPIPE:
  case PSIM_SCHED_1F1B:
    return v == 1 ? NULL
                  : "runs one chunk per device; virtual stages need 'interleaved' (or "
                    "looped_bfs, interleaved_zb, zbv)";
  case PSIM_SCHED_INTERLEAVED: return v > 1 ? NULL : "needs virtual_stages > 1";
  case PSIM_SCHED_ZBV: /* ScheduleZBVZeroBubble.__init__: "ZBV requires exactly 2 stages" */
  case PSIM_SCHED_DUALPIPEV:
    return v == 2 ? NULL : "needs exactly 2 chunks per device (virtual_stages = 2)";
  case PSIM_SCHED_LOOPED_BFS:
  case PSIM_SCHED_INTERLEAVED_ZB: return v >= 1 ? NULL : "needs virtual_stages >= 1";
  }
  return "is unknown";
}

psim_schedule psim_schedule_default(int32_t v) {
  return v > 1 ? PSIM_SCHED_INTERLEAVED : PSIM_SCHED_1F1B;
}

bool psim_schedule_splits_backward(psim_schedule s) {
  return s == PSIM_SCHED_INTERLEAVED_ZB || s == PSIM_SCHED_ZBV || s == PSIM_SCHED_DUALPIPEV;
}

bool psim_schedule_v_shaped(psim_schedule s) {
  return s == PSIM_SCHED_ZBV || s == PSIM_SCHED_DUALPIPEV;
}

const char *psim_schedule_micro_rule(psim_schedule s, int32_t n_micro, int32_t pp) {
  if (s == PSIM_SCHED_INTERLEAVED)
    return n_micro % pp == 0 ? NULL
                             : "interleaved needs the micro-batches to be a multiple of pp "
                               "(Megatron-LM's rule)";
  if (s == PSIM_SCHED_INTERLEAVED_ZB) { /* number_of_rounds = max(1, n_micro // pp) */
    int32_t rounds = n_micro / pp > 1 ? n_micro / pp : 1;
    return n_micro % rounds == 0 ? NULL
                                 : "interleaved_zb needs the micro-batches to be a multiple of "
                                   "max(1, micro-batches / pp) (torchtitan's rule)";
  }
  if (s == PSIM_SCHED_DUALPIPEV) /* ScheduleDualPipeV.__init__: n_microbatches >= num_stages */
    return n_micro >= 2 * pp ? NULL
                             : "dualpipev needs at least as many micro-batches as stages (2 pp, "
                               "torchtitan's rule)";
  return NULL;
}

int32_t psim_schedule_chunk_rank(psim_schedule s, int32_t pp, int32_t c) {
  if (psim_schedule_v_shaped(s))
    return c < pp ? c : 2 * pp - 1 - c;
  return c % pp;
}

int32_t psim_schedule_rank_chunk(psim_schedule s, int32_t pp, int32_t r, int32_t j) {
  if (psim_schedule_v_shaped(s))
    return j == 0 ? r : 2 * pp - 1 - r;
  return j * pp + r;
}
