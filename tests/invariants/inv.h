/* inv.h - the invariant suite of issue 18 (docs/testing.md, "The invariant suite").
 *
 * A case is a small record of numbers (inv_case): which model (a generator with a few layers,
 * or a shipped file with its batch overridden), which cluster (a preset with a node count, NICs
 * and oversubscription, or a small explicit one) and which strategy (a megatron, data_parallel
 * or zero template, or explicit per-op splits drawn from a seed). inv_inst_make turns it into
 * JSON documents and loads them, so a case can be shrunk (fewer nodes, smaller degrees, fewer
 * layers) by editing numbers and printed as the three documents a person can run with
 * `plansim simulate`. A property takes a loaded instance and answers pass, fail (with why) or
 * skip (does not apply to this case). */
#ifndef PSIM_INV_H
#define PSIM_INV_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "sim/simulate.h"

typedef enum inv_model_kind {
  INV_M_GPT = 0,
  INV_M_LLAMA,
  INV_M_BERT,
  INV_M_MOE,
  INV_M_MLP,
  INV_M_RESNET,
  INV_M_DLRM,
  INV_M_FILE_MLP, /* models/mlp.json */
  INV_M_FILE_ALEXNET,
  INV_M_FILE_GPT13B,
  INV_M_COUNT
} inv_model_kind;

typedef enum inv_cluster_kind { INV_C_PRESET = 0, INV_C_RING, INV_C_STAR } inv_cluster_kind;
typedef enum inv_strat_kind {
  INV_S_MEGATRON = 0,
  INV_S_DP,
  INV_S_ZERO,
  INV_S_EXPLICIT
} inv_strat_kind;

typedef struct inv_case {
  /* model */
  int model; /* inv_model_kind */
  int layers, hidden, heads, seq, vocab, batch, experts, top_k;
  bool flash;
  /* cluster */
  int cluster; /* inv_cluster_kind */
  int preset;  /* index into psim_preset_names() */
  int nodes, nics, per_node;
  double oversub;
  double link_gbs; /* explicit clusters: link bandwidth, GB/s */
  int dev_type;    /* explicit clusters: index into inv_types */
  /* strategy */
  int strat; /* inv_strat_kind */
  int tp, pp, dp, mb, vs, recompute, zero, allreduce, micro_batches;
  bool sp, overlap;
  uint64_t split_seed; /* explicit: per-op splits */
} inv_case;

typedef struct inv_inst {
  cJSON *model_json, *cluster_json, *strategy_json;
  psim_model m;
  psim_cluster c;
  psim_strategy s;
  bool loaded;
} inv_inst;

/* The outcome of a property on one case. */
typedef enum inv_verdict { INV_PASS = 0, INV_FAIL, INV_SKIP } inv_verdict;

/* A property: fills why (a line) on a failure. */
typedef inv_verdict (*inv_prop_fn)(const inv_case *k, inv_inst *x, char *why, size_t n);

typedef struct inv_prop {
  const char *name;
  const char *what;
  inv_prop_fn fn;
  int every; /* run on every Nth case only (slow properties); 1 = all */
} inv_prop;

extern const inv_prop inv_props[];
extern const int inv_n_props;

/* draw.c */
uint64_t inv_rng(uint64_t *state);         /* splitmix64 */
int inv_pick(uint64_t *state, int n);      /* uniform in [0, n) */
void inv_draw(uint64_t seed, inv_case *k); /* a random case */
/* Builds the three documents and loads them; false when the case is not valid (redraw). */
bool inv_inst_make(const inv_case *k, inv_inst *x);
void inv_inst_destroy(inv_inst *x);
void inv_case_describe(const inv_case *k, char *buf, size_t n);
/* The strategy JSON of a case (owned by the caller). */
cJSON *inv_strategy_json(const inv_case *k, const psim_model *m);
cJSON *inv_model_json(const inv_case *k);
cJSON *inv_cluster_json(const inv_case *k);

/* jsonx.c: cluster documents changed */
/* Multiplies every link bandwidth (hierarchical keys or explicit links) and measured bus
 * bandwidth by f. */
bool inv_scale_bandwidth(cJSON *cluster, double f);
/* Multiplies every device type's peak FLOP/s by f ("device_types" overrides with a base). */
bool inv_scale_flops(cJSON *cluster, double f);
/* Multiplies every explicit link's latency by f (the explicit form). */
bool inv_scale_latency(cJSON *cluster, double f);
/* Loads a cluster document into c (initialised here); false on error. */
bool inv_cluster_load(const cJSON *j, psim_cluster *c);

/* props.c helpers */
bool inv_sim(const psim_model *m, psim_cluster *c, const psim_strategy *s, bool fold,
             psim_sim_result *r);
/* Relative comparison: a <= b within rel. */
bool inv_le(double a, double b, double rel);

#endif
