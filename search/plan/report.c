/* report.c - the plan report: one self-contained HTML page (report.h).
 *
 * The timeline draws one <rect class="task"> per simulated task (on the row
 * of its first resource; barriers on a "sync" row) and a lighter
 * <rect class="task-extra"> on every further resource it holds (the links
 * of a transfer). Times in the SVG are microseconds; zooming changes the
 * viewBox, so nothing is re-rendered. */
#include "search/plan/report.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/strbuf.h"
#include "sim/core/units.h"

void psim_report_options_init(psim_report_options *o) {
  o->max_tasks = 20000;
  o->max_ops = 5000;
  o->title = NULL;
}

/* ---- text builder ---- */

typedef psim_sb hbuf;
#define out psim_sb_printf

/* HTML-escaped text. */
static void esc(hbuf *b, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
    case '<': out(b, "&lt;"); break;
    case '>': out(b, "&gt;"); break;
    case '&': out(b, "&amp;"); break;
    case '"': out(b, "&quot;"); break;
    default: out(b, "%c", *s);
    }
  }
}

static const char *fmt_unit(double v, psim_unit_kind k, char *buf, int size) {
  return psim_units_format(v, k, buf, size);
}

/* ---- page frame ---- */

static const char style[] =
    "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}"
    "h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}"
    "table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #eee;"
    "text-align:left;font-variant-numeric:tabular-nums}"
    ".note{color:#666;font-size:12px}.tlwrap{display:flex;border:1px solid #ccc}"
    ".labels{flex:none;width:230px;overflow:hidden}.plot{flex:auto;overflow:hidden}"
    "svg text{font:11px system-ui,sans-serif}.task-extra{opacity:.45}"
    ".legend span{display:inline-block;margin-right:12px}"
    ".legend i{display:inline-block;width:10px;height:10px;margin-right:4px}"
    "button{margin-right:4px}.ops{max-height:420px;overflow:auto;display:block}";

/* Errors and console.error calls are counted on <html data-errors>. */
static const char error_script[] =
    "(function(){var n=0;function mark(){document.documentElement.setAttribute("
    "'data-errors',String(n));}mark();window.addEventListener('error',function(){n++;mark();});"
    "var ce=console.error;console.error=function(){n++;mark();"
    "return ce.apply(console,arguments);};})();";

static const char *const pass_names[PSIM_TP_COUNT] = {"fwd",     "bwd",     "recompute", "update",
                                                      "comm-tp", "comm-pp", "comm-dp",   "comm"};
static const char *const pass_colors[PSIM_TP_COUNT] = {"#4c78a8", "#f58518", "#e45756", "#72b7b2",
                                                       "#54a24b", "#eeca3b", "#b279a2", "#9d755d"};

static void head(hbuf *b, const psim_plan_doc *d, const psim_report_options *o) {
  out(b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>");
  if (o->title)
    esc(b, o->title);
  else {
    out(b, "plansim plan: ");
    esc(b, d->model.name);
    out(b, " on ");
    esc(b, d->cluster.name);
  }
  out(b, "</title>\n<style>%s", style);
  for (int p = 0; p < PSIM_TP_COUNT; p++)
    out(b, ".k-%s{fill:%s}", pass_names[p], pass_colors[p]);
  out(b, ".k-host{fill:#bab0ac}.k-sync{fill:#333}</style>\n<script>%s</script>\n</head>\n<body>\n",
      error_script);
}

/* ---- summary ---- */

static const cJSON *jget(const cJSON *o, const char *path) {
  char key[64];
  while (o && *path) {
    const char *dot = strchr(path, '.');
    size_t n = dot ? (size_t)(dot - path) : strlen(path);
    snprintf(key, sizeof key, "%.*s", (int)n, path);
    o = cJSON_GetObjectItemCaseSensitive(o, key);
    path += n + (dot ? 1 : 0);
  }
  return o;
}

static void row(hbuf *b, const char *label, const char *value) {
  out(b, "<tr><th>%s</th><td>", label);
  esc(b, value);
  out(b, "</td></tr>\n");
}

static void summary(hbuf *b, const psim_plan_doc *d, const psim_sim_result *r) {
  char v[256], u1[64], u2[64];
  out(b, "<h1>Plan: ");
  esc(b, d->model.name);
  out(b, " on ");
  esc(b, d->cluster.name);
  out(b, "</h1>\n<table id=\"summary\">\n");
  const cJSON *desc = jget(d->root, "search.plan"), *searcher = jget(d->root, "search.searcher");
  if (cJSON_IsString(desc))
    row(b, "strategy", desc->valuestring);
  snprintf(v, sizeof v, "%d devices (%d simulated%s)", d->cluster.n_devices, r->simulated_devices,
           r->folded ? ", symmetric devices folded" : "");
  row(b, "cluster", v);
  row(b, "iteration time", fmt_unit(r->iteration_time_s, PSIM_UNIT_TIME, u1, sizeof u1));
  snprintf(v, sizeof v, "%.4g samples/s, %.4g tokens/s", r->samples_per_s, r->tokens_per_s);
  row(b, "throughput", v);
  snprintf(v, sizeof v, "MFU %.2f%%, HFU %.2f%%", 100 * r->mfu, 100 * r->hfu);
  row(b, "utilisation", v);
  snprintf(v, sizeof v, "%s of %s on device %d: %s",
           fmt_unit(r->peak_memory_bytes, PSIM_UNIT_BYTES, u1, sizeof u1),
           fmt_unit(r->capacity_bytes, PSIM_UNIT_BYTES, u2, sizeof u2), r->peak_device,
           r->fits ? "fits" : "does NOT fit");
  row(b, "peak memory", v);
  double comm = 0;
  for (int k = 0; k < PSIM_COMM_KIND_COUNT; k++)
    comm += r->exposed_comm_s[k];
  snprintf(v, sizeof v, "compute %s, exposed communication %.4g ms, pipeline bubble %.4g ms",
           fmt_unit(r->compute_s, PSIM_UNIT_TIME, u1, sizeof u1), 1e3 * comm, 1e3 * r->bubble_s);
  row(b, "time breakdown", v);
  snprintf(v, sizeof v, "%d stages x %d virtual, %d micro-batches of %lld samples, %s schedule",
           d->strategy.n_stages, d->strategy.virtual_stages, d->strategy.n_micro,
           (long long)d->strategy.micro_batch, psim_schedule_name(d->strategy.schedule));
  row(b, "pipeline", v);
  snprintf(v, sizeof v, "ZeRO %d, recompute %s, sequence parallel %s", d->strategy.zero_stage,
           psim_recompute_name(d->strategy.recompute),
           d->strategy.sequence_parallel ? "on" : "off");
  row(b, "memory options", v);
  if (cJSON_IsString(searcher)) {
    const cJSON *ev = jget(d->root, "search.evaluations"), *w = jget(d->root, "search.wall_s");
    snprintf(v, sizeof v, "%s, %.0f evaluations in %.3g s", searcher->valuestring,
             cJSON_IsNumber(ev) ? ev->valuedouble : 0, cJSON_IsNumber(w) ? w->valuedouble : 0);
    row(b, "search", v);
  }
  snprintf(v, sizeof v, "%lld tasks, %lld edges", (long long)r->n_tasks, (long long)r->n_edges);
  row(b, "simulation", v);
  out(b, "</table>\n");
}

/* ---- timeline ---- */

enum { ROW_PX = 14 };

typedef struct tl_rows {
  int32_t *row_of_res; /* resource -> row or -1 */
  int32_t n_rows;
  int32_t sync_row; /* barriers, or -1 */
} tl_rows;

static void res_label(const psim_plan_doc *d, int32_t res, char *buf, size_t size) {
  const psim_cluster *c = &d->cluster;
  int32_t nd = c->n_devices, nl = c->n_links;
  if (res < 2 * nd)
    snprintf(buf, size, "%s %s", c->devices[res / 2].name, res % 2 ? "comm" : "compute");
  else if (res < 2 * nd + nl) {
    const psim_link *l = &c->links[res - 2 * nd];
    snprintf(buf, size, "%s->%s %s", c->vertex_names[l->src], c->vertex_names[l->dst],
             psim_link_kind_name(l->kind));
  } else
    snprintf(buf, size, "%s host", c->devices[(res - 2 * nd - nl) % (nd > 0 ? nd : 1)].name);
}

/* The host resource that issued task t, when the schedule recorded the
 * issue (psim_schedule_result.record_issue); else -1. */
static int32_t issuing_host(const psim_taskgraph *g, const psim_schedule_result *s, int32_t t) {
  return s->issue_end_s && g->issue && g->issue[t].res >= 0 ? g->issue[t].res : -1;
}

/* Rows: devices in order (compute, comm, host), then links, then sync. */
static psim_status make_rows(const psim_taskgraph *g, const psim_schedule_result *s, int32_t drawn,
                             tl_rows *rows) {
  rows->row_of_res = psim_malloc(sizeof(int32_t) * (size_t)(g->n_resources + 1));
  if (!rows->row_of_res)
    return psim_error(PSIM_ENOMEM, "report: out of memory");
  char *used = psim_calloc((size_t)g->n_resources + 1, 1);
  if (!used) {
    psim_free(rows->row_of_res);
    rows->row_of_res = NULL;
    return psim_error(PSIM_ENOMEM, "report: out of memory");
  }
  bool barriers = false;
  for (int32_t t = 0; t < drawn; t++) {
    barriers = barriers || g->res_first[t] == g->res_first[t + 1];
    for (int32_t k = g->res_first[t]; k < g->res_first[t + 1]; k++)
      used[g->res[k]] = 1;
    if (issuing_host(g, s, t) >= 0)
      used[issuing_host(g, s, t)] = 1;
  }
  rows->n_rows = 0;
  for (int32_t res = 0; res < g->n_resources; res++)
    rows->row_of_res[res] = used[res] ? rows->n_rows++ : -1;
  rows->sync_row = barriers ? rows->n_rows++ : -1;
  psim_free(used);
  return PSIM_OK;
}

static int pass_of(const psim_task_info *in) {
  return in->pass < PSIM_TP_COUNT ? in->pass : PSIM_TP_COMM_OTHER;
}

static void task_name(const psim_plan_doc *d, const psim_task_info *in, char *buf, size_t size) {
  const char *op = in->op >= 0 && in->op < d->model.n_ops ? d->model.ops[in->op].name : "iteration";
  const char *what = in->kind == PSIM_TASK_HOST         ? "issue "
                     : in->kind == PSIM_TASK_COLLECTIVE ? "collective "
                     : in->kind == PSIM_TASK_TRANSFER   ? "send "
                     : in->kind == PSIM_TASK_BARRIER    ? "barrier "
                                                        : "";
  if (in->micro >= 0)
    snprintf(buf, size, "%s%s %s shard %d mb %d", what, op, pass_names[pass_of(in)], in->shard,
             in->micro);
  else
    snprintf(buf, size, "%s%s %s", what, op, pass_names[pass_of(in)]);
}

/* One bar of task t on row rowi over [start_s, end_s); zero-length tasks
 * (barriers) get a sliver so that they stay visible. Only a task's primary
 * bar has class "task" (one per task: what the page counts). title_prefix:
 * NULL for no tooltip (further links of a transfer), else put before the
 * task's name in it. */
static void rect(hbuf *b, const psim_plan_doc *d, const psim_taskgraph *g,
                 const psim_schedule_result *s, int32_t t, int32_t rowi, const char *cls,
                 double start_s, double end_s, bool primary, const char *title_prefix) {
  double w = fmax((end_s - start_s) * 1e6, 5e-4 * s->makespan_s * 1e6);
  out(b, "<rect class=\"%s k-%s\" x=\"%.6g\" y=\"%d\" width=\"%.6g\" height=\"%d\" data-t=\"%d\">",
      primary ? "task" : "task-extra", cls, start_s * 1e6, rowi * ROW_PX + 2, w, ROW_PX - 4, t);
  if (title_prefix) {
    char name[256], u[64];
    task_name(d, &g->info[t], name, sizeof name);
    out(b, "<title>%s", title_prefix);
    esc(b, name);
    out(b, ": %s at %.6g ms</title>", fmt_unit(end_s - start_s, PSIM_UNIT_TIME, u, sizeof u),
        start_s * 1e3);
  }
  out(b, "</rect>\n");
}

/* Task t on row rowi: the primary bar (class "task", with a tooltip) on its
 * first resource, lighter ones on the others. */
static void bar(hbuf *b, const psim_plan_doc *d, const psim_taskgraph *g,
                const psim_schedule_result *s, int32_t t, int32_t rowi, bool primary) {
  const psim_task_info *in = &g->info[t];
  const char *cls = in->kind == PSIM_TASK_HOST      ? "host"
                    : in->kind == PSIM_TASK_BARRIER ? "sync"
                                                    : pass_names[pass_of(in)];
  rect(b, d, g, s, t, rowi, cls, s->start_s[t], s->end_s[t], primary, primary ? "" : NULL);
}

/* The host issuing task t: a bar ending when the issue ended. */
static void issue_bar(hbuf *b, const psim_plan_doc *d, const psim_taskgraph *g,
                      const psim_schedule_result *s, int32_t t, int32_t rowi) {
  double end = s->issue_end_s[t];
  rect(b, d, g, s, t, rowi, "host", end - g->issue[t].issue_s, end, false, "issue ");
}

static void legend(hbuf *b) {
  out(b, "<p class=\"legend\">");
  for (int p = 0; p < PSIM_TP_COUNT; p++)
    out(b, "<span><i class=\"k\" style=\"background:%s\"></i>%s</span>", pass_colors[p],
        pass_names[p]);
  out(b, "<span><i style=\"background:#bab0ac\"></i>host issue</span></p>\n");
}

static void timeline_labels(hbuf *b, const psim_plan_doc *d, const psim_taskgraph *g,
                            const tl_rows *rows) {
  out(b, "<div class=\"labels\"><svg id=\"tl-labels\" width=\"230\" height=\"%d\">\n",
      rows->n_rows * ROW_PX + 4);
  char label[300];
  for (int32_t res = 0; res < g->n_resources; res++) {
    if (rows->row_of_res[res] < 0)
      continue;
    res_label(d, res, label, sizeof label);
    out(b, "<text x=\"4\" y=\"%d\">", rows->row_of_res[res] * ROW_PX + 11);
    esc(b, label);
    out(b, "</text>\n");
  }
  if (rows->sync_row >= 0)
    out(b, "<text x=\"4\" y=\"%d\">sync (barriers)</text>\n", rows->sync_row * ROW_PX + 11);
  out(b, "</svg></div>\n");
}

static psim_status timeline(hbuf *b, const psim_plan_doc *d, const psim_sim_result *r,
                            const psim_report_options *o) {
  const psim_taskgraph *g = r->graph;
  const psim_schedule_result *s = r->schedule;
  int32_t drawn = g->n_tasks < o->max_tasks ? g->n_tasks : (int32_t)o->max_tasks;
  tl_rows rows = {NULL, 0, -1};
  PSIM_CHECK(make_rows(g, s, drawn, &rows));
  double span_us = s->makespan_s * 1e6 > 0 ? s->makespan_s * 1e6 : 1;
  out(b, "<h2>Timeline</h2>\n<p class=\"note\">One bar per simulated task on the stream or link "
         "it occupies (further links of a transfer are drawn lighter). Mouse wheel zooms, "
         "dragging pans. ");
  if (r->folded)
    out(b, "Symmetric devices were folded: only the %d simulated devices have tracks. ",
        r->simulated_devices);
  int64_t extras = 0, extra_cap = o->max_tasks; /* link bars beyond the first resource */
  for (int32_t t = 0; t < drawn; t++)
    extras += g->res_first[t + 1] - g->res_first[t] - (g->res_first[t + 1] > g->res_first[t]);
  if (extras > extra_cap)
    out(b,
        "<b>Only %lld of the %lld further link bars are drawn</b> (collectives occupy many "
        "links). ",
        (long long)extra_cap, (long long)extras);
  if (drawn < g->n_tasks)
    out(b,
        "<b>Only the first %d of %d tasks are drawn</b> (a cap that keeps the page "
        "responsive). ",
        drawn, g->n_tasks);
  out(b, "</p>\n");
  legend(b);
  out(b, "<div><button id=\"zin\">zoom in</button><button id=\"zout\">zoom out</button>"
         "<button id=\"zreset\">reset</button> <span id=\"tl-range\" class=\"note\"></span></div>\n"
         "<div class=\"tlwrap\">");
  timeline_labels(b, d, g, &rows);
  out(b,
      "<div class=\"plot\"><svg id=\"timeline\" data-tasks=\"%d\" data-drawn=\"%d\" "
      "data-span-us=\"%.9g\" width=\"100%%\" height=\"%d\" viewBox=\"0 0 %.9g %d\" "
      "preserveAspectRatio=\"none\">\n",
      g->n_tasks, drawn, span_us, rows.n_rows * ROW_PX + 4, span_us, rows.n_rows * ROW_PX + 4);
  for (int32_t t = 0; t < drawn; t++) {
    int32_t k0 = g->res_first[t], k1 = g->res_first[t + 1];
    bar(b, d, g, s, t, k0 == k1 ? rows.sync_row : rows.row_of_res[g->res[k0]], true);
    for (int32_t k = k0 + 1; k < k1 && extra_cap > 0; k++, extra_cap--)
      bar(b, d, g, s, t, rows.row_of_res[g->res[k]], false);
    if (issuing_host(g, s, t) >= 0)
      issue_bar(b, d, g, s, t, rows.row_of_res[issuing_host(g, s, t)]);
  }
  out(b, "</svg></div></div>\n");
  psim_free(rows.row_of_res);
  return PSIM_OK;
}

/* ---- memory ---- */

/* Peak activation bytes per device (n_devices, owned; NULL when none were simulated or out of
 * memory). Folded (#18 defect 9): each device takes its stage representative's peak (the
 * stage's first device, the one simulated: sim/builder/locals.c), as its peers do identical work;
 * before, only the representatives showed activations. */
static double *activations(const psim_plan_doc *d, const psim_sim_result *r) {
  double *act = r->activation_peak ? psim_malloc(sizeof *act * (size_t)r->n_devices) : NULL;
  if (!act)
    return NULL;
  memcpy(act, r->activation_peak, sizeof *act * (size_t)r->n_devices);
  const psim_strategy *s = &d->strategy;
  int32_t n_entries = s->n_stages * (s->virtual_stages > 0 ? s->virtual_stages : 1);
  for (int32_t v = 0; r->folded && v < n_entries; v++) {
    const psim_stage *st = &s->stages[v];
    for (int32_t k = 1; k < st->n_devices && st->devices[0] < r->n_devices; k++)
      if (st->devices[k] < r->n_devices)
        act[st->devices[k]] = r->activation_peak[st->devices[0]];
  }
  return act;
}

static void memory(hbuf *b, const psim_plan_doc *d, const psim_sim_result *r) {
  static const char *const kinds[] = {"weights", "gradients", "optimizer", "activations"};
  static const char *const colors[] = {"#4c78a8", "#f58518", "#54a24b", "#e45756"};
  const psim_cluster *c = &d->cluster;
  double cap = r->capacity_bytes > 0 ? r->capacity_bytes : 1, top = 0;
  int32_t shown = 0;
  double *act = activations(d, r);
  for (int32_t dv = 0; dv < r->n_devices && r->static_bytes; dv++) {
    const double *sb = &r->static_bytes[3 * dv];
    double tot = sb[0] + sb[1] + sb[2] + (act ? act[dv] : 0);
    top = tot > top ? tot : top;
    shown += tot > 0 && shown < 512;
  }
  bool cap_line = cap <= 1.25 * top; /* else the capacity is off the scale (said below) */
  top = cap_line ? fmax(top, cap) : (top > 0 ? top : 1);
  out(b, "<h2>Memory per device</h2>\n<p class=\"note\">Peak memory by kind on each device that "
         "holds any (weights, gradients and optimizer state are static; activations are the "
         "simulated peak). ");
  char cu[64];
  if (cap_line)
    out(b, "The dashed line is the device's capacity.");
  else
    out(b, "The device's capacity, %s, is far off this scale.",
        fmt_unit(cap, PSIM_UNIT_BYTES, cu, sizeof cu));
  out(b, "</p>\n<p class=\"legend\">");
  for (int k = 0; k < 4; k++)
    out(b, "<span><i style=\"background:%s\"></i>%s</span>", colors[k], kinds[k]);
  out(b, "</p>\n<svg id=\"memory\" width=\"900\" height=\"%d\">\n", shown * 16 + 8);
  int32_t y = 0;
  for (int32_t dv = 0; dv < r->n_devices && r->static_bytes && y < shown; dv++) {
    const double *sb = &r->static_bytes[3 * dv];
    double part[4] = {sb[0], sb[1], sb[2], act ? act[dv] : 0};
    if (part[0] + part[1] + part[2] + part[3] <= 0)
      continue;
    char u[64];
    out(b, "<text x=\"0\" y=\"%d\">", y * 16 + 12);
    esc(b, c->devices[dv].name);
    out(b, "</text>");
    double x = 160;
    for (int k = 0; k < 4; k++) {
      double w = 600 * part[k] / top;
      out(b,
          "<rect class=\"mem\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"12\" fill=\"%s\">"
          "<title>%s: %s</title></rect>",
          x, y * 16 + 2, w, colors[k], kinds[k], fmt_unit(part[k], PSIM_UNIT_BYTES, u, sizeof u));
      x += w;
    }
    if (cap_line)
      out(b,
          "<line x1=\"%.2f\" x2=\"%.2f\" y1=\"%d\" y2=\"%d\" stroke=\"#000\" "
          "stroke-dasharray=\"2,2\"/>",
          160 + 600 * cap / top, 160 + 600 * cap / top, y * 16, y * 16 + 16);
    out(b, "<text x=\"770\" y=\"%d\">%s</text>\n", y * 16 + 12,
        fmt_unit(part[0] + part[1] + part[2] + part[3], PSIM_UNIT_BYTES, u, sizeof u));
    y++;
  }
  psim_free(act);
  out(b, "</svg>\n");
}

/* ---- pipeline schedule ---- */

typedef struct span {
  double start, end;
} span;

static void pipeline(hbuf *b, const psim_plan_doc *d, const psim_sim_result *r) {
  const psim_strategy *s = &d->strategy;
  const psim_taskgraph *g = r->graph;
  int32_t nst = s->n_stages * s->virtual_stages, nm = s->n_micro;
  size_t n = (size_t)nst * (size_t)nm * 3;
  span *sp = n <= 4000000 ? psim_malloc(sizeof *sp * (n ? n : 1)) : NULL;
  out(b, "<h2>Pipeline schedule</h2>\n");
  if (!sp) {
    out(b, "<p class=\"note\">Too many stages x micro-batches to draw.</p>\n");
    return;
  }
  for (size_t i = 0; i < n; i++)
    sp[i] = (span){INFINITY, -INFINITY};
  for (int32_t t = 0; t < g->n_tasks; t++) {
    const psim_task_info *in = &g->info[t];
    if (in->kind != PSIM_TASK_COMPUTE || in->stage < 0 || in->stage >= nst || in->micro < 0 ||
        in->micro >= nm || in->pass > PSIM_TP_RECOMPUTE)
      continue;
    span *x = &sp[((size_t)in->stage * nm + in->micro) * 3 + in->pass];
    x->start = fmin(x->start, r->schedule->start_s[t]);
    x->end = fmax(x->end, r->schedule->end_s[t]);
  }
  double mk = r->schedule->makespan_s > 0 ? r->schedule->makespan_s : 1;
  out(b,
      "<p class=\"note\">Per pipeline stage (rows, in pipeline order) the span of each "
      "micro-batch's forward (F), backward (B) and recompute (R) work: the %s schedule with %d "
      "micro-batches.</p>\n<svg id=\"pipeline\" width=\"1000\" height=\"%d\">\n",
      psim_schedule_name(s->schedule), nm, nst * 22 + 8);
  static const char letter[] = "FBR";
  for (int32_t st = 0; st < nst; st++) {
    out(b, "<text x=\"0\" y=\"%d\">stage %d</text>\n", st * 22 + 15, st);
    for (int32_t mu = 0; mu < nm; mu++)
      for (int p = 0; p < 3; p++) {
        const span *x = &sp[((size_t)st * nm + mu) * 3 + p];
        if (x->end < x->start)
          continue;
        double x0 = 80 + 900 * x->start / mk, w = fmax(900 * (x->end - x->start) / mk, 0.5);
        out(b,
            "<rect class=\"k-%s\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"18\" "
            "stroke=\"#fff\" stroke-width=\"0.5\"><title>stage %d %c%d</title></rect>",
            pass_names[p], x0, st * 22 + 2, w, st, letter[p], mu);
        if (w > 16)
          out(b, "<text x=\"%.2f\" y=\"%d\" fill=\"#fff\">%c%d</text>", x0 + 2, st * 22 + 15,
              letter[p], mu);
      }
    out(b, "\n");
  }
  out(b, "</svg>\n");
  psim_free(sp);
}

/* ---- shardings ---- */

static void device_list(hbuf *b, const int32_t *dev, int32_t n) {
  bool range = n > 2;
  for (int32_t i = 1; i < n && range; i++)
    range = dev[i] == dev[0] + i;
  if (range) {
    out(b, "%d-%d", dev[0], dev[n - 1]);
    return;
  }
  for (int32_t i = 0; i < n && i < 16; i++)
    out(b, "%s%d", i ? " " : "", dev[i]);
  if (n > 16)
    out(b, " ... (%d)", n);
}

static void shardings(hbuf *b, const psim_plan_doc *d, const psim_report_options *o) {
  const psim_model *m = &d->model;
  out(b, "<h2>Per-op shardings</h2>\n<table class=\"ops\" id=\"shardings\"><thead><tr><th>op</th>"
         "<th>kind</th><th>layer</th><th>stage</th><th>split</th><th>replicas</th>"
         "<th>devices</th></tr></thead><tbody>\n");
  int32_t n = m->n_ops < o->max_ops ? m->n_ops : o->max_ops;
  for (int32_t i = 0; i < n; i++) {
    const psim_op *op = &m->ops[i];
    const psim_op_config *c = &d->strategy.ops[i];
    out(b, "<tr><td>");
    esc(b, op->name);
    out(b, "</td><td>%s</td><td>%d</td><td>%d</td><td>", psim_op_kind_name(op->kind), op->layer,
        c->stage);
    bool any = false;
    for (int32_t k = 0; k < op->n_dims; k++)
      if (c->degree[k] > 1) {
        out(b, "%s", any ? ", " : "");
        esc(b, m->dims[op->dims[k].dim].name);
        out(b, "=%d", c->degree[k]);
        any = true;
      }
    out(b, "%s</td><td>%d</td><td>", any ? "" : "-", c->replicas);
    device_list(b, c->devices, c->n_devices);
    out(b, "</td></tr>\n");
  }
  out(b, "</tbody></table>\n");
  if (n < m->n_ops)
    out(b, "<p class=\"note\">The first %d of %d ops are listed.</p>\n", n, m->n_ops);
}

/* ---- best-so-far ---- */

static void curve(hbuf *b, const psim_plan_doc *d) {
  const cJSON *pts = jget(d->root, "search.best_so_far");
  int32_t n = cJSON_IsArray(pts) ? cJSON_GetArraySize(pts) : 0;
  out(b, "<h2>Search: best so far</h2>\n");
  if (n == 0) {
    out(b, "<p class=\"note\">The plan records no best-so-far curve.</p>\n");
    return;
  }
  double emax = 1, tmin = INFINITY, tmax = 0;
  for (const cJSON *p = pts->child; p; p = p->next) {
    const cJSON *e = jget(p, "evaluation"), *t = jget(p, "iteration_time_s");
    emax = cJSON_IsNumber(e) && e->valuedouble > emax ? e->valuedouble : emax;
    if (cJSON_IsNumber(t)) {
      tmin = fmin(tmin, t->valuedouble);
      tmax = fmax(tmax, t->valuedouble);
    }
  }
  const cJSON *ev = jget(d->root, "search.evaluations");
  if (cJSON_IsNumber(ev) && ev->valuedouble > emax)
    emax = ev->valuedouble;
  double lo = tmin * 0.95, hi = tmax > tmin ? tmax * 1.05 : tmin * 1.05 + 1e-12;
  out(b,
      "<p class=\"note\">Iteration time of the best plan found against evaluations (%d "
      "improvements; best %.6g ms).</p>\n<svg id=\"curve\" width=\"700\" height=\"260\">\n"
      "<line x1=\"60\" y1=\"230\" x2=\"680\" y2=\"230\" stroke=\"#999\"/>"
      "<line x1=\"60\" y1=\"10\" x2=\"60\" y2=\"230\" stroke=\"#999\"/>\n"
      "<text x=\"60\" y=\"250\">0</text><text x=\"640\" y=\"250\">%.0f evals</text>"
      "<text x=\"0\" y=\"20\">%.4g ms</text><text x=\"0\" y=\"230\">%.4g ms</text>\n"
      "<polyline fill=\"none\" stroke=\"#4c78a8\" stroke-width=\"2\" points=\"",
      n, tmin * 1e3, emax, hi * 1e3, lo * 1e3);
  double px = 60, py = 0;
  for (const cJSON *p = pts->child; p; p = p->next) {
    const cJSON *e = jget(p, "evaluation"), *t = jget(p, "iteration_time_s");
    double x = 60 + 620 * (cJSON_IsNumber(e) ? e->valuedouble : 0) / emax;
    double y = 230 - 220 * ((cJSON_IsNumber(t) ? t->valuedouble : lo) - lo) / (hi - lo);
    if (p != pts->child)
      out(b, "%.2f,%.2f ", x, py); /* a step: the best holds until the next improvement */
    out(b, "%.2f,%.2f ", x, y);
    px = x;
    py = y;
  }
  out(b, "680,%.2f\"/>\n<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"#4c78a8\"/></svg>\n", py, px,
      py);
}

/* ---- zoom script ---- */

static const char zoom_script[] =
    "(function(){var s=document.getElementById('timeline');if(!s)return;"
    "var span=parseFloat(s.getAttribute('data-span-us'));var h=s.viewBox.baseVal.height;"
    "var x0=0,w=span;var r=document.getElementById('tl-range');"
    "function set(){w=Math.max(span/1e6,Math.min(span,w));x0=Math.max(0,Math.min(span-w,x0));"
    "s.setAttribute('viewBox',x0+' 0 '+w+' '+h);"
    "r.textContent='showing '+(x0/1e3).toFixed(3)+' - '+((x0+w)/1e3).toFixed(3)+' ms of '+"
    "(span/1e3).toFixed(3)+' ms';}"
    "function zoom(f,c){var at=x0+w*c;w=w*f;x0=at-w*c;set();}"
    "s.addEventListener('wheel',function(e){e.preventDefault();var b=s.getBoundingClientRect();"
    "zoom(e.deltaY<0?0.8:1.25,(e.clientX-b.left)/b.width);},{passive:false});"
    "var drag=null;s.addEventListener('mousedown',function(e){drag={x:e.clientX,x0:x0};});"
    "window.addEventListener('mouseup',function(){drag=null;});"
    "window.addEventListener('mousemove',function(e){if(!drag)return;"
    "var b=s.getBoundingClientRect();x0=drag.x0-(e.clientX-drag.x)*w/b.width;set();});"
    "document.getElementById('zin').onclick=function(){zoom(0.5,0.5);};"
    "document.getElementById('zout').onclick=function(){zoom(2,0.5);};"
    "document.getElementById('zreset').onclick=function(){x0=0;w=span;set();};set();"
    "document.body.setAttribute('data-bars',String(s.querySelectorAll('rect.task').length));"
    "document.body.setAttribute('data-ready','1');})();";

psim_status psim_report_html(const psim_plan_doc *d, const psim_sim_result *r,
                             const psim_report_options *o, char **html, size_t *len) {
  psim_report_options def;
  if (!o) {
    psim_report_options_init(&def);
    o = &def;
  }
  if (!r->graph || !r->schedule)
    return psim_error(PSIM_EFAILED, "report: the simulation kept no task graph (keep_graph)");
  hbuf b = {0};
  head(&b, d, o);
  summary(&b, d, r);
  psim_status st = timeline(&b, d, r, o);
  if (st != PSIM_OK) {
    psim_free(b.text);
    return st;
  }
  memory(&b, d, r);
  pipeline(&b, d, r);
  shardings(&b, d, o);
  curve(&b, d);
  out(&b, "<p class=\"note\">Written by plansim %s.</p>\n<script>%s</script>\n</body></html>\n",
      "report", zoom_script);
  return psim_sb_finish(&b, "report", html, len);
}
