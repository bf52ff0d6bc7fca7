/* clock.h - the monotonic wall clock that time budgets, search curves and
 * profilers read. */
#ifndef PSIM_CLOCK_H
#define PSIM_CLOCK_H

/* Seconds on CLOCK_MONOTONIC since an unspecified start: only differences
 * between two readings mean anything. */
double psim_clock_now_s(void);

#endif
