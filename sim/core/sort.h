/* sort.h - sorting integer arrays in linear time.
 *
 * The builder sorts lists of link ids that grow with the cluster (an aggregated
 * collective's held links: tens of thousands at 131,072 GPUs); qsort's comparison calls
 * cost about 300 instructions per element there, a radix sort about 25. */
#ifndef PSIM_SORT_H
#define PSIM_SORT_H

#include <stddef.h>
#include <stdint.h>

#include "sim/core/status.h"

/* Sorts a[0..n) (every value >= 0) in increasing order: an LSD radix sort on 11-bit digits,
 * only as many passes as the largest value needs; insertion sort below 64 elements.
 * PSIM_ENOMEM (a untouched) when its scratch of n values cannot be allocated. */
psim_status psim_sort_nonneg_i32(int32_t *a, size_t n);

#endif
