/* budget.c - the search budget clock: CPU time, parallel sections at their busiest thread. */
#define _POSIX_C_SOURCE 200809L
#include "search/budget.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

/* CPU ns that ended parallel sections ran beside their busiest thread (the clock's offset). */
static _Atomic int64_t beside_ns;

static int64_t cpu_ns(clockid_t id) {
  struct timespec ts;
  if (clock_gettime(id, &ts) != 0)
    return 0;
  return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
}

double psim_budget_clock_s(void) {
  return 1e-9 * (double)(cpu_ns(CLOCK_PROCESS_CPUTIME_ID) - atomic_load(&beside_ns));
}

double psim_budget_thread_s(void) {
  return 1e-9 * (double)cpu_ns(CLOCK_THREAD_CPUTIME_ID);
}

typedef struct worker {
  void *(*fn)(void *);
  void *arg;
  int64_t cpu_ns; /* the thread's CPU time when fn returned */
} worker;

static void *run_worker(void *p) {
  worker *w = p;
  w->fn(w->arg);
  w->cpu_ns = cpu_ns(CLOCK_THREAD_CPUTIME_ID);
  return NULL;
}

#define MAX_THREADS 64

int32_t psim_budget_run_threads(int32_t want, void *(*fn)(void *), void *arg) {
  pthread_t tid[MAX_THREADS];
  worker w[MAX_THREADS];
  int32_t started = 0;
  while (started < want && started < MAX_THREADS) {
    w[started] = (worker){fn, arg, 0};
    if (pthread_create(&tid[started], NULL, run_worker, &w[started]) != 0)
      break;
    started++;
  }
  int64_t sum = 0, most = 0;
  for (int32_t i = 0; i < started; i++) {
    pthread_join(tid[i], NULL);
    sum += w[i].cpu_ns;
    most = w[i].cpu_ns > most ? w[i].cpu_ns : most;
  }
  atomic_fetch_add(&beside_ns, sum - most);
  return started;
}
