/* fake_cuda_module.c - a stand-in for the CUDA profiler module (libplansim_cuda.so) that
 * needs no CUDA: it exports the same entry point, answers through the host's callbacks and
 * "measures" a key as its FLOP count at 1 PFLOP/s, so test_profile_cuda.c exercises the
 * loader (costdb/profile/profile_cuda_load.c) in builds without nvcc. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "costdb/profile/profile_cuda_impl.h"

static const psim_cuda_host *g_host;

static psim_status fail(psim_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  s = g_host->verror(s, fmt, ap);
  va_end(ap);
  return s;
}

static psim_status available(int32_t device_index) {
  return device_index == 0 ? PSIM_OK
                           : fail(PSIM_EINPUT, "fake GPU %d does not exist", device_index);
}

static psim_status fingerprint(int32_t device_index, psim_costdb_fingerprint *fp) {
  memset(fp, 0, sizeof *fp);
  snprintf(fp->device, sizeof fp->device, "cuda");
  snprintf(fp->name, sizeof fp->name, "fake GPU %d", device_index);
  return PSIM_OK;
}

static psim_status measure(const psim_cost_key *key, const psim_profile_opts *o,
                           psim_cost_entry *out) {
  (void)o;
  if (key->kind != PSIM_OP_MATMUL)
    return fail(PSIM_EUNIMPLEMENTED, "no fake kernel for %s", g_host->kind_name(key->kind));
  double t[3] = {3e-3, 1e-3, 2e-3};
  memset(out, 0, sizeof *out);
  out->key = *key;
  g_host->summary(t, 3, &out->median_s, &out->iqr_s, &out->min_s);
  out->count = 3;
  out->scale = 1;
  return PSIM_OK;
}

__attribute__((visibility("default"))) psim_status
psim_cuda_module_open(int32_t abi, const psim_cuda_host *host, psim_cuda_module *out) {
  if (abi != PSIM_CUDA_MODULE_ABI)
    return PSIM_EFAILED;
  g_host = host;
  *out = (psim_cuda_module){available, fingerprint, measure};
  return PSIM_OK;
}
