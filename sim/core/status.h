/* status.h - status codes, error messages and the one propagation macro.
 *
 * Every fallible library function returns a psim_status. On failure it also
 * records a human-readable message (file, JSON path, what was expected) with
 * psim_error(); callers propagate with PSIM_CHECK and only main() maps a status
 * to an exit code. Messages are thread-local so search chains may run in
 * threads. */
#ifndef PSIM_STATUS_H
#define PSIM_STATUS_H

#include <stdarg.h>

/* psim_status (PSIM_OK, PSIM_ENOMEM, ...) is declared by the public API header, whose
 * declarations the library is compiled against. */
#include "include/plansim/plansim.h"

/* Propagates a failing status to the caller. The only propagation macro. */
#define PSIM_CHECK(expr)                                                                           \
  do {                                                                                             \
    psim_status psim_check_s_ = (expr);                                                            \
    if (psim_check_s_ != PSIM_OK)                                                                  \
      return psim_check_s_;                                                                        \
  } while (0)

/* Records a printf-style message for status s and returns s. */
psim_status psim_error(psim_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
psim_status psim_verror(psim_status s, const char *fmt, va_list ap);

/* Prepends "prefix" to the current message (adds context while unwinding). */
void psim_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void psim_error_clear(void);

/* Exit code for a status: 0 ok, 2 bad input or usage, 130 interrupted, else 1. */
int psim_status_exit_code(psim_status s);

#endif
