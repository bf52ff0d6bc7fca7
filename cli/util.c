/* util.c - helpers shared by the subcommands. */
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

bool psim_cli_stderr_is_tty(void) { return isatty(2) != 0; }
