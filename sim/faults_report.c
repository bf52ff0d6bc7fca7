/* faults_report.c - the report of a multi-iteration run: its lifetime and how
 * it is written (simulate --json's "iterations" object, and text). */
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/faults.h"

void psim_fault_report_init(psim_fault_report *r) {
  memset(r, 0, sizeof *r);
}

void psim_fault_report_destroy(psim_fault_report *r) {
  psim_free(r->iteration_s);
  psim_free(r->staleness_hist);
  memset(r, 0, sizeof *r);
}

/* ---- output ------------------------------------------------------------------------ */

static const char *kind_name(psim_fault_kind k) {
  return k == PSIM_FAULT_FAIL ? "fail" : k == PSIM_FAULT_FAIL_LINK ? "fail_link" : "join";
}

static psim_status events_json(const psim_fault_report *r, cJSON *root) {
  cJSON *arr;
  PSIM_CHECK(psim_json_add_array(root, "events", &arr));
  for (int32_t i = 0; i < r->n_rec; i++) {
    const psim_fault_record *e = &r->rec[i];
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(arr, o))
      return psim_error(PSIM_ENOMEM, "out of memory");
    PSIM_CHECK(psim_json_add_string(o, "kind", kind_name(e->kind)));
    PSIM_CHECK(psim_json_add_string(o, "target", e->what));
    PSIM_CHECK(psim_json_add_number(o, "time_s", e->time_s));
    PSIM_CHECK(psim_json_add_string(o, "recovery", e->recovery ? e->recovery : "none"));
    PSIM_CHECK(psim_json_add_number(o, "lost_s", e->lost_s));
    PSIM_CHECK(psim_json_add_number(o, "recovery_s", e->recovery_s));
    PSIM_CHECK(psim_json_add_number(o, "resync_s", e->resync_s));
    PSIM_CHECK(psim_json_add_number(o, "iteration_before_s", e->iteration_before_s));
    PSIM_CHECK(psim_json_add_number(o, "iteration_after_s", e->iteration_after_s));
    PSIM_CHECK(psim_json_add_number(o, "workers_after", e->workers_after));
  }
  return PSIM_OK;
}

static psim_status async_json(const psim_fault_report *r, cJSON *root) {
  cJSON *a, *h;
  PSIM_CHECK(psim_json_add_object(root, "async", &a));
  PSIM_CHECK(psim_json_add_number(a, "samples_per_s", r->async_samples_per_s));
  PSIM_CHECK(psim_json_add_number(a, "staleness_mean_updates", r->staleness_mean));
  PSIM_CHECK(psim_json_add_number(a, "staleness_mean_iterations", r->staleness_mean_iter));
  PSIM_CHECK(psim_json_add_number(a, "staleness_max_updates", r->staleness_max));
  PSIM_CHECK(psim_json_add_array(a, "staleness_histogram", &h));
  for (int32_t i = 0; i < r->n_hist; i++) {
    cJSON *v = cJSON_CreateNumber((double)r->staleness_hist[i]);
    if (!v || !cJSON_AddItemToArray(h, v))
      return psim_error(PSIM_ENOMEM, "out of memory");
  }
  return PSIM_OK;
}

psim_status psim_fault_report_to_json(const psim_fault_report *r, cJSON *root) {
  cJSON *it, *arr, *d;
  PSIM_CHECK(psim_json_add_object(root, "iterations", &it));
  PSIM_CHECK(psim_json_add_number(it, "n", r->n_iterations));
  PSIM_CHECK(psim_json_add_number(it, "total_s", r->total_s));
  PSIM_CHECK(psim_json_add_number(it, "samples_per_s", r->samples_per_s));
  PSIM_CHECK(psim_json_add_array(it, "times_s", &arr));
  for (int32_t i = 0; i < r->n_times; i++) {
    cJSON *v = cJSON_CreateNumber(r->iteration_s[i]);
    if (!v || !cJSON_AddItemToArray(arr, v))
      return psim_error(PSIM_ENOMEM, "out of memory");
  }
  PSIM_CHECK(psim_json_add_object(it, "distribution", &d));
  const double q[] = {r->mean_s, r->std_s, r->min_s, r->p50_s, r->p90_s, r->p99_s, r->max_s};
  const char *const names[] = {"mean_s", "std_s", "min_s", "p50_s", "p90_s", "p99_s", "max_s"};
  for (int i = 0; i < 7; i++)
    PSIM_CHECK(psim_json_add_number(d, names[i], q[i]));
  PSIM_CHECK(psim_json_add_number(it, "checkpoints", r->checkpoints));
  PSIM_CHECK(psim_json_add_number(it, "checkpoint_write_s", r->checkpoint_write_s));
  PSIM_CHECK(psim_json_add_number(it, "checkpoint_bytes", r->checkpoint_bytes));
  PSIM_CHECK(events_json(r, it));
  return r->async ? async_json(r, it) : PSIM_OK;
}

void psim_fault_report_print(const psim_fault_report *r, FILE *f) {
  fprintf(f,
          "  %d iterations in %.6g s (%.1f samples/s): per iteration mean %.6g s, std %.3g s, "
          "p50 %.6g s, p90 %.6g s, max %.6g s\n",
          (int)r->n_iterations, r->total_s, r->samples_per_s, r->mean_s, r->std_s, r->p50_s,
          r->p90_s, r->max_s);
  if (r->checkpoints > 0)
    fprintf(f, "  %d checkpoints of %.3g GB, %.3g s each\n", (int)r->checkpoints,
            r->checkpoint_bytes / 1e9, r->checkpoint_write_s);
  for (int32_t i = 0; i < r->n_rec; i++) {
    const psim_fault_record *e = &r->rec[i];
    if (e->after_run) {
      fprintf(f, "  %s %s at %.6g s: after_run, no effect (the run ends at %.6g s first)\n",
              kind_name(e->kind), e->what, e->time_s, r->total_s);
      continue;
    }
    fprintf(f,
            "  %s %s at %.6g s: %s, lost %.6g s, recovery %.6g s (resync %.3g s), "
            "iteration %.6g s -> %.6g s, %d workers\n",
            kind_name(e->kind), e->what, e->time_s, e->recovery ? e->recovery : "none", e->lost_s,
            e->recovery_s, e->resync_s, e->iteration_before_s, e->iteration_after_s,
            (int)e->workers_after);
  }
  if (r->async)
    fprintf(f, "  async: %.1f samples/s, staleness mean %.3g updates (%.3g iterations), max %d\n",
            r->async_samples_per_s, r->staleness_mean, r->staleness_mean_iter,
            (int)r->staleness_max);
}
