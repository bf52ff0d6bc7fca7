/* devlist.c - shared, reference-counted device lists of op configs (devlist.h). */
#include "sim/strategy/devlist.h"

#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "sim/core/alloc.h"

/* Marks a block made here: a list from elsewhere handed to a config is a bug that the
 * debug and sanitizer builds stop at (assert) instead of freeing a wrong pointer. */
#define DEVLIST_MAGIC 0x64766c73u /* "dvls" */

/* 16 bytes, so the entries keep malloc's alignment. */
typedef struct devlist_head {
  long refs; /* atomic (__atomic builtins) */
  int32_t cap;
  uint32_t magic;
} devlist_head;

static devlist_head *head_of(const int32_t *d) {
  devlist_head *h = (devlist_head *)(void *)((char *)(uintptr_t)d - sizeof(devlist_head));
  assert(h->magic == DEVLIST_MAGIC);
  return h;
}

static size_t block_bytes(int32_t cap) {
  return sizeof(devlist_head) + (size_t)(cap > 0 ? cap : 1) * sizeof(int32_t);
}

int32_t *psim_devlist_new(int32_t cap) {
  devlist_head *h = psim_malloc(block_bytes(cap));
  if (!h)
    return NULL;
  h->refs = 1;
  h->cap = cap > 0 ? cap : 1;
  h->magic = DEVLIST_MAGIC;
  return (int32_t *)(void *)(h + 1);
}

int32_t *psim_devlist_from(const int32_t *src, int32_t n) {
  int32_t *d = psim_devlist_new(n);
  if (d && n > 0)
    memcpy(d, src, (size_t)n * sizeof *d);
  return d;
}

const int32_t *psim_devlist_share(const int32_t *d) {
  if (d)
    __atomic_fetch_add(&head_of(d)->refs, 1, __ATOMIC_RELAXED);
  return d;
}

void psim_devlist_release(const int32_t *d) {
  if (!d)
    return;
  devlist_head *h = head_of(d);
  if (__atomic_sub_fetch(&h->refs, 1, __ATOMIC_ACQ_REL) == 0) {
    h->magic = 0;
    psim_free(h);
  }
}

bool psim_devlist_shared(const int32_t *d) {
  return d && __atomic_load_n(&head_of(d)->refs, __ATOMIC_ACQUIRE) > 1;
}

int32_t psim_devlist_cap(const int32_t *d) {
  return d ? head_of(d)->cap : 0;
}

/* The caller's own list grown in place to cap entries. */
static psim_status grow_own(const int32_t **list, int32_t cap, int32_t **out) {
  devlist_head *h = psim_realloc(head_of(*list), block_bytes(cap));
  if (!h)
    return psim_error(PSIM_ENOMEM, "out of memory for a device list");
  h->cap = cap;
  *out = (int32_t *)(void *)(h + 1);
  *list = *out;
  return PSIM_OK;
}

psim_status psim_devlist_writable(const int32_t **list, int32_t keep, int32_t cap, int32_t **out) {
  assert(keep >= 0 && keep <= cap && (*list || keep == 0));
  if (*list && !psim_devlist_shared(*list)) {
    if (cap <= psim_devlist_cap(*list)) {
      *out = (int32_t *)(uintptr_t)*list; /* ours alone: the one reference is the caller's */
      return PSIM_OK;
    }
    return grow_own(list, cap, out);
  }
  int32_t *d = psim_devlist_new(cap);
  if (!d)
    return psim_error(PSIM_ENOMEM, "out of memory for a device list");
  if (keep > 0)
    memcpy(d, *list, (size_t)keep * sizeof *d);
  psim_devlist_release(*list);
  *list = d;
  *out = d;
  return PSIM_OK;
}
