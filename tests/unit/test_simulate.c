/* test_simulate.c - the simulator against closed forms: a single device is
 * the sum of its tasks; GPipe's bubble is (p-1)/(m+p-1) of equal stages;
 * 1F1B keeps p - i micro-batches of activations on stage i; selective
 * recompute re-runs the attention core and nothing else; ZeRO's traffic is
 * Rajbhandari et al.'s. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "sim/builder/build.h"
#include "sim/core/json.h"
#include "sim/simulate.h"

#define DATA PSIM_SOURCE_ROOT "/tests/data/"
#define ROOT PSIM_SOURCE_ROOT "/"

typedef struct fixture {
  psim_model m;
  psim_cluster c;
} fixture;

static void load(fixture *f, const char *model, const char *cluster) {
  psim_model_init(&f->m);
  psim_cluster_init(&f->c);
  ck_assert_msg(psim_model_load(model, &f->m) == PSIM_OK, "%s", psim_error_message());
  ck_assert_msg(psim_cluster_load(cluster, &f->c) == PSIM_OK, "%s", psim_error_message());
}

static void unload(fixture *f) {
  psim_cluster_destroy(&f->c);
  psim_model_destroy(&f->m);
}

static void run(fixture *f, const psim_megatron_opts *mo, bool fold, psim_sim_result *r) {
  psim_strategy s;
  psim_strategy_init(&s);
  ck_assert_msg(psim_strategy_megatron(&f->m, &f->c, mo, &s) == PSIM_OK, "%s",
                psim_error_message());
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.keep_graph = true;
  o.fold = fold;
  ck_assert_msg(psim_simulate(&f->m, &f->c, &s, &o, r) == PSIM_OK, "%s", psim_error_message());
  psim_strategy_destroy(&s);
}

/* Sum of the durations of tasks of a pass on a device (micro-batch mu, or all when -1). */
static double pass_time(const psim_sim_result *r, int32_t dev, int pass, int32_t mu) {
  double t = 0;
  const psim_taskgraph *g = r->graph;
  for (int32_t i = 0; i < g->n_tasks; i++)
    if (g->info[i].device == dev && g->info[i].pass == pass &&
        g->info[i].kind == PSIM_TASK_COMPUTE && (mu < 0 || g->info[i].micro == mu))
      t += g->duration_s[i];
  return t;
}

START_TEST(single_device_is_sum_of_tasks) {
  fixture f;
  load(&f, DATA "sim-chain.json", DATA "sim-fast4.json");
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = mo.pp = mo.dp = 1;
  mo.micro_batch = 16;
  psim_sim_result r;
  run(&f, &mo, true, &r);
  double sum = 0;
  for (int32_t i = 0; i < r.graph->n_tasks; i++)
    sum += r.graph->duration_s[i];
  ck_assert_double_gt(sum, 0);
  ck_assert_double_eq_tol(r.iteration_time_s, sum, 1e-12 * sum);
  psim_sim_result_destroy(&r);
  unload(&f);
}
END_TEST

static void pipeline(fixture *f, psim_schedule sched, psim_sim_result *r) {
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = 1;
  mo.pp = 4;
  mo.dp = 1;
  mo.micro_batch = 8; /* batch 64 -> m = 8 micro-batches */
  mo.schedule = sched;
  run(f, &mo, true, r);
}

START_TEST(gpipe_bubble_fraction) {
  fixture f;
  load(&f, DATA "sim-chain.json", DATA "sim-fast4.json");
  psim_sim_result r;
  pipeline(&f, PSIM_SCHED_GPIPE, &r);
  double p = 4, m = 8;
  /* stage 0's first matmul has no input gradient to compute (its input is
   * data), so its backward is shorter: the critical path is
   * (m + p - 1) tf + (m + p - 2) tb + tb0 */
  double tf = pass_time(&r, 1, PSIM_TP_FWD, 0), tb = pass_time(&r, 1, PSIM_TP_BWD, 0);
  double tb0 = pass_time(&r, 0, PSIM_TP_BWD, 0);
  double t_opt = pass_time(&r, 0, PSIM_TP_UPDATE, -1);
  ck_assert_double_lt(tb0, tb);
  double expect = (m + p - 1) * tf + (m + p - 2) * tb + tb0;
  ck_assert_double_eq_tol(r.iteration_time_s - t_opt, expect, 1e-9 * expect);
  /* the bubble of a middle stage: (p - 1) / (m + p - 1) up to tb0 != tb */
  double busy = m * (tf + tb);
  double bubble = 1 - busy / (r.iteration_time_s - t_opt);
  ck_assert_double_eq_tol(bubble, (p - 1) / (m + p - 1), 0.01 * (p - 1) / (m + p - 1));
  ck_assert_double_gt(r.bubble_s, 0);
  psim_sim_result_destroy(&r);
  unload(&f);
}
END_TEST

START_TEST(one_f_one_b_in_flight_activations) {
  fixture f;
  load(&f, DATA "sim-chain.json", DATA "sim-fast4.json");
  psim_sim_result r;
  pipeline(&f, PSIM_SCHED_1F1B, &r);
  double last = r.activation_peak[3];
  ck_assert_double_gt(last, 0);
  for (int i = 0; i < 4; i++)
    ck_assert_double_eq_tol(r.activation_peak[i] / last, 4.0 - i, 1e-9);
  psim_sim_result_destroy(&r);
  pipeline(&f, PSIM_SCHED_GPIPE, &r);
  for (int i = 0; i < 4; i++) /* GPipe keeps every micro-batch */
    ck_assert_double_eq_tol(r.activation_peak[i] / last, 8.0, 1e-9);
  psim_sim_result_destroy(&r);
  unload(&f);
}
END_TEST

START_TEST(one_f_one_b_same_time_as_gpipe_when_free_comm) {
  /* with equal stages and free communication both schedules take
   * (m + p - 1)(tf + tb); 1F1B only saves memory */
  fixture f;
  load(&f, DATA "sim-chain.json", DATA "sim-fast4.json");
  psim_sim_result a, b;
  pipeline(&f, PSIM_SCHED_GPIPE, &a);
  pipeline(&f, PSIM_SCHED_1F1B, &b);
  ck_assert_double_eq_tol(a.iteration_time_s, b.iteration_time_s, 1e-9 * a.iteration_time_s);
  psim_sim_result_destroy(&a);
  psim_sim_result_destroy(&b);
  unload(&f);
}
END_TEST

/* Folding simulates one device per stage; on clusters small enough to run
 * both, it must agree with simulating every device. */
static void fold_case(const char *cluster, int32_t tp, int32_t pp, int32_t dp, bool sp) {
  fixture f;
  load(&f, DATA "tiny-gpt.json", cluster);
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = tp;
  mo.pp = pp;
  mo.dp = dp;
  mo.micro_batch = 1;
  mo.sequence_parallel = sp;
  psim_sim_result a, b;
  run(&f, &mo, true, &a);
  run(&f, &mo, false, &b);
  ck_assert(a.folded);
  ck_assert(!b.folded);
  ck_assert_int_lt(a.simulated_devices, b.simulated_devices);
  ck_assert_msg(fabs(a.iteration_time_s - b.iteration_time_s) <= 0.01 * b.iteration_time_s,
                "folded %.9f s, unfolded %.9f s (tp %d pp %d dp %d)", a.iteration_time_s,
                b.iteration_time_s, tp, pp, dp);
  ck_assert_double_eq_tol(a.peak_memory_bytes, b.peak_memory_bytes, 1e-6 * b.peak_memory_bytes);
  /* every device's static memory to the bit: folded builds count the simulated devices' weight
   * shares and give the others their representative's (sim/builder/memory.c, fill_folded) */
  ck_assert(a.static_bytes && b.static_bytes && a.n_devices == b.n_devices);
  for (int32_t d = 0; d < 3 * a.n_devices; d++)
    ck_assert_msg(a.static_bytes[d] == b.static_bytes[d],
                  "device %d, part %d: static %.17g B folded, %.17g B unfolded (tp %d pp %d dp %d)",
                  (int)(d / 3), (int)(d % 3), a.static_bytes[d], b.static_bytes[d], tp, pp, dp);
  psim_sim_result_destroy(&a);
  psim_sim_result_destroy(&b);
  unload(&f);
}

START_TEST(folded_equals_unfolded) {
  fold_case(DATA "coll-nvswitch8.json", 2, 2, 2, false);
  fold_case(DATA "coll-nvswitch8.json", 4, 1, 2, true);
  fold_case(DATA "coll-nvswitch8.json", 1, 4, 2, false);
  fold_case(DATA "coll-2node.json", 2, 2, 2, false);
  fold_case(DATA "coll-2node.json", 4, 1, 2, false);
}
END_TEST

/* GPT-1.3B (hidden = seq = 2048, where a size test mistook qkv, fc1 and fc2
 * for the attention core) at tp 2, dp 4, 4 samples per micro-batch. */
static void gpt_recompute(fixture *f, psim_recompute rc, psim_sim_result *r) {
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = 2;
  mo.pp = 1;
  mo.dp = 4;
  mo.micro_batch = 4;
  mo.recompute = rc;
  run(f, &mo, true, r);
}

/* Selective recompute re-runs QK^T, softmax, dropout and AV (Korthikanti et
 * al. 2022): per layer 4 B s^2 h FLOPs for the two products plus 5 + 2 per
 * score element for softmax and dropout (sim/ir/opkind_work.c), summed
 * over the 8 devices. It costs more than none and less
 * than full, and keeps more activations than full and fewer than none. */
START_TEST(selective_recomputes_the_attention_core) {
  fixture f;
  load(&f, ROOT "models/gpt-1.3b.json", ROOT "topologies/dgx-a100-x1.json");
  psim_sim_result none, sel, full;
  gpt_recompute(&f, PSIM_RECOMPUTE_NONE, &none);
  gpt_recompute(&f, PSIM_RECOMPUTE_SELECTIVE, &sel);
  gpt_recompute(&f, PSIM_RECOMPUTE_FULL, &full);
  double B = 512, s = 2048, h = 2048, a = 16, L = 24;
  double core = L * (4 * B * s * s * h + 7 * B * a * s * s);
  double extra = sel.hardware_flops - none.hardware_flops;
  ck_assert_msg(fabs(extra - core) <= 1e-9 * core, "recomputed %.6g FLOPs, attention core %.6g",
                extra, core);
  ck_assert_double_eq_tol(sel.model_flops, none.model_flops, 1e-12 * none.model_flops);
  ck_assert_double_lt(none.iteration_time_s, sel.iteration_time_s);
  ck_assert_double_lt(sel.iteration_time_s, full.iteration_time_s);
  ck_assert_double_lt(none.compute_s, sel.compute_s);
  ck_assert_double_lt(sel.compute_s, full.compute_s);
  ck_assert_double_lt(full.memory.activations, sel.memory.activations);
  ck_assert_double_lt(sel.memory.activations, none.memory.activations);
  psim_sim_result_destroy(&none);
  psim_sim_result_destroy(&sel);
  psim_sim_result_destroy(&full);
  unload(&f);
}
END_TEST

/* LLaMA-2 7B (MHA: wq, wk, wv, wo, w1, w3, w2 per block) at tp `tp`, dp 8 / tp, 4
 * samples per micro-batch. */
static void llama_recompute(fixture *f, int32_t tp, psim_recompute rc, psim_sim_result *r) {
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = tp;
  mo.pp = 1;
  mo.dp = 8 / tp;
  mo.micro_batch = 4;
  mo.sequence_parallel = tp > 1;
  mo.recompute = rc;
  run(f, &mo, true, r);
}

/* torchtitan's op-level selective AC (PSIM_RECOMPUTE_OP) saves every odd matmul of
 * a block and SDPA and recomputes the rest: wk, wo and w3, 2 B s h (h + h + ffn)
 * FLOPs per layer, plus the element-wise ops (norms, SwiGLU, adds: under 3% of
 * that here). At tp 2 wo's output is reduce-scattered, which the policy saves, so
 * wo is not recomputed: 2 B s h (h + ffn). Failed before the mode existed (its
 * name did not parse) and fails if attention (4 B s^2 h per layer) is recomputed. */
START_TEST(op_level_sac_recomputes_every_second_matmul) {
  psim_recompute rc;
  ck_assert_int_eq(psim_recompute_parse("op", &rc), PSIM_OK);
  ck_assert_int_eq(rc, PSIM_RECOMPUTE_OP);
  ck_assert_str_eq(psim_recompute_name(PSIM_RECOMPUTE_OP), "op");
  fixture f;
  load(&f, ROOT "models/llama2-7b.json", ROOT "topologies/dgx-a100-x1.json");
  double B = 1024, s = 4096, h = 4096, ffn = 11008, L = 32;
  for (int32_t tp = 1; tp <= 2; tp++) {
    psim_sim_result none, op, full;
    llama_recompute(&f, tp, PSIM_RECOMPUTE_NONE, &none);
    llama_recompute(&f, tp, rc, &op);
    llama_recompute(&f, tp, PSIM_RECOMPUTE_FULL, &full);
    double mm = L * 2 * B * s * h * (tp == 1 ? 2 * h + ffn : h + ffn);
    double extra = op.hardware_flops - none.hardware_flops;
    ck_assert_msg(extra >= mm && extra <= 1.03 * mm, "tp %d: recomputed %.6g FLOPs, matmuls %.6g",
                  tp, extra, mm);
    ck_assert_double_lt(none.iteration_time_s, op.iteration_time_s);
    ck_assert_double_lt(op.iteration_time_s, full.iteration_time_s);
    ck_assert_double_lt(full.memory.activations, op.memory.activations);
    ck_assert_double_lt(op.memory.activations, none.memory.activations);
    psim_sim_result_destroy(&none);
    psim_sim_result_destroy(&op);
    psim_sim_result_destroy(&full);
  }
  unload(&f);
}
END_TEST

/* mo simulated on f three times into r: no recompute, full, full of every N-th block. */
static void simulate_recompute_trio(fixture *f, psim_megatron_opts mo, int32_t every,
                                    psim_sim_result r[3]) {
  for (int k = 0; k < 3; k++) {
    mo.recompute = k == 0 ? PSIM_RECOMPUTE_NONE : PSIM_RECOMPUTE_FULL;
    mo.recompute_every = k == 2 ? every : 0;
    psim_strategy s;
    psim_strategy_init(&s);
    ck_assert(psim_strategy_megatron(&f->m, &f->c, &mo, &s) == PSIM_OK);
    psim_sim_options o;
    psim_sim_options_init(&o);
    ck_assert_msg(psim_simulate(&f->m, &f->c, &s, &o, &r[k]) == PSIM_OK, "%s",
                  psim_error_message());
    psim_strategy_destroy(&s);
  }
}

/* Earliest start of the compute tasks of pass `pass` of micro-batch mu on stage st (when
 * `last` is false), or the latest end of the backward of stage st's first op (when true). */
static double stage_time(const psim_sim_result *r, int32_t st, int pass, int32_t mu, bool last) {
  const psim_taskgraph *g = r->graph;
  int32_t first = -1;
  for (int32_t i = 0; i < g->n_tasks; i++)
    if (g->info[i].stage == st && g->info[i].kind == PSIM_TASK_COMPUTE && g->info[i].op >= 0 &&
        (first < 0 || g->info[i].op < first))
      first = g->info[i].op;
  double t = last ? 0 : INFINITY;
  for (int32_t i = 0; i < g->n_tasks; i++) {
    const psim_task_info *in = &g->info[i];
    if (in->stage != st || in->kind != PSIM_TASK_COMPUTE || in->pass != pass || in->micro != mu)
      continue;
    if (!last)
      t = fmin(t, r->schedule->start_s[i]);
    else if (in->op == first)
      t = fmax(t, r->schedule->end_s[i]);
  }
  return t;
}

/* A backward slot's recompute waits for the gradient from the next stage (Megatron-LM
 * receives it before backward_step, whose autograd call runs the checkpointed forward):
 * on stage 0 of GPT-1.3B at tp 4 x pp 2, each micro-batch's recompute starts after stage
 * 1's backward of its first op has ended. Failed before the gate (comm.c gate_recompute):
 * the recompute ran right after the forward, in the pipeline bubble (invariant suite seed
 * 4305970014: full recompute faster than selective). */
START_TEST(recompute_waits_for_the_next_stages_gradient) {
  fixture f;
  load(&f, ROOT "models/gpt-1.3b.json", ROOT "topologies/dgx-a100-x1.json");
  for (int k = 0; k < 2; k++) {
    psim_megatron_opts mo;
    psim_megatron_opts_init(&mo);
    mo.tp = 4;
    mo.pp = 2;
    mo.dp = 1;
    mo.micro_batch = 4;
    mo.recompute = k == 0 ? PSIM_RECOMPUTE_FULL : PSIM_RECOMPUTE_SELECTIVE;
    psim_sim_result r;
    run(&f, &mo, false, &r);
    for (int32_t mu = 0; mu < 2; mu++) {
      double rec = stage_time(&r, 0, PSIM_TP_RECOMPUTE, mu, false);
      double grad = stage_time(&r, 1, PSIM_TP_BWD, mu, true);
      ck_assert_msg(isfinite(rec) && grad > 0, "%s mb %d: no recompute or backward",
                    k ? "selective" : "full", mu);
      ck_assert_msg(rec >= grad, "%s mb %d: recompute at %.9g s, gradient ready at %.9g s",
                    k ? "selective" : "full", mu, rec, grad);
    }
    psim_sim_result_destroy(&r);
  }
  unload(&f);
}
END_TEST

/* Full recompute of every second block only (recompute_every 2: torchtitan's
 * layer-level selective AC, selective_ac_option "2"): the forward FLOPs recomputed
 * are half of full recompute's on LLaMA-2 7B's 32 blocks, the iteration lies
 * between none and full, and a strategy file asking for it without "full" is
 * refused. Failed before the key existed (all blocks recomputed, or the key
 * refused). */
START_TEST(full_recompute_of_every_second_block) {
  fixture f;
  load(&f, ROOT "models/llama2-7b.json", ROOT "topologies/dgx-a100-x1.json");
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = 1, mo.pp = 1, mo.dp = 8, mo.micro_batch = 4;
  psim_sim_result r[3];
  simulate_recompute_trio(&f, mo, 2, r);
  double all = r[1].hardware_flops - r[0].hardware_flops;
  double half = r[2].hardware_flops - r[0].hardware_flops;
  ck_assert_msg(all > 0 && fabs(half / (0.5 * all) - 1) < 1e-9, "every 2nd: %.9g, full %.9g", half,
                all);
  ck_assert_double_lt(r[0].iteration_time_s, r[2].iteration_time_s);
  ck_assert_double_lt(r[2].iteration_time_s, r[1].iteration_time_s);
  ck_assert_double_lt(r[1].memory.activations, r[2].memory.activations);
  ck_assert_double_lt(r[2].memory.activations, r[0].memory.activations);
  for (int k = 0; k < 3; k++)
    psim_sim_result_destroy(&r[k]);
  cJSON *doc = cJSON_Parse("{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\","
                           "\"tp\":1,\"pp\":1,\"dp\":8,\"recompute\":\"selective\","
                           "\"recompute_every\":2}");
  psim_strategy s;
  psim_strategy_init(&s);
  ck_assert_int_eq(psim_strategy_from_json("s", doc, &f.m, &f.c, &s), PSIM_EINPUT);
  psim_error_clear();
  psim_strategy_destroy(&s);
  cJSON_Delete(doc);
  unload(&f);
}
END_TEST

/* recompute_every counts each pipeline rank's blocks, as torchtitan's process-wide
 * _layer_sac_count does (torchtitan v0.2.2 torchtitan/distributed/activation_checkpoint.py):
 * GPT-1.3B's 24 blocks on pp 8 are 3 per rank, so every 2nd recomputes one block per rank, 8
 * of 24, a third of full recompute's forward FLOPs (counted over the whole model, blocks 2,
 * 4, ..., 24, it would be half). Failed before session 15 (ratio 0.5). */
START_TEST(every_nth_block_counts_per_pipeline_rank) {
  fixture f;
  load(&f, ROOT "models/gpt-1.3b.json", ROOT "topologies/dgx-a100-x1.json");
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = 1, mo.pp = 8, mo.dp = 1, mo.micro_batch = 1;
  psim_sim_result r[3];
  simulate_recompute_trio(&f, mo, 2, r);
  double all = r[1].hardware_flops - r[0].hardware_flops;
  double some = r[2].hardware_flops - r[0].hardware_flops;
  ck_assert_msg(all > 0 && fabs(some / all - 1.0 / 3) < 1e-9, "every 2nd / full: %.9g", some / all);
  for (int k = 0; k < 3; k++)
    psim_sim_result_destroy(&r[k]);
  unload(&f);
}
END_TEST

/* GPT-1.3B (24 layers) at tp 2, pp 2, dp 2 with 2 virtual stages: chunks of 6 layers,
 * 8 micro-batches; recompute mode, method and layer count as given. */
static void gpt_chunks(fixture *f, psim_recompute rc, psim_recompute_method method, int32_t n,
                       psim_sim_result *r) {
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = mo.pp = mo.dp = 2;
  mo.virtual_stages = 2;
  mo.schedule = PSIM_SCHED_INTERLEAVED;
  mo.recompute = rc;
  mo.recompute_method = method;
  mo.recompute_layers = n;
  run(f, &mo, true, r);
}

static void same_bits(const psim_sim_result *a, const psim_sim_result *b, const char *what) {
  const double x[] = {a->iteration_time_s, a->hardware_flops,  a->memory.activations,
                      a->memory.peak,      a->memory.weights,  a->memory.optimizer,
                      a->compute_s,        a->memory.gradients};
  const double y[] = {b->iteration_time_s, b->hardware_flops,  b->memory.activations,
                      b->memory.peak,      b->memory.weights,  b->memory.optimizer,
                      b->compute_s,        b->memory.gradients};
  for (size_t i = 0; i < sizeof x / sizeof *x; i++)
    ck_assert_msg(memcmp(&x[i], &y[i], sizeof x[i]) == 0, "%s: field %zu %.17g != %.17g", what, i,
                  x[i], y[i]);
}

/* Megatron-Core's --recompute-method block N recomputes the first N layers of each model chunk
 * (megatron/core/recompute.py, Megatron-LM d98e8a6): N = 0 is no recomputation and N = the
 * chunk's 6 layers full recomputation, to the bit; each layer recomputed adds its forward
 * FLOPs (extra(N) = N/6 extra(6), exactly up to rounding), the time does not fall and the
 * activations do not grow as N rises, and fall overall. uniform N recomputes every layer (the
 * FLOPs of full) in groups of N; uniform 1 is full. */
START_TEST(block_recompute_spans_none_to_full) {
  fixture f;
  load(&f, ROOT "models/gpt-1.3b.json", ROOT "topologies/dgx-a100-x1.json");
  psim_sim_result none, full, blk[7], uni;
  gpt_chunks(&f, PSIM_RECOMPUTE_NONE, PSIM_RCM_UNIFORM, 1, &none);
  gpt_chunks(&f, PSIM_RECOMPUTE_FULL, PSIM_RCM_UNIFORM, 1, &full);
  for (int32_t n = 0; n <= 6; n++)
    gpt_chunks(&f, PSIM_RECOMPUTE_FULL, PSIM_RCM_BLOCK, n, &blk[n]);
  same_bits(&blk[0], &none, "block 0 vs none");
  same_bits(&blk[6], &full, "block 6 vs full");
  double per_layer = (full.hardware_flops - none.hardware_flops) / 6;
  ck_assert_double_gt(per_layer, 0);
  for (int32_t n = 1; n <= 6; n++) {
    double extra = blk[n].hardware_flops - none.hardware_flops;
    ck_assert_msg(fabs(extra - n * per_layer) <= 1e-9 * full.hardware_flops,
                  "block %d recomputes %.9g FLOPs, %d layers' %.9g", (int)n, extra, (int)n,
                  n * per_layer);
    ck_assert_msg(blk[n].iteration_time_s >= blk[n - 1].iteration_time_s,
                  "block %d: %.9g s < block %d's %.9g s", (int)n, blk[n].iteration_time_s,
                  (int)n - 1, blk[n - 1].iteration_time_s);
    ck_assert_msg(blk[n].memory.activations <= blk[n - 1].memory.activations,
                  "block %d: %.6g B of activations > block %d's %.6g B", (int)n,
                  blk[n].memory.activations, (int)n - 1, blk[n - 1].memory.activations);
  }
  ck_assert_double_lt(none.iteration_time_s, full.iteration_time_s);
  ck_assert_double_lt(full.memory.activations, none.memory.activations);
  gpt_chunks(&f, PSIM_RECOMPUTE_FULL, PSIM_RCM_UNIFORM, 3, &uni);
  ck_assert_double_eq_tol(uni.hardware_flops, full.hardware_flops, 1e-12 * full.hardware_flops);
  ck_assert_double_lt(uni.memory.activations, none.memory.activations);
  ck_assert_double_ne(uni.memory.activations, full.memory.activations);
  psim_sim_result_destroy(&uni);
  for (int32_t n = 0; n <= 6; n++)
    psim_sim_result_destroy(&blk[n]);
  psim_sim_result_destroy(&none);
  psim_sim_result_destroy(&full);
  unload(&f);
}
END_TEST

/* Bytes the ranks send in gradient and parameter collectives under ZeRO
 * stage `stage` (data parallel over n devices, one micro-batch). */
static double zero_bytes(fixture *f, int32_t n, int32_t stage) {
  psim_strategy s;
  psim_strategy_init(&s);
  ck_assert_msg(psim_strategy_zero(&f->m, &f->c, n, stage, &s) == PSIM_OK, "%s",
                psim_error_message());
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.fold = false;
  psim_build *b = NULL;
  ck_assert_msg(psim_build_graph(&b, &f->m, &f->c, &s, &o) == PSIM_OK, "%s", psim_error_message());
  psim_build_summary sum;
  psim_build_summarise(b, &sum);
  psim_build_free(b);
  psim_strategy_destroy(&s);
  return sum.dp_bytes;
}

/* Rajbhandari et al. 2020, section 7: with gradients and parameters of one
 * dtype (fp32), stage 0's all-reduce sends 2 (n-1) P per rank, stages 1 and 2
 * the same (reduce-scatter + the updated parameters' all-gather), stage 3
 * 1.5x (all-gathers before forward and backward, reduce-scatter). */
START_TEST(zero_traffic_follows_rajbhandari) {
  fixture f;
  load(&f, DATA "tiny-gpt.json", DATA "coll-nvswitch8.json");
  ck_assert_int_eq(f.m.dtype, PSIM_DTYPE_FP32);
  double n = 8, P = f.m.n_params * 4, b[4];
  for (int32_t k = 0; k < 4; k++)
    b[k] = zero_bytes(&f, 8, k);
  ck_assert_double_ge(b[0], 2 * (n - 1) * P); /* tied weights reduce once per use */
  ck_assert_double_eq_tol(b[1], b[0], 1e-9 * b[0]);
  ck_assert_double_eq_tol(b[2], b[0], 1e-9 * b[0]);
  ck_assert_double_eq_tol(b[3], 1.5 * b[0], 1e-9 * b[0]);
  for (int32_t k = 0; k < 3; k++)
    ck_assert_double_ge(b[k + 1], b[k] * (1 - 1e-12));
  unload(&f);
}
END_TEST

/* zero_bytes with HSDP: ZeRO stage `stage` over shard groups of `shard` of the n ranks
 * (psim_strategy.dp_replicate = n / shard); *mem: the static memory of device 0. */
static double hsdp_bytes(fixture *f, int32_t n, int32_t stage, int32_t shard, double *mem) {
  psim_strategy s;
  psim_strategy_init(&s);
  ck_assert_msg(psim_strategy_zero(&f->m, &f->c, n, stage, &s) == PSIM_OK, "%s",
                psim_error_message());
  s.dp_replicate = n / shard;
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.fold = false;
  psim_build *b = NULL;
  ck_assert_msg(psim_build_graph(&b, &f->m, &f->c, &s, &o) == PSIM_OK, "%s", psim_error_message());
  psim_build_summary sum;
  psim_build_summarise(b, &sum);
  psim_build_free(b);
  psim_sim_result r;
  ck_assert(psim_simulate(&f->m, &f->c, &s, &o, &r) == PSIM_OK);
  for (int k = 0; mem && k < 3; k++)
    mem[k] = k == 0 ? r.memory.weights : k == 1 ? r.memory.gradients : r.memory.optimizer;
  psim_sim_result_destroy(&r);
  psim_strategy_destroy(&s);
  return sum.dp_bytes;
}

/* HSDP (torchtitan's dp_replicate x dp_shard, FSDP2's 2-D mesh): over shard groups of c of
 * the n = R c ranks, each rank reduce-scatters its gradients in its group ((c-1)/c of them),
 * all-reduces its 1/c across the R replicas (2 (R-1)/R of 1/c) and, at stage 3, gathers
 * (c-1)/c of the parameters before the forward and again before the backward; at stages 1-2
 * once after the step. X is one rank's reduced bytes (stage 0 sends 2 (n-1)/n X per rank).
 * c = n is ZeRO as before to the bit; c = 1 is plain data parallelism: stage 0's bytes and
 * unsharded memory. Static memory: parameters, gradients and optimizer state / c by stage. */
START_TEST(hsdp_traffic_and_memory_closed_forms) {
  fixture f;
  load(&f, DATA "tiny-gpt.json", DATA "coll-nvswitch8.json");
  double n = 8, b0 = zero_bytes(&f, 8, 0), X = b0 / (2 * (n - 1)), m0[3], m[3];
  hsdp_bytes(&f, 8, 0, 8, m0);
  for (int32_t stage = 1; stage <= 3; stage++) {
    ck_assert(hsdp_bytes(&f, 8, stage, 8, NULL) == zero_bytes(&f, 8, stage));
    double one = hsdp_bytes(&f, 8, stage, 1, m);
    ck_assert_msg(one == b0, "stage %d dp_shard 1: %.17g bytes, plain data parallelism %.17g",
                  stage, one, b0);
    for (int k = 0; k < 3; k++)
      ck_assert_double_eq_tol(m[k], m0[k], 1e-12 * m0[k]);
    double c = 4, R = n / c, rs = (c - 1) / c, ar = 2 * (R - 1) / R / c;
    double want = n * X * (rs + ar + (stage == 3 ? 2 : 1) * rs);
    double got = hsdp_bytes(&f, 8, stage, 4, m);
    ck_assert_msg(fabs(got - want) <= 1e-9 * want, "stage %d dp_shard 4: %.9g bytes, %.9g by form",
                  stage, got, want);
    ck_assert_double_eq_tol(m[2], m0[2] / c, 1e-9 * m0[2]);
    ck_assert_double_eq_tol(m[1], stage >= 2 ? m0[1] / c : m0[1], 1e-9 * m0[1]);
    if (stage < 3)
      ck_assert_double_eq_tol(m[0], m0[0], 1e-9 * m0[0]);
    else { /* 1/c kept plus the gathered units, the same window as sharding over all 8 */
      double m8[3];
      hsdp_bytes(&f, 8, 3, 8, m8);
      ck_assert_double_eq_tol(m[0] - m0[0] / c, m8[0] - m0[0] / n, 1e-9 * m0[0]);
      ck_assert_double_gt(m[0], m8[0]);
    }
  }
  unload(&f);
}
END_TEST

/* The megatron template's dp_shard = dp is today's strategy, every figure to the bit; HSDP
 * folded (tp 1: the chunks form one family of peers) gives --no-fold's figures, and with
 * tp 2 folding is declined rather than approximated (sim/builder/zero.c, sub_family). */
START_TEST(hsdp_template_and_folding) {
  fixture f;
  load(&f, ROOT "models/gpt-1.3b.json", ROOT "topologies/dgx-a100-x2.json");
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.tp = 1, mo.dp = 16, mo.zero_stage = 3, mo.overlap_grad_reduce = true, mo.micro_batch = 2;
  psim_sim_result a, b;
  run(&f, &mo, true, &a);
  mo.dp_shard = 16;
  run(&f, &mo, true, &b);
  ck_assert(a.iteration_time_s == b.iteration_time_s && a.peak_memory_bytes == b.peak_memory_bytes);
  psim_sim_result_destroy(&b);
  for (int32_t tp = 1; tp <= 2; tp++) {
    psim_sim_result fo, un;
    mo.tp = tp, mo.dp = 16 / tp, mo.dp_shard = 8 / tp;
    run(&f, &mo, true, &fo);
    run(&f, &mo, false, &un);
    ck_assert_msg(fo.iteration_time_s == un.iteration_time_s, "tp %d: folded %.17g, unfolded %.17g",
                  tp, fo.iteration_time_s, un.iteration_time_s);
    ck_assert(fo.peak_memory_bytes == un.peak_memory_bytes);
    ck_assert(tp > 1 || fo.folded);
    if (tp == 1) /* the all-reduce across the two nodes' replicas costs time */
      ck_assert(fo.iteration_time_s != a.iteration_time_s);
    psim_sim_result_destroy(&fo);
    psim_sim_result_destroy(&un);
  }
  psim_sim_result_destroy(&a);
  unload(&f);
}
END_TEST

static double update_s(const psim_sim_result *r) {
  double t = 0;
  for (int32_t i = 0; i < r->graph->n_tasks; i++)
    if (r->graph->info[i].pass == PSIM_TP_UPDATE && r->graph->info[i].device == 0)
      t += r->graph->duration_s[i];
  return t;
}

/* On one uncontended node, ZeRO-3 (more traffic, the same compute) is never
 * faster than plain data parallelism but for its sharded optimizer step,
 * both overlapping their gradient reduction with the backward (PyTorch DDP,
 * DeepSpeed's overlap_comm), and a smaller prefetch never makes it faster. */
START_TEST(zero3_not_faster_than_data_parallel) {
  fixture f;
  load(&f, ROOT "models/bert-large.json", ROOT "topologies/dgx-a100-x1.json");
  psim_sim_result r[3];
  for (int32_t k = 0; k < 3; k++) {
    psim_strategy s;
    psim_strategy_init(&s);
    ck_assert(psim_strategy_zero(&f.m, &f.c, 8, k ? 3 : 0, &s) == PSIM_OK);
    s.zero_prefetch = k == 2 ? 0 : s.zero_prefetch;
    s.overlap_grad_reduce = true; /* both overlap their gradient reduction */
    psim_sim_options o;
    psim_sim_options_init(&o);
    o.keep_graph = true;
    ck_assert(psim_simulate(&f.m, &f.c, &s, &o, &r[k]) == PSIM_OK);
    psim_strategy_destroy(&s);
  }
  double t0 = r[0].iteration_time_s - update_s(&r[0]);
  double t3 = r[1].iteration_time_s - update_s(&r[1]);
  ck_assert_double_lt(update_s(&r[1]), update_s(&r[0]));
  ck_assert_msg(t3 >= t0, "ZeRO-3 %.9f s, stage 0 %.9f s (optimizer step left out)", t3, t0);
  ck_assert_double_ge(r[2].iteration_time_s, r[1].iteration_time_s);
  ck_assert_double_lt(r[1].memory.weights, r[0].memory.weights);
  for (int32_t k = 0; k < 3; k++)
    psim_sim_result_destroy(&r[k]);
  unload(&f);
}
END_TEST

/* Static bytes per parameter on one device, Megatron-Core's distributed
 * optimizer table (docs/source/api-guide/dist_optimizer.md): fp32 4 + 4 + 8,
 * fp16 2 + 2 + 16, bf16 2 + 4 + 12; FP8 training keeps bf16 parameters and
 * fp32 main gradients (Transformer Engine), so 18 as bf16, not fp32's 16. */
START_TEST(bytes_per_parameter_by_dtype) {
  fixture f;
  load(&f, DATA "sim-chain.json", DATA "sim-fast4.json");
  const psim_dtype dt[4] = {PSIM_DTYPE_FP32, PSIM_DTYPE_FP16, PSIM_DTYPE_BF16, PSIM_DTYPE_FP8};
  const double per_param[4] = {16, 20, 18, 18}, weights[4] = {4, 2, 2, 2};
  for (int i = 0; i < 4; i++) {
    f.m.dtype = dt[i];
    psim_megatron_opts mo;
    psim_megatron_opts_init(&mo);
    mo.tp = mo.pp = mo.dp = 1;
    psim_sim_result r;
    run(&f, &mo, true, &r);
    const psim_mem_breakdown *mb = &r.memory;
    double n = f.m.n_params, total = mb->weights + mb->gradients + mb->optimizer;
    ck_assert_double_eq_tol(total, per_param[i] * n, 1e-9 * total);
    ck_assert_double_eq_tol(mb->weights, weights[i] * n, 1e-9 * total);
    psim_sim_result_destroy(&r);
  }
  unload(&f);
}
END_TEST

/* The pipeline sends of r's graph whose sender waits for them (an edge to a compute task
 * on the sender): *cross = those whose waiting kernel runs another direction (pass) than the
 * kernel the send follows (its producer on the sender). */
static int32_t waited_sends(const psim_sim_result *r, int32_t *cross) {
  const psim_taskgraph *g = r->graph;
  int32_t *producer = malloc(sizeof *producer * (size_t)g->n_tasks), n = 0;
  ck_assert_ptr_nonnull(producer);
  for (int32_t t = 0; t < g->n_tasks; t++)
    producer[t] = -1;
  for (int32_t t = 0; t < g->n_tasks; t++)
    for (int32_t i = g->succ_first[t]; i < g->succ_first[t + 1]; i++)
      if (g->info[t].kind == PSIM_TASK_COMPUTE && g->info[g->succ[i]].kind == PSIM_TASK_TRANSFER &&
          g->info[t].device == g->info[g->succ[i]].device)
        producer[g->succ[i]] = t;
  *cross = 0;
  for (int32_t t = 0; t < g->n_tasks; t++) {
    if (g->info[t].kind != PSIM_TASK_TRANSFER || g->info[t].pass != PSIM_TP_COMM_PP)
      continue;
    for (int32_t i = g->succ_first[t]; i < g->succ_first[t + 1]; i++) {
      const psim_task_info *w = &g->info[g->succ[i]];
      if (w->kind != PSIM_TASK_COMPUTE || w->device != g->info[t].device) /* the sender */
        continue;
      n++;
      ck_assert_int_ge(producer[t], 0);
      *cross += w->pass != g->info[producer[t]].pass;
    }
  }
  free(producer);
  return n;
}

/* Megatron-Core's interleaved schedule with overlap_p2p_comm (the megatron-core stack's
 * pp_overlap; megatron/core/pipeline_parallel/schedules.py) isends each pipeline send and
 * waits for it before the sender's next step in the same direction, so in the steady 1F1B
 * state a send overlaps one step of the other direction: every waiting kernel runs the
 * send's own direction, and with links slow enough for a send to last about a kernel the
 * iteration is shorter than the same stack's with pp_overlap off. Blocking sends
 * (megatron-lm-2021, or pp_overlap off, or 1F1B without interleaving) hold the next kernel,
 * of the other direction in the steady state. Before, every pipeline send blocked. */
START_TEST(interleaved_sends_overlap_under_megatron_core) {
  fixture f;
  load(&f, DATA "sim-chain.json", DATA "sim-fast4.json");
  for (int32_t i = 0; i < f.c.n_links; i++)
    f.c.links[i].bw = 2e9;
  psim_megatron_opts mo;
  psim_megatron_opts_init(&mo);
  mo.pp = 2;
  mo.dp = 2;
  mo.micro_batch = 8; /* 4 micro-batches per replica */
  const char *stacks[3] = {"megatron-core", "megatron-core", "megatron-lm-2021"};
  double iter[3];
  for (int k = 0; k < 3; k++)
    for (int il = 0; il <= 1; il++) {
      ck_assert_int_eq(psim_stack_builtin(stacks[k], &f.c.stack), PSIM_OK);
      f.c.stack.pp_overlap = f.c.stack.pp_overlap && k == 0;
      mo.schedule = il ? PSIM_SCHED_INTERLEAVED : PSIM_SCHED_1F1B;
      mo.virtual_stages = il ? 2 : 1;
      psim_sim_result r;
      psim_sim_result_init(&r);
      run(&f, &mo, false, &r);
      int32_t cross, n = waited_sends(&r, &cross);
      ck_assert_int_gt(n, 0);
      if (k == 0 && il)
        ck_assert_int_eq(cross, 0);
      else
        ck_assert_msg(cross > 0, "%s (pp_overlap %d), interleaved %d: no blocked step", stacks[k],
                      f.c.stack.pp_overlap, il);
      if (il)
        iter[k] = r.iteration_time_s;
      psim_sim_result_destroy(&r);
    }
  ck_assert_msg(iter[0] < iter[1], "interleaved: %.9g s async, %.9g s blocking", iter[0], iter[1]);
  unload(&f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("simulate");
  TCase *tc = tcase_create("closed_forms");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, single_device_is_sum_of_tasks);
  tcase_add_test(tc, gpipe_bubble_fraction);
  tcase_add_test(tc, one_f_one_b_in_flight_activations);
  tcase_add_test(tc, one_f_one_b_same_time_as_gpipe_when_free_comm);
  tcase_add_test(tc, folded_equals_unfolded);
  tcase_add_test(tc, selective_recomputes_the_attention_core);
  tcase_add_test(tc, op_level_sac_recomputes_every_second_matmul);
  tcase_add_test(tc, recompute_waits_for_the_next_stages_gradient);
  tcase_add_test(tc, full_recompute_of_every_second_block);
  tcase_add_test(tc, every_nth_block_counts_per_pipeline_rank);
  tcase_add_test(tc, block_recompute_spans_none_to_full);
  tcase_add_test(tc, zero_traffic_follows_rajbhandari);
  tcase_add_test(tc, zero3_not_faster_than_data_parallel);
  tcase_add_test(tc, hsdp_traffic_and_memory_closed_forms);
  tcase_add_test(tc, hsdp_template_and_folding);
  tcase_add_test(tc, bytes_per_parameter_by_dtype);
  tcase_add_test(tc, interleaved_sends_overlap_under_megatron_core);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
