/* alpa_dp_impl.h - the stage DP's state, shared by its driver (alpa_dp.c:
 * the memory options, the stage sizes searched) and its core
 * (alpa_stage_dp.c: the DP over (stages left, first layer, devices left)). */
#ifndef PSIM_ALPA_DP_IMPL_H
#define PSIM_ALPA_DP_IMPL_H

#include "search/alpa/alpa_search_impl.h"

#define MAX_BAND 3 /* stage sizes of one DP: n / 2, n, 2 n */

/* Per option ((mesh, level) of one stage size) prefix sums over layers. */
typedef struct dp_table {
  int32_t n_ml, ml[LEVELS * MAX_MESHES * MAX_BAND];
  int32_t zi[LEVELS * MAX_MESHES * MAX_BAND]; /* the option's stage size (index into z) */
  double *t, *w, *a; /* [option][L + 1]: time per micro-batch, weights, activations */
  double *w1;        /* [option][L + 1]: weights under ZeRO 1 (a ZeRO 2 plan that fits them
                        is written as ZeRO 1: the simulator times both alike) */
  double amax[LEVELS * MAX_MESHES * MAX_BAND]; /* largest activations of one layer */
  double gmax[LEVELS * MAX_MESHES * MAX_BAND]; /* ZeRO 3: weights gathered at once, bytes */
} dp_table;

/* One DP: stages of the band's sizes around the base size n covering the
 * cluster's N devices; d = s n + e u devices left for the last s stages,
 * |e| <= W (the surplus over equal stages stays within n). */
typedef struct dp_ctx {
  alpa *A;
  int32_t L, n, mb, rc, zero, B; /* zero: ZeRO stage, 0 to 3 */
  int32_t N, S0, Smax;           /* devices; stages of n; most stages */
  int32_t nz, z[MAX_BAND];       /* stage sizes (devices), ascending */
  int32_t u, W;                  /* device unit (gcd of z); surplus window, units */
  int32_t F;                     /* in-flight counts tabulated: 1..F */
  double *slow; /* per stage from the front: its slowest device's time factor (nz == 1) */
  dp_table tab;
  double *T;      /* [zi][k][j]: the fastest option's stage time at one micro-batch, s */
  int32_t *Tpick; /* the option */
  int32_t *Tf;    /* the most micro-batches in flight it holds (up to F) */
  /* [zi][k][j]: the last scan beyond Tf (its count in flight, 0 = none; time; option): the
   * cells of one (s, k) ask for the same (zi, k, j, f) once per surplus e */
  int32_t *Sf, *Spick;
  double *St;
  double *G; /* [s][k][e]: least sum of stage times */
  int32_t *next, *pick, S_best;
  bool found; /* some plan fits (set by psim_alpa_dp_enumerate) */
} dp_ctx;

/* alpa_stage_dp.c */
psim_status psim_alpa_dp_alloc(dp_ctx *x);
void psim_alpa_dp_free(dp_ctx *x);
/* The stage-time table of x->tab (after the options are filled). */
void psim_alpa_dp_tabulate(dp_ctx *x);
/* Alpa's enumeration of the bound on the slowest stage; the best plan
 * (its estimate) into A->top. */
psim_status psim_alpa_dp_enumerate(dp_ctx *x);
/* The DP's objective for one bound tmax: least sum of stage times over
 * every stage count; *used: its slowest stage; INFINITY when none. */
double psim_alpa_dp_run(dp_ctx *x, double tmax, double *used);

#endif
