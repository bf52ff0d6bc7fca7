/* sort.c - radix sort of non-negative int32 arrays (sort.h). */
#include "sim/core/sort.h"

#include <assert.h>
#include <string.h>

#include "sim/core/alloc.h"

enum { DIGIT_BITS = 11, DIGITS = 1 << DIGIT_BITS, SMALL = 64 };

static void insertion_sort(int32_t *a, size_t n) {
  for (size_t i = 1; i < n; i++) {
    int32_t v = a[i];
    size_t j = i;
    for (; j > 0 && a[j - 1] > v; j--)
      a[j] = a[j - 1];
    a[j] = v;
  }
}

/* One stable counting pass on the digit at `shift`, from src into dst. */
static void radix_pass(const int32_t *src, int32_t *dst, size_t n, int shift) {
  size_t count[DIGITS + 1];
  memset(count, 0, sizeof count);
  for (size_t i = 0; i < n; i++)
    count[(((uint32_t)src[i] >> shift) & (DIGITS - 1)) + 1]++;
  for (size_t d = 0; d < DIGITS; d++)
    count[d + 1] += count[d];
  for (size_t i = 0; i < n; i++)
    dst[count[((uint32_t)src[i] >> shift) & (DIGITS - 1)]++] = src[i];
}

psim_status psim_sort_nonneg_i32(int32_t *a, size_t n) {
  if (n < SMALL) {
    insertion_sort(a, n);
    return PSIM_OK;
  }
  int32_t max = 0;
  for (size_t i = 0; i < n; i++) {
    assert(a[i] >= 0);
    max = a[i] > max ? a[i] : max;
  }
  int32_t *tmp = psim_malloc(n * sizeof *tmp);
  if (!tmp)
    return psim_error(PSIM_ENOMEM, "sort: out of memory for %zu values", n);
  int32_t *src = a, *dst = tmp;
  for (int shift = 0; shift < 31 && ((uint32_t)max >> shift) != 0; shift += DIGIT_BITS) {
    radix_pass(src, dst, n, shift);
    int32_t *t = src;
    src = dst;
    dst = t;
  }
  if (src != a)
    memcpy(a, src, n * sizeof *a);
  psim_free(tmp);
  return PSIM_OK;
}
