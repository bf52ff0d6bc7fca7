/* report.h - a plan as one self-contained HTML page (`plansim report`):
 * summary, zoomable SVG timeline of device streams and links, memory per
 * device, pipeline schedule, per-op shardings and the search's best-so-far
 * curve. No network: styles and scripts are inline. */
#ifndef PSIM_REPORT_H
#define PSIM_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "search/plan/export.h"
#include "sim/simulate.h"

typedef struct psim_report_options {
  int64_t max_tasks; /* tasks drawn on the timeline at most; default 20000 (the page says
                        when it drew fewer than were simulated) */
  int32_t max_ops;   /* rows of the shardings table at most; default 5000 */
  const char *title; /* page title; NULL = "MODEL on CLUSTER" */
} psim_report_options;

void psim_report_options_init(psim_report_options *o);

/* Renders plan d with its simulation r (simulated with keep_graph) as HTML.
 * *html is NUL-terminated and owned by the caller (psim_free).
 * O(tasks drawn + ops * devices + devices). */
psim_status psim_report_html(const psim_plan_doc *d, const psim_sim_result *r,
                             const psim_report_options *o, char **html, size_t *len);

#endif
