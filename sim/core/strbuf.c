/* strbuf.c - a growing text buffer. */
#include "sim/core/strbuf.h"

#include <stdarg.h>
#include <stdio.h>

#include "sim/core/alloc.h"

void psim_sb_printf(psim_sb *b, const char *fmt, ...) {
  if (b->oom)
    return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || PSIM_VEC_RESERVE(b->text, b->cap, b->len + (size_t)n + 1) != PSIM_OK) {
    b->oom = true;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(b->text + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

psim_status psim_sb_finish(psim_sb *b, const char *what, char **text, size_t *len) {
  if (b->oom || !b->text) {
    psim_free(b->text);
    b->text = NULL;
    return psim_error(PSIM_ENOMEM, "%s: out of memory", what);
  }
  *text = b->text;
  *len = b->len;
  return PSIM_OK;
}
