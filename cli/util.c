/* util.c - helpers shared by the subcommands. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "cli.h"

psim_status psim_cli_usage(const char *command, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return psim_error(PSIM_EINPUT, "%s (see 'plansim help %s')", msg, command);
}

bool psim_cli_stderr_is_tty(void) {
  return isatty(2) != 0;
}

void psim_cli_format_count(double n, char *out, size_t size) {
  if (!isfinite(n) || fabs(n) < 1e6) {
    snprintf(out, size, "%.0f", n);
    return;
  }
  int e = (int)floor(log10(fabs(n)));
  double mant = n / pow(10, e);
  if (fabs(mant) >= 9.995) { /* would print as "10" with three significant digits */
    mant /= 10;
    e++;
  }
  snprintf(out, size, "%.3ge%d", mant, e);
}
