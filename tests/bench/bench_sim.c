/* bench_sim.c - the simulator on the issue-3 benchmark: the Megatron
 * configuration of a 1T-parameter GPT (128 layers, hidden 25600, 160 heads,
 * seq 2048, vocab 51200, batch 3072, micro-batch 1, tp 8, pp 64, dp 6) on 384
 * DGX A100 nodes (3072 GPUs). Reports wall time, peak memory (RSS), tasks
 * and the simulated iteration time. Targets: under 2 s and 2 GiB.
 *
 *   bench_sim [--no-fold] [--recompute none|selective|full]               */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "models/generators.h"
#include "sim/core/clock.h"
#include "sim/core/json.h"
#include "sim/simulate.h"
#include "topologies/presets.h"

static double peak_rss_bytes(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss * 1024.0; /* kilobytes on Linux */
}

static psim_status setup(psim_model *m, psim_cluster *c) {
  psim_gen_tf_opts g;
  psim_gen_gpt_opts_init(&g);
  g.layers = 128;
  g.hidden = 25600;
  g.heads = 160;
  g.seq = 2048;
  g.vocab = 51200;
  g.batch = 3072;
  cJSON *doc = NULL;
  PSIM_CHECK(psim_gen_gpt(&g, &doc));
  psim_status s = psim_model_from_json("gpt-1t", doc, m);
  cJSON_Delete(doc);
  PSIM_CHECK(s);
  psim_preset_opts p;
  psim_preset_opts_init(&p);
  p.preset = "dgx-a100-80g";
  p.nodes = 384;
  PSIM_CHECK(psim_preset_cluster(&p, &doc));
  s = psim_cluster_from_json("dgx-a100-x384", doc, c);
  cJSON_Delete(doc);
  return s;
}

int main(int argc, char **argv) {
  psim_json_init_hooks();
  psim_sim_options o;
  psim_sim_options_init(&o);
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = 8;
  mo.pp = 64;
  mo.dp = 6;
  mo.micro_batch = 1;
  mo.recompute = PSIM_RECOMPUTE_FULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--no-fold") == 0)
      o.fold = false;
    else if (strcmp(argv[i], "--recompute") == 0 && i + 1 < argc) {
      const char *r = argv[++i];
      mo.recompute = strcmp(r, "none") == 0        ? PSIM_RECOMPUTE_NONE
                     : strcmp(r, "selective") == 0 ? PSIM_RECOMPUTE_SELECTIVE
                                                   : PSIM_RECOMPUTE_FULL;
    }
  }
  psim_model m;
  psim_cluster c;
  psim_strategy s;
  psim_model_init(&m);
  psim_cluster_init(&c);
  psim_strategy_init(&s);
  double t0 = psim_clock_now_s();
  psim_status st = setup(&m, &c);
  double t1 = psim_clock_now_s();
  if (st == PSIM_OK)
    st = psim_strategy_megatron(&m, &c, &mo, &s);
  double t2 = psim_clock_now_s();
  psim_sim_result r;
  psim_sim_result_init(&r);
  if (st == PSIM_OK)
    st = psim_simulate(&m, &c, &s, &o, &r);
  double t3 = psim_clock_now_s();
  if (st != PSIM_OK) {
    fprintf(stderr, "bench_sim: %s\n", psim_error_message());
    return 1;
  }
  printf("1T GPT, Megatron tp 8 pp 64 dp 6 mb 1 (%s recompute) on 3072 A100s%s\n",
         psim_recompute_name(mo.recompute), o.fold ? "" : " (not folded)");
  printf("  load model + cluster %.3f s, expand strategy %.3f s\n", t1 - t0, t2 - t1);
  printf("  simulate: %.3f s wall (build %.3f s, schedule %.3f s), %lld tasks, %lld edges, "
         "%d devices simulated\n",
         t3 - t2, r.build_s, r.simulate_s, (long long)r.n_tasks, (long long)r.n_edges,
         r.simulated_devices);
  printf("  total %.3f s, peak RSS %.2f GiB\n", t3 - t0, peak_rss_bytes() / 1073741824.0);
  printf("  tasks simulated per second (schedule only): %.3g\n",
         r.simulate_s > 0 ? (double)r.n_tasks / r.simulate_s : 0);
  printf("  predicted iteration %.2f s, MFU %.1f%%, peak memory %.1f GiB (%s)\n",
         r.iteration_time_s, 100 * r.mfu, r.peak_memory_bytes / 1073741824.0,
         r.fits ? "fits" : "does not fit");
  psim_sim_result_destroy(&r);
  psim_strategy_destroy(&s);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
  return 0;
}
