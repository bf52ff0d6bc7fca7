/* alloc.h - the library's one counting allocation wrapper.
 *
 * All library allocations go through these functions so that tests can count
 * live blocks and fail the N-th allocation (psim_alloc_fail_at) to prove that
 * every path returns PSIM_ENOMEM cleanly without leaking. */
#ifndef PSIM_ALLOC_H
#define PSIM_ALLOC_H

#include <stddef.h>

void *psim_malloc(size_t bytes);
void *psim_calloc(size_t count, size_t bytes);
void *psim_realloc(void *ptr, size_t bytes);
void psim_free(void *ptr);
/* psim_free of each of the n pointers (a destructor's arrays in one call:
 * psim_free_each((void *[]){a->x, a->y}, 2)). */
void psim_free_each(void *const *ptrs, size_t n);
char *psim_strdup(const char *s);

/* Makes the n-th allocation from now fail (n >= 1); 0 disables injection. */
void psim_alloc_fail_at(long n);
/* Allocation calls still to come before the injected failure (0 when it has
 * happened or none is set): tests tell "failed and recovered" from "never
 * reached" with it (issue 9, tests/unit/test_allocfail.c). */
long psim_alloc_fail_pending(void);
/* Allocations that failed on this thread since start-up (injected or real):
 * code behind a library that hides out-of-memory (cJSON's parser returns NULL
 * for both bad syntax and a failed allocation) compares it before and after. */
long psim_alloc_failures(void);
/* Allocations made since start-up (successful ones). */
long psim_alloc_count(void);

/* Grows *items (element size elem) so that it holds at least need elements,
 * doubling the capacity *cap. Returns PSIM_ENOMEM on failure, leaving *items
 * untouched. Amortised O(1) per element. */
#include "sim/core/status.h"
psim_status psim_grow(void **items, size_t *cap, size_t need, size_t elem);

/* psim_grow when the array is full, else nothing: the check is inlined, as
 * builders reserve once per element (a call per element was 3% of a search). */
static inline psim_status psim_reserve(void **items, size_t *cap, size_t need, size_t elem) {
  return need <= *cap ? PSIM_OK : psim_grow(items, cap, need, elem);
}

/* Makes room for need elements in arr (capacity cap): PSIM_VEC_RESERVE(arr, cap, need). */
#define PSIM_VEC_RESERVE(arr, cap, need)                                                           \
  psim_reserve((void **)&(arr), &(cap), (need), sizeof *(arr))

#endif
