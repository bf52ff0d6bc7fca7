/* moe_a2a.c - a MoE layer's all-to-all as the stack's token dispatcher sends it
 * (psim_stack.moe_dispatcher; docs/stacks.md, docs/simulator.md "Mixture of experts").
 *
 * comm.c defers the transfers of one connect edge that carry a MoE layer's routed tokens
 * and sorts them into pairwise-exchange rounds. Each transfer holds one copy per (token,
 * expert): the bytes of routing.c's load for the experts [elo, ehi) of the expert side.
 * That is what Megatron-Core's MoEAlltoAllTokenDispatcher sends (permute, then one
 * all_to_all_single of the per-expert copies), the zero value alltoall.
 *
 * The flex dispatcher's DeepEP and HybridEP backends (Megatron-LM
 * megatron/core/transformer/moe/token_dispatcher.py @ bed33f89, MoEFlexTokenDispatcher,
 * _DeepepManager / _HybridEPManager; fused_a2a.py @ 02ad939b) send a token once per
 * destination rank and permute it to that rank's experts there: DeepEP's
 * get_dispatch_layout returns is_token_in_rank, num_tokens_per_rank and
 * num_tokens_per_rdma_rank (README.md @ 0aaa6744, "Example use in model training");
 * across nodes the normal kernels send it once per destination node over RDMA, to the GPU
 * of the same local index there, which forwards it over NVLink to the ranks of that node
 * that hold its experts ("asymmetric-domain bandwidth forwarding, such as forwarding data
 * from NVLink domain to RDMA domain", README.md @ 0aaa6744; csrc/kernels/internode.cu's
 * SourceMeta carries a token's NVLink-rank bit mask with its one RDMA copy); HybridEP is
 * hierarchical the same way (docs/README_Hybrid-EP.md @ 41cad944, "Hierarchical
 * Communication Design": RDMA across nodes, NVLink inside). The combine runs the path
 * backwards: each rank's partial output goes over NVLink to the same-index GPU, which
 * reduces it and sends one copy back over RDMA. DeepEP's own traffic model counts the same
 * expected distinct ranks and scale-out ranks per token (deep_ep/buffers/elastic.py,
 * get_theoretical_num_sms: get_expected_topk). A "node" is the cluster's node: the NVLink
 * domain (a GB200 NVL72 rack is one, topologies/presets.c).
 *
 * With top_k of n experts, a set S of m experts holding share s of the popularity receives
 * k s copies per token under alltoall and P(S) = psim_routing_hit_prob(n, k, m, s) under
 * DeepEP: a transfer's bytes scale by P(S) / (k s) <= 1. Not modelled: the pipelining of
 * the forward hop with the RDMA transfer (here the forward starts when the RDMA message
 * has arrived: an upper bound by the NVLink hop's time), the relay's reduction kernel. */
#include "sim/builder/build_impl.h"
#include "sim/builder/routing.h"
#include "sim/core/alloc.h"

/* The expert dim's index in tensor t, or -1. */
static int32_t expert_index(const psim_model *m, int32_t t) {
  const psim_tensor *ten = &m->tensors[t];
  for (int32_t j = 0; j < ten->rank; j++)
    if (m->dims[ten->dims[j]].role == PSIM_ROLE_EXPERT)
      return j;
  return -1;
}

void psim_moe_a2a_classify(const psim_build *b, int32_t t, const psim_region *src,
                           const psim_region *dst, psim_pending_xfer *p) {
  int32_t je = expert_index(b->m, t);
  p->side = PSIM_A2A_NONE;
  if (je < 0)
    return;
  int64_t n = b->m->dims[b->m->tensors[t].dims[je]].size;
  bool src_all = src->lo[je] == 0 && src->hi[je] == n;
  bool dst_all = dst->lo[je] == 0 && dst->hi[je] == n;
  if (src_all == dst_all)
    return; /* an expert-to-expert resharding (or a whole-layer copy): no routing */
  p->side = src_all ? PSIM_A2A_TO_EXPERTS : PSIM_A2A_FROM_EXPERTS;
  p->elo = (int32_t)(src_all ? dst->lo[je] : src->lo[je]);
  p->ehi = (int32_t)(src_all ? dst->hi[je] : src->hi[je]);
}

/* The routing of a transfer's layer: the expert count, top_k and routing. */
typedef struct a2a_layer {
  int32_t n, k;
  const psim_routing *r;
} a2a_layer;

/* Distinct copies per alltoall copy for experts of total size m and share s. */
static double dedup_factor(const a2a_layer *l, int32_t m, double s) {
  double copies = l->k * s; /* alltoall's per token */
  if (!(copies > 0))
    return 1;
  double f = psim_routing_hit_prob(l->n, l->k, m, s) / copies;
  return f < 1 ? f : 1;
}

static double xfer_factor(const a2a_layer *l, const psim_pending_xfer *p) {
  return dedup_factor(l, p->ehi - p->elo, psim_routing_share(l->r, l->n, p->elo, p->ehi));
}

/* The token side and the expert side of p. */
static int32_t token_dev(const psim_pending_xfer *p) {
  return p->side == PSIM_A2A_TO_EXPERTS ? p->src : p->dst;
}
static int32_t expert_dev(const psim_pending_xfer *p) {
  return p->side == PSIM_A2A_TO_EXPERTS ? p->dst : p->src;
}

/* Whether q joins p's inter-node group: the same token side and direction (and the same
 * source task or barrier), experts in the same remote node. */
static bool same_group(const psim_cluster *c, const psim_pending_xfer *p,
                       const psim_pending_xfer *q) {
  if (q->side != p->side || q->tensor != p->tensor || token_dev(q) != token_dev(p) ||
      c->devices[expert_dev(q)].node != c->devices[expert_dev(p)].node)
    return false;
  return p->side == PSIM_A2A_TO_EXPERTS ? q->from == p->from : q->arrived == p->arrived;
}

typedef struct a2a_scratch {
  int32_t *members; /* indices into pend of the current group */
  uint8_t *done;
  bool one_node; /* no routed-token transfer of the exchange crosses nodes */
} a2a_scratch;

/* Sorts the members by their first expert (insertion: a group is at most a node's ranks). */
static void sort_by_elo(const psim_pending_xfer *pend, int32_t *mem, int32_t n_mem) {
  for (int32_t i = 1; i < n_mem; i++)
    for (int32_t j = i; j > 0 && pend[mem[j - 1]].elo > pend[mem[j]].elo; j--) {
      int32_t t = mem[j];
      mem[j] = mem[j - 1];
      mem[j - 1] = t;
    }
}

/* The group's experts: total size and share; false when two members' experts overlap
 * (replicated experts: left as alltoall sends them). */
static bool group_experts(const a2a_layer *l, const psim_pending_xfer *pend, int32_t *mem,
                          int32_t n_mem, int32_t *m, double *s) {
  sort_by_elo(pend, mem, n_mem);
  *m = 0;
  *s = 0;
  for (int32_t i = 0; i < n_mem; i++) {
    const psim_pending_xfer *q = &pend[mem[i]];
    if (i > 0 && q->elo < pend[mem[i - 1]].ehi)
      return false;
    *m += q->ehi - q->elo;
    *s += psim_routing_share(l->r, l->n, q->elo, q->ehi);
  }
  return true;
}

/* The relay in the remote node: the member whose expert side has the token side's local
 * rank (DeepEP's same-index GPU), else the first. */
static int32_t relay_of(const psim_cluster *c, const psim_pending_xfer *pend, const int32_t *mem,
                        int32_t n_mem, int32_t u) {
  for (int32_t i = 0; i < n_mem; i++)
    if (c->devices[expert_dev(&pend[mem[i]])].local_rank == c->devices[u].local_rank)
      return expert_dev(&pend[mem[i]]);
  return expert_dev(&pend[mem[0]]);
}

/* The share of an NVLink route's bandwidth that HybridEP's kernels reach, dispatch and
 * combine. docs/README_Hybrid-EP.md @ 41cad944, GB200, 8 ranks, 32 SMs (Megatron-Bridge's
 * moe_hybridep_num_sms, scripts/performance/utils/overrides.py @ v0.3.0), "Torch API", the
 * call Megatron-Core makes (fused_a2a.py @ 02ad939b): BF16 dispatch 545.71 GB/s, combine
 * 568.94 GB/s of "algorithm bandwidth", the bytes a rank receives (dispatch) or sends
 * (combine) per second, its own tokens included (tests/test_hybrid_ep.py:
 * dispatched_hidden.numel() * 2 / t). Under uniform routing 7 of those 8 shares cross
 * NVLink: 545.71 x 7/8 / 900 GB/s (NVLink 5 per direction) = 0.531 and 568.94 x 7/8 / 900 =
 * 0.553. The B200 table (16 SMs: 535.94 / 530.86) gives 0.521 / 0.516. */
#define PSIM_HYBRIDEP_NVL_DISPATCH (545.71 * 7 / 8 / 900)
#define PSIM_HYBRIDEP_NVL_COMBINE  (568.94 * 7 / 8 / 900)

double psim_moe_a2a_nvl_share(psim_moe_dispatcher d, int side) {
  if (d != PSIM_MOE_HYBRIDEP || side == PSIM_A2A_NONE)
    return 1;
  return side == PSIM_A2A_TO_EXPERTS ? PSIM_HYBRIDEP_NVL_DISPATCH : PSIM_HYBRIDEP_NVL_COMBINE;
}

/* Adds a routed-token transfer of an exchange inside one node (the tables' setting: 8 ranks
 * in one NVLink domain); under a dispatcher whose kernels reach share f < 1 of the link
 * (psim_moe_a2a_nvl_share), its time past the route's latency is stretched by 1 / f, the
 * links held as long. Not an exchange across nodes: there HybridEP's measured rate is the
 * NIC's, its NVLink parts running under the RDMA transfer (README_Hybrid-EP.md @ 41cad944,
 * H100, 16 ranks on 2 nodes, 8-16 SMs: BF16 dispatch 54-58 GB/s of RDMA bytes per rank, a
 * 400 Gb/s NIC's 50 GB/s), so those keep the link's rate. */
static psim_status add_nvl(psim_build *b, const psim_pending_xfer *p, int32_t from, int32_t src,
                           int32_t dst, double bytes, int32_t arrived) {
  int32_t n0 = b->g.n_tasks;
  PSIM_CHECK(psim_build_add_transfer_after(b, p->x, from, src, dst, bytes, p->mu, 0, arrived));
  double f = psim_moe_a2a_nvl_share(b->c->stack.moe_dispatcher, p->side), lat;
  if (f >= 1 || b->g.n_tasks != n0 + 1 || b->g.info[n0].kind != PSIM_TASK_TRANSFER)
    return PSIM_OK;
  PSIM_CHECK(psim_p2p_time(b->c, src, dst, 0, &lat));
  double *d = &b->g.duration_s[n0];
  *d = lat + (*d - lat) / f;
  return PSIM_OK;
}

/* One inter-node group: the RDMA copy between the token side and the relay, the NVLink
 * hops between the relay and the other members' expert sides. */
static psim_status emit_group(psim_build *b, const a2a_layer *l, const int32_t *mem, int32_t n_mem,
                              int32_t m, double s) {
  const psim_pending_xfer *pend = b->cache->pend, *p = &pend[mem[0]];
  int32_t u = token_dev(p), r = relay_of(b->c, pend, mem, n_mem, u);
  double ib = 0;
  for (int32_t i = 0; i < n_mem; i++)
    ib += pend[mem[i]].bytes;
  ib *= dedup_factor(l, m, s);
  psim_task_info bar = {PSIM_TASK_BARRIER, PSIM_TP_COMM_TP, -1, p->x, p->mu, r, -1};
  int32_t hub;
  PSIM_CHECK(psim_tg_add_task(&b->g, 0, NULL, 0, &bar, &hub));
  bool to = p->side == PSIM_A2A_TO_EXPERTS;
  psim_build_fold_check_transfer(b, 0, u, r);
  if (to)
    PSIM_CHECK(psim_build_add_transfer_after(b, p->x, p->from, u, r, ib, p->mu, 0, hub));
  for (int32_t i = 0; i < n_mem; i++) {
    const psim_pending_xfer *q = &pend[mem[i]];
    int32_t e = expert_dev(q), before = to ? hub : q->from, after = to ? q->arrived : hub;
    if (e == r) {
      if (before >= 0)
        PSIM_CHECK(psim_tg_add_edge(&b->g, before, after));
      continue;
    }
    psim_build_fold_check_transfer(b, 0, to ? r : e, to ? e : r);
    PSIM_CHECK(psim_build_add_transfer_after(b, q->x, before, to ? r : e, to ? e : r,
                                             q->bytes * xfer_factor(l, q), q->mu, 0, after));
  }
  if (!to)
    PSIM_CHECK(psim_build_add_transfer_after(b, p->x, hub, r, u, ib, p->mu, 0, p->arrived));
  return PSIM_OK;
}

/* Transfer i alone: within a node once per destination rank; as alltoall sends it when it
 * is no token/expert exchange or l is unknown. */
static psim_status emit_one(psim_build *b, const a2a_layer *l, const psim_pending_xfer *p,
                            bool one_node) {
  double bytes = p->bytes * (l && p->side != PSIM_A2A_NONE ? xfer_factor(l, p) : 1);
  if (l && one_node)
    return add_nvl(b, p, p->from, p->src, p->dst, bytes, p->arrived);
  return psim_build_add_transfer_after(b, p->x, p->from, p->src, p->dst, bytes, p->mu, 0,
                                       p->arrived);
}

/* Transfer i and, across nodes, its group (marked done). */
static psim_status emit_from(psim_build *b, a2a_scratch *sc, size_t i) {
  psim_comm_cache *h = b->cache;
  const psim_pending_xfer *p = &h->pend[i];
  a2a_layer l;
  bool known = p->side != PSIM_A2A_NONE && psim_routing_layer_shape(b, p->tensor, &l.n, &l.k, &l.r);
  sc->done[i] = 1;
  const psim_cluster *c = b->c;
  if (!known || c->devices[p->src].node == c->devices[p->dst].node)
    return emit_one(b, known ? &l : NULL, p, sc->one_node);
  int32_t n_mem = 0;
  for (size_t j = i; j < h->n_pend; j++)
    if (j == i || (!sc->done[j] && same_group(c, p, &h->pend[j]))) {
      sc->members[n_mem++] = (int32_t)j;
      sc->done[j] = 1;
    }
  int32_t m;
  double s;
  if (group_experts(&l, h->pend, sc->members, n_mem, &m, &s))
    return emit_group(b, &l, sc->members, n_mem, m, s);
  for (int32_t k = 0; k < n_mem; k++) /* replicated experts: as alltoall */
    PSIM_CHECK(emit_one(b, NULL, &h->pend[sc->members[k]], false));
  return PSIM_OK;
}

psim_status psim_moe_a2a_flush(psim_build *b) {
  psim_comm_cache *h = b->cache;
  a2a_scratch sc = {psim_calloc(h->n_pend + 1, sizeof *sc.members), psim_calloc(h->n_pend + 1, 1),
                    true};
  for (size_t i = 0; i < h->n_pend; i++)
    if (h->pend[i].side != PSIM_A2A_NONE &&
        b->c->devices[h->pend[i].src].node != b->c->devices[h->pend[i].dst].node)
      sc.one_node = false;
  psim_status st =
      sc.members && sc.done ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory for an all-to-all");
  for (size_t i = 0; i < h->n_pend && st == PSIM_OK; i++)
    if (!sc.done[i])
      st = emit_from(b, &sc, i);
  psim_free(sc.members);
  psim_free(sc.done);
  h->n_pend = 0;
  return st;
}
