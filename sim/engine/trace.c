/* trace.c - Chrome / Perfetto trace writer (trace.h).
 *
 * Events are built as cJSON objects in chunks of CHUNK_EVENTS, printed
 * unformatted and appended to one text buffer, so that a trace of millions of
 * events never holds millions of cJSON nodes at once. */
#include "sim/engine/trace.h"

#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "sim/core/alloc.h"
#include "sim/core/json.h"

#define CHUNK_EVENTS       20000
#define DEFAULT_MAX_FLOWS  100000
#define DEFAULT_MAX_EVENTS 4000000

typedef struct trace_writer {
  char *text;
  size_t len, cap;
  cJSON *chunk; /* array of pending events */
  int32_t in_chunk;
  size_t n_events;
  size_t n_x; /* X events so far (capped by max_events) */
} trace_writer;

static psim_status append(trace_writer *w, const char *s, size_t n) {
  PSIM_CHECK(PSIM_VEC_RESERVE(w->text, w->cap, w->len + n + 1));
  memcpy(w->text + w->len, s, n);
  w->len += n;
  w->text[w->len] = '\0';
  return PSIM_OK;
}

/* Prints the pending chunk without its brackets and starts a new one. */
static psim_status flush(trace_writer *w) {
  if (w->in_chunk == 0)
    return PSIM_OK;
  char *s = cJSON_PrintUnformatted(w->chunk);
  if (!s)
    return psim_error(PSIM_ENOMEM, "trace: out of memory printing events");
  size_t n = strlen(s);
  psim_status st = PSIM_OK;
  if (w->n_events > (size_t)w->in_chunk)
    st = append(w, ",", 1);
  if (st == PSIM_OK)
    st = append(w, s + 1, n - 2);
  cJSON_free(s);
  cJSON_Delete(w->chunk);
  w->chunk = cJSON_CreateArray();
  w->in_chunk = 0;
  if (st == PSIM_OK && !w->chunk)
    st = psim_error(PSIM_ENOMEM, "trace: out of memory");
  return st;
}

/* Takes ownership of ev (deleted on failure). */
static psim_status emit(trace_writer *w, cJSON *ev) {
  if (!ev)
    return psim_error(PSIM_ENOMEM, "trace: out of memory building an event");
  cJSON_AddItemToArray(w->chunk, ev);
  w->in_chunk++;
  w->n_events++;
  return w->in_chunk >= CHUNK_EVENTS ? flush(w) : PSIM_OK;
}

/* Adds a number / string under a constant key; records failure in *ok. */
static void num(cJSON *o, const char *k, double v, int *ok) {
  cJSON *x = cJSON_CreateNumber(v);
  *ok &= x != NULL;
  if (x)
    cJSON_AddItemToObjectCS(o, k, x);
}

static void str(cJSON *o, const char *k, const char *v, int *ok) {
  cJSON *x = cJSON_CreateString(v);
  *ok &= x != NULL;
  if (x)
    cJSON_AddItemToObjectCS(o, k, x);
}

/* A new event object with ph, pid, tid (and name when given); NULL on OOM. */
static cJSON *event(const char *ph, int32_t pid, int32_t tid, const char *name) {
  cJSON *e = cJSON_CreateObject();
  int ok = e != NULL;
  if (!e)
    return NULL;
  if (name)
    str(e, "name", name, &ok);
  str(e, "ph", ph, &ok);
  num(e, "pid", pid, &ok);
  num(e, "tid", tid, &ok);
  if (!ok) {
    cJSON_Delete(e);
    return NULL;
  }
  return e;
}

/* ---- names ---- */

static const char *const pass_names[PSIM_TP_COUNT] = {"fwd",     "bwd",     "recompute", "update",
                                                      "comm-tp", "comm-pp", "comm-dp",   "comm"};
static const char *const kind_names[] = {"compute", "transfer", "collective", "barrier"};

void psim_trace_default_task_name(void *ctx, const psim_taskgraph *g, int32_t task, char *buf,
                                  size_t size) {
  (void)ctx;
  const psim_task_info *in = &g->info[task];
  const char *pass = in->pass < PSIM_TP_COUNT ? pass_names[in->pass] : "task";
  snprintf(buf, size, "%s op%d s%d mb%d", pass, in->op, in->shard, in->micro);
}

void psim_trace_names_init(psim_trace_names *n, int32_t n_devices, int32_t n_links) {
  memset(n, 0, sizeof *n);
  n->n_devices = n_devices;
  n->n_links = n_links;
  n->max_flows = DEFAULT_MAX_FLOWS;
  n->max_events = DEFAULT_MAX_EVENTS;
}

static void free_names(char **a, int32_t n) {
  for (int32_t i = 0; a && i < n; i++)
    psim_free(a[i]);
  psim_free(a);
}

void psim_trace_names_destroy(psim_trace_names *n) {
  free_names(n->owned_device_names_, n->n_devices);
  free_names(n->owned_link_names_, n->n_links);
  psim_trace_names_init(n, 0, 0);
}

/* "src->dst kind" for link l. */
static char *link_label(const psim_cluster *c, int32_t l) {
  const psim_link *k = &c->links[l];
  const char *a = c->vertex_names ? c->vertex_names[k->src] : "?";
  const char *b = c->vertex_names ? c->vertex_names[k->dst] : "?";
  size_t n = strlen(a) + strlen(b) + 32;
  char *s = psim_malloc(n);
  if (s)
    snprintf(s, n, "%s->%s %s", a, b, psim_link_kind_name(k->kind));
  return s;
}

psim_status psim_trace_names_from_cluster(psim_trace_names *n, const psim_cluster *c) {
  psim_trace_names_init(n, c->n_devices, c->n_links);
  n->owned_device_names_ = psim_calloc((size_t)c->n_devices + 1, sizeof(char *));
  n->owned_link_names_ = psim_calloc((size_t)c->n_links + 1, sizeof(char *));
  int ok = n->owned_device_names_ && n->owned_link_names_;
  for (int32_t i = 0; ok && i < c->n_devices; i++)
    ok = (n->owned_device_names_[i] =
              psim_strdup(c->devices[i].name ? c->devices[i].name : "device")) != NULL;
  for (int32_t l = 0; ok && l < c->n_links; l++)
    ok = (n->owned_link_names_[l] = link_label(c, l)) != NULL;
  if (!ok) {
    psim_trace_names_destroy(n);
    return psim_error(PSIM_ENOMEM, "trace: out of memory naming tracks");
  }
  n->device_names = (const char *const *)n->owned_device_names_;
  n->link_names = (const char *const *)n->owned_link_names_;
  return PSIM_OK;
}

/* ---- tracks ---- */

/* pid/tid of resource res. */
static void track(const psim_trace_names *n, int32_t res, int32_t *pid, int32_t *tid) {
  int32_t hosts = 2 * n->n_devices + (n->n_links > 0 ? n->n_links : 0);
  if (res < 2 * n->n_devices) {
    *pid = res / 2;
    *tid = res % 2;
  } else if (res >= hosts) { /* psim_res_host: the thread issuing the kernels */
    *pid = res - hosts;
    *tid = 2;
  } else {
    *pid = n->n_devices;
    *tid = res - 2 * n->n_devices;
  }
}

static psim_status meta(trace_writer *w, const char *what, int32_t pid, int32_t tid,
                        const char *name) {
  cJSON *e = event("M", pid, tid, what);
  cJSON *args = e ? cJSON_CreateObject() : NULL;
  int ok = args != NULL;
  if (args) {
    str(args, "name", name, &ok);
    cJSON_AddItemToObjectCS(e, "args", args);
  }
  if (!ok) {
    cJSON_Delete(e);
    e = NULL;
  }
  return emit(w, e);
}

static psim_status sort_index(trace_writer *w, int32_t pid) {
  cJSON *e = event("M", pid, 0, "process_sort_index");
  cJSON *args = e ? cJSON_CreateObject() : NULL;
  int ok = args != NULL;
  if (args) {
    num(args, "sort_index", pid, &ok);
    cJSON_AddItemToObjectCS(e, "args", args);
  }
  if (!ok) {
    cJSON_Delete(e);
    e = NULL;
  }
  return emit(w, e);
}

static psim_status device_meta(trace_writer *w, const psim_trace_names *n, int32_t d) {
  char buf[64];
  const char *name = n->device_names ? n->device_names[d] : NULL;
  if (!name) {
    snprintf(buf, sizeof buf, "device %d", d);
    name = buf;
  }
  PSIM_CHECK(meta(w, "process_name", d, 0, name));
  PSIM_CHECK(sort_index(w, d));
  PSIM_CHECK(meta(w, "thread_name", d, 0, "compute"));
  PSIM_CHECK(meta(w, "thread_name", d, 2, "host"));
  return meta(w, "thread_name", d, 1, "comm");
}

/* Metadata for every device and for each link that carries a task. */
static psim_status all_meta(trace_writer *w, const psim_taskgraph *g, const psim_trace_names *n) {
  for (int32_t d = 0; d < n->n_devices; d++)
    PSIM_CHECK(device_meta(w, n, d));
  if (n->n_links <= 0)
    return PSIM_OK;
  char *used = psim_calloc((size_t)n->n_links, 1);
  if (!used)
    return psim_error(PSIM_ENOMEM, "trace: out of memory");
  for (size_t k = 0; k < g->n_res; k++) {
    int32_t l = g->res[k] - 2 * n->n_devices;
    if (l >= 0 && l < n->n_links)
      used[l] = 1;
  }
  psim_status s = meta(w, "process_name", n->n_devices, 0, "links (one track per direction)");
  if (s == PSIM_OK)
    s = sort_index(w, n->n_devices);
  char buf[64];
  for (int32_t l = 0; l < n->n_links && s == PSIM_OK; l++) {
    if (!used[l])
      continue;
    snprintf(buf, sizeof buf, "link %d", l);
    s = meta(w, "thread_name", n->n_devices, l, n->link_names ? n->link_names[l] : buf);
  }
  psim_free(used);
  return s;
}

/* ---- events ---- */

/* One complete ("X") event of task t on resource res, [start_s, end_s),
 * counted against max_events (over it: nothing is emitted). */
static psim_status x_event(trace_writer *w, const psim_taskgraph *g, const psim_trace_names *n,
                           int32_t t, int32_t res, const char *name, const char *cat,
                           double start_s, double end_s) {
  if (w->n_x >= n->max_events)
    return PSIM_OK;
  w->n_x++;
  int32_t pid, tid;
  track(n, res, &pid, &tid);
  cJSON *e = event("X", pid, tid, name);
  cJSON *args = e ? cJSON_CreateObject() : NULL;
  int ok = args != NULL;
  if (args) {
    cJSON_AddItemToObjectCS(e, "args", args);
    str(e, "cat", cat, &ok);
    num(e, "ts", start_s * 1e6, &ok);
    num(e, "dur", (end_s - start_s) * 1e6, &ok);
    num(args, "task", t, &ok);
    num(args, "stage", g->info[t].stage, &ok);
  }
  if (!ok) {
    cJSON_Delete(e);
    e = NULL;
  }
  return emit(w, e);
}

/* Task t on every resource it holds, then the host issuing it (psim_task_issue:
 * on the device's host thread, ending when the issue ended) when the schedule
 * recorded that. */
static psim_status task_events(trace_writer *w, const psim_taskgraph *g,
                               const psim_schedule_result *r, const psim_trace_names *n,
                               int32_t t) {
  char name[256], issue[300];
  (n->task_name ? n->task_name : psim_trace_default_task_name)(n->ctx, g, t, name, sizeof name);
  const psim_task_info *in = &g->info[t];
  const char *cat = in->kind < 4 ? kind_names[in->kind] : "task";
  for (int32_t k = g->res_first[t]; k < g->res_first[t + 1]; k++)
    PSIM_CHECK(x_event(w, g, n, t, g->res[k], name, cat, r->start_s[t], r->end_s[t]));
  if (!g->issue || g->issue[t].res < 0 || !r->issue_end_s)
    return PSIM_OK;
  snprintf(issue, sizeof issue, "issue %s", name);
  double end = r->issue_end_s[t];
  return x_event(w, g, n, t, g->issue[t].res, issue, "host", end - g->issue[t].issue_s, end);
}

/* One flow arrow from the end of u to the start of v (id k). */
static psim_status flow(trace_writer *w, const psim_taskgraph *g, const psim_schedule_result *r,
                        const psim_trace_names *n, int32_t u, int32_t v, size_t k) {
  for (int side = 0; side < 2; side++) {
    int32_t t = side ? v : u, pid, tid;
    track(n, g->res[g->res_first[t]], &pid, &tid);
    cJSON *e = event(side ? "f" : "s", pid, tid, "dep");
    int ok = e != NULL;
    if (e) {
      str(e, "cat", "dep", &ok);
      num(e, "id", (double)k, &ok);
      /* Both ends bind to their enclosing slice (Perfetto's flow v1 rule), so the
       * start is placed inside u (its midpoint), not on its exclusive end (issue 7). */
      num(e, "ts", (side ? r->start_s[v] : 0.5 * (r->start_s[u] + r->end_s[u])) * 1e6, &ok);
      str(e, "bp", "e", &ok);
    }
    if (!ok) {
      cJSON_Delete(e);
      e = NULL;
    }
    PSIM_CHECK(emit(w, e));
  }
  return PSIM_OK;
}

/* Flows for edges between tasks with tracks on different devices. */
static psim_status flows(trace_writer *w, const psim_taskgraph *g, const psim_schedule_result *r,
                         const psim_trace_names *n) {
  size_t k = 0;
  for (size_t e = 0; e < g->n_edges && k < n->max_flows; e++) {
    int32_t u = g->edge_from[e], v = g->edge_to[e];
    if (g->res_first[u] == g->res_first[u + 1] || g->res_first[v] == g->res_first[v + 1])
      continue;
    if (g->info[u].device == g->info[v].device)
      continue;
    PSIM_CHECK(flow(w, g, r, n, u, v, k++));
  }
  return PSIM_OK;
}

static psim_status counters(trace_writer *w, const psim_trace_names *n,
                            const psim_trace_counter *mem, size_t n_mem) {
  for (size_t i = 0; i < n_mem; i++) {
    if (mem[i].device < 0 || mem[i].device >= n->n_devices)
      return psim_error(PSIM_EINPUT, "trace: memory sample %zu names device %d of %d", i,
                        mem[i].device, n->n_devices);
    cJSON *e = event("C", mem[i].device, 0, "memory");
    cJSON *args = e ? cJSON_CreateObject() : NULL;
    int ok = args != NULL;
    if (args) {
      cJSON_AddItemToObjectCS(e, "args", args);
      num(e, "ts", mem[i].time_s * 1e6, &ok);
      num(args, "bytes", mem[i].bytes, &ok);
    }
    if (!ok) {
      cJSON_Delete(e);
      e = NULL;
    }
    PSIM_CHECK(emit(w, e));
  }
  return PSIM_OK;
}

static psim_status check_args(const psim_taskgraph *g, const psim_schedule_result *r,
                              const psim_trace_names *n) {
  if (!r->start_s || r->n_tasks != g->n_tasks)
    return psim_error(PSIM_EFAILED, "trace: the schedule has %d tasks, the graph %d", r->n_tasks,
                      g->n_tasks);
  if (g->n_resources > 3 * n->n_devices + (n->n_links > 0 ? n->n_links : 0))
    return psim_error(PSIM_EFAILED, "trace: %d resources but %d devices and %d links named",
                      g->n_resources, n->n_devices, n->n_links);
  return PSIM_OK;
}

static psim_status write_body(trace_writer *w, const psim_taskgraph *g,
                              const psim_schedule_result *r, const psim_trace_names *n,
                              const psim_trace_counter *mem, size_t n_mem) {
  static const char head[] = "{\"traceEvents\":[", tail[] = "],\"displayTimeUnit\":\"ms\"}\n";
  PSIM_CHECK(append(w, head, sizeof head - 1));
  PSIM_CHECK(all_meta(w, g, n));
  for (int32_t t = 0; t < g->n_tasks; t++)
    PSIM_CHECK(task_events(w, g, r, n, t));
  PSIM_CHECK(flows(w, g, r, n));
  PSIM_CHECK(counters(w, n, mem, n_mem));
  PSIM_CHECK(flush(w));
  return append(w, tail, sizeof tail - 1);
}

psim_status psim_trace_write(const char *path, const psim_taskgraph *g,
                             const psim_schedule_result *r, const psim_trace_names *names,
                             const psim_trace_counter *mem, size_t n_mem) {
  PSIM_CHECK(check_args(g, r, names));
  trace_writer w = {NULL, 0, 0, cJSON_CreateArray(), 0, 0, 0};
  psim_status s = w.chunk ? write_body(&w, g, r, names, mem, n_mem)
                          : psim_error(PSIM_ENOMEM, "trace: out of memory");
  if (s == PSIM_OK && strcmp(path, "-") == 0) {
    if (fwrite(w.text, 1, w.len, stdout) != w.len)
      s = psim_error(PSIM_EIO, "trace: writing to standard output failed");
  } else if (s == PSIM_OK) {
    s = psim_file_write_atomic(path, w.text, w.len);
  }
  cJSON_Delete(w.chunk);
  psim_free(w.text);
  return s;
}
