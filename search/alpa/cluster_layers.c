/* cluster_layers.c - Alpa's layer clustering (Zheng et al., OSDI'22, section
 * 5.3) for models whose ops carry no layer indices: a DP splits the ops, in
 * topological order, into contiguous groups whose forward + backward FLOPs
 * stay within (1 + delta) of the average while minimising the bytes of the
 * activations that cross the group boundaries (the pipeline traffic). */
#include <math.h>
#include <string.h>

#include "search/alpa/alpa_search_impl.h"
#include "sim/core/alloc.h"

/* cut[p] (p = 1..n-1): bytes of activations produced before op p and read
 * at or after it. Difference array over each tensor's live range. O(ops). */
static void cut_bytes(const psim_model *m, double *cut) {
  int32_t n = m->n_ops;
  memset(cut, 0, (size_t)(n + 1) * sizeof *cut);
  for (int32_t t = 0; t < m->n_tensors; t++) {
    int32_t a = m->tensors[t].producer, z = -1;
    if (a < 0)
      continue;
    for (int32_t i = a + 1; i < n; i++)
      for (int32_t k = 0; k < m->ops[i].n_in; k++)
        if (m->ops[i].in[k] == t)
          z = i;
    if (z > a) {
      double b = psim_tensor_bytes(m, &m->tensors[t]);
      cut[a + 1] += b;
      cut[z + 1] -= b;
    }
  }
  for (int32_t p = 1; p <= n; p++)
    cut[p] += cut[p - 1];
}

static void backtrack(int32_t n, int32_t k, const int32_t *from, int32_t *cluster) {
  int32_t end = n;
  for (int32_t g = k; g >= 1; g--) {
    int32_t start = from[(size_t)g * (n + 1) + end];
    for (int32_t i = start; i < end; i++)
      cluster[i] = g - 1;
    end = start;
  }
}

psim_status psim_alpa_cluster_layers(const psim_model *m, int32_t k, double delta,
                                     int32_t *cluster) {
  int32_t n = m->n_ops;
  if (k < 1 || k > n)
    return psim_error(PSIM_EINPUT, "layer clustering: %d clusters for %d ops", (int)k, (int)n);
  double *pre = psim_calloc((size_t)n + 1, sizeof *pre),
         *cut = psim_malloc(((size_t)n + 1) * sizeof *cut);
  size_t cells = (size_t)(k + 1) * (size_t)(n + 1);
  double *F = psim_malloc(cells * sizeof *F);
  int32_t *from = psim_malloc(cells * sizeof *from);
  if (!pre || !cut || !F || !from) {
    psim_free(pre), psim_free(cut), psim_free(F), psim_free(from);
    return psim_error(PSIM_ENOMEM, "out of memory (layer clustering)");
  }
  for (int32_t i = 0; i < n; i++)
    pre[i + 1] = pre[i] + m->ops[i].flops[PSIM_PASS_FWD] + m->ops[i].flops[PSIM_PASS_BWD];
  cut_bytes(m, cut);
  double cap = (1 + delta) * pre[n] / k;
  for (size_t c = 0; c < cells; c++)
    F[c] = INFINITY;
  F[0] = 0;
  for (int32_t g = 1; g <= k; g++)
    for (int32_t i = g; i <= n; i++)
      for (int32_t j = g - 1; j < i; j++) {
        double prev = F[(size_t)(g - 1) * (n + 1) + j];
        if (!isfinite(prev) || pre[i] - pre[j] > cap * (1 + 1e-12))
          continue;
        double v = prev + (j > 0 ? cut[j] : 0);
        if (v < F[(size_t)g * (n + 1) + i]) {
          F[(size_t)g * (n + 1) + i] = v;
          from[(size_t)g * (n + 1) + i] = j;
        }
      }
  psim_status st = PSIM_OK;
  if (!isfinite(F[(size_t)k * (n + 1) + n]))
    st = psim_error(PSIM_EFAILED,
                    "layer clustering: no split of %d ops into %d groups keeps each within "
                    "%.0f%% of the average FLOPs",
                    (int)n, (int)k, 100 * (1 + delta));
  else
    backtrack(n, k, from, cluster);
  psim_free(pre), psim_free(cut), psim_free(F), psim_free(from);
  return st;
}

/* ---- wiring into the optimizer ---- */

/* Alpa's default imbalance tolerance of a layer's FLOPs, DEFAULT_EPS = 0.6
 * (alpa-projects/alpa, alpa/pipeline_parallel/layer_construction.py). */
#define CLUSTER_DELTA 0.6
/* Most clusters: every stage a cluster at most one per device; 16 bounds the
 * ILPs (one per cluster and mesh; Alpa leaves layer_num to the user). */
#define MAX_CLUSTERS 16

/* The copy of m0 whose ops and tensors carry the clusters as layers (tensors as
 * the loader sets them: an op's outputs its layer, other tensors their first
 * consumer's, sim/ir/model_load_checks.c). */
static psim_status relayer(alpa *A) {
  const psim_model *m0 = A->m0;
  psim_model *r = &A->relayered;
  *r = *m0;
  r->ops = psim_malloc((size_t)m0->n_ops * sizeof *r->ops);
  r->tensors = psim_malloc((size_t)(m0->n_tensors > 0 ? m0->n_tensors : 1) * sizeof *r->tensors);
  if (!r->ops || !r->tensors)
    return psim_error(PSIM_ENOMEM, "out of memory (layer clustering)");
  memcpy(r->ops, m0->ops, (size_t)m0->n_ops * sizeof *r->ops);
  memcpy(r->tensors, m0->tensors, (size_t)m0->n_tensors * sizeof *r->tensors);
  for (int32_t t = 0; t < r->n_tensors; t++)
    r->tensors[t].layer = -1;
  for (int32_t i = 0; i < r->n_ops; i++) {
    psim_op *op = &r->ops[i];
    op->layer = A->op_cluster[i];
    for (int32_t k = 0; k < op->n_in; k++)
      if (r->tensors[op->in[k]].layer < 0)
        r->tensors[op->in[k]].layer = op->layer;
    for (int32_t k = 0; k < op->n_out; k++)
      r->tensors[op->out[k]].layer = op->layer;
  }
  r->n_layers = A->n_clusters;
  A->m = r;
  return PSIM_OK;
}

psim_status psim_alpa_cluster_model(alpa *A) {
  const psim_model *m = A->m0;
  int32_t N = A->c->n_devices;
  if (m->n_layers != 1 || m->n_blocks > 0 || A->fix.active || N < 2 || m->n_ops < 2)
    return PSIM_OK;
  A->op_cluster = psim_malloc((size_t)m->n_ops * sizeof *A->op_cluster);
  if (!A->op_cluster)
    return psim_error(PSIM_ENOMEM, "out of memory (layer clustering)");
  int32_t k = N < MAX_CLUSTERS ? N : MAX_CLUSTERS;
  if (k > m->n_ops)
    k = m->n_ops;
  for (; k >= 2; k--) { /* fewer clusters when one op outweighs the tolerance */
    psim_status st = psim_alpa_cluster_layers(m, k, CLUSTER_DELTA, A->op_cluster);
    if (st == PSIM_OK) {
      A->n_clusters = k;
      return relayer(A);
    }
    if (st != PSIM_EFAILED)
      return st;
    psim_error_clear();
  }
  psim_free(A->op_cluster);
  A->op_cluster = NULL;
  return PSIM_OK;
}

void psim_alpa_cluster_free(alpa *A) {
  if (A->m == &A->relayered) {
    psim_free(A->relayered.ops);
    psim_free(A->relayered.tensors);
  }
  psim_free(A->op_cluster);
  A->op_cluster = NULL;
  A->m = A->m0;
}
