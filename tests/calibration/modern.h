/* modern.h - the simulator against the modern public measurements in
 * ../shared/calibration/modern (issue 20): one row per measured
 * configuration, the CSV reader, the ranking figures (modern_rank.c), the row
 * readers per source (modern_rows.c) and the simulation of a row
 * (modern_sim.c). Private to tests/calibration. */
#ifndef PSIM_MODERN_H
#define PSIM_MODERN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sim/strategy/strategy.h"

/* ---- CSV: '#' comment lines, one header line, RFC 4180 quoting */
#define MODERN_MAX_COLS 80
typedef struct modern_csv {
  FILE *f;
  int n_cols;
  char *names[MODERN_MAX_COLS];
  char *cells[MODERN_MAX_COLS]; /* the current row's cells (into buf) */
  char buf[1 << 16];
  char hdr[1 << 14];
} modern_csv;

/* Opens dir/file and reads the header; false (message on stderr) when absent. */
bool modern_csv_open(modern_csv *c, const char *dir, const char *file);
/* Next data row; false at the end. */
bool modern_csv_next(modern_csv *c);
/* The cell of column name in the current row; "" when the column is absent. */
const char *modern_csv_get(const modern_csv *c, const char *name);
void modern_csv_close(modern_csv *c);

/* ---- a measured row and what the simulator makes of it */
typedef enum modern_family { MF_GPT, MF_MPT, MF_LLAMA } modern_family;

/* A mixture-of-experts row's architecture and expert degrees (modern_moe.c);
 * experts == 0 for a dense row. */
typedef struct modern_moe {
  int64_t experts, top_k, moe_ffn, shared_ffn, dense_layers, head_dim;
  int64_t q_lora, kv_lora, qk_rope, mtp; /* MLA ranks (0 = GQA), MTP modules */
  bool qk_norm, sigmoid, tokendrop;      /* tokendrop: capacity factor 1, else dropless */
  int32_t ep, etp;                       /* etp 0 = tp */
  bool balanced; /* moe_router_force_load_balancing: uniform routing (modern_moe.c) */
  bool graphed;  /* cuda_graph_impl full_iteration: no host sync at the dispatch (modern_moe.c) */
  bool a2a_overlap;   /* moe_a2a_overlap: combined 1F1B (the stack's moe_a2a_overlap) */
  int32_t dispatcher; /* psim_moe_dispatcher from moe_flex_dispatcher_backend (modern_moe.c) */
  bool experimental;  /* enable_megatron_core_experimental: fused multi-hot (modern_moe.c) */
} modern_moe;

typedef struct modern_row {
  const char *source; /* the CSV's short name */
  const char *stack;  /* the stack profile of the software the source ran (docs/stacks.md) */
  int line;           /* data row number within the source (1-based) */
  bool heldout;       /* every fourth row of a source: left out of the stack fit */
  char model[48], gpu[32], precision[40], note[64];
  int32_t gpus;
  modern_family family;
  int64_t layers, hidden, heads, kv_heads, ffn, vocab, seq, batch;
  int32_t tp, pp, vp, cp, dp, micro_batch, zero;
  psim_recompute recompute;
  int32_t recompute_every; /* full recompute of every N-th block only (0: every block) */
  bool sp, fp8;
  bool hbm2e_96g; /* Meta Grand Teton H100: 96 GB HBM2e at 2.4 TB/s (torchtitan files) */
  /* torchtitan's per-row software settings (the stack's flags for the row): eager
   * (torch_compile "no"), async TP, torchao rowwise Float8, FSDP Float8 all-gather */
  bool eager, async_tp, fp8_rowwise, fp8_all_gather;
  bool duplicate;  /* the same runs published twice: printed, not counted */
  double measured; /* tokens/s per GPU */
  modern_moe moe;
  /* results */
  char unsupported[160]; /* non-empty: what plansim lacks to simulate the row */
  double predicted;      /* tokens/s per GPU; 0 when not simulated */
  double predicted_base; /* the same with megatron-lm-2021 (before issue 20's stacks) */
  char type[24];         /* the cluster's device type */
  bool fits;
  char breakdown[64]; /* where the simulated iteration goes, % of it */
} modern_row;

typedef struct modern_rows {
  modern_row *v;
  int n, cap;
} modern_rows;

/* Reads every row of the four sources under dir (appending to rows). Returns
 * the number of sources that could not be opened. */
int modern_read_all(const char *dir, modern_rows *rows);
void modern_rows_destroy(modern_rows *rows);

/* The cluster preset for a source's GPU string; NULL when none. */
const char *modern_preset_of(const char *gpu);
/* "Ampere", "Hopper", "Blackwell" or "other". */
const char *modern_generation(const char *gpu);

/* How modern_simulate picks the stack: the row's profile, or every row on
 * megatron-lm-2021 (base), with the fitted scales of the profiles replaced
 * (scales: gemm, attention; launch overhead in s; 0 = the profile's). */
typedef struct modern_stack_opts {
  bool base;
  double gemm_scale, attn_scale, launch_s;
} modern_stack_opts;

/* Simulates r (fills predicted / fits, or unsupported). */
void modern_simulate(modern_row *r, const modern_stack_opts *o);

/* ---- MoE rows (modern_moe.c) */
struct cJSON;
/* Fills r->moe from a Megatron-Bridge row with num_experts > 0 (source
 * megatron-bridge-moe), or r->unsupported with what plansim lacks. */
void modern_moe_read(const modern_csv *c, modern_row *r);
/* The row's MoE model document (psim_gen_decoder); the caller owns *doc. */
psim_status modern_moe_model(const modern_row *r, struct cJSON **doc);
/* The recipe's pipeline layout of a DeepSeek-V3 row (Megatron-Core's
 * --pipeline-model-parallel-layout string) into buf; false when the recipe gives none
 * (plansim's own split then). */
bool modern_moe_layout(const modern_row *r, char *buf, size_t size);

/* ---- ranking (modern_rank.c) */
/* Spearman's rank correlation of x and y (average ranks for ties); NAN when
 * n < 2 or either side is constant. */
double modern_spearman(const double *x, const double *y, int n);
/* Pick regret: the measured slowdown of the configuration ranked first by
 * pred against the measured best, best / chosen - 1 (0 when the first choice
 * is the best). Configurations tied for first are equally likely picks: the
 * mean of their slowdowns. NAN when n < 1. */
double modern_regret(const double *pred, const double *meas, int n);

#endif
