/* profile_cuda_impl.h - the interface between the CUDA profiler module and its loader
 * (private to costdb/profile).
 *
 * The CUDA backend (profile_cuda.cu) is built as its own shared object,
 * libplansim_cuda.so, which links libcudart and libcublas (and through it
 * libcublasLt). plansim and libplansim link none of them: the loader
 * (profile_cuda_load.c) opens the module with dlopen when `profile --device
 * cuda` first asks for it, so no other command pays the ~70 ms and 210 MiB of
 * loading cuBLAS (issue 19). The module links nothing of libplansim either: it
 * calls back into the host for error messages, the sample summary and names.
 * docs/profiling.md. */
#ifndef PSIM_PROFILE_CUDA_IMPL_H
#define PSIM_PROFILE_CUDA_IMPL_H

#include <stdarg.h>

#include "costdb/profile/profile.h"

/* Raised whenever either struct below changes; the module refuses another. */
#define PSIM_CUDA_MODULE_ABI 1
/* The one symbol the loader looks up in the module (dlsym). */
#define PSIM_CUDA_MODULE_ENTRY "psim_cuda_module_open"

/* What the host lends the module. */
typedef struct psim_cuda_host {
  psim_status (*verror)(psim_status s, const char *fmt, va_list ap); /* psim_verror */
  void (*summary)(double *samples, int32_t n, double *median, double *iqr, double *min);
  const char *(*dtype_name)(psim_dtype dt);
  const char *(*kind_name)(int32_t kind);
} psim_cuda_host;

/* What the module gives back: the backend of profile.h. */
typedef struct psim_cuda_module {
  psim_status (*available)(int32_t device_index);
  psim_status (*fingerprint)(int32_t device_index, psim_costdb_fingerprint *fp);
  psim_status (*measure)(const psim_cost_key *key, const psim_profile_opts *o,
                         psim_cost_entry *out);
} psim_cuda_module;

/* The entry point: fills *out when abi is PSIM_CUDA_MODULE_ABI, else returns
 * PSIM_EFAILED without touching it. host must outlive the module. */
typedef psim_status (*psim_cuda_module_open_fn)(int32_t abi, const psim_cuda_host *host,
                                                psim_cuda_module *out);

#endif
