/* modern_rank.c - ranking figures of the modern calibration (issue 20, item 6):
 * Spearman's rank correlation and the pick regret. */
#include <math.h>
#include <stdlib.h>

#include "modern.h"

/* Average ranks (1-based) of v into r: tied values share the mean of the
 * ranks they span. O(n^2), n is a group of a few rows. */
static void ranks(const double *v, int n, double *r) {
  for (int i = 0; i < n; i++) {
    int below = 0, equal = 0;
    for (int j = 0; j < n; j++) {
      below += v[j] < v[i];
      equal += v[j] == v[i];
    }
    r[i] = below + (equal + 1) / 2.0;
  }
}

double modern_spearman(const double *x, const double *y, int n) {
  if (n < 2)
    return NAN;
  double *rx = malloc(2 * (size_t)n * sizeof *rx);
  if (!rx)
    return NAN;
  double *ry = rx + n;
  ranks(x, n, rx);
  ranks(y, n, ry);
  double mean = (n + 1) / 2.0, sxy = 0, sxx = 0, syy = 0;
  for (int i = 0; i < n; i++) {
    sxy += (rx[i] - mean) * (ry[i] - mean);
    sxx += (rx[i] - mean) * (rx[i] - mean);
    syy += (ry[i] - mean) * (ry[i] - mean);
  }
  free(rx);
  return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
}

double modern_regret(const double *pred, const double *meas, int n) {
  if (n < 1)
    return NAN;
  double top = pred[0], best = meas[0];
  for (int i = 1; i < n; i++) {
    top = fmax(top, pred[i]);
    best = fmax(best, meas[i]);
  }
  double sum = 0;
  int picks = 0;
  for (int i = 0; i < n; i++)
    if (pred[i] == top) {
      sum += best / meas[i] - 1;
      picks++;
    }
  return sum / picks;
}
