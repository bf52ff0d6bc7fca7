/* budget.h - the clock that search time budgets count (`plan --budget 60s`, the
 * policy's baselines, the grid, MCMC, the Alpa optimizer's candidate simulations).
 *
 * A time budget is CPU seconds, not wall seconds: the same search gets the same budget on
 * an idle core and on a loaded machine (where wall budgets bought a third of the work,
 * docs/search.md "The search policy"), and a stopped process (SIGSTOP, a debugger) or one
 * blocked writing its progress does not spend it. */
#ifndef PSIM_SEARCH_BUDGET_H
#define PSIM_SEARCH_BUDGET_H

#include <stdint.h>

/* The budget clock, s since an unspecified start: the process's CPU time (user + system,
 * CLOCK_PROCESS_CPUTIME_ID) less, for each parallel section run by psim_budget_run_threads
 * that has ended, the CPU time its threads spent beside its busiest one. So a budget is
 * per thread of the search: a section of 2 threads costs what its longer thread ran, the
 * wall time it takes on idle cores. (During a section, its threads' CPU counts in full.) */
double psim_budget_clock_s(void);

/* CPU time of the calling thread, s (CLOCK_THREAD_CPUTIME_ID): a budget per thread for
 * searchers whose threads run side by side until their own deadline (MCMC's chains). */
double psim_budget_thread_s(void);

/* Runs fn(arg) on up to want new threads (as many as start), waits for them, and charges
 * the budget clock the busiest thread's CPU time only. Returns the threads started. */
int32_t psim_budget_run_threads(int32_t want, void *(*fn)(void *), void *arg);

#endif
