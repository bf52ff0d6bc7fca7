/* coll_plan.c - collectives' plans: each algorithm as phases of point-to-point messages
 * between ranks (collective.c costs them; docs/simulator.md, "Plans"). Split from
 * collective.c unchanged. */
#include "sim/engine/collective_impl.h"

#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/hashmap.h"

void psim_coll_plan_destroy(coll_plan *p) {
  psim_free(p->msgs);
  psim_free(p->phases);
  memset(p, 0, sizeof *p);
}

static psim_status phase_begin(coll_plan *p, int32_t repeat) {
  PSIM_CHECK(PSIM_VEC_RESERVE(p->phases, p->cap_phases, p->n_phases + 1));
  p->phases[p->n_phases++] = (coll_phase){(int32_t)p->n_msgs, 0, repeat};
  return PSIM_OK;
}

static psim_status msg(coll_plan *p, int32_t src, int32_t dst, double bytes) {
  PSIM_CHECK(PSIM_VEC_RESERVE(p->msgs, p->cap_msgs, p->n_msgs + 1));
  p->msgs[p->n_msgs++] = (coll_msg){src, dst, bytes};
  p->phases[p->n_phases - 1].n++;
  return PSIM_OK;
}

static int32_t ceil_log2(int32_t p) {
  int32_t k = 0;
  while ((1 << k) < p)
    k++;
  return k;
}

static int32_t floor_pow2(int32_t p) {
  int32_t q = 1;
  while (q * 2 <= p)
    q *= 2;
  return q;
}

/* ---- plans (ranks are indices into a rank list r of m entries) ---- */

/* Ring over ranks r: `steps` steps of msg_bytes each, i -> i+1. */
static psim_status plan_ring(coll_plan *p, const int32_t *r, int32_t m, int32_t steps,
                             double msg_bytes) {
  if (m < 2 || steps < 1)
    return PSIM_OK;
  PSIM_CHECK(phase_begin(p, steps));
  for (int32_t i = 0; i < m; i++)
    PSIM_CHECK(msg(p, r[i], r[(i + 1) % m], msg_bytes));
  return PSIM_OK;
}

/* Binomial-tree broadcast from rank 0: step k, rank i < 2^k sends to i + 2^k. */
psim_status psim_coll_plan_bcast(coll_plan *p, int32_t m, double bytes) {
  for (int32_t k = 0; (1 << k) < m; k++) {
    PSIM_CHECK(phase_begin(p, 1));
    for (int32_t i = 0; i < (1 << k) && i + (1 << k) < m; i++)
      PSIM_CHECK(msg(p, i, i + (1 << k), bytes));
  }
  return PSIM_OK;
}

/* Binomial-tree reduce to rank 0: the broadcast's steps reversed. */
psim_status psim_coll_plan_reduce(coll_plan *p, int32_t m, double bytes) {
  for (int32_t k = ceil_log2(m) - 1; k >= 0; k--) {
    PSIM_CHECK(phase_begin(p, 1));
    for (int32_t i = 0; i < (1 << k) && i + (1 << k) < m; i++)
      PSIM_CHECK(msg(p, i + (1 << k), i, bytes));
  }
  return PSIM_OK;
}

/* Extra ranks beyond the largest power of two q fold into partners (Thakur
 * et al. 2005, section 4.1): rank q + i sends bytes to rank i (or back). */
static psim_status plan_fold(coll_plan *p, int32_t m, int32_t q, double bytes, int back) {
  if (m == q)
    return PSIM_OK;
  PSIM_CHECK(phase_begin(p, 1));
  for (int32_t i = q; i < m; i++)
    PSIM_CHECK(back ? msg(p, i - q, i, bytes) : msg(p, i, i - q, bytes));
  return PSIM_OK;
}

/* Recursive halving reduce-scatter over the first q (power of two) ranks. */
static psim_status plan_halving(coll_plan *p, int32_t q, double bytes) {
  for (int32_t d = q / 2; d >= 1; d /= 2) {
    bytes /= 2;
    PSIM_CHECK(phase_begin(p, 1));
    for (int32_t i = 0; i < q; i++)
      PSIM_CHECK(msg(p, i, i ^ d, bytes));
  }
  return PSIM_OK;
}

/* Recursive doubling all-gather over q (power of two) ranks, n bytes total. */
static psim_status plan_doubling(coll_plan *p, int32_t q, double n) {
  for (int32_t d = 1; d < q; d *= 2) {
    PSIM_CHECK(phase_begin(p, 1));
    for (int32_t i = 0; i < q; i++)
      PSIM_CHECK(msg(p, i, i ^ d, n * d / q));
  }
  return PSIM_OK;
}

/* Bruck all-gather (any m; recursive doubling's cost when m is a power of
 * two): step k, rank i sends min(2^k, m - 2^k) blocks of n/m to i - 2^k. */
static psim_status plan_bruck(coll_plan *p, int32_t m, double n) {
  for (int32_t d = 1; d < m; d *= 2) {
    PSIM_CHECK(phase_begin(p, 1));
    int32_t blocks = d < m - d ? d : m - d;
    for (int32_t i = 0; i < m; i++)
      PSIM_CHECK(msg(p, i, (i - d + m) % m, n * blocks / m));
  }
  return PSIM_OK;
}

/* Rabenseifner all-reduce: fold, halving reduce-scatter, doubling all-gather,
 * unfold. */
static psim_status plan_hd_allreduce(coll_plan *p, int32_t m, double n) {
  int32_t q = floor_pow2(m);
  PSIM_CHECK(plan_fold(p, m, q, n, 0));
  PSIM_CHECK(plan_halving(p, q, n));
  PSIM_CHECK(plan_doubling(p, q, n));
  return plan_fold(p, m, q, n, 1);
}

/* Binomial gather to rank 0 (n = gathered bytes): step k, rank i with
 * i mod 2^(k+1) == 2^k sends its min(2^k, m - i) blocks to i - 2^k. */
static psim_status plan_gather(coll_plan *p, int32_t m, double n, int scatter) {
  int32_t steps = ceil_log2(m);
  for (int32_t s = 0; s < steps; s++) {
    int32_t k = scatter ? steps - 1 - s : s, d = 1 << k;
    PSIM_CHECK(phase_begin(p, 1));
    for (int32_t i = d; i < m; i += 2 * d) {
      int32_t blocks = d < m - i ? d : m - i;
      PSIM_CHECK(scatter ? msg(p, i - d, i, n * blocks / m) : msg(p, i, i - d, n * blocks / m));
    }
  }
  return PSIM_OK;
}

/* Pairwise-exchange all-to-all: step k, rank i sends n/m to i + k. */
static psim_status plan_alltoall(coll_plan *p, int32_t m, double n) {
  for (int32_t k = 1; k < m; k++) {
    PSIM_CHECK(phase_begin(p, 1));
    for (int32_t i = 0; i < m; i++)
      PSIM_CHECK(msg(p, i, (i + k) % m, n / m));
  }
  return PSIM_OK;
}

/* Nodes met above which group_by_node finds a node's index by a hash map, not a scan. */
#define GROUP_SCAN_NODES 16

/* Ranks grouped by node, in group order: out[j * k + q] is the q-th rank on
 * the j-th node met. *ok is 0 when nodes hold different numbers of ranks.
 * out has room for m entries. O(m * min(nodes, GROUP_SCAN_NODES)) (issue 19: a
 * 2,048-node data-parallel ring scanned 2,048 nodes per rank). */
static psim_status group_by_node(const psim_cluster *c, const int32_t *dev, int32_t m, int32_t *out,
                                 int32_t *nodes, int32_t *per, int *ok) {
  int32_t k = 0, n_nodes = 0;
  for (int32_t i = 0; i < m; i++)
    k += c->devices[dev[i]].node == c->devices[dev[0]].node;
  *ok = 0;
  if (m % k)
    return PSIM_OK;
  int32_t nn = m / k, *ids = psim_malloc(2 * (size_t)nn * sizeof *ids), *cnt = ids + nn;
  if (!ids)
    return psim_error(PSIM_ENOMEM, "collective: out of memory");
  psim_hmap at; /* node -> its index j among those met (nodes are distinct in ids) */
  psim_hmap_init(&at);
  bool hashed = nn > GROUP_SCAN_NODES;
  if (hashed && psim_hmap_reserve(&at, (size_t)nn) != PSIM_OK) {
    psim_free(ids);
    return psim_error(PSIM_ENOMEM, "collective: out of memory");
  }
  for (int32_t i = 0; i < m; i++) {
    int32_t nd = c->devices[dev[i]].node, j = 0;
    if (hashed) {
      if (!psim_hmap_find(&at, (psim_hmap_key){(uint64_t)(uint32_t)nd, 0}, &j))
        j = n_nodes;
    } else
      while (j < n_nodes && ids[j] != nd)
        j++;
    if (j == n_nodes && n_nodes == nn)
      break;
    if (j == n_nodes) {
      if (hashed && psim_hmap_put(&at, (psim_hmap_key){(uint64_t)(uint32_t)nd, 0}, j) != PSIM_OK)
        break; /* cannot happen: reserved for nn nodes */
      ids[n_nodes] = nd;
      cnt[n_nodes++] = 0;
    }
    if (cnt[j] == k)
      break;
    out[j * k + cnt[j]++] = i;
    *ok = i == m - 1;
  }
  psim_hmap_destroy(&at);
  psim_free(ids);
  *nodes = n_nodes;
  *per = k;
  return PSIM_OK;
}

/* Hierarchical all-reduce: ring reduce-scatter in each node, ring all-reduce
 * of n/k among same-local-index ranks across nodes, ring all-gather in node. */
static psim_status plan_hierarchical(coll_plan *p, const int32_t *byn, int32_t nodes, int32_t k,
                                     double n) {
  for (int pass = 0; pass < 2; pass++) {
    if (k > 1) {
      PSIM_CHECK(phase_begin(p, k - 1));
      for (int32_t j = 0; j < nodes; j++)
        for (int32_t i = 0; i < k; i++)
          PSIM_CHECK(msg(p, byn[j * k + i], byn[j * k + (i + 1) % k], n / k));
    }
    if (pass == 1 || nodes < 2)
      continue;
    PSIM_CHECK(phase_begin(p, 2 * (nodes - 1)));
    for (int32_t i = 0; i < k; i++)
      for (int32_t j = 0; j < nodes; j++)
        PSIM_CHECK(msg(p, byn[j * k + i], byn[(j + 1) % nodes * k + i], n / k / nodes));
  }
  return PSIM_OK;
}

/* Ring all-gather / reduce-scatter over `nodes` nodes of k ranks (byn) as k channel rings of
 * 1/k of the data, ring c entering each node at local rank c and leaving from c - 1 (mod k):
 * each rank's NIC carries one channel each way, as NCCL's one ring per NIC (v2.18.3
 * src/graph/search.cc ncclTopoCompute), not one NIC per node. m - 1 steps of n / (m k). */
static psim_status plan_ring_channels(coll_plan *p, const int32_t *byn, int32_t nodes, int32_t k,
                                      double n) {
  int32_t m = nodes * k;
  PSIM_CHECK(phase_begin(p, m - 1));
  for (int32_t ch = 0; ch < k; ch++)
    for (int32_t j = 0; j < nodes; j++)
      for (int32_t q = 0; q < k; q++) {
        int32_t src = byn[j * k + (ch + q) % k];
        int32_t dst = q < k - 1 ? byn[j * k + (ch + q + 1) % k] : byn[(j + 1) % nodes * k + ch];
        PSIM_CHECK(msg(p, src, dst, n / m / k));
      }
  return PSIM_OK;
}

/* Ring all-gather / reduce-scatter: channel rings over several nodes of k > 1 ranks each,
 * else one ring in rank order. */
static psim_status plan_ring_gather(coll_plan *p, const psim_cluster *c, const psim_coll_desc *d,
                                    const int32_t *r) {
  int32_t m = d->n, nodes = 0, k = 0;
  int32_t *byn = psim_malloc((size_t)m * sizeof *byn);
  if (!byn)
    return psim_error(PSIM_ENOMEM, "collective: out of memory");
  int ok = 0;
  psim_status s = group_by_node(c, d->devices, m, byn, &nodes, &k, &ok);
  if (s == PSIM_OK && ok && nodes > 1 && k > 1)
    s = plan_ring_channels(p, byn, nodes, k, d->bytes);
  else if (s == PSIM_OK)
    s = plan_ring(p, r, m, m - 1, d->bytes / m);
  psim_free(byn);
  return s;
}

static int32_t *identity_ranks(int32_t m) {
  int32_t *r = psim_malloc((size_t)m * sizeof *r);
  for (int32_t i = 0; r && i < m; i++)
    r[i] = i;
  return r;
}

/* Hierarchical when asked or (auto) when the group spans several nodes with
 * several ranks on each and the same number on every node; else by algo. */
static psim_status plan_allreduce(coll_plan *p, const psim_cluster *c, const psim_coll_desc *d,
                                  const int32_t *r) {
  int32_t m = d->n, nodes = 0, k = 0;
  double n = d->bytes;
  psim_allreduce_algo a = d->algo;
  if (a == PSIM_AR_AUTO || a == PSIM_AR_HIERARCHICAL) {
    int32_t *byn = psim_malloc((size_t)m * sizeof *byn);
    if (!byn)
      return psim_error(PSIM_ENOMEM, "collective: out of memory");
    int ok = 0;
    psim_status s = group_by_node(c, d->devices, m, byn, &nodes, &k, &ok);
    int hier = s == PSIM_OK && ok && (a == PSIM_AR_HIERARCHICAL || (nodes > 1 && k > 1));
    p->tree_alt = s == PSIM_OK && ok && a == PSIM_AR_AUTO && nodes > 2 && k == 1;
    if (hier)
      s = plan_hierarchical(p, byn, nodes, k, n);
    psim_free(byn);
    if (s != PSIM_OK || hier)
      return s;
  }
  if (a == PSIM_AR_TREE) {
    PSIM_CHECK(psim_coll_plan_reduce(p, m, n));
    return psim_coll_plan_bcast(p, m, n);
  }
  if (a == PSIM_AR_HALVING_DOUBLING)
    return plan_hd_allreduce(p, m, n);
  return plan_ring(p, r, m, 2 * (m - 1), n / m);
}

psim_status psim_coll_plan_build(coll_plan *p, const psim_cluster *c, const psim_coll_desc *d) {
  int32_t m = d->n;
  double n = d->bytes;
  int32_t *r = identity_ranks(m);
  if (!r)
    return psim_error(PSIM_ENOMEM, "collective: out of memory");
  int hd = d->algo == PSIM_AR_HALVING_DOUBLING, pow2 = floor_pow2(m) == m;
  psim_status s = PSIM_OK;
  switch (d->kind) {
  case PSIM_COLL_ALL_REDUCE: s = plan_allreduce(p, c, d, r); break;
  case PSIM_COLL_ALL_GATHER: s = hd ? plan_bruck(p, m, n) : plan_ring_gather(p, c, d, r); break;
  case PSIM_COLL_REDUCE_SCATTER:
    s = hd && pow2 ? plan_halving(p, m, n) : plan_ring_gather(p, c, d, r);
    break;
  case PSIM_COLL_ALL_TO_ALL: s = plan_alltoall(p, m, n); break;
  case PSIM_COLL_BROADCAST: s = psim_coll_plan_bcast(p, m, n); break;
  case PSIM_COLL_REDUCE: s = psim_coll_plan_reduce(p, m, n); break;
  case PSIM_COLL_GATHER: s = plan_gather(p, m, n, 0); break;
  case PSIM_COLL_SCATTER: s = plan_gather(p, m, n, 1); break;
  default: s = psim_error(PSIM_EINPUT, "collective: unknown kind %d", (int)d->kind);
  }
  psim_free(r);
  return s;
}
