/* units.c - parsing and formatting quantities with units. */
#include "sim/core/units.h"

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct unit_prefix {
  const char *text;
  double factor;
} unit_prefix;

/* Longest first so "Ki" wins over "K". */
static const unit_prefix prefixes[] = {{"Ki", 1024.0},
                                       {"Mi", 1048576.0},
                                       {"Gi", 1073741824.0},
                                       {"Ti", 1099511627776.0},
                                       {"Pi", 1125899906842624.0},
                                       {"k", 1e3},
                                       {"K", 1e3},
                                       {"M", 1e6},
                                       {"G", 1e9},
                                       {"T", 1e12},
                                       {"P", 1e15},
                                       {"E", 1e18},
                                       {"", 1.0}};

typedef struct unit_base {
  const char *text;
  double factor; /* to SI base unit */
  int allow_prefix;
} unit_base;

static const unit_base bytes_units[] = {{"bytes", 1, 1}, {"byte", 1, 1}, {"B", 1, 1}, {NULL, 0, 0}};
static const unit_base bw_units[] = {{"B/s", 1, 1},     {"Bps", 1, 1},     {"bit/s", 0.125, 1},
                                     {"b/s", 0.125, 1}, {"bps", 0.125, 1}, {NULL, 0, 0}};
static const unit_base time_units[] = {{"s", 1, 0},     {"ms", 1e-3, 0}, {"us", 1e-6, 0},
                                       {"µs", 1e-6, 0}, {"ns", 1e-9, 0}, {"min", 60, 0},
                                       {"h", 3600, 0},  {NULL, 0, 0}};
static const unit_base flops_units[] = {
    {"FLOP/s", 1, 1}, {"FLOPS", 1, 1}, {"FLOP", 1, 1}, {NULL, 0, 0}};
static const unit_base count_units[] = {{"", 1, 1}, {NULL, 0, 0}};

static const unit_base *units_for(psim_unit_kind kind) {
  switch (kind) {
  case PSIM_UNIT_BYTES: return bytes_units;
  case PSIM_UNIT_BANDWIDTH: return bw_units;
  case PSIM_UNIT_TIME: return time_units;
  case PSIM_UNIT_FLOPS: return flops_units;
  case PSIM_UNIT_COUNT: return count_units;
  case PSIM_UNIT_NONE: return NULL;
  }
  return NULL;
}

const char *psim_units_kind_name(psim_unit_kind kind) {
  switch (kind) {
  case PSIM_UNIT_NONE: return "a number";
  case PSIM_UNIT_BYTES: return "bytes (e.g. 80e9 or \"80 GiB\")";
  case PSIM_UNIT_BANDWIDTH: return "bytes/s (e.g. 300e9 or \"300 GB/s\")";
  case PSIM_UNIT_TIME: return "seconds (e.g. 2e-6 or \"2 us\")";
  case PSIM_UNIT_FLOPS: return "FLOP/s (e.g. 312e12 or \"312 TFLOP/s\")";
  case PSIM_UNIT_COUNT: return "a count (e.g. 1024 or \"4k\")";
  }
  return "a quantity";
}

/* Matches the text after the number against [prefix]unit. */
static int match_unit(const char *s, const unit_base *units, double *factor) {
  size_t nprefix = sizeof prefixes / sizeof prefixes[0];
  for (const unit_base *u = units; u->text; u++) {
    if (!u->allow_prefix) {
      if (strcmp(s, u->text) == 0) {
        *factor = u->factor;
        return 1;
      }
      continue;
    }
    for (size_t i = 0; i < nprefix; i++) {
      size_t lp = strlen(prefixes[i].text);
      if (strncmp(s, prefixes[i].text, lp) == 0 && strcmp(s + lp, u->text) == 0) {
        *factor = prefixes[i].factor * u->factor;
        return 1;
      }
    }
  }
  return 0;
}

psim_status psim_units_parse(const char *text, psim_unit_kind kind, double *out) {
  const char *expect = psim_units_kind_name(kind);
  if (!text || !*text)
    return psim_error(PSIM_EINPUT, "empty quantity; expected %s", expect);
  char *end = NULL;
  double v = strtod(text, &end);
  if (end == text || !isfinite(v))
    return psim_error(PSIM_EINPUT, "'%.60s' is not a number; expected %s", text, expect);
  while (*end == ' ')
    end++;
  double factor = 1.0;
  if (*end) {
    const unit_base *units = units_for(kind);
    if (!units || !match_unit(end, units, &factor))
      return psim_error(PSIM_EINPUT, "unknown unit '%.40s' in '%.60s'; expected %s", end, text,
                        expect);
  }
  v *= factor;
  if (psim_units_check(v, kind) != PSIM_OK) {
    char why[256];
    snprintf(why, sizeof why, "%s", psim_error_message());
    return psim_error(PSIM_EINPUT, "'%.60s': %s", text, why);
  }
  *out = v;
  return PSIM_OK;
}

/* Largest plausible quantity of each kind, in SI base units: far above any
 * machine (the largest supercomputers: ~1e18 FLOP/s, ~1e16 bytes of memory;
 * the fastest links ~1e12 bytes/s; 1e9 s is 31 years). */
static double max_of(psim_unit_kind kind) {
  switch (kind) {
  case PSIM_UNIT_TIME: return 1e9;
  case PSIM_UNIT_BYTES: return 1e21;
  case PSIM_UNIT_BANDWIDTH: return 1e18;
  case PSIM_UNIT_FLOPS: return 1e21;
  default: return INFINITY;
  }
}

/* Smallest non-zero rate (issue 24): 1 byte/s, 1 FLOP/s. A duration is a size
 * over a rate; with rates of at least 1 and sizes of at most max_of (1e21), every
 * duration stays finite (at most 1e21 s), where 4.9e-324 bytes/s made "duration
 * inf" deep in a simulation. Zero stays allowed here (each loader says whether 0
 * means "absent"); denormal numbers of any kind are refused. */
static double min_nonzero_of(psim_unit_kind kind) {
  switch (kind) {
  case PSIM_UNIT_BANDWIDTH:
  case PSIM_UNIT_FLOPS: return 1.0;
  default: return DBL_MIN;
  }
}

psim_status psim_units_check(double v, psim_unit_kind kind) {
  double max = max_of(kind), min = min_nonzero_of(kind);
  if (!isfinite(v) || v < 0)
    return psim_error(PSIM_EINPUT, "%g is out of range; expected a finite, non-negative %s", v,
                      psim_units_kind_name(kind));
  if (v > 0 && v < min)
    return psim_error(PSIM_EINPUT,
                      "%g is out of range; expected 0 or %s of at least %g (smaller ones make "
                      "durations overflow)",
                      v, psim_units_kind_name(kind), min);
  if (v > max)
    return psim_error(PSIM_EINPUT, "%g is out of range; expected %s of at most %g", v,
                      psim_units_kind_name(kind), max);
  return PSIM_OK;
}

const char *psim_units_format(double value, psim_unit_kind kind, char *buf, int bufsize) {
  static const char *const dec[] = {"", "k", "M", "G", "T", "P", "E"};
  if (kind == PSIM_UNIT_TIME) {
    if (!(fabs(value) < 1e6)) /* huge (or not finite): keep the unit in a short text */
      snprintf(buf, (size_t)bufsize, "%.4g s", value);
    else if (value >= 1.0 || value == 0.0)
      snprintf(buf, (size_t)bufsize, "%.3f s", value);
    else if (value >= 1e-3)
      snprintf(buf, (size_t)bufsize, "%.3f ms", value * 1e3);
    else
      snprintf(buf, (size_t)bufsize, "%.3f us", value * 1e6);
    return buf;
  }
  int i = 0;
  double v = value;
  while (fabs(v) >= 1000.0 && i < 6) {
    v /= 1000.0;
    i++;
  }
  const char *unit = kind == PSIM_UNIT_BYTES       ? "B"
                     : kind == PSIM_UNIT_BANDWIDTH ? "B/s"
                     : kind == PSIM_UNIT_FLOPS     ? "FLOP/s"
                                                   : "";
  snprintf(buf, (size_t)bufsize, "%.3g %s%s", v, dec[i], unit);
  return buf;
}
