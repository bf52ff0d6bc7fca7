/* fuzz_units.c - libFuzzer target: the unit parser (psim_units_parse) for
 * every kind, and the formatter on what it accepts. An accepted value must be
 * finite and non-negative (units.h promises to reject the rest). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/units.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096)
    return 0;
  char text[4097];
  memcpy(text, data, size);
  text[size] = '\0';
  static const psim_unit_kind kinds[] = {PSIM_UNIT_NONE, PSIM_UNIT_BYTES, PSIM_UNIT_BANDWIDTH,
                                         PSIM_UNIT_TIME, PSIM_UNIT_FLOPS, PSIM_UNIT_COUNT};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    double v = -1;
    if (psim_units_parse(text, kinds[k], &v) != PSIM_OK)
      continue;
    if (!isfinite(v) || v < 0) {
      fprintf(stderr, "units: '%s' accepted as %g\n", text, v);
      abort();
    }
    char buf[64];
    (void)psim_units_format(v, kinds[k], buf, sizeof buf);
  }
  psim_error_clear();
  return 0;
}
