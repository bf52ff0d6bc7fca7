/* status.c - thread-local error messages. */
#include "sim/core/status.h"

#include <stdio.h>
#include <string.h>

enum { PSIM_ERROR_MAX = 2048 };
static _Thread_local char error_message[PSIM_ERROR_MAX];

psim_status psim_verror(psim_status s, const char *fmt, va_list ap) {
  vsnprintf(error_message, sizeof error_message, fmt, ap);
  return s;
}

psim_status psim_error(psim_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  psim_verror(s, fmt, ap);
  va_end(ap);
  return s;
}

void psim_error_prefix(const char *fmt, ...) {
  char prefix[512];
  char old[PSIM_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, error_message, sizeof old);
  size_t lp = strlen(prefix);
  if (lp >= sizeof error_message)
    lp = sizeof error_message - 1;
  memcpy(error_message, prefix, lp);
  size_t lo = strnlen(old, sizeof old - 1);
  if (lo > sizeof error_message - 1 - lp)
    lo = sizeof error_message - 1 - lp;
  memcpy(error_message + lp, old, lo);
  error_message[lp + lo] = '\0';
}

const char *psim_error_message(void) {
  return error_message;
}

void psim_error_clear(void) {
  error_message[0] = '\0';
}

const char *psim_status_name(psim_status s) {
  switch (s) {
  case PSIM_OK: return "ok";
  case PSIM_ENOMEM: return "out of memory";
  case PSIM_EINPUT: return "bad input";
  case PSIM_EIO: return "input/output error";
  case PSIM_EFAILED: return "failed";
  case PSIM_EINTERRUPTED: return "interrupted";
  case PSIM_ELIMIT: return "limit exceeded";
  case PSIM_EUNIMPLEMENTED: return "not implemented yet";
  }
  return "unknown status";
}

int psim_status_exit_code(psim_status s) {
  switch (s) {
  case PSIM_OK: return 0;
  case PSIM_EINPUT: return 2;
  case PSIM_EINTERRUPTED: return 130;
  default: return 1;
  }
}
