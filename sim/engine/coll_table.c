/* coll_table.c - the time a measured bus-bandwidth table gives for a
 * collective (nccl-tests convention: /work/shared/calibration/collectives.md). */
#include <math.h>

#include "sim/engine/collective.h"

/* busbw = algbw * factor (nccl-tests, PERFORMANCE.md; collectives.md). */
static double busbw_factor(psim_coll_kind k, int32_t n) {
  switch (k) {
  case PSIM_COLL_ALL_REDUCE: return 2.0 * (n - 1) / n;
  case PSIM_COLL_BROADCAST:
  case PSIM_COLL_REDUCE: return 1.0;
  default: return (double)(n - 1) / n;
  }
}

double psim_coll_table_time(const psim_coll_table *t, double bytes) {
  const double *x = t->bytes, *y = t->busbw;
  int32_t n = t->n_points;
  double f = busbw_factor(t->kind, t->group_size);
  if (bytes <= x[0]) /* latency-bound below the first point: its time */
    return x[0] * f / y[0];
  if (bytes >= x[n - 1])
    return bytes * f / y[n - 1];
  int32_t lo = 0, hi = n - 1;
  while (hi - lo > 1) {
    int32_t mid = (lo + hi) / 2;
    *(x[mid] <= bytes ? &lo : &hi) = mid;
  }
  double w = log(bytes / x[lo]) / log(x[hi] / x[lo]);
  double busbw = y[lo] + w * (y[hi] - y[lo]);
  return bytes * f / busbw;
}

const psim_coll_table *psim_coll_find_table(const psim_cluster *c, const psim_coll_desc *d) {
  int same_node = 1;
  for (int32_t i = 1; i < d->n; i++)
    same_node &= c->devices[d->devices[i]].node == c->devices[d->devices[0]].node;
  for (int32_t i = 0; i < c->n_coll_tables; i++) {
    const psim_coll_table *t = &c->coll_tables[i];
    if (t->kind == d->kind && t->group_size == d->n && t->intra_node == (bool)same_node &&
        t->n_points > 0)
      return t;
  }
  return NULL;
}
