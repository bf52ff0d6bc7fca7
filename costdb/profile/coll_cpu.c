/* coll_cpu.c - measured collective tables on a CPU cluster (plansim profile
 * --collectives): a shared-memory ring all-reduce between threads, one thread
 * per simulated device (one core each), over memcpy + add.
 *
 * Ring (Patarasuk & Yuan 2009, as NCCL runs it): each rank's buffer is cut in
 * p chunks; reduce-scatter in p-1 steps (rank r adds its left neighbour's
 * chunk (r - s - 1) mod p into its own at step s), then all-gather in p-1
 * steps (rank r copies chunk (r - s) mod p from its left neighbour). A
 * barrier separates steps, as the flags of a real ring would. At step s no
 * chunk is read by one rank while another writes it (the chunk indices differ
 * by one), so the result is exact; tests/unit/test_e2e_cpu.c checks the sums.
 * Bus bandwidth follows nccl-tests: busbw = bytes / time x 2(p-1)/p. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "costdb/profile/profile.h"
#include "sim/core/alloc.h"
#include "sim/core/clock.h"

typedef struct ring {
  int32_t p;
  size_t n;    /* floats per rank */
  float **buf; /* per rank, n floats */
  float **tmp; /* per rank, one chunk */
  pthread_barrier_t bar;
  const psim_profile_opts *o;
  volatile int stop; /* written by rank 0 between barriers */
  double samples[1000];
  int32_t n_samples;
} ring;

typedef struct rank_arg {
  ring *g;
  int32_t r;
} rank_arg;

/* Chunk c of n floats in p chunks: [lo, hi). */
static void chunk(size_t n, int32_t p, int32_t c, size_t *lo, size_t *hi) {
  *lo = n * (size_t)c / (size_t)p;
  *hi = n * (size_t)(c + 1) / (size_t)p;
}

/* One all-reduce as rank r (barriers between steps). */
static void ring_allreduce_rank(ring *g, int32_t r) {
  int32_t p = g->p, left = (r + p - 1) % p;
  size_t lo, hi;
  for (int32_t s = 0; s < p - 1; s++) { /* reduce-scatter */
    chunk(g->n, p, (r - s - 1 + 2 * p) % p, &lo, &hi);
    memcpy(g->tmp[r], g->buf[left] + lo, (hi - lo) * sizeof(float));
    for (size_t i = lo; i < hi; i++)
      g->buf[r][i] += g->tmp[r][i - lo];
    pthread_barrier_wait(&g->bar);
  }
  for (int32_t s = 0; s < p - 1; s++) { /* all-gather */
    chunk(g->n, p, (r - s + p) % p, &lo, &hi);
    memcpy(g->buf[r] + lo, g->buf[left] + lo, (hi - lo) * sizeof(float));
    pthread_barrier_wait(&g->bar);
  }
}

/* Rank body: warm-up round, then timed rounds until rank 0 says stop. */
static void *rank_main(void *arg) {
  rank_arg *a = arg;
  ring *g = a->g;
  int32_t cap = g->o->max_reps < 1000 ? g->o->max_reps : 1000;
  double start = 0;
  for (int32_t round = 0;; round++) {
    pthread_barrier_wait(&g->bar);
    if (g->stop)
      break;
    double t0 = psim_clock_now_s();
    if (round == 1)
      start = t0;
    ring_allreduce_rank(g, a->r);
    if (a->r != 0)
      continue;
    if (round > 0) /* round 0 warms up: page faults */
      g->samples[g->n_samples++] = psim_clock_now_s() - t0;
    g->stop = g->n_samples >= cap ||
              (g->n_samples >= g->o->min_reps && psim_clock_now_s() - start >= g->o->budget_s) ||
              (g->o->interrupt && *g->o->interrupt);
  }
  return NULL;
}

static void ring_free(ring *g) {
  for (int32_t r = 0; r < g->p; r++) {
    psim_free(g->buf ? g->buf[r] : NULL);
    psim_free(g->tmp ? g->tmp[r] : NULL);
  }
  psim_free(g->buf);
  psim_free(g->tmp);
}

static psim_status ring_alloc(ring *g) {
  g->buf = psim_calloc((size_t)g->p, sizeof *g->buf);
  g->tmp = psim_calloc((size_t)g->p, sizeof *g->tmp);
  if (!g->buf || !g->tmp)
    return psim_error(PSIM_ENOMEM, "out of memory for the all-reduce buffers");
  for (int32_t r = 0; r < g->p; r++) {
    g->buf[r] = psim_malloc(g->n * sizeof(float));
    g->tmp[r] = psim_malloc((g->n / (size_t)g->p + 1) * sizeof(float));
    if (!g->buf[r] || !g->tmp[r])
      return psim_error(PSIM_ENOMEM, "out of memory for the all-reduce buffers");
    for (size_t i = 0; i < g->n; i++)
      g->buf[r][i] = (float)(r + 1); /* the sum is p(p+1)/2 everywhere */
  }
  return PSIM_OK;
}

/* Runs the threads of one (group, size) measurement. */
static psim_status ring_run(ring *g) {
  pthread_t th[64];
  rank_arg args[64];
  if (pthread_barrier_init(&g->bar, NULL, (unsigned)g->p) != 0)
    return psim_error(PSIM_EFAILED, "pthread_barrier_init failed");
  int32_t started = 0;
  psim_status s = PSIM_OK;
  for (int32_t r = 1; r < g->p && s == PSIM_OK; r++, started++) {
    args[r] = (rank_arg){g, r};
    if (pthread_create(&th[r], NULL, rank_main, &args[r]) != 0)
      s = psim_error(PSIM_EFAILED, "pthread_create failed");
  }
  if (s != PSIM_OK) { /* cannot run the ring: nothing was started that waits */
    g->p = started + 1;
    return s;
  }
  args[0] = (rank_arg){g, 0};
  rank_main(&args[0]);
  for (int32_t r = 1; r < g->p; r++)
    pthread_join(th[r], NULL);
  pthread_barrier_destroy(&g->bar);
  return PSIM_OK;
}

psim_status psim_profile_cpu_allreduce(int32_t group_size, size_t bytes, const psim_profile_opts *o,
                                       double *median_s, double *check_value) {
  if (group_size < 2 || group_size > 64 || bytes < sizeof(float) * (size_t)group_size)
    return psim_error(PSIM_EINPUT,
                      "all-reduce: group size 2..64 and at least one float per "
                      "rank, got %d ranks and %zu bytes",
                      group_size, bytes);
  ring *g = psim_calloc(1, sizeof *g);
  if (!g)
    return psim_error(PSIM_ENOMEM, "out of memory");
  g->p = group_size;
  g->n = bytes / sizeof(float);
  g->o = o;
  psim_status s = ring_alloc(g);
  if (s == PSIM_OK)
    s = ring_run(g);
  if (s == PSIM_OK) {
    double iqr, min;
    psim_profile_summary(g->samples, g->n_samples, median_s, &iqr, &min);
    /* rank r starts with r + 1; one all-reduce gives p(p+1)/2 everywhere,
     * each further one multiplies by p: undo those (powers of two are exact) */
    *check_value = (double)g->buf[g->p - 1][g->n - 1] / pow(g->p, g->n_samples);
  }
  ring_free(g);
  psim_free(g);
  return s;
}

psim_status psim_profile_cpu_collectives(int32_t max_group, const psim_profile_opts *o,
                                         psim_costdb *db) {
  static const double sizes[] = {65536, 1048576, 16777216}; /* 64 KiB, 1 MiB, 16 MiB */
  enum { N_SIZES = sizeof sizes / sizeof sizes[0] };
  for (int32_t p = 2; p <= max_group; p *= 2) {
    double bytes[N_SIZES], busbw[N_SIZES];
    for (int32_t i = 0; i < N_SIZES; i++) {
      double t, check;
      PSIM_CHECK(psim_profile_cpu_allreduce(p, (size_t)sizes[i], o, &t, &check));
      bytes[i] = sizes[i];
      busbw[i] = sizes[i] / (t > 0 ? t : 1e-9) * 2.0 * (p - 1) / p;
      if (o->interrupt && *o->interrupt)
        return PSIM_EINTERRUPTED;
    }
    psim_coll_table t = {PSIM_COLL_ALL_REDUCE, p, true, N_SIZES, bytes, busbw};
    PSIM_CHECK(psim_costdb_add_coll(db, &t));
  }
  return PSIM_OK;
}
