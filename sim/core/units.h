/* units.h - quantities written as numbers (SI base units) or strings with a unit.
 *
 * Accepted: "300 GB/s", "200 Gb/s", "80 GiB", "2 us", "1.5 ms", "312 TFLOP/s",
 * "25e9". Decimal prefixes k M G T P E (10^3n), binary Ki Mi Gi Ti Pi (2^10n).
 * A lower-case "b" in a bandwidth means bits (divided by 8). */
#ifndef PSIM_UNITS_H
#define PSIM_UNITS_H

#include "sim/core/status.h"

typedef enum psim_unit_kind {
  PSIM_UNIT_NONE,      /* plain number, no unit allowed */
  PSIM_UNIT_BYTES,     /* B, KB, KiB, GB, GiB ... -> bytes */
  PSIM_UNIT_BANDWIDTH, /* B/s, GB/s, Gb/s, Gbit/s ... -> bytes/s */
  PSIM_UNIT_TIME,      /* s, ms, us, ns, min, h -> s */
  PSIM_UNIT_FLOPS,     /* FLOP/s, TFLOP/s, TFLOPS ... -> FLOP/s */
  PSIM_UNIT_COUNT      /* plain number with optional k/M/G suffix (e.g. "1.3B" not allowed) */
} psim_unit_kind;

/* Parses text as a quantity of the given kind into SI base units. On error,
 * returns PSIM_EINPUT with a message saying what was expected (no file or
 * path: callers prefix those). Rejects NaN, infinities and negative values. */
psim_status psim_units_parse(const char *text, psim_unit_kind kind, double *out);

/* Name of the kind's unit for messages ("bytes/s"). */
const char *psim_units_kind_name(psim_unit_kind kind);
/* PSIM_OK when v (SI base units) is a plausible quantity of this kind: finite,
 * non-negative and at most a bound far above any real system (1e9 s; 1e21
 * bytes; 1e18 bytes/s; 1e21 FLOP/s) so that a typo such as 1e300 is an
 * error instead of a prediction of 1e290 s; else PSIM_EINPUT saying so. */
psim_status psim_units_check(double v, psim_unit_kind kind);

/* Formats a value for people, e.g. "1.23 GB/s", "4.5 ms" into buf. */
const char *psim_units_format(double value, psim_unit_kind kind, char *buf, int bufsize);

#endif
