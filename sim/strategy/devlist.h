/* devlist.h - the device lists of op configs (psim_op_config.devices), shared and
 * reference-counted, copied on write.
 *
 * All ops of a pipeline stage that split alike run on the same list (16,384 devices a
 * stage at 131,072 GPUs); each config held a copy of it, so expanding or copying a
 * strategy cost O(ops x stage devices) (issue 19, session 22). A list is now one block
 * with a header before its entries: the configs holding it count their references, a
 * copy takes one more (O(1)), and a writer asks for a list of its own first
 * (psim_devlist_writable), which copies the entries only when another holder shares them.
 *
 * Ownership: a config holds one reference to its list (or NULL); psim_op_config_destroy
 * drops it. Only lists made here may be held by a config: a list from malloc is not one
 * (psim_devlist_from copies it into one). The counts are atomic: the MCMC chains copy
 * configs of a shared start on several threads. */
#ifndef PSIM_DEVLIST_H
#define PSIM_DEVLIST_H

#include <stdbool.h>
#include <stdint.h>

#include "sim/core/status.h"

/* A new list with room for cap >= 0 entries (not initialised), one reference: the caller's,
 * writable. NULL when out of memory. */
int32_t *psim_devlist_new(int32_t cap);
/* A new list holding a copy of src[0..n). NULL when out of memory. */
int32_t *psim_devlist_from(const int32_t *src, int32_t n);
/* One more reference to d (NULL: none); returns d. O(1). */
const int32_t *psim_devlist_share(const int32_t *d);
/* Drops a reference to d (NULL: nothing); the last one frees the list. */
void psim_devlist_release(const int32_t *d);
/* Whether d is held by more than one reference (a write must copy it first). */
bool psim_devlist_shared(const int32_t *d);
/* The entries d has room for. */
int32_t psim_devlist_cap(const int32_t *d);
/* *list made writable with room for cap entries, its first keep entries kept: the list
 * itself when its only holder is the caller and it has the room, else a new one (the
 * caller's reference to the old list dropped). *list may be NULL (keep 0). O(keep) when
 * copied, O(1) otherwise. */
psim_status psim_devlist_writable(const int32_t **list, int32_t keep, int32_t cap, int32_t **out);

#endif
