/* util.c - helpers shared by the subcommands. */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/cli.h"

psim_status psim_cli_usage(const char *command, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return psim_error(PSIM_EINPUT, "%s (see 'plansim help %s')", msg, command);
}

psim_status psim_cli_parse_int(const char *command, const char *opt, const char *val, int64_t min,
                               int64_t max, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(val, &end, 10);
  /* strtoll alone takes " 5" and "+5" and saturates on overflow (ERANGE) */
  bool digits = !*end && (isdigit((unsigned char)val[0]) || val[0] == '-');
  if (digits && errno != ERANGE && v >= min && v <= max) {
    *out = v;
    return PSIM_OK;
  }
  const char *big = digits && (errno == ERANGE || v > max) ? " (too large)" : "";
  const char *what = min == 1   ? "a positive integer"
                     : min == 0 ? "a non-negative integer"
                                : "an integer";
  if (max == INT64_MAX)
    return psim_cli_usage(command, "%s wants %s, not '%s'%s", opt, what, val, big);
  return psim_cli_usage(command, "%s wants %s from %lld to %lld, not '%s'%s", opt, what,
                        (long long)min, (long long)max, val, big);
}

/* "--json", "-o": an option name, not a value ("-" and "-5" are values). */
static bool looks_like_option(const char *v) {
  if (v[0] != '-')
    return false;
  if (v[1] == '-')
    return isalpha((unsigned char)v[2]) != 0;
  return isalpha((unsigned char)v[1]) && v[2] == '\0';
}

psim_status psim_cli_need_value(const char *command, int argc, char **argv, int i) {
  if (i + 1 >= argc)
    return psim_cli_usage(command, "%s needs a value", argv[i]);
  if (looks_like_option(argv[i + 1]))
    return psim_cli_usage(command, "%s needs a value ('%s' is an option)", argv[i], argv[i + 1]);
  return PSIM_OK;
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

/* Terminal output (issue 24): a name holding ESC could clear the screen or
 * retitle the terminal, one holding a newline could forge an output line. */
void psim_cli_escape(const char *s, bool keep_newlines, char *out, size_t size) {
  assert(size >= 8);
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p && o + 5 < size; p++) {
    bool control = *p < 0x20 || *p == 0x7f;
    if (control && !(keep_newlines && (*p == '\n' || *p == '\t')))
      o += (size_t)snprintf(out + o, size - o, "\\x%02x", *p);
    else
      out[o++] = (char)*p;
  }
  out[o] = '\0';
}
