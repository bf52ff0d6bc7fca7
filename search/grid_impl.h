/* grid_impl.h - the grid's candidates and pruning rules (grid_space.c), shared with the
 * driver (grid.c). */
#ifndef PSIM_GRID_IMPL_H
#define PSIM_GRID_IMPL_H

#include "search/grid.h"

/* Context parallelism is tried only for sequences of at least this many tokens
 * (grid_space.c's rules). */
#define PSIM_GRID_CP_MIN_SEQ 8192

/* Mixture-of-experts models: classic candidates whose static memory lower bound is over this
 * share of a device come after the others (the activations of a large model's micro-batch
 * need the rest: grid_space.c's MoE order). A heuristic of the order only: nothing is pruned
 * by it. */
#define PSIM_GRID_MOE_STATIC_FRAC 0.5

/* What became of a candidate. */
typedef enum grid_state_kind {
  GRID_PENDING = 0,
  GRID_MEM_ESTIMATE, /* pruned: static memory lower bound over a device */
  GRID_MEM_IMPLIED,  /* pruned: a simulated candidate needing no more memory is over */
  GRID_DOMINATED,    /* pruned: less recomputation, the rest equal, fits */
  GRID_BOUND,        /* pruned: a device's compute is over the best time */
  GRID_ZERO_LOWER,   /* pruned: ZeRO 2 or 3, and the same candidate one stage lower was not
                        over memory (psim_grid_prune) */
  GRID_REFUSED,      /* the template or the simulator's limits refused it */
  GRID_FITS,         /* simulated, fits */
  GRID_OVER,         /* simulated, over memory */
  GRID_STATIC_OVER   /* simulated, over memory on weights, gradients and optimizer alone */
} grid_state_kind;

typedef struct grid_cand {
  psim_megatron_opts mo;
  int32_t pair; /* index of its (tp, pp, cp, ep, etp) pair, in enumeration order */
  bool classic; /* no interleaving, ZeRO 0 (MoE: 1), sequence parallel iff tp > 1: searched first */
  int8_t state; /* grid_state_kind */
  int64_t order;       /* position in enumeration order */
  double static_frac;  /* the static memory lower bound over a device's memory */
  double compute_s;    /* simulated: the critical device's compute, s */
  double time_s;       /* simulated: the iteration time, s */
  double est_s;        /* analytic iteration time, s (grid_order.c; 0: not estimated) */
  double est_mem_frac; /* analytic peak memory over a device's (grid_order.c) */
} grid_cand;

typedef struct grid_space {
  grid_cand *c;
  int64_t n;
  size_t cap;
  int64_t pruned_divisibility; /* combinations never listed */
  int64_t n_hsdp;              /* listed candidates with HSDP shard groups (the FSDP space) */
  int32_t n_pairs;
  double params, capacity; /* the blocks' weight elements; the largest device memory, bytes */
  bool best_first;         /* ordered by psim_grid_space_estimate: no classic-first pass */
} grid_space;

/* Lists every combination of the options' knobs for m on c that Megatron-Core's rules
 * accept, classic candidates first; counts the others in pruned_divisibility. With
 * prune_by_estimate, marks those over memory by the static lower bound. */
psim_status psim_grid_space_build(const psim_model *m, const psim_cluster *c,
                                  const psim_grid_options *o, int32_t max_tp, grid_space *s);
void psim_grid_space_destroy(grid_space *s);

/* Dense models in the Megatron space: orders every candidate by its analytic estimates, those
 * estimated to fit first, fastest first (grid_order.c), and sets best_first. Fails only as
 * psim_cluster_route does (out of memory). */
struct psim_costdb;
psim_status psim_grid_space_estimate(grid_space *s, const psim_model *m, psim_cluster *c,
                                     const struct psim_costdb *db);

/* Orders the non-classic candidates by the best time of their pair among the classic ones
 * (pairs with none last), stable. pair_best[pair]: INFINITY when none fits. */
void psim_grid_space_order(grid_space *s, const double *pair_best);

/* The pruning rule that applies to candidate i given the simulated ones before it
 * (GRID_PENDING when none does): the ZeRO fallback, implied memory, dominance, compute
 * bound. */
grid_state_kind psim_grid_prune(const grid_space *s, int64_t i, bool found, double best_s);

#endif
