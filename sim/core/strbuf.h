/* strbuf.h - a growing text buffer for writers of text formats (exporters,
 * the HTML report). Appends never fail: the first allocation failure is
 * remembered and reported once by psim_sb_finish. */
#ifndef PSIM_STRBUF_H
#define PSIM_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

#include "sim/core/status.h"

typedef struct psim_sb {
  char *text; /* NUL-terminated when len > 0 */
  size_t len, cap;
  bool oom;
} psim_sb;

/* Appends printf-formatted text. Amortised O(length). */
void psim_sb_printf(psim_sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hands the text to the caller (*text, freed with psim_free) or, after an
 * allocation failure, frees it and returns PSIM_ENOMEM naming `what`. */
psim_status psim_sb_finish(psim_sb *b, const char *what, char **text, size_t *len);

#endif
