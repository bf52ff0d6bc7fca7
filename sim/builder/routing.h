/* routing.h - how a mixture-of-experts layer's routed tokens spread over its
 * experts (issue 21; docs/simulator.md, "Mixture of experts").
 *
 * A layer routes each of its T tokens (per sample) to top_k of its E experts:
 * mean = top_k T / E tokens per expert. A routing gives each expert e a share
 * p_e (sum 1), so expert e receives count_e = E p_e mean tokens. A dropless
 * dispatch (psim_op_attrs.dropless) computes every routed token: its capacity
 * dim holds the mean and expert e's load is count_e. A dispatch with a
 * capacity C (the capacity dim's size, capacity factor times the mean) drops
 * the tokens over it: load_e = min(count_e, C).
 *
 * The popularity order follows the expert index (expert 0 is the most
 * popular), so contiguous experts on one device (Megatron-Core's placement:
 * rank r holds experts r E/ep .. (r+1) E/ep - 1) are the hot ones together:
 * the worst placement for a given skew. counts:FILE lists measured counts in
 * expert order and so reproduces any placement exactly.
 *
 * The default (psim_sim_options.routing == NULL): dropless dispatches follow
 * PSIM_ROUTING_DEFAULT_MAXVIO; capacity dispatches compute their whole
 * capacity, as the fixed-shape implementations do (GShard, Switch
 * Transformer, Megatron-Core with --moe-pad-expert-input-to-capacity): the
 * behaviour before routing existed. An explicit routing applies to every
 * dispatch, capped at capacity where there is one. */
#ifndef PSIM_ROUTING_H
#define PSIM_ROUTING_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/core/status.h"
#include "sim/ir/model.h"

typedef enum psim_routing_kind {
  PSIM_ROUTING_UNIFORM = 1, /* p_e = 1 / E */
  PSIM_ROUTING_ZIPF = 2,    /* p_e ~ 1 / (e + 1)^s */
  PSIM_ROUTING_MAXVIO = 3,  /* a linear ramp from (1 + v) mean (expert 0) to (1 - v) mean */
  PSIM_ROUTING_COUNTS = 4   /* p_e ~ counts[e], measured */
} psim_routing_kind;

typedef struct psim_routing {
  psim_routing_kind kind;
  double param;   /* zipf: the exponent s >= 0; maxvio: v in [0, 1) */
  double *counts; /* counts: per expert, owned */
  int32_t n_counts;
} psim_routing;

/* The default skew of dropless dispatches: the maximal violation
 * MaxVio = (max_e load_e - mean) / mean = 0.72 that Wang et al. 2024
 * ("Auxiliary-Loss-Free Load Balancing Strategy for Mixture-of-Experts",
 * arXiv 2408.15664, Table 2) measure for auxiliary-loss balancing (the
 * Megatron-Core default, --moe-router-load-balancing-type aux_loss) on their
 * 1B model over the validation set, as a linear ramp. */
#define PSIM_ROUTING_DEFAULT_MAXVIO 0.72

/* Parses "uniform", "zipf:S" (S >= 0), "maxvio:V" (0 <= V < 1) or
 * "counts:FILE" (a JSON array of non-negative token counts, one per expert, not
 * all zero). Errors name the option (--routing) or the file and JSON path. */
psim_status psim_routing_parse(const char *spec, psim_routing *r);
void psim_routing_destroy(psim_routing *r);

/* Refuses a counts routing whose length is not the expert count of every
 * dispatch of m (an error naming the op). */
psim_status psim_routing_check_model(const psim_routing *r, const psim_model *m);

/* Tokens per sample that experts [lo, hi) of n compute: sum of
 * min(n p_e mean, cap) over e (cap <= 0: no cap). */
double psim_routing_load(const psim_routing *r, int32_t n, int32_t lo, int32_t hi, double mean,
                         double cap);

/* Share of the popularity of experts [lo, hi) of n (sum over all experts: 1). */
double psim_routing_share(const psim_routing *r, int32_t n, int32_t lo, int32_t hi);

/* Probability that a token's top_k experts of n, drawn without replacement, include at
 * least one of a set of m experts holding `share` of the popularity: 1 - prod_{i < k}
 * (1 - share - i a) / (1 - i a), with a = (1 - share) / (n - m) the mean share of an expert
 * outside the set (each draw that misses the set removes one such expert). Uniform routing
 * (share = m / n) gives the exact 1 - C(n - m, k) / C(n, k); DeepEP's own traffic model
 * (get_expected_topk in ElasticBuffer's get_theoretical_num_sms, deep_ep/buffers/elastic.py
 * at 567632d: groups x (1 - comb(E - E / groups, k) / comb(E, k))). */
double psim_routing_hit_prob(int32_t n, int32_t top_k, int32_t m, double share);

/* ---- the builder's hooks (sim/builder) ------------------------------------- */

struct psim_build;
struct psim_region;

/* Op o's shard: its capacity extent becomes the tokens its experts compute
 * (per expert, rounded up), when o iterates over a layer's expert and
 * capacity dims. */
void psim_routing_shard_extents(const struct psim_build *b, int32_t o, int32_t shard, int64_t *ext);
/* The share of the elements of tensor t in both regions a and c that carry
 * routed tokens (1 when t has no expert and capacity dims). */
double psim_routing_bytes_scale(const struct psim_build *b, int32_t t, const struct psim_region *a,
                                const struct psim_region *c);
/* A MoE dispatch's or combine's tokens under a split of the sequence (context
 * or sequence parallelism): the dims of its token tensor (dispatch: input 0,
 * combine: output 0) that its routed tensor [batch, expert, capacity, ...]
 * lacks are its token dims; a shard of them holds its own tokens, so its view
 * of the routed tensor is its slice of the capacity dim (shard s of p along
 * a token dim: [C s / p, C (s + 1) / p)), and its gradient there is no
 * partial sum. Megatron-Core's dispatchers route each rank's local tokens
 * (MoEAlltoAllTokenDispatcher: the tokens of its sequence shard under cp and
 * sequence parallelism). */
/* Whether op's dim d is a token dim of op's routed tensor t (false unless op
 * is a dispatch or combine and t its routed tensor). O(rank). */
bool psim_routing_token_dim(const psim_model *m, const psim_op *op, int32_t t, int32_t d);
/* Narrows region r of tensor t, as op o's shard with coordinates coord sees it, to the
 * shard's capacity slice when o splits a token dim of its routed tensor t. */
void psim_routing_token_region(const struct psim_build *b, int32_t o, const int32_t *coord,
                               int32_t t, struct psim_region *r);
/* Whether tensor t has a dim of role expert (a MoE layer's routed tokens:
 * its gathers are the dispatch's or combine's all-to-all). O(rank). */
bool psim_routing_expert_tensor(const psim_model *m, int32_t t);
/* The expert count, top_k and routing of the layer whose routed tokens tensor t holds (a
 * capacity dispatch without a routing: uniform); false when t is no such tensor. */
bool psim_routing_layer_shape(const struct psim_build *b, int32_t t, int32_t *n_experts,
                              int32_t *top_k, const psim_routing **r);
/* False when routing makes the devices of an expert-split op do unequal work
 * (folding's representative would not stand for its peers). */
bool psim_routing_symmetric(const struct psim_build *b);

#endif
