/* test_grid.c - the Megatron grid (issue 23): its pruning rules never lose the optimum
 * (brute force over every candidate of a small GPT on 16 A100s with little memory), the
 * static memory estimate prunes only candidates that are over memory when simulated,
 * the counts add up, and the space holds interleaving and the distributed optimizer; its
 * time budget counts CPU time: a search stopped (SIGSTOP) for longer than its budget still
 * gets the whole budget of CPU once continued (under the wall clock it stopped at its first
 * check after the pause). */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "models/generators.h"
#include "search/budget.h"
#include "search/grid_impl.h"
#include "sim/core/alloc.h"
#include "sim/ir/stack.h"
#include "topologies/presets.h"

#define TOPO PSIM_SOURCE_ROOT "/topologies/"
#ifndef ZERO2_MEM_GB
#define ZERO2_MEM_GB 0.2 /* one layer on 16 devices: ZeRO 1 over, 2 fits (0.16-0.25 GB do) */
#endif
#ifndef ZERO2_MEM8_GB
#define ZERO2_MEM8_GB 0.8 /* 8 layers on 16 devices: the fastest that fits needs ZeRO 2 */
#endif
#ifndef BLOCK_MEM_GB
#define BLOCK_MEM_GB                                                                               \
  0.52 /* FlashAttention GPT, 8 layers: block 1 the fastest that fits                              \
          (0.50-0.55 GB: 0.02915 s against 0.03091 s without block) */
#endif
#ifndef PARAM_GATHER_MEM_GB
#define PARAM_GATHER_MEM_GB 1.2 /* the pruning case's memory: ZeRO 1 among the fastest */
#endif
#ifndef MOE_MEM_GB
#define MOE_MEM_GB 1.0 /* device memory of the MoE case: ep 1 fits only split tp 2 x pp 4 */
#endif

/* A GPT of hidden 1024, 16 heads, seq 512 on 2 DGX A100 (16 GPUs) whose devices hold mem_gb
 * (0: as shipped). */
static void setup_gpt(psim_model *m, psim_cluster *c, int32_t layers, int64_t batch,
                      double mem_gb) {
  psim_gen_tf_opts g;
  psim_gen_gpt_opts_init(&g);
  g.layers = layers;
  g.hidden = 1024;
  g.heads = 16;
  g.seq = 512;
  g.batch = batch;
  g.vocab = 8192;
  cJSON *j = NULL;
  ck_assert(psim_gen_gpt(&g, &j) == PSIM_OK);
  psim_model_init(m);
  ck_assert_msg(psim_model_from_json("gpt", j, m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(j);
  psim_cluster_init(c);
  ck_assert_msg(psim_cluster_load(TOPO "dgx-a100-x2.json", c) == PSIM_OK, "%s",
                psim_error_message());
  for (int32_t t = 0; mem_gb > 0 && t < c->n_types; t++)
    c->types[t].mem_bytes = mem_gb * 1e9;
}

/* setup_gpt's GPT with FlashAttention (one fused attention op: selective recomputation keeps
 * about what none keeps, no s x s scores either way), 8 layers, batch 32. */
static void setup_flash(psim_model *m, psim_cluster *c, double mem_gb) {
  psim_gen_tf_opts g;
  psim_gen_gpt_opts_init(&g);
  g.layers = 8;
  g.hidden = 1024;
  g.heads = 16;
  g.seq = 512;
  g.batch = 32;
  g.vocab = 8192;
  g.flash = true;
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

/* 8 layers, batch 32, devices of mem_gb: static memory alone is ~1.9 GB at tp = pp = 1. */
static void setup_layers(psim_model *m, psim_cluster *c, int32_t layers, double mem_gb) {
  setup_gpt(m, c, layers, 32, mem_gb);
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

/* setup's GPT on devices of mem_gb, the default options with ZeRO 0-2 (exact: no fallback to
 * ZeRO 3, pruning_keeps_the_optimum), and their space. */
static void zero2_space(psim_model *m, psim_cluster *c, double mem_gb, psim_grid_options *o,
                        grid_space *sp) {
  setup(m, c, mem_gb);
  psim_grid_options_init(o);
  o->max_zero = 2;
  ck_assert(psim_grid_space_build(m, c, o, 8, sp) == PSIM_OK);
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

/* The best-first order (grid_order.c) on a memory-bound case: at 0.8 GB per device the fastest
 * candidate that fits needs ZeRO 2 (ZeRO 0-1 are at least 12% slower). Without a budget the
 * grid's best equals brute force over the whole space in either order (the estimates order,
 * they prune nothing), and best-first reaches it in fewer simulations than the classic order,
 * which is what a time budget at 1,024 GPUs needs. */
START_TEST(best_first_order_keeps_the_optimum_and_reaches_it_sooner) {
  psim_model m;
  psim_cluster c;
  psim_grid_options o;
  grid_space sp;
  zero2_space(&m, &c, ZERO2_MEM8_GB, &o, &sp);
  double brute = INFINITY, brute01 = INFINITY;
  for (int64_t i = 0; i < sp.n; i++) {
    if (sp.c[i].state == GRID_MEM_ESTIMATE) /* over memory (pruning_keeps_the_optimum) */
      continue;
    bool fits;
    double t = simulate(&m, &c, &sp.c[i].mo, &fits);
    brute = fmin(brute, t);
    brute01 = sp.c[i].mo.zero_stage < 2 ? fmin(brute01, t) : brute01;
  }
  ck_assert_msg(isfinite(brute) && brute < brute01, "not memory-bound: %g, ZeRO 0-1 %g", brute,
                brute01);
  int64_t found_at[2];
  for (int k = 0; k < 2; k++) {
    o.best_first = k == 0;
    psim_grid_result r;
    ck_assert_msg(psim_grid_search(&m, &c, &o, &r) == PSIM_OK, "%s", psim_error_message());
    ck_assert_msg(r.best_sim.iteration_time_s == brute, "%s: grid %.9g s, brute force %.9g s",
                  k == 0 ? "best-first" : "classic", r.best_sim.iteration_time_s, brute);
    ck_assert_int_eq(r.best.zero_stage, 2);
    found_at[k] = r.curve[r.n_curve - 1].evaluation;
    psim_grid_result_destroy(&r);
  }
  ck_assert_msg(found_at[0] < found_at[1], "best-first at simulation %lld, classic at %lld",
                (long long)found_at[0], (long long)found_at[1]);
  psim_grid_space_destroy(&sp);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* Block recomputation (grid_space.c, Megatron-Core --recompute-method block): where the
 * fastest plan that fits recomputes the first N < chunk layers of each chunk (BLOCK_MEM_GB),
 * the grid, in either order, finds brute force's best over every candidate (ZeRO 0-2: exact,
 * pruning_keeps_the_optimum), a block plan faster than every plan without block; the space
 * holds block N for the powers of two below the chunk's layers only; and the memory and
 * dominance rules skip block candidates (fewer simulated than listed). */
START_TEST(grid_finds_block_recomputation) {
  psim_model m;
  psim_cluster c;
  setup_flash(&m, &c, BLOCK_MEM_GB);
  psim_grid_options o;
  psim_grid_options_init(&o);
  o.max_zero = 2;
  grid_space sp;
  ck_assert(psim_grid_space_build(&m, &c, &o, 8, &sp) == PSIM_OK);
  double brute = INFINITY, brute_plain = INFINITY;
  int64_t n_block = 0;
  for (int64_t i = 0; i < sp.n; i++) {
    const psim_megatron_opts *mo = &sp.c[i].mo;
    bool block = mo->recompute == PSIM_RECOMPUTE_FULL && mo->recompute_method == PSIM_RCM_BLOCK;
    if (block) {
      int32_t chunk = 8 / (mo->pp * mo->virtual_stages), n = mo->recompute_layers;
      ck_assert_msg(n >= 1 && n < chunk && (n & (n - 1)) == 0, "block %d of %d layers", (int)n,
                    (int)chunk);
      n_block++;
    }
    bool fits;
    double t = simulate(&m, &c, mo, &fits);
    brute = fmin(brute, t);
    brute_plain = block ? brute_plain : fmin(brute_plain, t);
  }
  ck_assert_msg(isfinite(brute) && brute < brute_plain, "block %g s, without %g s", brute,
                brute_plain);
  for (int k = 0; k < 2; k++) {
    o.best_first = k == 0;
    psim_grid_result r;
    ck_assert_msg(psim_grid_search(&m, &c, &o, &r) == PSIM_OK, "%s", psim_error_message());
    ck_assert_msg(r.best_sim.iteration_time_s == brute, "%s: grid %.9g s, brute force %.9g s",
                  k == 0 ? "best-first" : "classic", r.best_sim.iteration_time_s, brute);
    ck_assert(r.best.recompute == PSIM_RECOMPUTE_FULL && r.best.recompute_method == PSIM_RCM_BLOCK);
    ck_assert_int_lt(r.evaluations, sp.n);
    ck_assert_int_gt(r.pruned_memory_implied + r.pruned_dominated, 0);
    psim_grid_result_destroy(&r);
  }
  ck_assert_int_gt(n_block, 0);
  /* without block candidates: the best is the plain one */
  o.try_recompute_block = false;
  psim_grid_result r;
  ck_assert_msg(psim_grid_search(&m, &c, &o, &r) == PSIM_OK, "%s", psim_error_message());
  ck_assert_msg(r.best_sim.iteration_time_s == brute_plain, "no block: grid %.9g s, brute %.9g s",
                r.best_sim.iteration_time_s, brute_plain);
  psim_grid_result_destroy(&r);
  psim_grid_space_destroy(&sp);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* Megatron-Core's rules (grid_space.c): interleaving needs pp > 1, layers % (pp vp) == 0 and
 * micro-batches % pp == 0; sequence parallelism only at tp > 1; ZeRO only at dp > 1; the
 * gradient-reduce overlap both ways at dp > 1; with it, at ZeRO 1-2, the parameter-gather
 * overlap both ways; none of them nor block recomputation in a classic candidate. */
START_TEST(space_follows_megatron_rules) {
  psim_model m;
  psim_cluster c;
  setup(&m, &c, 80);
  psim_grid_options o;
  options(&o);
  grid_space sp;
  ck_assert(psim_grid_space_build(&m, &c, &o, 8, &sp) == PSIM_OK);
  bool interleaved = false, zero = false;
  int64_t overlap = 0, at_dp = 0, param_gather = 0, zero12 = 0;
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
    ck_assert(!mo->overlap_grad_reduce || (mo->dp > 1 && !sp.c[i].classic));
    ck_assert(mo->recompute_method != PSIM_RCM_BLOCK || !sp.c[i].classic);
    /* arguments.py: --overlap-param-gather needs the distributed optimizer (or Megatron-FSDP)
     * and --overlap-grad-reduce; listed at ZeRO 1-2, where the gathers follow the step */
    ck_assert(!mo->overlap_param_gather ||
              (mo->overlap_grad_reduce && (mo->zero_stage == 1 || mo->zero_stage == 2)));
    if (mo->overlap_param_gather) {
      param_gather++;
      continue;
    }
    overlap += mo->overlap_grad_reduce;
    at_dp += mo->dp > 1;
    zero12 += mo->overlap_grad_reduce && (mo->zero_stage == 1 || mo->zero_stage == 2);
  }
  ck_assert(interleaved && zero);
  ck_assert_int_eq(2 * overlap, at_dp); /* dp > 1: both ways */
  ck_assert(param_gather > 0);
  ck_assert_int_eq(param_gather, zero12); /* ZeRO 1-2 with the reduce overlapped: both ways */
  psim_grid_space_destroy(&sp);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* The candidate that differs from x in overlap_param_gather only (x's twin), or -1. */
static int64_t param_gather_twin(const grid_space *sp, const psim_megatron_opts *x) {
  psim_megatron_opts want = *x;
  want.overlap_param_gather = !x->overlap_param_gather;
  for (int64_t j = 0; j < sp->n; j++)
    if (memcmp(&sp->c[j].mo, &want, sizeof want) == 0)
      return j;
  return -1;
}

/* --overlap-param-gather (grid_space.c): every candidate listed with it has its twin without
 * it; simulated over every candidate, the best with it is faster than every plan without it
 * (the ZeRO-1 gathers after the step are exposed, overlapped they hide behind the first
 * forward), and the grid, in either order, returns brute force's best, with the overlap.
 * Prints how much faster and slower the overlap makes each twin pair (grid_space.c's
 * header quotes it). */
START_TEST(grid_picks_overlap_param_gather_where_it_pays) {
  psim_model m;
  psim_cluster c;
  psim_grid_options o;
  grid_space sp;
  zero2_space(&m, &c, PARAM_GATHER_MEM_GB, &o, &sp);
  double *t = psim_calloc((size_t)sp.n, sizeof *t);
  double brute_on = INFINITY, brute_off = INFINITY;
  for (int64_t i = 0; i < sp.n; i++) {
    bool fits;
    t[i] = sp.c[i].state == GRID_MEM_ESTIMATE ? INFINITY : simulate(&m, &c, &sp.c[i].mo, &fits);
    if (sp.c[i].mo.overlap_param_gather)
      brute_on = fmin(brute_on, t[i]);
    else
      brute_off = fmin(brute_off, t[i]);
  }
  double faster = 0, slower = 0;
  int64_t pairs = 0, n_faster = 0, n_slower = 0;
  for (int64_t i = 0; i < sp.n; i++) {
    if (!sp.c[i].mo.overlap_param_gather)
      continue;
    int64_t j = param_gather_twin(&sp, &sp.c[i].mo);
    ck_assert_msg(j >= 0, "candidate %lld has no twin without the overlap", (long long)i);
    if (!isfinite(t[i]) || !isfinite(t[j]))
      continue;
    pairs++;
    n_faster += t[i]<t[j], n_slower += t[i]> t[j];
    faster = fmax(faster, 1 - t[i] / t[j]);
    slower = fmax(slower, t[i] / t[j] - 1);
  }
  printf("overlap_param_gather: %lld candidates, %lld twin pairs fit: %lld faster (up to %.1f%%), "
         "%lld slower (up to %.1f%%); best %.9g s with, %.9g s without\n",
         (long long)sp.n, (long long)pairs, (long long)n_faster, 100 * faster, (long long)n_slower,
         100 * slower, brute_on, brute_off);
  ck_assert_msg(pairs > 0 && brute_on < brute_off, "with %g s, without %g s", brute_on, brute_off);
  for (int k = 0; k < 2; k++) {
    o.best_first = k == 0;
    psim_grid_result r;
    ck_assert_msg(psim_grid_search(&m, &c, &o, &r) == PSIM_OK, "%s", psim_error_message());
    ck_assert_msg(r.best_sim.iteration_time_s == brute_on, "%s: grid %.9g s, brute force %.9g s",
                  k == 0 ? "best-first" : "classic", r.best_sim.iteration_time_s, brute_on);
    ck_assert(r.best.overlap_param_gather && r.best.overlap_grad_reduce && r.best.zero_stage >= 1);
    psim_grid_result_destroy(&r);
  }
  /* without the knob: brute force's best without it */
  o.try_overlap_param_gather = false;
  psim_grid_result r;
  ck_assert_msg(psim_grid_search(&m, &c, &o, &r) == PSIM_OK, "%s", psim_error_message());
  ck_assert_msg(r.best_sim.iteration_time_s == brute_off, "off: grid %.9g s, brute %.9g s",
                r.best_sim.iteration_time_s, brute_off);
  ck_assert(!r.best.overlap_param_gather);
  psim_grid_result_destroy(&r);
  psim_free(t);
  psim_grid_space_destroy(&sp);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* The FSDP space (torchtitan v0.2.2, grid_space.c): its rules hold for every candidate, it
 * holds FSDP with tp and pp, GPipe and interleaving, HSDP (shard groups of a node's
 * data-parallel ranks and more, dividing dp, under ZeRO 3 only), async TP at tp > 1 under a
 * compiling stack (torchtitan's enable_async_tensor_parallel needs torch.compile), and its
 * pruning (GPipe holds
 * at least 1F1B's activations; a smaller shard group needs more memory) keeps the optimum
 * found by simulating every candidate. */
START_TEST(fsdp_space_follows_torchtitan_rules) {
  psim_model m;
  psim_cluster c;
  setup(&m, &c, 1.2);
  c.stack.compile = true; /* async TP is tried (torchtitan: it needs torch.compile) */
  psim_grid_options o;
  psim_grid_options_init(&o);
  o.space = PSIM_GRID_FSDP;
  grid_space sp;
  ck_assert(psim_grid_space_build(&m, &c, &o, 8, &sp) == PSIM_OK);
  bool gpipe = false, interleaved = false, fsdp_tp_pp = false;
  uint32_t scheds = 0;
  double brute = INFINITY, brute_hsdp = INFINITY, brute_async = INFINITY, brute_op = INFINITY;
  double brute_every = INFINITY;
  int64_t hsdp = 0, async = 0, op_sac = 0, every = 0;
  for (int64_t i = 0; i < sp.n; i++) {
    const psim_megatron_opts *mo = &sp.c[i].mo;
    if (mo->dp_shard > 0) { /* HSDP: ZeRO 3, a shard group dividing dp, of a node's ranks or more */
      ck_assert(mo->zero_stage == 3 && mo->dp % mo->dp_shard == 0 && mo->dp_shard < mo->dp);
      ck_assert(mo->dp_shard * mo->tp >= 8 || mo->dp_shard == 2);
      ck_assert(!sp.c[i].classic);
      hsdp++;
    }
    if (mo->async_tp != PSIM_ASYNC_TP_STACK) { /* on, at tp > 1, never classic */
      ck_assert(mo->async_tp == PSIM_ASYNC_TP_ON && mo->tp > 1 && !sp.c[i].classic);
      async++;
    }
    ck_assert(mo->zero_stage == 0 || mo->zero_stage == 3);
    ck_assert(mo->zero_stage == 3 || mo->dp == 1 || (mo->tp == 1 && mo->pp == 1));
    ck_assert(mo->sequence_parallel == (mo->tp > 1) && mo->overlap_grad_reduce == (mo->dp > 1));
    ck_assert(mo->recompute != PSIM_RECOMPUTE_SELECTIVE && 512 % (2 * mo->tp) == 0);
    gpipe = gpipe || mo->schedule == PSIM_SCHED_GPIPE;
    interleaved = interleaved || mo->virtual_stages > 1;
    scheds |= 1u << mo->schedule; /* torchtitan's other schedules too (try_pp_schedules) */
    ck_assert(psim_schedule_chunks_rule(mo->schedule, mo->virtual_stages) == NULL);
    fsdp_tp_pp = fsdp_tp_pp || (mo->zero_stage == 3 && mo->tp > 1 && mo->pp > 1);
    bool fits;
    double t = simulate(&m, &c, mo, &fits);
    brute = fmin(brute, t);
    brute_hsdp = mo->dp_shard > 0 ? fmin(brute_hsdp, t) : brute_hsdp;
    brute_async = mo->async_tp == PSIM_ASYNC_TP_ON ? fmin(brute_async, t) : brute_async;
    op_sac += mo->recompute == PSIM_RECOMPUTE_OP; /* torchtitan's op-level selective AC */
    brute_op = mo->recompute == PSIM_RECOMPUTE_OP ? fmin(brute_op, t) : brute_op;
    if (mo->recompute_every > 1) { /* layer-level selective AC: every N-th block, full mode */
      ck_assert(mo->recompute == PSIM_RECOMPUTE_FULL && mo->recompute_method == PSIM_RCM_UNIFORM);
      ck_assert(mo->recompute_every == 2 || mo->recompute_every == 4);
      every++;
      brute_every = fmin(brute_every, t);
    }
  }
  ck_assert(gpipe && interleaved && fsdp_tp_pp && isfinite(brute) && isfinite(brute_hsdp));
  ck_assert_int_eq(hsdp, sp.n_hsdp);
  ck_assert(hsdp > 0 && async > 0 && isfinite(brute_async) && op_sac > 0 && isfinite(brute_op));
  ck_assert(every > 0 && isfinite(brute_every));
  ck_assert_uint_eq(scheds,
                    (1u << (PSIM_SCHED_DUALPIPEV + 1)) - 1); /* every schedule was a candidate */
  psim_grid_result r;
  ck_assert_msg(psim_grid_search(&m, &c, &o, &r) == PSIM_OK, "%s", psim_error_message());
  ck_assert_msg(r.best_sim.iteration_time_s == brute, "grid %.9g s, brute force %.9g s",
                r.best_sim.iteration_time_s, brute);
  ck_assert(r.evaluations < sp.n && r.hsdp == hsdp);
  printf("fsdp space: %lld candidates, %lld HSDP, %lld async TP, %lld op-level AC, %lld "
         "every-N AC; best %.9g s (HSDP %.9g s, async TP %.9g s, op-level AC %.9g s, every-N "
         "AC %.9g s), %lld simulated\n",
         (long long)sp.n, (long long)hsdp, (long long)async, (long long)op_sac, (long long)every,
         brute, brute_hsdp, brute_async, brute_op, brute_every, (long long)r.evaluations);
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

/* ---- time budgets count CPU time (search/budget.h) ---- */

#define BUDGET_S 1.0 /* the grid's budget, s of CPU */
#define PAUSE_S  2.0 /* stopped for longer than the budget */

static double process_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* The child: the grid under BUDGET_S; writes {CPU seconds it ran, stopped by time}. */
static void child(int fd) {
  psim_model m;
  psim_cluster c;
  setup_gpt(&m, &c, 48, 256, 0); /* thousands of candidates, seconds of CPU in all */
  psim_grid_options o;
  psim_grid_options_init(&o);
  o.budget_s = BUDGET_S;
  double cpu0 = process_cpu_s();
  psim_grid_result r;
  psim_status st = psim_grid_search(&m, &c, &o, &r);
  double out[2] = {process_cpu_s() - cpu0, st == PSIM_OK && r.stopped_by_time};
  ssize_t n = write(fd, out, sizeof out);
  _exit(n == (ssize_t)sizeof out ? 0 : 1);
}

START_TEST(grid_budget_counts_cpu_time) {
  int fds[2];
  ck_assert(pipe(fds) == 0);
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    child(fds[1]);
  }
  close(fds[1]);
  sleep_s(0.2); /* the child loads and starts its search */
  ck_assert(kill(pid, SIGSTOP) == 0);
  sleep_s(PAUSE_S);
  ck_assert(kill(pid, SIGCONT) == 0);
  double got[2] = {0, 0};
  ck_assert(read(fds[0], got, sizeof got) == (ssize_t)sizeof got);
  int status = 0;
  ck_assert(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ck_assert_msg(got[1] == 1, "the grid ended before its budget: make the case larger");
  /* it stops before a simulation expected to end past the budget: at most a few short */
  ck_assert_msg(got[0] >= 0.7 * BUDGET_S, "the grid ran %.3f s of CPU of its %.1f s budget", got[0],
                BUDGET_S);
  close(fds[0]);
}
END_TEST

/* A parallel section costs the budget clock its busiest thread only. */
static void *spin(void *arg) {
  double until = psim_budget_thread_s() + *(const double *)arg;
  while (psim_budget_thread_s() < until) {
  }
  return NULL;
}

START_TEST(parallel_sections_count_their_busiest_thread) {
  double each = 0.2, t0 = psim_budget_clock_s(), p0 = process_cpu_s();
  int32_t started = psim_budget_run_threads(2, spin, &each);
  double clock = psim_budget_clock_s() - t0, cpu = process_cpu_s() - p0;
  ck_assert_int_eq(started, 2);
  ck_assert_msg(cpu >= 2 * each, "%.3f s", cpu);
  ck_assert_msg(clock >= each && clock < 1.5 * each, "clock %.3f s for 2 x %.1f s", clock, each);
}
END_TEST

/* Two DGX H100 (16 GPUs) under a stack with FP8 recipes (megatron-core), devices of mem_gb. */
static void h100_cluster(psim_cluster *c, const char *stack, double mem_gb) {
  psim_preset_opts po;
  psim_preset_opts_init(&po);
  po.preset = "dgx-h100";
  po.nodes = 2;
  cJSON *doc = NULL;
  ck_assert_msg(psim_preset_cluster(&po, &doc) == PSIM_OK, "%s", psim_error_message());
  psim_cluster_init(c);
  ck_assert_msg(psim_cluster_from_json("h100", doc, c) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(doc);
  ck_assert(psim_stack_builtin(stack, &c->stack) == PSIM_OK);
  for (int32_t t = 0; t < c->n_types; t++)
    c->types[t].mem_bytes = mem_gb * 1e9;
}

/* try_fp8 (plan --fp8): on H100 under megatron-core every candidate is listed also with FP8
 * linears (never classic), the grid's best equals brute force over the space and is an FP8
 * layout faster than every BF16 one; on A100 (no FP8 rate) and under megatron-lm-2021 (no FP8
 * recipe) the space is the BF16 one. Before the knob no candidate had FP8 linears. */
START_TEST(grid_searches_fp8_where_the_hardware_has_it) {
  psim_model m;
  psim_cluster c;
  setup(&m, &c, 1.2); /* the A100 cluster; the model replaced below */
  psim_model_destroy(&m);
  psim_gen_tf_opts g; /* compute-bound kernels (the 1024-wide GPT waits on launches: FP8's
                         casts make it slower, and the grid keeps BF16 there) */
  psim_gen_gpt_opts_init(&g);
  g.layers = 4, g.hidden = 4096, g.heads = 32, g.seq = 1024, g.batch = 16, g.vocab = 8192;
  cJSON *j = NULL;
  ck_assert(psim_gen_gpt(&g, &j) == PSIM_OK);
  psim_model_init(&m);
  ck_assert_msg(psim_model_from_json("gpt", j, &m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(j);
  psim_grid_options o;
  options(&o);
  o.max_virtual_stages = 2, o.n_micro_batches = 2, o.try_recompute_block = false;
  grid_space plain, sp;
  ck_assert(psim_grid_space_build(&m, &c, &o, 8, &plain) == PSIM_OK);
  o.try_fp8 = true;
  ck_assert(psim_grid_space_build(&m, &c, &o, 8, &sp) == PSIM_OK);
  ck_assert_int_eq(sp.n, plain.n); /* A100: nothing to add */
  psim_grid_space_destroy(&sp);
  psim_cluster_destroy(&c);
  h100_cluster(&c, "megatron-lm-2021", 8);
  ck_assert(psim_grid_space_build(&m, &c, &o, 8, &sp) == PSIM_OK);
  ck_assert_int_eq(sp.n, plain.n); /* no FP8 recipe */
  psim_grid_space_destroy(&sp);
  psim_cluster_destroy(&c);
  h100_cluster(&c, "megatron-core", 8);
  ck_assert(psim_grid_space_build(&m, &c, &o, 8, &sp) == PSIM_OK);
  ck_assert_int_eq(sp.n, 2 * plain.n); /* every candidate twice */
  double best_bf16 = INFINITY, best_fp8 = INFINITY;
  for (int64_t i = 0; i < sp.n; i++) {
    const psim_megatron_opts *mo = &sp.c[i].mo;
    ck_assert(mo->fp8 == PSIM_FP8_MODEL || (mo->fp8 == PSIM_FP8_ON && !sp.c[i].classic));
    bool fits;
    double t = simulate(&m, &c, mo, &fits);
    if (mo->fp8 == PSIM_FP8_ON)
      best_fp8 = fmin(best_fp8, t);
    else
      best_bf16 = fmin(best_bf16, t);
  }
  ck_assert_msg(isfinite(best_fp8) && best_fp8 < best_bf16, "fp8 %.9g s, bf16 %.9g s", best_fp8,
                best_bf16);
  psim_grid_result r;
  ck_assert_msg(psim_grid_search(&m, &c, &o, &r) == PSIM_OK, "%s", psim_error_message());
  ck_assert_msg(r.best_sim.iteration_time_s == best_fp8 && r.best.fp8 == PSIM_FP8_ON,
                "grid %.9g s (fp8 %d), brute force %.9g s", r.best_sim.iteration_time_s, r.best.fp8,
                best_fp8);
  printf("fp8 space: %lld candidates, best fp8 %.9g s, bf16 %.9g s, %lld simulated\n",
         (long long)sp.n, best_fp8, best_bf16, (long long)r.evaluations);
  psim_grid_result_destroy(&r);
  psim_grid_space_destroy(&sp);
  psim_grid_space_destroy(&plain);
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
  tcase_add_test(t, best_first_order_keeps_the_optimum_and_reaches_it_sooner);
  tcase_add_test(t, space_follows_megatron_rules);
  tcase_add_test(t, grid_finds_block_recomputation);
  tcase_add_test(t, grid_picks_overlap_param_gather_where_it_pays);
  tcase_add_test(t, fsdp_space_follows_torchtitan_rules);
  tcase_add_test(t, grid_picks_expert_parallelism_where_it_pays);
  tcase_add_test(t, grid_lists_context_parallelism_for_long_sequences);
  tcase_add_test(t, grid_lists_uneven_stages);
  tcase_add_test(t, grid_searches_fp8_where_the_hardware_has_it);
  tcase_add_test(t, grid_budget_counts_cpu_time);
  tcase_add_test(t, parallel_sections_count_their_busiest_thread);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
