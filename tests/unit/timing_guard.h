/* timing_guard.h - when tests that time real kernels may assert their timing
 * errors. They always run and print their figures; they assert them except
 * (1) under AddressSanitizer, whose instrumented loops and buffers make real
 * kernel times meaningless, and (2) on an overloaded machine: above
 * PSIM_TIMING_MAX_LOAD runnable processes per core (1-minute load average),
 * a 2-core machine shares each core between several timed loops and the
 * "real" side of the comparison measures the scheduler, not the kernels
 * (a CI run beside two fuzzers and a benchmark measured load 2.6 per core and
 * +36% on the one-layer GPT, against +3% to +8% on a quiet machine). */
#ifndef PSIM_TIMING_GUARD_H
#define PSIM_TIMING_GUARD_H

#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#define PSIM_TIMING_MAX_LOAD 2.0 /* runnable processes per core */

/* 1-minute load average over the online cores (/proc/loadavg); 0 if unknown. */
static inline double psim_test_load_per_core(void) {
  double load = 0;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f && fscanf(f, "%lf", &load) != 1)
    load = 0;
  if (f)
    fclose(f);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return load / (double)(cores > 0 ? cores : 1);
}

/* Why timing errors are not asserted here, or NULL when they are. */
static inline const char *psim_test_timing_waived(void) {
#if defined(__SANITIZE_ADDRESS__)
  return "sanitizer build";
#else
  return psim_test_load_per_core() > PSIM_TIMING_MAX_LOAD ? "machine overloaded" : NULL;
#endif
}

/* Whether timing errors are asserted here; prints why not when they are not. */
static inline bool psim_test_timing_asserted(void) {
  const char *why = psim_test_timing_waived();
  if (why)
    printf("%s (load %.1f per core, limit %.1f): timing errors reported, not asserted\n", why,
           psim_test_load_per_core(), PSIM_TIMING_MAX_LOAD);
  return why == NULL;
}

/* How many times a timing test measures before it fails: a shared VM disturbs
 * one run in several (2026-11-22: test_interp's worst held-out error read 46%
 * then 21%, test_e2e_cpu's MLP +36% then +1.4%, for the same code), while a
 * wrong model misses every time. Once where nothing is asserted. */
#define PSIM_TIMING_ATTEMPTS 3
static inline int psim_test_timing_attempts(void) {
  return psim_test_timing_waived() ? 1 : PSIM_TIMING_ATTEMPTS;
}

#endif
