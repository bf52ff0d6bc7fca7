/* test_trace.c - the Chrome/Perfetto trace parses and has the right events. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/engine/collective.h"
#include "sim/engine/trace.h"

#define DATA PSIM_SOURCE_ROOT "/tests/data/"

typedef struct counts {
  int x, s, f, c, meta, link_threads;
  int bad_time;
  int named_by_callback;
} counts;

static void count_events(const char *path, counts *k) {
  cJSON *root = NULL;
  psim_status st = psim_json_load_file(path, &root);
  ck_assert_msg(st == PSIM_OK, "%s", psim_error_message());
  const cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
  ck_assert(cJSON_IsArray(ev));
  memset(k, 0, sizeof *k);
  for (const cJSON *e = ev->child; e; e = e->next) {
    const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
    ck_assert_ptr_nonnull(ph);
    ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(e, "pid")));
    double ts = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "ts"));
    if (strcmp(ph, "X") == 0) {
      double dur = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "dur"));
      k->x++;
      k->bad_time += !(ts >= 0) || !(dur >= 0);
      k->named_by_callback += name && strncmp(name, "task-", 5) == 0;
    }
    k->s += strcmp(ph, "s") == 0;
    k->f += strcmp(ph, "f") == 0;
    k->c += strcmp(ph, "C") == 0;
    k->meta += strcmp(ph, "M") == 0;
    if (strcmp(ph, "M") == 0 && strcmp(name, "thread_name") == 0) {
      const char *tn =
          cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "name"));
      k->link_threads += tn && strstr(tn, "->") != NULL;
    }
  }
  cJSON_Delete(root);
}

static void name_cb(void *ctx, const psim_taskgraph *g, int32_t task, char *buf, size_t size) {
  (void)g;
  snprintf(buf, size, "task-%d-%s", task, (const char *)ctx);
}

START_TEST(trace_of_a_small_schedule) {
  psim_cluster c;
  psim_cluster_init(&c);
  ck_assert_int_eq(psim_cluster_load(DATA "coll-2node.json", &c), PSIM_OK);
  psim_taskgraph g;
  psim_tg_init(&g, 2 * c.n_devices + c.n_links);
  int32_t r0 = psim_res_compute(0), r4 = psim_res_compute(4), a, b, out, p2p;
  psim_task_info fwd = {PSIM_TASK_COMPUTE, PSIM_TP_FWD, 0, 3, 1, 0, 0};
  ck_assert_int_eq(psim_tg_add_task(&g, 1e-3, &r0, 1, &fwd, &a), PSIM_OK);
  ck_assert_int_eq(psim_p2p_add(&g, &c, 0, 4, 1e8, NULL, &p2p, &out), PSIM_OK); /* 2 links */
  fwd.device = 4;
  ck_assert_int_eq(psim_tg_add_task(&g, 1e-3, &r4, 1, &fwd, &b), PSIM_OK);
  int32_t devs[4] = {0, 1, 2, 3};
  psim_coll_desc d;
  psim_coll_desc_init(&d);
  d.devices = devs;
  d.n = 4;
  d.bytes = 1e8;
  d.algo = PSIM_AR_RING;
  int32_t cin, cout;
  ck_assert_int_eq(psim_coll_add(&g, &c, &d, PSIM_FIDELITY_AGGREGATE, NULL, &cin, &cout), PSIM_OK);
  ck_assert_int_eq(psim_tg_add_edge(&g, a, p2p), PSIM_OK);
  ck_assert_int_eq(psim_tg_add_edge(&g, out, b), PSIM_OK);
  ck_assert_int_eq(psim_tg_add_edge(&g, a, cin), PSIM_OK);
  ck_assert_int_eq(psim_tg_finalize(&g), PSIM_OK);
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  ck_assert_int_eq(psim_tg_simulate(&g, &r), PSIM_OK);
  psim_trace_names names;
  ck_assert_int_eq(psim_trace_names_from_cluster(&names, &c), PSIM_OK);
  names.task_name = name_cb;
  names.ctx = "x";
  psim_trace_counter mem[3] = {{0, 0, 1e9}, {0, 1e-3, 2e9}, {4, 0, 5e8}};
  char path[] = "/tmp/psim_traceXXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_int_eq(psim_trace_write(path, &g, &r, &names, mem, 3), PSIM_OK);
  counts k;
  count_events(path, &k);
  /* X events: one per (task, resource): 1 + 2 + 1 + (4 comm engines + 8 links) */
  ck_assert_int_eq(k.x, (int)g.n_res);
  ck_assert_int_eq(k.x, 16);
  ck_assert_int_eq(k.named_by_callback, k.x);
  ck_assert_int_eq(k.bad_time, 0);
  /* cross-device edges between tasks with tracks: a(0)->p2p(0) no, p2p(0)->b(4) yes,
   * a(0)->collective(0) no */
  ck_assert_int_eq(k.s, 1);
  ck_assert_int_eq(k.f, 1);
  ck_assert_int_eq(k.c, 3);
  ck_assert_int_eq(k.link_threads, 10); /* 2 of the p2p + 8 of the ring */
  /* device processes: name + sort index + 3 thread names (compute, comm, host)
   * each; links: 2 + threads */
  ck_assert_int_eq(k.meta, 8 * 5 + 2 + 10);
  /* a cap on X events and on flows */
  names.max_events = 5;
  names.max_flows = 0;
  ck_assert_int_eq(psim_trace_write(path, &g, &r, &names, NULL, 0), PSIM_OK);
  count_events(path, &k);
  ck_assert_int_eq(k.x, 5);
  ck_assert_int_eq(k.s, 0);
  /* a memory sample for a device that does not exist */
  psim_trace_counter badmem = {99, 0, 1};
  ck_assert_int_eq(psim_trace_write(path, &g, &r, &names, &badmem, 1), PSIM_EINPUT);
  remove(path);
  psim_trace_names_destroy(&names);
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
  psim_cluster_destroy(&c);
}
END_TEST

/* The host's track: two kernels the host of device 0 issues (5 us each)
 * give two "issue" events on its host thread, back to back, when the
 * schedule records issue ends; none when it does not. */
START_TEST(host_track_shows_issues) {
  psim_cluster c;
  psim_cluster_init(&c);
  ck_assert_int_eq(psim_cluster_load(DATA "coll-2node.json", &c), PSIM_OK);
  int32_t host = psim_res_host(c.n_devices, c.n_links, 0), r0 = psim_res_compute(0), t[2];
  psim_taskgraph g;
  psim_tg_init(&g, host + 1);
  psim_task_info fwd = {PSIM_TASK_COMPUTE, PSIM_TP_FWD, 0, 3, 1, 0, 0};
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(psim_tg_add_task(&g, 1e-6, &r0, 1, &fwd, &t[i]), PSIM_OK);
    ck_assert_int_eq(psim_tg_set_issue(&g, t[i], host, 5e-6, 0), PSIM_OK);
  }
  ck_assert_int_eq(psim_tg_finalize(&g), PSIM_OK);
  psim_trace_names names;
  ck_assert_int_eq(psim_trace_names_from_cluster(&names, &c), PSIM_OK);
  char path[] = "/tmp/psim_traceXXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  for (int record = 0; record < 2; record++) {
    psim_schedule_result r;
    psim_schedule_result_init(&r);
    r.record_issue = record;
    ck_assert_int_eq(psim_tg_simulate(&g, &r), PSIM_OK);
    ck_assert_int_eq(psim_trace_write(path, &g, &r, &names, NULL, 0), PSIM_OK);
    cJSON *root = NULL;
    ck_assert_int_eq(psim_json_load_file(path, &root), PSIM_OK);
    int issues = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "traceEvents")) {
      const char *cat = cJSON_GetStringValue(cJSON_GetObjectItem(e, "cat"));
      if (!cat || strcmp(cat, "host") != 0)
        continue;
      ck_assert_int_eq((int)cJSON_GetNumberValue(cJSON_GetObjectItem(e, "pid")), 0);
      ck_assert_int_eq((int)cJSON_GetNumberValue(cJSON_GetObjectItem(e, "tid")), 2);
      ck_assert_double_eq_tol(cJSON_GetNumberValue(cJSON_GetObjectItem(e, "ts")), 5.0 * issues,
                              1e-9);
      ck_assert_double_eq_tol(cJSON_GetNumberValue(cJSON_GetObjectItem(e, "dur")), 5.0, 1e-9);
      issues++;
    }
    ck_assert_int_eq(issues, record ? 2 : 0);
    cJSON_Delete(root);
    psim_schedule_result_destroy(&r);
  }
  remove(path);
  psim_trace_names_destroy(&names);
  psim_tg_destroy(&g);
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(large_trace_spans_chunks) {
  /* 50,000 tasks on 4 devices: more than two serialisation chunks. */
  psim_taskgraph g;
  psim_tg_init(&g, 8);
  for (int32_t i = 0; i < 50000; i++) {
    int32_t res = psim_res_compute(i % 4);
    psim_task_info in = {PSIM_TASK_COMPUTE, PSIM_TP_BWD, 0, i, 0, i % 4, 0};
    ck_assert_int_eq(psim_tg_add_task(&g, 1e-6, &res, 1, &in, NULL), PSIM_OK);
    if (i > 0)
      ck_assert_int_eq(psim_tg_add_edge(&g, i - 1, i), PSIM_OK);
  }
  ck_assert_int_eq(psim_tg_finalize(&g), PSIM_OK);
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  ck_assert_int_eq(psim_tg_simulate(&g, &r), PSIM_OK);
  psim_trace_names names;
  psim_trace_names_init(&names, 4, 0);
  char path[] = "/tmp/psim_traceXXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_int_eq(psim_trace_write(path, &g, &r, &names, NULL, 0), PSIM_OK);
  counts k;
  count_events(path, &k);
  ck_assert_int_eq(k.x, 50000);
  ck_assert_int_eq(k.s, 49999); /* every edge crosses devices */
  ck_assert_int_eq(k.f, 49999);
  ck_assert_int_eq(k.bad_time, 0);
  remove(path);
  /* the schedule must belong to the graph */
  r.n_tasks = 3;
  ck_assert_int_eq(psim_trace_write(path, &g, &r, &names, NULL, 0), PSIM_EFAILED);
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
}
END_TEST

int main(void) {
  psim_json_init_hooks();
  Suite *s = suite_create("trace");
  TCase *tc = tcase_create("trace");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, trace_of_a_small_schedule);
  tcase_add_test(tc, large_trace_spans_chunks);
  tcase_add_test(tc, host_track_shows_issues);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
