/* alloc.c - counting allocation wrapper with failure injection.
 *
 * Large blocks (the task graph's per-task and per-edge arrays, the engine's scratch: tens of
 * MB to GB at millions of tasks) are advised as transparent huge pages. A simulation first
 * touches every page of them once, so its run time was dominated by page faults: on the
 * 2-core development VM (THP "madvise" mode, the Debian default) the 1T GPT on 3,072 GPUs
 * (14.1 M tasks, 2.3 GB) spent a third of its CPU time in the kernel's fault path
 * (perf: clear_page_erms, pvm_irq_enable), one fault per 4 KiB. A 2 MiB page takes one
 * fault for 512 (docs/performance.md, "Session 22"). The advice is a hint: where THP is off
 * or the kernel is not Linux nothing changes, and the figures never do. */
#include "sim/core/alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* Blocks below this are left as they are: glibc serves them from its heap in small pieces,
 * and a huge page for a 1 MB array would grow the resident set for no fault saved. */
#define PSIM_HUGE_ADVISE_MIN_BYTES ((size_t)8 << 20)
#define PSIM_HUGE_PAGE_BYTES       ((uintptr_t)2 << 20) /* x86-64 and arm64 (4 KiB granule) PMD size */

/* madvise(MADV_HUGEPAGE) on the 2 MiB-aligned interior of [p, p + bytes). */
static void advise_huge(void *p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (!p || bytes < PSIM_HUGE_ADVISE_MIN_BYTES)
    return;
  uintptr_t lo = ((uintptr_t)p + PSIM_HUGE_PAGE_BYTES - 1) & ~(PSIM_HUGE_PAGE_BYTES - 1);
  uintptr_t hi = ((uintptr_t)p + bytes) & ~(PSIM_HUGE_PAGE_BYTES - 1);
  if (hi > lo)
    (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE); /* a hint: failure changes nothing */
#else
  (void)p;
  (void)bytes;
#endif
}

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
  void *p = malloc(bytes ? bytes : 1);
  advise_huge(p, bytes);
  return counted(p);
}

void *psim_calloc(size_t count, size_t bytes) {
  if (should_fail())
    return NULL;
  void *p = calloc(count ? count : 1, bytes ? bytes : 1);
  if (p && count <= SIZE_MAX / (bytes ? bytes : 1))
    advise_huge(p, count * bytes);
  return counted(p);
}

void *psim_realloc(void *ptr, size_t bytes) {
  if (should_fail())
    return NULL;
  void *p = realloc(ptr, bytes ? bytes : 1);
  advise_huge(p, bytes); /* again: a moved or grown block is a new range */
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
