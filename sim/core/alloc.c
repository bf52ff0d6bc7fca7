/* alloc.c - counting allocation wrapper with failure injection. */
#include "sim/core/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_long alloc_count;
static atomic_long fail_countdown; /* 0 = never fail */

static _Thread_local long thread_failures; /* failed allocations on this thread */

static int should_fail(void) {
  long n = atomic_load(&fail_countdown);
  if (n <= 0)
    return 0;
  if (atomic_fetch_sub(&fail_countdown, 1) == 1) {
    thread_failures++;
    return 1;
  }
  return 0;
}

static void *counted(void *p) {
  if (p)
    atomic_fetch_add(&alloc_count, 1);
  else
    thread_failures++;
  return p;
}

void *psim_malloc(size_t bytes) {
  if (should_fail())
    return NULL;
  return counted(malloc(bytes ? bytes : 1));
}

void *psim_calloc(size_t count, size_t bytes) {
  if (should_fail())
    return NULL;
  return counted(calloc(count ? count : 1, bytes ? bytes : 1));
}

void *psim_realloc(void *ptr, size_t bytes) {
  if (should_fail())
    return NULL;
  void *p = realloc(ptr, bytes ? bytes : 1);
  if (p && !ptr)
    atomic_fetch_add(&alloc_count, 1);
  if (!p)
    thread_failures++;
  return p;
}

void psim_free(void *ptr) {
  free(ptr);
}

char *psim_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = psim_malloc(n);
  if (p)
    memcpy(p, s, n);
  return p;
}

void psim_alloc_fail_at(long n) {
  atomic_store(&fail_countdown, n > 0 ? n : 0);
}

long psim_alloc_count(void) {
  return atomic_load(&alloc_count);
}

long psim_alloc_failures(void) {
  return thread_failures;
}

long psim_alloc_fail_pending(void) {
  long n = atomic_load(&fail_countdown);
  return n > 0 ? n : 0;
}

psim_status psim_grow(void **items, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return PSIM_OK;
  size_t ncap = *cap ? *cap : 8;
  while (ncap < need)
    ncap *= 2;
  if (ncap > ((size_t)-1) / elem)
    return psim_error(PSIM_ENOMEM, "array of %zu elements is too large", need);
  void *p = psim_realloc(*items, ncap * elem);
  if (!p)
    return psim_error(PSIM_ENOMEM, "out of memory growing an array to %zu elements", ncap);
  *items = p;
  *cap = ncap;
  return PSIM_OK;
}

void psim_free_each(void *const *ptrs, size_t n) {
  for (size_t i = 0; i < n; i++)
    psim_free(ptrs[i]);
}
