/* alpa_search_impl.h - the Alpa optimizer's search state, shared by its
 * driver (alpa.c), the memoised ILP points (alpa_points.c), the stage DP
 * (alpa_dp.c) and the explicit strategy of a plan (alpa_plan.c). */
#ifndef PSIM_ALPA_SEARCH_IMPL_H
#define PSIM_ALPA_SEARCH_IMPL_H

#include <pthread.h>
#include <time.h>

#include "search/alpa/alpa_fix.h"
#include "search/alpa/alpa_impl.h"
#include "search/budget.h"
#include "search/search.h"

#define TOP_K       5 /* DP plans re-simulated (the issue allows a handful) */
#define TOP_UNEQUAL 2 /* plans with stages of different sizes, re-simulated besides */
#define TOP_VIRTUAL 6 /* interleaved variants of the equal-stage plans, simulated besides */
#define TOP_BASES   3 /* the best interleavable equal plan of each recomputation mode */
#define MAX_CANDS   (TOP_K + TOP_UNEQUAL + TOP_VIRTUAL + TOP_BASES)
#define EPS_TMAX    0.002 /* Alpa's second pruning: relative step of the bound */
#define MEM_USE     1.0   /* share of device memory the DP plans for (workspace, fragmentation) */
#define MAX_MESHES  8
/* ILP levels per (layer class, mesh, micro-batch): 0 minimises time; 1 and 2
 * add memory to the objective at LEVEL_MEM_WEIGHT[level] times level 0's
 * time per byte, for stages that would not fit otherwise (2 is memory first,
 * time breaking ties: what a 1T model on 80 GB devices needs). */
#define LEVELS  3
#define MAX_MBS 128 /* micro-batch sizes considered (divisors of the batch) */

static inline double psim_alpa_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ILP result of one (layer class, logical mesh, micro-batch size, level). */
typedef struct alpa_point {
  bool solved, ok;
  double time, fwd, fwd_attn, sync, sync_z1, wmem, wmem_z1, act, act_sel, act_full;
  double wmem_z2, wmem_z3, sync_z3, gather_z3, gbytes_z3; /* ZeRO 2 and 3 (psim_sh_cost) */
  int8_t (*op_dim)[2];                                    /* per local op: op dim per axis */
  bool seq_parallel; /* some partial sums are reduce-scattered along the sequence */
} alpa_point;

typedef struct alpa_mesh {
  int32_t n, a0, a1;
  psim_sh_mesh *sh; /* fitted lazily */
} alpa_mesh;

typedef struct alpa_cand {
  double estimate;
  int32_t n, S, mb_id, rc,
      zero;        /* zero: ZeRO stage of the plan (0-3; 1-2: distributed optimizer) */
  int32_t zero_dp; /* the ZeRO stage of the DP that found it */
  int32_t pool;    /* 0: equal stages; 1: stages of different sizes; 2: interleaved; 3: a base
                      of interleaved variants only (not simulated itself) */
  int32_t v;       /* virtual stages per stage (interleaving; 1 = none) */
  int32_t *last;   /* S entries: last layer of each stage */
  int32_t *ml;     /* S entries: mesh * LEVELS + level */
} alpa_cand;

typedef struct alpa {
  /* The model the search plans over: the caller's, or for a graph without layer indices
   * relayered, a copy whose ops' layers are the clusters of psim_alpa_cluster_layers
   * (sharing everything but the ops and tensors arrays). Plans are simulated on m0, the
   * caller's, with the clusters as the strategy's layer override (strategy.h). */
  const psim_model *m;
  const psim_model *m0;
  psim_model relayered;
  int32_t *op_cluster; /* per op: its cluster (the override), NULL when not clustered */
  int32_t n_clusters;
  psim_cluster *c;
  const psim_search_options *o;
  psim_alpa_fix fix;
  int64_t batch;
  int max_zero;      /* ZeRO stages the DP tries: 0..max_zero (3 by default; 0 = no ZeRO) */
  bool equal_stages; /* every stage of a plan has the base size (tests: before issue 23) */
  double mem_bytes;
  int32_t n_classes, *class_of, *class_layer; /* per layer; per class: its first layer */
  int32_t n_meshes;
  alpa_mesh meshes[64];
  int32_t n_mbs;
  int64_t mbs[MAX_MBS];
  alpa_point *memo; /* [class][mesh][mb][level] */
  uint8_t *blame;   /* per --fix entry (alpa_fix.h): it made some ILP infeasible */
  bool blamed;      /* some entry of blame is set */
  int64_t ilp_count, memo_lookups, memo_hits, timeouts;
  double ilp_s, dp_s, max_gap, mesh_s, sim_s;
  alpa_cand top[MAX_CANDS];
  int32_t n_top;
  double deadline_s;  /* auto (o->quick) with a time budget: candidate simulations that would
                         end after it are skipped (alpa_plan.c); s of psim_budget_clock_s()
                         (CPU time, search/budget.h); 0 = none */
  int32_t n_skipped;  /* candidates not simulated for the deadline */
  pthread_mutex_t mu; /* guards the counters and blame when ILPs run on worker threads */
} alpa;

static inline void alpa_lock(alpa *A) {
  pthread_mutex_lock(&A->mu);
}

static inline void alpa_unlock(alpa *A) {
  pthread_mutex_unlock(&A->mu);
}

/* One ILP point to solve: (layer class, mesh, micro-batch size, level). */
typedef struct psim_alpa_ilp_job {
  int32_t cls, mesh, mb;
  int level;
} psim_alpa_ilp_job;

/* alpa.c: the search state of m on c (layer classes, stage meshes,
 * micro-batch sizes, the empty memo) and its release (tests drive the DP). */
psim_status psim_alpa_setup(alpa *A, const psim_model *m, psim_cluster *c,
                            const psim_search_options *o);
void psim_alpa_teardown(alpa *A);
/* alpa.c: whether n is a base stage size (an Alpa submesh size dividing the
 * cluster into at most n_layers stages, --fix's stage count if given). */
bool psim_alpa_is_base(const alpa *A, int32_t n);
/* alpa.c: whether micro-batch size mb is worth trying on mesh me. */
bool psim_alpa_mb_wanted(const alpa *A, const alpa_mesh *me, int64_t mb);
/* alpa_points.c: the memo's entry of a point; the mesh fitted on first use;
 * the memoised point (solved on first use); points solved on worker threads. */
alpa_point *psim_alpa_memo_at(alpa *A, int32_t cls, int32_t mesh, int32_t mb, int level);
psim_status psim_alpa_mesh_of(alpa *A, int32_t mesh, const psim_sh_mesh **out);
psim_status psim_alpa_point(alpa *A, int32_t cls, int32_t mesh, int32_t mb, int level,
                            const alpa_point **out);
psim_status psim_alpa_solve_jobs(alpa *A, const psim_alpa_ilp_job *jobs, int32_t n);
/* cluster_layers.c: for a graph without layer indices (one layer, no repeated blocks, no
 * --fix) on more than one device, the ops clustered into layers and A->m relayered. */
psim_status psim_alpa_cluster_model(alpa *A);
void psim_alpa_cluster_free(alpa *A);
/* alpa_dp.c: the stage DP over every stage size, micro-batch size and
 * recomputation mode, keeping the best TOP_K candidates in A->top. */
psim_status psim_alpa_search_all(alpa *A);
/* alpa_plan.c: interleaved variants of the equal-stage candidates (pool 2). */
psim_status psim_alpa_add_virtual(alpa *A);
/* alpa_plan.c: the candidates' explicit strategies simulated; the best into r. */
psim_status psim_alpa_simulate_top(alpa *A, psim_search_result *r, double t0);
/* Candidate i's explicit strategy (tests). */
psim_status psim_alpa_cand_strategy(alpa *A, int32_t i, psim_strategy *s);

#endif
