/* grid.h - the Megatron grid: every Megatron-Core configuration (tp x pp x dp, virtual
 * stages, distributed optimizer / ZeRO stage, sequence parallelism, micro-batch,
 * recompute) that the runtime accepts, pruned by divisibility, memory, dominance and a
 * compute bound before simulation, the rest simulated, the fastest that fits kept
 * (docs/search.md, "The Megatron grid"). */
#ifndef PSIM_GRID_H
#define PSIM_GRID_H

#include <stdio.h>

#include "sim/simulate.h"
#include "sim/strategy/strategy.h"

/* Which runtime's space the grid searches (docs/search.md, "The Megatron grid"). */
typedef enum psim_grid_space_kind {
  PSIM_GRID_MEGATRON = 0, /* Megatron-Core: ZeRO 0..max_zero, selective recompute, 1F1B */
  /* torchtitan v0.2.2 (FSDP2 stacks): FSDP (ZeRO 3 over the data-parallel ranks or, HSDP, over
   * shard groups of a node's ranks and more: psim_megatron_opts.dp_shard; overlapped) with tp
   * (always with sequence parallelism) and pp, DDP only alone; pipeline schedules 1F1B, GPipe and
   * Interleaved1F1B; activation checkpointing none or full */
  PSIM_GRID_FSDP
} psim_grid_space_kind;

typedef struct psim_grid_options {
  psim_grid_space_kind space; /* default PSIM_GRID_MEGATRON; psim_search_grid picks FSDP for
                                 the pytorch-fsdp2 and llm-foundry-fsdp stacks */
  int32_t max_tp;             /* default: devices per node (NVLink domain) */
  int32_t micro_batches[8];   /* micro-batch sizes tried; default 1, 2, 4, 8 */
  int32_t n_micro_batches;
  bool try_recompute;             /* none, selective and full; default true */
  bool try_overlap_grad_reduce;   /* Megatron space, dp > 1: also with the gradient all-reduce
                                     overlapped with the backward pass (--overlap-grad-reduce;
                                     grid_space.c); default true */
  bool try_overlap_param_gather;  /* Megatron space, with the gradient reduce overlapped at
                                     ZeRO 1 and 2: also with the updated parameters' all-gathers
                                     overlapped with the next forward (--overlap-param-gather;
                                     grid_space.c); default true */
  bool try_recompute_block;       /* with try_recompute, Megatron space: full recomputation of
                                     the first N layers of each model chunk (--recompute-method
                                     block), N a power of two below the chunk's layers
                                     (grid_space.c); default true */
  bool try_fp8;                   /* also every candidate with FP8 linear layers (the strategy's
                                     "fp8", Transformer Engine's --fp8-format hybrid, torchao's
                                     Float8Linear), where the device has an FP8 rate and the
                                     model's linears are not FP8 already; default false: FP8 changes
                                     the numerics, so it is the user's choice (plan --fp8) */
  bool try_pp_schedules;          /* FSDP space, pp > 1: also torchtitan's other schedules:
                                     InterleavedZeroBubble (any virtual stages), LoopedBFS
                                     (more than one), ZBVZeroBubble (two); default true */
  int32_t max_virtual_stages;     /* interleaving: virtual stages per pipeline rank tried, 1..this
                                     (those Megatron-Core accepts); default 8, 1 = none */
  int32_t max_zero;               /* ZeRO stages tried, 0..this; default 3 (1: Megatron-Core's
                                     distributed optimizer; 2, 3: Megatron-FSDP's optim_grads,
                                     optim_grads_params), at most 3. Stages 2 and 3 are
                                     fallbacks: simulated only where the stage below is over
                                     memory (psim_grid_prune) */
  bool try_sequence_parallel_off; /* at tp > 1 also try without sequence parallelism
                                     (default false: sequence parallelism moves the same bytes
                                     (reduce-scatter + all-gather for each all-reduce), runs the
                                     norms and dropout on 1/tp of the tokens and keeps 1/tp of
                                     their activations, Korthikanti et al. 2022, 4.2.2); tp 1
                                     never has it */
  bool prune_by_estimate;         /* skip candidates whose weights, gradients and optimizer state
                                     alone exceed a device by a lower bound (default true; false
                                     simulates them: the tests check the bound that way) */
  int64_t max_evaluations;        /* default 10,000 */
  bool best_first;                /* dense models, Megatron space: simulate in the order of an
                                     analytic time and memory estimate, those estimated to fit
                                     first (grid_order.c; default true); false: the classic
                                     candidates first, then the rest by their pair's best */
  double budget_s; /* time budget, s of CPU (search/budget.h); 0 = none (default). The grid stops
                      before a configuration that the mean cost of those simulated so far says would
                      end past it (issue 18: a baseline affordable at scale) */
  const psim_sim_options *sim;
  FILE *progress; /* progress lines (a terminal) or NULL */
} psim_grid_options;

void psim_grid_options_init(psim_grid_options *o);

/* One evaluated point of the search, for the best-so-far curve. */
typedef struct psim_search_point {
  int64_t evaluation;
  double wall_s;
  double best_time_s;
} psim_search_point;

typedef struct psim_grid_result {
  psim_megatron_opts best; /* fastest configuration that fits */
  psim_sim_result best_sim;
  bool found;
  int64_t evaluations, feasible;
  int64_t total;               /* candidates: every combination of the knobs above */
  int64_t visited;             /* candidates reached: simulated, refused by the template, pruned */
  int64_t pruned;              /* all pruned candidates (the sum of the six counts below) */
  int64_t pruned_divisibility; /* a rule of Megatron-Core refuses them (tp dividing heads and
                                  ffn, pp and pp x vp dividing the layers, the batch, ...) */
  int64_t pruned_memory_estimate; /* static memory lower bound over a device */
  int64_t pruned_memory_implied;  /* over memory because a simulated candidate that needs no
                                     more memory is (memory grows with the micro-batch, with
                                     less recomputation, without sequence parallelism, with a
                                     lower ZeRO stage) */
  int64_t pruned_dominated;       /* a candidate with less recomputation, the rest equal, fits */
  int64_t pruned_bound;           /* the compute of a device, known from a simulated candidate
                                     with the same kernels, is already over the best time */
  int64_t pruned_zero_lower;      /* ZeRO 2 or 3 where the stage below was not over memory:
                                     plansim's ZeRO 2 moves the bytes of ZeRO 1 (a
                                     reduce-scatter and an all-gather) and ZeRO 3 more, so a
                                     higher stage pays only in memory */
  int64_t refused;                /* refused by the template or the simulator's limits */
  int64_t hsdp;                   /* candidates with HSDP shard groups (FSDP space; in total) */
  bool stopped_by_time;           /* budget_s ran out before the grid was done */
  double wall_s;
  psim_search_point *curve; /* best so far after each improvement */
  int32_t n_curve;
} psim_grid_result;

void psim_grid_result_init(psim_grid_result *r);
void psim_grid_result_destroy(psim_grid_result *r);

/* Searches the grid: the classic configurations first (no interleaving, ZeRO 0, sequence
 * parallelism at tp > 1), then the others, most promising (tp, pp) pair first. Needs the
 * model's batch, heads and ffn roles (ops of a Megatron-style transformer); PSIM_EINPUT
 * otherwise. Strategies that do not expand are skipped, not errors. */
psim_status psim_grid_search(const psim_model *m, psim_cluster *c, const psim_grid_options *o,
                             psim_grid_result *r);

#endif
