/* test_alpa_dp.c - the Alpa optimizer's stage DP (issue 23) against brute
 * force: every stage size, micro-batch size, recomputation mode and ZeRO
 * stage, every cut of the layers into stages, each stage at its fastest
 * (mesh, ILP level) that fits, scored with the DP's objective (docs/search.md,
 * "Stage DP"): sum of stage times + (B - 1) x slowest stage. The DP's best
 * must equal it within Alpa's bound step (EPS_TMAX), for device memories from
 * loose to tight, and ZeRO 1 must be what makes some of them fit faster
 * (ZeRO 2, and ZeRO 2 against the simulator: zero2_fits_where_zero1_cannot).
 * Brute force enumerates stages of different sizes too (Alpa's submesh
 * shapes within the DP's band and window); a plan of different sizes must
 * win where the head's layer is heavy, and an interleaved variant must be
 * the plan where the simulator finds it faster. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/generators.h"
#include "search/alpa/alpa_search_impl.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"

#define TOPO PSIM_SOURCE_ROOT "/topologies/"

static void gpt_v(psim_model *m, int64_t layers, int64_t hidden, int64_t vocab, int64_t batch) {
  psim_gen_tf_opts g;
  psim_gen_gpt_opts_init(&g);
  g.layers = layers, g.hidden = hidden, g.heads = 16, g.seq = 512, g.batch = batch, g.vocab = vocab;
  cJSON *j = NULL;
  ck_assert(psim_gen_gpt(&g, &j) == PSIM_OK);
  psim_model_init(m); /* 4 layers: every cut of every stage count is enumerable */
  ck_assert_msg(psim_model_from_json("gpt", j, m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(j);
}

static void gpt(psim_model *m) {
  gpt_v(m, 4, 1024, 8192, 16);
}

/* The cost of one layer under (rc, zero), as docs/search.md states it:
 * ZeRO 1 and 2 synchronise alike, ZeRO 3 adds two weight gathers per
 * micro-batch and drops the all-gather after the step. */
static double ltime(const alpa_point *p, int rc, int zero, int32_t B) {
  double t = zero == 3 ? p->time + 2 * p->gather_z3 + p->sync_z3 / B
                       : p->time + (zero ? p->sync_z1 : p->sync) / B;
  return t + (rc == PSIM_RECOMPUTE_FULL        ? p->fwd
              : rc == PSIM_RECOMPUTE_SELECTIVE ? p->fwd_attn
                                               : 0);
}

/* Weights, gradients and optimizer state of one layer per device under zero. */
static double lw(const alpa_point *p, int zero) {
  const double w[4] = {p->wmem, p->wmem_z1, p->wmem_z2, p->wmem_z3};
  return w[zero];
}

static double lact(const alpa_point *p, int rc) {
  return rc == PSIM_RECOMPUTE_FULL        ? p->act_full
         : rc == PSIM_RECOMPUTE_SELECTIVE ? p->act_sel
                                          : p->act;
}

typedef struct opt {
  int32_t mesh, level, zi;
} opt;

/* One (base size, micro-batch size, recomputation, ZeRO) of brute force:
 * the band's stage sizes and options, and the sequence being enumerated. */
typedef struct bf_cfg {
  alpa *A;
  int32_t L, N, n, mb, B, n_opts, nz, z[3];
  int rc, zero;
  opt opts[3 * LEVELS * MAX_MESHES];
  int32_t last[64], zs[64];
} bf_cfg;

static const alpa_point *pt(bf_cfg *x, int32_t l, opt o) {
  const alpa_point *p;
  ck_assert(psim_alpa_point(x->A, x->A->class_of[l], o.mesh, x->mb, o.level, &p) == PSIM_OK);
  return p;
}

static bool has_size(const alpa *A, int32_t z) {
  for (int32_t me = 0; me < A->n_meshes; me++)
    if (A->meshes[me].n == z)
      return true;
  return false;
}

/* The stage sizes of base n (docs/search.md): n / 2, n, 2 n where Alpa's
 * shapes have them, on a cluster of alike devices. */
static void band(bf_cfg *x) {
  x->nz = 0;
  if (!x->A->equal_stages && x->n % 2 == 0 && has_size(x->A, x->n / 2))
    x->z[x->nz++] = x->n / 2;
  x->z[x->nz++] = x->n;
  if (!x->A->equal_stages && 2 * x->n <= x->N && has_size(x->A, 2 * x->n))
    x->z[x->nz++] = 2 * x->n;
}

/* Whether mesh me is tried at the micro-batch size (mb_wanted), when some
 * mesh of the base size is. */
static bool wanted(bf_cfg *x, int32_t me) {
  alpa *A = x->A;
  bool base = false;
  for (int32_t b = 0; b < A->n_meshes; b++)
    base = base || (A->meshes[b].n == x->n && psim_alpa_mb_wanted(A, &A->meshes[b], A->mbs[x->mb]));
  return base && psim_alpa_mb_wanted(A, &A->meshes[me], A->mbs[x->mb]);
}

/* The (mesh, level) options of each size: level 0 of each mesh whose points
 * all solve; a higher level only where the level below would not fit the
 * whole model spread over N / n stages (the DP's rule). */
static void options(bf_cfg *x) {
  alpa *A = x->A;
  int32_t S0 = x->N / x->n;
  x->n_opts = 0;
  for (int32_t zi = 0; zi < x->nz; zi++)
    for (int32_t me = 0; me < A->n_meshes; me++) {
      if (A->meshes[me].n != x->z[zi] || !wanted(x, me))
        continue;
      for (int level = 0; level < LEVELS; level++) {
        double w = 0, a = 0;
        bool ok = true;
        if (level > 0) {
          for (int32_t l = 0; l < x->L; l++) {
            const alpa_point *p = pt(x, l, (opt){me, level - 1, zi});
            w += lw(p, x->zero);
            a += lact(p, x->rc);
          }
          if ((w + S0 * a) * ((double)x->L / S0 + 1) / x->L <= A->mem_bytes)
            break;
        }
        for (int32_t l = 0; l < x->L; l++)
          ok = ok && pt(x, l, (opt){me, level, zi})->ok;
        if (!ok)
          break;
        x->opts[x->n_opts++] = (opt){me, level, zi};
      }
    }
}

/* Fastest option of size zi running layers k..j with f micro-batches in
 * flight (INFINITY when none fits). */
static double stage(bf_cfg *x, int32_t zi, int32_t k, int32_t j, int32_t f) {
  double best = INFINITY;
  for (int32_t o = 0; o < x->n_opts; o++) {
    if (x->opts[o].zi != zi)
      continue;
    double t = 0, w = 0, a = 0, amax = 0;
    for (int32_t l = 0; l < x->L; l++) {
      const alpa_point *p = pt(x, l, x->opts[o]);
      amax = fmax(amax, p->act);
      if (x->zero == 3) /* the gathered window: two layers' weights (docs/search.md) */
        w = fmax(w, 2 * p->gbytes_z3);
    }
    for (int32_t l = k; l <= j; l++) {
      const alpa_point *p = pt(x, l, x->opts[o]);
      t += ltime(p, x->rc, x->zero, x->B);
      w += lw(p, x->zero);
      a += lact(p, x->rc);
    }
    double mem = w + f * a + (x->rc == PSIM_RECOMPUTE_FULL ? amax : 0);
    if (mem <= x->A->mem_bytes)
      best = fmin(best, t);
  }
  return best;
}

/* A complete sequence of S stages: every suffix of s stages within n
 * devices of s n (the DP's window), scored sum + (B - 1) x slowest. */
static int64_t unequal_scored; /* sequences with stages of different sizes scored */

static double score(bf_cfg *x, int32_t S) {
  double sum = 0, mx = 0;
  int32_t dsuf = 0;
  for (int32_t t = S - 1; t >= 0; t--) {
    dsuf += x->z[x->zs[t]];
    if (abs(dsuf - (S - t) * x->n) > (x->nz > 1 ? x->n : 0))
      return INFINITY;
  }
  for (int32_t t = 1; t < S; t++)
    if (x->zs[t] != x->zs[0]) {
      unequal_scored++;
      break;
    }
  for (int32_t t = 0; t < S; t++) {
    int32_t f = S - t < x->B ? S - t : x->B;
    double st = stage(x, x->zs[t], t == 0 ? 0 : x->last[t - 1] + 1, x->last[t], f);
    sum += st;
    mx = fmax(mx, st);
  }
  return sum + (x->B - 1) * mx;
}

/* Every sequence of stage sizes and cuts from stage i at layer k with d
 * devices used. */
static double cuts(bf_cfg *x, int32_t i, int32_t k, int32_t d) {
  if (k == x->L)
    return d == x->N ? score(x, i) : INFINITY;
  double best = INFINITY;
  for (int32_t zi = 0; zi < x->nz; zi++)
    for (int32_t j = k; j < x->L && d + x->z[zi] <= x->N; j++) {
      x->last[i] = j;
      x->zs[i] = zi;
      best = fmin(best, cuts(x, i + 1, j + 1, d + x->z[zi]));
    }
  return best;
}

static double brute_force(alpa *A) {
  double best = INFINITY;
  for (int32_t n = 1; n <= A->c->n_devices; n++)
    for (int32_t mb = 0; psim_alpa_is_base(A, n) && mb < A->n_mbs; mb++)
      for (int rc = 0; rc < 3; rc++)
        for (int zero = 0; zero <= A->max_zero; zero++) {
          bf_cfg x = {.A = A, .L = A->m->n_layers, .N = A->c->n_devices, .n = n, .mb = mb};
          x.rc = rc;
          x.zero = zero;
          x.B = (int32_t)(A->batch / A->mbs[mb]);
          band(&x);
          options(&x);
          if (x.n_opts > 0)
            best = fmin(best, cuts(&x, 0, 0, 0));
        }
  return best;
}

/* The DP's best estimate and brute force's, for device memory mem (bytes). */
static void dp_and_brute_eq(const psim_model *m, psim_cluster *c, double mem, int max_zero,
                            bool equal, double *dp, double *bf) {
  c->types[0].mem_bytes = mem;
  psim_search_options o;
  psim_search_options_init(&o);
  alpa A;
  ck_assert_msg(psim_alpa_setup(&A, m, c, &o) == PSIM_OK, "%s", psim_error_message());
  A.max_zero = max_zero;
  A.equal_stages = equal;
  ck_assert_msg(psim_alpa_search_all(&A) == PSIM_OK, "%s", psim_error_message());
  *dp = INFINITY;
  for (int32_t i = 0; i < A.n_top; i++)
    *dp = fmin(*dp, A.top[i].estimate);
  *bf = brute_force(&A);
  psim_alpa_teardown(&A);
}

static void dp_and_brute(const psim_model *m, psim_cluster *c, double mem, int max_zero, double *dp,
                         double *bf) {
  dp_and_brute_eq(m, c, mem, max_zero, false, dp, bf);
}

START_TEST(dp_equals_brute_force) {
  psim_model m;
  gpt(&m);
  psim_cluster c;
  psim_cluster_init(&c);
  ck_assert_msg(psim_cluster_load(TOPO "dgx-a100-x1.json", &c) == PSIM_OK, "%s",
                psim_error_message());
  const double gb[] = {4, 1.0, 0.5, 0.3, 0.22, 0.16};
  int zero_wins = 0;
  for (size_t i = 0; i < sizeof gb / sizeof gb[0]; i++) {
    double dp0, bf0, dp1, bf1;
    dp_and_brute(&m, &c, gb[i] * 1e9, 0, &dp0, &bf0);
    dp_and_brute(&m, &c, gb[i] * 1e9, 1, &dp1, &bf1);
    printf("alpa dp: %.2f GB: ZeRO 0 dp %.6g bf %.6g; ZeRO 0-1 dp %.6g bf %.6g\n", gb[i], dp0, bf0,
           dp1, bf1);
    ck_assert(isfinite(bf0) == isfinite(dp0) && isfinite(bf1) == isfinite(dp1));
    if (isfinite(bf0)) {
      ck_assert_double_ge_tol(dp0, bf0, 1e-9 * bf0);
      ck_assert_double_le_tol(dp0, bf0 * (1 + EPS_TMAX), 1e-9 * bf0);
    }
    if (isfinite(bf1)) {
      ck_assert_double_ge_tol(dp1, bf1, 1e-9 * bf1);
      ck_assert_double_le_tol(dp1, bf1 * (1 + EPS_TMAX), 1e-9 * bf1);
      ck_assert(bf1 <= bf0); /* more options never hurt */
    }
    zero_wins += bf1 < bf0 * (1 - 1e-9);
  }
  ck_assert_int_gt(zero_wins, 0);      /* the case does exercise ZeRO 1 */
  ck_assert_int_gt(unequal_scored, 0); /* and stages of different sizes */
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

/* Simulated plan of the DP's candidates, stages of one size only or of the
 * band's sizes, with or without the interleaved variants. */
static void plan_with(const psim_model *m, psim_cluster *c, bool equal, bool virt,
                      psim_search_result *r, double *estimate) {
  psim_search_options o;
  psim_search_options_init(&o);
  o.keep_overlap = true; /* the DP's own plans, compared as it builds them */
  alpa A;
  ck_assert_msg(psim_alpa_setup(&A, m, c, &o) == PSIM_OK, "%s", psim_error_message());
  A.equal_stages = equal;
  ck_assert_msg(psim_alpa_search_all(&A) == PSIM_OK, "%s", psim_error_message());
  *estimate = INFINITY;
  for (int32_t i = 0; i < A.n_top; i++)
    *estimate = fmin(*estimate, A.top[i].estimate);
  psim_search_result_init(r);
  if (virt)
    ck_assert_msg(psim_alpa_add_virtual(&A) == PSIM_OK, "%s", psim_error_message());
  ck_assert_msg(psim_alpa_simulate_top(&A, r, 0) == PSIM_OK, "%s", psim_error_message());
  ck_assert(r->found);
  psim_alpa_teardown(&A);
}

static void plan_of(const psim_model *m, psim_cluster *c, bool equal, psim_search_result *r,
                    double *estimate) {
  plan_with(m, c, equal, false, r, estimate);
}

/* Two DGX A100 servers with `nics` HDR NICs each (the DGX has 8, one per GPU). */
static void two_dgx_nics(psim_cluster *c, int nics) {
  cJSON *j = NULL;
  ck_assert_msg(psim_json_load_file(TOPO "dgx-a100-x2.json", &j) == PSIM_OK, "%s",
                psim_error_message());
  cJSON_ReplaceItemInObject(j, "nics_per_node", cJSON_CreateNumber(nics));
  psim_cluster_init(c);
  ck_assert_msg(psim_cluster_from_json("dgx-a100-x2", j, c) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(j);
}

/* Issue 23: stages of different device counts. An 8-layer GPT whose first
 * and last layers carry a 262,144-word embedding and head (the last layer
 * about 5x a middle one's FLOPs) on two 8-A100 servers joined by one HDR NIC
 * each: the DP puts the head's stage on more devices (4 + 2 + 2 + 8), which
 * both its estimate and the simulator find faster than every plan of equal
 * stages. (On the DGX's 8 NICs, since NCCL's one ring per NIC, one stage of 16
 * devices is fastest and no plan of several stages wins: the slower network
 * keeps the premise, pipelining across the servers.) */
START_TEST(unequal_stages_win) {
  psim_cluster c;
  two_dgx_nics(&c, 1);
  psim_model m;
  gpt_v(&m, 8, 2048, 262144, 32);
  psim_search_result eq, uneq;
  double est_eq, est_uneq;
  plan_of(&m, &c, true, &eq, &est_eq);
  plan_of(&m, &c, false, &uneq, &est_uneq);
  printf("alpa dp: equal stages %.6g s (estimate %.6g), any sizes %.6g s (estimate %.6g): %s\n",
         eq.best_sim.iteration_time_s, est_eq, uneq.best_sim.iteration_time_s, est_uneq,
         uneq.description);
  ck_assert_double_lt(est_uneq, est_eq);
  ck_assert_double_lt(uneq.best_sim.iteration_time_s, eq.best_sim.iteration_time_s);
  bool differ = false;
  for (int32_t i = 1; i < uneq.best.n_stages; i++)
    differ = differ || uneq.best.stages[i].n_devices != uneq.best.stages[0].n_devices;
  ck_assert(differ);
  psim_search_result_destroy(&eq);
  psim_search_result_destroy(&uneq);
  psim_model_destroy(&m);
  psim_cluster_destroy(&c);
}
END_TEST

/* Issue 23: interleaved stages. A 16-layer GPT (hidden 2,048, batch 64) on
 * two 8-A100 servers of one HDR NIC each (unequal_stages_win): the simulator
 * finds the interleaved variant of a 2-stage plan (virtual stages,
 * Megatron-LM's interleaved 1F1B) faster than every candidate without
 * interleaving, and it is the plan. */
START_TEST(interleaving_chosen_when_faster) {
  psim_cluster c;
  two_dgx_nics(&c, 1);
  psim_model m;
  gpt_v(&m, 16, 2048, 32768, 64);
  psim_search_result plain, virt;
  double est;
  plan_with(&m, &c, false, false, &plain, &est);
  plan_with(&m, &c, false, true, &virt, &est);
  printf("alpa dp: without interleaving %.6g s, with %.6g s: %s\n", plain.best_sim.iteration_time_s,
         virt.best_sim.iteration_time_s, virt.description);
  ck_assert_int_gt(virt.best.virtual_stages, 1);
  ck_assert_int_eq(virt.best.schedule, PSIM_SCHED_INTERLEAVED);
  ck_assert_int_eq(m.n_layers % (virt.best.n_stages * virt.best.virtual_stages), 0);
  ck_assert_int_eq(virt.best.n_micro % virt.best.n_stages, 0);
  ck_assert_double_lt(virt.best_sim.iteration_time_s, plain.best_sim.iteration_time_s);
  psim_search_result_destroy(&plain);
  psim_search_result_destroy(&virt);
  psim_model_destroy(&m);
  psim_cluster_destroy(&c);
}
END_TEST

/* Estimated weights, gradients and optimizer bytes per device of stage i of
 * candidate c: its layers' points under c's ZeRO stage, plus ZeRO 3's
 * gathered window (alpa_dp.c's table). */
static double est_static(alpa *A, const alpa_cand *c, int32_t i) {
  int32_t me = c->ml[i] / LEVELS, level = c->ml[i] % LEVELS, k = i ? c->last[i - 1] + 1 : 0;
  double w = 0, g = 0;
  for (int32_t l = 0; l < A->m->n_layers; l++) {
    const alpa_point *p;
    ck_assert(psim_alpa_point(A, A->class_of[l], me, c->mb_id, level, &p) == PSIM_OK);
    g = fmax(g, 2 * p->gbytes_z3);
    w += l >= k && l <= c->last[i] ? lw(p, c->zero) : 0;
  }
  return w + (c->zero == 3 ? g : 0);
}

/* Candidate i simulated: per stage, the estimate of its static bytes
 * against the simulator's largest on its devices (sim/builder/memory.c, and
 * zero.c's gathered window); returns the simulated iteration time. */
static double check_static(alpa *A, int32_t i, double tol) {
  psim_strategy s;
  psim_sim_options so;
  psim_sim_result r;
  ck_assert_msg(psim_alpa_cand_strategy(A, i, &s) == PSIM_OK, "%s", psim_error_message());
  psim_sim_options_init(&so);
  so.keep_graph = true;
  psim_sim_result_init(&r);
  ck_assert_msg(psim_simulate(A->m, A->c, &s, &so, &r) == PSIM_OK, "%s", psim_error_message());
  for (int32_t st = 0; st < s.n_stages; st++) {
    double sim = 0;
    for (int32_t d = 0; d < s.stages[st].n_devices; d++) {
      const double *b = r.static_bytes + 3 * s.stages[st].devices[d];
      sim = fmax(sim, b[0] + b[1] + b[2]);
    }
    double est = est_static(A, &A->top[i], st);
    printf("alpa dp: ZeRO %d stage %d: static %.4g bytes estimated, %.4g simulated\n",
           (int)A->top[i].zero, (int)st, est, sim);
    ck_assert_double_eq_tol(est, sim, tol * sim);
  }
  double t = r.iteration_time_s;
  printf("alpa dp: candidate %d (estimate %.6g): %.6g s, peak %.4g bytes, fits %d\n", (int)i,
         A->top[i].estimate, t, r.peak_memory_bytes, (int)r.fits);
  psim_sim_result_destroy(&r);
  psim_strategy_destroy(&s);
  return t;
}

/* The search at device memory mem with ZeRO stages up to max_zero, its
 * candidates simulated (res); with check, every ZeRO >= 2 candidate's static
 * bytes against the simulator's (check_static) and, for those the DP found at
 * ZeRO 2, the same plan with ZeRO 1 simulated: the same time. */
static void plan_zero(const psim_model *m, psim_cluster *c, double mem, int max_zero, bool check,
                      psim_search_result *res) {
  c->types[0].mem_bytes = mem;
  psim_search_options o;
  psim_search_options_init(&o);
  alpa A;
  ck_assert_msg(psim_alpa_setup(&A, m, c, &o) == PSIM_OK, "%s", psim_error_message());
  A.max_zero = max_zero;
  ck_assert_msg(psim_alpa_search_all(&A) == PSIM_OK, "%s", psim_error_message());
  for (int32_t i = 0; check && i < A.n_top; i++)
    if (A.top[i].zero >= 2 && A.top[i].pool < 2) {
      double t2 = check_static(&A, i, 0.01);
      if (A.top[i].zero_dp != 2)
        continue;
      A.top[i].zero = 1; /* the same plan with ZeRO 1: the same time (gradsync.c) */
      psim_strategy s;
      psim_sim_result r;
      psim_sim_result_init(&r);
      ck_assert(psim_alpa_cand_strategy(&A, i, &s) == PSIM_OK);
      ck_assert(psim_simulate(A.m, A.c, &s, A.o->sim, &r) == PSIM_OK);
      ck_assert_double_eq_tol(r.iteration_time_s, t2, 1e-9 * t2);
      A.top[i].zero = 2;
      psim_sim_result_destroy(&r);
      psim_strategy_destroy(&s);
    }
  psim_search_result_init(res);
  ck_assert_msg(psim_alpa_simulate_top(&A, res, 0) == PSIM_OK, "%s", psim_error_message());
  psim_alpa_teardown(&A);
}

/* Issue 23: ZeRO 2 and 3 in the stage DP. A 4-layer GPT (hidden 2,048) on
 * 8 A100s at device memories where ZeRO 2 lets a faster plan fit (found by
 * a scan of 4 GB down in steps of 10%): there the DP at max_zero 2 equals
 * brute force (ZeRO 1 and 2 time alike and 2 holds less, so one DP at
 * ZeRO 2 covers both) and beats max_zero 1 (the optimizer before); every
 * ZeRO >= 2 candidate's estimated weights + gradients + optimizer state per
 * stage agree with the simulator's within 1% (the same bytes:
 * sim/builder/memory.c; ZeRO 3's window is two layers' gathered weights, an
 * upper bound of zero.c's), and a plan the DP found at ZeRO 2 simulates in the
 * same time with ZeRO 1. At 1.1297 and 0.6004 GB the simulated plan is a
 * ZeRO 2 plan, faster than every plan of max_zero 1 (27.24 ms against 27.87;
 * 68.66 ms against 101.35). (At 0.9151 GB max_zero 3's plan is 0.7% slower
 * than max_zero 1's: its best estimates are plans that do not fit in the
 * simulator, and they displace others from the pool.) */
START_TEST(zero2_fits_where_zero1_cannot) {
  psim_model m;
  gpt_v(&m, 4, 2048, 8192, 16);
  psim_cluster c;
  psim_cluster_init(&c);
  ck_assert_msg(psim_cluster_load(TOPO "dgx-a100-x1.json", &c) == PSIM_OK, "%s",
                psim_error_message());
  const double gb[] = {1.1297, 0.9151, 0.7412, 0.6004};
  int z2_plans = 0;
  for (size_t k = 0; k < sizeof gb / sizeof gb[0]; k++) {
    double dp1, bf1, dp2, bf2;
    dp_and_brute(&m, &c, gb[k] * 1e9, 1, &dp1, &bf1);
    dp_and_brute(&m, &c, gb[k] * 1e9, 2, &dp2, &bf2);
    printf("alpa dp: %.4f GB: ZeRO 0-1 dp %.6g bf %.6g; ZeRO 0-2 dp %.6g bf %.6g\n", gb[k], dp1,
           bf1, dp2, bf2);
    ck_assert(isfinite(bf2) && isfinite(dp2));
    ck_assert_double_ge_tol(dp2, bf2, 1e-9 * bf2);
    ck_assert_double_le_tol(dp2, bf2 * (1 + EPS_TMAX), 1e-9 * bf2);
    ck_assert_double_lt(bf2, bf1 * (1 - 1e-9));
    psim_search_result r1, r3;
    plan_zero(&m, &c, gb[k] * 1e9, 1, false, &r1);
    plan_zero(&m, &c, gb[k] * 1e9, 3, true, &r3);
    printf("alpa dp: %.4f GB: max_zero 1 %.6g s (%s); max_zero 3 %.6g s (%s)\n", gb[k],
           r1.best_sim.iteration_time_s, r1.description, r3.best_sim.iteration_time_s,
           r3.description);
    ck_assert(r3.found && r3.best_sim.fits);
    if (r3.best.zero_stage >= 2) {
      z2_plans++;
      ck_assert(!r1.found || r3.best_sim.iteration_time_s < r1.best_sim.iteration_time_s);
    }
    psim_search_result_destroy(&r1);
    psim_search_result_destroy(&r3);
  }
  ck_assert_int_gt(z2_plans, 0);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("alpa_dp");
  TCase *t = tcase_create("core");
  tcase_set_timeout(t, 300);
  tcase_add_test(t, dp_equals_brute_force);
  tcase_add_test(t, unequal_stages_win);
  tcase_add_test(t, interleaving_chosen_when_faster);
  tcase_add_test(t, zero2_fits_where_zero1_cannot);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
