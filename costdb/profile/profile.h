/* profile.h - measuring kernel times into a cost database (DESIGN.md 7).
 *
 * The shapes to measure are cost-database keys (costdb.h): from a model and a
 * cluster (every shard shape the searchers can produce) or from a standard
 * grid. A device backend measures one key at a time; psim_profile_run drives
 * a backend over a key list with skipping of known keys, a progress line,
 * periodic checkpoints and interruption. Reference: docs/profiling.md. */
#ifndef PSIM_PROFILE_H
#define PSIM_PROFILE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#include "costdb/costdb.h"
#include "psim_config.h"

typedef struct psim_profile_opts {
  double budget_s;       /* timing budget per shape, s (default 0.05) */
  int32_t min_reps;      /* timed repetitions at least (default 3) */
  int32_t max_reps;      /* timed repetitions at most (default 25) */
  double max_flops;      /* FLOP cap per kernel call (default 4e9): larger shapes are
                            measured on a slice of their first dims and scaled
                            linearly (entry "scale" > 1) */
  double max_bytes;      /* buffer cap per kernel, bytes (default 256 MiB); same slicing */
  bool progress;         /* a progress line on stderr (callers set it when isatty(2)) */
  const char *save_path; /* checkpoint file (psim_costdb_save), NULL for none */
  double save_every_s;   /* checkpoint interval, s (default 5) */
  volatile sig_atomic_t *interrupt; /* non-zero asks the run to stop (SIGINT) */
  int32_t device_index;             /* GPU ordinal for the CUDA backend (default 0) */
} psim_profile_opts;

void psim_profile_opts_init(psim_profile_opts *o);

/* A deduplicated list of keys (a psim_costdb used as a set: times are 0). */
typedef psim_costdb psim_key_set;

/* Standard grid for dtype dt: GEMMs with M, N, K in powers of two 64..4096
 * (a FLOP cap applies), memory-bound kernels over powers of two of elements
 * 2^12..2^24 and row lengths 2^6..2^14, forward and backward. */
psim_status psim_profile_keys_grid(psim_dtype dt, psim_key_set *out);
/* Every shard shape of every op of m that a strategy on c can produce: for
 * each op (one per repeated block) and each combination of power-of-two
 * degrees of its splittable dims with product <= devices, forward and
 * backward, plus the optimizer update of each weight's shards. dtype
 * overrides the model's dtypes when not PSIM_DTYPE_COUNT. */
psim_status psim_profile_keys_model(const psim_model *m, const psim_cluster *c, psim_dtype dtype,
                                    psim_key_set *out);

/* A backend: measures one key (entry->key is set on entry). Returns
 * PSIM_EUNIMPLEMENTED when the device lacks the kernel (e.g. bf16 GEMM). */
typedef psim_status (*psim_profile_measure_fn)(const psim_cost_key *key, const psim_profile_opts *o,
                                               psim_cost_entry *out);

/* CPU backend: OpenBLAS (one thread) and the project's own loops. */
psim_status psim_profile_cpu_fingerprint(psim_costdb_fingerprint *fp);
psim_status psim_profile_cpu_measure(const psim_cost_key *key, const psim_profile_opts *o,
                                     psim_cost_entry *out);
/* The clock the CPU backend times kernels with: the calling thread's CPU
 * time, s (CLOCK_THREAD_CPUTIME_ID; excludes time the core ran other
 * processes). */
double psim_profile_cpu_clock_s(void);
/* True when the installed OpenBLAS exports cblas_sbgemm (bf16 GEMM). */
bool psim_profile_cpu_has_bf16(void);

/* One CPU kernel instance with its own buffers, as psim_profile_cpu_measure
 * times it, for drivers that run a sequence of kernels for real (the
 * end-to-end check, tests/calibration/e2e_cpu.c). Does not set the BLAS
 * thread count (call openblas_set_num_threads(1) for one simulated device). */
typedef struct psim_profile_kernel psim_profile_kernel;
/* Allocates the buffers of key's kernel (filled with small values).
 * PSIM_EUNIMPLEMENTED as psim_profile_cpu_measure; PSIM_ENOMEM. */
psim_status psim_profile_cpu_kernel_create(const psim_cost_key *key, psim_profile_kernel **out);
/* Runs the kernel once (forward or backward as the key's pass says). */
void psim_profile_cpu_kernel_run(psim_profile_kernel *k);
/* Frees the kernel; NULL is allowed. */
void psim_profile_cpu_kernel_destroy(psim_profile_kernel *k);

/* CUDA backend: cublasGemmEx (fp32, fp16, bf16 with tensor cores) and small
 * kernels, timed with CUDA events. Declared in every build: the kernels live
 * in the CUDA profiler module (libplansim_cuda.so), which the first call opens
 * with dlopen (profile_cuda_load.c), so only `profile --device cuda` loads
 * libcudart and cuBLAS. Fails with PSIM_EFAILED and a message naming what is
 * missing: the module (a build without CUDA), a CUDA library, or a GPU. */
psim_status psim_profile_cuda_available(int32_t device_index);
psim_status psim_profile_cuda_fingerprint(int32_t device_index, psim_costdb_fingerprint *fp);
psim_status psim_profile_cuda_measure(const psim_cost_key *key, const psim_profile_opts *o,
                                      psim_cost_entry *out);
/* The module the loader opens: $PSIM_CUDA_MODULE when set, else the build
 * tree's while it exists, else the installed one; NULL in a build without
 * CUDA and no PSIM_CUDA_MODULE. */
const char *psim_profile_cuda_module_path(void);

/* Collective tables of a CPU cluster (plansim profile --collectives,
 * costdb/profile/coll_cpu.c): a shared-memory ring all-reduce between group_size
 * threads (one per simulated device) over memcpy + add, bytes per rank;
 * repetitions as for kernels (o->budget_s, min_reps, max_reps; wall clock);
 * *median_s the median time; *check_value rank p-1's result normalised to one
 * all-reduce of ranks holding 1..p (p(p+1)/2 when the ring is right). */
psim_status psim_profile_cpu_allreduce(int32_t group_size, size_t bytes, const psim_profile_opts *o,
                                       double *median_s, double *check_value);
/* Measures all-reduce at 64 KiB, 1 MiB and 16 MiB for group sizes 2, 4, 8, ...
 * up to max_group and stores them in db as intra-node tables (bus bandwidth,
 * nccl-tests convention). */
psim_status psim_profile_cpu_collectives(int32_t max_group, const psim_profile_opts *o,
                                         psim_costdb *db);

/* Summary of a run. */
typedef struct psim_profile_stats {
  size_t measured;    /* keys measured now */
  size_t skipped;     /* keys already in the database */
  size_t unsupported; /* keys the device cannot run */
  size_t scaled;      /* keys measured on a slice (FLOP or byte cap) */
  double wall_s;
} psim_profile_stats;

/* Measures every key of keys not yet in db into db. Checkpoints to
 * o->save_path every o->save_every_s and when done or interrupted (then
 * returns PSIM_EINTERRUPTED; what was measured is kept). */
psim_status psim_profile_run(psim_costdb *db, const psim_key_set *keys,
                             psim_profile_measure_fn measure, const psim_profile_opts *o,
                             psim_profile_stats *stats);

/* Slices key along its leading dims so its work fits the caps; *scale is
 * work(key) / work(slice) (1 when it already fits). */
void psim_profile_slice(const psim_cost_key *key, double max_flops, double max_bytes,
                        psim_cost_key *slice, double *scale);

/* Median, interquartile range and minimum of n samples (sorted in place). */
void psim_profile_summary(double *samples, int32_t n, double *median, double *iqr, double *min);

#endif
