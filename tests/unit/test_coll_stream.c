/* test_coll_stream.c - data-parallel collectives on their own communicator
 * (issue 18 defect 8). Megatron-LM (distributed optimizer and DDP alike) and
 * PyTorch DDP issue the gradient reduce-scatter / all-reduce of each bucket on
 * the data-parallel process group, whose NCCL communicator runs on a stream of
 * its own, concurrently with the tensor-parallel collectives of the next
 * layers' backward. Before, every collective held its ranks' one comm engine,
 * so a tensor-parallel all-reduce of the backward queued behind each
 * multi-millisecond gradient bucket on the NICs: the backward stalled, and at
 * 11,616 GPUs (MLPerf GPT-3 175B, dp 484) the step came out 9x the measured. */
#include <check.h>
#include <math.h>
#include <stdio.h>

#include "models/generators.h"
#include "sim/core/json.h"
#include "sim/engine/collective.h"
#include "sim/simulate.h"
#include "topologies/presets.h"

static void preset(psim_cluster *c, int32_t nodes) {
  psim_preset_opts o;
  psim_preset_opts_init(&o);
  o.preset = "dgx-a100-80g";
  o.nodes = nodes;
  o.nics_per_node = 4;
  cJSON *doc = NULL;
  ck_assert_int_eq(psim_preset_cluster(&o, &doc), PSIM_OK);
  psim_cluster_init(c);
  psim_status s = psim_cluster_from_json("preset", doc, c);
  cJSON_Delete(doc);
  ck_assert_msg(s == PSIM_OK, "%s", psim_error_message());
}

/* A GPT of 8 layers x 4096, micro_batches per data-parallel rank, tp 8 (one
 * node), dp = nodes, overlapped gradient reduction; zero 0 or 1. */
static double run(int32_t nodes, int zero) {
  psim_gen_tf_opts go;
  psim_gen_gpt_opts_init(&go);
  go.layers = 8;
  go.hidden = 4096;
  go.heads = 32;
  go.seq = 2048;
  go.batch = 8 * nodes;
  cJSON *doc = NULL;
  ck_assert_int_eq(psim_gen_gpt(&go, &doc), PSIM_OK);
  psim_model m;
  psim_model_init(&m);
  ck_assert_int_eq(psim_model_from_json("gpt", doc, &m), PSIM_OK);
  cJSON_Delete(doc);
  psim_cluster c;
  preset(&c, nodes);
  psim_megatron_opts o;
  psim_megatron_opts_init(&o);
  o.tp = 8;
  o.pp = 1;
  o.dp = nodes;
  o.micro_batch = 1;
  o.zero_stage = zero;
  o.overlap_grad_reduce = true;
  psim_strategy s;
  psim_strategy_init(&s);
  psim_status st = psim_strategy_megatron(&m, &c, &o, &s);
  ck_assert_msg(st == PSIM_OK, "%s", psim_error_message());
  psim_sim_options so;
  psim_sim_options_init(&so);
  so.keep_graph = true;
  psim_sim_result res;
  psim_sim_result_init(&res);
  st = psim_simulate(&m, &c, &s, &so, &res);
  ck_assert_msg(st == PSIM_OK, "%s", psim_error_message());
  double end = 0; /* the last backward kernel's end, s */
  for (int32_t t = 0; t < res.graph->n_tasks; t++)
    if (res.graph->info[t].kind == PSIM_TASK_COMPUTE && res.graph->info[t].pass == PSIM_TP_BWD)
      end = fmax(end, res.schedule->end_s[t]);
  psim_sim_result_destroy(&res);
  psim_strategy_destroy(&s);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
  return end;
}

/* Tensor-parallel traffic stays on NVSwitch, data-parallel traffic on the
 * NICs, each on its own stream: the backward (its kernels and the
 * tensor-parallel all-reduces between them) ends at the same time with 1, 2,
 * 4 or 8 data-parallel replicas doing the same per-replica work, the bucket
 * reduce-scatters / all-reduces hidden behind it. Before, each tensor-parallel
 * all-reduce issued while a bucket was on the wire waited for it on the one
 * comm engine, and the backward ended later the more buckets crossed nodes. */
START_TEST(tp_comm_not_behind_gradient_buckets) {
  for (int zero = 0; zero <= 1; zero++) {
    double one = run(1, zero);
    for (int32_t nodes = 2; nodes <= 8; nodes *= 2) {
      double end = run(nodes, zero);
      ck_assert_msg(fabs(end - one) <= 1e-9 * one,
                    "zero %d dp %d: backward ends at %.6f s, %.6f s at dp 1", zero, nodes, end,
                    one);
    }
  }
}
END_TEST

/* A collective on its own stream holds no comm engine (only links it
 * fills), at both fidelities; on the comm engine it holds every rank's. */
START_TEST(own_stream_holds_no_engine) {
  psim_cluster c;
  preset(&c, 4);
  int32_t dev[4] = {0, 8, 16, 24};
  for (int f = 0; f <= 1; f++)
    for (int own = 0; own <= 1; own++) {
      psim_coll_desc d;
      psim_coll_desc_init(&d);
      d.kind = PSIM_COLL_REDUCE_SCATTER;
      d.devices = dev;
      d.n = 4;
      d.bytes = 64e6;
      d.own_stream = own;
      psim_taskgraph g;
      psim_tg_init(&g, 2 * c.n_devices + c.n_links);
      int32_t entry, exit, engines = 0;
      ck_assert_int_eq(psim_coll_add(&g, &c, &d, (psim_fidelity)f, NULL, &entry, &exit), PSIM_OK);
      for (int32_t t = 0; t < g.n_tasks; t++)
        for (int32_t k = g.res_first[t]; k < g.res_first[t + 1]; k++)
          engines += g.res[k] < 2 * c.n_devices && g.res[k] % 2 == 1;
      if (own)
        ck_assert_int_eq(engines, 0);
      else
        ck_assert_int_ge(engines, 4);
      psim_tg_destroy(&g);
    }
  psim_cluster_destroy(&c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("coll_stream");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, tp_comm_not_behind_gradient_buckets);
  tcase_add_test(tc, own_stream_holds_no_engine);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
