/* trace.h - Chrome / Perfetto trace of a simulated schedule.
 *
 * Writes the JSON trace-event format ({"traceEvents": [...]}) that
 * chrome://tracing and ui.perfetto.dev load:
 *  - one process per device (pid = device index) with two threads: its
 *    compute stream (tid 0) and its communication engine (tid 1);
 *  - one process "links" (pid = n_devices) with a thread per directed link
 *    that carries traffic (tid = link index), named "src->dst kind";
 *  - an "X" (complete) event per task and resource it holds, ts and dur in
 *    microseconds, named by the caller's callback (op, shard, micro-batch,
 *    pass) or from the task's info;
 *  - "s"/"f" flow arrows for dependencies between tasks on different devices
 *    (at most max_flows of them);
 *  - "C" counter events "memory" per device from a list of samples;
 *  - process_name / thread_name / process_sort_index metadata.
 * Resource ids follow taskgraph.h (psim_res_compute / _comm / _link). The file
 * is written atomically; events are serialised with cJSON in chunks so memory
 * stays bounded by the chunk, not the trace. */
#ifndef PSIM_TRACE_H
#define PSIM_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "sim/core/status.h"
#include "sim/engine/taskgraph.h"
#include "sim/ir/cluster.h"

/* Writes the display name of task into buf (size bytes, NUL-terminated). */
typedef void (*psim_trace_task_name_fn)(void *ctx, const psim_taskgraph *g, int32_t task, char *buf,
                                        size_t size);

typedef struct psim_trace_names {
  int32_t n_devices;               /* resources 0 .. 2 n_devices - 1 are device streams */
  const char *const *device_names; /* n_devices names, or NULL for "device N" */
  int32_t n_links;
  const char *const *link_names;     /* n_links names, or NULL for "link N" */
  psim_trace_task_name_fn task_name; /* NULL: "<pass> op<op> s<shard> mb<micro>" */
  void *ctx;                         /* passed to task_name */
  size_t max_flows;                  /* flow arrows at most; default 100000 */
  size_t max_events;                 /* X events at most (later ones dropped); default 4000000 */
  /* owned copies when filled by psim_trace_names_from_cluster */
  char **owned_device_names_, **owned_link_names_;
} psim_trace_names;

/* One sample of a device's memory in use. */
typedef struct psim_trace_counter {
  int32_t device;
  double time_s; /* s */
  double bytes;  /* bytes in use from time_s on */
} psim_trace_counter;

/* Defaults: no names (generic ones are used), default caps. */
void psim_trace_names_init(psim_trace_names *n, int32_t n_devices, int32_t n_links);
/* Device names and "src->dst kind" link names from the cluster (owned). */
psim_status psim_trace_names_from_cluster(psim_trace_names *n, const psim_cluster *c);
void psim_trace_names_destroy(psim_trace_names *n);

/* Default task name into buf: pass, op, shard and micro-batch from info. */
void psim_trace_default_task_name(void *ctx, const psim_taskgraph *g, int32_t task, char *buf,
                                  size_t size);

/* Writes the trace of schedule r of graph g to path ("-" = stdout). mem may
 * be NULL (n_mem 0). O(tasks x resources per task + edges + n_mem) time;
 * memory O(chunk + output size). */
psim_status psim_trace_write(const char *path, const psim_taskgraph *g,
                             const psim_schedule_result *r, const psim_trace_names *names,
                             const psim_trace_counter *mem, size_t n_mem);

#endif
