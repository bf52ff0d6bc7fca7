/* test_grid.c - the Megatron grid (issue 23): its pruning rules never lose the optimum
 * (brute force over every candidate of a small GPT on 16 A100s with little memory), the
 * static memory estimate prunes only candidates that are over memory when simulated,
 * the counts add up, and the space holds interleaving and the distributed optimizer. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "models/generators.h"
#include "search/grid_impl.h"
#include "sim/core/alloc.h"

#define TOPO PSIM_SOURCE_ROOT "/topologies/"
#ifndef ZERO2_MEM_GB
#define ZERO2_MEM_GB 0.2 /* one layer on 16 devices: ZeRO 1 over, 2 fits (0.16-0.25 GB do) */
#endif
#ifndef MOE_MEM_GB
#define MOE_MEM_GB 1.0 /* device memory of the MoE case: ep 1 fits only split tp 2 x pp 4 */
#endif

/* 8 layers, hidden 1024, 16 heads, seq 512, batch 32 on 2 DGX A100 (16 GPUs) whose devices
 * hold mem_gb: static memory alone is ~1.9 GB at tp = pp = 1. */
static void setup_layers(psim_model *m, psim_cluster *c, int32_t layers, double mem_gb) {
  psim_gen_tf_opts g;
  psim_gen_gpt_opts_init(&g);
  g.layers = layers;
  g.hidden = 1024;
  g.heads = 16;
  g.seq = 512;
  g.batch = 32;
  g.vocab = 8192;
  cJSON *j = NULL;
  ck_assert(psim_gen_gpt(&g, &j) == PSIM_OK);
  psim_model_init(m);
  ck_assert_msg(psim_model_from_json("gpt", j, m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(j);
  psim_cluster_init(c);
  ck_assert_msg(psim_cluster_load(TOPO "dgx-a100-x2.json", c) == PSIM_OK, "%s",
                psim_error_message());
  for (int32_t t = 0; t < c->n_types; t++)
    c->types[t].mem_bytes = mem_gb * 1e9;
}

static void setup(psim_model *m, psim_cluster *c, double mem_gb) {
  setup_layers(m, c, 8, mem_gb);
}

static void options(psim_grid_options *o) {
  psim_grid_options_init(o);
  o->try_sequence_parallel_off = true; /* every rule in play */
}

/* Simulates one candidate: its time, or INFINITY when it is refused or over memory. */
static double simulate(const psim_model *m, psim_cluster *c, const psim_megatron_opts *mo,
                       bool *fits) {
  psim_strategy s;
  psim_strategy_init(&s);
  *fits = false;
  if (psim_strategy_megatron(m, c, mo, &s) != PSIM_OK) {
    psim_error_clear();
    return INFINITY;
  }
  psim_sim_result r;
  psim_sim_result_init(&r);
  ck_assert_msg(psim_simulate(m, c, &s, NULL, &r) == PSIM_OK, "%s", psim_error_message());
  *fits = r.fits;
  double t = r.fits ? r.iteration_time_s : INFINITY;
  psim_sim_result_destroy(&r);
  psim_strategy_destroy(&s);
  return t;
}

/* Every candidate simulated (no rule applied) gives the same best time as the grid with its
 * rules; every candidate the static estimate prunes is over memory. */
START_TEST(pruning_keeps_the_optimum) {
  psim_model m;
  psim_cluster c;
  setup(&m, &c, 1.2);
  psim_grid_options o;
  options(&o);
  grid_space sp;
  ck_assert(psim_grid_space_build(&m, &c, &o, 8, &sp) == PSIM_OK);
  double brute = INFINITY, brute3 = INFINITY; /* over ZeRO 0-2, 0-3 */
  int64_t estimated = 0, fitting = 0;
  for (int64_t i = 0; i < sp.n; i++) {
    bool fits;
    double t = simulate(&m, &c, &sp.c[i].mo, &fits);
    brute3 = fmin(brute3, t);
    if (sp.c[i].mo.zero_stage <= 2)
      brute = fmin(brute, t);
    fitting += fits;
    if (sp.c[i].state == GRID_MEM_ESTIMATE) {
      estimated++;
      ck_assert_msg(!fits, "candidate %lld (tp %d pp %d zero %d) fits but was estimated over",
                    (long long)i, sp.c[i].mo.tp, sp.c[i].mo.pp, sp.c[i].mo.zero_stage);
    }
  }
  ck_assert(estimated > 0 && fitting > 0 && isfinite(brute));
  /* ZeRO 0-2: exact (ZeRO 2 is ZeRO 1's time with less memory) */
  psim_grid_result r;
  o.max_zero = 2;
  ck_assert_msg(psim_grid_search(&m, &c, &o, &r) == PSIM_OK, "%s", psim_error_message());
  ck_assert_msg(r.best_sim.iteration_time_s == brute, "grid %.9g s, brute force %.9g s",
                r.best_sim.iteration_time_s, brute);
  psim_grid_result_destroy(&r);
  /* ZeRO 3 only where ZeRO 2 is over: a heuristic (plansim's ZeRO 3 prefetches its weight
   * gathers, ZeRO 1's all-gather after the step is exposed, so ZeRO 3 can be the faster):
   * never worse than 0-2, never better than brute force over 0-3 */
  o.max_zero = 3;
  ck_assert_msg(psim_grid_search(&m, &c, &o, &r) == PSIM_OK, "%s", psim_error_message());
  ck_assert(r.best_sim.iteration_time_s <= brute && r.best_sim.iteration_time_s >= brute3);
  /* the rules saved simulations, and the counts add up */
  ck_assert(r.evaluations < sp.n);
  ck_assert_int_eq(r.total, sp.n + sp.pruned_divisibility);
  ck_assert_int_eq(r.visited + r.pruned_divisibility, r.total);
  ck_assert_int_eq(r.pruned, r.pruned_divisibility + r.pruned_memory_estimate +
                                 r.pruned_memory_implied + r.pruned_dominated + r.pruned_bound +
                                 r.pruned_zero_lower);
  ck_assert_int_eq(r.pruned + r.evaluations + r.refused, r.total);
  ck_assert(r.pruned_memory_implied > 0 && r.pruned_dominated > 0);
  psim_grid_result_destroy(&r);
  psim_grid_space_destroy(&sp);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* Memory where no candidate fits with ZeRO 1 and one does with ZeRO 2 (Megatron-FSDP's
 * optim_grads: the gradients sharded too): the grid finds it (before: max_zero 1, none). */
START_TEST(grid_falls_back_to_zero_2) {
  psim_model m;
  psim_cluster c;
  setup_layers(&m, &c, 1, ZERO2_MEM_GB); /* one layer: pp 1 only */
  psim_grid_options o;
  options(&o);
  o.max_tp = 1; /* data parallelism only: dp 16 */
  o.max_zero = 1;
  psim_grid_result r;
  ck_assert(psim_grid_search(&m, &c, &o, &r) == PSIM_EFAILED);
  psim_error_clear();
  psim_grid_result_destroy(&r);
  options(&o); /* the default ZeRO stages */
  o.max_tp = 1;
  ck_assert_msg(psim_grid_search(&m, &c, &o, &r) == PSIM_OK, "%s", psim_error_message());
  ck_assert_int_eq(r.best.zero_stage, 2);
  ck_assert_int_gt(r.pruned_zero_lower, 0);
  psim_grid_result_destroy(&r);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* Megatron-Core's rules (grid_space.c): interleaving needs pp > 1, layers % (pp vp) == 0 and
 * micro-batches % pp == 0; sequence parallelism only at tp > 1; ZeRO only at dp > 1. */
START_TEST(space_follows_megatron_rules) {
  psim_model m;
  psim_cluster c;
  setup(&m, &c, 80);
  psim_grid_options o;
  options(&o);
  grid_space sp;
  ck_assert(psim_grid_space_build(&m, &c, &o, 8, &sp) == PSIM_OK);
  bool interleaved = false, zero = false;
  for (int64_t i = 0; i < sp.n; i++) {
    const psim_megatron_opts *mo = &sp.c[i].mo;
    int64_t n_micro = 32 / ((int64_t)mo->micro_batch * mo->dp);
    ck_assert(32 % ((int64_t)mo->micro_batch * mo->dp) == 0);
    if (mo->virtual_stages > 1) {
      interleaved = true;
      ck_assert(mo->pp > 1 && 8 % (mo->pp * mo->virtual_stages) == 0 && n_micro % mo->pp == 0);
    }
    ck_assert(!mo->sequence_parallel || mo->tp > 1);
    ck_assert(mo->zero_stage == 0 || mo->dp > 1);
    zero = zero || mo->zero_stage == 1;
    ck_assert(16 % mo->tp == 0 && 4096 % mo->tp == 0);
  }
  ck_assert(interleaved && zero);
  psim_grid_space_destroy(&sp);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* The FSDP space (torchtitan v0.2.2, grid_space.c): its rules hold for every candidate, it
 * holds FSDP with tp and pp, GPipe and interleaving, and its pruning (GPipe holds at least
 * 1F1B's activations) keeps the optimum found by simulating every candidate. */
START_TEST(fsdp_space_follows_torchtitan_rules) {
  psim_model m;
  psim_cluster c;
  setup(&m, &c, 1.2);
  psim_grid_options o;
  psim_grid_options_init(&o);
  o.space = PSIM_GRID_FSDP;
  grid_space sp;
  ck_assert(psim_grid_space_build(&m, &c, &o, 8, &sp) == PSIM_OK);
  bool gpipe = false, interleaved = false, fsdp_tp_pp = false;
  double brute = INFINITY;
  for (int64_t i = 0; i < sp.n; i++) {
    const psim_megatron_opts *mo = &sp.c[i].mo;
    ck_assert(mo->zero_stage == 0 || mo->zero_stage == 3);
    ck_assert(mo->zero_stage == 3 || mo->dp == 1 || (mo->tp == 1 && mo->pp == 1));
    ck_assert(mo->sequence_parallel == (mo->tp > 1) && mo->overlap_grad_reduce == (mo->dp > 1));
    ck_assert(mo->recompute != PSIM_RECOMPUTE_SELECTIVE && 512 % (2 * mo->tp) == 0);
    gpipe = gpipe || mo->schedule == PSIM_SCHED_GPIPE;
    interleaved = interleaved || mo->virtual_stages > 1;
    fsdp_tp_pp = fsdp_tp_pp || (mo->zero_stage == 3 && mo->tp > 1 && mo->pp > 1);
    bool fits;
    brute = fmin(brute, simulate(&m, &c, mo, &fits));
  }
  ck_assert(gpipe && interleaved && fsdp_tp_pp && isfinite(brute));
  psim_grid_result r;
  ck_assert_msg(psim_grid_search(&m, &c, &o, &r) == PSIM_OK, "%s", psim_error_message());
  ck_assert_msg(r.best_sim.iteration_time_s == brute, "grid %.9g s, brute force %.9g s",
                r.best_sim.iteration_time_s, brute);
  ck_assert(r.evaluations < sp.n);
  psim_grid_result_destroy(&r);
  psim_grid_space_destroy(&sp);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* A small MoE (4 layers, 16 experts of 1024 x 4096, top-2) on 16 A100s with little memory:
 * the space lists ep over the divisors of the experts (etp x ep dividing the stage), the
 * grid's best equals brute force over that space, and it is an ep > 1 layout, faster than
 * every ep 1 layout (those fit only with the experts split over tp 2 x pp 4). */
START_TEST(grid_picks_expert_parallelism_where_it_pays) {
  psim_gen_tf_opts g;
  psim_gen_moe_opts_init(&g);
  g.layers = 4, g.hidden = 1024, g.heads = 16, g.seq = 512, g.batch = 32, g.vocab = 8192;
  g.experts = 16, g.top_k = 2;
  cJSON *j = NULL;
  ck_assert(psim_gen_moe(&g, &j) == PSIM_OK);
  psim_model m;
  psim_model_init(&m);
  ck_assert_msg(psim_model_from_json("moe", j, &m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(j);
  psim_cluster c;
  psim_cluster_init(&c);
  ck_assert(psim_cluster_load(TOPO "dgx-a100-x2.json", &c) == PSIM_OK);
  for (int32_t t = 0; t < c.n_types; t++)
    c.types[t].mem_bytes = MOE_MEM_GB * 1e9;
  psim_grid_options o;
  psim_grid_options_init(&o);
  o.max_tp = 2, o.n_micro_batches = 1, o.try_recompute = false, o.max_virtual_stages = 1;
  o.prune_by_estimate = false; /* brute force: every candidate simulated */
  o.max_zero = 2;              /* ZeRO 3 is a heuristic fallback (pruning_keeps_the_optimum) */
  grid_space sp;
  ck_assert(psim_grid_space_build(&m, &c, &o, 2, &sp) == PSIM_OK);
  double brute = INFINITY, brute_ep1 = INFINITY;
  bool ep_listed[17] = {false};
  for (int64_t i = 0; i < sp.n; i++) {
    const psim_megatron_opts *mo = &sp.c[i].mo;
    int32_t etp = mo->etp > 0 ? mo->etp : mo->tp;
    ck_assert(16 % mo->ep == 0 && (mo->tp * mo->cp * mo->dp) % (etp * mo->ep) == 0);
    ck_assert(mo->cp == 1); /* seq 512 < PSIM_GRID_CP_MIN_SEQ */
    ep_listed[mo->ep] = true;
    bool fits;
    double t = simulate(&m, &c, mo, &fits);
    brute = fmin(brute, t);
    if (mo->ep == 1)
      brute_ep1 = fmin(brute_ep1, t);
  }
  ck_assert(ep_listed[1] && ep_listed[2] && ep_listed[4] && ep_listed[8] && ep_listed[16]);
  ck_assert_msg(isfinite(brute) && brute < brute_ep1, "brute %g s, at ep 1 %g s", brute, brute_ep1);
  o.prune_by_estimate = true;
  psim_grid_result r;
  ck_assert_msg(psim_grid_search(&m, &c, &o, &r) == PSIM_OK, "%s", psim_error_message());
  ck_assert_msg(r.found && r.best_sim.iteration_time_s == brute, "grid %.9g s, brute %.9g s",
                r.best_sim.iteration_time_s, brute);
  ck_assert_int_gt(r.best.ep, 1);
  ck_assert_int_eq(r.total, sp.n + sp.pruned_divisibility);
  psim_grid_result_destroy(&r);
  psim_grid_space_destroy(&sp);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* Context parallelism is listed only for sequences of PSIM_GRID_CP_MIN_SEQ tokens or more,
 * with cp dividing the stage's devices and seq % (2 cp) == 0 (arguments.py); a dense model
 * gets ep 1 only. */
/* A GPT of `layers` layers (width 1024, 16 heads, batch 16) on 2 DGX A100 (16 GPUs). */
static void gpt_on_16(int32_t layers, int64_t seq, psim_model *m, psim_cluster *c) {
  psim_gen_tf_opts g;
  psim_gen_gpt_opts_init(&g);
  g.layers = layers, g.hidden = 1024, g.heads = 16, g.seq = seq, g.batch = 16, g.vocab = 8192;
  cJSON *j = NULL;
  ck_assert(psim_gen_gpt(&g, &j) == PSIM_OK);
  psim_model_init(m);
  ck_assert(psim_model_from_json("gpt", j, m) == PSIM_OK);
  cJSON_Delete(j);
  psim_cluster_init(c);
  ck_assert(psim_cluster_load(TOPO "dgx-a100-x2.json", c) == PSIM_OK);
}

static int32_t max_cp_listed(int64_t seq) {
  psim_model m;
  psim_cluster c;
  gpt_on_16(4, seq, &m, &c);
  psim_grid_options o;
  psim_grid_options_init(&o);
  grid_space sp;
  ck_assert(psim_grid_space_build(&m, &c, &o, 8, &sp) == PSIM_OK);
  int32_t max_cp = 0;
  for (int64_t i = 0; i < sp.n; i++) {
    const psim_megatron_opts *mo = &sp.c[i].mo;
    ck_assert(mo->ep == 1 && mo->etp == 0);
    ck_assert(mo->tp * mo->cp * mo->pp * mo->dp == 16 && seq % (2 * mo->cp) == 0);
    max_cp = mo->cp > max_cp ? mo->cp : max_cp;
  }
  psim_grid_space_destroy(&sp);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
  return max_cp;
}

START_TEST(grid_lists_context_parallelism_for_long_sequences) {
  ck_assert_int_eq(max_cp_listed(PSIM_GRID_CP_MIN_SEQ / 2), 1);
  ck_assert_int_eq(max_cp_listed(PSIM_GRID_CP_MIN_SEQ), 16);
}
END_TEST

/* Uneven first/last stages (grid_space.c uneven_split): a 10-layer GPT on 16 GPUs lists pp 4,
 * which does not divide the layers: first 2, middle 3 + 3, last 2 (the middle stages at
 * ceil(10 / pp), the first and last the rest: Megatron-Core's --decoder-first/last-pipeline-
 * num-layers, the middle layers dividing evenly by pp - 2), without interleaving, and the
 * template expands every one; pp 8 (middle 2 x 6 > 10) is not listed. Before, pp had to
 * divide the layers: pp 1 and 2 only. */
START_TEST(grid_lists_uneven_stages) {
  psim_model m;
  psim_cluster c;
  gpt_on_16(10, 256, &m, &c);
  psim_grid_options o;
  options(&o);
  grid_space sp;
  ck_assert(psim_grid_space_build(&m, &c, &o, 8, &sp) == PSIM_OK);
  int32_t seen = 0;
  for (int64_t i = 0; i < sp.n; i++) {
    const psim_megatron_opts *mo = &sp.c[i].mo;
    if (10 % mo->pp == 0) {
      ck_assert(mo->first_stage_layers == 0 && mo->last_stage_layers == 0);
      continue;
    }
    int32_t mid = (10 + mo->pp - 1) / mo->pp;
    ck_assert_int_eq(mo->virtual_stages, 1);
    ck_assert_int_eq(mo->first_stage_layers + mo->last_stage_layers + mid * (mo->pp - 2), 10);
    ck_assert(mo->first_stage_layers >= 1 && mo->last_stage_layers <= mid);
    ck_assert_int_eq(mo->pp, 4);
    seen++;
    psim_strategy s;
    psim_strategy_init(&s);
    ck_assert_msg(psim_strategy_megatron(&m, &c, mo, &s) == PSIM_OK, "pp %d: %s", mo->pp,
                  psim_error_message());
    psim_strategy_destroy(&s);
  }
  ck_assert_int_gt(seen, 0);
  psim_grid_space_destroy(&sp);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("grid");
  TCase *t = tcase_create("grid");
  tcase_set_timeout(t, 300);
  tcase_add_test(t, pruning_keeps_the_optimum);
  tcase_add_test(t, grid_falls_back_to_zero_2);
  tcase_add_test(t, space_follows_megatron_rules);
  tcase_add_test(t, fsdp_space_follows_torchtitan_rules);
  tcase_add_test(t, grid_picks_expert_parallelism_where_it_pays);
  tcase_add_test(t, grid_lists_context_parallelism_for_long_sequences);
  tcase_add_test(t, grid_lists_uneven_stages);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
