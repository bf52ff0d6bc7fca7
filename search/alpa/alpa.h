/* alpa.h - the Alpa-style optimizer (Zheng et al., OSDI'22; DESIGN.md 6):
 * an integer program per (layer, logical mesh, micro-batch size) chooses how
 * every op is sharded (search/alpa/ilp.h, memoised over identical layers), and a
 * dynamic program over contiguous layer ranges and submeshes chooses the
 * pipeline stages, minimising
 *   sum of stage times + (micro-batches - 1) * slowest stage,
 * with the bound on the slowest stage enumerated in increasing order and
 * Alpa's two prunings. Micro-batch count and recomputation are searched
 * around it; the best few plans are re-simulated with psim_simulate and the
 * fastest that fits is the result (its simulation is the reported figure).
 *
 * Submeshes. Alpa's shapes are (1, 2^k) inside a node and (n, devices per
 * node); this implementation gives every stage of one plan the same shape
 * (S stages x N/S devices; the layer ranges may differ), which keeps the DP
 * at O(S x L^2) per bound. docs/search.md "Alpa optimizer" has the details. */
#ifndef PSIM_ALPA_H
#define PSIM_ALPA_H

#include "search/search.h"

/* The searcher behind `plansim plan --search alpa`. o->fix is a partial
 * strategy (docs/strategy.md, "Partial strategies"): its op splits become
 * fixed variables of the ILPs, its pipeline and recompute choices fixed
 * choices of the DP; contradictions are PSIM_EINPUT naming the entries.
 * r->stats: ilp_count, ilp_time_s, ilp_max_gap, ilp_timeouts, dp_time_s,
 * memo_lookups, memo_hits, memo_hit_rate, candidates_simulated,
 * estimate_s (the DP's iteration estimate of the plan); the *_time_s figures are CPU s
 * (search/budget.h: ILPs, DP and mesh fits their threads', simulations the budget clock). */
psim_status psim_search_alpa(const psim_model *m, psim_cluster *c, const psim_search_options *o,
                             psim_search_result *r);

#endif
