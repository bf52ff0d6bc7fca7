/* searchers.h - the searcher table (search/policy/searchers.c). */
#ifndef PSIM_SEARCHERS_H
#define PSIM_SEARCHERS_H

#include "search/search.h"

/* Every searcher, ending with a {NULL} entry; run is NULL for one not built. */
const psim_searcher *psim_searchers(void);
/* The searcher named NAME (--search NAME), or NULL. */
const psim_searcher *psim_searcher_find(const char *name);

#endif
