/* test_alpa_dp.c - the Alpa optimizer's stage DP (issue 23) against brute
 * force: every stage size, micro-batch size, recomputation mode and ZeRO
 * stage, every cut of the layers into stages, each stage at its fastest
 * (mesh, ILP level) that fits, scored with the DP's objective (docs/search.md,
 * "Stage DP"): sum of stage times + (B - 1) x slowest stage. The DP's best
 * must equal it within Alpa's bound step (EPS_TMAX), for device memories from
 * loose to tight, and ZeRO 1 must be what makes some of them fit faster. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/generators.h"
#include "search/alpa/alpa_search_impl.h"
#include "sim/core/alloc.h"

#define TOPO PSIM_SOURCE_ROOT "/topologies/"

static void gpt(psim_model *m) {
  psim_gen_tf_opts g;
  psim_gen_gpt_opts_init(&g);
  g.layers = 4, g.hidden = 1024, g.heads = 16, g.seq = 512, g.batch = 16, g.vocab = 8192;
  cJSON *j = NULL;
  ck_assert(psim_gen_gpt(&g, &j) == PSIM_OK);
  psim_model_init(m); /* 4 layers: every cut of every stage count is enumerable */
  ck_assert_msg(psim_model_from_json("gpt", j, m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(j);
}

/* The cost of one layer under (rc, zero), as docs/search.md states it. */
static double ltime(const alpa_point *p, int rc, int zero, int32_t B) {
  double t = p->time + (zero ? p->sync_z1 : p->sync) / B;
  return t + (rc == PSIM_RECOMPUTE_FULL        ? p->fwd
              : rc == PSIM_RECOMPUTE_SELECTIVE ? p->fwd_attn
                                               : 0);
}

static double lact(const alpa_point *p, int rc) {
  return rc == PSIM_RECOMPUTE_FULL        ? p->act_full
         : rc == PSIM_RECOMPUTE_SELECTIVE ? p->act_sel
                                          : p->act;
}

typedef struct opt {
  int32_t mesh, level;
} opt;

typedef struct bf_cfg {
  alpa *A;
  int32_t L, S, mb, B, n_opts;
  int rc, zero;
  opt opts[LEVELS * MAX_MESHES];
} bf_cfg;

static const alpa_point *pt(bf_cfg *x, int32_t l, opt o) {
  const alpa_point *p;
  ck_assert(psim_alpa_point(x->A, x->A->class_of[l], o.mesh, x->mb, o.level, &p) == PSIM_OK);
  return p;
}

/* The (mesh, level) options of stages of n devices: level 0 of each mesh
 * whose points all solve; a higher level only where the level below would
 * not fit the whole model spread over S stages (the DP's rule). */
static void options(bf_cfg *x, int32_t n) {
  alpa *A = x->A;
  x->n_opts = 0;
  for (int32_t me = 0; me < A->n_meshes; me++) {
    if (A->meshes[me].n != n || !psim_alpa_mb_wanted(A, &A->meshes[me], A->mbs[x->mb]))
      continue;
    for (int level = 0; level < LEVELS; level++) {
      double w = 0, a = 0;
      bool ok = true;
      if (level > 0) {
        for (int32_t l = 0; l < x->L; l++) {
          const alpa_point *p = pt(x, l, (opt){me, level - 1});
          w += x->zero ? p->wmem_z1 : p->wmem;
          a += lact(p, x->rc);
        }
        if ((w + x->S * a) * ((double)x->L / x->S + 1) / x->L <= A->mem_bytes)
          break;
      }
      for (int32_t l = 0; l < x->L; l++)
        ok = ok && pt(x, l, (opt){me, level})->ok;
      if (!ok)
        break;
      x->opts[x->n_opts++] = (opt){me, level};
    }
  }
}

/* Fastest option running layers k..j as stage i (INFINITY when none fits). */
static double stage(bf_cfg *x, int32_t k, int32_t j, int32_t i) {
  int32_t f = x->S - i < x->B ? x->S - i : x->B;
  double best = INFINITY;
  for (int32_t o = 0; o < x->n_opts; o++) {
    double t = 0, w = 0, a = 0, amax = 0;
    for (int32_t l = 0; l < x->L; l++) {
      const alpa_point *p = pt(x, l, x->opts[o]);
      amax = fmax(amax, p->act);
      if (l < k || l > j)
        continue;
      t += ltime(p, x->rc, x->zero, x->B);
      w += x->zero ? p->wmem_z1 : p->wmem;
      a += lact(p, x->rc);
    }
    double mem = w + f * a + (x->rc == PSIM_RECOMPUTE_FULL ? amax : 0);
    if (mem <= x->A->mem_bytes)
      best = fmin(best, t);
  }
  return best;
}

/* Every cut of layers k.. into stages i..S-1; sum and max so far. */
static double cuts(bf_cfg *x, int32_t i, int32_t k, double sum, double mx) {
  if (i == x->S)
    return k == x->L ? sum + (x->B - 1) * mx : INFINITY;
  double best = INFINITY;
  for (int32_t j = k; j <= x->L - (x->S - i); j++) {
    double t = stage(x, k, j, i);
    if (isfinite(t))
      best = fmin(best, cuts(x, i + 1, j + 1, sum + t, fmax(mx, t)));
  }
  return best;
}

static double brute_force(alpa *A) {
  double best = INFINITY;
  for (int32_t n = 1; n <= A->c->n_devices; n++)
    for (int32_t mb = 0; mb < A->n_mbs; mb++)
      for (int rc = 0; rc < 3; rc++)
        for (int zero = 0; zero <= A->max_zero; zero++) {
          bf_cfg x = {.A = A, .L = A->m->n_layers, .S = A->c->n_devices / n, .mb = mb, .rc = rc};
          x.zero = zero;
          x.B = (int32_t)(A->batch / A->mbs[mb]);
          options(&x, n);
          if (x.n_opts > 0)
            best = fmin(best, cuts(&x, 0, 0, 0, 0));
        }
  return best;
}

/* The DP's best estimate and brute force's, for device memory mem (bytes). */
static void dp_and_brute(const psim_model *m, psim_cluster *c, double mem, int max_zero, double *dp,
                         double *bf) {
  c->types[0].mem_bytes = mem;
  psim_search_options o;
  psim_search_options_init(&o);
  alpa A;
  ck_assert_msg(psim_alpa_setup(&A, m, c, &o) == PSIM_OK, "%s", psim_error_message());
  A.max_zero = max_zero;
  ck_assert_msg(psim_alpa_search_all(&A) == PSIM_OK, "%s", psim_error_message());
  *dp = INFINITY;
  for (int32_t i = 0; i < A.n_top; i++)
    *dp = fmin(*dp, A.top[i].estimate);
  *bf = brute_force(&A);
  psim_alpa_teardown(&A);
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
  ck_assert_int_gt(zero_wins, 0); /* the case does exercise ZeRO 1 */
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("alpa_dp");
  TCase *t = tcase_create("core");
  tcase_set_timeout(t, 300);
  tcase_add_test(t, dp_equals_brute_force);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
